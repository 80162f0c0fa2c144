"""Issue 19, class 7: names the text announces, with no given name or with no surname.

One mechanism (``PersonNameRecognizer.cued_names``): after a cue phrase ("my name is", "they call me",
"ich heiße") a capitalised word is a name; after a form of address that takes a surname alone (Mr, Mrs, Ms, Miss,
Mx, Dr, Prof, Herr, Frau) a capitalised word is a name. The span is the name, not the title. Function words,
calendar words and offices are not names; a title alone names nobody. Decided without the given-name lexicon
and without NER.
"""
import pytest

from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine


@pytest.fixture(scope="module")
def person():
    return R.PersonNameRecognizer({})  # an empty lexicon: the cue alone has to decide


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off", entities=["PERSON"]))


def found(rec, text):
    return sorted({text[r.start:r.end] for r in rec.analyze(text, entities=[])})


@pytest.mark.parametrize("text,expected", [
    ("my name is Dan", ["Dan"]),
    ("Hi, my name is Dan.", ["Dan"]),
    ("My name is Dan Okafor and I", ["Dan Okafor"]),
    ("her name was Zuzana", ["Zuzana"]),
    ("My first name is Ngozi", ["Ngozi"]),
    ("They call me Dan", ["Dan"]),
    ("Call me Ishmael.", ["Ishmael"]),
    ("Mein Name ist Jürgen.", ["Jürgen"]),
    ("ich heiße Anna und", ["Anna"]),
])
def test_cue_phrase_and_one_capitalised_word(person, text, expected):
    assert found(person, text) == expected


@pytest.mark.parametrize("text,expected", [
    ("Mr. Mayers", ["Mayers"]),
    ("They call me Mr. Mayers", ["Mayers"]),
    ("Ask Mrs Okonkwo-Smith about it", ["Okonkwo-Smith"]),
    ("Dr. McDonald will see you", ["McDonald"]),
    ("Ms O'Brien replied", ["O'Brien"]),
    ("Sehr geehrte Frau Schulze-Wendt,", ["Schulze-Wendt"]),
    ("Prof. Dr. Müller kommt", ["Müller"]),
    ("Herr Özdemir ruft an", ["Özdemir"]),
])
def test_title_and_a_capitalised_surname(person, text, expected):
    assert found(person, text) == expected


@pytest.mark.parametrize("text", [
    "my name is not important",
    "My name is Not Important",          # capitalised function words are not names
    "my name is dan",                    # not capitalised: not written as a name
    "call me Monday",                    # calendar word
    "Dear Sir",                          # a title alone
    "Dear Sir or Madam,",
    "Dear Mr.",
    "Contact Support",                   # no cue, no title
    "Mr. President, the Speaker",        # offices used as forms of address
    "Dr. Who",                           # function word
    "dass die Frau Kinder hat",          # German noun after an article, not the title
    "12 Oak Dr Springfield",             # "Dr" as the street designator after a house number
    "the file name is Main",             # "name is" without a person's possessive
])
def test_not_names(person, text):
    assert found(person, text) == []


def test_nickname_after_a_title_counts(person):
    # Debatable by nature; the rule is the rule: a title + a capitalised non-function word refers to a person.
    assert found(person, "Mr. Big called") == ["Big"]


def test_engine_masks_the_name_not_the_cue(engine):
    res = engine.process(["my name is Dan", "They call me Mr. Mayers", "Dear Sir, contact Support."])
    assert [r.masked_text for r in res] == ["my name is <PERSON>", "They call me Mr. <PERSON>",
                                           "Dear Sir, contact Support."]


@pytest.mark.parametrize("text,name", [
    ("We drove through Victoria Park and stopped at the lake for lunch.", None),
    ("The festival in Grant Park draws thousands of people.", None),
    ("The Albert Hall was full for the last night of the Proms.", None),
    ("Take the Elizabeth Line to Paddington.", None),
    ("The Wilson Building houses the city council.", None),
    ("I met Jane Hall at the station.", "Jane Hall"),
    ("Kim Park said the results were fine.", "Kim Park"),
    ("We wrote to Mary Hall about the rent.", "Mary Hall"),
    ("Wendy's was packed at lunchtime.", None),
    ("Tyler's sister was there.", "Tyler"),
    ("The Queen Mary is docked in Long Beach now.", None),
    ("We sailed across Morecambe Bay at dawn.", None),
    ("They camped in Sherwood Forest for a week.", None),
    ("I met Arthur Marsh at the conference.", "Arthur Marsh"),
    ("Rachel Woods won the race again.", "Rachel Woods"),
])
def test_a_place_named_like_a_person_is_no_person(engine, text, name):
    """A run ending in a place word (Park, Hall, Line, Building) after an article or a preposition of place names
    the place; the same run as a subject or after "met"/"to" is a person (Hall and Park are common surnames). A
    name's 's before a finite auxiliary is a shop; before a noun it is the person's. Bay, Forest, Marsh are
    surnames too: a place only after such a cue."""
    [spans] = engine.analyze([text])
    assert [text[s.start:s.end] for s in spans] == ([name] if name else [])

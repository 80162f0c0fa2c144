"""Issue 47 round 5: lower-case names in chat lines and notes, with the ordinary words each rule must leave alone.

Sentences are written for these tests, not drawn from the probe sets in benchmarks/data.
"""
import pytest
from test_pii_names_forms import engine, names  # noqa: F401 (the engine fixture and its PERSON spans)




@pytest.mark.parametrize("text,expected", [
    ("fyi: cosmo has the spare key", ["cosmo"]),          # a note's label, a name, its verb
    ("Reminder: harriet needs her swimming kit on Monday", ["harriet"]),  # capitals elsewhere in the line
    ("Nachtrag: carsten bringt die Getränke mit.", ["carsten"]),
    ("Hinweis: gudrun hat den Schlüssel.", ["gudrun"]),        # a German auxiliary after the name
    ("does magnus still have my ladder", ["magnus"]),            # a question verb opens the line, no "?"
    ("kannst du mal hendrik anrufen", ["hendrik"]),              # verb in -st, du, a particle, the name
    ("hat jan das auto schon abgeholt?", ["jan"]),               # a verb's subject, not the month
    ("can you ask thaddeus about the van", ["thaddeus"]),          # a rarer name after a verb of asking
])
def test_lower_case_names_in_notes_and_chat(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", [
    "note: this has changed since the last release",           # a function word after the label
    "Note: grant access before you run the script",            # an English verb
    "note: rose petals are edible",                            # an everyday word that is a name
    "see you on the 3rd of jan 2027 then",                     # the month after a preposition
    "bis jan 5 ist alles fertig",                              # the month before a number
    "does it still work after the update",                     # no name after the opening verb
    "ask doc about the dosage first",                          # a rare name that is an English noun
    "hast du mal zeit heute?",                                 # German words after "hast du"
])
def test_lower_case_words_stay(engine, text):
    assert names(engine, text) == []


# a full name the lexicon lacks, as the subject opening an English sentence (a candidate only: NER decides) -----
@pytest.mark.parametrize("text,expected", [
    ("Adaeze Obiora repaired the gate on Friday.", True),
    ("Yesterday Adaeze Obiora repaired the gate.", False),   # not the sentence's opening words
    ("Adaeze Obiora Eze repaired the gate.", False),          # three words: not this rule's pair
    ("Memory Nodes are allocated at boot.", False),           # English nouns
    ("Cloud Run deploys the image.", False),
    ("Adaeze Obiora, our new neighbour.", False),             # no verb after the pair
    ("Bad Homburg has a spa.", False),                        # a place prefix
])
def test_unknown_subject_pair(engine, text, expected):
    rec = engine._person
    start = text.index("Adaeze") if "Adaeze" in text else 0
    end = start + len(" ".join(text[start:].split()[:2]).rstrip(","))
    assert rec.unknown_subject_pair(text, start, end) is expected

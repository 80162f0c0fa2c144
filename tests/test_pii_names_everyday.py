"""Issue 15, item 5: person names where people write them (greetings, sign-offs, sentence starts, imperatives,
titles + surname, Chinese names without a cue word), with negatives in the same positions.

One test group per cause:
1. a capitalised word the lexicon does not know before the name ("Dear", "Contact", "Yesterday", "Fragen Sie")
   used to start the candidate and defeat the given-name rule: the name now starts at its given name;
2. a lone given name in the vocative (after a greeting, thanks or a sign-off) was never taken: it now is, when
   the given-name lexicon knows it and it stands alone;
3. titles + surname (Herr/Frau/Mr/Mrs/Ms/Dr/Prof) keep the title outside the span;
4. Chinese names needed a cue word: jieba's POS tagger (``nr``) now decides, only in the clauses holding a
   candidate (a common family name + a Han character), with dictionary words jieba also tags ``nr`` ("陈旧",
   "华丽") taken only where a person stands, and places/things ("王府井", "杨树") never.
The sentences are written for these tests, not drawn from any evaluation set.
"""
from pathlib import Path

import pytest
from test_pii_names_forms import engine, names  # noqa: F401 (the engine fixture and its PERSON spans)

from transforms.pii import recognizers as R

REPO = Path(__file__).resolve().parents[1]




# 1. a capitalised non-name word before the name -------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("Dear John Smith, thank you for your letter.", ["John Smith"]),
    ("Contact John Smith at the front desk.", ["John Smith"]),
    ("Yesterday John Smith went to the bank.", ["John Smith"]),
    ("Email Laura Bennett before Friday.", ["Laura Bennett"]),
    ("Unfortunately Helen Carter cannot attend.", ["Helen Carter"]),
    ("Later Jessica Price joined the call.", ["Jessica Price"]),
    ("Hello Richard Green, welcome to the team.", ["Richard Green"]),
    ("Hi Tom Baker, welcome aboard.", ["Tom Baker"]),
    ("Fragen Sie Birgit Neumann nach dem Schlüssel.", ["Birgit Neumann"]),
    ("Kontaktieren Sie Heike Braun bei Fragen.", ["Heike Braun"]),
    ("Gestern hat Michael Weber angerufen.", ["Michael Weber"]),
])
def test_capitalised_word_before_the_name(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", [
    "Dear Sir or Madam, thank you for your letter.",
    "Contact Support for help.",
    "Yesterday Apple announced a new phone.",
    "Email Technical Support before Friday.",
    "Today Microsoft released an update.",
    "Gestern hat Siemens neue Zahlen veröffentlicht.",
    "Kontaktieren Sie Support bei Fragen.",
])
def test_capitalised_word_before_a_non_name(engine, text):
    assert names(engine, text) == []


# 2. a lone given name in the vocative ------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("Hello Sarah, please call me back.", ["Sarah"]),
    ("Hi Tom, are you coming tonight?", ["Tom"]),
    ("Dear Emily,\nI hope this finds you well.", ["Emily"]),
    ("Thanks, David! That fixed it.", ["David"]),
    ("Thank you Jennifer for the quick reply.", ["Jennifer"]),
    ("Best regards,\nAndrew", ["Andrew"]),
    ("Cheers,\nKatie", ["Katie"]),
    ("Liebe Anna, danke für die Einladung.", ["Anna"]),
    ("Lieber Thomas,\nwie geht es dir?", ["Thomas"]),
    ("Hallo Jens, kannst du mich zurückrufen?", ["Jens"]),
    ("Viele Grüße\nMarkus", ["Markus"]),
    ("Herzlich willkommen, Nina!", ["Nina"]),
])
def test_lone_given_name_after_a_greeting_or_sign_off(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", [
    "Hello World, this is my first program.",
    "Hello Kitty is a popular brand.",       # a given name, but not standing alone
    "Hi everyone, the meeting moved to 3pm.",
    "Dear Customer, your order has shipped.",
    "Thanks, Team! That fixed it.",
    "Best regards,\nCustomer Service",
    "Beste Grüße,\nDas Team",
    "Hallo zusammen, kann jemand zurückrufen?",
    "Danke, Berlin! Das war ein tolles Konzert.",
    "Dear Will,",                            # a function word
])
def test_greeting_before_a_non_name(engine, text):
    assert names(engine, text) == []


# 3. titles + surname -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("Herr Müller und Frau Schmidt kommen morgen.", ["Müller", "Schmidt"]),
    ("Sehr geehrter Herr Becker, vielen Dank.", ["Becker"]),
    ("Guten Tag Herr Meyer, Ihr Paket ist da.", ["Meyer"]),
    ("Dear Mr. Fletcher, your order has shipped.", ["Fletcher"]),
    ("Mrs Patel asked for a refund.", ["Patel"]),
    ("Prof. Hartley gave the opening talk.", ["Hartley"]),
])
def test_title_and_surname(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", ["Sehr geehrte Damen und Herren,", "Der Herr kommt morgen wieder.",
                                  "Die Frau am Empfang war freundlich."])
def test_title_words_that_name_nobody(engine, text):
    assert names(engine, text) == []


# 4. Chinese names without a cue word -------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("昨天张伟去了北京开会。", ["张伟"]),
    ("王芳和李娜是同事。", ["王芳", "李娜"]),     # 李娜 is a dictionary word: taken after 和 + a name
    ("会议由郑华主持。", ["郑华"]),              # tagged ns by the HMM, in no dictionary
    ("梁志强的车停在门口。", ["梁志强"]),         # "梁" + "志强" joined
    ("你好，金海燕！", ["金海燕"]),
    ("周末我跟孙丽去看电影。", ["孙丽"]),
    ("姚明来自上海。", ["姚明"]),                # a dictionary name where a person stands
])
def test_chinese_name_without_cue(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", [
    "昨天公司去了北京开会。",
    "我们在王府井吃了烤鸭。",
    "张家界的风景很美。",
    "酒店比较陈旧，房间很小。",   # 陈旧: jieba's dictionary tags it nr
    "没有华丽的词语。",
    "他张开手说话。",
    "杨树长得很高。",
    "胡萝卜富含维生素。",
    "明天和平路上有活动。",
])
def test_chinese_negatives_starting_with_a_family_name_character(engine, text):
    assert names(engine, text) == []


def test_chinese_segmentation_reads_only_candidate_clauses():
    rec = R.ChineseSegmentedNameRecognizer
    text = "今天天气不错。昨天张伟去了北京开会。我们都很忙！"
    (lo, hi), = rec.clauses(text)
    assert text[lo:hi] == "昨天张伟去了北京开会。"
    assert not rec.quick_check("今天天气不错。我们都很忙！")


def test_chinese_document_without_digits_is_not_skipped(engine):
    before = engine.stats["docs_skipped"]
    assert names(engine, "王芳和李娜是同事。") == ["王芳", "李娜"]
    assert engine.stats["docs_skipped"] == before


def test_jieba_is_a_pinned_product_dependency():
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "jieba==0.42.1" in deps
    assert "jieba==0.42.1" in (REPO / "constraints.txt").read_text().split()


# 2b. a vocative opening a request, and "Professor" as a form of address -------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("Sarah, please call me back.", ["Sarah"]),
    ("Thanks. Tom, can you send the slides?", ["Tom"]),
    ("Anna, kannst du mich zurückrufen?", ["Anna"]),
    ("Dear Professor Quinn, thank you for the feedback.", ["Quinn"]),
])
def test_vocative_request_and_professor(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", ["Support, please call me back.", "London, please welcome our guests.",
                                  "Dear Professor, thank you."])
def test_vocative_request_with_a_non_name(engine, text):
    assert names(engine, text) == []


# 4b. Chinese: object position, a family name jieba read as a word of its own, "的" after a dictionary word --
@pytest.mark.parametrize("text,expected", [
    ("我昨天见到了王建军。", ["王建军"]),   # a dictionary nr word after 了 at the clause's end
    ("高玉兰昨天退休了。", ["高玉兰"]),     # "高" (a) + "玉兰" (nr) joined where a person stands
])
def test_chinese_name_positions(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text", ["张贴的通知已经撤下了。", "质量很高。", "高兴地告诉大家。"])
def test_chinese_dictionary_words_before_de(engine, text):
    assert names(engine, text) == []


# 1b. the skip is for sentence starts: inside an English sentence a title-cased run is a proper noun --------
@pytest.mark.parametrize("text,expected", [
    ("Copyright 2004 Cluster File Systems, Inc.", []),
    ("This is a Deficit Round Robin Scheduler for networks.", []),
    ("You can update a Cloud Run Job from the console.", []),
    ("A speech by Premier Peter Beattie was broadcast.", ["Peter Beattie"]),   # an office before the name
    ("Am Montag hat der Kunde Peter Braun angerufen.", ["Peter Braun"]),        # German capitalises nouns
])
def test_unknown_word_inside_a_sentence(engine, text, expected):
    assert names(engine, text) == expected


# 5. a given name that starts the name of a place or an institution names no person; a possessive is not part
#    of a name ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("The trains at Victoria Station were late again.", []),
    ("She studied at Trinity College and taught at Grace Academy.", []),
    ("The Charles Darwin Library opens at nine.", []),
    ("We waited at Sydney Harbour for the ferry.", []),
    ("Wir treffen uns am Anna Klinikum um acht.", []),
    ("Call Victoria Station's manager, Paul Kent, about the bag.", ["Paul Kent"]),
    ("My colleague Victoria Stanton works at the station.", ["Victoria Stanton"]),   # a surname, not a place word
])
def test_place_named_with_a_given_name(engine, text, expected):
    assert names(engine, text) == expected


@pytest.mark.parametrize("text,expected", [
    ("John Smith's car was red.", ["John Smith"]),
    ("We stayed at Anna Schmidt’s house.", ["Anna Schmidt"]),
    ("Dear Mr. O'Brien, thank you.", ["O'Brien"]),
])
def test_possessive_stays_outside_the_name(engine, text, expected):
    assert names(engine, text) == expected


# Ordinary prose and code the demo corpus holds, where no person is named: a name rule that fires on a lower-case
# word at a line's start, or on a Chinese noun after 的, masks words of the language itself. Lines as they stand
# in the shipped demo data (Austen, the KJV, Python and kernel docs, the Debian handbook, product reviews).
@pytest.mark.parametrize("text", [
    "and they\nsang praises with gladness, and they bowed their heads and worshipped.",
    "The French are\nsaid to eat more bread _per capita_ of population than any other",
    "or jump forward to skip code that you don’t want to run.\n\nrun [args ...]\nrestart [args ...]",
    "long wait_for_completion_killable(struct completion *done)\nlong wait_for_completion_timeout(x)",
    "line upon line; here a little, and there a little:",
    "the same. But in time they will. Time, you may be sure, will make one",
    "would be obliged to run away.\"",
    "许可证的规定不得污染其他软件",
    "本书遵照两种与 Debian 自由软件指引相兼容的许可证来提供。",
    "另外由于它的鲁棒性，它也是在命令行安装系统和进行重大系统升级时首选的软件包管理程序。",
    "顶上还有键盘灯，有内置的麦克风。基本上对得起这个价钱。",
])
def test_ordinary_words_are_not_names(engine, text):
    assert names(engine, text) == []

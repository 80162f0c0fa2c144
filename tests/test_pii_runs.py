"""Issue 19, class 4: several values in one run of text.

A run of digit groups may hold several values ("4012888888881881 4012-8888-8888-1881 4012 8888 8888 1881"), a
value next to an unrelated number ("SD 20241 440-600-5124"), or a value followed by a date ("… 1881 12/25"). Each
value is found whole; a run whose split is ambiguous (the same separator inside the value and next to another
group that is not a value) yields nothing rather than a fragment.
"""
import pytest

from tests.test_pii_recognizers import luhn_complete
from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine


def found(recognizer, text):
    return [text[r.start:r.end] for r in recognizer.analyze(text, entities=[])]


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off"))


VISA = luhn_complete("4", 16)                  # ISO/IEC 7812: issuer prefix, account digits, Luhn check digit
MC = luhn_complete("5", 16)
AMEX = luhn_complete("34", 15)


def grouped(number, sizes, sep):
    out, i = [], 0
    for n in sizes:
        out.append(number[i:i + n])
        i += n
    return sep.join(out)


def test_three_cards_in_one_run():
    a, b, c = VISA, grouped(MC, (4, 4, 4, 4), "-"), grouped(VISA, (4, 4, 4, 4), " ")
    text = f"{a} {b} {c}"
    assert found(R.PaymentCardRecognizer(), text) == [a, b, c]


@pytest.mark.parametrize("sep", [" ", "-"])
def test_same_grouping_repeated_is_a_list(sep):
    a, b = grouped(VISA, (4, 4, 4, 4), sep), grouped(MC, (4, 4, 4, 4), sep)
    assert found(R.PaymentCardRecognizer(), f"cards {a} {b}") == [a, b]


@pytest.mark.parametrize("tail", ["12/25", "09/2027", "10:30"])
def test_card_followed_by_a_date_or_time(tail):
    card = grouped(VISA, (4, 4, 4, 4), " ")
    assert found(R.PaymentCardRecognizer(), f"Card {card} {tail} ok") == [card]


def test_amex_grouping_next_to_a_plain_number():
    amex = grouped(AMEX, (4, 6, 5), " ")
    assert found(R.PaymentCardRecognizer(), f"{VISA} {amex}") == [VISA, amex]


def test_ambiguous_runs_yield_no_fragment():
    rec = R.PaymentCardRecognizer()
    # 20 digits in groups of four: the first 16 are Luhn-valid, but the run may be one longer number
    run = grouped(VISA + "1111", (4, 4, 4, 4, 4), " ")
    assert found(rec, run) == []
    assert found(rec, grouped(VISA + "1111", (4, 4, 4, 4, 4), "-")) == []
    assert found(rec, f"1234-{VISA}") == []            # glued to a number by the card's own separator


@pytest.mark.parametrize("text,expected", [
    ("Dalla's Pizza | 3843 Peartree Road, Bamblee, SD 20241 440-600-5124", ["440-600-5124"]),
    ("call 415-555-0132 415-555-0199 today", ["415-555-0132", "415-555-0199"]),
    ("My US number is (415) 555-0132, and my international one is 91-415-555-0132",
     ["(415) 555-0132", "91-415-555-0132"]),       # E.164 digits written without the "+"
    ("Tel. 030-12345678 030-87654321", ["030-12345678", "030-87654321"]),
    ("order 2024 11 415-555-0132", ["415-555-0132"]),
])
def test_several_phones_in_one_run(text, expected):
    assert found(R.PhoneNumberRecognizer(), text) == expected


@pytest.mark.parametrize("text", [
    "20241-440-600-5124",          # the ZIP joined by the phone's own separator: one 14-digit string
    "415 555 0132 9",              # a trailing group with the same separator: maybe a longer number
    "330 98 105 105 90",           # table columns
    "lr-x------ 1 bozo bozo 64 2008-05-09 00:19 4 -> /home/bozo",   # ls -l: a size, a date and a time
    "call 415-555-0132:5",         # the last group runs on into another token
    "call 415 555 0132 415 555 0199",   # same separator inside and between: phones are not split (cards are)
    "00 30 00 00 00 00 07 00 00 00 00 00 00 00 07 04 10 04 00 00",  # a hex dump
    "-rw-r--r-- 1 root root 0 2008-09-15 20:21 bar",                  # a size and an ISO date
])
def test_ambiguous_phone_runs(text):
    assert found(R.PhoneNumberRecognizer(), text) == []


def test_ssns_and_mobiles_in_one_run():
    assert found(R.UsSocialSecurityRecognizer(), "SSNs 078-05-1123 219-09-9999.") == ["078-05-1123", "219-09-9999"]
    assert found(R.CnMobileRecognizer(), "手机 138 0013 8000 139 0013 9000") == ["138 0013 8000", "139 0013 9000"]


def test_masked_run_keeps_no_digit(engine):
    text = (f"{VISA} {grouped(MC, (4, 4, 4, 4), '-')} {grouped(VISA, (4, 4, 4, 4), ' ')}; "
            "SD 20241 440-600-5124; other one is 91-415-555-0132.")
    masked = engine.process([text])[0].masked_text
    assert "<CREDIT_CARD>" in masked and masked.count("<PHONE_NUMBER>") == 2
    assert [c for c in masked if c.isdigit()] == list("20241"), masked  # only the ZIP code, which is not PII


def test_ibans_one_after_another():
    from tests.test_pii_recognizers import iban

    al, at = iban("AL", "212110090000000235698741"), iban("AT", "1904300234573201")
    paper = lambda v, sep: sep.join(v[i:i + 4] for i in range(0, len(v), 4))  # noqa: E731
    for sep in (" ", "-"):
        text = f"pay {paper(al, sep)} at {paper(at, sep)} or {al}, {at}"
        assert found(R.IbanCodeRecognizer(), text) == [paper(al, sep), paper(at, sep), al, at]

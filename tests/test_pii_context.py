"""Issue 19, class 6: a context word may raise a score, never turn an invalid value valid.

Validators decide: HMRC's NINO prefix/suffix rules, the SSA's SSN rules, Luhn and issuer tables for cards, MOD 97
for IBANs, octet ranges for IPs. A context word ("national insurance number", "SSN", "card") only moves the score
of a value the validator already accepts.
"""
import pytest

from tests.test_pii_recognizers import iban, luhn_complete
from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine


def results(recognizer, text):
    return [(text[r.start:r.end], r.score) for r in recognizer.analyze(text, entities=[])]


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off"))


@pytest.mark.parametrize("text", [
    "This isn't a valid national insurance number UV 98 76 54 B",   # U and V are never used
    "National Insurance number: QQ 12 34 56 A",                     # Q is never used
    "nino: nt 99 88 77 a",                                          # NT is not allocated
    "NI number BG 12 34 56 A",                                      # BG is not allocated
    "National Insurance number is ZZ 246867 T.",                    # ZZ placeholder, suffix T
    "your NINO AB 12 34 56 E",                                      # suffix must be A-D
])
def test_nino_context_does_not_rescue_invalid(text):
    assert results(R.UkNationalInsuranceRecognizer(), text) == []


def test_nino_context_raises_a_valid_score():
    rec = R.UkNationalInsuranceRecognizer()
    plain = results(rec, "ref AB 12 34 56 C here")
    with_context = results(rec, "National Insurance number AB 12 34 56 C here")
    assert plain == [("AB 12 34 56 C", 0.6)] and with_context == [("AB 12 34 56 C", 0.9)]


@pytest.mark.parametrize("text", [
    "SSN 912-34-5678",                       # 9xx areas are ITINs, never SSNs
    "social security number 666-12-3456",
    "SSN: 123-00-4567",
    "social security number 000123456",
])
def test_ssn_context_does_not_rescue_invalid(text):
    assert results(R.UsSocialSecurityRecognizer(), text) == []


def test_card_and_iban_context_does_not_rescue_invalid():
    visa = luhn_complete("4", 16)
    bad_luhn = visa[:-1] + str((int(visa[-1]) + 1) % 10)
    assert results(R.PaymentCardRecognizer(), f"my credit card number is {bad_luhn}") == []
    de = iban("DE", "370400440532013000")
    bad_check = de[:2] + f"{(int(de[2:4]) + 1) % 100:02d}" + de[4:]
    assert results(R.IbanCodeRecognizer(), f"IBAN (Kontonummer): {bad_check}") == []


def test_ip_context_does_not_rescue_invalid():
    assert results(R.IpAddressRecognizer(), "server IP address 192.168.1.256") == []
    assert results(R.IpAddressRecognizer(), "IPv6 address ::ffff:256.1.1.1") == []


def test_engine_masks_none_of_the_invalid_values(engine):
    text = ("This isn't a valid national insurance number UV 98 76 54 B. nino: nt 99 88 77 a. "
            "National Insurance number is ZZ 246867 T.")
    res = engine.process([text])[0]
    assert res.spans == [] and res.masked_text == text

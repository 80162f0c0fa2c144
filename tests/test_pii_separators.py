"""Issue 19, class 5: the separators and spellings people write values with.

IBAN (ISO 13616: electronic format, paper format in groups of four, and dashes as often typed; one separator kind
per IBAN), e-mail with internationalised domains (RFC 5890 A-labels ``xn--…`` and U-labels, RFC 6531) and
apostrophes in the local part (RFC 5322 atext), UK NINO in lower case and with HMRC's spacing variants, US SSN
with dots.
"""
import pytest

from tests.test_pii_recognizers import iban
from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine


def found(recognizer, text):
    return [text[r.start:r.end] for r in recognizer.analyze(text, entities=[])]


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off"))


IBANS = [iban("AL", "212110090000000235698741"), iban("DE", "370400440532013000"), iban("GB", "NWBK60161331926819"),
         iban("FR", "20041010050500013M02606"), iban("NO", "86011117947"), iban("MT", "MALT011000012345MTLCAST001S")]


def paper(value, sep):
    return sep.join(value[i:i + 4] for i in range(0, len(value), 4))


@pytest.mark.parametrize("value", IBANS)
@pytest.mark.parametrize("sep", ["", " ", "-"])
def test_iban_written_forms(value, sep):
    written = paper(value, sep)
    assert found(R.IbanCodeRecognizer(), f"IBAN: {written}, bitte") == [written]


@pytest.mark.parametrize("value", IBANS[:3])
def test_iban_in_lower_case(value):
    written = paper(value.lower(), " ")
    assert found(R.IbanCodeRecognizer(), f"konto {written}.") == [written]


@pytest.mark.parametrize("text", [
    paper(IBANS[0], " ")[:9] + "-" + paper(IBANS[0], " ")[10:],            # mixed separators
    paper(IBANS[1], "-").replace("-", "--", 1),                            # a doubled separator
    paper(IBANS[1][:2] + f"{(int(IBANS[1][2:4]) + 1) % 100:02d}" + IBANS[1][4:], "-"),  # wrong check digits
    paper(IBANS[2][:5] + IBANS[2][5].lower() + IBANS[2][6:], " "),         # mixed case
])
def test_iban_invalid_forms(text):
    assert found(R.IbanCodeRecognizer(), text) == []


@pytest.mark.parametrize("address", [
    "a@xn--d1acufc.xn--p1ai",           # A-labels in the domain and the TLD (RFC 5890 2.3.2.1)
    "info@xn--80ak6aa92e.com",
    "kontakt@bücher.de",                # a U-label
    "jörg.müller@example.de",           # RFC 6531 local part
    "o'brien@example.ie",               # ' is atext (RFC 5322 3.2.3)
    "first.last+tag@sub.example.co.uk",
])
@pytest.mark.parametrize("before,after", [("", ""), ("mail ", "."), ("发到", "了"), ("<", ">"), ("'", "'")])
def test_email_spellings(address, before, after):
    assert found(R.EmailAddressRecognizer(), before + address + after) == [address]


@pytest.mark.parametrize("text", [
    "a@xn--zz.com",       # not a decodable A-label
    "a@xn--ls8h.la",      # decodes to a symbol IDNA 2008 disallows
    "a@example.xn--",
    "b@xn--.com",
])
def test_email_invalid_idna(text):
    assert found(R.EmailAddressRecognizer(), text) == []


@pytest.mark.parametrize("text,expected", [
    ("hh 01 02 03 d", "hh 01 02 03 d"),
    ("tw987654a", "tw987654a"),
    ("nino: ab 123456 c.", "ab 123456 c"),
    ("AB 123456 C", "AB 123456 C"),
    ("AB123456C", "AB123456C"),
    ("CE 12 34 56 D", "CE 12 34 56 D"),
])
def test_nino_case_and_spacing(text, expected):
    assert found(R.UkNationalInsuranceRecognizer(), text) == [expected]


@pytest.mark.parametrize("text", ["Ab 12 34 56 c", "hh 01 02 03 e", "dh 01 02 03 a", "AO 12 34 56 A"])
def test_nino_invalid_spellings(text):
    # mixed case; suffix outside A-D; D never first; O never second (HMRC NIM39110)
    assert found(R.UkNationalInsuranceRecognizer(), text) == []


@pytest.mark.parametrize("text,expected", [
    ("078.05.1123", "078.05.1123"),
    ("SSN 219.09.9999;", "219.09.9999"),
    ("078 05 1123", "078 05 1123"),
    ("078-05-1123", "078-05-1123"),
])
def test_ssn_separators(text, expected):
    assert found(R.UsSocialSecurityRecognizer(), text) == [expected]


@pytest.mark.parametrize("text", ["078.05-1123", "666.12.3456", "912.34.5678", "078.00.1123", "078.05.0000",
                                  "1.078.05.1123"])
def test_ssn_invalid_forms(text):
    # mixed separators; area 666 and 9xx; group 00; serial 0000 (SSA); part of a longer dotted number
    assert found(R.UsSocialSecurityRecognizer(), text) == []


def test_masking_the_spellings_leaves_nothing(engine):
    values = [paper(IBANS[0], "-"), "a@xn--d1acufc.xn--p1ai", "hh 01 02 03 d", "tw987654a", "078.05.1123",
              "o'brien@example.ie"]
    res = engine.process(["; ".join(values)])[0]
    assert not any(c.isdigit() for c in res.masked_text), res.masked_text
    assert "brien" not in res.masked_text and "xn--" not in res.masked_text

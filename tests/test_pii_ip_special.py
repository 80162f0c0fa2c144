"""Issue 19, class 2: short and special addresses, and a dotted run with one group too many.

RFC 4291 2.5.2/2.5.3 (unspecified ``::`` and loopback ``::1``), RFC 1122 3.2.1.3 (``0.0.0.0``, "this host"; as
``0.0.0.0/0`` the default route, RFC 4632), RFC 5952 (compressed text forms). A dotted run of five decimal groups
of which four form an address (``192.168.1.1.1``) is masked whole: neither a four-group fragment nor nothing.
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
    ("::1", ["::1"]),                                  # loopback, the shortest address
    ("Loopback ::1.", ["::1"]),
    ("connecting from ::1 to fe80::1", ["::1", "fe80::1"]),
    ("listen on [::1]:8080", ["::1"]),                 # RFC 3986 IP-literal with a port
    ("0:0:0:0:0:0:0:1", ["0:0:0:0:0:0:0:1"]),          # the same, uncompressed
    ("ff02::1 and ff02::2", ["ff02::1", "ff02::2"]),   # all-nodes / all-routers multicast
    ("0.0.0.0", ["0.0.0.0"]),
    ("bind 0.0.0.0:80", ["0.0.0.0"]),
    ("DNS 1.1.1.1 or 8.8.8.8", ["1.1.1.1", "8.8.8.8"]),  # single-digit octets, introduced as addresses
])
def test_short_and_special_addresses(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("192.168.1.1.1", ["192.168.1.1.1"]),
    ("host 10.20.30.40.5 is down", ["10.20.30.40.5"]),
    ("via 1.10.20.30.40", ["1.10.20.30.40"]),        # the last four groups form the address
])
def test_one_group_too_many_is_masked_whole(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize("text", [
    "::",                                 # unspecified address alone: reST literal blocks, Haskell type signatures
    "Example::",
    "x :: Int",
    "a[::1] reverses nothing",            # a Python slice, not [::1]
    "a::b and 1::2",                      # C++ names, too short to be addresses
    "0.1.2.3",                            # starts with 0: a version
    "see section 6.5.1.1",                # single digits without an address word
    "not /etc/hosts either.\n\n8.3.1.1. Configuring DNS",  # an address word, but on another line
    "192.168.1.1.1.1",                    # six groups: an OID or a version, not an address
    "equivalent to:\n\n30.3.1.1.21 aMulticastFramesReceivedOK",   # IEEE 802.3 clause number, five groups
    "OID 1.3.6.1.4.1.311",
    "300.1.2.3.4",
])
def test_not_addresses(text):
    assert found(text) == []


def test_masked_text_keeps_no_group(engine):
    for text in ("::1", "0.0.0.0", "192.168.1.1.1", "10.20.30.40.5"):
        assert engine.process([f"at {text} now"])[0].masked_text == "at <IP_ADDRESS> now", text

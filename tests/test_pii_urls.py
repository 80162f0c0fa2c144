"""Issue 19, class 8: URLs (entity ``URL``, opt-in).

With a scheme (RFC 3986) or ``www.``: the host must be a registrable name under a Public Suffix List suffix, or an
IP literal. Bare domain names count under the original generic TLDs, two-letter country codes that are not
everyday file extensions, and multi-label public suffixes. Hosts without a public suffix (``http://microsoft``,
``www.microsoft``) are not URLs; nor are e-mail domains, file names and attribute access in code.
"""
import pytest

from transforms.pii import recognizers as R


def found(text):
    return [text[r.start:r.end] for r in R.WebUrlRecognizer().analyze(text, entities=[])]


@pytest.mark.parametrize("text,expected", [
    ("microsoft.com", ["microsoft.com"]),
    ("my domains: microsoft.com google.co.il", ["microsoft.com", "google.co.il"]),
    ("see docs.python.org/3/library/re.html.", ["docs.python.org/3/library/re.html"]),
    ("Booking.com and spiegel.de!", ["Booking.com", "spiegel.de"]),
    ("访问microsoft.com了解更多", ["microsoft.com"]),
    ("EXAMPLE.ORG", ["EXAMPLE.ORG"]),
])
def test_bare_domains(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("http://microsoft.com", ["http://microsoft.com"]),
    ("https://www.microsoft.com/store/abc/", ["https://www.microsoft.com/store/abc/"]),
    ("http://microsoft.vlaanderen", ["http://microsoft.vlaanderen"]),   # any PSL suffix with a scheme
    ("http://192.0.2.7:8080/x", ["http://192.0.2.7:8080/x"]),
    ("Visit http://[2001:db8::1]/path", ["http://[2001:db8::1]/path"]),
    ("www.example.co.uk/page", ["www.example.co.uk/page"]),
])
def test_urls_with_scheme_or_www(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize("text", [
    "http://microsoft",               # no public suffix
    "www.microsoft",                  # "microsoft" is a TLD, but "www" is not a registrable name
    "http://localhost:8080/",
    "https://jane@example.com",       # user info: e-mail-like, not a page
    "write to jane.doe@example.com",
    "run setup.py and build.sh, see README.md",
    "self.name = user.id",
    "x = model.to(device)",
    "os.path.join(a, b)",
    "e.g. this, i.e. that",
    "version 1.2.3",
])
def test_not_urls(text):
    assert found(text) == []


def test_the_step_masks_a_bare_domain_in_a_document_with_no_other_marker():
    """The engine's cheap pre-filter must let documents through whose only URL is a bare domain."""
    from transforms.pii.step import PiiConfig, PiiEngine

    engine = PiiEngine(PiiConfig(entities=["URL"], ner="off"))
    [result] = engine.process(["read more at microsoft.com today"])
    assert result.masked_text == "read more at <URL> today"

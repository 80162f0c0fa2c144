"""The web demo's shipped data (data/web/): the crawl holds what a crawl holds, its digests are right, the example
block list parses and blocks what it says, and configs/web.yaml loads with them (issue 45, item 5)."""
from collections import Counter
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from pipelines.config import load_config
from pipelines.steps import enabled_steps
from transforms.url_filter import BLOCKED_URL, UrlFilterConfig, build_filter

REPO = Path(__file__).resolve().parent.parent
WEB = REPO / "data" / "web"


def _records():
    with open(WEB / "crawl.warc.gz", "rb") as fh:
        for record in ArchiveIterator(fh, check_digests="raise"):  # a wrong block or payload digest raises
            http = record.http_headers
            body = record.content_stream().read()
            yield {"type": record.rec_type, "url": record.rec_headers.get_header("WARC-Target-URI"),
                   "status": http.get_statuscode() if http is not None else None,
                   "content_type": http.get_header("Content-Type") if http is not None else None,
                   "identified": record.rec_headers.get_header("WARC-Identified-Payload-Type"),
                   "refers_to": record.rec_headers.get_header("WARC-Refers-To"), "body": body}


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_the_crawl_holds_what_a_crawl_holds():
    records = list(_records())
    types = Counter(r["type"] for r in records)
    assert records[0]["type"] == "warcinfo" and types["warcinfo"] == 1
    assert types["request"] == types["response"] and types["revisit"] == 1
    responses = [r for r in records if r["type"] == "response"]
    html = [r for r in responses if r["status"] == "200" and r["content_type"].startswith("text/html")]
    assert len(html) >= 200 and sum(len(r["body"]) for r in html) > 5_000_000
    assert {r["status"] for r in responses} == {"200", "404", "301"}
    other_types = {r["content_type"] for r in responses if not r["content_type"].startswith("text/html")}
    assert other_types == {"text/css", "image/svg+xml", "image/png", "application/javascript"}
    assert {r["content_type"] for r in html} == {"text/html; charset=utf-8", "text/html; charset=ISO-8859-1"}
    assert all(r["identified"] == r["content_type"].split(";")[0] for r in responses)
    hosts = Counter(r["url"].split("/")[2] for r in html)
    assert set(hosts) == {"doc.rust-lang.org", "nodejs.org", "valgrind.org", "xmlsoft.org"}
    # the Latin-1 pages really are Latin-1: some are not valid UTF-8 (a reader that assumes UTF-8 is caught)
    latin1 = [r["body"] for r in html if r["content_type"].endswith("ISO-8859-1")]
    assert sum(not _is_utf8(body) for body in latin1) >= 2
    revisit = next(r for r in records if r["type"] == "revisit")
    assert revisit["url"] == html[0]["url"] and revisit["refers_to"] and revisit["body"] == b""


def test_the_example_block_list_blocks_what_it_says():
    rules = build_filter(UrlFilterConfig(block_list=str(WEB / "blocklist.txt")))
    html = [r["url"] for r in _records() if r["type"] == "response" and r["status"] == "200"
            and r["content_type"].startswith("text/html")]
    decided = {url: rules.decide(url)[0] for url in html}
    blocked = sorted(url for url, reason in decided.items() if reason is not None)
    assert {decided[url] for url in blocked} == {BLOCKED_URL}
    assert any("/book/appendix-" in url for url in blocked)
    assert any("/XSLT/APIchunk" in url for url in blocked)
    assert 10 <= len(blocked) <= 40 and not any("/book/ch" in url for url in blocked)


def test_web_config_loads_with_the_shipped_crawl_and_list(monkeypatch):
    monkeypatch.chdir(REPO)  # its paths are relative to the repository, as the demo's are
    cfg = load_config(REPO / "configs" / "web.yaml")
    assert [Path(p) for p in cfg.input.paths] == [Path("data/web/crawl.warc.gz")]
    assert all((REPO / p).is_file() for p in cfg.input.paths)
    assert cfg.url_filter.active() and Path(cfg.url_filter.block_list) == Path("data/web/blocklist.txt")
    assert enabled_steps(cfg)[0] == "url_filter"

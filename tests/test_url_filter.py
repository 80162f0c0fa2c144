"""The URL filter (issue 45, item 3): the list format and its errors, the decision rules, the step on Beam with
exact accounting, the per-domain counts in stats.json and in the report."""
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.config import validate_config
from pipelines.run import run_stages
from pipelines.steps import enabled_steps
from report.build import build_report
from transforms.base import StepConfigError
from transforms.url_filter import (BLOCKED_DOMAIN, BLOCKED_URL, NOT_ALLOWED, DomainTally, ListFormatError, Rules,
                                   UrlFilter, UrlFilterConfig, UrlFilterStep, build_filter, parse_entry, read_list,
                                   registered_domain)


def _list(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


BLOCK = """\
# ad and tracker hosts
ads.example.com
*.tracker.net
https://Docs.Example.org/private/
re:/wp-(login|admin)\\b

spam.co.uk
"""


@pytest.fixture
def block_file(tmp_path):
    return _list(tmp_path, "block.txt", BLOCK)


def test_list_entries_are_domains_prefixes_or_regexes(block_file):
    entries = read_list(block_file)
    assert [(e.kind, e.value) for e in entries] == [
        ("domain", "ads.example.com"), ("domain", "tracker.net"), ("prefix", "https://docs.example.org/private/"),
        ("regex", r"/wp-(login|admin)\b"), ("domain", "spam.co.uk")]
    assert [e.where for e in entries] == [f"{block_file}:{n}" for n in (2, 3, 4, 5, 7)]


def test_block_rules():
    f = build_filter(UrlFilterConfig())  # nothing listed: every URL passes
    assert f.decide("https://example.com/")[0] is None
    block = Rules.of([parse_entry(e, f"b:{i}") for i, e in enumerate(BLOCK.splitlines(), 1)
                      if e.strip() and not e.startswith("#")])
    f = UrlFilter(block)

    def reason(url):
        return f.decide(url)[:2]

    assert reason("https://ads.example.com/x") == (BLOCKED_DOMAIN, "b:2")
    assert reason("http://cdn.ADS.example.com./x") == (BLOCKED_DOMAIN, "b:2")       # a subdomain, any case
    assert reason("https://tracker.net/pixel.gif") == (BLOCKED_DOMAIN, "b:3")
    assert reason("https://example.com/ads") == (None, None)                        # the parent is not blocked
    assert reason("https://notads.example.com/") == (None, None)                    # a label is not a suffix
    assert reason("https://badtracker.net/") == (None, None)
    assert reason("https://www.spam.co.uk/a") == (BLOCKED_DOMAIN, "b:7")
    assert reason("https://docs.example.org/private/key.html") == (BLOCKED_URL, "b:4")
    assert reason("HTTPS://DOCS.EXAMPLE.ORG/private/") == (BLOCKED_URL, "b:4")       # scheme and host: any case
    assert reason("https://docs.example.org/Private/") == (None, None)              # the path as written
    assert reason("http://docs.example.org/private/") == (None, None)               # another scheme
    assert reason("https://blog.example.net/wp-login.php") == (BLOCKED_URL, "b:5")
    assert reason("https://blog.example.net/wp-loginx") == (None, None)
    assert reason("http://[::1/broken") == (None, None)                             # unparseable: no host, passes


def test_allow_list_keeps_only_matches(tmp_path):
    allow = _list(tmp_path, "allow.txt", "rust-lang.org\nhttps://nodejs.org/api/\n")
    block = _list(tmp_path, "block.txt", "https://doc.rust-lang.org/nightly/\n")
    f = build_filter(UrlFilterConfig(block_list=str(block), allow_list=str(allow)))
    assert f.decide("https://doc.rust-lang.org/book/ch01-01-installation.html")[0] is None
    assert f.decide("https://nodejs.org/api/fs.html")[0] is None
    assert f.decide("https://nodejs.org/en/blog/")[0] == NOT_ALLOWED
    assert f.decide("https://valgrind.org/docs/manual/")[0] == NOT_ALLOWED
    assert f.decide("https://doc.rust-lang.org/nightly/std/")[0] == BLOCKED_URL      # the block list comes first


@pytest.mark.parametrize("line, message", [
    ("example.com/ads/", "is not a domain, a URL prefix (scheme://host/...) or a regex (re:...); for a URL prefix "
                         "write the scheme, e.g. https://example.com/ads/"),
    ("re:([unclosed", "regex '([unclosed' does not compile"),
    ("re:", "'re:' without a pattern"),
    ("two words.com", "contains a space"),
    ("-bad-.com", "is not a domain"),
    ("https://", "is not a URL prefix"),
])
def test_a_bad_line_is_one_line_naming_file_and_line(tmp_path, line, message):
    path = _list(tmp_path, "block.txt", f"# fine\nexample.com\n{line}\n")
    with pytest.raises(ListFormatError) as err:
        read_list(path)
    assert str(err.value).startswith(f"{path}:3: ") and message in str(err.value)
    with pytest.raises(StepConfigError) as err:
        build_filter(UrlFilterConfig(block_list=str(path)))
    assert str(err.value).startswith(f"url_filter.block_list: {path}:3: ") and "\n" not in str(err.value)


def test_missing_list_and_enabled_without_lists_are_config_errors(tmp_path):
    with pytest.raises(StepConfigError, match=r"^url_filter.allow_list: .*nope.txt does not exist$"):
        build_filter(UrlFilterConfig(allow_list=str(tmp_path / "nope.txt")))
    with pytest.raises(StepConfigError, match="neither url_filter.block_list nor url_filter.allow_list"):
        build_filter(UrlFilterConfig(enabled=True))


def test_off_unless_a_list_is_given(tmp_path, block_file):
    base = {"name": "t", "input": {"paths": ["x"]}}
    assert "url_filter" not in enabled_steps(validate_config(base))
    assert enabled_steps(validate_config({**base, "url_filter": {"block_list": str(block_file)}}))[0] == "url_filter"
    assert "url_filter" not in enabled_steps(validate_config(
        {**base, "url_filter": {"block_list": str(block_file), "enabled": False}}))


def test_registered_domain_uses_the_bundled_suffix_list():
    assert registered_domain("doc.rust-lang.org") == "rust-lang.org"
    assert registered_domain("a.b.co.uk") == "b.co.uk"
    assert registered_domain("nodejs.org") == "nodejs.org"
    assert registered_domain("127.0.0.1") == "127.0.0.1"
    assert registered_domain("localhost") == "localhost"
    assert registered_domain("") == ""


def test_without_tldextract_a_host_is_its_own_domain(monkeypatch):
    import transforms.url_filter as uf

    monkeypatch.setattr(uf, "_EXTRACTOR", False)  # what _extractor() settles on when tldextract is not installed
    assert registered_domain("doc.rust-lang.org") == "doc.rust-lang.org"


def test_the_step_annotates_domains_and_leaves_urlless_documents_untouched(block_file):
    step = UrlFilterStep(UrlFilterConfig(block_list=str(block_file)))
    docs = [{"id": 1, "text": "a", "meta": {"url": "https://ads.example.com/x"}, "annotations": {}},
            {"id": 2, "text": "b", "meta": {"url": "https://www.example.com/"}, "annotations": {}},
            {"id": 3, "text": "c", "meta": {"title": "no url"}, "annotations": {}},
            {"id": 4, "text": "d", "meta": {"url": "  "}, "annotations": {}}]
    assert step.apply(docs) == [BLOCKED_DOMAIN, None, None, None]
    assert docs[0]["annotations"] == {"url_filter": {"domain": "example.com", "rule": f"{block_file}:2"}}
    assert docs[1]["annotations"] == {"url_filter": {"domain": "example.com"}}
    assert docs[2]["annotations"] == {} and docs[3]["annotations"] == {}


def test_domain_tally_adds_up():
    tally = DomainTally()
    for domain, removed_by in [("a.org", None), ("a.org", "url_filter"), ("b.org", "filters"), ("c.org", None),
                               (None, None)]:
        tally.add({"url_filter": {"domain": domain}} if domain else {}, removed_by)
    block = tally.block(top=1)
    assert block["rows"] == [{"domain": "a.org", "documents": 2, "kept": 1, "removed": 1,
                              "removed_by": {"url_filter": 1}}]
    assert block["other"] == {"domains": 2, "documents": 2, "kept": 1, "removed": 1}
    assert block["without_url"] == {"documents": 1, "kept": 1, "removed": 0} and block["domains"] == 3


def _records(demo_corpus, n):
    english = [r for r in demo_corpus if r["source"] in ("austen", "lee_news_gensim", "jargon")]
    return [{"text": r["text"], "source": r["source"]} for r in english[:n]]


def test_on_beam_with_accounting_stats_and_report(tmp_path, demo_corpus, block_file):
    urls = ["https://ads.example.com/1", "https://www.example.com/a", "https://www.example.com/b",
            "https://docs.example.org/private/x", "https://docs.example.org/public/y", "https://blog.example.net/wp-admin/",
            "https://news.spam.co.uk/z", "https://www.example.com/c", None, "https://other.example.net/q"]
    records = _records(demo_corpus, len(urls))
    for record, url in zip(records, urls):
        if url:
            record["url"] = url
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    cfg = validate_config({
        "name": "u", "input": {"paths": [str(path)]}, "output": {"runs_dir": str(tmp_path / "runs")},
        "runner": {"name": "direct", "workers": 1}, "url_filter": {"block_list": str(block_file), "top_domains": 2},
        "filters": {"enabled": False}, "near_dedup": {"enabled": False}, "quality": {"enabled": False},
        "pii": {"enabled": False}})
    run_stages(cfg, ("clean",), log=lambda _: None)
    stats = json.loads((cfg.run_dir / "stats.json").read_text())
    row = stats["steps"][0]
    assert row["step"] == "url_filter" and row["in"] == 10
    assert row["removed_by_reason"] == {"blocked_domain": 2, "blocked_url": 2}
    acc = stats["accounting"]
    assert acc["balanced"] and acc == {**acc, "read": 10, "kept": 6, "removed": 4, "quarantined": 0}
    domains = stats["domains"]
    assert domains["top"] == 2 and domains["domains"] == 4
    assert domains["rows"] == [
        {"domain": "example.com", "documents": 4, "kept": 3, "removed": 1, "removed_by": {"url_filter": 1}},
        {"domain": "example.net", "documents": 2, "kept": 1, "removed": 1, "removed_by": {"url_filter": 1}}]
    assert domains["other"] == {"domains": 2, "documents": 3, "kept": 1, "removed": 2}
    assert domains["without_url"] == {"documents": 1, "kept": 1, "removed": 0}
    removed = [r for p in sorted((cfg.run_dir / "removed").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    rules = sorted(json.loads(r["annotations"])["url_filter"]["rule"] for r in removed)
    assert rules == sorted(f"{block_file}:{n}" for n in (2, 4, 5, 7))
    html = build_report(cfg.run_dir).read_text(encoding="utf-8")
    assert '<table id="domains">' in html and "<td>example.com</td>" in html and "other (2 domains)" in html


def test_a_bad_line_stops_the_run_before_reading(tmp_path, capsys):
    """Through the command: exit 2, one line on stderr naming the field, the file and the line; nothing read."""
    import yaml

    from cli.main import main

    bad = _list(tmp_path, "block.txt", "ok.com\nexample.com/ads\n")
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"text": "some text", "url": "https://ok.com/"}) + "\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "u", "input": {"paths": [str(data)]},
                                      "output": {"runs_dir": str(tmp_path / "runs")},
                                      "url_filter": {"block_list": str(bad)}}), encoding="utf-8")
    code = main(["prepare", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    assert f"url_filter.block_list: {bad}:2: 'example.com/ads' is not a domain" in err
    assert not (tmp_path / "runs" / "u" / "docs").exists()


def test_the_clean_fingerprint_follows_the_lists_only_when_the_filter_runs(tmp_path, block_file):
    """A config without the URL filter fingerprints its clean stage as before the filter existed (an earlier run
    directory stays valid); with it, an edited list re-runs the clean, and top_domains (stats only) does not."""
    from pipelines.run import stage_settings

    base = {"name": "t", "input": {"paths": [str(tmp_path / "x.jsonl")]}}
    assert not any(key.startswith("url_filter") for key in stage_settings(validate_config(base), "clean"))
    cfg = validate_config({**base, "url_filter": {"block_list": str(block_file)}})
    before = stage_settings(cfg, "clean")
    assert before["url_filter.block_list"] == str(block_file.resolve())
    assert stage_settings(validate_config({**base, "url_filter": {"block_list": str(block_file),
                                                                  "top_domains": 5}}), "clean") == before
    block_file.write_text(BLOCK + "more.example\n", encoding="utf-8")
    after = stage_settings(cfg, "clean")
    assert after["url_filter.block_list_sha256"] != before["url_filter.block_list_sha256"]

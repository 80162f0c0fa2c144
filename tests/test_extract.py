"""The extract step (issue 45): the core on the shipped development set, boilerplate, structure, bad input, the
step in Beam and in a run's graph, and `corpusmill extract` end to end."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("resiliparse")

from transforms.extract.config import ExtractConfig  # noqa: E402
from transforms.extract.core import NO_MAIN_TEXT, TOO_LARGE, TOO_SHORT, extract  # noqa: E402
from transforms.extract.step import ExtractStep  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEV_SET = REPO / "data" / "extract" / "dev.jsonl.gz"


def score(extracted: str, truth: str):
    """The benchmark's token P/R/F1 (benchmarks/ is not an installed package: imported where used, as
    test_pii_step does)."""
    from benchmarks.extract_score import score as token_score

    return token_score(extracted, truth)


def macro(rows):
    from benchmarks.extract_score import macro as macro_average

    return macro_average(rows)


@pytest.fixture(scope="module")
def dev_pages() -> list[dict]:
    with gzip.open(DEV_SET, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def page(body: str, title: str = "A page") -> str:
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>"


ARTICLE = ("<p>The committee met on Tuesday to review the harbour plan, which had been delayed twice by the "
           "autumn storms and by a dispute over the cost of the new sea wall.</p>"
           "<p>Engineers told the members that the wall could be finished within eighteen months, provided the "
           "quarry on the northern shore reopened before the spring tides arrived.</p>"
           "<p>The mayor said the town would publish the full report, with its tables of tide heights and "
           "costs, at the library and on the council's notice board next week.</p>")


# --- the core on real pages ---------------------------------------------------------------------------------------

def test_real_pages_of_the_dev_set_keep_their_main_text(dev_pages):
    """Real documentation pages (mdBook <main>, Node.js #apicontent, DocBook manual): every page above F1 0.80,
    macro above 0.97. Measured: worst 0.85 (a Rust Reference page whose grammar table of links is dropped as a
    link list), macro 0.993; below 0.80 means a section of a page was lost, not a detail."""
    real = [p for p in dev_pages if p["kind"] == "real"]
    assert len(real) >= 50
    scores = {p["id"]: score(extract(p["html"]).text, p["text"]) for p in real}
    low = {k: round(v[2], 3) for k, v in scores.items() if v[2] < 0.80}
    assert not low, low
    assert macro(scores.values())[2] >= 0.97


def test_quality_bar_against_trafilatura_on_the_dev_set(dev_pages):
    """The issue's quality bar, on the shipped set: corpusmill's macro token F1 at least trafilatura's (its
    defaults for main text: comments off, tables on), per language too. (Speed is benchmarks/bench_extract.py's.)"""
    trafilatura = pytest.importorskip("trafilatura")
    ours, theirs = [], []
    for p in dev_pages:
        ours.append((p["lang"], score(extract(p["html"]).text, p["text"])))
        got = trafilatura.extract(p["html"], include_tables=True, include_comments=False) or ""
        theirs.append((p["lang"], score(got, p["text"])))
    for lang in ("en", "zh", None):
        mine = macro(s for l, s in ours if lang in (None, l))[2]
        other = macro(s for l, s in theirs if lang in (None, l))[2]
        assert mine >= other, (lang, mine, other)


def test_chinese_pages_of_the_dev_set(dev_pages):
    zh = [p for p in dev_pages if p["lang"] == "zh"]
    assert len(zh) >= 30
    f1 = macro(score(extract(p["html"]).text, p["text"]) for p in zh)[2]
    assert f1 >= 0.95
    # CJK text comes out whole: the first truth line of a page is in the extraction
    first = zh[0]["text"].split("\n")[1]
    assert first[:30] in extract(zh[0]["html"]).text


# --- boilerplate and structure -----------------------------------------------------------------------------------

BOILERPLATE = {
    "nav": '<nav><ul><li><a href="/">Home</a></li><li><a href="/w">World desk</a></li></ul></nav>',
    "cookie": '<div class="cookie-consent"><p>We use cookies to personalise ads and analyse our traffic.</p>'
              '<button>Accept all</button></div>',
    "breadcrumb": '<div class="breadcrumbs"><a href="/">Start</a> &gt; <a href="/n">Harbour news</a></div>',
    "share": '<div class="social-share"><a href="#">Share on Facebook</a> <a href="#">Tweet this story</a></div>',
    "related": '<aside><h3>Related stories</h3><ul><li><a href="/1">Bridge repairs finished early</a></li>'
               '<li><a href="/2">Ferry timetable changes in May</a></li><li><a href="/3">Fish market reopens</a>'
               '</li></ul></aside>',
    "comments": '<section id="comments"><h3>Comments</h3><div class="comment"><p>Totally agree with the plan, '
                'about time somebody fixed the old wall before winter.</p></div></section>',
    "footer": '<footer><p>Copyright 2024 Harbour Gazette. Privacy policy. Terms of use.</p></footer>',
    "script": '<script>var trackingSecret = "zebra-omega"; console.log("pixel");</script>',
    "style": '<style>.hidden-styleword { display: none }</style>',
}
BOILER_WORDS = {"nav": "World desk", "cookie": "personalise", "breadcrumb": "Harbour news", "share": "Facebook",
                "related": "Ferry timetable", "comments": "Totally agree", "footer": "Privacy policy",
                "script": "zebra", "style": "styleword"}


@pytest.mark.parametrize("wrap", ["article", "main", "div"])
def test_boilerplate_is_removed_and_the_article_kept(wrap):
    b = BOILERPLATE
    inner = f"<h1>Harbour plan approved</h1>{ARTICLE[:200]}</p>{b['related']}<p>{ARTICLE[200:]}"
    body = (b["style"] + b["cookie"] + b["nav"] + b["breadcrumb"] + f"<{wrap}>{b['share']}{inner}</{wrap}>"
            + b["comments"] + b["footer"] + b["script"])
    result = extract(page(body))
    assert result.reason is None
    for kind, word in BOILER_WORDS.items():
        assert word not in result.text, (kind, result.text)
    assert result.text.startswith("Harbour plan approved")
    for sentence in ("The committee met on Tuesday", "Engineers told the members", "at the library"):
        assert sentence in result.text
    assert result.title == "A page"


def test_paragraphs_written_as_divs_in_nested_sections_are_all_kept():
    """DocBook and publican manuals (and many CMS) write every paragraph as <div class="para"> inside nested
    <div class="section">, a "sidebar" note box among them, and a code listing in one subsection: the whole
    section is the text, note included, not the one subsection whose <pre> and <li> are the only paragraph tags;
    the page's own side column named sidebar (links beside the content) still goes."""
    def para(text):
        return f'<div class="para">{text}</div>'

    words = ("harbour", "ferry", "lantern", "granary", "orchard", "quarry")
    paras = [f"The {w} of the old town was rebuilt after the flood, and the council wrote down every step it took, "
             f"from the first survey of the {w} to the last stone set in place." for w in words]
    note = ('<div class="sidebar"><div class="titlepage"><p class="title">BACK TO BASICS</p></div>'
            + para("A survey is a careful measurement of land, walls and water levels before any work begins.")
            + "</div>")
    listing = '<div class="section"><h3>Example</h3><pre>survey --town old --level 3\nbuild --from survey</pre>' \
              '<ul><li>survey: measure the ground first</li><li>build: lay the stones in order</li></ul></div>'
    section = ('<div class="section"><h2>1. The rebuilding</h2>' + para(paras[0]) + para(paras[1])
               + f'<div class="section"><h3>1.1 Survey</h3>{para(paras[2])}{note}{para(paras[3])}</div>'
               + f'<div class="section"><h3>1.2 Stones</h3>{para(paras[4])}{para(paras[5])}</div>' + listing
               + "</div>")
    column = ('<div class="sidebar"><h4>Elsewhere</h4><ul><li><a href="/a">Town archive opening hours</a></li>'
              '<li><a href="/b">Ferry timetable for winter</a></li><li><a href="/c">Contact the harbour office</a>'
              '</li></ul></div>')
    result = extract(page(f'<div class="layout"><div class="content">{section}</div>{column}</div>'))
    for text in paras + ["A survey is a careful measurement", "survey --town old"]:
        assert text[:40] in result.text, (text[:40], result.text)
    assert "Town archive" not in result.text and "Ferry timetable" not in result.text


def test_paragraph_tests_in_python_agree_with_the_selectors_they_stand_for():
    """The sidebar rule's tests walk nodes in Python (a selector query over a manual's section costs its whole
    subtree): a div is a leaf exactly where ``div:not(:has(> p, > div, ...))`` says so (a block inside an inline
    child is no child; capitals in the source; a block after inline children), and a note stands among paragraphs
    when one of 80+ characters is a sibling on either side, or in a list item, beside the list."""
    from resiliparse.parse.html import HTMLTree

    from transforms.extract.core import _BLOCK_CHILD, _among_paragraphs, _is_leaf_div

    long = "a paragraph long enough to count as the text of the page, eighty characters and then some more"
    divs = ["<div>plain text</div>", "<div>text <code>x</code> <em>y</em></div>",
            "<div><span><div>block inside an inline child</div></span></div>", "<div>text <b>x</b><P>p</P></div>",
            "<div><h2>title</h2>text</div>", "<div><a>x</a><table><tr><td>t</td></tr></table></div>",
            '<div><a title="<div>">x</a></div>', "<div></div>"]
    tree = HTMLTree.parse("<body>" + "".join(f'<section id="s{i}">{d}</section>' for i, d in enumerate(divs)) + "</body>")
    leaves = {el.parent.id for el in tree.body.query_selector_all(f"div:not(:has({_BLOCK_CHILD}))")[:]
              if el.parent.tag == "section"}
    assert leaves == {"s0", "s1", "s2", "s6", "s7"}
    for i in range(len(divs)):
        div = tree.body.query_selector(f"#s{i} > div")
        assert _is_leaf_div(div) == (f"s{i}" in leaves), divs[i]

    def note_among(html: str) -> bool:
        return _among_paragraphs(HTMLTree.parse(f"<body>{html}</body>").body.query_selector(".sidebar"))

    note = '<div class="sidebar"><div class="title">NOTE</div><div class="para">short</div></div>'
    assert note_among(f'<div><div class="para">{long}</div><a id="x"></a>{note}</div>')  # before it
    assert note_among(f'<div>{note}<div class="para">short</div><p>{long}</p></div>')  # after it
    assert not note_among(f'<div><div class="para">short</div>{note}<div><div>{long}</div></div></div>')
    assert note_among(f'<div><p>{long}</p><ul><li>{note}</li></ul></div>')  # in a list item: beside the list
    assert not note_among(f'<div><ul><li>{note}</li><li><p>{long}</p></li></ul></div>')


def test_a_single_page_manual_is_kept_whole_not_its_densest_subsection():
    """texinfo and DocBook write a whole manual on one page, chapters > sections > subsections: the subsection
    that gathers the most paragraphs is one part among siblings of its kind, and the text is the manual's."""
    def para(i, topic):
        return (f"<p>Paragraph {i} on {topic}: the shell reads each command, expands its words, and runs it, "
                f"waiting for it to finish unless it was started in the background with an ampersand.</p>")

    def sub(name, n):
        return f'<div class="subsection"><h4>{name}</h4>' + "".join(para(i, name) for i in range(n)) + "</div>"

    chapters = "".join(f'<div class="chapter"><h2>{c}</h2>{para(0, c)}<div class="section"><h3>{c} basics</h3>'
                       f'{sub(c + " loops", 2)}{sub(c + " conditionals", 6)}</div>'
                       f'<div class="section"><h3>{c} in depth</h3>{para(1, c + " in depth")}{para(2, c + " in depth")}</div></div>'
                       for c in ("Commands", "Variables", "Expansion"))
    result = extract(page(f'<div class="top"><h1>Manual</h1>{chapters}</div>'))
    for topic in ("Commands loops", "Commands conditionals", "Variables", "Expansion conditionals"):
        assert f"on {topic}" in result.text, (topic, result.text[:300])


def test_code_blocks_lists_and_tables_are_kept_with_their_structure():
    code = "fn main() {\n    let x = 1;\n    println!(\"{}\", x);\n}"
    body = (f"<main><h1>Setup</h1>{ARTICLE}<pre><code>{code}</code></pre>"
            "<ul><li>first step of the list</li><li>second step of the list</li></ul>"
            "<table><tr><th>Port</th><th>Depth</th></tr><tr><td>North quay</td><td>12 m</td></tr></table></main>")
    text = extract(page(body)).text
    assert code in text  # line breaks and indentation of the code kept
    lines = [line.strip() for line in text.split("\n")]
    assert lines[lines.index("first step of the list") + 1] == "second step of the list"  # one item a line
    assert "North quay\t\t12 m" in lines  # one row a line, cells apart
    off = extract(page(body), ExtractConfig(keep_code=False, keep_tables=False, keep_lists=False)).text
    assert "let x" not in off and "North quay" not in off and "first step" not in off
    assert "The committee met" in off


def test_scripts_and_styles_never_reach_the_text():
    body = ("<main><script>var secretToken = 'alpha';</script><style>p.magicclass{color:red}</style>"
            f"{ARTICLE}<noscript>enable javascript please</noscript><template><p>templated ghost</p></template>"
            "<script type=\"application/ld+json\">{\"headline\": \"jsonld words\"}</script></main>")
    for extractor in ("corpusmill", "resiliparse"):
        text = extract(page(body), ExtractConfig(extractor=extractor)).text
        for word in ("secretToken", "magicclass", "enable javascript", "templated ghost", "jsonld"):
            assert word not in text, (extractor, word)


def test_class_names_are_read_word_by_word():
    """WordPress-style names: a boilerplate word wins over the content word it is compounded with (post-navigation,
    entry-footer), a content word on its own keeps the element, a header holding the page's <h1> stays."""
    body = ('<div class="site-header"><a href="/">Harbour Gazette</a><span>Local news since 1901</span></div>'
            '<div class="site-content"><div class="entry-content"><header class="entry-header"><h1>Harbour plan '
            f'approved</h1></header>{ARTICLE}<div class="post-meta sharedaddy sd-sharing">Share this: Email</div>'
            '<footer class="entry-footer">Posted in Harbour, Council</footer></div><div class="post-navigation">'
            '<div>Previous: Bridge repairs</div><div>Next: Ferry timetable</div></div>'
            '<div id="comments" class="comments-area"><p>Totally agree with the plan, about time somebody fixed '
            'the old wall before winter.</p></div></div>')
    text = extract(page(body)).text
    assert text.startswith("Harbour plan approved") and "at the library" in text
    for word in ("Local news since", "Share this", "Posted in", "Ferry timetable", "Totally agree"):
        assert word not in text, (word, text)


def test_a_page_wrapped_in_one_form_is_read():
    """ASP.NET pages wrap the whole page in <form id="aspnetForm">: a form holding most of the text stays (its
    fields are still never text); a form beside the article goes."""
    body = (f'<form id="aspnetForm"><input type="hidden" value="VIEWSTATEsecret"><div><h1>Harbour</h1>{ARTICLE}'
            '</div><div><p>Find older stories in the archive of the whole newspaper</p><input name="q">'
            '<button>Go</button></div></form>')
    text = extract(page(body)).text
    assert "The committee met" in text and "VIEWSTATE" not in text and "Go" not in text
    beside = extract(page(f'<div><h1>Harbour</h1>{ARTICLE}</div><form action="/s"><p>Find older stories in the '
                          'archive of the whole newspaper</p><input name="q"><button>Go</button></form>')).text
    assert "The committee met" in beside and "archive" not in beside


def test_a_wrapper_named_like_boilerplate_that_holds_the_page_is_kept():
    """A site naming its whole layout "nav-wrapper": an element holding most of the page's text is not pruned."""
    text = extract(page(f'<div class="nav-wrapper"><div class="sidebar-layout">{ARTICLE}</div></div>')).text
    assert "The committee met on Tuesday" in text and "at the library" in text


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("html", ["", "   \n ", "<html><head><title>Only a head</title></head></html>",
                                  "<html><body></body></html>", "<html><body><script>x=1</script></body></html>",
                                  "<<<>>>&&&", "\x00\x01"])
def test_empty_and_bodyless_html_has_no_main_text(html):
    result = extract(html)
    assert result.reason in (NO_MAIN_TEXT, TOO_SHORT) and len(result.text) < 10


def test_a_fragment_without_html_or_body_tags_is_read():
    result = extract(ARTICLE)
    assert result.reason is None and "The committee met" in result.text


def test_short_text_is_flagged_and_large_html_refused():
    assert extract(page("<main><p>Too short.</p></main>")).reason == TOO_SHORT
    assert extract(page("<main><p>Too short.</p></main>"), ExtractConfig(min_text_chars=0)).reason is None
    assert extract(page(ARTICLE), ExtractConfig(max_html_chars=100)).reason == TOO_LARGE


def test_a_huge_page_finishes():
    """20 MB of HTML (the same article 40,000 times in nested sections, with boilerplate between): extracted, not
    crashed, in one piece."""
    unit = f"<section><h2>Part</h2>{ARTICLE}{BOILERPLATE['share']}</section>"
    html = page("<main>" + unit * (20_000_000 // len(unit)) + "</main>")
    assert len(html) > 19_000_000
    result = extract(html)
    assert result.reason is None
    assert result.text.count("The committee met") == 20_000_000 // len(unit)
    assert "Facebook" not in result.text


def test_other_extractors_run_through_the_same_core():
    trafilatura = pytest.importorskip("trafilatura")  # noqa: F841
    for extractor in ("resiliparse", "trafilatura"):
        result = extract(page(f"<article><h1>Harbour</h1>{ARTICLE}</article>"), ExtractConfig(extractor=extractor))
        assert result.reason is None and "Engineers told the members" in result.text, extractor


# --- the step ----------------------------------------------------------------------------------------------------

def step_docs() -> list[dict]:
    html_page = page(BOILERPLATE["nav"] + f"<article><h1>Harbour plan</h1>{ARTICLE}</article>" + BOILERPLATE["footer"])
    return [
        {"id": 1, "text": html_page, "source": "a.warc.gz", "meta": {"content_type": "text/html; charset=utf-8"},
         "annotations": {}},
        {"id": 2, "text": "Plain text, <b>not HTML</b> by its reader.", "source": "b.jsonl", "meta": {},
         "annotations": {}},
        {"id": 3, "text": page("<nav><a href='/'>Home</a></nav>"), "source": "a.warc.gz",
         "meta": {"content_type": "text/html"}, "annotations": {}},
        {"id": 4, "text": page("<p>Hi.</p>"), "source": "a.warc.gz", "meta": {"content_type": "application/xhtml+xml"},
         "annotations": {}},
        {"id": 5, "text": "ignored", "source": "c.jsonl", "meta": {"page": html_page}, "annotations": {}},
        {"id": 6, "text": "ignored", "source": "c.jsonl", "meta": {"page": 42}, "annotations": {}},
    ]


def test_step_extracts_marked_records_and_passes_the_others_untouched():
    docs = step_docs()
    plain_before = json.dumps(docs[1])
    reasons = ExtractStep(ExtractConfig(html_field="page")).apply(docs)
    assert reasons == [None, None, NO_MAIN_TEXT, TOO_SHORT, None, "html_not_a_string"]
    assert json.dumps(docs[1]) == plain_before  # no annotation, no change
    assert docs[0]["text"].startswith("Harbour plan") and "Home" not in docs[0]["text"]
    assert docs[0]["annotations"]["extract"]["title"] == "A page"
    assert docs[0]["annotations"]["extract"]["extractor"] == "corpusmill"
    assert docs[4]["text"].startswith("Harbour plan") and "page" not in docs[4]["meta"]
    # without html_field, a record's other field is not HTML
    docs = step_docs()
    assert ExtractStep(ExtractConfig()).apply(docs)[4:] == [None, None] and docs[4]["text"] == "ignored"


def test_without_the_extractor_library_html_records_are_removed_with_a_reason(monkeypatch):
    from transforms.extract import step as step_module

    monkeypatch.setattr(step_module, "library_error", lambda cfg: "resiliparse cannot be imported (test)")
    docs = step_docs()
    reasons = ExtractStep(ExtractConfig()).apply(docs)
    assert reasons[:2] == ["extractor_unavailable", None]  # the plain record still passes
    assert "cannot be imported" in docs[0]["annotations"]["extract"]["error"]


def test_step_in_a_beam_pipeline_accounts_for_every_record(tmp_path):
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.beam_step import ApplyStep

    out = tmp_path / "out"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        res = p | beam.Create(step_docs()) | ApplyStep(ExtractStep(ExtractConfig(html_field="page")))
        (res.kept | "k" >> beam.Map(lambda d: json.dumps([d["id"], d["text"][:12]]))
         | "wk" >> beam.io.WriteToText(str(out / "kept")))
        (res.removed | "r" >> beam.Map(lambda d: json.dumps([d["id"], d["removed_by"], d["reason"]]))
         | "wr" >> beam.io.WriteToText(str(out / "removed")))
    kept = sorted(json.loads(line) for f in out.glob("kept*") for line in f.read_text().splitlines())
    removed = sorted(json.loads(line) for f in out.glob("removed*") for line in f.read_text().splitlines())
    assert len(kept) + len(removed) == len(step_docs())
    assert [k[0] for k in kept] == [1, 2, 5]
    assert removed == [[3, "extract", NO_MAIN_TEXT], [4, "extract", TOO_SHORT], [6, "extract", "html_not_a_string"]]


def test_the_step_runs_first_and_only_where_there_can_be_html():
    from pipelines.config import validate_config
    from pipelines.steps import enabled_steps

    def steps(**cfg):
        return enabled_steps(validate_config({"name": "t", **cfg}))

    assert "extract" not in steps(input={"paths": ["data/demo/corpus.jsonl.gz"]})  # the demo: as it was
    assert "extract" not in steps(input={"paths": ["x/*.parquet", "y.txt"]})
    assert steps(input={"paths": ["crawl/CC-MAIN-1.warc.gz"]})[0] == "extract"
    assert steps(input={"paths": ["pages/"]})[0] == "extract"  # a folder may hold .html files
    assert steps(input={"paths": ["p.jsonl"], "text_field": "html"}, extract={"html_field": "html"})[0] == "extract"
    assert "extract" not in steps(input={"paths": ["crawl/x.warc.gz"]}, extract={"enabled": False})


def test_a_run_extracts_an_html_field_with_exact_accounting(tmp_path):
    from pipelines.config import validate_config
    from pipelines.run import run_stages
    from runio.layout import RunPaths

    src = tmp_path / "pages.jsonl"
    rows = [{"url": f"https://example.org/{i}", "html": page(BOILERPLATE["nav"] + f"<article><h1>Story {i}</h1>"
                                                            f"{ARTICLE}<p>Number {i} of the series.</p></article>")}
            for i in range(6)]
    rows += [{"url": "https://example.org/empty", "html": page(BOILERPLATE["nav"])}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = validate_config({"name": "web", "input": {"paths": [str(src)], "text_field": "html"},
                           "extract": {"html_field": "html"}, "output": {"runs_dir": str(tmp_path / "runs")},
                           "runner": {"name": "inprocess", "workers": 1}, "pii": {"enabled": False},
                           "quality": {"enabled": False}, "near_dedup": {"enabled": False},
                           "filters": {"enabled": False}, "langid": {"enabled": False}})
    run_stages(cfg, ("clean",), log=lambda _: None)
    stats = json.loads(RunPaths.of(cfg).stats.read_text())
    assert stats["accounting"]["balanced"]
    row = next(r for r in stats["steps"] if r["step"] == "extract")
    assert (row["in"], row["kept"], row["removed"]) == (7, 6, 1)
    assert stats["steps"][0]["step"] == "extract"


# --- the command -------------------------------------------------------------------------------------------------

def test_command_end_to_end(tmp_path, dev_pages):
    src = tmp_path / "in.jsonl.gz"
    chosen = dev_pages[:3] + [p for p in dev_pages if p["lang"] == "zh"][:2]
    with gzip.open(src, "wt", encoding="utf-8") as f:
        for p in chosen:
            f.write(json.dumps({"doc": p["id"], "page": p["html"]}, ensure_ascii=False) + "\n")
        f.write(json.dumps({"doc": "no-page", "url": "https://example.org"}) + "\n")
        f.write(json.dumps({"doc": "nav-only", "page": page(BOILERPLATE["nav"])}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"page": page(f"<main>{ARTICLE}</main>")}) + "\n")
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "extract", str(src), "--html-field", "page", "--id-field",
                           "doc", "--out", str(out), "--set", "extract.min_text_chars=20"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(chosen) + 4  # one line per input record, in order
    for p, r in zip(chosen, rows):
        assert r["id"] == p["id"] and "reason" not in r
        assert score(r["text"], p["text"])[2] > 0.8
    assert rows[len(chosen)] == {"id": None, "text": "", "reason": "missing_html_field", "source": "in.jsonl.gz",
                                 "position": len(chosen) + 1}
    assert rows[len(chosen) + 1] == {"id": "nav-only", "text": "", "reason": NO_MAIN_TEXT}
    assert rows[len(chosen) + 2]["reason"] == "invalid_json"
    assert rows[-1]["id"] is None and "The committee met" in rows[-1]["text"] and rows[-1]["position"] == len(rows)
    summary = proc.stderr.strip().splitlines()[-1]
    assert f"{len(rows)} records: {len(chosen) + 1} with main text, 3 without" in summary
    assert "invalid_json 1, missing_html_field 1, no_main_text 1" in summary and "without 'doc': 1" in summary


def test_command_refuses_a_bad_setting_in_one_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": 1, "html": page(ARTICLE)}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "extract", str(src), "--out", str(tmp_path / "o.jsonl"),
                           "--set", "extract.extractor=magic"], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode == 2 and "extract.extractor" in proc.stderr and "Traceback" not in proc.stderr


def test_trafilatura_cannot_drop_lists_or_code():
    import pydantic
    import pytest

    from transforms.extract.config import ExtractConfig
    with pytest.raises(pydantic.ValidationError, match="extract.keep_code"):
        ExtractConfig(extractor="trafilatura", keep_code=False)
    assert ExtractConfig(extractor="trafilatura", keep_tables=False).keep_tables is False

"""Raw sources in: WARC, ARC, WET, HTML, PDF, DOCX and Markdown read from real files (tests/data/raw, see its
README), bad input skipped or quarantined with a reason while the rest is read, and records accounted for
exactly (records = documents + skipped + quarantined), in the reader and in a `prepare` run."""
from __future__ import annotations

import codecs
import gzip
import io
import json
import shutil
import zlib
from collections import Counter
from pathlib import Path

import pytest

from beamio.config_base import InputConfig
from beamio.read import InputFile, Quarantined, Skipped, detect_format, doc_id, read_file_indexed, records_in

RAW = Path(__file__).parent / "data" / "raw"


def read(path, **cfg) -> list[tuple[int, object]]:
    path = str(path)
    return list(read_file_indexed(path, InputConfig(paths=[path], **cfg), InputFile.of(path)))


def docs_of(items):
    return [item for _, item in items if isinstance(item, dict)]


def kinds(items, cls=Quarantined):
    return Counter(item.kind for _, item in items if type(item) is cls)


def balanced(path, items) -> bool:
    """records (from the parser's numbering) = documents + skipped + quarantined."""
    last = max(index for index, _ in items)
    n_docs = len(docs_of(items))
    n_skipped = sum(1 for _, i in items if isinstance(i, Skipped))
    n_quarantined = sum(1 for _, i in items if type(i) is Quarantined)
    return records_in(detect_format(str(path), "auto"), len(items), last) == n_docs + n_skipped + n_quarantined


def test_formats_by_suffix():
    assert [detect_format(n, "auto") for n in ("a.warc.gz", "a.warc", "CC.warc.wet.gz", "a.wet", "a.arc.gz", "a.arc",
                                               "p.html", "p.HTM", "d.pdf", "d.docx", "r.md", "r.markdown")] == \
        ["warc", "warc", "warc", "warc", "arc", "arc", "html", "html", "pdf", "docx", "markdown", "markdown"]
    assert detect_format("anything.bin", "pdf") == "pdf"  # input.format forces one


def test_warc_records_documents_and_skips_with_reasons():
    items = read(RAW / "pages.warc.gz")
    assert [i for i, _ in items] == list(range(22))  # every record, skipped ones included, by its index
    docs = docs_of(items)
    assert len(docs) == 7
    page = next(d for d in docs if d["meta"]["url"] == "https://nodejs.org/api/punycode.html")
    assert page["meta"] == {"url": "https://nodejs.org/api/punycode.html", "crawl_date": "2024-05-01T12:00:00Z",
                            "warc_record_id": "<urn:uuid:00000000-0000-4000-8000-000000000003>",
                            "content_type": "text/html", "charset": "utf-8", "charset_source": "http",
                            "undecodable_bytes": 0, "title": "Punycode | Node.js v20.20.2 Documentation"}
    assert page["text"].startswith("<!DOCTYPE html>") and "punycode.decode(string)" in page["text"]
    key = InputFile.of(str(RAW / "pages.warc.gz")).key
    assert page["id"] == doc_id(key, 2) and page["source"] == "pages.warc.gz"
    plain = next(d for d in docs if d["meta"]["url"].endswith("robots.txt"))
    assert plain["meta"]["content_type"] == "text/plain" and "User-agent" in plain["text"]
    assert kinds(items, Skipped) == {"warcinfo_record": 1, "request_record": 4, "metadata_record": 4,
                                     "content_type": 1, "http_status": 2, "revisit_record": 1,
                                     "truncated_record": 1, "no_body": 1}
    reasons = {i.reason for _, i in items if isinstance(i, Skipped)}
    assert "HTTP status 404" in reasons and "content type 'image/png' is not HTML or text" in reasons
    assert all(isinstance(i.byte_offset, int) for _, i in items if isinstance(i, Skipped))
    assert balanced(RAW / "pages.warc.gz", items)
    # a raw capture's body, chunked and gzip-encoded as the server sent it: decoded
    synopsis = next(d for d in docs if d["meta"]["url"].endswith("synopsis.html"))
    assert synopsis["text"].startswith("<!DOCTYPE html>") and synopsis["meta"]["title"].startswith("Usage and example")


def test_http_body_encodings():
    from beamio.read_web import _BodyTooLarge, http_body

    page = (RAW / "html" / "string_decoder.html").read_bytes()
    assert http_body(gzip.compress(page), None, "gzip", 10**6) == page
    assert http_body(zlib.compress(page), None, "deflate", 10**6) == page
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert http_body(raw.compress(page) + raw.flush(), None, "deflate", 10**6) == page
    assert http_body(page, None, "gzip", 10**6) == page  # stored decoded, header kept
    assert http_body(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "chunked", None, 100) == b"hello world"
    assert http_body(page, "chunked", None, 10**6) == page  # stored de-chunked, header kept
    with pytest.raises(_BodyTooLarge):
        http_body(gzip.compress(b"x" * 10**6), None, "gzip", 1000)  # a small payload that decodes huge
    with pytest.raises(ValueError, match="unknown content encoding 'compress'"):
        http_body(page, None, "compress", 10**6)


def test_lying_charset_falls_back_to_detection():
    """The record's HTTP header and <meta> say UTF-8, its bytes are Windows-1252: detected, decoded right."""
    doc = next(d for d in docs_of(read(RAW / "pages.warc.gz")) if "translation" in d["meta"]["url"])
    assert doc["meta"]["declared_charset"] == "utf-8"
    assert doc["meta"]["charset"] == "cp1252" and doc["meta"]["charset_source"] == "detected"
    assert "Português" in doc["text"] and "Español" in doc["text"] and "Français" in doc["text"]
    assert doc["meta"]["undecodable_bytes"] == 0


def test_undecodable_bytes_counted_not_crashed(tmp_path):
    from beamio.read_web import decode_bytes

    sentence = "这是一个测试文档，用于检查字符集检测。".encode("utf-8") * 20
    bad = sentence[:100] + b"\xff\xfe" + sentence[100:]  # two stray bytes, and a character cut in two by them
    for declared in (None, "utf-8"):
        text, meta = decode_bytes(bad, declared)
        assert meta["charset"] == "utf-8" and meta["undecodable_bytes"] == 5  # 1 + 2 + 2 bytes of the cut char
        assert text.count("\ufffd") == 5 and text.endswith("这是一个测试文档，用于检查字符集检测。")
    # an HTML file declared UTF-8 with two bad bytes in its title: still UTF-8 (its other characters intact)
    page = (RAW / "html" / "string_decoder.html").read_bytes()
    (tmp_path / "bad.html").write_bytes(page.replace(b"<title>", b"<title>\xff\xfe ", 1))
    (doc,) = docs_of(read(tmp_path / "bad.html"))
    assert doc["meta"]["charset"] == "utf-8" and doc["meta"]["undecodable_bytes"] == 2
    assert doc["meta"]["declared_charset"] == "utf-8" and doc["text"].count("\ufffd") == 2
    assert doc["text"].replace("\ufffd\ufffd ", "") == page.decode("utf-8")


def test_declared_labels_read_as_browsers_read_them():
    from beamio.read_web import decode_bytes

    zh = "网页正文：数据清洗与语料库。㐀䶵"  # the last two characters are in GB18030, not in GB2312 or GBK
    text, meta = decode_bytes(zh.encode("gb18030"), "gb2312")
    assert text == zh and meta == {"charset": "gb18030", "charset_source": "http", "undecodable_bytes": 0}
    text, meta = decode_bytes("café “quoted”".encode("cp1252"), "iso-8859-1")  # 0x93/0x94: cp1252 quotes
    assert text == "café “quoted”" and meta["charset"] == "cp1252"


def test_a_byte_order_mark_decides(tmp_path):
    page = (RAW / "html" / "string_decoder.html").read_text(encoding="utf-8")
    (tmp_path / "utf16.html").write_bytes(codecs.BOM_UTF16_LE + page.encode("utf-16-le"))  # NUL bytes: still read
    (tmp_path / "bom8.html").write_bytes(codecs.BOM_UTF8 + page.encode("utf-8"))
    for name, codec in (("utf16.html", "utf-16-le"), ("bom8.html", "utf-8")):
        (doc,) = docs_of(read(tmp_path / name))
        assert doc["text"] == page and doc["meta"]["charset"] == codec and doc["meta"]["charset_source"] == "bom"


def test_truncated_warc_gz_reads_records_before_the_cut(tmp_path):
    data = (RAW / "pages.warc.gz").read_bytes()
    for cut, kind in ((30000, "truncated_file"), (29800, "truncated_file")):
        path = tmp_path / f"cut{cut}.warc.gz"
        path.write_bytes(data[:cut])
        items = read(path)
        assert len(docs_of(items)) == 4  # the four pages before the cut
        quarantined = [i for _, i in items if type(i) is Quarantined]
        assert [q.kind for q in quarantined] == [kind] and quarantined[0].position == 13
        assert "every record before it was read" in quarantined[0].reason
        assert balanced(path, items)


@pytest.mark.parametrize("name", ["pages.warc.gz", "pages.arc.gz"])
def test_a_cut_anywhere_is_one_quarantine_after_the_records_before_it(tmp_path, name):
    """Cut the file at every 61st byte: the records wholly before the cut are read as from the whole file, the
    cut is one truncated_file record (none when the cut falls between two gzip members: a shorter valid
    file), and the records balance."""
    def same(items):  # what a record is, apart from the file's name and content key
        return [(index, (item["text"], item["meta"]) if isinstance(item, dict) else
                 (item.position, item.kind, item.reason, item.byte_offset)) for index, item in items]

    data = (RAW / name).read_bytes()
    whole = read(RAW / name)
    starts, pos = {len(data)}, 0  # the gzip members' boundaries
    while pos < len(data):
        starts.add(pos)
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        member.decompress(data[pos:])
        pos = len(data) - len(member.unused_data)
    for cut in range(1, len(data), 61):
        path = tmp_path / f"cut{cut}{name[name.index('.'):]}"
        path.write_bytes(data[:cut])
        items = read(path)
        quarantined = [i for _, i in items if type(i) is Quarantined]
        assert [q.kind for q in quarantined] in ([], ["truncated_file"]), (cut, quarantined)
        assert len(quarantined) == 1 or cut in starts, cut
        before = [(index, item) for index, item in items if not (type(item) is Quarantined)]
        assert same(before) == same(whole[:len(before)]), cut  # the same records and meta
        assert balanced(path, items), cut
        path.unlink()


def test_arc(tmp_path):
    items = read(RAW / "pages.arc.gz")
    docs = docs_of(items)
    assert [d["meta"]["url"] for d in docs] == ["https://nodejs.org/api/punycode.html",
                                                "https://nodejs.org/api/string_decoder.html",
                                                "https://doc.rust-lang.org/book/foreword.html"]
    assert docs[0]["meta"]["crawl_date"] == "2024-05-01T12:00:00Z" and docs[0]["meta"]["content_type"] == "text/html"
    assert docs[2]["meta"]["title"] == "Foreword - The Rust Programming Language"
    assert "warc_record_id" not in docs[0]["meta"]  # ARC has none (no random ones)
    assert read(RAW / "pages.arc.gz") == items  # the same ids and meta every time
    assert kinds(items, Skipped) == {"warcinfo_record": 1} and balanced(RAW / "pages.arc.gz", items)
    path = tmp_path / "cut.arc.gz"
    path.write_bytes((RAW / "pages.arc.gz").read_bytes()[:12000])
    items = read(path)
    assert len(docs_of(items)) == 2 and [i.kind for _, i in items if type(i) is Quarantined] == ["truncated_file"]


def test_wet():
    items = read(RAW / "pages.warc.wet.gz")
    docs = docs_of(items)
    assert len(docs) == 4 and kinds(items, Skipped) == {"warcinfo_record": 1}
    meta = docs[0]["meta"]
    assert meta["url"] == "https://nodejs.org/api/punycode.html" and meta["content_type"] == "text/plain"
    assert meta["crawl_date"] and meta["warc_record_id"] and meta["language"] == "eng"
    assert "<" not in docs[0]["text"] and "Punycode" in docs[0]["text"]


def test_html_files_and_no_body():
    items = [item for path in sorted((RAW / "html").iterdir()) for item in read(path)]
    docs = docs_of(items)
    assert {d["meta"]["title"] for d in docs} == {"String decoder | Node.js v20.20.2 Documentation",
                                                 "Variables and Mutability - The Rust Programming Language"}
    assert all(d["meta"]["content_type"] == "text/html" and d["meta"]["charset"] == "utf-8" for d in docs)
    assert all(len(d["text"]) > 20000 for d in docs)  # the whole page, not the first read's worth
    assert kinds(items, Skipped) == {"no_body": 1}


def test_pdf_text_layer_page_count_and_scanned_pages():
    (doc,) = docs_of(read(RAW / "shared-mime-info-excerpt.pdf"))
    assert doc["meta"]["content_type"] == "application/pdf"
    assert doc["meta"]["page_count"] == 4 and doc["meta"]["pages_without_text"] == 1  # the last page is an image
    assert "Shared MIME-info Database" in doc["text"] and "\n\n" in doc["text"]
    assert doc["meta"]["title"] == "The Shared MIME-info Database (excerpt)"
    (doc,) = docs_of(read(RAW / "libtasn1-excerpt.pdf"))
    assert doc["meta"]["page_count"] == 3 and "Libtasn1" in doc["text"] and "title" not in doc["meta"]
    # a word hyphenated at a line end is joined again, and no control character is left
    assert "Distinguished Encoding Rules (DER) manipulation." in doc["text"]
    assert not any(c in doc["text"] for c in "\x02\ufffe\r")


def test_pdf_without_text_layer_and_encrypted_pdf():
    (item,) = [i for _, i in read(RAW / "scanned.pdf")]
    assert isinstance(item, Skipped) and item.kind == "no_text" and "no OCR" in item.reason
    (item,) = [i for _, i in read(RAW / "encrypted.pdf")]
    assert type(item) is Quarantined and item.kind == "encrypted_pdf" and item.reason.startswith("encrypted PDF")


def test_corrupt_pdf_and_docx(tmp_path):
    (tmp_path / "cut.pdf").write_bytes((RAW / "libtasn1-excerpt.pdf").read_bytes()[:2000])
    (tmp_path / "cut.docx").write_bytes((RAW / "punycode.docx").read_bytes()[:5000])
    (tmp_path / "text.docx").write_bytes(b"this is not a zip file at all")
    for name in ("cut.pdf", "cut.docx", "text.docx"):
        (item,) = [i for _, i in read(tmp_path / name)]
        assert type(item) is Quarantined and item.kind == "unreadable_file", name
        assert "not a readable" in item.reason and "\n" not in item.reason


def test_docx():
    (doc,) = docs_of(read(RAW / "punycode.docx"))
    assert doc["meta"] == {"content_type": "application/vnd.openxmlformats-officedocument.wordprocessingml."
                                           "document", "title": "Punycode | Node.js API"}
    text = doc["text"]
    assert text.startswith("Punycode") and "punycode.decode(string)" in text  # headings, in order
    assert "punycode.encode\tUnicode to Punycode ASCII" in text  # table cells
    assert text.index("punycode.decode(string)") < text.index("punycode.encode(string)")


def test_markdown():
    (doc,) = docs_of(read(RAW / "markdown" / "npm-ls.md"))
    assert doc["meta"]["title"] == "npm-ls" and doc["meta"]["content_type"] == "text/markdown"
    text = doc["text"]
    assert not text.startswith("---") and "### " not in text and "```" not in text
    assert text.startswith("Synopsis") and "npm ls <package-spec>" in text  # heading, then a code block's content
    (doc,) = docs_of(read(RAW / "markdown" / "string_decoder.markdown"))
    assert "title" not in doc["meta"] and "StringDecoder" in doc["text"] and "](" not in doc["text"]


def test_too_large_records_and_files_are_skipped(tmp_path):
    big = tmp_path / "big.html"
    with open(big, "wb") as fh:  # a 200 MB page
        fh.write(b"<html><head><title>big</title></head><body>")
        chunk = b"<p>" + b"word " * 2000 + b"</p>\n"
        for _ in range(200_000_000 // len(chunk) + 1):
            fh.write(chunk)
    (item,) = [i for _, i in read(big)]
    assert isinstance(item, Skipped) and item.kind == "too_large" and "input.max_record_bytes=50000000" in item.reason
    big.unlink()
    # a record over a (lowered) limit in a WARC: skipped, the records after it still read
    items = read(RAW / "pages.warc.gz", max_record_bytes=26000)
    assert kinds(items, Skipped)["too_large"] == 3 and len(docs_of(items)) == 4
    assert balanced(RAW / "pages.warc.gz", items)
    (item,) = [i for _, i in read(RAW / "punycode.docx", max_record_bytes=1000)]
    assert item.kind == "too_large"


def test_compressed_html_and_uncompressed_warc(tmp_path):
    (tmp_path / "page.html.gz").write_bytes(gzip.compress((RAW / "html" / "string_decoder.html").read_bytes()))
    (doc,) = docs_of(read(tmp_path / "page.html.gz"))
    assert doc["meta"]["title"].startswith("String decoder")
    plain = b"".join(_members((RAW / "pages.warc.gz").read_bytes()))
    (tmp_path / "pages.warc").write_bytes(plain)
    items = read(tmp_path / "pages.warc")
    assert len(docs_of(items)) == 7 and balanced(tmp_path / "pages.warc", items)
    (tmp_path / "plain.warc.gz").write_bytes(plain)  # a plain WARC named .gz: read, no false cut reported
    assert [i for _, i in read(tmp_path / "plain.warc.gz") if type(i) is Quarantined] == []


def _members(data: bytes):
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
        yield fh.read()


def test_prepare_over_a_folder_mixing_formats_accounts_for_every_record(tmp_path):
    from pipelines.config import validate_config
    from pipelines.prepare import run_clean

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("pages.warc.gz", "pages.arc.gz", "pages.warc.wet.gz", "punycode.docx", "scanned.pdf",
                 "encrypted.pdf", "shared-mime-info-excerpt.pdf"):
        shutil.copy(RAW / name, inputs / name)
    shutil.copytree(RAW / "html", inputs / "html")
    shutil.copytree(RAW / "markdown", inputs / "markdown")
    (inputs / "notes.jsonl").write_text(json.dumps({"text": "a line of JSONL " * 20}) + "\nnot json\n")
    cfg = validate_config({"name": "mixed", "input": {"paths": [str(inputs)]},
                           "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "direct", "workers": 1},
                           "pii": {"enabled": False}, "quality": {"enabled": False}})
    stats = run_clean(cfg, log=lambda _: None)
    rec = stats["records"]
    # 22 WARC + 4 ARC + 5 WET records, 3 HTML, 2 Markdown, 1 DOCX, 3 PDF files, 2 JSONL lines
    assert rec["read"] == 22 + 4 + 5 + 3 + 2 + 1 + 3 + 2
    assert rec["skipped"]["by_reason"] == {"content_type": 1, "http_status": 2, "metadata_record": 4, "no_body": 2,
                                           "no_text": 1, "request_record": 4, "revisit_record": 1,
                                           "truncated_record": 1, "warcinfo_record": 3}
    assert rec["quarantined"] == 2  # the encrypted PDF, the line that is not JSON
    assert rec["documents"] == 7 + 3 + 4 + 2 + 2 + 1 + 1 + 1
    assert rec["read"] == rec["documents"] + rec["skipped"]["total"] + rec["quarantined"]
    assert stats["accounting"]["balanced"], stats["accounting"]["problems"]
    assert stats["counters"]["read/skipped/no_body"] == 2
    from pipelines.prepare import summary_table

    assert summary_table(stats).startswith(f"records: read {rec['read']} = documents {rec['documents']} + skipped "
                                           f"{rec['skipped']['total']} (content_type 1, http_status 2, ")
    # the report's funnel starts at the records: input → records → (skipped: reason ...) and read
    from report.build import build_report
    from report.data import load_run
    from report.figures import pipeline_edges

    edges = pipeline_edges(load_run(cfg.run_dir))
    assert (edges[0].source, edges[0].target, edges[0].documents) == ("input", "records", rec["read"])
    skips = {e.target: e.documents for e in edges if e.source == "records" and e.target.startswith("skipped: ")}
    assert skips == {f"skipped: {k}": v for k, v in rec["skipped"]["by_reason"].items()}
    assert [e.documents for e in edges if (e.source, e.target) == ("records", "read")] == [stats["documents_read"]]
    page = build_report(cfg.run_dir).read_text()
    assert "Skipped records" in page and f"read {rec['read']:,} = documents {rec['documents']:,}" in page


def test_record_accounting_fails_when_records_go_missing():
    from pipelines.prepare import record_accounting

    ok = record_accounting({("read", "records"): 10, ("read", "documents"): 6, ("read", "skipped"): 3,
                            ("read", "skipped/request_record"): 3, ("read", "quarantined"): 1})
    assert ok["problems"] == [] and ok["skipped"] == {"total": 3, "by_reason": {"request_record": 3}}
    lost = record_accounting({("read", "records"): 11, ("read", "documents"): 6, ("read", "skipped"): 3,
                              ("read", "skipped/request_record"): 3, ("read", "quarantined"): 1})
    assert lost["problems"] == ["records read 11 != documents 6 + skipped 3 + quarantined 1"]


def test_a_run_whose_reader_loses_a_record_fails(tmp_path, monkeypatch):
    """A parser that drops a record without a trace leaves a gap in its record numbering: the run's record
    accounting does not balance and the run fails (as a lost document fails it)."""
    import beamio.read as read_module
    from pipelines.config import validate_config
    from pipelines.prepare import AccountingError, run_clean

    honest = read_module.PARSERS["warc"]

    def lossy(fh, source, cfg):
        return ((index, item) for index, item in honest(fh, source, cfg) if index != 3)  # a metadata record

    monkeypatch.setitem(read_module.PARSERS, "warc", lossy)
    (tmp_path / "in").mkdir()
    shutil.copy(RAW / "pages.warc.gz", tmp_path / "in")
    cfg = validate_config({"name": "lossy", "input": {"paths": [str(tmp_path / "in")]},
                           "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "direct", "workers": 1},
                           "pii": {"enabled": False}, "quality": {"enabled": False}})
    with pytest.raises(AccountingError, match=r"records read 22 != documents 7 \+ skipped 14 \+ quarantined 0"):
        run_clean(cfg, log=lambda _: None)


def test_a_run_of_skipped_records_only_says_so(tmp_path):
    """A crawl whose every record is skipped (no HTML or text in it) is an empty result that names the skipped
    records, not a silent 'read 0'."""
    from warcio.warcwriter import WARCWriter
    from warcio.statusandheaders import StatusAndHeaders

    from pipelines.config import validate_config
    from pipelines.run import run_stages, summary_line

    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "images.warc.gz", "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        png = (RAW / "pages.warc.gz").read_bytes()[:64]  # any bytes: an image/png response is skipped unread
        for n in range(3):
            http = StatusAndHeaders("200 OK", [("Content-Type", "image/png")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://example.org/{n}.png", "response",
                                                          payload=io.BytesIO(png), length=len(png), http_headers=http))
    cfg = validate_config({"name": "images", "input": {"paths": [str(tmp_path / "in")]},
                           "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "direct", "workers": 1},
                           "pii": {"enabled": False}, "quality": {"enabled": False}})
    run_stages(cfg, ("clean",), log=lambda _: None)
    stats = json.loads((cfg.run_dir / "stats.json").read_text())
    assert stats["records"]["skipped"] == {"total": 3, "by_reason": {"content_type": 3}}
    manifest = json.loads((cfg.run_dir / "manifest.json").read_text())
    assert manifest["counts"]["skipped_records"] == 3 and manifest["counts"]["balanced"]
    assert "read 0 → kept 0 (removed 0, quarantined 0; 3 records skipped (not documents))" in summary_line(manifest)

"""Builds the raw-source test files in this folder from real documents on the base image (see README.md).

Run once by a maintainer (the tests read only the files it wrote, never the base image):

    PYTHONPATH=. python tests/data/raw/build_fixtures.py [--encrypted-with /path/to/python-with-pypdf]

Deterministic: fixed WARC record ids and dates, fixed zip timestamps, fixed PDF/DOCX metadata. The password-
protected PDF needs ``pypdf`` (not a project dependency): it is written by a separate interpreter given with
``--encrypted-with`` and left as it is when that option is not given; the same interpreter writes a document
title into ``shared-mime-info-excerpt.pdf``.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import io
import os
import subprocess
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = Path("/usr/share/doc/nodejs/api")
RUST_BOOK = Path(sorted(glob.glob("/root/.rustup/toolchains/stable*/share/doc/rust/html/book"))[0])
RUST_HTML = RUST_BOOK.parent
NPM_DOCS = Path("/usr/lib/node_modules/npm/docs/content")
PDFS = {"libtasn1.pdf": Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
        "shared-mime-info-spec.pdf": Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")}

DATE = "2024-05-01T12:00:00Z"
PAGES = [  # (url, file) of the HTML pages the WARC holds
    ("https://nodejs.org/api/punycode.html", NODE / "punycode.html"),
    ("https://nodejs.org/api/string_decoder.html", NODE / "string_decoder.html"),
    ("https://doc.rust-lang.org/book/foreword.html", RUST_BOOK / "foreword.html"),
    ("https://doc.rust-lang.org/book/ch01-01-installation.html", RUST_BOOK / "ch01-01-installation.html"),
]
LYING_PAGE = ("https://doc.rust-lang.org/book/appendix-06-translation.html", RUST_BOOK / "appendix-06-translation.html")
NO_BODY = b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Redirecting</title></head></html>\n"


def _record_id(n: int) -> str:
    return f"<urn:uuid:00000000-0000-4000-8000-{n:012d}>"


class _Warc:
    """WARC 1.1 records written by warcio, each its own gzip member (as crawlers write them)."""

    def __init__(self, gz: bool = True):
        from warcio.warcwriter import WARCWriter

        self.buf = io.BytesIO()
        self.writer = WARCWriter(self.buf, gzip=gz, warc_version="1.1")
        self.n = 0

    def add(self, rtype: str, url: str | None, payload: bytes, *, http: list[tuple[str, str]] | None = None,
            status: str = "200 OK", headers: dict | None = None, content_type: str | None = None):
        from warcio.statusandheaders import StatusAndHeaders

        self.n += 1
        warc_headers = {"WARC-Record-ID": _record_id(self.n), "WARC-Date": DATE, **(headers or {})}
        http_headers = None
        if http is not None:
            http_headers = StatusAndHeaders(status, http + [("Content-Length", str(len(payload)))],
                                            protocol="HTTP/1.1")
        record = self.writer.create_warc_record(url or "", rtype, payload=io.BytesIO(payload),
                                                length=len(payload), http_headers=http_headers,
                                                warc_content_type=content_type,
                                                warc_headers_dict=warc_headers)
        if url is None:
            record.rec_headers.remove_header("WARC-Target-URI")
        self.writer.write_record(record)

    def bytes(self) -> bytes:
        return self.buf.getvalue()


def build_warc() -> bytes:
    w = _Warc()
    w.add("warcinfo", None, b"software: corpusmill tests/data/raw/build_fixtures.py\r\nformat: WARC File Format 1.1\r\n",
          content_type="application/warc-fields")
    html_type = [("Content-Type", "text/html; charset=utf-8")]
    for url, path in PAGES:
        w.add("request", url, b"", http=None, headers={}, content_type="application/http; msgtype=request")
        w.add("response", url, path.read_bytes(), http=html_type)
        w.add("metadata", url, b"fetchTimeMs: 120\r\n", content_type="application/warc-fields")
    # a plain-text response: a document as it is
    w.add("response", "https://doc.rust-lang.org/robots.txt", (RUST_HTML / "robots.txt").read_bytes(),
          http=[("Content-Type", "text/plain")])
    # a page whose HTTP header and <meta> both say UTF-8, but whose bytes are Windows-1252 (a lying charset)
    url, path = LYING_PAGE
    lying = path.read_text(encoding="utf-8").encode("cp1252", errors="xmlcharrefreplace")
    w.add("response", url, lying, http=html_type)
    # skipped: an image, a 404, a redirect, a revisit, a truncated record, an HTML page with no body
    w.add("response", "https://doc.rust-lang.org/favicon-32x32.png", (RUST_HTML / "favicon-32x32.png").read_bytes(),
          http=[("Content-Type", "image/png")])
    w.add("response", "https://doc.rust-lang.org/not_found.html", (RUST_HTML / "not_found.html").read_bytes(),
          http=html_type, status="404 Not Found")
    w.add("response", "https://nodejs.org/api/", b"", http=[("Location", "https://nodejs.org/api/index.html")],
          status="301 Moved Permanently")
    w.add("revisit", PAGES[0][0], b"", http=html_type,
          headers={"WARC-Profile": "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
                   "WARC-Refers-To-Target-URI": PAGES[0][0], "WARC-Refers-To-Date": DATE})
    w.add("response", "https://nodejs.org/api/tty.html", (NODE / "tty.html").read_bytes()[:4096], http=html_type,
          headers={"WARC-Truncated": "length"})
    w.add("response", "https://nodejs.org/api/empty.html", NO_BODY, http=html_type)
    # as a server sends it and a raw capture keeps it: gzip content encoding, in chunks
    body = _gz((NODE / "synopsis.html").read_bytes())
    chunked = b"".join(b"%x\r\n" % len(body[i:i + 4000]) + body[i:i + 4000] + b"\r\n"
                       for i in range(0, len(body), 4000)) + b"0\r\n\r\n"
    w.add("response", "https://nodejs.org/api/synopsis.html", chunked,
          http=html_type + [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")])
    return w.bytes()


def build_wet(pages_text: list[tuple[str, str]]) -> bytes:
    w = _Warc()
    w.add("warcinfo", None, b"software: corpusmill tests/data/raw/build_fixtures.py\r\nformat: WARC/1.1 WET\r\n",
          content_type="application/warc-fields")
    for i, (url, text) in enumerate(pages_text):
        w.add("conversion", url, text.encode("utf-8"), content_type="text/plain",
              headers={"WARC-Refers-To": _record_id(100 + i), "WARC-Identified-Content-Language": "eng"})
    return w.bytes()


def build_arc(pages: list[tuple[str, Path]]) -> bytes:
    """ARC v1 (https://archive.org/web/researcher/ArcFileFormat.php): a version block, then per record a
    header line ``URL IP DATE CONTENT-TYPE LENGTH`` and LENGTH bytes of HTTP response; each record its own
    gzip member (``.arc.gz``)."""
    version = b"1 0 corpusmill\nURL IP-address Archive-date Content-type Archive-length\n"
    head = f"filedesc://pages.arc 0.0.0.0 20240501120000 text/plain {len(version)}\n".encode() + version
    out = [_gz(head + b"\n")]
    for url, path in pages:
        body = path.read_bytes()
        http = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body)
        line = f"{url} 93.184.216.34 20240501120000 text/html {len(http)}\n".encode()
        out.append(_gz(line + http + b"\n"))
    return b"".join(out)


def _gz(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as fh:
        fh.write(data)
    return buf.getvalue()


def _pdf_pages(src: Path, pages: list[int]):
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(src))
    new = pdfium.PdfDocument.new()
    new.import_pages(doc, pages)
    return doc, new


def _save_pdf(pdf, path: Path) -> None:
    buf = io.BytesIO()
    pdf.save(buf, version=17)
    path.write_bytes(buf.getvalue())


def build_pdfs() -> None:
    import pypdfium2 as pdfium

    # text PDFs: the first pages of two real manuals, plus one scanned-like page (an image only) in the second
    _, tasn = _pdf_pages(PDFS["libtasn1.pdf"], [0, 1, 2])
    _save_pdf(tasn, HERE / "libtasn1-excerpt.pdf")
    src, mime = _pdf_pages(PDFS["shared-mime-info-spec.pdf"], [0, 1, 2])
    scan = _image_page(src, 3)
    mime.import_pages(scan, [0])
    _save_pdf(mime, HERE / "shared-mime-info-excerpt.pdf")
    # a scanned PDF: its pages are images, no text layer at all
    _save_pdf(_image_page(src, 1), HERE / "scanned.pdf")


def _image_page(src, index: int):
    """A one-page PDF holding page ``index`` of ``src`` as a greyscale image (as a scanner makes it)."""
    import pypdfium2 as pdfium

    page = src[index]
    width, height = page.get_size()
    bitmap = page.render(scale=0.6, grayscale=True)
    new = pdfium.PdfDocument.new()
    out = new.new_page(width, height)
    image = pdfium.PdfImage.new(new)
    buf = io.BytesIO()
    bitmap.to_pil().convert("L").save(buf, format="JPEG", quality=40)
    buf.seek(0)
    image.load_jpeg(buf, inline=True)
    image.set_matrix(pdfium.PdfMatrix().scale(width, height))
    out.insert_obj(image)
    out.gen_content()
    return new


def build_docx() -> None:
    """A DOCX of a real text (Node.js's punycode API page, as Markdown): headings, paragraphs, a list, a table."""
    import docx
    import datetime

    md = (NODE / "punycode.md").read_text(encoding="utf-8")
    d = docx.Document()
    d.core_properties.title = "Punycode | Node.js API"
    d.core_properties.author = "Node.js contributors"
    fixed = datetime.datetime(2024, 5, 1, 12, 0, 0)
    d.core_properties.created = d.core_properties.modified = fixed
    d.core_properties.last_modified_by = "corpusmill"
    d.core_properties.revision = 1
    in_code = False
    for line in md.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            d.add_paragraph(line, style="No Spacing")
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            d.add_heading(line.lstrip("#").strip().strip("`"), level=min(level, 4))
        elif line.startswith(("* ", "- ")):
            d.add_paragraph(line[2:].strip(), style="List Bullet")
        elif line.strip() and not line.startswith("<!--"):
            d.add_paragraph(line.strip())
    table = d.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Function", "Purpose"), ("punycode.encode", "Unicode to Punycode ASCII"),
                                ("punycode.decode", "Punycode ASCII to Unicode")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    buf = io.BytesIO()
    d.save(buf)
    (HERE / "punycode.docx").write_bytes(_fixed_zip(buf.getvalue()))


def _fixed_zip(data: bytes) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2024, 5, 1, 12, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(fixed, src.read(info.filename))
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--encrypted-with", help="a Python interpreter with pypdf, to write encrypted.pdf")
    args = ap.parse_args()
    (HERE / "pages.warc.gz").write_bytes(build_warc())
    from resiliparse.extract.html2text import extract_plain_text

    wet_pages = [(url, extract_plain_text(path.read_text(encoding="utf-8"), main_content=True)) for url, path in PAGES]
    (HERE / "pages.warc.wet.gz").write_bytes(build_wet(wet_pages))
    (HERE / "pages.arc.gz").write_bytes(build_arc(PAGES[:3]))
    html = HERE / "html"
    html.mkdir(exist_ok=True)
    (html / "string_decoder.html").write_bytes((NODE / "string_decoder.html").read_bytes())
    (html / "ch03-01-variables-and-mutability.htm").write_bytes((RUST_BOOK / "ch03-01-variables-and-mutability.html")
                                                                .read_bytes())
    (html / "no-body.html").write_bytes(NO_BODY)
    md = HERE / "markdown"
    md.mkdir(exist_ok=True)
    (md / "npm-ls.md").write_bytes((NPM_DOCS / "commands" / "npm-ls.md").read_bytes())
    (md / "string_decoder.markdown").write_bytes((NODE / "string_decoder.md").read_bytes())
    build_pdfs()
    build_docx()
    if args.encrypted_with:
        # a document title in the information dictionary, as most PDFs carry one (these two manuals do not)
        code = ("import sys, pypdf; r = pypdf.PdfReader(sys.argv[1]); w = pypdf.PdfWriter(clone_from=r); "
                "w.add_metadata({'/Title': 'The Shared MIME-info Database (excerpt)'}); w.write(sys.argv[1])")
        subprocess.run([args.encrypted_with, "-c", code, str(HERE / "shared-mime-info-excerpt.pdf")], check=True)
        code = ("import sys, pypdf; r = pypdf.PdfReader(sys.argv[1]); w = pypdf.PdfWriter(); "
                "[w.add_page(p) for p in r.pages]; w.add_metadata({'/Title': 'libtasn1 excerpt'}); "
                "w.encrypt('corpusmill', algorithm='AES-128'); w.write(sys.argv[2])")
        subprocess.run([args.encrypted_with, "-c", code, str(HERE / "libtasn1-excerpt.pdf"),
                        str(HERE / "encrypted.pdf")], check=True)
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"tests/data/raw: {total} bytes")


if __name__ == "__main__":
    os.chdir(HERE)
    main()

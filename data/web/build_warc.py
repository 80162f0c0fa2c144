"""Build the web demo's crawl (data/web/crawl.warc.gz) from real documentation pages, as a crawler writes it.

    python data/web/build_warc.py                                   # the shipped crawl.warc.gz (~2 MB)
    python data/web/build_warc.py --profile large --out /tmp/crawl-large.warc.gz   # ~40 MB of HTML, benchmarks

Run once, by a maintainer, on a machine that has the sources (the Rust toolchain's books under
~/.rustup/toolchains/*/share/doc/rust/html, Debian's nodejs and valgrind docs and libxslt1-dev's HTML manual
under /usr/share/doc); the output is what the repository ships, and nothing reads the sources at run time. The
sources and their licences are listed in data/web/README.md.

What a crawl holds (written with warcio, each record gzipped on its own, as Common Crawl does):
- one ``warcinfo`` record, then per page a ``request`` (GET, HTTP/1.1) and a ``response`` (HTTP/1.1 200 OK,
  ``Content-Type: text/html; charset=...``: utf-8 for most pages, ISO-8859-1 for libxslt's pages, which are
  written in it), with plausible URLs (https://doc.rust-lang.org/book/ch01-01-installation.html,
  https://nodejs.org/api/fs.html, https://valgrind.org/docs/manual/..., http://xmlsoft.org/XSLT/...);
- as a real crawl has: non-HTML responses (a stylesheet, a PNG, a JavaScript file), a 404 page, a 301 redirect
  and a ``revisit`` record (a page fetched again, payload unchanged).

Deterministic: the pages are taken in sorted order, WARC-Date is a fixed start plus a few seconds per fetch,
record ids are UUIDs derived from the URL and the record type, and the gzip members carry no timestamp, so the
same sources give the same bytes.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import io
import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

HERE = Path(__file__).resolve().parent
START = datetime(2026, 11, 3, 9, 0, 0, tzinfo=timezone.utc)
NAMESPACE = uuid.UUID("5b7a4c3e-2f0d-4c1e-9a55-3f1c0de0a645")
USER_AGENT = "corpusmill-demo-crawler/1.0 (+https://github.com/corpusmill)"
MAX_PAGE_BYTES = 400_000  # the small crawl leaves out single very large pages (nodejs.org/api/all.html)


def rust_doc() -> Path:
    """The installed Rust toolchain's html docs (the stable toolchain when there are several)."""
    found = sorted(glob.glob(os.path.expanduser("~/.rustup/toolchains/*/share/doc/rust/html")),
                   key=lambda p: ("stable" not in p, p))
    if not found:
        raise SystemExit("no Rust toolchain docs under ~/.rustup/toolchains/*/share/doc/rust/html")
    return Path(found[0])


@dataclass(frozen=True)
class Source:
    name: str
    root: Path
    patterns: tuple[str, ...]   # globs under root
    url_base: str               # URL of root
    charset: str = "utf-8"      # the files' encoding where a page does not declare one (a page's own meta charset wins)
    exclude: tuple[str, ...] = ()


def sources(profile: str) -> list[Source]:
    rust = rust_doc()
    book_skip = ("print.html", "toc.html", "404.html", "SUMMARY.html", "README.html")
    out = [
        Source("rust-book", rust / "book", ("ch*.html", "appendix-*.html", "foreword.html", "title-page.html"),
               "https://doc.rust-lang.org/book/", exclude=book_skip),
        Source("nodejs-api", Path("/usr/share/doc/nodejs/api"), ("*.html",), "https://nodejs.org/api/",
               exclude=("all.html", "index.html")),
        Source("valgrind-manual", Path("/usr/share/doc/valgrind/html"), ("*.html",),
               "https://valgrind.org/docs/manual/"),
        Source("libxslt-manual", Path("/usr/share/doc/libxslt1-dev/html"), ("*.html", "html/*.html"),
               "http://xmlsoft.org/XSLT/", charset="iso-8859-1"),
    ]
    if profile == "large":
        for book in ("cargo", "reference", "rustc", "edition-guide", "nomicon", "embedded-book", "style-guide",
                     "rustdoc", "clippy"):
            out.append(Source(f"rust-{book}", rust / book, ("*.html", "*/*.html", "*/*/*.html"),
                              f"https://doc.rust-lang.org/{book}/", exclude=book_skip))
    return out


def pages(profile: str) -> list[tuple[str, str, bytes, str]]:
    """(source name, URL, bytes, charset) of every page, in a fixed order."""
    out = []
    for src in sources(profile):
        if not src.root.is_dir():
            raise SystemExit(f"{src.name}: {src.root} is not here (see data/web/README.md for the sources)")
        files = sorted({p for pattern in src.patterns for p in src.root.glob(pattern) if p.is_file()})
        for path in files:
            rel = path.relative_to(src.root).as_posix()
            if path.name in src.exclude:
                continue
            data = path.read_bytes()
            if profile == "small" and len(data) > MAX_PAGE_BYTES:
                continue
            if profile == "small" and src.name == "nodejs-api" and len(data) > 160_000:
                continue  # the small crawl: Node's shorter API pages (the long ones are most of its bytes)
            if b"http-equiv=\"refresh\"" in data[:2000]:
                continue  # a redirect stub, not a page
            found = _META_CHARSET.search(data[:2048])
            out.append((src.name, src.url_base + rel, data, found.group(1).decode().lower() if found else src.charset))
    return out


_META_CHARSET = re.compile(rb"charset=[\"']?([A-Za-z0-9_-]+)", re.IGNORECASE)


def _rid(url: str, kind: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(NAMESPACE, kind + ' ' + url)}>"


class Crawl:
    """Writes records with deterministic ids and dates."""

    def __init__(self, fh):
        self.writer = WARCWriter(fh, gzip=True)
        self.tick = 0

    def _date(self) -> str:
        self.tick += 1
        return (START + timedelta(seconds=3 * self.tick)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def warcinfo(self, filename: str, pages_count: int) -> None:
        info = {"software": "corpusmill data/web/build_warc.py (warcio)", "format": "WARC File Format 1.0",
                "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.0/",
                "isPartOf": "corpusmill-web-demo", "description": f"{pages_count} real documentation pages "
                "with the odd non-HTML, error, redirect and revisit record a crawl has",
                "robots": "obey", "http-header-user-agent": USER_AGENT}
        record = self.writer.create_warcinfo_record(filename, info)
        record.rec_headers.replace_header("WARC-Record-ID", _rid(filename, "warcinfo"))
        record.rec_headers.replace_header("WARC-Date", START.strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.writer.write_record(record)

    def fetch(self, url: str, status: str, headers: list[tuple[str, str]], body: bytes) -> str:
        """A request and its response; returns the response's WARC-Date."""
        date = self._date()
        host = url.split("/")[2]
        path = "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"
        req_headers = StatusAndHeaders(f"GET {path} HTTP/1.1", [
            ("Host", host), ("User-Agent", USER_AGENT), ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8"),
            ("Accept-Encoding", "identity"), ("Connection", "close")], is_http_request=True)
        request = self.writer.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=req_headers,
                                                 warc_headers_dict={"WARC-Record-ID": _rid(url, "request"),
                                                                    "WARC-Date": date})
        http_headers = StatusAndHeaders(status, [("Date", _http_date(date)), ("Server", "nginx"),
                                                 *headers, ("Content-Length", str(len(body))),
                                                 ("Connection", "close")], protocol="HTTP/1.1")
        content_type = dict(headers).get("Content-Type", "")
        response = self.writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                  http_headers=http_headers,
                                                  warc_headers_dict={"WARC-Record-ID": _rid(url, "response"),
                                                                     "WARC-Date": date,
                                                                     "WARC-Concurrent-To": _rid(url, "request"),
                                                                     # as Common Crawl does: the payload's type as
                                                                     # identified from its bytes (here: as served)
                                                                     "WARC-Identified-Payload-Type":
                                                                         content_type.split(";")[0].strip()})
        self.writer.write_record(request)
        self.writer.write_record(response)
        return date

    def revisit(self, url: str, original_date: str, body: bytes, content_type: str) -> None:
        """The page fetched again with the same payload: a revisit record (identical-payload-digest profile),
        headers only, referring to the first response."""
        date = self._date()
        http_headers = StatusAndHeaders("200 OK", [("Date", _http_date(date)), ("Server", "nginx"),
                                                   ("Content-Type", content_type),
                                                   ("Content-Length", str(len(body)))], protocol="HTTP/1.1")
        digest = "sha1:" + _base32_sha1(body)
        record = self.writer.create_revisit_record(url, digest, url, original_date, http_headers=http_headers)
        record.rec_headers.replace_header("WARC-Record-ID", _rid(url, "revisit"))
        record.rec_headers.replace_header("WARC-Date", date)
        record.rec_headers.add_header("WARC-Refers-To", _rid(url, "response"))
        self.writer.write_record(record)


def _one(root: Path, pattern: str) -> Path:
    """The first file matching ``pattern`` under ``root`` (asset names carry a content hash that changes with
    the toolchain's version)."""
    found = sorted(root.glob(pattern))
    if not found:
        raise SystemExit(f"no {pattern} under {root}")
    return found[0]


def _base32_sha1(data: bytes) -> str:
    import base64

    return base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def _http_date(warc_date: str) -> str:
    return datetime.strptime(warc_date, "%Y-%m-%dT%H:%M:%SZ").strftime("%a, %d %b %Y %H:%M:%S GMT")


NOT_FOUND = b"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>404 Not Found</title></head>
<body><center><h1>404 Not Found</h1></center><hr><center>nginx</center></body></html>
"""

MOVED = b"""<html><head><title>301 Moved Permanently</title></head>
<body><center><h1>301 Moved Permanently</h1></center><hr><center>nginx</center></body></html>
"""


def build(out: Path, profile: str) -> dict:
    rust = rust_doc()
    all_pages = pages(profile)
    out.parent.mkdir(parents=True, exist_ok=True)
    counts = {"html": 0, "non_html": 0, "not_found": 0, "redirect": 0, "revisit": 0}
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        crawl = Crawl(fh)
        crawl.warcinfo(out.name, len(all_pages))
        first_dates: dict[str, str] = {}
        book = rust / "book"
        extras = {  # after the n-th page: the non-page fetches a crawler meets on the way
            3: ("https://doc.rust-lang.org/book/css/{}", "text/css", _one(book, "css/general-*.css")),
            7: ("https://doc.rust-lang.org/book/img/ferris/{}", "image/svg+xml",
                _one(book, "img/ferris/does_not_compile.svg")),
            11: ("https://doc.rust-lang.org/{}", "image/png", _one(rust, "favicon-32x32.png")),
            15: ("https://doc.rust-lang.org/book/{}", "application/javascript", _one(book, "clipboard-*.min.js")),
        }
        for i, (name, url, data, charset) in enumerate(all_pages):
            content_type = f"text/html; charset={charset.upper() if charset != 'utf-8' else 'utf-8'}"  # as sent
            first_dates[url] = crawl.fetch(url, "200 OK", [("Content-Type", content_type)], data)
            counts["html"] += 1
            if i in extras:
                x_url, ctype, path = extras[i]
                crawl.fetch(x_url.format(path.name), "200 OK", [("Content-Type", ctype)], path.read_bytes())
                counts["non_html"] += 1
            if i == 20:
                crawl.fetch("https://doc.rust-lang.org/book/ch99-00-missing.html", "404 Not Found",
                            [("Content-Type", "text/html; charset=utf-8")], NOT_FOUND)
                counts["not_found"] += 1
            if i == 30:
                crawl.fetch("http://nodejs.org/api/", "301 Moved Permanently",
                            [("Content-Type", "text/html"), ("Location", "https://nodejs.org/api/")], MOVED)
                counts["redirect"] += 1
        # a later pass over the site finds the first page unchanged: a revisit record, no payload
        name, url, data, charset = all_pages[0]
        crawl.revisit(url, first_dates[url], data, f"text/html; charset={charset}")
        counts["revisit"] += 1
    os.replace(tmp, out)
    return {"pages": len(all_pages), "html_bytes": sum(len(p[2]) for p in all_pages),
            "bytes": out.stat().st_size, **counts,
            "by_source": {s: sum(1 for p in all_pages if p[0] == s) for s in dict.fromkeys(p[0] for p in all_pages)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("small", "large"), default="small",
                        help="small: the shipped demo crawl; large: ~40 MB of HTML for benchmarks (not shipped)")
    parser.add_argument("--out", type=Path, default=HERE / "crawl.warc.gz")
    args = parser.parse_args()
    summary = build(args.out, args.profile)
    print(f"wrote {args.out}: {summary['bytes']:,} bytes, {summary['pages']} pages "
          f"({summary['html_bytes']:,} bytes of HTML), {summary['non_html']} non-HTML, {summary['not_found']} 404, "
          f"{summary['redirect']} 301, {summary['revisit']} revisit; by source: {summary['by_source']}")


if __name__ == "__main__":
    main()

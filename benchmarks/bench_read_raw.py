"""The WARC reader's cost against bare archive iteration, interleaved, CPU and wall.

    .venv/bin/python benchmarks/bench_read_raw.py [--rounds 5] [--copies 3]

Builds (in a temporary folder) a WARC shaped like a crawl's: per page a request, a response and a metadata
record (gzip per record, written by warcio), from the real HTML pages on the machine (Node.js API docs and the
Rust books: several hundred pages), repeated ``--copies`` times under other URLs. Then, in rounds A B C A B C ...
on the same file, one process:

- A ``corpusmill``: ``beamio.read.read_file_indexed`` (FastWARC; every record a document, a skip or a quarantine;
  HTTP status and content type read; charset from header/meta/detection with undecodable bytes counted; title;
  no-body check; truncation checks);
- B ``fastwarc bare``: FastWARC's ArchiveIterator over response records, payload read and decoded as UTF-8 with
  replacement (the least any reader does);
- C ``warcio``: warcio's ArchiveIterator (what datatrove's ``WarcReader`` iterates with), response records'
  content read and decoded as UTF-8 with replacement.

Figures: compressed MB of WARC (and MB of the HTML it holds) per CPU-second of the process (``time.process_time``) and per wall-second, the
median over rounds, and the ratio of each to A in the same run.
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_warc(path: str, copies: int) -> tuple[int, int, int]:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    pages = sorted(glob.glob("/usr/share/doc/nodejs/api/*.html"))
    pages += sorted(glob.glob("/root/.rustup/toolchains/stable*/share/doc/rust/html/book/*.html"))
    pages += sorted(glob.glob("/root/.rustup/toolchains/stable*/share/doc/rust/html/rust-by-example/*/*.html"))
    n = html_bytes = 0
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for copy in range(copies):
            for page in pages:
                body = open(page, "rb").read()
                html_bytes += len(body)
                url = f"https://example{copy}.org/{os.path.basename(os.path.dirname(page))}/{os.path.basename(page)}"
                writer.write_record(writer.create_warc_record(url, "request", payload=io.BytesIO(b""), length=0,
                                                              warc_content_type="application/http; msgtype=request"))
                http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                                   ("Content-Length", str(len(body)))], protocol="HTTP/1.1")
                writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                              length=len(body), http_headers=http))
                meta = b"fetchTimeMs: 120\r\n"
                writer.write_record(writer.create_warc_record(url, "metadata", payload=io.BytesIO(meta),
                                                              length=len(meta),
                                                              warc_content_type="application/warc-fields"))
                n += 1
    return n, os.path.getsize(path), html_bytes


def run_corpusmill(path: str) -> int:
    from beamio.config_base import InputConfig
    from beamio.read import InputFile, read_file_indexed

    source = InputFile(path, os.path.basename(path), "bench", os.path.getsize(path))
    return sum(1 for _, item in read_file_indexed(path, InputConfig(paths=[path]), source) if isinstance(item, dict))


def run_fastwarc(path: str) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    n = 0
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
            record.reader.read().decode("utf-8", errors="replace")
            n += 1
    return n


def run_warcio(path: str) -> int:
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh):
            if record.rec_type == "response":
                record.content_stream().read().decode("utf-8", errors="replace")
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--copies", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "crawl.warc.gz")
        pages, size, html_bytes = build_warc(path, args.copies)
        print(f"WARC: {pages} pages x 3 records, {size / 1e6:.1f} MB compressed, {html_bytes / 1e6:.1f} MB of HTML; "
              f"load average "
              f"{os.getloadavg()[0]:.2f}")
        runs = {"corpusmill": run_corpusmill, "fastwarc bare": run_fastwarc, "warcio": run_warcio}
        cpu = {k: [] for k in runs}
        wall = {k: [] for k in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                c0, w0 = time.process_time(), time.perf_counter()
                docs = fn(path)
                cpu[name].append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - w0)
                assert docs == pages, (name, docs, pages)
        mb = size / 1e6
        base_cpu, base_wall = statistics.median(cpu["corpusmill"]), statistics.median(wall["corpusmill"])
        print("| reader | WARC MB/CPU-s | HTML MB/CPU-s | WARC MB/wall-s | CPU vs corpusmill | wall vs corpusmill |")
        print("|---|---|---|---|---|---|")
        for name in runs:
            c, w = statistics.median(cpu[name]), statistics.median(wall[name])
            print(f"| {name} | {mb / c:.1f} | {html_bytes / 1e6 / c:.1f} | {mb / w:.1f} | {c / base_cpu:.2f} | "
                  f"{w / base_wall:.2f} |")


if __name__ == "__main__":
    main()

"""Reading corpora into document records, with every unreadable input quarantined with a reason.

Inputs: JSONL (optionally .gz/.zst/.bz2), Parquet, and plain-text files (one document each), from local paths
or any Beam FileSystems URI (gs://, s3://, hdfs:// when the matching extras are installed). Each file is read
by one worker; a document's id is a stable hash of its file's URI and its position in that file.

The parsing is plain Python (``read_file``); ``ReadCorpus`` runs it in Beam for the pipelines, and
``iter_records`` runs it in this process for commands that work on documents one batch at a time, so every
command accepts the same inputs and quarantines the same records for the same reasons.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from pipelines.config import ConfigError, InputConfig
from transforms.progress import ProgressFile

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".zst", ".bz2", ".deflate", ".xz")
_GLOB_CHARS = set("*?[")
_READ_CHUNK = 1 << 20
_SNIFF_BYTES = 8192


def doc_id(source: str, position: int) -> int:
    """A stable, non-negative int64 id from the source URI and the position in it."""
    digest = hashlib.blake2b(f"{source}\x00{position}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


def detect_format(path: str, configured: str) -> str | None:
    if configured != "auto":
        return configured
    name = path.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".txt"):
        return "text"
    return None


def expand_inputs(paths: list[str]) -> list[str]:
    """Every file named by the configured paths (files, folders, globs), sorted; an empty match is an error."""
    files: list[str] = []
    for index, path in enumerate(paths):
        if _GLOB_CHARS & set(path):
            patterns = [path]
        else:
            patterns = [path.rstrip("/") + "/**", path]
        found: list[str] = []
        for pattern in patterns:
            try:
                result = FileSystems.match([pattern])[0]
            except Exception:  # Beam raises BeamIOError for a missing local path
                continue
            found = [m.path for m in result.metadata_list if not m.path.endswith("/")]
            found = [p for p in found if p.rstrip("/") != path.rstrip("/") or pattern == path]
            if found:
                break
        if not found:
            raise ConfigError(f"input.paths[{index}]: no file matches {path!r}")
        files.extend(found)
    return sorted(set(files))


@dataclass(frozen=True)
class Quarantined:
    source: str
    position: int
    kind: str  # a short category for stats: invalid_json, invalid_utf8, too_large, ...
    reason: str
    byte_offset: int | None = None

    def as_record(self) -> dict:
        return {"id": doc_id(self.source, self.position), "source": self.source, "position": self.position,
                "byte_offset": self.byte_offset, "kind": self.kind, "reason": self.reason}


def _describe(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def make_doc(record: dict, cfg: InputConfig, source: str, position: int) -> dict | tuple[str, str]:
    """The document record for one input record, or (kind, reason) when it cannot be one."""
    if cfg.text_field not in record:
        return "missing_text", f"no {cfg.text_field!r} field"
    text = record[cfg.text_field]
    if not isinstance(text, str):
        return "text_not_a_string", f"{cfg.text_field!r} is {_describe(text)}, not a string"
    if not text.strip():
        return "empty_text", f"{cfg.text_field!r} is empty"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "invalid_unicode", f"{cfg.text_field!r} holds an unpaired surrogate escape: not valid Unicode"
    if size > cfg.max_doc_bytes:
        return "too_large", f"document of {size} bytes exceeds input.max_doc_bytes={cfg.max_doc_bytes}"
    meta = {k: v for k, v in record.items() if k != cfg.text_field}
    return {"id": doc_id(source, position), "text": text, "source": source, "meta": meta, "annotations": {}}


def iter_lines(fh, max_bytes: int) -> Iterator[tuple[int, int, bytes | None, int]]:
    """(line number from 1, byte offset, line bytes or None when longer than max_bytes, length) per line.

    A line longer than the limit is skipped in chunks, never held whole in memory.
    """
    line_no, offset = 0, 0
    buf = bytearray()
    oversized = False
    length = 0
    while True:
        chunk = fh.read(_READ_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            length += len(piece)
            if not oversized:
                buf += piece
                if len(buf) > max_bytes:
                    oversized = True
                    buf = bytearray()
            if nl < 0:
                break
            line_no += 1
            yield line_no, offset, (None if oversized else bytes(buf)), length
            offset += length + 1
            buf, oversized, length = bytearray(), False, 0
            start = nl + 1
    if length or buf:
        line_no += 1
        yield line_no, offset, (None if oversized else bytes(buf)), length


# Each parser yields (record index in the file from 0, document or Quarantined). The index is what a person
# counts in the file (JSONL line - 1, Parquet row); the document id hashes the reader's own position.

def parse_jsonl(fh, path: str, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    for line_no, offset, raw, length in iter_lines(fh, cfg.max_doc_bytes + 1024):
        index = line_no - 1
        if raw is None:
            yield index, Quarantined(path, line_no, "too_large", f"line of {length} bytes exceeds "
                                                                 f"input.max_doc_bytes={cfg.max_doc_bytes}", offset)
            continue
        if not raw.strip():
            continue  # blank lines separate nothing and hold no document
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            yield index, Quarantined(path, line_no, "invalid_utf8", f"invalid UTF-8 at byte {err.start} of the line",
                                     offset)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            yield index, Quarantined(path, line_no, "invalid_json", f"not valid JSON: {err.msg} at column {err.colno}",
                                     offset)
            continue
        if not isinstance(record, dict):
            yield index, Quarantined(path, line_no, "not_an_object", f"JSON value is {_describe(record)}, not an "
                                                                     f"object", offset)
            continue
        doc = make_doc(record, cfg, path, line_no)
        yield index, Quarantined(path, line_no, *doc, offset) if isinstance(doc, tuple) else doc


def parse_parquet(fh, path: str, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(fh)
    except Exception as err:  # pyarrow reports corrupt files with several exception types
        yield 0, Quarantined(path, 0, "unreadable_file", f"not a readable Parquet file: {type(err).__name__}")
        return
    if cfg.text_field not in parquet.schema_arrow.names:
        yield 0, Quarantined(path, 0, "missing_text", f"Parquet file has no {cfg.text_field!r} column")
        return
    row = 0
    for batch in parquet.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            doc = make_doc(record, cfg, path, row)
            yield row, Quarantined(path, row, *doc) if isinstance(doc, tuple) else doc
            row += 1


def parse_text(fh, path: str, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    data = fh.read(cfg.max_doc_bytes + 1)
    if len(data) > cfg.max_doc_bytes:
        yield 0, Quarantined(path, 0, "too_large", f"file exceeds input.max_doc_bytes={cfg.max_doc_bytes}")
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        yield 0, Quarantined(path, 0, "invalid_utf8", f"invalid UTF-8 at byte {err.start}")
        return
    doc = make_doc({"text": text, "path": path}, cfg.model_copy(update={"text_field": "text"}), path, 0)
    yield 0, Quarantined(path, 0, *doc) if isinstance(doc, tuple) else doc


PARSERS = {"jsonl": parse_jsonl, "parquet": parse_parquet, "text": parse_text}


def read_file_indexed(path: str, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    """(record index in the file, document or Quarantined) for every record of one input file; a problem
    with the file as a whole is one Quarantined (index 0, or -1 when it is found after some records)."""
    fmt = detect_format(path, cfg.format)
    if fmt is None:
        yield 0, Quarantined(path, 0, "unsupported_file", "unsupported file type (expected .jsonl[.gz|.zst], "
                                                          ".parquet or .txt)")
        return
    compression = CompressionTypes.UNCOMPRESSED if fmt == "parquet" else CompressionTypes.AUTO
    try:
        fh = FileSystems.open(path, compression_type=compression)
    except Exception as err:  # the filesystem layer raises per-backend error types
        yield 0, Quarantined(path, 0, "unreadable_file", f"cannot open: {type(err).__name__}")
        return
    with fh:
        if fmt != "parquet":
            try:
                head = fh.read(_SNIFF_BYTES)
            except Exception as err:  # a corrupt compressed stream fails on the first read
                yield 0, Quarantined(path, 0, "unreadable_file", f"cannot read: {type(err).__name__}: not a valid "
                                                                 f"compressed file?")
                return
            if b"\x00" in head:
                yield 0, Quarantined(path, 0, "binary_file", "binary content (NUL bytes) in a text file")
                return
            fh = _Prepended(head, fh)
        try:
            yield from PARSERS[fmt](fh, path, cfg)
        except (OSError, EOFError, ValueError) as err:
            yield -1, Quarantined(path, -1, "unreadable_file", f"file truncated or corrupt while reading: "
                                                               f"{type(err).__name__}")


def read_file(path: str, cfg: InputConfig) -> Iterator[dict | Quarantined]:
    """Every document of one input file, and a Quarantined for each record that cannot be one."""
    for _, item in read_file_indexed(path, cfg):
        yield item


def iter_records(cfg: InputConfig, files: list[str] | None = None) -> Iterator[tuple[str, int, dict | Quarantined]]:
    """The pipeline's reader without Beam: ``(file, record index, document or Quarantined)`` for every record
    of the configured inputs (``files``: already expanded), file by file in name order."""
    for path in files if files is not None else expand_inputs(cfg.paths):
        for index, item in read_file_indexed(path, cfg):
            yield path, index, item


class _Prepended:
    """A read-only stream that replays bytes already read from the start of another stream."""

    def __init__(self, head: bytes, rest):
        self._head, self._rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if self._head:
            out, self._head = (self._head, b"") if size < 0 or size >= len(self._head) else (
                self._head[:size], self._head[size:])
            return out
        return self._rest.read(size)


class _ReadFileFn(beam.DoFn):
    def __init__(self, cfg: InputConfig, progress_dir: str | None = None):
        self.cfg = cfg
        self.progress_dir = progress_dir
        self._progress = None
        self._docs = Metrics.counter("read", "documents")
        self._quarantined = Metrics.counter("read", "quarantined")
        self._bytes = Metrics.counter("read", "text_bytes")

    def setup(self):
        self._progress = ProgressFile(self.progress_dir, "read")

    def finish_bundle(self):
        self._progress.flush()

    def process(self, path: str):
        for item in read_file(path, self.cfg):
            self._progress.add(1)
            if isinstance(item, Quarantined):
                self._quarantined.inc()
                yield beam.pvalue.TaggedOutput("quarantined", item.as_record())
            else:
                self._docs.inc()
                self._bytes.inc(len(item["text"].encode("utf-8")))
                yield item


class ReadCorpus(beam.PTransform):
    """Expand the configured paths, then read each file into documents; unreadable input is quarantined.

    Returns ``{"docs": PCollection[Doc], "quarantined": PCollection[dict]}``.
    """

    def __init__(self, cfg: InputConfig, files: list[str] | None = None, progress_dir: str | None = None):
        super().__init__()
        self.cfg = cfg
        self.files = files if files is not None else expand_inputs(cfg.paths)
        self.progress_dir = progress_dir

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "ListFiles" >> beam.Create(self.files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFileFn(self.cfg, self.progress_dir)).with_outputs("quarantined", main="docs")
        )
        # One file is read by one worker; spreading its documents lets every worker clean a share of them.
        docs = outputs.docs | "SpreadDocuments" >> beam.Reshuffle()
        return {"docs": docs, "quarantined": outputs.quarantined}

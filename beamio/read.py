"""Reading corpora into document records, with every unreadable input quarantined with a reason.

Inputs: JSONL (optionally .gz/.zst/.bz2/.xz/.deflate), Parquet, and plain-text files (one document each), from
local paths or any Beam FileSystems URI (gs://, s3://, hdfs:// when the matching extras are installed). Each file
is read by one worker.

Ids never depend on how a path is written (``ID_SCHEME``): a document's id is a stable hash of its file's
*content address* (the sha256 of the file's bytes) and its position in that file, so the same file read as a
relative path, an absolute path, from another working directory, after a move or from a bucket gives the same
ids. A record's ``source`` is the file's path relative to the configured input it matched (a folder: relative
to the folder; a glob: relative to the directory before the first wildcard; a file: its name), equally
independent of the spelling. Two byte-identical input files are read once (the second is reported as a
duplicate), so ids stay unique.

Compressed files are decompressed here, not by Beam's reader, so that a file that ends before its compressed
stream does (a truncated download, a file still being written) is quarantined as ``truncated_file`` with the
line where it is cut, instead of passing off its last, half line as bad JSON or its missing tail as nothing.

The parsing is plain Python (``read_file``); ``ReadCorpus`` (``beamio.read_beam``, which imports this module)
runs it in Beam for the pipelines, and ``iter_records`` runs it in this process for commands that work on
documents one batch at a time, so every command accepts the same inputs and quarantines the same records for
the same reasons.
"""
from __future__ import annotations

import base64
import bz2
import codecs
import datetime
import decimal
import glob
import json
import lzma
import math
import os
import posixpath
import zlib
from typing import Iterator, Sequence

from beamio.config_base import ConfigError, InputConfig
from beamio.read_docs import parse_docx, parse_markdown, parse_pdf
from beamio.read_web import byte_order_mark, parse_archive, parse_html_file
from beamio.records import (InputFile, Quarantined, Skipped, _basename, _filesystems, _size_of,  # noqa: F401
                            doc_id)
from runio.files import is_uri, sha256_file


def _open_bytes(path: str):
    if not is_uri(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".deflate", ".xz")
# raw sources (beamio.read_web, beamio.read_docs): suffix → format, checked after a compression suffix is removed
RAW_SUFFIXES = {".warc": "warc", ".wet": "warc", ".arc": "arc", ".html": "html", ".htm": "html", ".xhtml": "html",
                ".pdf": "pdf", ".docx": "docx", ".md": "markdown", ".markdown": "markdown"}
SINGLE_DOCUMENT_FORMATS = ("text", "html", "pdf", "docx", "markdown")  # one document per file, at position 0
UNSUPPORTED_REASON = (f"unsupported file type (expected {' '.join(JSONL_SUFFIXES)}, .parquet, .txt, "
                      f"{' '.join(RAW_SUFFIXES)}, each but .parquet, .pdf and .docx may be compressed: "
                      f"{' '.join(COMPRESSION_SUFFIXES)}; or set input.format)")
_GLOB_CHARS = set("*?[")
_READ_CHUNK = 1 << 20
_RAW_CHUNK = 1 << 16
_SNIFF_BYTES = 8192

# Recorded in the run manifest: how ids and sources are derived, so a reader of the outputs can recompute them.
ID_SCHEME = {
    "id": "int64 = first 8 bytes of blake2b(digest_size=8) of '<key>\\0<position>' (big endian) & 0x7FFF_FFFF_FFFF_FFFF",
    "key": "sha256 of the input file's bytes (content address: independent of the path's spelling, the working "
           "directory and the file's location)",
    "position": "JSONL: line number from 1; Parquet: row from 0; WARC/WET/ARC: record index from 0, every record "
                "counted (skipped ones too); text, HTML, PDF, DOCX, Markdown file: 0",
    "source": "the file's path relative to the configured input it matched (folder: relative to it; glob: "
              "relative to the directory before the first wildcard; file: its name)",
}


def is_text_file(name: str) -> bool:
    """Whether the reader takes ``name`` (a path or a ``source``) as one document, the whole file (a text,
    HTML, PDF, DOCX or Markdown file)."""
    return detect_format(name, "auto") in SINGLE_DOCUMENT_FORMATS


def record_position(path: str, index: int, cfg: InputConfig) -> int:
    """The place of a file's record at ``index`` (from 0, as the parsers count) as quarantine records and the
    commands' lines name it: a JSONL line number from 1, a Parquet row from 0, a WARC/ARC record index from 0,
    0 for a single-document file (text, HTML, PDF, DOCX, Markdown)."""
    fmt = detect_format(path, cfg.format)
    return index + 1 if fmt == "jsonl" else 0 if fmt in SINGLE_DOCUMENT_FORMATS else index


def reported_id(doc: dict, id_field: str | None, default=None):
    """The id an analysis command (``corpusmill dedup``, ``pii``, ``quality``) reports for a document: its
    ``id_field``; without one, the ``source`` name of a text file (the file is the document: its name is what a
    user finds it by), else ``default`` (the internal id, or None for a command that skips the document)."""
    meta = doc.get("meta") or {}
    if id_field and id_field in meta:
        return meta[id_field]
    source = doc.get("source")
    if source is not None and is_text_file(source):
        return source
    return default


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
    for suffix, fmt in RAW_SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    return None


def _glob_base(pattern: str) -> str:
    """The directory part of a glob before its first wildcard (``data/**/x*.gz`` → ``data``)."""
    cut = min(pattern.index(c) for c in _GLOB_CHARS if c in pattern)
    prefix = pattern[:cut]
    if prefix.endswith("/"):
        return prefix.rstrip("/") or "/"
    base = posixpath.dirname(prefix) if is_uri(prefix) else os.path.dirname(prefix)
    return base or "."


def _relative(path: str, base: str) -> str:
    """``path`` relative to ``base`` in POSIX form, whichever way either is spelled (local paths are made
    absolute first; URIs are compared as written)."""
    if is_uri(path):
        return posixpath.relpath(path.split("://", 1)[1], base.split("://", 1)[1] if is_uri(base) else base)
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    return rel.replace(os.sep, "/")


def _is_hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


def _only_missing(err: Exception) -> bool:
    """A match that failed because the path is not there (Beam's ``BeamIOError`` wrapping ``FileNotFoundError``
    per pattern): that is "no file matches". Anything else (an unknown scheme, a filesystem whose extra is not
    installed, no credentials, no permission) is an error the user must see, never an empty input."""
    details = getattr(err, "exception_details", None) or {}
    return bool(details) and all(isinstance(e, FileNotFoundError) for e in details.values())


def _match_entry(index: int, path: str, hidden: list | None = None) -> list[tuple[str, str]]:
    """(file, name) for every file one configured entry names: a glob, a folder (recursively) or a file. In a
    folder, hidden files and folders (names starting with '.': .git, .DS_Store, an editor's swap file) are left
    out, as a glob leaves them out; their names go to ``hidden``."""
    if _GLOB_CHARS & set(path) and not is_uri(path):
        # Python's recursive glob, as a shell's globstar and fsspec read it: `**/` matches no folder too
        # (`data/**/*.txt` names data/a.txt as well as data/x/b.txt; Beam's matcher misses the first).
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not found:
            raise ConfigError(f"input.paths[{index}]: no file matches {path!r}")
        base = _glob_base(path)
        return [(p, _relative(p, base)) for p in found]
    if _GLOB_CHARS & set(path):
        patterns, base = [path], _glob_base(path)
    elif not is_uri(path) and os.path.isfile(path):  # one local file: no match needed
        return [(path, _basename(path))]
    elif not is_uri(path) and os.path.isdir(path):  # a local folder: its files, none when it holds none yet
        base = path.rstrip(os.sep) or os.sep
        found, left_out = [], []
        walked = {os.path.realpath(base)}
        # Linked folders are walked (a corpus assembled from links to other disks would otherwise be read as
        # empty, without a word); one whose real folder was walked already (a link back up: a loop) is not again.
        for root, folders, names in os.walk(base, followlinks=True):
            left_out += [os.path.join(root, name) + os.sep for name in folders if name.startswith(".")]
            folders[:] = [name for name in folders if not name.startswith(".")]  # hidden ones not walked into
            real = [os.path.realpath(os.path.join(root, name)) for name in folders]
            folders[:] = [name for name, target in zip(folders, real) if target not in walked]
            walked.update(real)
            for name in names:
                (left_out if name.startswith(".") else found).append(os.path.join(root, name))
        if hidden is not None:
            hidden.extend(_relative(p, base) + ("/" if p.endswith(os.sep) else "") for p in left_out)
        return [(p, _relative(p, base)) for p in sorted(found)]
    else:
        patterns, base = [path.rstrip("/") + "/**", path], None
    for pattern in patterns:
        try:
            result = _filesystems().match([pattern])[0]
        except Exception as err:  # noqa: BLE001 - each Beam filesystem raises its own types; all end in one line
            if _only_missing(err):
                continue
            raise ConfigError(f"input.paths[{index}]: {path!r} cannot be listed ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else 'no message'})") from None
        found = [m.path for m in result.metadata_list if not m.path.endswith("/")]
        found = [p for p in found if p.rstrip("/") != path.rstrip("/") or pattern == path]
        if not found:
            continue
        if base is not None:
            entry_base = base
        elif pattern == path:  # a single file: named by its base name
            return [(found[0], _basename(found[0]))]
        else:  # a folder: hidden files and folders left out, as above
            entry_base = path.rstrip("/") or "/"
            named = [(p, _relative(p, entry_base)) for p in found]
            if hidden is not None:
                hidden.extend(name for _, name in named if _is_hidden(name))
            return [(p, name) for p, name in named if not _is_hidden(name)]
        return [(p, _relative(p, entry_base)) for p in found]
    raise ConfigError(f"input.paths[{index}]: no file matches {path!r}")


def _matched(paths: Sequence[str], hidden: list | None = None) -> list[tuple[str, str]]:
    """(file, name) of every file the configured paths name, sorted by name, each file once (the hidden ones
    left out of folders: to ``hidden``)."""
    by_file: dict[str, str] = {}
    for index, path in enumerate(paths):
        for file, name in _match_entry(index, path, hidden):
            by_file.setdefault(file, name)
    names = list(by_file.values())
    if len(set(names)) < len(names):
        # Two files with the same relative name (e.g. a/part-0.jsonl and b/part-0.jsonl given as two entries):
        # name every file relative to the deepest folder holding them all, which tells them apart.
        local = [f for f in by_file if not is_uri(f)]
        if len(local) == len(by_file):
            common = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in by_file])
            by_file = {f: _relative(f, common) for f in by_file}
        else:
            by_file = {f: f.split("://", 1)[-1] for f in by_file}
    return sorted(by_file.items(), key=lambda item: (item[1], item[0]))


def expand_inputs(paths: list[str]) -> list[str]:
    """Every file named by the configured paths (files, folders, globs), sorted; an empty match is an error."""
    return sorted({file for file, _ in _matched(paths)})


def resolve_inputs(paths: Sequence[str], log=None, on_twin=None) -> list[InputFile]:
    """The input files of the configured paths, each with its ``source`` name and content key, in name order.

    Every file is read once to hash it. A file byte-identical to one listed before it is left out (its records
    would be the same documents, with the same ids), said through ``log`` and passed to ``on_twin(left_out,
    read)`` when given."""
    files: list[InputFile] = []
    seen: dict[str, InputFile] = {}
    hidden: list[str] = []
    matched = _matched(paths, hidden)
    if hidden and log is not None:
        shown = ", ".join(sorted(hidden)[:3]) + (", ..." if len(hidden) > 3 else "")
        log(f"{len(hidden)} hidden file(s) or folder(s) in the input folders left out (names starting with '.': "
            f"{shown})")
    for file, name in matched:
        try:
            item = InputFile(file, name, sha256_file(file), _size_of(file))
        except OSError as err:  # a dangling link, a link loop, no permission: named in one line, not a traceback
            raise ConfigError(f"input file {file!r} cannot be read ({type(err).__name__}: "
                              f"{err.strerror or err})") from None
        if item.key in seen:
            if log is not None:
                log(f"input {file} is byte-identical to {seen[item.key].path}: read once")
            if on_twin is not None:
                on_twin(item, seen[item.key])
            continue
        seen[item.key] = item
        files.append(item)
    return files


def _as_input_files(files: Sequence[InputFile | str]) -> list[InputFile]:
    return [f if isinstance(f, InputFile) else InputFile.of(f) for f in files]


def _describe(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(
        type(value), type(value).__name__)


def make_doc(record: dict, cfg: InputConfig, source: InputFile, position: int) -> dict | tuple[str, str]:
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
    return {"id": doc_id(source.key, position), "text": text, "source": source.name, "meta": meta,
            "annotations": {}}


def iter_lines(fh, max_bytes: int, first_line: int = 1, first_offset: int = 0
               ) -> Iterator[tuple[int, int, bytes | None, int]]:
    """(line number from 1, byte offset, line bytes or None when longer than max_bytes, length) per line.

    A line longer than the limit is skipped in chunks, never held whole in memory. ``first_line`` and
    ``first_offset``: the number and offset of ``fh``'s first line in its file (``fh`` a part of it).
    """
    line_no, offset = first_line - 1, first_offset
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


# ------------------------------------------------------------------------------------- compressed input


class TruncatedInput(EOFError):
    """A compressed file ended before its compressed stream did; ``decompressed`` bytes came out before."""

    def __init__(self, path: str, decompressed: int):
        super().__init__(f"{path}: compressed stream ends early after {decompressed} decompressed bytes")
        self.decompressed = decompressed


class CorruptInput(ValueError):
    """A compressed stream that does not decompress (bad header, bad checksum, garbage after the data)."""


def _compression_of(path: str) -> str | None:
    name = path.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return suffix[1:].replace("zstd", "zst")
    return None


def _new_decompressor(kind: str):
    if kind == "gz":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS)
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor()
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


class _Decompressed:
    """A read-only stream of the decompressed bytes of ``raw``, over concatenated members/frames. ``read(n)``
    returns ``n`` bytes unless the data ends; when the file ends inside a compressed stream, the bytes before
    are returned first and the next read raises ``TruncatedInput``."""

    def __init__(self, raw, kind: str, path: str):
        self._raw, self._kind, self._path = raw, kind, path
        self._decompressor = _new_decompressor(kind)
        self._member_started = False  # the current member has consumed input
        self._buffer = bytearray()
        self._pending = b""  # compressed bytes not yet fed
        self._produced = 0
        self._raw_done = False
        self._failure: Exception | None = None

    def _fill(self) -> bool:
        """Decompress more into the buffer; False when the data has ended (cleanly or with a failure set)."""
        while True:
            if not self._pending:
                if self._raw_done:
                    return self._finish()
                self._pending = self._raw.read(_RAW_CHUNK)
                if not self._pending:
                    self._raw_done = True
                    return self._finish()
            if getattr(self._decompressor, "eof", False):
                rest = self._pending
                if self._kind == "gz":
                    rest = rest.lstrip(b"\x00")  # gzip files may be padded with zeros between members
                if not rest:
                    self._pending = b""
                    continue
                if self._kind == "deflate":
                    self._failure = CorruptInput(f"{len(rest)} bytes of data after the end of the deflate stream")
                    return False
                self._decompressor = _new_decompressor(self._kind)
                self._member_started = False
                self._pending = rest
            data, self._pending = self._pending, b""
            try:
                out = self._decompressor.decompress(data)
            except Exception as err:  # zlib.error, OSError (bz2/lzma), zstandard.ZstdError: a corrupt stream
                self._failure = CorruptInput(f"not a valid .{self._kind} stream ({type(err).__name__}: {err})")
                return False
            self._member_started = True
            if getattr(self._decompressor, "eof", False):
                self._pending = self._decompressor.unused_data
            if out:
                self._produced += len(out)
                self._buffer += out
                return True

    def _finish(self) -> bool:
        if self._member_started and not getattr(self._decompressor, "eof", False):
            self._failure = TruncatedInput(self._path, self._produced)
        return False

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self._buffer) < size) and self._failure is None and self._fill():
            pass
        if not self._buffer and self._failure is not None:
            raise self._failure
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        return out

    def close(self) -> None:
        self._raw.close()


def _truncated(source: InputFile, position: int, offset: int, err: TruncatedInput) -> Quarantined:
    """The quarantine record for a file that ends inside its compressed stream: ``position`` is the record
    that is cut off (or, when the data ends between records, the first one missing)."""
    where = (f"record {position} is cut off at decompressed byte {err.decompressed}" if err.decompressed > offset
             else f"the data ends after {err.decompressed} decompressed bytes, before record {position}")
    return Quarantined(source.name, position, "truncated_file",
                       f"the compressed file ends before its compressed stream does (truncated, or still being "
                       f"written): {where}; every record before it was read, any after it are missing",
                       offset, source.key)


def _not_a_json_number(name: str) -> None:
    """``NaN``, ``Infinity`` and ``-Infinity`` (Python's json.dumps writes them; JSON has no such values) are read
    as null, as a Parquet cell's are: kept as floats they reached ``meta`` as the text NaN, which the docs' meta
    column then held as JSON that strict JSON readers (jq, browsers, serde) refuse."""
    return None


# Each parser yields (record index in the file from 0, document or Quarantined). The index is what a person
# counts in the file (JSONL line - 1, Parquet row); the document id hashes the reader's own position.

def parse_jsonl(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    name, key = source.name, source.key
    next_line, next_offset = 1, 0
    try:
        for line_no, offset, raw, length in iter_lines(fh, cfg.max_doc_bytes + 1024, source.first_line,
                                                       source.first_offset):
            next_line, next_offset = line_no + 1, offset + length + 1
            index = line_no - 1
            if raw is None:
                yield index, Quarantined(name, line_no, "too_large", f"line of {length} bytes exceeds "
                                         f"input.max_doc_bytes={cfg.max_doc_bytes}", offset, key)
                continue
            if not raw.strip():
                continue  # blank lines separate nothing and hold no document
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield index, Quarantined(name, line_no, "invalid_utf8", f"invalid UTF-8 at byte {err.start} of the "
                                         f"line", offset, key)
                continue
            if line_no == 1 and line.startswith("\ufeff"):
                line = line[1:]  # the byte order mark Windows tools write before a UTF-8 file's first line
            try:
                record = json.loads(line, parse_constant=_not_a_json_number)
            except json.JSONDecodeError as err:
                yield index, Quarantined(name, line_no, "invalid_json", f"not valid JSON: {err.msg} at column "
                                         f"{err.colno}", offset, key)
                continue
            except RecursionError:  # arrays/objects nested past the parser's recursion limit: one bad line
                yield index, Quarantined(name, line_no, "invalid_json", "JSON nested too deeply to parse", offset,
                                         key)
                continue
            if not isinstance(record, dict):
                yield index, Quarantined(name, line_no, "not_an_object", f"JSON value is {_describe(record)}, not "
                                         f"an object", offset, key)
                continue
            doc = make_doc(record, cfg, source, line_no)
            yield index, Quarantined(name, line_no, *doc, offset, key) if isinstance(doc, tuple) else doc
    except TruncatedInput as err:
        yield next_line - 1, _truncated(source, next_line, next_offset, err)


def json_value(value):
    """A Parquet cell as JSON holds it (a document's ``meta`` is written as JSON): dates and times as ISO 8601
    text, decimals as their exact text, bytes as base64 text, NaN and infinities as null, lists and structs
    element by element; JSON's own types as they are."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # lists, and maps (pyarrow gives them as (key, value) pairs)
        return [json_value(v) for v in value]
    return str(value)


def parse_parquet(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    import pyarrow.parquet as pq

    name, key = source.name, source.key
    try:
        parquet = pq.ParquetFile(fh)
    except Exception as err:  # pyarrow reports corrupt files with several exception types
        yield 0, Quarantined(name, 0, "unreadable_file", f"not a readable Parquet file: {type(err).__name__}", None,
                             key)
        return
    if cfg.text_field not in parquet.schema_arrow.names:
        # one record for the file (its rows are one mistake, not N), saying how many rows it holds and which
        # columns it has: the text is most often under another name (input.text_field / --text-field)
        names = parquet.schema_arrow.names
        shown = ", ".join(repr(n) for n in names[:8]) + (", ..." if len(names) > 8 else "")
        yield 0, Quarantined(name, 0, "missing_text", f"Parquet file has no {cfg.text_field!r} column; none of its "
                             f"{parquet.metadata.num_rows} rows read (its columns: {shown or 'none'})", None, key)
        return
    row = 0
    for batch in parquet.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            doc = make_doc(record, cfg, source, row)
            if isinstance(doc, dict):
                doc["meta"] = json_value(doc["meta"])
            yield row, Quarantined(name, row, *doc, None, key) if isinstance(doc, tuple) else doc
            row += 1


def parse_text(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, dict | Quarantined]]:
    name, key = source.name, source.key
    try:
        data = fh.read(cfg.max_doc_bytes + 1)
        if len(data) <= cfg.max_doc_bytes:
            fh.read(1)  # at the end: a truncated compressed file says so here
    except TruncatedInput as err:
        yield 0, _truncated(source, 0, 0, err)
        return
    if len(data) > cfg.max_doc_bytes:
        yield 0, Quarantined(name, 0, "too_large", f"file exceeds input.max_doc_bytes={cfg.max_doc_bytes}", None, key)
        return
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # a UTF-8 byte order mark is no part of the text
    except UnicodeDecodeError as err:
        yield 0, Quarantined(name, 0, "invalid_utf8", f"invalid UTF-8 at byte {err.start}", None, key)
        return
    doc = make_doc({"text": text, "path": name}, cfg.model_copy(update={"text_field": "text"}), source, 0)
    yield 0, Quarantined(name, 0, *doc, None, key) if isinstance(doc, tuple) else doc


def parse_warc(fh, source: InputFile, cfg: InputConfig):
    """WARC and WET files (``beamio.read_web``)."""
    return parse_archive(fh, source, cfg, "warc")


def parse_arc(fh, source: InputFile, cfg: InputConfig):
    """ARC files (``beamio.read_web``)."""
    return parse_archive(fh, source, cfg, "arc")


PARSERS = {"jsonl": parse_jsonl, "parquet": parse_parquet, "text": parse_text, "warc": parse_warc, "arc": parse_arc,
           "html": parse_html_file, "pdf": parse_pdf, "docx": parse_docx, "markdown": parse_markdown}
# formats whose parser takes the file's raw bytes: archives decompress (gzip per record) themselves, PDF and
# DOCX are binary; the NUL-byte check of text files does not apply to any of them
RAW_BYTE_FORMATS = ("warc", "arc", "pdf", "docx")
RAW_FORMATS = ("warc", "arc", "html", "pdf", "docx", "markdown")


def records_in(fmt: str | None, items: int, last_index: int) -> int:
    """How many records a file held, from what its parser yielded: ``items`` (documents, skips, quarantines)
    and the highest record index among them. A raw archive numbers every record (skipped ones too) from 0, so
    its count is the highest index + 1 whatever was yielded: a record its parser lost without a trace leaves a
    gap, and the accounting check (records = documents + skipped + quarantined) fails. Other formats: one
    record per item (a blank JSONL line is no record)."""
    if fmt in ("warc", "arc"):
        return max(last_index + 1, items)
    return items


def read_file_indexed(path: str, cfg: InputConfig,
                      source: InputFile | None = None) -> Iterator[tuple[int, dict | Quarantined]]:
    """(record index in the file, document or Quarantined) for every record of one input file; a problem
    with the file as a whole is one Quarantined (index 0, or -1 when it is found after some records).
    ``source`` is the file's ``InputFile`` (without it, the file is hashed here and named by its base name)."""
    if source is None:
        try:
            source = InputFile.of(path)
        except Exception as err:  # the filesystem layer raises per-backend error types
            yield 0, Quarantined(_basename(path), 0, "unreadable_file", f"cannot open: {type(err).__name__}")
            return
    name, key = source.name, source.key
    fmt = detect_format(path, cfg.format)
    if fmt is None:
        yield 0, Quarantined(name, 0, "unsupported_file", UNSUPPORTED_REASON, None, key)
        return
    if fmt in SINGLE_DOCUMENT_FORMATS and fmt != "text" and _compression_of(path) is None \
            and source.bytes > cfg.max_record_bytes:
        yield 0, Skipped(name, 0, "too_large", f"file of {source.bytes} bytes exceeds input.max_record_bytes="
                         f"{cfg.max_record_bytes}", None, key)  # never opened
        return
    try:
        fh = _open_bytes(path)
        if source.end is not None:  # a part of a plain JSONL file (``split_jsonl``): its bytes only
            fh = _Range(fh, source.start, source.end)
    except Exception as err:  # the filesystem layer raises per-backend error types
        yield 0, Quarantined(name, 0, "unreadable_file", f"cannot open: {type(err).__name__}", None, key)
        return
    with fh:
        stream = fh
        if fmt in ("pdf", "docx", "parquet") and _compression_of(path) is not None:
            # (a .parquet.gz was opened as Parquet and said to be 'not a readable Parquet file: ArrowInvalid')
            yield 0, Quarantined(name, 0, "unsupported_file", f"a compressed .{fmt} is not read: decompress it "
                                 f"first", None, key)
            return
        if fmt in RAW_BYTE_FORMATS:
            try:
                yield from PARSERS[fmt](fh, source, cfg)
            except (OSError, EOFError, ValueError) as err:
                yield -1, Quarantined(name, -1, "unreadable_file", f"file unreadable while reading: "
                                      f"{type(err).__name__}: {err}", None, key)
            return
        if fmt != "parquet":
            kind = _compression_of(path)
            if kind is not None:
                stream = _Decompressed(fh, kind, path)
            try:
                head = stream.read(_SNIFF_BYTES)
            except TruncatedInput as err:  # nothing at all came out before the file ended
                yield 0, _truncated(source, 1 if fmt == "jsonl" else 0, 0, err)
                return
            except Exception as err:  # a corrupt compressed stream fails on the first read
                yield 0, Quarantined(name, 0, "unreadable_file", f"cannot read: {type(err).__name__}: not a valid "
                                     f"compressed file?", None, key)
                return
            # (a part after the first is never sniffed: the file's head was, when it was cut: split_jsonl)
            wide = _wide_encoding(head) if fmt in ("jsonl", "text") and source.first_offset == 0 else None
            if wide is not None:  # UTF-16/32 with a byte order mark: text, though its head is full of NUL bytes
                stream = _Transcoded(_Prepended(head, stream), wide)
            elif b"\x00" in head and fmt not in RAW_FORMATS and source.first_offset == 0:
                yield 0, Quarantined(name, 0, "binary_file", "binary content (NUL bytes) in a text file", None, key)
                return
            else:
                stream = _Prepended(head, stream)
        try:
            yield from PARSERS[fmt](stream, source, cfg)
        except (OSError, EOFError, ValueError) as err:
            yield -1, Quarantined(name, -1, "unreadable_file", f"file truncated or corrupt while reading: "
                                  f"{type(err).__name__}" + (f" ({err})" if isinstance(err, CorruptInput) else ""),
                                  None, key)


def read_file(path: str, cfg: InputConfig, source: InputFile | None = None) -> Iterator[dict | Quarantined]:
    """Every document of one input file, and a Quarantined for each record that cannot be one."""
    for _, item in read_file_indexed(path, cfg, source):
        yield item


def iter_records(cfg: InputConfig, files: Sequence[InputFile | str] | None = None
                 ) -> Iterator[tuple[str, int, dict | Quarantined]]:
    """The pipeline's reader without Beam: ``(file, record index, document or Quarantined)`` for every record
    of the configured inputs (``files``: already resolved, or plain paths), file by file in name order."""
    for source in resolve_inputs(cfg.paths) if files is None else _as_input_files(files):
        for index, item in read_file_indexed(source.path, cfg, source):
            yield source.path, index, item


def _wide_encoding(head: bytes) -> str | None:
    """The codec of a file whose first bytes are a UTF-16 or UTF-32 byte order mark (as a text editor on Windows
    may save .txt and .jsonl), else None. The mark itself decodes to U+FEFF, which the parsers drop as they drop
    a UTF-8 one."""
    mark = byte_order_mark(head)
    return mark[1] if mark is not None and mark[0] != codecs.BOM_UTF8 else None


class _Transcoded:
    """A read-only byte stream of UTF-8: another stream's text in a wide encoding, decoded as it is read (a
    malformed sequence raises UnicodeDecodeError, a ValueError: the file is quarantined as corrupt)."""

    def __init__(self, raw, codec: str):
        self._raw, self._decoder, self._out = raw, codecs.getincrementaldecoder(codec)(), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._out) < size:
            chunk = self._raw.read(_READ_CHUNK)
            self._out += self._decoder.decode(chunk, final=not chunk).encode("utf-8")
            if not chunk:
                break
        out, self._out = (self._out, b"") if size < 0 else (self._out[:size], self._out[size:])
        return out


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


class _Range:
    """Bytes [start, end) of a seekable stream, read as a stream of their own."""

    def __init__(self, fh, start: int, end: int):
        self._fh, self._left = fh, end - start
        fh.seek(start)

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        out = self._fh.read(self._left if size < 0 else min(size, self._left))
        self._left -= len(out)
        return out

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def splittable(source: InputFile, cfg_format: str = "auto") -> str | None:
    """How ``source`` can be cut into parts: ``"range"`` (a plain JSONL file on this machine's filesystem:
    ``split_jsonl``, byte ranges of the file itself), ``"copy"`` (a compressed JSONL file: a compressed stream
    cannot be entered at a byte offset, so ``split_compressed_jsonl`` decompresses it once into plain part
    files), or None (any other format: it stays whole)."""
    path = source.path
    if source.end is not None or detect_format(path, cfg_format) != "jsonl":
        return None
    if _compression_of(path) is not None:
        return "copy"
    return None if is_uri(path) else "range"


def split_jsonl(source: InputFile, part_bytes: int) -> list[InputFile]:
    """``source`` (``splittable``) cut at line boundaries into parts of at most ``part_bytes`` each (a line
    longer than that is a part of its own): the parts in file order, or ``[source]`` when it fits one part or
    its head holds a NUL byte (the reader quarantines such a file whole as ``binary_file``). Each part knows its
    first line's number, so its documents get the whole file's ids and positions."""
    if source.bytes <= part_bytes:
        return [source]
    with open(source.path, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
        if b"\x00" in head or _wide_encoding(head):  # a newline byte of UTF-16 text is no line boundary
            return [source]
        size = os.fstat(fh.fileno()).st_size
        bounds, start = [0], 0
        while size - start > part_bytes:
            start = _line_end_before(fh, start, start + part_bytes, size)
            bounds.append(start)
        if bounds[-1] != size:
            bounds.append(size)
        parts, line = [], 1
        fh.seek(0)
        for begin, end in zip(bounds, bounds[1:]):
            parts.append(InputFile(source.path, source.name, source.key, end - begin, begin, end, line, begin))
            left = end - begin
            while left:  # the part's lines, counted: the next part's first line
                chunk = fh.read(min(left, _READ_CHUNK))
                line += chunk.count(b"\n")
                left -= len(chunk)
    return parts


def _line_end_before(fh, start: int, limit: int, size: int) -> int:
    """The offset just past the last newline in bytes [start, limit) of the file; when there is none (one line
    longer than the limit), just past the first newline after it, or the file's end."""
    window = limit
    while window > start:
        low = max(start, window - _READ_CHUNK)
        fh.seek(low)
        at = fh.read(window - low).rfind(b"\n")
        if at >= 0:
            return low + at + 1
        window = low
    fh.seek(limit)
    offset = limit
    while offset < size:
        chunk = fh.read(_READ_CHUNK)
        at = chunk.find(b"\n")
        if at >= 0:
            return offset + at + 1
        offset += len(chunk)
    return size


def split_compressed_jsonl(source: InputFile, part_bytes: int, parts_dir: str | None) -> list[InputFile]:
    """A compressed JSONL file (``splittable`` says ``"copy"``) decompressed once, in order, and cut at line
    boundaries into plain files of at most ``part_bytes`` each under ``parts_dir`` (a line longer than that is a
    part of its own): the parts, each knowing its first line's number and decompressed offset, so its documents
    get the whole file's ids and positions. ``[source]`` when it decompresses to no more than ``part_bytes``,
    when its head holds a NUL byte, or when it is truncated or corrupt (the reader then quarantines it as it
    would whole). ``parts_dir`` None: the parts are only counted, nothing is written (their paths are then the
    source's and must not be read). Memory: a read chunk and the line being read, never a part."""
    cutter = _PartWriter(source, part_bytes, parts_dir)
    try:
        with _open_bytes(source.path) as raw:
            stream = _Decompressed(raw, _compression_of(source.path), source.path)
            head = stream.read(_SNIFF_BYTES)
            if b"\x00" in head:
                return [source]
            chunk = head
            while chunk:
                cutter.feed(chunk)
                chunk = stream.read(_READ_CHUNK)
        parts = cutter.finish()
    except (TruncatedInput, CorruptInput, OSError, EOFError):
        # the reader quarantines the file as it would whole (truncated_file, unreadable_file): it is not cut
        cutter.discard()
        return [source]
    if len(parts) == 1:  # it fits one part: read whole, as it is
        cutter.discard()
        return [source]
    return parts


class _PartWriter:
    """Bytes fed in order, written to part files that end at line boundaries, each at most ``part_bytes`` (a
    part that starts with a longer line holds that line alone, written as it comes). Holds back only the bytes
    after the last newline fed: the line being read."""

    def __init__(self, source: InputFile, part_bytes: int, parts_dir: str | None):
        self.source, self.part_bytes, self.parts_dir = source, part_bytes, parts_dir
        self.parts: list[InputFile] = []
        self.written: list[str] = []
        self.pending = bytearray()  # fed after the last newline: not yet in a part
        self.out, self.size, self.lines = None, 0, 0  # the open part
        self.long = False  # the open part is one line longer than a part, still being written
        self.line, self.offset = 1, 0  # the open part's first line and decompressed offset

    def _write(self, data) -> None:
        if self.out is None and self.parts_dir is not None:
            path = os.path.join(self.parts_dir, f"{self.source.key[:16]}-{len(self.parts):05d}.jsonl")
            self.written.append(path)
            self.out = open(path, "wb")
        if self.out is not None:
            self.out.write(data)
        self.size += len(data)
        self.lines += data.count(b"\n")

    def _close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None
        path = self.written[-1] if self.parts_dir is not None else self.source.path
        self.parts.append(InputFile(path, self.source.name, self.source.key, self.size, 0, self.size, self.line,
                                    self.offset))
        self.line, self.offset = self.line + self.lines, self.offset + self.size
        self.size = self.lines = 0

    def feed(self, chunk: bytes) -> None:
        if self.long:  # a line longer than a part, written as it comes until its newline
            newline = chunk.find(b"\n") + 1
            self._write(chunk[:newline] if newline else chunk)
            if not newline:
                return
            self._close()
            self.long, chunk = False, chunk[newline:]
        self.pending += chunk
        while True:
            whole = self.pending.rfind(b"\n") + 1  # the complete lines pending: pending[:whole]
            if self.size + whole <= self.part_bytes:
                if whole:
                    self._write(self.pending[:whole])
                    del self.pending[:whole]
                if self.size + len(self.pending) > self.part_bytes:  # the line being read will not fit
                    if self.size:
                        self._close()
                    if len(self.pending) > self.part_bytes:  # nor fit any part: a part of its own
                        self._write(self.pending)
                        self.pending.clear()
                        self.long = True
                return
            cut = self.pending.rfind(b"\n", 0, self.part_bytes - self.size) + 1
            if not cut and not self.size:  # the first line is longer than a part: a part of its own
                cut = self.pending.find(b"\n") + 1
            if cut:
                self._write(self.pending[:cut])
                del self.pending[:cut]
            self._close()

    def finish(self) -> list[InputFile]:
        if self.pending:  # the last line, without a newline
            if self.size and self.size + len(self.pending) > self.part_bytes:
                self._close()
            self._write(bytes(self.pending))
            self.pending.clear()
        if self.size or not self.parts:
            self._close()
        return self.parts

    def discard(self) -> None:
        if self.out is not None:
            self.out.close()
        for path in self.written:
            os.remove(path)

"""Web sources: WARC (and WET: the crawl's own text), ARC, and HTML files, as document records.

Every record of an archive is accounted for: it becomes a document, a ``Skipped`` record with a reason (request,
metadata and warcinfo records, revisits, non-2xx responses, content types that are not HTML or plain text,
records the crawler truncated (``WARC-Truncated``), records over ``input.max_record_bytes``, empty payloads, HTML
with no body text), or a ``Quarantined`` record (a record cut off by the end of the file, an archive that cannot
be parsed further). A record's position is its index in the file from 0, counting every record, so ids are
stable whatever is skipped.

An HTML response becomes a document whose ``text`` is the decoded HTML and whose ``meta["content_type"]`` is
``text/html`` (the extraction step turns it into main text); a ``text/plain`` response and a WET conversion
record become documents as they are. The charset comes from the HTTP header, then the page's ``<meta charset>``
or ``http-equiv``, then (no declaration, or one the bytes contradict) charset-normalizer's detection; the bytes
are decoded with replacement and the bytes that could not be decoded are counted in ``meta["undecodable_bytes"]``.

WARC files are read with FastWARC (gzip per record, or uncompressed); ARC files with warcio (which converts ARC
records to WARC records as it reads).
"""
from __future__ import annotations

import codecs
import html
import io
import re
import threading
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

from beamio.config_base import InputConfig
from beamio.records import InputFile, Quarantined, Skipped, doc_id

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
SKIP_TYPES = {"request": "request_record", "metadata": "metadata_record", "warcinfo": "warcinfo_record",
              "revisit": "revisit_record", "continuation": "continuation_record"}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.I)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.I | re.S)
_BODY_START = re.compile(r"<body\b|</head\s*>", re.I)
# one token at a time after the body starts: a block whose text is no page text, a comment, a tag, or text
_BODY_TOKEN = re.compile(r"<(script|style|noscript|template|title)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>|([^<]+)",
                         re.I | re.S)
_DECLARED_SNIFF = 4096
_DETECT_BYTES = 1 << 18


# ------------------------------------------------------------------------------------- charset


_counting = threading.local()


def _count_errors(err: UnicodeDecodeError):
    _counting.bad = getattr(_counting, "bad", 0) + (err.end - err.start)
    return "\ufffd", err.end


codecs.register_error("corpusmill-count", _count_errors)


# Labels that browsers decode with a superset (WHATWG Encoding): pages labelled so use the superset's characters.
_AS_BROWSERS_READ = {**dict.fromkeys(("iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii",
                                      "ansi_x3.4-1968", "cp819", "ibm819"), "cp1252"),
                     **dict.fromkeys(("gb2312", "gb_2312-80", "gbk", "x-gbk", "chinese", "csgb2312"), "gb18030"),
                     "big5": "big5hkscs", "shift_jis": "cp932", "sjis": "cp932", "x-sjis": "cp932",
                     "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "iso-8859-9": "cp1254", "latin5": "cp1254",
                     "tis-620": "cp874", "iso-8859-11": "cp874"}


def _codec(name: str | None) -> str | None:
    """The Python codec of a declared charset name, or None when Python does not know it."""
    if not name:
        return None
    name = name.strip().strip("\"'").lower()
    name = _AS_BROWSERS_READ.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def meta_charset(data: bytes) -> str | None:
    """The charset a page declares in its first bytes (``<meta charset>`` or ``http-equiv`` Content-Type)."""
    match = _META_CHARSET.search(data[:_DECLARED_SNIFF])
    return match.group(1).decode("ascii", "replace") if match else None


_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))  # UTF-32 LE before UTF-16 LE

def byte_order_mark(data: bytes) -> tuple[bytes, str] | None:
    """The byte order mark ``data`` starts with and the codec of the text after it, or None."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return bom, codec
    return None


# On a tie (mostly-ASCII pages with a few accented words score the same in every Western code page),
# the encodings the web uses most (WHATWG's legacy default for Western locales first) win.
_TIE_ORDER = ("utf_8", "cp1252", "iso8859_15", "cp1250", "iso8859_2")


def detect_charset(data: bytes) -> str | None:
    """charset-normalizer's best guess; among guesses that score exactly as well, the most common one."""
    from charset_normalizer import from_bytes

    results = list(from_bytes(data))
    if not results:
        return None
    best = results[0]
    tied = [r.encoding for r in results if (r.chaos, r.coherence) == (best.chaos, best.coherence)]
    for name in _TIE_ORDER:
        if name in tied:
            return name
    return best.encoding


def decode_bytes(data: bytes, http_charset: str | None = None, *, sniff_meta: bool = True) -> tuple[str, dict]:
    """(text, meta) for a page's bytes: ``meta`` holds ``charset`` (the codec used), ``charset_source``
    (``bom``, ``http``, ``meta``, ``utf-8`` (no declaration, valid UTF-8) or ``detected``), ``undecodable_bytes``, and
    ``declared_charset`` when a declaration was not used (unknown to Python, or contradicted by the bytes)."""
    mark = byte_order_mark(data)
    if mark is not None:  # a byte order mark decides before any declaration (as browsers read it)
        bom, codec = mark
        _counting.bad = 0
        text = data[len(bom):].decode(codec, errors="corpusmill-count")
        return text, {"charset": codec, "charset_source": "bom", "undecodable_bytes": _counting.bad}
    rejected = None
    for where in ("http", "meta"):
        if where == "http":
            name = http_charset
        else:
            name = meta_charset(data) if sniff_meta else None  # only when the header declares none that works
        if not name:
            continue
        codec = _codec(name)
        if codec is None:
            rejected = rejected or name
            continue
        try:
            return data.decode(codec), {"charset": codec, "charset_source": where, "undecodable_bytes": 0}
        except UnicodeDecodeError:
            rejected = rejected or name  # a lying declaration: detect instead
    meta: dict = {}
    if rejected is not None:
        meta["declared_charset"] = rejected
    try:
        text = data.decode("utf-8")
        return text, {"charset": "utf-8", "charset_source": "utf-8", "undecodable_bytes": 0, **meta}
    except UnicodeDecodeError:
        pass
    # Mostly UTF-8 with a few bad bytes (a page cut and pasted together, one stray Latin-1 byte): UTF-8, the bad
    # bytes replaced and counted. A legacy page is the opposite: (nearly) every non-ASCII byte is invalid UTF-8.
    _counting.bad = 0
    text = data.decode("utf-8", errors="corpusmill-count")
    bad = _counting.bad
    non_ascii = len(data) - len(data.decode("ascii", errors="ignore"))
    if non_ascii - bad >= 9 * bad:
        return text, {"charset": "utf-8", "charset_source": "utf-8", "undecodable_bytes": bad, **meta}
    codec = _codec(detect_charset(data[:_DETECT_BYTES])) or "utf-8"
    _counting.bad = 0
    text = data.decode(codec, errors="corpusmill-count")
    return text, {"charset": codec, "charset_source": "detected", "undecodable_bytes": _counting.bad, **meta}


def html_title(text: str) -> str | None:
    match = _TITLE.search(text, 0, 1 << 20)
    if not match:
        return None
    title = " ".join(html.unescape(match.group(1)).split())
    return title or None


def has_body_text(text: str) -> bool:
    """Whether an HTML page has any text outside its head, scripts, styles and comments (stops at the first)."""
    start = _BODY_START.search(text)
    for match in _BODY_TOKEN.finditer(text, start.start() if start else 0):
        run = match.group(2)
        if run and not run.isspace() and not html.unescape(run).isspace():
            return True
    return False


# ------------------------------------------------------------------------------------- records


@dataclass
class Outcome:
    """What one record becomes: a document (``text`` + ``meta``), or a skip or quarantine (``kind`` + reason)."""

    text: str | None = None
    meta: dict = field(default_factory=dict)
    skip: str | None = None
    quarantine: str | None = None
    reason: str = ""


def _mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def payload_outcome(payload: bytes, content_type: str | None, charset: str | None, meta: dict) -> Outcome:
    """A payload read whole: an HTML or plain-text document, or a skip (empty, HTML with no body text)."""
    mime = _mime(content_type)
    if not payload or payload.isspace():  # (no copy of the payload made to find out)
        return Outcome(skip="empty", reason="the record's payload is empty")
    is_html = mime in HTML_TYPES
    text, charset_meta = decode_bytes(payload, charset, sniff_meta=is_html)
    if text.isspace():
        return Outcome(skip="empty", reason="the record's payload holds only white space")
    meta = {**meta, "content_type": "text/html" if is_html else mime, **charset_meta}
    if is_html:
        if not has_body_text(text):
            return Outcome(skip="no_body", reason="HTML with no body text (only a head, scripts, styles or tags)")
        title = html_title(text)
        if title:
            meta["title"] = title
    return Outcome(text=text, meta=meta)


def _content_kind(mime: str, record_type: str) -> str | None:
    if record_type == "conversion":
        return "text"
    if mime in HTML_TYPES:
        return "html"
    if mime in TEXT_TYPES:
        return "text"
    return None


@dataclass
class _Record:
    """One archive record, library-neutral."""

    type: str
    url: str | None
    date: str | None
    record_id: str | None
    offset: int | None
    status: int | None  # HTTP status (None: not an HTTP record)
    content_type: str | None
    charset: str | None
    length: int | None  # payload bytes the record says it holds (None: not known before reading)
    truncated: str | None  # WARC-Truncated
    read: Callable[[int], bytes]  # read up to n payload bytes
    is_cut: Callable[[int], bool]  # after reading the payload (n bytes came): did the file end inside it?
    extra: dict = field(default_factory=dict)
    transfer_encoding: str | None = None  # as the HTTP headers say: the payload is still encoded
    content_encoding: str | None = None
    skip: Callable[[], int] | None = None  # the library's own way to pass over the payload: bytes passed


def _read_all(rec: _Record) -> bytes:
    chunks = []
    while True:
        chunk = rec.read(1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _consume(rec: _Record) -> int:
    if rec.skip is not None:
        return rec.skip()
    n = 0
    while True:
        chunk = rec.read(1 << 20)
        if not chunk:
            return n
        n += len(chunk)


def record_outcome(rec: _Record, cfg: InputConfig) -> Outcome:
    if rec.type in SKIP_TYPES:
        return _skipped_after_consume(rec, SKIP_TYPES[rec.type], f"a WARC {rec.type} record")
    if rec.type not in ("response", "resource", "conversion"):
        return Outcome(quarantine="corrupt_record", reason=f"unknown WARC record type {rec.type!r}: the archive is "
                                                           f"corrupt here")
    if rec.type == "response" and rec.status is None:
        return _skipped_after_consume(rec, "not_http", "a response record without an HTTP response (dns:, ...)")
    if rec.status is not None and not 200 <= rec.status < 300:
        return _skipped_after_consume(rec, "http_status", f"HTTP status {rec.status}")
    mime = _mime(rec.content_type)
    if _content_kind(mime, rec.type) is None:
        return _skipped_after_consume(rec, "content_type", f"content type {mime or 'unknown'!r} is not HTML or text")
    if rec.truncated:
        return _skipped_after_consume(rec, "truncated_record",
                                      f"the crawler truncated the payload (WARC-Truncated: {rec.truncated})")
    if rec.length is not None and rec.length > cfg.max_record_bytes:
        return _skipped_after_consume(rec, "too_large", f"payload of {rec.length} bytes exceeds "
                                                        f"input.max_record_bytes={cfg.max_record_bytes}")
    if rec.length is None:
        payload = rec.read(cfg.max_record_bytes + 1)
        if len(payload) > cfg.max_record_bytes:
            return _skipped_after_consume(rec, "too_large", f"payload exceeds input.max_record_bytes="
                                                            f"{cfg.max_record_bytes}", len(payload))
        payload += _read_all(rec)
    else:
        payload = _read_all(rec)
    if rec.is_cut(len(payload)):
        return _cut(rec, len(payload))
    if rec.transfer_encoding or rec.content_encoding:
        try:
            payload = http_body(payload, rec.transfer_encoding, rec.content_encoding, cfg.max_record_bytes)
        except _BodyTooLarge:
            return Outcome(skip="too_large", reason=f"payload decoded ({rec.content_encoding}) exceeds "
                                                    f"input.max_record_bytes={cfg.max_record_bytes}")
        except (OSError, ValueError) as err:
            return Outcome(quarantine="undecodable_payload",
                           reason=f"the payload does not decode as its HTTP headers say (Transfer-Encoding: "
                                  f"{rec.transfer_encoding}, Content-Encoding: {rec.content_encoding}): {err}")
    meta = {"url": rec.url, "crawl_date": rec.date, "warc_record_id": rec.record_id, **rec.extra}
    meta = {k: v for k, v in meta.items() if v is not None}
    content_type = "text/plain" if rec.type == "conversion" else rec.content_type
    return payload_outcome(payload, content_type, rec.charset, meta)


class _BodyTooLarge(ValueError):
    pass


def _decoded(reader, limit: int) -> bytes:
    data = read_up_to(reader, limit + 1)
    if len(data) > limit:
        raise _BodyTooLarge()
    return data


def _dechunk(payload: bytes) -> bytes:
    """An HTTP/1.1 chunked body's data; a body that does not start with a chunk size (a crawler that stored it
    decoded and kept the header) is returned as it is."""
    out, pos = [], 0
    while True:
        end = payload.find(b"\r\n", pos)
        line = payload[pos:end if end >= 0 else len(payload)].split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            if pos == 0:
                return payload
            raise ValueError(f"bad chunk size {line[:20]!r} at byte {pos}") from None
        if size == 0:
            return b"".join(out)
        start = end + 2
        if start + size > len(payload):
            raise ValueError(f"chunk of {size} bytes at byte {pos} runs past the payload's end")
        out.append(payload[start:start + size])
        pos = start + size + 2


def http_body(payload: bytes, transfer_encoding: str | None, content_encoding: str | None, limit: int) -> bytes:
    """An HTTP payload as the server meant it: chunked transfer decoded, then gzip/deflate/br/zstd content
    decoded (FastWARC's readers), at most ``limit`` bytes (more: ``_BodyTooLarge``); ``identity`` and an empty
    payload are returned as they are. Raises ValueError for an encoding it does not know."""
    from fastwarc import stream_io

    if transfer_encoding and "chunked" in transfer_encoding.lower():
        payload = _dechunk(payload)
    for coding in reversed([c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]):
        if coding in ("identity", "none") or not payload:
            continue
        if coding in ("gzip", "x-gzip"):
            if payload[:2] != b"\x1f\x8b":  # stored decoded, header kept (as some crawlers do)
                continue
            payload = _decoded(stream_io.GzipReader(io.BytesIO(payload)), limit)
        elif coding == "deflate":
            try:
                payload = _decoded(stream_io.GzipReader(io.BytesIO(payload), zlib=True), limit)
            except OSError:  # raw deflate without the zlib wrapper, as some servers send it
                raw = zlib.decompressobj(-zlib.MAX_WBITS)
                payload = raw.decompress(payload, limit + 1)
                if len(payload) > limit:
                    raise _BodyTooLarge() from None
        elif coding == "br":
            payload = _decoded(stream_io.BrotliReader(io.BytesIO(payload)), limit)
        elif coding == "zstd":
            payload = _decoded(stream_io.ZstdReader(io.BytesIO(payload)), limit)
        else:
            raise ValueError(f"unknown content encoding {coding!r}")
    return payload


def _skipped_after_consume(rec: _Record, kind: str, reason: str, already: int = 0) -> Outcome:
    """A skip, unless the record turns out to be cut off by the end of the file (then a quarantine). The
    payload is read through in chunks (never held whole) to find that out."""
    got = already + _consume(rec)
    if rec.is_cut(got):
        return _cut(rec, got)
    return Outcome(skip=kind, reason=reason)


def _cut(rec: _Record, got: int) -> Outcome:
    of = f"of its {rec.length} " if rec.length is not None else ""
    return Outcome(quarantine="truncated_file",
                   reason=f"the file ends inside this {rec.type} record ({got} {of}payload bytes present): "
                          f"truncated, or still being written; every record before it was read")


# ------------------------------------------------------------------------------------- archives


def _iter_warc(fh) -> Iterator[_Record]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    for r in ArchiveIterator(fh, parse_http=True, record_types=WarcRecordType.any_type):
        rtype = str(r.record_type).rsplit(".", 1)[-1]
        headers = r.headers
        if headers.get("Content-Length") is None:  # mandatory: its headers are cut off or garbled
            rtype = "unknown"
        length = r.content_length
        if rtype in SKIP_TYPES or rtype == "unknown":  # skipped or quarantined whatever else it says
            yield _Record(rtype, None, None, None, r.stream_pos, None, None, None, length, None, r.reader.read,
                          lambda got, length=length: got < length, skip=lambda r=r: r.consume() or 0)
            continue
        status = content_type = charset = None
        if r.is_http and rtype == "response":
            status = r.http_headers.status_code
            content_type, charset = r.http_content_type, r.http_charset
        elif rtype in ("resource", "conversion"):
            content_type = headers.get("Content-Type")
            charset = _charset_param(content_type)
        extra = {}
        if rtype == "conversion":
            extra = {"refers_to": headers.get("WARC-Refers-To"),
                     "language": headers.get("WARC-Identified-Content-Language")}
        encodings = (r.http_headers.get("Transfer-Encoding"), r.http_headers.get("Content-Encoding")) \
            if status is not None else (None, None)
        yield _Record(rtype, headers.get("WARC-Target-URI"), headers.get("WARC-Date"), headers.get("WARC-Record-ID"),
                      r.stream_pos, status, content_type, charset, length, headers.get("WARC-Truncated"),
                      r.reader.read, lambda got, length=length: got < length, extra, *encodings,
                      lambda r=r: r.consume() or 0)


def _charset_param(content_type: str | None) -> str | None:
    for part in (content_type or "").split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip("\"'") or None
    return None


def _iter_arc(fh) -> Iterator[_Record]:
    from warcio.archiveiterator import ArchiveIterator

    from warcio.exceptions import ArchiveLoadFailed

    it = ArchiveIterator(fh, arc2warc=True)
    while True:
        try:
            r = next(it)
        except StopIteration:
            return
        except ArchiveLoadFailed as err:  # warcio's error for a record it cannot parse
            raise ValueError(str(err)[:200]) from None
        status = content_type = None
        if r.http_headers is not None and r.rec_type == "response":
            try:
                status = int(r.http_headers.get_statuscode())
            except (TypeError, ValueError):
                status = None
            content_type = r.http_headers.get_header("Content-Type")
        raw = r.raw_stream  # warcio's reader limited to the record's declared length: bytes left = cut off
        stream = r.content_stream()
        # ARC has no record ids (warcio makes random ones): none is kept; ids come from the file and position
        yield _Record(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.rec_headers.get_header("WARC-Date"),
                      None, it.offset, status, content_type, _charset_param(content_type), None, None,
                      stream.read, lambda got, raw=raw: getattr(raw, "limit", 0) > 0)


def _doc(text: str, meta: dict, source: InputFile, position: int) -> dict:
    return {"id": doc_id(source.key, position), "text": text, "source": source.name, "meta": meta,
            "annotations": {}}


def _item(out: Outcome, source: InputFile, index: int, offset: int | None):
    if out.text is not None:
        return _doc(out.text, out.meta, source, index)
    if out.skip is not None:
        return Skipped(source.name, index, out.skip, out.reason, offset, source.key)
    return Quarantined(source.name, index, out.quarantine, out.reason, offset, source.key)


def parse_archive(fh, source: InputFile, cfg: InputConfig, kind: str) -> Iterator[tuple[int, object]]:
    """(index, document | Skipped | Quarantined) for every record of a WARC/WET (``kind="warc"``) or ARC file."""
    index = -1
    pending = None  # a record the parser could not type: the end of a cut file, unless more records follow
    last_offset, last_cut = 0, False
    records = _iter_warc(fh) if kind == "warc" else _iter_arc(fh)
    try:
        for index, rec in enumerate(records):
            if pending is not None:
                yield pending
                pending = None
            out = record_outcome(rec, cfg)
            last_offset, last_cut = rec.offset or 0, out.quarantine == "truncated_file"
            if out.quarantine == "corrupt_record":
                pending = index, _item(out, source, index, rec.offset)
                continue
            yield index, _item(out, source, index, rec.offset)
    except (OSError, ValueError, EOFError, zlib.error) as err:
        if pending is not None:
            yield pending
        # the archive cannot be parsed past here: one record for the rest, the records before it are read
        fault = _gzip_fault(fh, last_offset) if source.path.lower().endswith(".gz") else None
        if fault is not None and fault[0] == "truncated":  # the parser choked on a member the file ends inside
            cut = fault[1]
            yield index + 1, Quarantined(source.name, index + 1, "truncated_file",
                                         f"the file ends inside a gzip member (at compressed byte {cut}) after record "
                                         f"{index}: truncated, or still being written; every record before it was "
                                         f"read", cut, source.key)
        elif fault is not None:
            yield index + 1, _corrupt_member(source, index, fault[1])
        else:
            yield index + 1, Quarantined(source.name, index + 1, "unreadable_file",
                                         f"the archive cannot be read past record {index + 1} ({type(err).__name__}: "
                                         f"{err}); every record before it was read", None, source.key)
        return
    if pending is not None:  # the last record has no type: the file ends inside its headers
        at, item = pending
        yield at, Quarantined(source.name, at, "truncated_file",
                              "the file ends inside this record's headers: truncated, or still being written; every "
                              "record before it was read", item.byte_offset, source.key)
    elif not last_cut and source.path.lower().endswith(".gz"):
        # the libraries stop quietly when a file ends inside a gzip member they have not started to parse (a cut
        # right after a member's header): the members after the last record must all be complete
        fault = _gzip_fault(fh, last_offset)
        if fault is not None and fault[0] == "corrupt":
            yield index + 1, _corrupt_member(source, index, fault[1])
        elif fault is not None:
            where = fault[1]
            yield index + 1, Quarantined(source.name, index + 1, "truncated_file",
                                         f"the file ends inside a gzip member (at compressed byte {where}) after "
                                         f"record {index}: truncated, or still being written; every record before it "
                                         f"was read", where, source.key)


def _corrupt_member(source: InputFile, index: int, where: int) -> Quarantined:
    """The one record for the rest of an archive whose gzip member at ``where`` does not decompress: damaged
    bytes inside the file (a bad disk, a bad copy), not a cut download, so it is not said to be truncated."""
    return Quarantined(source.name, index + 1, "unreadable_file",
                       f"the gzip member at compressed byte {where} (after record {index}) is corrupt (its data "
                       f"does not decompress): the archive cannot be read past it; every record before it was read",
                       where, source.key)


def _gzip_fault(fh, offset: int) -> tuple[str, int] | None:
    """("truncated", its compressed offset) for a gzip member that the file ends inside, ("corrupt", offset) for
    one whose data does not decompress, reading from ``offset`` (a record's member start) to the end; None when
    every member there is complete (or the stream cannot seek back). Decompressed bytes are discarded as they
    come (at most 64 KB at a time)."""
    seekable = getattr(fh, "seekable", None)
    if seekable is None or not seekable():
        return None
    fh.seek(offset)
    head = fh.read(2)
    if not head or not b"\x1f\x8b".startswith(head):  # no gzip member (a plain WARC named .gz): nothing to check
        return None
    if len(head) < 2:  # the file ends one byte into a member
        return "truncated", offset
    fh.seek(offset)
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    member_start = fed = offset  # where the current member starts; where the bytes being fed start
    started = False
    while True:
        data = fh.read(1 << 16)
        if not data:
            return ("truncated", member_start) if started else None
        while data:
            try:
                decompressor.decompress(data, 1 << 16)
            except zlib.error:
                return "corrupt", member_start
            started = True
            if decompressor.eof:
                rest = decompressor.unused_data
                stripped = rest.lstrip(b"\x00")  # gzip files may be padded with zeros between members
                fed += len(data) - len(stripped)
                member_start, data = fed, stripped
                decompressor, started = zlib.decompressobj(16 + zlib.MAX_WBITS), False
            else:
                tail = decompressor.unconsumed_tail
                fed += len(data) - len(tail)
                data = tail


def read_up_to(fh, n: int) -> bytes:
    """``n`` bytes of a stream, fewer only at its end (a stream's ``read`` may return less)."""
    chunks, got = [], 0
    while got < n:
        chunk = fh.read(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def parse_html_file(fh, source: InputFile, cfg: InputConfig) -> Iterator[tuple[int, object]]:
    """One HTML file: one document (the decoded HTML, ``content_type`` text/html), or a skip with a reason."""
    data = read_up_to(fh, cfg.max_record_bytes + 1)
    if len(data) > cfg.max_record_bytes:
        yield 0, Skipped(source.name, 0, "too_large", f"file exceeds input.max_record_bytes={cfg.max_record_bytes}",
                         None, source.key)
        return
    out = payload_outcome(data, "text/html", None, {})
    yield 0, _item(out, source, 0, None)

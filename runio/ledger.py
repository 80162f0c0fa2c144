"""The takedown ledger: what `corpusmill forget` removed, so that it never comes back.

``RUN/takedown/ledger.jsonl`` (``RunPaths.takedown_ledger``), append-only, one JSON object per line (the agreed
format, read by the cleaning step ``takedown`` and by the lineage code)::

    {"time": "2026-12-07T01:02:03Z", "reason": "text", "ids": ["<input id>", ...],
     "doc_ids": [<corpusmill document id>, ...], "content_hashes": ["<hex>", ...]}

``ids`` are the inputs' own ids (``input.id_field``, or a text file's name), ``doc_ids`` the corpusmill ids (as
in ``docs/`` and the shards' ``doc_ids``), ``content_hashes`` the exact-dedup key of the texts
(``transforms.exact_dedup.text_key``): of the text as read and of the text as cleaned, so a copy is caught
whatever its id and whichever of the two it is a copy of.

Beside it, ``signatures.jsonl`` (``RunPaths.takedown_signatures``) holds a MinHash signature per forgotten
document (never its text), for the near-duplicate match that ``takedown.near_duplicates`` enables; each line
names the parameters it was made with.

A ledger is read strictly: a line that is not an entry refuses the read (``LedgerError``, exit 4) rather than
being skipped, since a skipped line would let what it forgot come back. Writes append one line and fsync it.
The ground floor: plain JSON, no Beam, no numpy, so any floor may read it.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

from runio.errors import CorpusmillError, ExitCode

LEDGER_FIELDS = ("time", "reason", "ids", "doc_ids", "content_hashes")


class LedgerError(CorpusmillError):
    """A ledger (or its signatures) that cannot be read as written: refused, never skipped."""

    exit_code = ExitCode.REFUSED


def utc_now() -> str:
    """The ledger's time stamp: UTC, seconds, ``Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class LedgerEntry:
    """One takedown: when, why, and what (input ids, corpusmill ids, content hashes)."""

    time: str
    reason: str
    ids: list[str] = field(default_factory=list)
    doc_ids: list[int] = field(default_factory=list)
    content_hashes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(", ", ": "))


def _entry(raw: object, where: str) -> LedgerEntry:
    if not isinstance(raw, dict):
        raise LedgerError(f"{where}: not a ledger entry (a JSON object with {', '.join(LEDGER_FIELDS)}); the "
                          f"ledger is refused rather than read in part: repair the line")
    missing = [name for name in LEDGER_FIELDS if name not in raw]
    if missing:
        raise LedgerError(f"{where}: a ledger entry without {', '.join(missing)}; the ledger is refused rather "
                          f"than read in part: repair the line")
    lists = {name: raw[name] for name in ("ids", "doc_ids", "content_hashes")}
    for name, value in lists.items():
        if not isinstance(value, list):
            raise LedgerError(f"{where}: {name} is not a list")
    try:
        doc_ids = [int(d) for d in lists["doc_ids"]]
    except (TypeError, ValueError):
        raise LedgerError(f"{where}: doc_ids holds a value that is not an integer document id") from None
    return LedgerEntry(str(raw["time"]), str(raw["reason"]), [str(i) for i in lists["ids"]], doc_ids,
                       [str(h) for h in lists["content_hashes"]])


def read_ledger(path: str | os.PathLike) -> list[LedgerEntry]:
    """Every entry of a ledger, in the order written; a missing ledger has none. A line that is not an entry
    refuses the whole read (``LedgerError``)."""
    entries: list[LedgerEntry] = []
    for number, line in _numbered_lines(path):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise LedgerError(f"{path}:{number}: not a JSON line ({err.msg}); the ledger is refused rather "
                              f"than read in part: repair the line") from None
        entries.append(_entry(raw, f"{path}:{number}"))
    return entries


def _numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """The non-blank lines of ``path`` with their line numbers; none when the file does not exist."""
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        return
    with fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                yield number, line


def _append_line(path: Path, line: str) -> None:
    """One line appended and fsynced. A previous line cut short by a crash is finished with a newline first,
    so the new entry stays a line of its own (and the torn one is refused by the reader, not merged)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(line.encode("utf-8") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def append_entry(path: str | os.PathLike, entry: LedgerEntry) -> None:
    """Append ``entry`` to the ledger at ``path`` (created with its folder when absent). Never rewrites."""
    _append_line(Path(path), entry.line())


@dataclass
class Forgotten:
    """What a set of ledgers forgot, as the cleaning step matches it: input ids, corpusmill ids, content hashes
    (each mapped to the ledger time that forgot it, for the annotation)."""

    ids: dict[str, str] = field(default_factory=dict)
    doc_ids: dict[int, str] = field(default_factory=dict)
    content_hashes: dict[str, str] = field(default_factory=dict)

    def add(self, entry: LedgerEntry) -> None:
        for value in entry.ids:
            self.ids.setdefault(value, entry.time)
        for value in entry.doc_ids:
            self.doc_ids.setdefault(value, entry.time)
        for value in entry.content_hashes:
            self.content_hashes.setdefault(value, entry.time)

    def __bool__(self) -> bool:
        return bool(self.ids or self.doc_ids or self.content_hashes)


def forgotten_in(ledgers: Iterable[str | os.PathLike]) -> Forgotten:
    """The union of what ``ledgers`` forgot (missing ledgers forget nothing)."""
    out = Forgotten()
    for path in ledgers:
        for entry in read_ledger(path):
            out.add(entry)
    return out


# --------------------------------------------------------------------------------------- near-duplicate signatures


@dataclass(frozen=True)
class Signature:
    """The MinHash signature of one forgotten document (``params``: what it was made with, as
    ``transforms.takedown.signature_params`` names them)."""

    doc_id: int
    time: str
    params: dict
    signature: list[int]


def signatures_path(ledger: str | os.PathLike) -> Path:
    """The signatures that go with a ledger: ``signatures.jsonl`` beside it."""
    return Path(ledger).with_name("signatures.jsonl")


def append_signatures(ledger: str | os.PathLike, signatures: Iterable[Signature]) -> None:
    lines = [json.dumps(asdict(s), separators=(",", ":")) for s in signatures]
    if lines:
        _append_line(signatures_path(ledger), "\n".join(lines))


def read_signatures(ledger: str | os.PathLike) -> list[Signature]:
    """The signatures beside ``ledger`` (none when there is no file); a line that is not one refuses the read."""
    path = signatures_path(ledger)
    out: list[Signature] = []
    for number, line in _numbered_lines(path):
        try:
            raw = json.loads(line)
            out.append(Signature(int(raw["doc_id"]), str(raw["time"]), dict(raw["params"]),
                                 [int(v) for v in raw["signature"]]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise LedgerError(f"{path}:{number}: not a signature line ({type(err).__name__}); refused rather "
                              f"than read in part: repair the line") from None
    return out

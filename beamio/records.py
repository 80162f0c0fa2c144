"""The reader's record types, below every parser: the input file (``InputFile``), document ids (``doc_id``),
and what a record becomes when it is no document: ``Quarantined`` (bad input) or ``Skipped`` (no document by
design). ``beamio.read`` re-exports every name; the raw-source parsers (``beamio.read_web``,
``beamio.read_docs``) import them from here.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass

from runio.files import is_uri, sha256_file


def _filesystems():
    """Beam's FileSystems, imported on first use: local files are matched, sized and opened without Beam (so a
    command reading local files in this process never imports it); globs, folders and URIs go through Beam."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _size_of(path: str) -> int:
    if not is_uri(path):
        return os.path.getsize(path)
    return _filesystems().match([path])[0].metadata_list[0].size_in_bytes


def doc_id(key: str, position: int) -> int:
    """A stable, non-negative int64 id from the file's canonical source key and the position in it."""
    digest = hashlib.blake2b(f"{key}\x00{position}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class InputFile:
    """One input file: where it is read from, the ``source`` its records carry, and the key their ids derive
    from (``ID_SCHEME``)."""

    path: str  # as matched: a local path or a URI
    name: str  # the records' ``source``: relative to the configured input it matched
    key: str   # sha256 of the file's bytes
    bytes: int = 0  # of the file; of the part, for a part
    # A part of a JSONL file (the clean's units cut a large one at line boundaries, pipelines.clean_units): bytes
    # [start, end) of ``path``, which are the (decompressed) file's bytes from ``first_offset`` on and begin with
    # its line ``first_line``, so ids and positions stay the whole file's. A plain file's part is a range of the
    # file itself; a compressed file's part, a plain file of its own. ``end`` None: the whole file.
    start: int = 0
    end: int | None = None
    first_line: int = 1
    first_offset: int = 0

    @property
    def part_key(self) -> str:
        """The content key, with the (decompressed) byte range for a part: what a part's work is valid for."""
        return self.key if self.end is None else f"{self.key}@{self.first_offset}-{self.first_offset + self.bytes}"

    @classmethod
    def of(cls, path: str, name: str | None = None) -> "InputFile":
        """An input file on its own (its name is its base name); reads the file once to hash it."""
        size = _size_of(path)
        return cls(path, name or _basename(path), sha256_file(path), size)


def _basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_uri(path) else os.path.basename(os.path.normpath(path))


@dataclass(frozen=True)
class Quarantined:
    source: str  # the input's name (``InputFile.name``)
    position: int
    kind: str  # a short category for stats: invalid_json, invalid_utf8, too_large, truncated_file, ...
    reason: str
    byte_offset: int | None = None
    key: str = ""  # the input's content key, from which the record's id derives

    def as_record(self) -> dict:
        return {"id": doc_id(self.key or self.source, self.position), "source": self.source,
                "position": self.position, "byte_offset": self.byte_offset, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Skipped(Quarantined):
    """A record of a raw source that is, by design, no document (a WARC request record, a non-2xx or non-HTML
    response, a record over input.max_record_bytes, a PDF without text ...): ``kind`` is the reason's short
    name, ``reason`` says it in words. A kind of ``Quarantined``, so a command that reports quarantined records
    reports these too; the pipeline's reader counts them per kind (``read/skipped/<kind>``) instead of writing
    them to quarantine/."""

    def as_record(self) -> dict:
        return {**super().as_record(), "skipped": True}

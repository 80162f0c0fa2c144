"""File operations shared by every package: one definition each.

Every file corpusmill writes lands under a temporary sibling name first and is renamed into place, so a
reader never sees half a file and a crash leaves at worst a ``*.tmp-*`` file that the next write replaces.
Paths may be local or any Beam FileSystems URI (``gs://``, ``s3://``, …); local paths take the fast route.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from typing import IO, Any, Callable, Iterator

CHUNK_BYTES = 1 << 20


def is_uri(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def tmp_sibling(path: str | os.PathLike) -> str:
    """A private temporary name next to ``path`` (same directory, so the rename is atomic)."""
    return f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb", fsync: bool = True) -> Iterator[IO]:
    """Open a temporary sibling of local ``path`` for writing; on success it is fsynced and renamed over
    ``path``, on failure removed. For writers that stream (``json.dump``, a model's ``save``)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = tmp_sibling(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path for a library that writes a file by name (pyarrow, tokenizers, fastText); renamed over
    ``path`` when the block ends without an error, removed otherwise. The suffix is kept, since some
    libraries look at it."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    root, ext = os.path.splitext(path)
    tmp = f"{root}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{ext}"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_stream(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary stream that becomes ``path`` (local or FileSystems URI) only when the block ends without an
    error: ``atomic_output`` for a local path, a temporary sibling renamed into place for a URI. For writers
    that stream a large file rather than building its bytes in memory first."""
    path = os.fspath(path)
    if not is_uri(path):
        with atomic_output(path) as fh:
            yield fh
        return
    from apache_beam.io.filesystems import FileSystems

    tmp = tmp_sibling(path)
    try:
        with FileSystems.create(tmp) as fh:
            yield fh
    except BaseException:
        with contextlib.suppress(Exception):
            FileSystems.delete([tmp])
        raise
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling and a rename (local or FileSystems URI)."""
    path = os.fspath(path)
    if not is_uri(path):
        with atomic_output(path) as fh:
            fh.write(data)
        return
    from apache_beam.io.filesystems import FileSystems

    tmp = tmp_sibling(path)
    with FileSystems.create(tmp) as fh:
        fh.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def json_text(value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """The JSON text corpusmill writes: UTF-8 kept as is, a final newline when indented."""
    if indent is None:
        return json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys) + "\n"


def write_json(path: str | os.PathLike, value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    write_atomic(path, json_text(value, indent=indent, sort_keys=sort_keys).encode("utf-8"))


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    """The parsed file, or ``default`` when it does not exist or is not valid JSON (a half-written or
    damaged file reads as absent: callers that must tell the difference use ``json.loads`` themselves)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return default


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 of a file, streamed in 1 MiB chunks (never the whole file in memory); local or URI."""
    path = os.fspath(path)
    if is_uri(path):
        from apache_beam.io.filesystems import FileSystems

        opener = FileSystems.open(path)
    else:
        opener = open(path, "rb")
    with opener as fh:
        return sha256_stream(fh)


def sha256_stream(fh: IO[bytes], between_chunks: Callable[[], None] | None = None) -> str:
    """sha256 of what an open binary file (local, Beam FileSystems or fsspec) reads from here to its end, in
    1 MiB chunks; ``between_chunks`` is called before each read (a background reader yielding to the loop)."""
    digest = hashlib.sha256()
    while True:
        if between_chunks is not None:
            between_chunks()
        chunk = fh.read(CHUNK_BYTES)
        if not chunk:
            return digest.hexdigest()
        digest.update(chunk)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a line (logs such as metrics.jsonl: a torn last line is skipped by readers)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def read_jsonl(path: str | os.PathLike, problems: list[str] | None = None) -> list[dict]:
    """Every record of a JSONL log; a line that does not parse (cut short by a crash) is skipped and, when
    ``problems`` is given, reported there. A missing file is an empty log."""
    records: list[dict] = []
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        return records
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if problems is not None:
                    problems.append(f"{path}:{number}: not a JSON line (skipped)")
    return records

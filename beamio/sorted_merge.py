"""Sorted runs of rows on disk, merged into the run directory's part files without holding them in memory.

A unit of the clean (``pipelines.clean_units``) writes each of its outputs as one *run*: its rows sorted by the
output's key, pickled in chunks of ``CHUNK_ROWS``. When every unit is done, ``merge_runs`` writes the files
``WriteSorted`` would have written from the same rows (``id % parts`` partitions, each sorted by the same key,
through the same writer), so they are byte-identical; memory is a few chunks per run, whatever the corpus size.
"""
from __future__ import annotations

import heapq
import itertools
import os
import pickle
import shutil
from typing import Any, Callable, Iterable, Iterator, Sequence

from runio.files import atomic_output

CHUNK_ROWS = 512  # rows per pickled chunk at most: a merge holds about one chunk per run
# ... and about this many bytes of strings at most: the merge holds a chunk of every unit's run at once, so a
# chunk of 512 documents (1-2 MB of text) made the driver's merge grow by that much per unit (issue 44)
CHUNK_BYTES = 256 << 10


def _row_bytes(row: dict) -> int:
    """About what a row's strings and bytes hold (its other fields are small)."""
    return 64 + sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))


def write_run(path: str, rows: Iterable[dict]) -> int:
    """Rows (already sorted) as a run file in chunks of at most ``CHUNK_ROWS`` rows and about ``CHUNK_BYTES``,
    written atomically; returns the number of rows."""
    n = 0
    with atomic_output(path, "wb", fsync=False) as fh:
        chunk: list[dict] = []
        held = 0
        for row in rows:
            chunk.append(row)
            held += _row_bytes(row)
            if len(chunk) >= CHUNK_ROWS or held >= CHUNK_BYTES:
                pickle.dump(chunk, fh, protocol=pickle.HIGHEST_PROTOCOL)
                n += len(chunk)
                chunk, held = [], 0
        if chunk:
            pickle.dump(chunk, fh, protocol=pickle.HIGHEST_PROTOCOL)
            n += len(chunk)
    return n


def read_run(path: str) -> Iterator[dict]:
    """A run file's rows, one chunk in memory at a time."""
    with open(path, "rb") as fh:
        while True:
            try:
                chunk = pickle.load(fh)
            except EOFError:
                return
            yield from chunk


def _part_name(prefix: str, part: int, parts: int, suffix: str) -> str:
    return f"{prefix}-{part:05d}-of-{parts:05d}{suffix}"


def _write_if_any(rows: Iterator[dict], path: str, write: Callable[[str, Iterable[dict]], None]) -> bool:
    first = next(rows, None)
    if first is None:  # WriteSorted writes no file for a part without rows
        return False
    write(path, itertools.chain([first], rows))
    return True


def merge_runs(runs: Sequence[str], parts: int, sort_key: Callable[[dict], Any], directory: str, prefix: str,
               suffix: str, write: Callable[[str, Iterable[dict]], None], scratch: str) -> list[str]:
    """Rows of ``runs`` (each sorted by ``sort_key``) → ``directory/prefix-PPPPP-of-NNNNN suffix`` for every part
    ``id % parts`` that has rows, each sorted by ``sort_key`` and written by ``write``. With more than one part,
    each run is first split into one run per part under ``scratch`` (one pass), then every part merges its
    runs. Returns the names written."""
    os.makedirs(directory, exist_ok=True)
    names = []
    if parts == 1:
        name = _part_name(prefix, 0, 1, suffix)
        if _write_if_any(heapq.merge(*(read_run(r) for r in runs), key=sort_key), os.path.join(directory, name),
                         write):
            names.append(name)
        return names
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    split: list[list[str]] = [[] for _ in range(parts)]
    for i, run in enumerate(runs):
        buffers: list[list[dict]] = [[] for _ in range(parts)]
        held = [0] * parts
        handles: dict[int, Any] = {}
        try:
            for row in read_run(run):
                p = row["id"] % parts
                buffers[p].append(row)
                held[p] += _row_bytes(row)
                if len(buffers[p]) >= CHUNK_ROWS or held[p] >= CHUNK_BYTES:
                    _flush(buffers, p, handles, split, scratch, i)
                    held[p] = 0
            for p in range(parts):
                if buffers[p]:
                    _flush(buffers, p, handles, split, scratch, i)
        finally:
            for fh in handles.values():
                fh.close()
    for p in range(parts):
        name = _part_name(prefix, p, parts, suffix)
        if _write_if_any(heapq.merge(*(read_run(r) for r in split[p]), key=sort_key), os.path.join(directory, name),
                         write):
            names.append(name)
    shutil.rmtree(scratch, ignore_errors=True)
    return names


def _flush(buffers: list[list[dict]], p: int, handles: dict, split: list[list[str]], scratch: str, run: int) -> None:
    if p not in handles:
        path = os.path.join(scratch, f"part{p:05d}-run{run:05d}.pkl")
        handles[p] = open(path, "wb")
        split[p].append(path)
    pickle.dump(buffers[p], handles[p], protocol=pickle.HIGHEST_PROTOCOL)
    buffers[p] = []

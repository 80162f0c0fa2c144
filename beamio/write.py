"""The run directory's cleaning outputs (Contract 2): the row schemas and deterministic, sorted output files.

Where things are is ``runio.layout.RunPaths``; the run directory's bookkeeping (clearing, stale temporaries, the
manifest) is ``pipelines.rundir``; how a file is written (under a temporary name, renamed into
place, so a reader never sees half a file) is ``runio.files``. Output files are partitioned by ``id % parts``
and sorted by id, which makes them byte-identical across re-runs and across any number of workers.
"""
from __future__ import annotations

import io
import itertools
import math
import os
from typing import Any, Callable, Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from runio.files import atomic_stream, json_text, write_atomic

DOCS_SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("source", pa.string()),
                         ("meta", pa.string()), ("annotations", pa.string())])
REMOVED_SCHEMA = pa.schema([("id", pa.int64()), ("source", pa.string()), ("removed_by", pa.string()),
                            ("reason", pa.string()), ("annotations", pa.string())])


def _json(value: Any) -> str:
    return json_text(value, indent=None, sort_keys=True)


def doc_row(doc: dict) -> dict:
    return {"id": doc["id"], "text": doc["text"], "source": doc["source"], "meta": _json(doc["meta"]),
            "annotations": _json(doc["annotations"])}


def removed_row(doc: dict) -> dict:
    return {"id": doc["id"], "source": doc["source"], "removed_by": doc["removed_by"], "reason": doc["reason"],
            "annotations": _json(doc["annotations"])}


def join(*parts: str) -> str:
    return FileSystems.join(*parts) if "://" in parts[0] else os.path.join(*parts)


ROW_GROUP_ROWS = 4096


def _write_parquet_stream(sink, rows: Iterable[dict], schema: pa.Schema) -> None:
    """``rows`` (a list or any iterable: a k-way merge streams its rows through here) as Parquet (zstd,
    statistics, row groups of ``ROW_GROUP_ROWS``), built one row group at a time."""
    with pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=True) as writer:
        rows = iter(rows)
        while True:
            group = list(itertools.islice(rows, ROW_GROUP_ROWS))
            if not group:
                break
            writer.write_table(pa.Table.from_pylist(group, schema=schema), row_group_size=ROW_GROUP_ROWS)


def parquet_bytes(rows: list[dict], schema: pa.Schema) -> bytes:
    sink = io.BytesIO()
    _write_parquet_stream(sink, rows, schema)
    return sink.getvalue()


def parquet_writer(schema: pa.Schema) -> Callable[[str, Iterable[dict]], None]:
    """A ``WriteSorted`` writer: the part streamed into its file one row group at a time, so a worker holds the
    part's rows and one row group's table, not also a table of the whole part and the file's bytes (a part
    near the target size cost about four times that size in memory: peak RSS grew with the corpus)."""
    def write(path: str, rows: list[dict]) -> None:
        with atomic_stream(path) as fh:
            _write_parquet_stream(fh, rows, schema)
    return write


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(_json(r) + "\n" for r in rows).encode("utf-8")


def jsonl_writer(path: str, rows: Iterable[dict]) -> None:
    """A ``WriteSorted`` writer for JSON lines (the quarantine), streamed line by line."""
    with atomic_stream(path) as fh:
        for row in rows:
            fh.write((_json(row) + "\n").encode("utf-8"))


class _WritePartFn(beam.DoFn):
    def __init__(self, directory: str, prefix: str, suffix: str, write: Callable[[str, list[dict]], None],
                 sort_key: Callable[[dict], Any]):
        self.directory, self.prefix, self.suffix = directory, prefix, suffix
        self.write, self.sort_key = write, sort_key

    def process(self, element):
        (part, parts), rows = element
        rows = sorted(rows, key=self.sort_key)
        name = f"{self.prefix}-{part:05d}-of-{parts:05d}{self.suffix}"
        self.write(join(self.directory, name), rows)
        yield name, len(rows)


class _PartCount(beam.CombineFn):
    """How many parts of about ``target_bytes`` the rows make: their summed ``size_of``, divided, at least 1."""

    def __init__(self, size_of: Callable[[dict], int], target_bytes: int):
        self.size_of, self.target_bytes = size_of, target_bytes

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, total: int, row: dict) -> int:
        return total + self.size_of(row)

    def merge_accumulators(self, totals) -> int:
        return sum(totals)

    def extract_output(self, total: int) -> int:
        return max(1, math.ceil(total / self.target_bytes))


class WriteSorted(beam.PTransform):
    """Write rows into ``ceil(total_bytes / target_bytes)`` files by ``id % parts``, each sorted.

    The part count comes from the data (a global byte count as a side input), so each file stays near the
    target size whatever the corpus size, and the layout does not depend on the number of workers.
    """

    def __init__(self, directory: str, prefix: str, suffix: str, write: Callable[[str, list[dict]], None],
                 size_of: Callable[[dict], int], target_bytes: int, sort_key: Callable[[dict], Any] = None):
        super().__init__()
        self.directory, self.prefix, self.suffix, self.write = directory, prefix, suffix, write
        self.size_of, self.target_bytes = size_of, target_bytes
        self.sort_key = sort_key or (lambda r: r["id"])

    def expand(self, rows):
        # Without defaults: an empty input has no rows to place, so it needs no part count (the side input's
        # default); a global combine with its default costs five more transforms, each a DoFn to set up.
        parts = rows | "PartCount" >> beam.CombineGlobally(_PartCount(self.size_of, self.target_bytes)).without_defaults()
        return (
            rows
            | "KeyByPart" >> beam.Map(lambda r, n: ((r["id"] % n, n), r),
                                      n=beam.pvalue.AsSingleton(parts, default_value=1))
            | "GroupParts" >> beam.GroupByKey()
            | "WriteParts" >> beam.ParDo(_WritePartFn(self.directory, self.prefix, self.suffix, self.write,
                                                       self.sort_key))
        )

"""The run directory (Contract 2): atomic writes and deterministic, sorted output files.

Every file is written under a temporary name and renamed into place, so a reader never sees half a file.
Output files are partitioned by ``id % parts`` and sorted by id, which makes them byte-identical across
re-runs and across any number of workers.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import uuid
from pathlib import Path
from typing import Any, Callable

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

DOCS_SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("source", pa.string()),
                         ("meta", pa.string()), ("annotations", pa.string())])
REMOVED_SCHEMA = pa.schema([("id", pa.int64()), ("source", pa.string()), ("removed_by", pa.string()),
                            ("reason", pa.string()), ("annotations", pa.string())])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def doc_row(doc: dict) -> dict:
    return {"id": doc["id"], "text": doc["text"], "source": doc["source"], "meta": _json(doc["meta"]),
            "annotations": _json(doc["annotations"])}


def removed_row(doc: dict) -> dict:
    return {"id": doc["id"], "source": doc["source"], "removed_by": doc["removed_by"], "reason": doc["reason"],
            "annotations": _json(doc["annotations"])}


def join(*parts: str) -> str:
    return FileSystems.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temporary sibling, then rename over ``path``."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    if "://" not in path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return
    with FileSystems.create(tmp) as fh:
        fh.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def write_json(path: str, value: Any) -> None:
    write_atomic(path, (json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def parquet_bytes(rows: list[dict], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=4096, write_statistics=True)
    return sink.getvalue()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(_json(r) + "\n" for r in rows).encode("utf-8")


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with (open(path, "rb") if "://" not in path else FileSystems.open(path)) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _WritePartFn(beam.DoFn):
    def __init__(self, directory: str, prefix: str, suffix: str, encode: Callable[[list[dict]], bytes],
                 sort_key: Callable[[dict], Any]):
        self.directory, self.prefix, self.suffix = directory, prefix, suffix
        self.encode, self.sort_key = encode, sort_key

    def process(self, element):
        (part, parts), rows = element
        rows = sorted(rows, key=self.sort_key)
        name = f"{self.prefix}-{part:05d}-of-{parts:05d}{self.suffix}"
        write_atomic(join(self.directory, name), self.encode(rows))
        yield name, len(rows)


class WriteSorted(beam.PTransform):
    """Write rows into ``ceil(total_bytes / target_bytes)`` files by ``id % parts``, each sorted.

    The part count comes from the data (a global byte count as a side input), so each file stays near the
    target size whatever the corpus size, and the layout does not depend on the number of workers.
    """

    def __init__(self, directory: str, prefix: str, suffix: str, encode: Callable[[list[dict]], bytes],
                 size_of: Callable[[dict], int], target_bytes: int, sort_key: Callable[[dict], Any] = None):
        super().__init__()
        self.directory, self.prefix, self.suffix, self.encode = directory, prefix, suffix, encode
        self.size_of, self.target_bytes = size_of, target_bytes
        self.sort_key = sort_key or (lambda r: r["id"])

    def expand(self, rows):
        size_of, target = self.size_of, self.target_bytes
        parts = (rows | "SizeOf" >> beam.Map(size_of) | "TotalBytes" >> beam.CombineGlobally(sum)
                 | "PartCount" >> beam.Map(lambda total: max(1, math.ceil(total / target))))
        return (
            rows
            | "KeyByPart" >> beam.Map(lambda r, n: ((r["id"] % n, n), r), n=beam.pvalue.AsSingleton(parts))
            | "GroupParts" >> beam.GroupByKey()
            | "WriteParts" >> beam.ParDo(_WritePartFn(self.directory, self.prefix, self.suffix, self.encode,
                                                       self.sort_key))
        )


def clear_outputs(run_dir: Path, names: tuple[str, ...]) -> None:
    """Remove the outputs of an earlier (possibly interrupted) run of the same config before re-running."""
    import shutil

    for name in names:
        target = run_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def count_parquet_rows(directory: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(directory.glob("*.parquet")))


def read_manifest(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "manifest.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


"""Reading the kept documents (``runs/<name>/docs/*.parquet``) and the stable per-document hash.

The cleaning pipeline writes Parquet files with columns ``id`` int64, ``text``, ``source``, ``meta``,
``annotations``, sorted by id. Paths go through Beam's FileSystems, so a docs folder may live on any filesystem
Beam knows (local, gs://, s3://, hdfs://).
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runio.files import atomic_path

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def stable_hash(ids: np.ndarray | Sequence[int], seed: int = 0) -> np.ndarray:
    """splitmix64 of (id + seed · golden ratio): a fixed, platform-independent uint64 per document id.

    Used to assign documents to the train/val split and to order the tokenizer's training sample; it depends on
    nothing but the id and the seed, so every worker and every run agrees.
    """
    x = np.asarray(ids, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15) * np.uint64(seed % (1 << 64) + 1)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x & _MASK64


def in_val_split(ids: np.ndarray | Sequence[int], val_fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask: which documents belong to the held-out validation split."""
    if val_fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    threshold = np.uint64(min(int(val_fraction * 2.0**64), (1 << 64) - 1))
    return stable_hash(ids, seed) < threshold


def list_doc_files(docs_dir: str) -> list[str]:
    """The Parquet files of a docs folder, in name order (the cleaning pipeline names them in id order)."""
    from apache_beam.io.filesystems import FileSystems

    pattern = docs_dir.rstrip("/") + "/*.parquet"
    matches = FileSystems.match([pattern])[0].metadata_list
    files = sorted(m.path for m in matches)
    if not files:
        raise FileNotFoundError(f"no documents: {pattern} matches no file (did the cleaning pipeline run?)")
    return files


def open_parquet(path: str) -> pq.ParquetFile:
    from apache_beam.io.filesystems import FileSystems

    try:
        return pq.ParquetFile(FileSystems.open(path))
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from e


def check_doc_schema(path: str, schema: pa.Schema) -> None:
    missing = [c for c in ("id", "text") if c not in schema.names]
    if missing:
        raise ValueError(f"{path}: document file lacks column(s) {missing}; has {schema.names}")


def iter_doc_batches(
    files: Sequence[str], columns: Sequence[str] = ("id", "text"), batch_rows: int = 1024
) -> Iterator[pa.RecordBatch]:
    """Record batches of the given columns over all files, in file order."""
    for path in files:
        parquet = open_parquet(path)
        check_doc_schema(path, parquet.schema_arrow)
        yield from parquet.iter_batches(batch_size=batch_rows, columns=list(columns))


def write_docs_parquet(path: str, docs: Sequence[dict]) -> None:
    """Write documents in the cleaning pipeline's layout (for tests, benchmarks and ad-hoc corpora)."""
    import json
    import os

    docs = sorted(docs, key=lambda d: d["id"])
    table = pa.table(
        {
            "id": pa.array([d["id"] for d in docs], pa.int64()),
            "text": pa.array([d["text"] for d in docs], pa.string()),
            "source": pa.array([d.get("source", "") for d in docs], pa.string()),
            "meta": pa.array([json.dumps(d.get("meta", {})) for d in docs], pa.string()),
            "annotations": pa.array([json.dumps(d.get("annotations", {})) for d in docs], pa.string()),
        }
    )
    with atomic_path(os.path.abspath(path)) as tmp:
        pq.write_table(table, tmp, row_group_size=2048)


def jsonl_to_docs(jsonl_path: str, docs_dir: str, files: int = 1) -> int:
    """Convert a JSONL(.gz) corpus of records with ``text`` into docs Parquet files (ids = line numbers)."""
    import gzip
    import json
    import os

    opener = gzip.open if jsonl_path.endswith(".gz") else open
    docs = []
    with opener(jsonl_path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f):
            if not line.strip():
                continue
            record = json.loads(line)
            text = record.pop("text")
            docs.append({"id": line_no, "text": text, "source": f"{jsonl_path}:{line_no}", "meta": record})
    per_file = -(-len(docs) // files)
    for k in range(files):
        write_docs_parquet(os.path.join(docs_dir, f"part-{k:05d}.parquet"), docs[k * per_file : (k + 1) * per_file])
    return len(docs)

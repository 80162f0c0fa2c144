"""The run directory's sorted Parquet writer streams a part one row group at a time and writes the same bytes as
pyarrow's one-shot ``write_table`` with the same settings (so run directories stay byte-identical to those
written before, on every runner)."""
from __future__ import annotations

import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beamio.write import DOCS_SCHEMA, ROW_GROUP_ROWS, parquet_bytes, parquet_writer


def _one_shot(rows, schema) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink, compression="zstd",
                   row_group_size=ROW_GROUP_ROWS, write_statistics=True)
    return sink.getvalue()


@pytest.mark.parametrize("n", [1, 17, ROW_GROUP_ROWS, ROW_GROUP_ROWS + 1, 2 * ROW_GROUP_ROWS + 5])
def test_streamed_part_equals_one_shot_write(tmp_path, n):
    rng = random.Random(n)
    rows = [{"id": i, "text": "word " * rng.randint(0, 60), "source": "file:///c.jsonl", "meta": "{}",
             "annotations": '{"normalize":{}}'} for i in range(n)]
    path = tmp_path / "docs-00000-of-00001.parquet"
    parquet_writer(DOCS_SCHEMA)(str(path), rows)
    assert path.read_bytes() == parquet_bytes(rows, DOCS_SCHEMA) == _one_shot(rows, DOCS_SCHEMA)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == n and meta.num_row_groups == -(-n // ROW_GROUP_ROWS)
    assert not list(tmp_path.glob("*.tmp-*"))  # written under a temporary name, renamed into place


def test_a_failed_part_leaves_no_file(tmp_path):
    path = tmp_path / "docs-00000-of-00001.parquet"
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        parquet_writer(DOCS_SCHEMA)(str(path), [{"id": "not an int", "text": "x", "source": "s", "meta": "{}",
                                                  "annotations": "{}"}])
    assert not path.exists() and not list(tmp_path.iterdir())

"""Shards (Arrow IPC *file* format) and docs (Parquet) read by other tools, as tokenizer/FORMAT.md documents:
HF `datasets` (`load_dataset("arrow"/"parquet", data_files=...)`; `Dataset.from_file` wants the stream format
and cannot), polars (`read_ipc`/`scan_ipc`, `read_parquet`) and DuckDB (over pyarrow tables and polars frames;
Parquet natively). Every tool must see exactly the rows `ShardReader` returns and the manifest's totals."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402  (the optional extra 'hf', installed by `make test`)
import duckdb  # noqa: E402
import polars as pl  # noqa: E402

from tokenizer.docs import write_docs_parquet  # noqa: E402
from tokenizer.shards import ShardReader  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop") / "shards"
    # uint32 tokens (vocab > 65536) in one directory, uint16 in the other: both token types of Contract 3
    manifest = write_synthetic_shards(path, seq_len=24, vocab_size=300, train_docs=120, val_docs=20, rows_per_shard=9)
    wide = tmp_path_factory.mktemp("interop") / "wide"
    wide_manifest = write_synthetic_shards(wide, seq_len=16, vocab_size=70000, train_docs=40, val_docs=6)
    return (path, manifest), (wide, wide_manifest)


def files(shard_dir, manifest, split):
    return [str(shard_dir / entry["file"]) for entry in manifest["splits"][split]]


def reference(shard_dir, split):
    return [(t.tolist(), l.tolist(), i.tolist()) for t, l, i in ShardReader(str(shard_dir), split)]


def test_hf_datasets_load_dataset_arrow_reads_every_row(shards, tmp_path):
    for shard_dir, manifest in shards:
        ds = datasets.load_dataset("arrow", data_files={s: files(shard_dir, manifest, s) for s in ("train", "val")},
                                   cache_dir=str(tmp_path / "cache"))
        for split in ("train", "val"):
            rows = [(r["tokens"], r["doc_lens"], r["doc_ids"]) for r in ds[split]]
            assert rows == reference(shard_dir, split)
            assert len(ds[split]) == manifest["totals"][split]["rows"]
        tokens = ds["train"].with_format("numpy")[:]["tokens"]  # one [rows, seq_len] array
        assert tokens.shape == (manifest["totals"]["train"]["rows"], manifest["seq_len"])
        feature = ds["train"].features["tokens"]  # (the numpy formatter widens ints to int64; the data is not)
        assert feature.length == manifest["seq_len"] and feature.feature.dtype == manifest["dtype"]
    # Dataset.from_file expects the Arrow *stream* format: it cannot open an IPC file shard (FORMAT.md says so)
    shard_dir, manifest = shards[0]
    with pytest.raises(pa.ArrowInvalid):
        datasets.Dataset.from_file(files(shard_dir, manifest, "train")[0])


def test_polars_reads_and_scans_shards(shards):
    for shard_dir, manifest in shards:
        train = files(shard_dir, manifest, "train")
        df = pl.concat([pl.read_ipc(f) for f in train])
        assert df.schema["tokens"] == pl.Array(getattr(pl, manifest["dtype"].capitalize().replace("Uint", "UInt")),
                                               manifest["seq_len"])
        rows = list(zip(df["tokens"].to_list(), df["doc_lens"].to_list(), df["doc_ids"].to_list()))
        assert [(list(t), l, i) for t, l, i in rows] == reference(shard_dir, "train")
        # lazily, over all shards: the manifest's token and segment totals
        totals = (pl.scan_ipc(train)
                  .select(tokens=pl.col("doc_lens").list.sum().cast(pl.Int64).sum(),
                          segments=pl.col("doc_ids").list.len().sum(), rows=pl.len())
                  .collect().row(0, named=True))
        want = manifest["totals"]["train"]
        assert [totals[k] for k in ("tokens", "segments", "rows")] == [want[k] for k in ("tokens", "segments", "rows")]


def test_duckdb_queries_shards_through_pyarrow_and_polars(shards):
    shard_dir, manifest = shards[0]
    train = files(shard_dir, manifest, "train")
    table = pa.concat_tables([pa.ipc.open_file(pa.memory_map(f)).read_all() for f in train])
    con = duckdb.connect()
    con.register("shards", table)
    query = "SELECT sum(list_sum(doc_lens)), sum(len(doc_ids)), count(*) FROM shards"
    tokens, segments, rows = con.sql(query).fetchall()[0]
    want = manifest["totals"]["train"]
    assert (tokens, segments, rows) == (want["tokens"], want["segments"], want["rows"])
    # one row per document segment, with its token ids (the fixed-size list becomes a DuckDB ARRAY)
    con.register("numbered", table.append_column("row", pa.array(np.arange(table.num_rows))))
    segs = con.sql("""
        SELECT row, doc_id, tokens[start + 1 : start + len] AS ids FROM (
            SELECT row, unnest(doc_ids) AS doc_id, unnest(doc_lens) AS len,
                   unnest(list_transform(generate_series(1, len(doc_lens)),
                          lambda i: coalesce(list_sum(list_slice(doc_lens, 1, i - 1)), 0))) AS start,
                   tokens::USMALLINT[] AS tokens
            FROM numbered)
        ORDER BY row, start""").fetchall()
    expected = []
    for r, (toks, lens, ids) in enumerate(reference(shard_dir, "train")):
        at = 0
        for n, doc_id in zip(lens, ids):
            expected.append((r, doc_id, toks[at:at + n]))
            at += n
    assert segs == expected
    frame = pl.read_ipc(train[0])  # noqa: F841  (a polars DataFrame in scope is a table to DuckDB)
    assert duckdb.sql("SELECT count(*) FROM frame").fetchall()[0][0] == manifest["splits"]["train"][0]["rows"]


def test_docs_parquet_in_datasets_polars_and_duckdb(tmp_path):
    docs = [{"id": 7 * i + 1, "text": f"document {i} " + "word " * i, "source": f"file://{i}.txt",
             "meta": {"n": i}, "annotations": {"filters": {"words": i + 2}}} for i in range(30)]
    path = tmp_path / "docs" / "part-00000.parquet"
    write_docs_parquet(str(path), docs)
    want = [(d["id"], d["text"]) for d in sorted(docs, key=lambda d: d["id"])]
    ds = datasets.load_dataset("parquet", data_files=str(path), cache_dir=str(tmp_path / "cache"))["train"]
    assert list(zip(ds["id"], ds["text"])) == want
    df = pl.read_parquet(path)
    assert list(zip(df["id"].to_list(), df["text"].to_list())) == want
    rows = duckdb.sql(f"SELECT id, text FROM read_parquet('{path}') ORDER BY id").fetchall()
    assert rows == want

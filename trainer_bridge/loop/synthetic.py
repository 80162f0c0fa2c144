"""Small synthetic shard directories for tests and benchmarks, written with the real shard writer.

Each "document" is an arithmetic progression modulo the vocabulary (start and stride drawn per document), so a
model can learn it (the loss falls) and nothing depends on a tokenizer. Documents are packed first-fit into
rows, several per row, with padding left at the end of some rows, like real packed shards.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tokenizer.shards import write_shards


def _documents(rng: np.random.Generator, count: int, vocab_size: int, min_len: int, max_len: int):
    for doc_id in range(count):
        length = int(rng.integers(min_len, max_len + 1))
        start, stride = int(rng.integers(1, vocab_size)), int(rng.integers(1, 5))
        yield doc_id, (start + stride * np.arange(length)) % (vocab_size - 1) + 1  # id 0 is padding


def _pack(documents, seq_len: int, pad_id: int, fill: float):
    """Greedy packing: close a row when the next document does not fit or the row is ``fill`` full."""
    tokens, lens, ids = [], [], []
    for doc_id, doc in documents:
        doc = doc[:seq_len]
        if sum(lens) + len(doc) > seq_len or sum(lens) >= fill * seq_len:
            yield _row(tokens, lens, ids, seq_len, pad_id)
            tokens, lens, ids = [], [], []
        tokens.extend(doc.tolist())
        lens.append(len(doc))
        ids.append(doc_id)
    if lens:
        yield _row(tokens, lens, ids, seq_len, pad_id)


def _row(tokens, lens, ids, seq_len, pad_id):
    row = np.full(seq_len, pad_id, dtype=np.int64)
    row[: len(tokens)] = tokens
    return row, list(lens), list(ids)


def write_synthetic_shards(shard_dir: Path, *, seq_len: int = 32, vocab_size: int = 64, train_docs: int = 200,
                           val_docs: int = 24, min_doc_len: int = 3, max_doc_len: int = 20, seed: int = 0,
                           fill: float = 0.9, rows_per_shard: int = 16) -> dict:
    rng = np.random.default_rng(seed)
    common = dict(seq_len=seq_len, vocab_size=vocab_size, pad_id=0, bos_id=None, eos_id=None,
                  tokenizer_sha256="synthetic", packing={"algorithm": "greedy", "synthetic": True},
                  rows_per_shard=rows_per_shard)
    write_shards(str(shard_dir), _pack(_documents(rng, train_docs, vocab_size, min_doc_len, max_doc_len),
                                       seq_len, 0, fill), split="train", **common)
    return write_shards(str(shard_dir), _pack(_documents(rng, val_docs, vocab_size, min_doc_len, max_doc_len),
                                              seq_len, 0, fill), split="val", **common)

"""Training data: a deterministic global sample order over the shards, collation of packed rows, prefetching.

Contract 4 (DESIGN.md): the order of samples is a function of (seed, epoch) only, and the loader's whole
state is one number, the global sample index. Step s uses the ``global_batch_size`` samples that follow the
samples consumed so far, however many ranks there are; a data-parallel rank takes its slice of each
micro-step. A checkpoint taken on 2 ranks therefore resumes on 1 (or 4) with no sample skipped or repeated.

Shards are read only through ``tokenizer.shards.ShardReader`` (memory-mapped Arrow, Contract 3).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np
import torch

from runio.files import append_jsonl, sha256_file
from runio.layout import RunPaths
from tokenizer.shards import ShardReader, manifest_path, read_manifest
from trainer_bridge.loop.order import SAMPLE_ORDER, SampleOrder  # noqa: F401 (re-exported)

IGNORE_INDEX = -100


class RowSource(Protocol):
    """What the trainer needs of a shard reader (``tokenizer.shards.ShardReader`` provides it)."""

    seq_len: int
    pad_id: int

    def __len__(self) -> int: ...

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def open_split(shard_dir, split: str, expected_tokenizer_sha256: str | None = None, verify: str = "manifest"):
    """The split's reader. Opening always compares every file's size, schema and row count with the manifest;
    ``verify="full"`` also hashes each shard against the manifest's sha256 and checks its rows
    (``ShardReader.verify``). A shard that fails raises ``ShardFormatError`` naming it."""
    reader = ShardReader(str(shard_dir), split=split, expected_tokenizer_sha256=expected_tokenizer_sha256)
    if verify == "full":
        reader.verify()
    return reader


def has_split(shard_dir, split: str) -> bool:
    """Whether the shard manifest lists ``split`` (a manifest that cannot be read raises ShardFormatError)."""
    return split in read_manifest(str(shard_dir))["splits"]


def shards_identity(shard_dir) -> dict:
    """What a checkpoint records of the shards it was trained on: the manifest's sha256 (which covers every
    shard's sha256) and, to name what changed, the vocabulary, sequence length, tokenizer and each split's files."""
    manifest = read_manifest(str(shard_dir))
    return {"manifest_sha256": sha256_file(manifest_path(str(shard_dir))),
            "tokenizer_sha256": manifest.get("tokenizer_sha256"), "seq_len": manifest.get("seq_len"),
            "vocab_size": manifest.get("vocab_size"),
            "splits": {split: {entry["file"]: entry.get("sha256") for entry in entries}
                       for split, entries in sorted(manifest.get("splits", {}).items())}}


def shards_difference(saved: dict, current: dict) -> list[str]:
    """What differs between two ``shards_identity`` records, one short phrase each; [] when they agree."""
    if saved.get("manifest_sha256") == current.get("manifest_sha256"):
        return []
    out = []
    for key in ("tokenizer_sha256", "seq_len", "vocab_size"):
        if saved.get(key) != current.get(key):
            before, after = saved.get(key), current.get(key)
            if key.endswith("sha256"):
                before, after = str(before)[:12], str(after)[:12]
            out.append(f"{key} {before} → {after}")
    splits_before, splits_now = saved.get("splits") or {}, current.get("splits") or {}
    for split in sorted(set(splits_before) | set(splits_now)):
        before, now = splits_before.get(split) or {}, splits_now.get(split) or {}
        added = sorted(set(now) - set(before))
        removed = sorted(set(before) - set(now))
        changed = sorted(f for f in set(now) & set(before) if now[f] != before[f])
        for label, files in (("added", added), ("removed", removed), ("changed", changed)):
            if files:
                shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
                out.append(f"{split} shards {label}: {shown}")
    if not out:  # same files and settings, other manifest bytes (e.g. statistics)
        out.append(f"manifest sha256 {str(saved.get('manifest_sha256'))[:12]} → "
                   f"{str(current.get('manifest_sha256'))[:12]}")
    return out


class DataOrderLog:
    """``train/data_order.jsonl`` (rank 0): one ``stretch`` line whenever training starts consuming samples at a
    step (a start, a resume on any world size, an init from another run, a rollback, where the step goes back
    but the data moves on) and one ``end`` line when the loop ends without an error. Within a stretch step s
    uses samples ``sample + (s - step) * global_batch_size`` onwards; with the order's name, seed and row count
    that is every step's rows, for ``corpusmill trace`` and the data cards. Two small writes per start."""

    def __init__(self, paths: RunPaths, *, seed: int, global_batch_size: int, micro_batch_size: int, dp: int,
                 train_rows: int, shards_manifest_sha256: str | None, is_main: bool):
        self.path = paths.data_order_jsonl
        self.is_main = is_main
        self.common = {"order": SAMPLE_ORDER, "seed": seed, "train_rows": train_rows,
                       "global_batch_size": global_batch_size, "micro_batch_size": micro_batch_size, "dp": dp,
                       "shards_manifest_sha256": shards_manifest_sha256}

    def stretch(self, cause: str, step: int, sample: int, **extra) -> None:
        if self.is_main:
            append_jsonl(self.path, {"event": "stretch", "cause": cause, "step": step, "sample": sample,
                                     **self.common, **extra, "time": time.time()})

    def end(self, step: int, sample: int) -> None:
        if self.is_main:
            append_jsonl(self.path, {"event": "end", "step": step, "sample": sample, "time": time.time()})


@dataclass
class Batch:
    """Collated packed rows. ``labels`` is the next token of the same document, else IGNORE_INDEX."""

    input_ids: torch.Tensor  # [n, S] int64
    labels: torch.Tensor  # [n, S] int64
    position_ids: torch.Tensor  # [n, S] int64, restart at 0 at every document
    segment_ids: torch.Tensor  # [n, S] int64, document index in the row; -1 for padding
    sample_ids: list[int]  # global row indices, for traceability and the resume tests
    target_tokens: int  # labels that count in the loss
    real_tokens: int  # non-padding tokens
    sum_squared_segment_lengths: int  # for attention FLOPs

    def to(self, device: torch.device) -> "Batch":
        moved = [t.to(device, non_blocking=True) for t in (self.input_ids, self.labels, self.position_ids,
                                                             self.segment_ids)]
        return Batch(*moved, sample_ids=self.sample_ids, target_tokens=self.target_tokens,
                     real_tokens=self.real_tokens, sum_squared_segment_lengths=self.sum_squared_segment_lengths)


def collate(rows: list[tuple[np.ndarray, np.ndarray]], sample_ids: list[int], seq_len: int) -> Batch:
    """Build model inputs from packed rows (tokens, doc_lens)."""
    n = len(rows)
    input_ids = np.empty((n, seq_len), dtype=np.int64)
    labels = np.full((n, seq_len), IGNORE_INDEX, dtype=np.int64)
    position_ids = np.zeros((n, seq_len), dtype=np.int64)
    segment_ids = np.full((n, seq_len), -1, dtype=np.int64)
    sum_sq = 0
    for i, (tokens, doc_lens) in enumerate(rows):
        doc_lens = np.asarray(doc_lens, dtype=np.int64)
        used = int(doc_lens.sum())
        if len(tokens) != seq_len or used > seq_len or (doc_lens <= 0).any():
            raise ValueError(f"sample {sample_ids[i]}: malformed row (len {len(tokens)}, doc_lens {doc_lens.tolist()}, "
                             f"seq_len {seq_len})")
        input_ids[i] = tokens
        starts = np.cumsum(doc_lens) - doc_lens
        segment_ids[i, :used] = np.repeat(np.arange(len(doc_lens)), doc_lens)
        position_ids[i, :used] = np.arange(used) - np.repeat(starts, doc_lens)
        # Next-token targets only inside a document: the target of a document's last token would be the next
        # document's first token, which it cannot predict.
        same_doc_next = segment_ids[i, :-1] == segment_ids[i, 1:]
        same_doc_next &= segment_ids[i, :-1] >= 0
        labels[i, :-1] = np.where(same_doc_next, input_ids[i, 1:], IGNORE_INDEX)
        sum_sq += int((doc_lens * doc_lens).sum())
    return Batch(torch.from_numpy(input_ids), torch.from_numpy(labels), torch.from_numpy(position_ids),
                 torch.from_numpy(segment_ids), sample_ids=list(sample_ids),
                 target_tokens=int((labels != IGNORE_INDEX).sum()), real_tokens=int((segment_ids >= 0).sum()),
                 sum_squared_segment_lengths=sum_sq)


@dataclass
class StepBatch:
    """One rank's share of one optimizer step: ``micro_batches`` in accumulation order."""

    first_sample: int
    micro_batches: list[Batch]

    @property
    def target_tokens(self) -> int:
        return sum(b.target_tokens for b in self.micro_batches)

    @property
    def sample_ids(self) -> list[int]:
        """The rows of every micro-batch, in order."""
        return [i for mb in self.micro_batches for i in mb.sample_ids]


class StepBatches:
    """Yields this rank's StepBatch for consecutive steps from ``start_sample``, loaded in a background thread.

    Reading memory-mapped rows and collating is numpy work; doing it ``prefetch`` steps ahead keeps the
    training step from waiting on data. ``wait_seconds`` accumulates the time the consumer was blocked.
    """

    def __init__(self, source: RowSource, *, seed: int, start_sample: int, global_batch_size: int,
                 micro_batch_size: int, dp_rank: int, dp_size: int, prefetch: int):
        self.source = source
        self.order = SampleOrder(len(source), seed)
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.next_sample = start_sample
        self.wait_seconds = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(start_sample,), daemon=True,
                                        name="corpusmill-data")
        self._thread.start()

    def rank_sample_indices(self, first_sample: int) -> list[list[int]]:
        """Global sample indices this rank uses in each micro-step of the step starting at ``first_sample``."""
        per_micro_step = self.micro_batch_size * self.dp_size
        accumulation = self.global_batch_size // per_micro_step
        out = []
        for micro in range(accumulation):
            start = first_sample + micro * per_micro_step + self.dp_rank * self.micro_batch_size
            out.append(list(range(start, start + self.micro_batch_size)))
        return out

    def load_step(self, first_sample: int) -> StepBatch:
        micro_batches = []
        for indices in self.rank_sample_indices(first_sample):
            row_ids = [self.order.row_index(g) for g in indices]
            rows = []
            for r in row_ids:
                tokens, doc_lens, _doc_ids = self.source.row(r)
                rows.append((tokens, doc_lens))
            micro_batches.append(collate(rows, row_ids, self.source.seq_len))
        return StepBatch(first_sample=first_sample, micro_batches=micro_batches)

    def _produce(self, first_sample: int) -> None:
        try:
            while not self._stop.is_set():
                item = self.load_step(first_sample)
                first_sample += self.global_batch_size
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as error:  # surfaced in the training thread by __next__
            self._queue.put(error)

    def __iter__(self) -> Iterator[StepBatch]:
        return self

    def __next__(self) -> StepBatch:
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - start
        if isinstance(item, BaseException):
            raise RuntimeError(f"data loading failed at sample {self.next_sample}: {item}") from item
        assert item.first_sample == self.next_sample
        self.next_sample += self.global_batch_size
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def validation_batches(source: RowSource, *, max_rows: int, micro_batch_size: int, dp_rank: int,
                       dp_size: int, divisible_by: int = 1) -> list[Batch]:
    """A fixed held-out slice (the first ``max_rows`` rows of the 'val' split), split across dp ranks.

    Every rank gets the same number of rows in batches of the same sizes (collectives and pipeline schedules
    need that); a batch size is a multiple of ``divisible_by`` (pipelines: only whole micro-batches)."""
    per_rank = min(max_rows, len(source)) // dp_size
    mine = list(range(dp_rank, per_rank * dp_size, dp_size))
    batches = []
    for start in range(0, len(mine), micro_batch_size):
        ids = mine[start:start + micro_batch_size]
        ids = ids[: len(ids) // divisible_by * divisible_by]
        if ids:
            batches.append(collate([source.row(i)[:2] for i in ids], ids, source.seq_len))
    return batches

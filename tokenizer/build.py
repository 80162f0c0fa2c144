"""The Beam graph from kept documents to packed shards: read → encode → plan → route → write shards → manifest.

    slices of docs/*.parquet row groups ─ Reshuffle ─ ReadDocBatches ─ Encode (tokens → a scratch file per batch)
                                                                          │                         │
                                                   (split, ids, lengths, file) ─ GroupByKey ─ MakePlan  (per split,
                                                                          │                         │  side input)
                                             RouteToShards ─ GroupByKey by (split, shard) ─ WriteShard ─ manifest

``PackShards`` is that graph as one PTransform, each stage of the drawing a named sub-transform;
``build_shards`` is the shard stage of a run: the tokenizer first (trained or loaded), then ``PackShards``.

Determinism on any number of workers: which rows exist and what they hold is decided by one packing plan per
split, computed from the documents' (id, length) pairs sorted by id — never from the order in which workers
produce encodings. Beam's cost is per element, so elements are batches of ``packing.encode_batch_docs``
documents, and each encoded batch sends one element per shard it touches.

Memory independent of the corpus (issue 44): no shuffle carries text or tokens. Beam's local runner keeps every
shuffle's data in the driver process, and the encoded batches wait there for the plans (a side input) before
they can be routed: at 5 GB of input that was ~1 GB more in the driver than at 0.5 GB. So the units of reading
are slices of row groups (``doc_units``: about ``SLICE_BATCHES`` encode batches each, spread over the workers
before anything is read), the encoder writes each batch's tokens to a file of its own in ``<shard_dir>/.tokens``,
and the shuffles carry (id, length) arrays and those files' paths; the worker writing a shard reads its pieces
from the files (memory-mapped). The folder is removed once the shards are written.

Shards are written with local file APIs (memory-mapped reading needs local files anyway): on a cluster, point
``shard_dir`` at a shared mount. Documents are read through Beam's FileSystems and may live anywhere.
"""
from __future__ import annotations

import glob
import itertools
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from beamio.beam_options import make_pipeline
from runio.layout import RunPaths
from tokenizer.config import PackingConfig, TokenizerConfig
from tokenizer.docs import check_doc_schema, in_val_split, list_doc_files, open_parquet
from tokenizer.language_check import tokenizer_check
from tokenizer.pack import PackPlan, make_plan
from tokenizer.shards import (
    manifest_path,
    read_manifest,
    shard_file_name,
    token_dtype,
    write_manifest,
    write_shard_file,
)
from tokenizer.train import SpecialIds, special_ids, train_or_load

NAMESPACE = "tokenizer"
SPLITS = ("train", "val")
# A unit of reading is a slice of a row group of about this many encode batches' worth of text (in bytes).
SLICE_BATCHES = 2
# The encoded batches' token files, inside the shard directory (on a cluster, the shared mount the shards go to).
TOKENS_SCRATCH = ".tokens"


def scratch_dir(shard_dir: str) -> str:
    return os.path.join(shard_dir, TOKENS_SCRATCH)


# The per-split document figures of a split without documents (e.g. ``val`` of a small corpus).
NO_DOCUMENTS = {"docs": 0, "docs_longer_than_seq_len": 0, "docs_split": 0, "split_share": 0.0}


class ReadDocBatches(beam.DoFn):
    """(file, row group, first row, end row) → ``(split, ids int64 array, texts list)`` batches, bounded in documents
    and in bytes.

    Big elements keep Beam's per-element cost negligible and give ``encode_batch`` enough documents to spread
    over its threads (one long document does not leave the other threads idle).
    """

    def __init__(self, batch_docs: int, batch_bytes: int, val_fraction: float, split_seed: int):
        self._batch_docs = batch_docs
        self._batch_bytes = batch_bytes
        self._val_fraction = val_fraction
        self._split_seed = split_seed
        self._docs = Metrics.counter(NAMESPACE, "docs_read")

    def process(self, unit: tuple[str, int, int, int]) -> Iterator[tuple[str, np.ndarray, list[str]]]:
        path, row_group, first, end = unit
        parquet = open_parquet(path)
        pending_ids: list[np.ndarray] = []
        pending_texts: list[str] = []
        pending_bytes = 0
        at = 0  # the row group's row at the start of ``batch``
        for batch in parquet.iter_batches(batch_size=256, row_groups=[row_group], columns=["id", "text"]):
            batch_start, at = at, at + batch.num_rows
            if at <= first:
                continue
            if batch_start >= end:
                break
            batch = batch.slice(max(first - batch_start, 0), min(end, at) - max(first, batch_start))
            texts = batch.column(1)
            if texts.null_count:
                raise ValueError(f"{path}: row group {row_group} has documents with a null text")
            pending_ids.append(batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
            pending_texts.extend(texts.to_pylist())
            pending_bytes += texts.nbytes
            if len(pending_texts) >= self._batch_docs or pending_bytes >= self._batch_bytes:
                yield from self._emit(np.concatenate(pending_ids), pending_texts)
                pending_ids, pending_texts, pending_bytes = [], [], 0
        if pending_texts:
            yield from self._emit(np.concatenate(pending_ids), pending_texts)

    def _emit(self, ids: np.ndarray, texts: list[str]) -> Iterator[tuple[str, np.ndarray, list[str]]]:
        self._docs.inc(len(ids))
        val = in_val_split(ids, self._val_fraction, self._split_seed)
        for split, mask in (("train", ~val), ("val", val)):
            if mask.all():
                yield split, ids, texts
            elif mask.any():
                yield split, ids[mask], [t for t, m in zip(texts, mask) if m]


class EncodeBatch(beam.DoFn):
    """Encode a batch with one ``encode_batch`` call; write its tokens back to back to a file of their own in
    ``scratch_dir``; emit ``(split, ids, lengths, that file's path)``.

    Each document becomes ``[bos] tokens [eos]`` as configured. The tokenizer travels as its JSON text (so any
    worker can build it) and is built once per worker in ``setup``. The file's name is new each time (a retried
    bundle writes new files; the ones it wrote before are never read and go with the folder).
    """

    def __init__(self, tokenizer_json: str, special: SpecialIds, add_bos: bool, add_eos: bool, vocab_size: int,
                 scratch_dir: str):
        self._scratch_dir = scratch_dir
        self._tokenizer_json = tokenizer_json
        self._bos = [special.bos_id] if add_bos else []
        self._eos = [special.eos_id] if add_eos else []
        self._dtype = token_dtype(vocab_size)
        self._tokenizer = None
        self._docs = Metrics.counter(NAMESPACE, "docs_encoded")
        self._tokens = Metrics.counter(NAMESPACE, "tokens")
        self._busy_ms = Metrics.counter(NAMESPACE, "encode_busy_ms")

    def setup(self):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(self._tokenizer_json)

    def process(self, element):
        split, ids, texts = element
        started = time.perf_counter()
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        id_lists = [e.ids for e in encodings]
        extra = len(self._bos) + len(self._eos)
        lengths = np.fromiter((len(x) + extra for x in id_lists), dtype=np.int64, count=len(id_lists))
        total = int(lengths.sum())
        if extra:
            pieces = itertools.chain.from_iterable(itertools.chain(self._bos, x, self._eos) for x in id_lists)
        else:
            pieces = itertools.chain.from_iterable(id_lists)
        flat = np.fromiter(pieces, dtype=self._dtype, count=total)
        path = os.path.join(self._scratch_dir, f"{split}-{uuid.uuid4().hex}.npy")
        np.save(path, flat, allow_pickle=False)
        self._docs.inc(len(ids))
        self._tokens.inc(total)
        self._busy_ms.inc(int((time.perf_counter() - started) * 1000))
        yield split, ids, lengths, path


def plan_split(element: tuple[str, Iterable[tuple[np.ndarray, np.ndarray]]], packing: PackingConfig):
    """All (id, length) pairs of one split → its packing plan (sorted by id first: order-independent)."""
    split, parts = element
    parts = list(parts)
    ids = np.concatenate([p[0] for p in parts])
    lengths = np.concatenate([p[1] for p in parts])
    order = np.argsort(ids, kind="stable")
    ids, lengths = ids[order], lengths[order]
    if len(ids) > 1 and np.any(ids[1:] == ids[:-1]):
        dup = int(ids[1:][ids[1:] == ids[:-1]][0])
        raise ValueError(f"document id {dup} occurs more than once in docs/ (ids must be unique, Contract 1)")
    plan = make_plan(zip(ids.tolist(), lengths.tolist()), packing.seq_len, packing.window, packing.max_open_rows)
    return split, plan


class RouteToShards(beam.DoFn):
    """Cut an encoded batch into the pieces the plan places, grouped into one element per destination shard.

    Emits ``((split, shard), (rows_in_shard, offsets, lengths, starts, tokens_path))``: where each piece goes, and
    where it starts in the batch's token file (the tokens stay in the file; see the module docstring).
    """

    def __init__(self, rows_per_shard: int):
        self._rows_per_shard = rows_per_shard

    def process(self, element, plans: dict[str, PackPlan]):
        split, ids, lengths, tokens_path = element
        plan = plans[split]
        doc_starts = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_starts[1:])
        lo = np.searchsorted(plan.doc_id, ids, side="left")
        hi = np.searchsorted(plan.doc_id, ids, side="right")
        placed = hi - lo
        if np.any(placed[lengths > 0] == 0):
            missing = int(ids[(lengths > 0) & (placed == 0)][0])
            raise RuntimeError(f"document {missing} has tokens but no place in the packing plan")
        # Placement indices of this batch, with the flat-token position of each piece.
        which = np.repeat(np.arange(len(ids)), placed)
        idx = np.repeat(lo - np.cumsum(np.concatenate([[0], placed[:-1]])), placed) + np.arange(int(placed.sum()))
        source = doc_starts[which] + plan.start[idx]
        rows = plan.row[idx]
        shards = rows // self._rows_per_shard
        for shard in np.unique(shards):
            sel = np.nonzero(shards == shard)[0]
            yield (split, int(shard)), (
                rows[sel] - shard * self._rows_per_shard, plan.offset[idx[sel]], plan.length[idx[sel]], source[sel],
                tokens_path,
            )


class WriteShard(beam.DoFn):
    """Assemble one shard's rows from its pieces, check every slot of the plan is filled, write it atomically."""

    def __init__(self, shard_dir: str, rows_per_shard: int, vocab_size: int, pad_id: int):
        self._shard_dir = shard_dir
        self._rows_per_shard = rows_per_shard
        self._vocab_size = vocab_size
        self._pad_id = pad_id
        self._rows = Metrics.counter(NAMESPACE, "rows_written")

    def process(self, element, plans: dict[str, PackPlan]):
        (split, shard), parts = element
        plan = plans[split]
        seq_len = plan.seq_len
        first = shard * self._rows_per_shard
        n_rows = min(self._rows_per_shard, plan.num_rows - first)
        block = np.full((n_rows, seq_len), self._pad_id, dtype=token_dtype(self._vocab_size))
        written = np.zeros(n_rows, dtype=np.int64)
        for rows, offsets, lengths, starts, tokens_path in parts:
            tokens = np.load(tokens_path, mmap_mode="r", allow_pickle=False)
            for r, off, n, at in zip(rows.tolist(), offsets.tolist(), lengths.tolist(), starts.tolist()):
                block[r, off : off + n] = tokens[at : at + n]
            del tokens
            np.add.at(written, rows, lengths)

        def row_iter():
            for r in range(n_rows):
                _, doc_lens, doc_ids = plan.row_layout(first + r)
                if written[r] != int(doc_lens.sum()):
                    raise RuntimeError(
                        f"{split} row {first + r}: {written[r]} tokens arrived, the plan places {int(doc_lens.sum())}"
                    )
                yield block[r], doc_lens, doc_ids

        entry = write_shard_file(
            os.path.join(self._shard_dir, shard_file_name(split, shard)), row_iter(),
            seq_len=seq_len, vocab_size=self._vocab_size, pad_id=self._pad_id,
        )
        self._rows.inc(n_rows)
        yield split, (shard, entry)


def doc_units(files: list[str], slice_bytes: int) -> list[tuple[str, int, int, int]]:
    """``(file, row group, first row, end row)``: every docs file's row groups cut into slices of about
    ``slice_bytes`` of text (by the parquet metadata's uncompressed size), the units of reading spread over the
    workers. Reading a slice decodes its row group up to the slice's end; the row groups the clean writes hold
    ~20 MB of text, so that costs little beside encoding, and no shuffle has to spread the texts instead."""
    units = []
    for path in files:
        parquet = open_parquet(path)
        check_doc_schema(path, parquet.schema_arrow)
        text_column = parquet.schema_arrow.get_field_index("text")
        for rg in range(parquet.metadata.num_row_groups):
            meta = parquet.metadata.row_group(rg)
            rows = meta.num_rows
            if rows == 0:
                continue
            slices = min(rows, max(1, math.ceil(meta.column(text_column).total_uncompressed_size / slice_bytes)))
            cuts = [rows * k // slices for k in range(slices + 1)]
            units.extend((path, rg, first, end) for first, end in zip(cuts[:-1], cuts[1:]))
    return units


def packing_info(packing: PackingConfig) -> dict:
    """The manifest's ``packing`` record: how the rows were made, enough to make them again."""
    return {
        "algorithm": "best_fit_decreasing_window",
        "window": packing.window,
        "max_open_rows": packing.max_open_rows,
        "split_only_longer_than_seq_len": True,
        "add_bos": packing.add_bos,
        "add_eos": packing.add_eos,
        "rows_per_shard": packing.rows_per_shard,
        "val_fraction": packing.val_fraction,
        "split_seed": packing.split_seed,
        "split_hash": "splitmix64(id + (seed + 1) * 0x9E3779B97F4A7C15) < val_fraction * 2**64",
    }


@dataclass(frozen=True)
class ShardSettings:
    """What every shard and the manifest share: the packing config and the tokenizer's size, ids and sha256."""

    packing: PackingConfig
    vocab_size: int
    special: SpecialIds
    tokenizer_sha256: str
    tokenizer_check: dict | None = None  # bytes per token per language (tokenizer/language_check.py)

    def write_manifest(self, shard_dir: str, splits: dict[str, list[dict]], split_stats: dict | None = None) -> dict:
        return write_manifest(
            shard_dir, splits, seq_len=self.packing.seq_len, vocab_size=self.vocab_size, pad_id=self.special.pad_id,
            bos_id=self.special.bos_id, eos_id=self.special.eos_id, tokenizer_sha256=self.tokenizer_sha256,
            packing=packing_info(self.packing), split_stats=split_stats, tokenizer_check=self.tokenizer_check,
        )


class ReadAndEncode(beam.PTransform):
    """Row-group slices → ``(split, ids, lengths, tokens file)`` batches, the slices spread over the workers."""

    def __init__(self, units: Sequence[tuple[str, int, int, int]], tokenizer_json: str, settings: ShardSettings,
                 scratch_dir: str):
        super().__init__()
        self.units, self.tokenizer_json, self.settings = list(units), tokenizer_json, settings
        self.scratch_dir = scratch_dir

    def expand(self, pbegin):
        packing = self.settings.packing
        return (
            pbegin
            | "DocUnits" >> beam.Create(self.units)
            | "SpreadUnits" >> beam.Reshuffle()
            | "ReadDocs" >> beam.ParDo(ReadDocBatches(packing.encode_batch_docs, packing.encode_batch_bytes,
                                                      packing.val_fraction, packing.split_seed))
            | "Encode" >> beam.ParDo(EncodeBatch(self.tokenizer_json, self.settings.special, packing.add_bos,
                                                 packing.add_eos, self.settings.vocab_size, self.scratch_dir))
        )


class MakePlans(beam.PTransform):
    """Encoded batches → one ``(split, PackPlan)`` per split, from the (id, length) pairs alone."""

    def __init__(self, packing: PackingConfig):
        super().__init__()
        self.packing = packing

    def expand(self, encoded):
        return (
            encoded
            | "Lengths" >> beam.Map(lambda e: (e[0], (e[1], e[2])))
            | "GatherLengths" >> beam.GroupByKey()
            | "Plan" >> beam.Map(plan_split, self.packing)
        )


class RouteAndWriteShards(beam.PTransform):
    """Encoded batches → shard files in ``shard_dir``; emits ``(split, [(shard, manifest entry), ...])``.

    Each batch's tokens are cut into the pieces the plan places; where they lie in its tokens file goes to the
    worker writing their shard, which reads them from there.
    """

    def __init__(self, plans, shard_dir: str, settings: ShardSettings):
        super().__init__()
        self.plans, self.shard_dir, self.settings = plans, shard_dir, settings

    def expand(self, encoded):
        rows_per_shard = self.settings.packing.rows_per_shard
        return (
            encoded
            | "Route" >> beam.ParDo(RouteToShards(rows_per_shard), plans=self.plans)
            | "GatherShards" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(WriteShard(self.shard_dir, rows_per_shard, self.settings.vocab_size,
                                                     self.settings.special.pad_id), plans=self.plans)
            | "GatherEntries" >> beam.GroupByKey()
        )


def _manifest_of(element: tuple[None, Iterable[tuple[str, Iterable[tuple[int, dict]]]]], plans: dict[str, PackPlan],
                 shard_dir: str, settings: ShardSettings) -> Iterator[dict]:
    """Write the manifest for every split's shard entries (shard order) and the plans' document counts."""
    _, entries_by_split = element
    splits = {split: [] for split in (*SPLITS, *plans)}
    for split, entries in entries_by_split:
        splits[split] = [e for _, e in sorted(entries, key=lambda se: se[0])]
    stats = {split: dict(NO_DOCUMENTS) for split in splits}  # a split no document fell into has none
    stats.update({split: {k: v for k, v in plan.stats.as_dict().items() if k.startswith("docs") or k == "split_share"}
                  for split, plan in plans.items()})
    yield settings.write_manifest(shard_dir, splits, stats)


class WriteShardManifest(beam.PTransform):
    """Every split's shard entries, gathered in one place → ``manifest.json`` (written after every shard)."""

    def __init__(self, plans, shard_dir: str, settings: ShardSettings):
        super().__init__()
        self.plans, self.shard_dir, self.settings = plans, shard_dir, settings

    def expand(self, entries):
        return (
            entries
            | "OneKey" >> beam.Map(lambda kv: (None, kv))
            | "AllEntries" >> beam.GroupByKey()
            | "Manifest" >> beam.FlatMap(_manifest_of, plans=self.plans, shard_dir=self.shard_dir,
                                         settings=self.settings)
        )


class PackShards(beam.PTransform):
    """Kept documents → packed shards and their manifest (Contract 3), as the module docstring draws it.

    ``units`` are the (docs file, row group) pairs to read; ``tokenizer_json`` is the tokenizer's JSON text
    (it travels with the graph, so no worker needs a shared filesystem); shards land in ``shard_dir``.
    Returns the PCollection holding the written manifest (empty when no document produced a token).
    """

    def __init__(self, units: Sequence[tuple[str, int, int, int]], tokenizer_json: str, settings: ShardSettings,
                 shard_dir: str):
        super().__init__()
        self.units, self.tokenizer_json, self.settings, self.shard_dir = units, tokenizer_json, settings, shard_dir

    def expand(self, pbegin):
        encoded = pbegin | "ReadAndEncode" >> ReadAndEncode(self.units, self.tokenizer_json, self.settings,
                                                            scratch_dir(self.shard_dir))
        plans = beam.pvalue.AsDict(encoded | "MakePlans" >> MakePlans(self.settings.packing))
        entries = encoded | "RouteAndWrite" >> RouteAndWriteShards(plans, self.shard_dir, self.settings)
        return entries | "WriteManifest" >> WriteShardManifest(plans, self.shard_dir, self.settings)


def build_shards(
    run: RunPaths | str | os.PathLike,
    tokenizer_cfg: TokenizerConfig,
    packing_cfg: PackingConfig,
    pipeline: beam.Pipeline | None = None,
    *,
    docs_dir: str | None = None,
    shard_dir: str | None = None,
) -> dict:
    """The shard stage of a run: train (or load) the tokenizer, then encode, pack and shard the run's ``docs/``
    into its ``shards/`` (``docs_dir`` / ``shard_dir`` read or write elsewhere).

    ``run`` is the run directory's layout (a plain path is taken as the run directory). ``pipeline`` is a
    fresh, unused ``beam.Pipeline`` (the caller picks runner and options); it is run here. ``None`` means the
    in-process runner. Returns the shard manifest (also written as the shard directory's ``manifest.json``).
    """
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    docs_dir = docs_dir or str(paths.docs)
    shard_dir = shard_dir or str(paths.shards)
    tok, _, tokenizer_sha = train_or_load(paths, tokenizer_cfg, packing_cfg)
    doc_files = list_doc_files(docs_dir)
    check = tokenizer_check(tok, doc_files)  # measured before the shards: the manifest is still written last
    settings = ShardSettings(packing_cfg, tok.get_vocab_size(with_added_tokens=True),
                             special_ids(tok, tokenizer_cfg, packing_cfg), tokenizer_sha, check)
    units = doc_units(doc_files, SLICE_BATCHES * packing_cfg.encode_batch_bytes)

    os.makedirs(shard_dir, exist_ok=True)
    if os.path.exists(manifest_path(shard_dir)):
        os.remove(manifest_path(shard_dir))  # from here until the new manifest lands, the directory reads as incomplete
    scratch = scratch_dir(shard_dir)
    shutil.rmtree(scratch, ignore_errors=True)  # an interrupted earlier attempt's token files
    os.makedirs(scratch)
    p = pipeline if pipeline is not None else make_pipeline("inprocess", workers=1)
    _ = p | "PackShards" >> PackShards(units, tok.to_str(), settings, shard_dir)
    p.run().wait_until_finish()
    shutil.rmtree(scratch)

    if not os.path.exists(manifest_path(shard_dir)):
        # No document produced a token (every text empty and no bos/eos): a valid, empty data set.
        settings.write_manifest(shard_dir, {split: [] for split in SPLITS},
                                {split: dict(NO_DOCUMENTS) for split in SPLITS})
    manifest = read_manifest(shard_dir)
    listed = {e["file"] for entries in manifest["splits"].values() for e in entries}
    for path in glob.glob(os.path.join(shard_dir, "*.arrow")):
        if os.path.basename(path) not in listed:
            os.remove(path)  # a shard of an earlier, larger run: not part of this one
    return manifest

"""Contract 3: packed training rows in Arrow IPC *file* shards, plus ``shards/manifest.json``.

One row = one packed training sequence:
    tokens    fixed_size_list<uint16 | uint32>[seq_len]   (uint16 when every id fits)
    doc_lens  list<int32>   lengths of the document segments in the row, in order; the rest is ``pad_id``
    doc_ids   list<int64>   source document id of each segment

Shards are written to a temporary name and renamed into place; the manifest is written last, so a directory
whose manifest does not list a shard does not contain it. The reader memory-maps every shard and returns rows
as zero-copy numpy views: opening a directory reads only Arrow footers and the manifest, never whole shards.
See ``tokenizer/FORMAT.md`` for the reference a reader in another tool needs.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
import json
import logging
import os
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from runio.files import atomic_path, sha256_file, write_json
from runio.layout import shard_set_manifest

log = logging.getLogger(__name__)

FORMAT_NAME = "corpusmill-shards"
FORMAT_VERSION = 1
UINT16_VOCAB_LIMIT = 1 << 16
# Rows per Arrow record batch inside a shard: bounds the writer's memory, irrelevant to the reader.
RECORD_BATCH_ROWS = 1024


class ShardFormatError(Exception):
    """A shard directory that does not match Contract 3; the message names the file at fault."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= UINT16_VOCAB_LIMIT else np.dtype(np.uint32)


def shard_schema(seq_len: int, dtype: np.dtype) -> pa.Schema:
    return pa.schema(
        [
            pa.field("tokens", pa.list_(pa.from_numpy_dtype(dtype), seq_len), nullable=False),
            pa.field("doc_lens", pa.list_(pa.int32()), nullable=False),
            pa.field("doc_ids", pa.list_(pa.int64()), nullable=False),
        ]
    )


def manifest_path(shard_dir: str | os.PathLike) -> str:
    """Where a shard directory's manifest is (written last: without it, the directory holds no shards)."""
    return str(shard_set_manifest(shard_dir))


def read_manifest(shard_dir: str) -> dict:
    path = manifest_path(shard_dir)
    if not os.path.exists(path):
        raise ShardFormatError(f"{path}: no shard manifest (shards are incomplete or the path is wrong)")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ShardFormatError(f"{path}: unreadable manifest: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ShardFormatError(f"{path}: not a {FORMAT_NAME} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShardFormatError(
            f"{path}: format_version {manifest.get('format_version')!r} is not supported "
            f"(this reader reads version {FORMAT_VERSION})"
        )
    return manifest


class _ShardWriter:
    """Writes one shard file at ``path`` (a temporary name: the caller renames it), record batches of up to
    RECORD_BATCH_ROWS rows; ``close`` returns the manifest entry, under the file's final ``name``."""

    def __init__(self, path: str, name: str, schema: pa.Schema, seq_len: int, dtype: np.dtype):
        self.path = path
        self.name = name
        self._schema = schema
        self._seq_len = seq_len
        self._dtype = dtype
        self._sink = pa.OSFile(self.path, "wb")
        self._writer = pa.ipc.new_file(self._sink, schema)
        self.rows = 0
        self.tokens = 0
        self.segments = 0
        self._pending_tokens: list[np.ndarray] = []
        self._pending_lens: list[Sequence[int]] = []
        self._pending_ids: list[Sequence[int]] = []

    def add(self, tokens: np.ndarray, doc_lens: Sequence[int], doc_ids: Sequence[int]) -> None:
        self._pending_tokens.append(tokens)
        self._pending_lens.append(doc_lens)
        self._pending_ids.append(doc_ids)
        self.rows += 1
        self.tokens += int(sum(doc_lens))
        self.segments += len(doc_lens)
        if len(self._pending_tokens) >= RECORD_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending_tokens:
            return
        flat = np.concatenate(self._pending_tokens).astype(self._dtype, copy=False)
        tokens = pa.FixedSizeListArray.from_arrays(pa.array(flat), self._seq_len)
        lens = pa.array(self._pending_lens, type=pa.list_(pa.int32()))
        ids = pa.array(self._pending_ids, type=pa.list_(pa.int64()))
        self._writer.write_batch(pa.record_batch([tokens, lens, ids], schema=self._schema))
        self._pending_tokens, self._pending_lens, self._pending_ids = [], [], []

    def close(self) -> dict:
        self._flush()
        self._writer.close()
        self._sink.close()
        with open(self.path, "rb+") as f:
            os.fsync(f.fileno())
        return {
            "file": self.name,
            "rows": self.rows,
            "tokens": self.tokens,
            "padding": self.rows * self._seq_len - self.tokens,
            "segments": self.segments,
            "bytes": os.path.getsize(self.path),
            "sha256": sha256_file(self.path),
        }

    def abort(self) -> None:
        try:
            self._writer.close()
            self._sink.close()
        except Exception as error:  # noqa: BLE001 - the temp file is removed either way; the first error is the one raised
            log.warning("%s: closing the unfinished shard failed too (%s: %s)", self.path, type(error).__name__, error)


def _check_row(index: int, tokens: np.ndarray, doc_lens: Sequence[int], doc_ids: Sequence[int],
               seq_len: int, vocab_size: int, pad_id: int) -> None:
    if tokens.ndim != 1 or tokens.shape[0] != seq_len:
        raise ValueError(f"row {index}: tokens has shape {tokens.shape}, expected ({seq_len},)")
    if len(doc_lens) != len(doc_ids):
        raise ValueError(f"row {index}: {len(doc_lens)} doc_lens but {len(doc_ids)} doc_ids")
    if len(doc_lens) == 0:
        raise ValueError(f"row {index}: a row must hold at least one document segment")
    if any(n <= 0 for n in doc_lens):
        raise ValueError(f"row {index}: doc_lens must be positive, got {list(doc_lens)}")
    used = int(sum(doc_lens))
    if used > seq_len:
        raise ValueError(f"row {index}: doc_lens sum to {used} > seq_len {seq_len}")
    if tokens.size and (int(tokens.max()) >= vocab_size or int(tokens.min()) < 0):
        raise ValueError(f"row {index}: token id out of range [0, {vocab_size})")
    if used < seq_len and np.any(tokens[used:] != pad_id):
        raise ValueError(f"row {index}: positions after the last segment must be pad_id {pad_id}")


def _totals(shards: list[dict], seq_len: int) -> dict:
    rows = sum(s["rows"] for s in shards)
    tokens = sum(s["tokens"] for s in shards)
    slots = rows * seq_len
    return {
        "shards": len(shards),
        "rows": rows,
        "tokens": tokens,
        "padding": slots - tokens,
        "segments": sum(s["segments"] for s in shards),
        "fill_ratio": (tokens / slots) if slots else 0.0,
    }


def shard_file_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}.arrow"


def _check_split_name(split: str) -> None:
    if not split or "/" in split or split.startswith(".") or not split.replace("_", "").isalnum():
        raise ValueError(f"split must be a plain name such as 'train' or 'val', got {split!r}")


def write_shard_file(
    path: str,
    rows: Iterable[tuple[np.ndarray, Sequence[int], Sequence[int]]],
    *,
    seq_len: int,
    vocab_size: int,
    pad_id: int,
) -> dict:
    """Write one shard file atomically (temp name, fsync, rename); returns its manifest entry.

    The building block for writers that produce shards in parallel (one call per shard, then
    ``write_manifest`` once): ``write_shards`` is the sequential front end to both.
    """
    dtype = token_dtype(vocab_size)
    with atomic_path(path) as tmp:
        writer = _ShardWriter(tmp, os.path.basename(path), shard_schema(seq_len, dtype), seq_len, dtype)
        try:
            for index, (tokens, doc_lens, doc_ids) in enumerate(rows):
                tokens = np.asarray(tokens)
                _check_row(index, tokens, doc_lens, doc_ids, seq_len, vocab_size, pad_id)
                writer.add(tokens, doc_lens, doc_ids)
            entry = writer.close()
        except BaseException:
            writer.abort()
            raise
    return entry


def write_manifest(
    shard_dir: str,
    splits: dict[str, list[dict]],
    *,
    seq_len: int,
    vocab_size: int,
    pad_id: int,
    bos_id: int | None,
    eos_id: int | None,
    tokenizer_sha256: str,
    packing: dict,
    split_stats: dict[str, dict] | None = None,
    tokenizer_check: dict | None = None,
) -> dict:
    """Write ``manifest.json`` atomically for the given splits' shard entries (written before it); returns it.

    ``split_stats`` adds per-split figures (e.g. documents and documents cut across rows) to ``totals``;
    ``tokenizer_check`` (optional) the tokenizer's bytes per token per language on the documents.
    """
    for split in splits:
        _check_split_name(split)
    totals = {split: _totals(entries, seq_len) for split, entries in splits.items()}
    for split, extra in (split_stats or {}).items():
        if split in totals:
            totals[split].update(extra)
    overall = _totals([e for entries in splits.values() for e in entries], seq_len)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "seq_len": seq_len,
        "dtype": token_dtype(vocab_size).name,
        "vocab_size": vocab_size,
        "pad_id": pad_id,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "tokenizer_sha256": tokenizer_sha256,
        "packing": {**packing, "fill_ratio": overall["fill_ratio"]},
        "totals": totals,
        "splits": splits,
    }
    if tokenizer_check is not None:
        manifest["tokenizer_check"] = tokenizer_check
    write_json(manifest_path(shard_dir), manifest, indent=2, sort_keys=True)
    return manifest


def write_shards(
    shard_dir: str,
    rows: Iterable[tuple[np.ndarray, Sequence[int], Sequence[int]]],
    *,
    split: str,
    seq_len: int,
    vocab_size: int,
    pad_id: int,
    bos_id: int | None,
    eos_id: int | None,
    tokenizer_sha256: str,
    packing: dict,
    rows_per_shard: int,
) -> dict:
    """Write one split's packed rows as shards ``<split>-NNNNN.arrow`` and (re)write the manifest last.

    ``rows`` yields ``(tokens, doc_lens, doc_ids)`` with ``tokens`` of length ``seq_len``. Splits written
    earlier into the same directory stay in the manifest when they share seq_len, vocabulary and tokenizer;
    otherwise this is an error (clear the directory first). Rewriting a split replaces its shards.
    Returns the manifest.
    """
    if seq_len <= 0 or rows_per_shard <= 0 or vocab_size <= 0:
        raise ValueError("seq_len, rows_per_shard and vocab_size must be positive")
    _check_split_name(split)
    for name, value in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
        if value is not None and not 0 <= value < vocab_size:
            raise ValueError(f"{name}={value} is outside the vocabulary [0, {vocab_size})")
    os.makedirs(shard_dir, exist_ok=True)
    settings = {
        "seq_len": seq_len, "dtype": token_dtype(vocab_size).name, "vocab_size": vocab_size, "pad_id": pad_id,
        "bos_id": bos_id, "eos_id": eos_id, "tokenizer_sha256": tokenizer_sha256,
    }
    previous: dict | None = None
    if os.path.exists(manifest_path(shard_dir)):
        previous = read_manifest(shard_dir)
        clash = {k: (previous.get(k), v) for k, v in settings.items() if previous.get(k) != v}
        if clash:
            raise ShardFormatError(
                f"{manifest_path(shard_dir)}: existing shards were written with different "
                f"settings {clash} (old, new); write into an empty directory"
            )

    def batches_of_rows() -> Iterator[list]:
        batch: list = []
        for row in rows:
            batch.append(row)
            if len(batch) == rows_per_shard:
                yield batch
                batch = []
        if batch:
            yield batch

    # One shard's rows are buffered (as references): bounded by rows_per_shard, as the writer already is.
    entries = [
        write_shard_file(
            os.path.join(shard_dir, shard_file_name(split, k)), shard_rows,
            seq_len=seq_len, vocab_size=vocab_size, pad_id=pad_id,
        )
        for k, shard_rows in enumerate(batches_of_rows())
    ]
    splits = dict(previous["splits"]) if previous else {}
    stale = {s["file"] for s in splits.get(split, [])} - {s["file"] for s in entries}
    splits[split] = entries
    old_stats = {
        name: {k: v for k, v in t.items() if k not in ("shards", "rows", "tokens", "padding", "segments", "fill_ratio")}
        for name, t in (previous or {}).get("totals", {}).items() if name != split
    }
    manifest = write_manifest(
        shard_dir, splits, seq_len=seq_len, vocab_size=vocab_size, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id,
        tokenizer_sha256=tokenizer_sha256, packing=packing, split_stats=old_stats,
    )
    # Only after the new manifest is in place may shards the old one listed disappear.
    for name in stale:
        stale_path = os.path.join(shard_dir, name)
        if os.path.exists(stale_path):
            os.remove(stale_path)
    return manifest


class _OpenShard:
    """One memory-mapped shard: per record batch, numpy views over the mapped buffers."""

    def __init__(self, shard_dir: str, entry: dict, schema: pa.Schema):
        self.path = os.path.join(shard_dir, entry["file"])
        self.entry = entry
        if not os.path.exists(self.path):
            raise ShardFormatError(f"{self.path}: shard listed in the manifest is missing from disk")
        size = os.path.getsize(self.path)
        if "bytes" in entry and size != entry["bytes"]:
            raise ShardFormatError(
                f"{self.path}: {size} bytes on disk, manifest says {entry['bytes']} (truncated or replaced)"
            )
        try:
            self._mmap = pa.memory_map(self.path, "r")
            reader = pa.ipc.open_file(self._mmap)
        except (pa.ArrowException, OSError) as e:
            raise ShardFormatError(f"{self.path}: not a readable Arrow IPC file ({e})") from e
        if not reader.schema.equals(schema):
            raise ShardFormatError(f"{self.path}: schema {reader.schema} does not match the manifest's {schema}")
        self.tokens: list[np.ndarray] = []
        self.len_offsets: list[np.ndarray] = []
        self.lens: list[np.ndarray] = []
        self.id_offsets: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.batch_starts: list[int] = []
        rows = 0
        try:
            for b in range(reader.num_record_batches):
                batch = reader.get_batch(b)
                self.batch_starts.append(rows)
                self._add_batch(batch, schema.field("tokens").type.list_size)
                rows += batch.num_rows
        except (pa.ArrowException, OSError, ValueError) as e:
            raise ShardFormatError(f"{self.path}: corrupt record batch ({e})") from e
        if rows != entry["rows"]:
            raise ShardFormatError(f"{self.path}: {rows} rows, manifest says {entry['rows']}")
        self.rows = rows

    def _add_batch(self, batch: pa.RecordBatch, seq_len: int) -> None:
        tokens, lens, ids = batch.column(0), batch.column(1), batch.column(2)
        if tokens.null_count or lens.null_count or ids.null_count:
            raise ValueError("null entries")
        # .values ignores any slice offset while .offsets honours it, so the pair indexes consistently.
        flat = tokens.values.to_numpy(zero_copy_only=True)
        start = tokens.offset * seq_len
        self.tokens.append(flat[start : start + len(tokens) * seq_len].reshape(len(tokens), seq_len))
        self.len_offsets.append(lens.offsets.to_numpy(zero_copy_only=True))
        self.lens.append(lens.values.to_numpy(zero_copy_only=True))
        self.id_offsets.append(ids.offsets.to_numpy(zero_copy_only=True))
        self.ids.append(ids.values.to_numpy(zero_copy_only=True))

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = bisect.bisect_right(self.batch_starts, i) - 1
        r = i - self.batch_starts[b]
        lo, hi = self.len_offsets[b][r], self.len_offsets[b][r + 1]
        ilo, ihi = self.id_offsets[b][r], self.id_offsets[b][r + 1]
        return self.tokens[b][r], self.lens[b][lo:hi], self.ids[b][ilo:ihi]


@dataclass(frozen=True)
class SplitSegments:
    """Every document segment of one split in row order (``ShardReader.segments``): the ``doc_ids`` and
    ``doc_lens`` columns flattened, and where each row's segments start."""

    doc_ids: np.ndarray  # int64 [segments]
    doc_lens: np.ndarray  # int64 [segments]
    row_offsets: np.ndarray  # int64 [rows + 1]: row r holds segments row_offsets[r] .. row_offsets[r + 1] - 1
    files: list[tuple[str, int]]  # (shard file, its first row in the split), in manifest order

    def locate(self, row: int) -> tuple[str, int]:
        """(shard file, row within it) of the split's row ``row``."""
        starts = [start for _, start in self.files]
        index = bisect.bisect_right(starts, row) - 1
        return self.files[index][0], row - starts[index]


class ShardReader:
    """Random access to one split of a shard directory, through its manifest, memory-mapped.

    ``row(i)`` returns ``(tokens, doc_lens, doc_ids)``: a read-only zero-copy view of ``seq_len`` token ids and
    the segment lengths (int32) and source document ids (int64) of the row. Cost per row is independent of
    shard size: an index computation, a bisect over a shard's record batches, and three slices.
    """

    def __init__(self, shard_dir: str, split: str = "train", expected_tokenizer_sha256: str | None = None):
        self.shard_dir = shard_dir
        self.split = split
        self._expected_sha = expected_tokenizer_sha256
        self.manifest = read_manifest(shard_dir)
        where = manifest_path(shard_dir)
        m = self.manifest
        if expected_tokenizer_sha256 is not None and m["tokenizer_sha256"] != expected_tokenizer_sha256:
            raise ShardFormatError(
                f"{where}: shards were written with tokenizer sha256 {m['tokenizer_sha256']}, "
                f"expected {expected_tokenizer_sha256} (shards come from another tokenizer: re-run tokenization)"
            )
        if split not in m["splits"]:
            raise ShardFormatError(f"{where}: no split {split!r}; available: {sorted(m['splits'])}")
        self.seq_len: int = m["seq_len"]
        self.dtype = np.dtype(m["dtype"])
        if self.dtype != token_dtype(m["vocab_size"]):
            raise ShardFormatError(f"{where}: dtype {m['dtype']} does not match vocab_size {m['vocab_size']}")
        self.vocab_size: int = m["vocab_size"]
        self.pad_id: int = m["pad_id"]
        self.bos_id: int | None = m["bos_id"]
        self.eos_id: int | None = m["eos_id"]
        self.tokenizer_sha256: str = m["tokenizer_sha256"]
        self.schema = shard_schema(self.seq_len, self.dtype)
        self.shard_entries: list[dict] = m["splits"][split]
        self._shards = [_OpenShard(shard_dir, entry, self.schema) for entry in self.shard_entries]
        self._shard_starts: list[int] = []
        total = 0
        for shard in self._shards:
            self._shard_starts.append(total)
            total += shard.rows
        self._rows = total

    def __len__(self) -> int:
        return self._rows

    # Picklable for spawned data-loader workers: the copy reopens (and re-checks) the directory.
    def __getstate__(self) -> dict:
        return {"shard_dir": self.shard_dir, "split": self.split, "expected": self._expected_sha}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["shard_dir"], state["split"], state["expected"])

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    def locate(self, i: int) -> tuple[int, int]:
        """(shard index, row within shard) of global row ``i``."""
        if not -self._rows <= i < self._rows:
            raise IndexError(f"row {i} out of range for {self._rows} rows in split {self.split!r}")
        if i < 0:
            i += self._rows
        s = bisect.bisect_right(self._shard_starts, i) - 1
        return s, i - self._shard_starts[s]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, r = self.locate(i)
        return self._shards[s].row(r)

    def segments(self) -> SplitSegments:
        """The split's ``doc_ids`` and ``doc_lens`` columns, flattened (for tracing documents to rows): reads
        those two columns' buffers of the memory-mapped files, never the tokens."""
        ids, lens, offsets, files = [], [], [np.zeros(1, dtype=np.int64)], []
        base = 0
        for entry, shard, first_row in zip(self.shard_entries, self._shards, self._shard_starts):
            files.append((entry["file"], first_row))
            for batch_ids, id_offsets, batch_lens, len_offsets in zip(shard.ids, shard.id_offsets, shard.lens,
                                                                     shard.len_offsets):
                if not np.array_equal(id_offsets - id_offsets[0], len_offsets - len_offsets[0]):
                    raise ShardFormatError(f"{shard.path}: doc_ids and doc_lens disagree on a row's segments")
                ids.append(batch_ids[id_offsets[0]:id_offsets[-1]])
                lens.append(batch_lens[len_offsets[0]:len_offsets[-1]])
                offsets.append(id_offsets[1:].astype(np.int64) - id_offsets[0] + base)
                base += int(id_offsets[-1] - id_offsets[0])
        return SplitSegments(doc_ids=np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64),
                             doc_lens=np.concatenate(lens).astype(np.int64) if lens else np.zeros(0, np.int64),
                             row_offsets=np.concatenate(offsets), files=files)

    __getitem__ = row

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for i in range(self._rows):
            yield self.row(i)

    def verify(self) -> None:
        """Check every shard's checksum, size, schema, row count and row structure against the manifest.

        Raises ShardFormatError naming the first shard that is wrong. Hashing streams the file in chunks and the
        structural checks walk one record batch at a time, so memory stays bounded by a record batch.
        """
        for shard in self._shards:
            path, entry = shard.path, shard.entry
            if not os.path.exists(path):
                raise ShardFormatError(f"{path}: shard listed in the manifest is missing from disk")
            sha = sha256_file(path)
            if sha != entry["sha256"]:
                raise ShardFormatError(f"{path}: sha256 {sha} does not match the manifest's {entry['sha256']}")
            tokens = segments = 0
            for b, token_rows in enumerate(shard.tokens):
                lens = shard.lens[b]
                offsets = shard.len_offsets[b]
                if not np.array_equal(offsets, shard.id_offsets[b]):
                    raise ShardFormatError(f"{path}: doc_lens and doc_ids disagree on segment counts")
                if lens.size and lens.min() <= 0:
                    raise ShardFormatError(f"{path}: non-positive segment length")
                per_row = np.add.reduceat(lens, offsets[:-1]) if lens.size else np.zeros(0)
                # reduceat repeats the value at an empty range instead of 0; empty rows are invalid anyway.
                if np.any(offsets[1:] == offsets[:-1]):
                    raise ShardFormatError(f"{path}: a row without any document segment")
                if per_row.size and per_row.max() > self.seq_len:
                    raise ShardFormatError(f"{path}: segments longer than seq_len {self.seq_len}")
                if token_rows.size and int(token_rows.max()) >= self.vocab_size:
                    raise ShardFormatError(f"{path}: token id >= vocab_size {self.vocab_size}")
                tokens += int(lens.sum())
                segments += int(lens.size)
            if tokens != entry["tokens"] or segments != entry.get("segments", segments):
                raise ShardFormatError(
                    f"{path}: holds {tokens} tokens in {segments} segments, manifest says "
                    f"{entry['tokens']} in {entry.get('segments')}"
                )


def count_documents(shard_dir: str | os.PathLike, entries: Sequence[dict]) -> int:
    """Distinct source documents in the shards ``entries`` list (one split of a manifest), from their
    ``doc_ids`` column; for manifests that lack the per-split document count. Reads only that column of each
    memory-mapped file; raises ShardFormatError naming a file that cannot be read."""
    import pyarrow.compute as pc

    chunks = []
    for entry in entries:
        path = os.path.join(shard_dir, entry["file"])
        try:
            with pa.memory_map(path, "r") as source:
                ids = pc.list_flatten(pa.ipc.open_file(source).read_all().column("doc_ids"))
        except (pa.ArrowException, OSError, KeyError) as e:
            raise ShardFormatError(f"{path}: doc_ids not readable ({e})") from e
        chunks.extend(ids.chunks)
    return len(pc.unique(pa.chunked_array(chunks, type=pa.int64()))) if chunks else 0

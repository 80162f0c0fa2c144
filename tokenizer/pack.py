"""Sequence packing: documents into rows of exactly ``seq_len`` tokens, by best-fit-decreasing over a window.

Pure functions over document lengths; no tokens, no Beam. The packer sees documents in a deterministic order (by
id), so the same input and config give the same rows on any number of workers.

A document is cut only when it is longer than ``seq_len``: it becomes ``n // seq_len`` full rows plus a remainder
that is packed like any other document. Each window of documents is sorted longest first and every piece goes
into the open row with the least free space that still fits it (best fit); a piece that fits nowhere opens a new
row. Rows that are still partly free after a window stay open for the next window's (often short) documents, up
to ``max_open_rows``; beyond that the fullest ones are closed, since they are the least likely to be topped up.

Compare ``chunk_concatenated``: the concatenate-and-chunk layout of datatrove, dolma and Megatron, which wastes
no slot but cuts almost every document across two rows.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

# A row is its segments in order: (doc_id, start within the document's tokens, length).
Segment = tuple[int, int, int]


@dataclass
class PackStats:
    docs: int = 0
    tokens: int = 0
    rows: int = 0
    seq_len: int = 0
    docs_longer_than_seq_len: int = 0
    docs_split: int = 0  # documents whose tokens land in more than one row

    @property
    def padding(self) -> int:
        return self.rows * self.seq_len - self.tokens

    @property
    def fill_ratio(self) -> float:
        return self.tokens / (self.rows * self.seq_len) if self.rows else 0.0

    @property
    def split_share(self) -> float:
        return self.docs_split / self.docs if self.docs else 0.0

    def as_dict(self) -> dict:
        return {
            "docs": self.docs, "tokens": self.tokens, "rows": self.rows, "padding": self.padding,
            "fill_ratio": self.fill_ratio, "docs_longer_than_seq_len": self.docs_longer_than_seq_len,
            "docs_split": self.docs_split, "split_share": self.split_share,
        }


@dataclass
class _OpenRow:
    order: int  # creation sequence number: the deterministic tie-breaker and output order
    free: int
    segments: list[Segment] = field(default_factory=list)


class BestFitPacker:
    """Streaming best-fit-decreasing packer. Feed ``(doc_id, n_tokens)`` in a stable order; rows come out."""

    def __init__(self, seq_len: int, window: int = 4096, max_open_rows: int = 512):
        if seq_len <= 0 or window <= 0 or max_open_rows < 0:
            raise ValueError("seq_len and window must be positive and max_open_rows non-negative")
        self.seq_len = seq_len
        self.window = window
        self.max_open_rows = max_open_rows
        self.stats = PackStats(seq_len=seq_len)
        self._pending: list[Segment] = []
        # Open rows sorted by (free, order): bisect finds the tightest row that fits a piece.
        self._open_keys: list[tuple[int, int]] = []
        self._open: dict[int, _OpenRow] = {}
        self._next_order = 0

    def add(self, doc_id: int, n_tokens: int) -> Iterator[list[Segment]]:
        """Register one document; yields the rows this completes (full-length chunks and filled rows)."""
        if n_tokens <= 0:
            return
        seq_len = self.seq_len
        self.stats.docs += 1
        self.stats.tokens += n_tokens
        if n_tokens > seq_len:  # only these are ever cut: one row per full chunk, the remainder packed
            self.stats.docs_longer_than_seq_len += 1
            self.stats.docs_split += 1
        full = n_tokens // seq_len
        for k in range(full):
            self.stats.rows += 1
            yield [(doc_id, k * seq_len, seq_len)]
        remainder = n_tokens - full * seq_len
        if remainder:
            self._pending.append((doc_id, full * seq_len, remainder))
            if len(self._pending) >= self.window:
                yield from self._pack_window()

    def finish(self) -> Iterator[list[Segment]]:
        """Pack what is pending and emit every open row, in creation order."""
        yield from self._pack_window()
        for _, order in sorted(self._open_keys, key=lambda k: k[1]):
            yield self._emit(self._open.pop(order))
        self._open_keys = []

    def _emit(self, row: _OpenRow) -> list[Segment]:
        self.stats.rows += 1
        return row.segments

    def _pack_window(self) -> Iterator[list[Segment]]:
        pieces = sorted(self._pending, key=lambda s: (-s[2], s[0]))
        self._pending = []
        for piece in pieces:
            length = piece[2]
            at = bisect.bisect_left(self._open_keys, (length, -1))
            if at < len(self._open_keys):
                free, order = self._open_keys.pop(at)
                row = self._open[order]
            else:
                row = _OpenRow(order=self._next_order, free=self.seq_len)
                self._next_order += 1
                self._open[row.order] = row
            row.segments.append(piece)
            row.free -= length
            if row.free == 0:
                yield self._emit(self._open.pop(row.order))
            else:
                bisect.insort(self._open_keys, (row.free, row.order))
        excess = len(self._open_keys) - self.max_open_rows
        if excess > 0:
            # The fullest rows (least free) are closed; the roomiest stay open for the next window.
            closing, self._open_keys = self._open_keys[:excess], self._open_keys[excess:]
            for _, order in sorted(closing, key=lambda k: k[1]):
                yield self._emit(self._open.pop(order))


def pack_documents(
    docs: Iterable[tuple[int, int]], seq_len: int, window: int = 4096, max_open_rows: int = 512
) -> tuple[list[list[Segment]], PackStats]:
    """Pack ``(doc_id, n_tokens)`` pairs (in a stable order) into rows; returns the rows and their stats."""
    packer = BestFitPacker(seq_len, window, max_open_rows)
    rows: list[list[Segment]] = []
    for doc_id, n_tokens in docs:
        rows.extend(packer.add(doc_id, n_tokens))
    rows.extend(packer.finish())
    return rows, packer.stats


def chunk_concatenated(lengths: Iterable[int], seq_len: int) -> PackStats:
    """Stats of concatenate-and-chunk: documents back to back, cut every ``seq_len`` tokens; last row padded."""
    stats = PackStats(seq_len=seq_len)
    position = 0
    for n in lengths:
        if n <= 0:
            continue
        stats.docs += 1
        stats.tokens += n
        if n > seq_len:
            stats.docs_longer_than_seq_len += 1
        first_row, last_row = position // seq_len, (position + n - 1) // seq_len
        if last_row != first_row:
            stats.docs_split += 1
        position += n
    stats.rows = -(-position // seq_len)
    return stats


@dataclass
class PackPlan:
    """Where every document's tokens go, as flat arrays (cheap to ship to Beam workers as a side input).

    Placement k puts tokens ``[start[k], start[k] + length[k])`` of document ``doc_id[k]`` at
    ``offset[k]`` in row ``row[k]``. Placements are sorted by (doc_id, start); ``row_segments`` gives each
    row's segments in row order, as CSR over ``row_order`` (indices into the placement arrays).
    """

    seq_len: int
    doc_id: np.ndarray  # int64
    start: np.ndarray  # int64
    length: np.ndarray  # int32
    row: np.ndarray  # int64
    offset: np.ndarray  # int32
    row_order: np.ndarray  # int64, placements in (row, offset) order
    row_ptr: np.ndarray  # int64, len rows + 1
    stats: PackStats

    @property
    def num_rows(self) -> int:
        return len(self.row_ptr) - 1

    def placements_of(self, doc_id: int) -> slice:
        lo = int(np.searchsorted(self.doc_id, doc_id, side="left"))
        hi = int(np.searchsorted(self.doc_id, doc_id, side="right"))
        return slice(lo, hi)

    def row_layout(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(placement indices, doc_lens int32, doc_ids int64) of row ``r``, in row order."""
        idx = self.row_order[self.row_ptr[r] : self.row_ptr[r + 1]]
        return idx, self.length[idx].astype(np.int32), self.doc_id[idx]


def make_plan(
    docs: Iterable[tuple[int, int]], seq_len: int, window: int = 4096, max_open_rows: int = 512
) -> PackPlan:
    """Pack ``(doc_id, n_tokens)`` pairs; the caller sorts them by id so the plan is deterministic."""
    rows, stats = pack_documents(docs, seq_len, window, max_open_rows)
    doc_ids, starts, lengths, row_idx, offsets = [], [], [], [], []
    for r, segments in enumerate(rows):
        offset = 0
        for doc_id, start, length in segments:
            doc_ids.append(doc_id)
            starts.append(start)
            lengths.append(length)
            row_idx.append(r)
            offsets.append(offset)
            offset += length
    doc_id = np.asarray(doc_ids, dtype=np.int64)
    start = np.asarray(starts, dtype=np.int64)
    # Placements were generated in row order: remember it, then sort by document for lookups.
    by_doc = np.lexsort((start, doc_id))
    row = np.asarray(row_idx, dtype=np.int64)[by_doc]
    offset_arr = np.asarray(offsets, dtype=np.int32)[by_doc]
    row_order = np.argsort(row * (seq_len + 1) + offset_arr, kind="stable").astype(np.int64)
    row_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=len(rows)), out=row_ptr[1:])
    return PackPlan(
        seq_len=seq_len, doc_id=doc_id[by_doc], start=start[by_doc],
        length=np.asarray(lengths, dtype=np.int32)[by_doc], row=row, offset=offset_arr,
        row_order=row_order, row_ptr=row_ptr, stats=stats,
    )

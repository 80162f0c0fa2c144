"""Near-dedup's distributed path, a block at a time: the pure functions behind ``beam.DistributedDecisions``.

Between the shuffles of the distributed path, the rows of many documents travel together as columns of numpy
arrays ("blocks"), keyed by a partition number: a document's sketch by ``partition_of(id)``, a band entry by
``partition_of(key)``, an edge by ``partition_of`` of the end it is grouped by. A runner then moves and
groups a few hundred blocks instead of a few elements per document and band (on the 16× scale corpus, 1.3M
band keys and 0.5M sketch messages went one by one through Beam's per-element machinery, and pickling, which
cost more than the sketching). Every function here is what one grouped partition does, vectorized over all of
its rows, and gives the same result as the in-memory path (``core.dedup_in_memory``) for the documents it
sees:

1. ``bucket_star_edges``: the band entries of a partition → star edges (each bucket's first member in rank
   order → every other member), exactly ``core.star_edges`` per bucket.
2. ``edge_ends``: at each end's partition, the edge with the centre's sketch row, and the member's row, towards
   the partition of the other end (a row goes once per destination partition, however many edges), so that
   the sketches are read by one join only.
3. ``verify_probes``: at the other end's partition, the MinHash estimates of every edge at once and an exact
   Jaccard only for the ambiguous ones (``core.verify_pairs``, as the in-memory path); the verified ends' rows
   go on to the components.
4. ``large_star`` / ``small_star`` / ``node_labels`` / ``crossing_labels`` / ``merge_labels``: connected
   components of the verified edges, the same large-star/small-star rounds as before, vectorized (the
   distributed path's one way of finding components; a small input takes the in-memory path instead).
5. ``resolve_components``: every component of a partition resolved by ``core.resolve_component``.

The rank of a document is ``core.doc_rank``'s tuple ``(class, score, id)``, kept as two columns beside the ids.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence

import numpy as np

from transforms.near_dedup.core import (Decision, NearDedupConfig, bucket_key_matrix, component_labels,
                                        resolve_component, star_edge_positions, verify_pairs)
from transforms.near_dedup.minhash import Sketch, _splitmix, exact_jaccard

# Partitions of the distributed path: one per PARTITION_INPUT_BYTES of input (as stored), so that what one
# grouped partition holds (its documents' sketches, ~150 MB at most, or its documents at the decisions) stays the
# same size as the corpus grows. Not more: a shuffle of N partitions costs a runner N × N bucket tasks (on Dask
# ~1-2 ms each, two rounds of ~N × √N above 16 × 16, and each shuffle waits for its slowest), and with blocks a
# partition's data is only a few elements (at 274k documents, 9 partitions took 15 CPU s less than 17). Below
# 8 × 64 MB, MIN_PARTITIONS, or one per 8 MB when that is fewer: a small input gets few (on 2 Dask workers the demo corpus's 12 shuffles took 1,458
# tasks with 8 partitions, 174 with 2, and 3.3-4.6 s against 1.7-2.5), a medium one smaller partitions than 64
# MB (at 16×, 167 MB: 8 partitions kept each worker at 600-620 MB, 4 took it to 930-1,050 MB). When the number of
# workers sharing the shuffles is known, the count is a multiple of it (3 partitions on 2 workers leave one
# worker idle a third of every step), at least one each.
PARTITION_INPUT_BYTES = 64 << 20
MIN_PARTITIONS = 8
SMALLEST_PARTITION_BYTES = PARTITION_INPUT_BYTES // MIN_PARTITIONS
MAX_PARTITIONS = 4096


def partitions_for(input_bytes: Optional[int], workers: Optional[int] = None) -> int:
    """The number of partitions for an input of ``input_bytes`` shared by ``workers``. Unknown input size or
    workers: at least ``MIN_PARTITIONS``."""
    size = input_bytes or 0
    wanted = max(1, math.ceil(size / PARTITION_INPUT_BYTES),
                 min(MIN_PARTITIONS, math.ceil(size / SMALLEST_PARTITION_BYTES)))
    if not workers or input_bytes is None:
        return min(MAX_PARTITIONS, max(MIN_PARTITIONS, wanted))
    return min(MAX_PARTITIONS, workers * math.ceil(wanted / workers))


def partition_of(values: np.ndarray, parts: int) -> np.ndarray:
    """The partition of each id or band key: a bijective mix (splitmix64) modulo ``parts``, so that ids that are
    sequential, or share their low bits, still spread evenly."""
    mixed = _splitmix(np.asarray(values, dtype=np.int64).view(np.uint64))
    return (mixed % np.uint64(parts)).astype(np.int64)


def split_by_partition(parts: np.ndarray, n_parts: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(partition, row indices)`` for every partition that has rows, the rows in their original order."""
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(n_parts + 1))
    for p in np.flatnonzero(np.diff(bounds)).tolist():
        yield p, order[bounds[p]:bounds[p + 1]]


def _ragged_take(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The concatenated values and new offsets of the chosen rows of a ragged column."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    if total == 0:
        return new_offsets, values[:0]
    starts = np.repeat(offsets[rows] - new_offsets[:-1], lengths)
    return new_offsets, values[starts + np.arange(total)]


class SketchRows:
    """The sketches of many documents as columns: ``ids`` (int64), the rank's ``rank_class`` (int8) and
    ``rank_score`` (float64), ``old`` (bool), ``signatures`` (rows × num_perm uint32, or × 1 uint64 for
    SimHash), and every shingle set concatenated in ``shingles`` with ``offsets`` (rows + 1)."""

    __slots__ = ("ids", "rank_class", "rank_score", "old", "signatures", "offsets", "shingles")

    def __init__(self, ids, rank_class, rank_score, old, signatures, offsets, shingles):
        self.ids, self.rank_class, self.rank_score, self.old = ids, rank_class, rank_score, old
        self.signatures, self.offsets, self.shingles = signatures, offsets, shingles

    def __reduce__(self):
        return SketchRows, (self.ids, self.rank_class, self.rank_score, self.old, self.signatures, self.offsets,
                            self.shingles)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self.__slots__)

    @classmethod
    def of(cls, sketches: Sequence[Sketch]) -> "SketchRows":
        """Rows of ``Sketch`` objects (at least one: the signature's width and type come from them)."""
        lengths = np.fromiter((len(s.shingles) for s in sketches), dtype=np.int64, count=len(sketches))
        offsets = np.zeros(len(sketches) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        for s in sketches:
            if len(s.rank) != 3 or s.rank[2] != s.id:
                raise ValueError(f"near_dedup: sketch {s.id} has rank {s.rank!r}, not (class, score, id)")
        return cls(np.fromiter((s.id for s in sketches), dtype=np.int64, count=len(sketches)),
                   np.fromiter((s.rank[0] for s in sketches), dtype=np.int8, count=len(sketches)),
                   np.fromiter((s.rank[1] for s in sketches), dtype=np.float64, count=len(sketches)),
                   np.fromiter((s.old for s in sketches), dtype=bool, count=len(sketches)),
                   np.stack([s.signature for s in sketches]),
                   offsets,
                   np.concatenate([s.shingles for s in sketches]).astype(np.uint32, copy=False))

    @staticmethod
    def concat(blocks: Sequence["SketchRows"]) -> Optional["SketchRows"]:
        """All rows of ``blocks`` in one (None for no rows at all)."""
        blocks = [b for b in blocks if len(b)]
        if not blocks:
            return None
        if len(blocks) == 1:
            return blocks[0]
        sizes = np.array([len(b.shingles) for b in blocks], dtype=np.int64)
        shifts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        offsets = np.concatenate([[0]] + [b.offsets[1:] + shift for b, shift in zip(blocks, shifts)])
        return SketchRows(*(np.concatenate([getattr(b, name) for b in blocks])
                            for name in ("ids", "rank_class", "rank_score", "old", "signatures")),
                          offsets, np.concatenate([b.shingles for b in blocks]))

    def take(self, rows: np.ndarray) -> "SketchRows":
        offsets, shingles = _ragged_take(self.offsets, self.shingles, rows)
        return SketchRows(self.ids[rows], self.rank_class[rows], self.rank_score[rows], self.old[rows],
                          self.signatures[rows], offsets, shingles)

    def sizes(self) -> np.ndarray:
        """The number of shingles of every row."""
        return np.diff(self.offsets)

    def shingles_of(self, row: int) -> np.ndarray:
        return self.shingles[self.offsets[row]:self.offsets[row + 1]]

    def sketch(self, row: int) -> Sketch:
        doc_id = int(self.ids[row])
        return Sketch(doc_id, (int(self.rank_class[row]), float(self.rank_score[row]), doc_id),
                      self.signatures[row], self.shingles_of(row), bool(self.old[row]))

    def sketches(self) -> list[Sketch]:
        return [self.sketch(row) for row in range(len(self))]

    def rank_order(self) -> np.ndarray:
        """Row indices in rank order (class, score, id)."""
        return np.lexsort((self.ids, self.rank_score, self.rank_class))

    def split(self, parts: np.ndarray, n_parts: int) -> Iterator[tuple[int, "SketchRows"]]:
        for p, rows in split_by_partition(parts, n_parts):
            yield p, self.take(rows)

    def unique(self) -> "SketchRows":
        """The rows with distinct ids (the first of each)."""
        first = np.unique(self.ids, return_index=True)[1]
        return self if len(first) == len(self) else self.take(np.sort(first))

    def index_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each id (-1 where absent); the rows' ids must be unique."""
        order = np.argsort(self.ids, kind="stable")
        sorted_ids = self.ids[order]
        at = np.minimum(np.searchsorted(sorted_ids, ids), max(len(sorted_ids) - 1, 0))
        found = (sorted_ids[at] == ids) if len(sorted_ids) else np.zeros(len(ids), dtype=bool)
        return np.where(found, order[at] if len(sorted_ids) else -1, -1)


class Bands(NamedTuple):
    """Band entries: ``keys`` (int64, unique across bands), and the member's ``ids``, ``rank_class``,
    ``rank_score`` and ``old``."""
    keys: np.ndarray
    ids: np.ndarray
    rank_class: np.ndarray
    rank_score: np.ndarray
    old: np.ndarray


class Edges(NamedTuple):
    """Edges (or messages) between documents: ``a`` → ``b``, int64."""
    a: np.ndarray
    b: np.ndarray


class MemberEdges(NamedTuple):
    """Candidate edges sent to the partition of their other end ``b`` (``Edges`` go to their centre ``a``'s): a
    type of its own, so that one grouping carries both and the sketches (``beam.ByPartition`` of a tuple)."""
    a: np.ndarray
    b: np.ndarray


def by_type(values: Iterable) -> dict[type, list]:
    """A grouped partition's blocks by their type (``beam.ByPartition`` of inputs whose blocks differ in type)."""
    out: dict[type, list] = {}
    for value in values:
        out.setdefault(type(value), []).append(value)
    return out


class Probes(NamedTuple):
    """What a members' partition verifies: edges ``(centre, member)`` with their centres' sketch rows, or its own
    member rows (``edge_ends``)."""
    centres: Optional[SketchRows]
    edges: Edges
    members: Optional[SketchRows]


class Labelled(NamedTuple):
    """The sketch rows of graph nodes and each one's component ``labels``."""
    labels: np.ndarray
    rows: SketchRows


class DecisionRows(NamedTuple):
    """``core.Decision`` fields as columns."""
    ids: np.ndarray
    cluster: np.ndarray
    similarity: np.ndarray
    removed: np.ndarray
    cluster_size: np.ndarray
    kept_is_old: np.ndarray

    @classmethod
    def of(cls, decisions: Sequence[Decision]) -> "DecisionRows":
        columns = list(zip(*decisions)) if decisions else [()] * 6
        types = (np.int64, np.int64, np.float64, bool, np.int64, bool)
        return cls(*(np.array(column, dtype=t) for column, t in zip(columns, types)))

    def decisions(self) -> list[Decision]:
        return [Decision(int(i), int(c), float(s), bool(r), int(n), bool(o))
                for i, c, s, r, n, o in zip(*(column.tolist() for column in self))]


def concat_columns(blocks: Sequence[tuple]):
    """Blocks of one NamedTuple type → one block with every row (None for no blocks)."""
    blocks = list(blocks)
    if not blocks:
        return None
    return type(blocks[0])(*(np.concatenate(columns) for columns in zip(*blocks)))


def take_columns(block: tuple, rows: np.ndarray):
    return type(block)(*(column[rows] for column in block))


def split_columns(block: tuple, parts: np.ndarray, n_parts: int) -> Iterator[tuple[int, tuple]]:
    for p, rows in split_by_partition(parts, n_parts):
        yield p, take_columns(block, rows)


def unique_edges(a: np.ndarray, b: np.ndarray) -> Edges:
    """Distinct (a, b) pairs, sorted."""
    if not len(a):
        return Edges(a.astype(np.int64), b.astype(np.int64))
    pairs = np.unique(np.stack([a, b], axis=1).astype(np.int64), axis=0)
    return Edges(pairs[:, 0].copy(), pairs[:, 1].copy())


# ---------------------------------------------------------------- 0. sketches → partitioned rows


def band_entries(rows: SketchRows, cfg: NearDedupConfig) -> Bands:
    """The band entries of sketch rows: one per row and band (or SimHash table)."""
    keys = bucket_key_matrix(rows.signatures, cfg)
    per_row = keys.shape[1]
    return Bands(keys.reshape(-1), np.repeat(rows.ids, per_row), np.repeat(rows.rank_class, per_row),
                 np.repeat(rows.rank_score, per_row), np.repeat(rows.old, per_row))


def surviving_old_rows(new: Optional[SketchRows], old: Optional[SketchRows]) -> Optional[SketchRows]:
    """Earlier runs' rows that take part beside the new ones: an id in the new input is the new document (so a
    document never removes itself); an id kept by two earlier runs is one document (the same id means the same
    text: one of its rows stands, the same whatever order they came in)."""
    if old is None:
        return None
    keep = np.zeros(len(old), dtype=bool)
    unique_ids, first, counts = np.unique(old.ids, return_index=True, return_counts=True)
    keep[first] = True
    for doc_id in unique_ids[counts > 1].tolist():  # rare; whatever order the rows came in, the same one stands
        rows = np.flatnonzero(old.ids == doc_id)
        keep[rows] = False
        keep[min(rows.tolist(), key=lambda row: old.shingles_of(row).tobytes())] = True
    if new is not None:
        keep &= ~np.isin(old.ids, new.ids)
    return old.take(np.flatnonzero(keep)) if keep.any() else None


def old_band_entries(old: SketchRows, stored: Edges) -> Bands:
    """The band entries of earlier runs' rows from their stored ``(id, key)`` pairs (pairs of other ids are
    ignored, repeated pairs count once)."""
    pairs = unique_edges(stored.a, stored.b)
    at = old.index_of(pairs.a)
    present = at >= 0
    at = at[present]
    return Bands(pairs.b[present], old.ids[at], old.rank_class[at], old.rank_score[at], old.old[at])


# ---------------------------------------------------------------- 1. band entries → star edges


def bucket_star_edges(bands: Bands) -> Edges:
    """The star edges of every bucket among these entries (all entries of a bucket must be here): per bucket,
    its first member in rank order → every other new member; when that first member is of an earlier run, the
    bucket's other old members → its first new member (``core.star_edges``). Distinct edges, as ids."""
    if len(bands.keys) < 2:
        return Edges(np.empty(0, np.int64), np.empty(0, np.int64))
    # rank positions of the distinct documents, then the entries in position order for the stable sort by key
    order = np.lexsort((bands.ids, bands.rank_score, bands.rank_class))
    ids = bands.ids[order]
    new_doc = np.concatenate(([True], ids[1:] != ids[:-1]))
    positions = np.cumsum(new_doc) - 1
    doc_ids, doc_old = ids[new_doc], bands.old[order][new_doc]
    a, b = star_edge_positions(bands.keys[order], positions, doc_old)
    return Edges(doc_ids[a], doc_ids[b])


# ---------------------------------------------------------------- 2.–3. edges → verified edges


def edge_ends(rows: SketchRows, centre_of: Optional[Edges], member_of: Optional[Edges],
              n_parts: int) -> Iterator[tuple[int, Probes]]:
    """At a partition of ids (``rows``: its sketches), the candidate edges whose centre is here (``centre_of``) and
    those whose other end is here (``member_of``), towards the other ends' partitions: each edge with its
    centre's row (a centre's row once per destination, however many edges), and this partition's member rows
    (once each). The verification then needs nothing but what arrives (``verify_probes``). Edges whose end has
    no row here are dropped (they cannot be: a band entry and its sketch come from the same document)."""
    if centre_of is not None and len(centre_of.a):
        edges = unique_edges(centre_of.a, centre_of.b)
        at = rows.index_of(edges.a)
        present = at >= 0
        edges, at = Edges(edges.a[present], edges.b[present]), at[present]
        for q, chosen in split_by_partition(partition_of(edges.b, n_parts), n_parts):
            yield q, Probes(rows.take(np.unique(at[chosen])), take_columns(edges, chosen), None)
    if member_of is not None and len(member_of.b):
        at = rows.index_of(np.unique(member_of.b))
        at = at[at >= 0]
        if len(at):
            members = rows.take(at)
            yield from ((q, Probes(None, Edges(np.empty(0, np.int64), np.empty(0, np.int64)), members.take(chosen)))
                        for q, chosen in split_by_partition(partition_of(members.ids, n_parts), n_parts))


def verify_probes(probes: Sequence[Probes], cfg: NearDedupConfig) -> tuple[Edges, int, Optional[SketchRows]]:
    """At the members' partition: the probes' edges that are near-duplicates (``core.verify_pairs``: estimates
    for all at once, an exact Jaccard only where they are not clear), the number rejected, and the sketch rows of
    the verified edges' ends (once each: what the components are resolved from)."""
    centres = SketchRows.concat([p.centres for p in probes if p.centres is not None])
    members = SketchRows.concat([p.members for p in probes if p.members is not None])
    edges = concat_columns([p.edges for p in probes if len(p.edges.a)])
    if centres is None or members is None or edges is None:
        return Edges(np.empty(0, np.int64), np.empty(0, np.int64)), 0, None
    a_rows, b_rows = centres.index_of(edges.a), members.index_of(edges.b)
    present = (a_rows >= 0) & (b_rows >= 0)
    a_rows, b_rows, edges = a_rows[present], b_rows[present], take_columns(edges, np.flatnonzero(present))
    keep = verify_pairs(centres.signatures, members.signatures, a_rows, b_rows,
                        centres.sizes()[a_rows], members.sizes()[b_rows],
                        lambda i: exact_jaccard(centres.shingles_of(a_rows[i]), members.shingles_of(b_rows[i])),
                        cfg)
    verified = np.flatnonzero(keep)
    if not len(verified):
        return Edges(edges.a[:0], edges.b[:0]), int(len(keep)), None
    ends = SketchRows.concat([centres.take(np.unique(a_rows[verified])), members.take(np.unique(b_rows[verified]))])
    return take_columns(edges, verified), int(len(keep) - len(verified)), ends.unique()


# ---------------------------------------------------------------- 4. connected components


def both_directions(edges: Edges) -> Edges:
    return Edges(np.concatenate((edges.a, edges.b)), np.concatenate((edges.b, edges.a)))


def _by_node(edges: Edges) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges sorted by (a, b) and the start of each node's run."""
    order = np.lexsort((edges.b, edges.a))
    a, b = edges.a[order], edges.b[order]
    starts = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    return a, b, starts


def large_star(edges: Edges) -> Edges:
    """Every node (``a``, with all its neighbours ``b`` here) links its larger neighbours to the smallest of itself
    and its neighbours."""
    if not len(edges.a):
        return edges
    a, b, starts = _by_node(edges)
    smallest = np.minimum(a[starts], np.minimum.reduceat(b, starts))
    smallest = np.repeat(smallest, np.diff(np.append(starts, len(a))))
    larger = b > a
    return unique_edges(b[larger], smallest[larger])


def small_star(edges: Edges) -> Edges:
    """Every node (``a``, with all its neighbours ``b`` here) links itself and its smaller neighbours to the
    smallest of them."""
    lower = edges.b < edges.a
    if not lower.any():
        return Edges(edges.a[:0], edges.b[:0])
    a, b, starts = _by_node(Edges(edges.a[lower], edges.b[lower]))
    smallest = np.minimum.reduceat(b, starts)
    each = np.repeat(smallest, np.diff(np.append(starts, len(a))))
    others = b != each
    return unique_edges(np.concatenate((b[others], a[starts])), np.concatenate((each[others], smallest)))


def node_labels(edges: Edges) -> tuple[np.ndarray, np.ndarray]:
    """Per node (``a``, with all its neighbours ``b`` here): ``(nodes, labels)``, a node's provisional label being
    the smallest of itself and its neighbours."""
    if not len(edges.a):
        return edges.a, edges.a
    a, b, starts = _by_node(edges)
    return a[starts], np.minimum(a[starts], np.minimum.reduceat(b, starts))


def label_messages(edges: Edges, n_parts: int) -> Iterator[tuple[int, tuple[Edges, Edges]]]:
    """Each node's provisional label to itself and to each of its neighbours, by the partition of the node
    receiving it: ``(own: (node, label), heard: (node, label))`` per partition."""
    nodes, labels = node_labels(edges)
    own = Edges(nodes, labels)
    a, b, starts = _by_node(edges)
    heard = Edges(b, np.repeat(labels, np.diff(np.append(starts, len(a)))))
    own_parts = dict(split_columns(own, partition_of(own.a, n_parts), n_parts))
    heard_parts = dict(split_columns(heard, partition_of(heard.a, n_parts), n_parts))
    empty = Edges(np.empty(0, np.int64), np.empty(0, np.int64))
    for p in sorted(set(own_parts) | set(heard_parts)):
        yield p, (own_parts.get(p, empty), heard_parts.get(p, empty))


def crossing_labels(own: Edges, heard: Edges) -> tuple[Edges, Edges]:
    """Per node: its label ``(node, label)``, and one ``(label, other label)`` pair per differing label its
    neighbours sent (the edges whose ends still disagree)."""
    heard = unique_edges(heard.a, heard.b)
    order = np.argsort(own.a)
    nodes, labels = own.a[order], own.b[order]
    if not len(heard.a):
        return Edges(nodes, labels), heard
    at = np.minimum(np.searchsorted(nodes, heard.a), max(len(nodes) - 1, 0))
    if not len(nodes) or not np.array_equal(nodes[at], heard.a):  # a neighbour of a node is a node
        raise ValueError("near_dedup: a graph node heard a neighbour's label but has no label of its own")
    mine = labels[at]
    differing = heard.b != mine
    return Edges(nodes, labels), unique_edges(mine[differing], heard.b[differing])


def merge_labels(pairs: Edges) -> Edges:
    """Union-find over label pairs: ``(label, root)`` for every label whose root (the smallest label it is
    connected to) is another one."""
    if not len(pairs.a):
        return pairs
    labels = np.unique(np.concatenate((pairs.a, pairs.b)))
    roots = labels[component_labels(len(labels), np.searchsorted(labels, pairs.a), np.searchsorted(labels, pairs.b))]
    moved = roots != labels
    return Edges(labels[moved], roots[moved])


def final_labels(labels: np.ndarray, merged: Sequence[Edges]) -> np.ndarray:
    """Provisional labels → component labels (the component's smallest id) by the merged pairs."""
    merged = concat_columns(list(merged))
    if merged is None or not len(merged.a):
        return labels
    order = np.argsort(merged.a)
    keys, roots = merged.a[order], merged.b[order]
    at = np.minimum(np.searchsorted(keys, labels), len(keys) - 1)
    return np.where(keys[at] == labels, roots[at], labels)


# ---------------------------------------------------------------- 5. components → decisions


def labelled_rows(own: Edges, rows: Optional[SketchRows]) -> tuple[Optional[Labelled], int]:
    """The sketch rows of the labelled nodes of a partition (``rows``: the verified ends' rows that came here,
    repeats allowed), and how many of them have none (never, unless a runner lost data)."""
    if not len(own.a):
        return None, 0
    if rows is None:
        return None, int(len(own.a))
    rows = rows.unique()  # a node's row arrives from every partition where one of its edges was verified
    at = rows.index_of(own.a)
    present = at >= 0
    if not present.any():
        return None, int(len(at))
    return Labelled(own.b[present], rows.take(at[present])), int((~present).sum())


def resolve_components(blocks: Iterable[Labelled], cfg: NearDedupConfig) -> list[Decision]:
    """Every component among these rows (all rows of a component must be here) resolved into verified stars."""
    blocks = [b for b in blocks if b is not None and len(b.labels)]
    if not blocks:
        return []
    labels = np.concatenate([b.labels for b in blocks])
    rows = SketchRows.concat([b.rows for b in blocks])
    order = np.lexsort((rows.ids, rows.rank_score, rows.rank_class, labels))
    labels, rows = labels[order], rows.take(order)
    decisions: list[Decision] = []
    bounds = np.flatnonzero(np.diff(labels)) + 1
    for start, end in zip(np.concatenate(([0], bounds)).tolist(), np.append(bounds, len(labels)).tolist()):
        members = [rows.sketch(i) for i in range(start, end)]
        decisions.extend(resolve_component(members, cfg, signatures=rows.signatures[start:end]))
    return decisions

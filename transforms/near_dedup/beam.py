"""The Beam wrapper of near-duplicate removal: ``NearDedup(cfg, index_out_dir, against_dirs)``.

The decisions themselves are the pure core's (``transforms.near_dedup.core``, and ``blocks`` for what one
partition of the distributed path does); this module only moves sketches, band entries, edges and components
between workers, as named sub-transforms (see ``NearDedup``'s docstring):

    Sketch → CandidateEdges → VerifiedEdges → ConnectedComponents → VerifiedStars → Decisions → routing tail

(on the in-memory path, Sketch → DedupInMemory → Decide). What crosses a shuffle is a block: the rows of
many documents as numpy columns, keyed by a partition number (``blocks.partition_of``), so that a runner moves a
few hundred elements where it moved several per document. Every function doing the step's work is timed into
the ``near_dedup`` ``busy_ms`` counter.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import time
import uuid
from typing import Callable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pipeline import transform_annotations
from apache_beam.transforms.window import GlobalWindows

from beamio.annotations import SHUFFLE_PARTITIONS
from transforms.beam_step import Route, StepFn, any_output_type, timed
from transforms.near_dedup import blocks
from transforms.near_dedup.blocks import DecisionRows, Labelled, SketchRows, partition_of
from transforms.near_dedup.core import (SKETCH_BATCH, STEP_NAME, NearDedupConfig, SketchBuilder, bucket_key_matrix,
                                        check_unique_ids, chosen_path, decide,
                                        dedup_in_memory)
from transforms.near_dedup.index import ReadIndex, WriteIndex, check_index_params, index_bytes, sketch_row

SKETCHES, DOCS, BANDS = "sketches", "docs", "bands"
# What a sketching worker holds before it sends its blocks on: large enough that a block carries hundreds of
# documents, small enough to be a few tens of MB per worker.
BUFFER_BYTES = 32 << 20
_BAND_ENTRY_BYTES = 25  # key, id, rank class and score, old flag

# Consistency counters: every labelled document has its sketch, and every decision made reaches its document.
# A runner that dropped part of a stage's input would otherwise keep documents silently (the accounting still
# balances: they are kept instead of removed); `pipelines.prepare.collect_stats` fails the run on a mismatch.
DECISIONS_MADE, DECISIONS_APPLIED, LABELS_WITHOUT_SKETCH = "decisions_made", "decisions_applied", "labels_without_sketch"


def _windowed(value):
    return GlobalWindows.windowed_value(value)


# Where the shuffles built in ``shuffles_spilled_to``'s scope put their blocks (None: in the runner's shuffle).
_SPILL_DIR: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("near_dedup_spill_dir", default=None)


@contextlib.contextmanager
def shuffles_spilled_to(folder: str) -> Iterator[None]:
    """Every ``ByPartition`` built in this scope (graph construction) moves its blocks through files in ``folder``
    (a folder every worker can read, emptied by the caller once the pipeline is done): the shuffle carries only
    ``(partition, path)``. The local FnApiRunner keeps every shuffle's data in the driver process, so without
    this the driver holds every sketch (with its shingle set), band entry and edge of the corpus at once."""
    token = _SPILL_DIR.set(folder)
    try:
        yield
    finally:
        _SPILL_DIR.reset(token)


def _spill(element, folder: str):
    """``(key, block)`` → ``(key, path)``: the block pickled into a file of its own in ``folder`` (a retried bundle
    writes new files; the ones it wrote before are never read and go with the folder)."""
    key, block = element
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{uuid.uuid4().hex}.pkl")
    with open(path, "wb") as fh:
        pickle.dump(block, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return key, path


def _load(path: str):
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _unspill(element):
    key, path = element
    return key, _load(path)


def _unspill_group(element, per_tag: bool):
    """A grouped partition of paths → the same partition of blocks (``per_tag``: a ``CoGroupByKey``'s, a list
    of paths per input tag)."""
    key, grouped = element
    if per_tag:
        return key, {tag: [_load(path) for path in paths] for tag, paths in grouped.items()}
    return key, [_load(path) for path in grouped]


class ByPartition(beam.PTransform):
    """``GroupByKey`` of blocks keyed by their partition, an int in 0..parts-1: of one input; of a tuple of inputs
    whose blocks differ in type, one ``Flatten`` before it (the consumer tells them apart: ``blocks.by_type``);
    of a dict of inputs, ``CoGroupByKey`` (whose tagging and collecting DoFns cost 8-12 ms of graph building
    each time: a fixed cost of every run, which the typed form spares). Annotated as such, so that a runner can
    give every partition its own reducer instead of hashing ``parts`` keys into its own number of buckets (the
    Dask runner: ``parts`` × ``parts`` bucket tasks per shuffle, none empty, none doubled, where hashing cost its
    partition count squared)."""

    def __init__(self, parts: int):
        super().__init__()
        self.parts = parts
        self.spill_dir = _SPILL_DIR.get()  # set by an enclosing ``shuffles_spilled_to`` while the graph is built

    def expand(self, inputs):
        folder = self.spill_dir
        if folder is not None:  # each input spilled where it is made (before a Flatten, which may be a buffer)
            if isinstance(inputs, dict):
                inputs = {tag: pcoll | f"Spill_{tag}" >> beam.Map(_spill, folder) for tag, pcoll in inputs.items()}
            elif isinstance(inputs, tuple):
                inputs = tuple(pcoll | f"Spill{i}" >> beam.Map(_spill, folder) for i, pcoll in enumerate(inputs))
            else:
                inputs = inputs | "Spill" >> beam.Map(_spill, folder)
        if isinstance(inputs, tuple):
            inputs = inputs | "Blocks" >> beam.Flatten()
        with transform_annotations(**{SHUFFLE_PARTITIONS: str(self.parts)}):
            grouped = inputs | (beam.CoGroupByKey() if isinstance(inputs, dict) else beam.GroupByKey())
        if folder is None:
            return grouped
        return grouped | "Unspill" >> beam.Map(_unspill_group, isinstance(inputs, dict))


# ---------------------------------------------------------------- sketches, band entries, documents


class _SketchFn(StepFn):
    """Documents → blocks: on ``sketches`` ``(partition, SketchRows)`` (a tokenless document has no sketch), with
    ``bands`` ``(partition, Bands)`` of their band entries, and with ``docs`` ``(partition, [doc, ...])`` of every
    document. Sketches and documents go to the partition of their id, band entries to that of their key (with
    ``parts`` = 1 everything goes to partition 0).

    Documents are sketched ``SKETCH_BATCH`` at a time (numpy over the batch); the blocks are held until
    ``BUFFER_BYTES`` are held, and at the end of each bundle. Blocks are in the global window (the step is
    global: it sees the whole corpus, as a GroupByKey does)."""

    def __init__(self, cfg: NearDedupConfig, parts: int, bands: bool = False, docs: bool = False,
                 carry: Optional[Callable[[dict], dict]] = None):
        super().__init__(STEP_NAME)
        self._cfg, self._parts, self._bands, self._docs, self._carry = cfg, parts, bands, docs, carry
        self._no_tokens = Metrics.counter(STEP_NAME, "docs_without_tokens")
        self._batch: list = []

    infer_output_type = any_output_type

    def setup(self):
        self._builder = SketchBuilder(self._cfg)

    def start_bundle(self):
        self._batch = []
        self._held: dict[tuple[str, int], list] = {}
        self._held_bytes = 0

    def process(self, doc):
        self._batch.append(doc)
        if len(self._batch) >= SKETCH_BATCH:
            yield from self._sketch()

    def finish_bundle(self):
        yield from self._sketch()
        yield from self._send()
        self._flush_busy()

    def _hold(self, tag: str, part: int, block, nbytes: int) -> None:
        self._held.setdefault((tag, part), []).append(block)
        self._held_bytes += nbytes

    def _sketch(self):
        batch, self._batch = self._batch, []
        if not batch:
            return
        started = time.perf_counter()
        cpu_started = time.thread_time()
        sketches = self._builder.sketch_batch(batch)
        present = [s for s in sketches if s is not None]
        if len(present) < len(batch):
            self._no_tokens.inc(len(batch) - len(present))
        parts = self._parts
        if present:
            rows = SketchRows.of(present)
            for p, block in rows.split(partition_of(rows.ids, parts), parts):
                self._hold(SKETCHES, p, block, block.nbytes)
            if self._bands:
                entries = blocks.band_entries(rows, self._cfg)
                for p, block in blocks.split_columns(entries, partition_of(entries.keys, parts), parts):
                    self._hold(BANDS, p, block, len(block.keys) * _BAND_ENTRY_BYTES)
        if self._docs:
            ids = np.fromiter((doc["id"] for doc in batch), dtype=np.int64, count=len(batch))
            for p, rows_of_part in blocks.split_by_partition(partition_of(ids, parts), parts):
                chosen = [batch[i] for i in rows_of_part.tolist()]
                if self._carry is not None:
                    chosen = [self._carry(doc) for doc in chosen]
                self._hold(DOCS, p, chosen, sum(len(doc.get("text") or "") for doc in chosen))
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        if self._held_bytes >= BUFFER_BYTES:
            yield from self._send()

    def _send(self):
        held, self._held, self._held_bytes = self._held, {}, 0
        for (tag, part), pieces in held.items():
            if tag == SKETCHES:
                block = SketchRows.concat(pieces)
            elif tag == BANDS:
                block = blocks.concat_columns(pieces)
            else:
                block = [doc for piece in pieces for doc in piece]
            value = _windowed((part, block))
            yield value if tag == DOCS else beam.pvalue.TaggedOutput(tag, value)


class Sketch(beam.PTransform):
    """Documents → ``.sketches``: ``(partition, SketchRows)`` blocks; with ``bands=True`` ``.bands``:
    ``(partition, Bands)``; with ``docs=True`` ``.docs``: ``(partition, [doc, ...])`` (``carry(doc)`` of each,
    when given)."""

    def __init__(self, cfg: NearDedupConfig, parts: int, bands: bool = False, docs: bool = False,
                 carry: Optional[Callable[[dict], dict]] = None):
        super().__init__()
        self.cfg, self.parts, self.bands, self.docs, self.carry = cfg, parts, bands, docs, carry

    def expand(self, docs):
        return docs | "Sketch" >> beam.ParDo(_SketchFn(self.cfg, self.parts, self.bands, self.docs,
                                                       self.carry)).with_outputs(SKETCHES, BANDS, main=DOCS)


def _merge_old(element, cfg: NearDedupConfig, parts: int):
    """Per partition of ids: the new sketches with earlier runs' (``blocks.surviving_old_rows``), and the band
    entries of both (the new ones computed, the old ones as stored)."""
    _, groups = element
    new = SketchRows.concat(groups["new"])
    old = blocks.surviving_old_rows(new, SketchRows.concat(groups["old"]))
    entries = []
    if new is not None:
        entries.append(blocks.band_entries(new, cfg))
    stored = blocks.concat_columns(groups["old_bands"])
    if old is not None and stored is not None:
        entries.append(blocks.old_band_entries(old, stored))
    merged = SketchRows.concat([rows for rows in (new, old) if rows is not None])
    if merged is not None:
        yield beam.pvalue.TaggedOutput("sketches", (element[0], merged))
    entries = blocks.concat_columns(entries)
    if entries is not None:
        for p, block in blocks.split_columns(entries, partition_of(entries.keys, parts), parts):
            yield beam.pvalue.TaggedOutput("bands", (p, block))


class SketchesAndBands(beam.PTransform):
    """New sketch blocks and earlier runs' indexes → ``(sketches, bands)`` blocks for the distributed path: a
    document in the new input and in an old index is the new one. (Without earlier runs the sketching step
    makes the band entries itself and this join is not needed.)"""

    def __init__(self, cfg: NearDedupConfig, against_dirs: Sequence[str], parts: int):
        super().__init__()
        self.cfg, self.against_dirs, self.parts = cfg, list(against_dirs), parts

    def expand(self, new_sketches):
        old_sketches, old_bands = new_sketches.pipeline | "ReadIndex" >> ReadIndex(self.against_dirs, self.cfg,
                                                                                   self.parts)
        joined = (
            {"new": new_sketches, "old": old_sketches, "old_bands": old_bands}
            | "JoinOldIndex" >> ByPartition(self.parts)
            | "SketchesAndBands" >> timed(STEP_NAME, _merge_old, self.cfg, self.parts).with_outputs(
                "sketches", "bands")
        )
        return joined.sketches, joined.bands


# ---------------------------------------------------------------- the distributed path


def _bucket_edges(element, parts: int):
    """A partition of band entries (every entry of its buckets) → star edges, to the partition of their centre
    (``Edges``) and to that of their other end (``MemberEdges``)."""
    _, entries = element
    edges = blocks.bucket_star_edges(blocks.concat_columns(entries))
    yield from blocks.split_columns(edges, partition_of(edges.a, parts), parts)
    for p, block in blocks.split_columns(edges, partition_of(edges.b, parts), parts):
        yield p, blocks.MemberEdges(*block)


class CandidateEdges(beam.PTransform):
    """Band entries → candidate edges ``(centre, other member)``: ``Edges`` blocks by the partition of their
    centre and ``MemberEdges`` blocks by that of their other end, a linear star per bucket (the same edge from
    several bands is merged where the edges meet their centre, ``VerifiedEdges``)."""

    def __init__(self, parts: int):
        super().__init__()
        self.parts = parts

    def expand(self, bands):
        return (
            bands
            | "GroupBuckets" >> ByPartition(self.parts)
            | "StarEdges" >> timed(STEP_NAME, _bucket_edges, self.parts)
        )


def _edge_ends(element, parts: int):
    """At a partition of ids: its candidate edges' centre rows and member rows, towards the members' partitions."""
    groups = blocks.by_type(element[1])
    rows = SketchRows.concat(groups.get(SketchRows, []))
    if rows is not None:
        yield from blocks.edge_ends(rows, blocks.concat_columns(groups.get(blocks.Edges, [])),
                                    blocks.concat_columns(groups.get(blocks.MemberEdges, [])), parts)


def _verify(element, cfg: NearDedupConfig, parts: int, rejected):
    """At the members' partition: the verified edges, both ways, by the partition (of ``parts``) of their first
    end (the components' grouping), and on ``rows`` the verified ends' sketch rows by the partition of their
    id."""
    verified, n_rejected, ends = blocks.verify_probes(list(element[1]), cfg)
    if n_rejected:
        rejected.inc(n_rejected)
    both = blocks.both_directions(verified)
    yield from blocks.split_columns(both, partition_of(both.a, parts), parts)
    if ends is not None:
        for p, rows in ends.split(partition_of(ends.ids, parts), parts):
            yield beam.pvalue.TaggedOutput("rows", (p, rows))


class VerifiedEdges(beam.PTransform):
    """``(sketches, candidate edges)`` (the candidate edges by the partition of each end) → ``.edges``: the
    distinct candidate edges whose two documents are similar enough, in both directions, keyed by the partition
    of their first end, and ``.rows``: their ends' sketch rows, by the partition of their id. Two shuffles: the
    sketches meet the edges of their documents (the only join that reads every sketch), and each edge meets its
    centre's and its member's rows at the member's partition; estimates settle the clear cases, an exact
    Jaccard the others."""

    def __init__(self, cfg: NearDedupConfig, parts: int):
        super().__init__()
        self.cfg, self.parts = cfg, parts

    def expand(self, inputs):
        rejected = Metrics.counter(STEP_NAME, "candidate_edges_rejected")
        probes = (
            inputs
            | "JoinEnds" >> ByPartition(self.parts)
            | "EdgeEnds" >> timed(STEP_NAME, _edge_ends, self.parts)
            | "GroupProbes" >> ByPartition(self.parts)
        )
        return probes | "VerifyEdges" >> timed(STEP_NAME, _verify, self.cfg, self.parts, rejected).with_outputs(
            "rows", main="edges")


def _large_star(element, parts: int):
    edges = blocks.large_star(blocks.concat_columns(element[1]))
    yield from blocks.split_columns(edges, partition_of(edges.a, parts), parts)


def _small_star(element, parts: int):
    edges = blocks.both_directions(blocks.small_star(blocks.concat_columns(element[1])))
    yield from blocks.split_columns(edges, partition_of(edges.a, parts), parts)


def _label_messages(element, parts: int):
    yield from blocks.label_messages(blocks.concat_columns(element[1]), parts)


def _crossing_labels(element, crossing_counter, without_sketch):
    """Per partition of nodes: each node's sketch row with its provisional label (main output), and on
    ``crossing`` the label pairs of edges whose ends still disagree, all to one key."""
    _, groups = element
    messages = list(groups["messages"])
    if not messages:
        return
    own = blocks.concat_columns([own for own, _ in messages])
    heard = blocks.concat_columns([heard for _, heard in messages])
    labels, pairs = blocks.crossing_labels(own, heard)
    if len(pairs.a):
        crossing_counter.inc(len(pairs.a))
        yield beam.pvalue.TaggedOutput("crossing", (0, pairs))
    labelled, missing = blocks.labelled_rows(labels, SketchRows.concat(groups["sketch"]))
    if missing:
        without_sketch.inc(missing)
    if labelled is not None:
        yield labelled


def _merge_labels(element):
    yield blocks.merge_labels(blocks.concat_columns(element[1]))


def _final_labels(labelled: Labelled, merged, parts: int):
    final = Labelled(blocks.final_labels(labelled.labels, merged), labelled.rows)
    for p, rows in blocks.split_by_partition(partition_of(final.labels, parts), parts):
        yield p, Labelled(final.labels[rows], final.rows.take(rows))


class ConnectedComponents(beam.PTransform):
    """``{"edges": verified edges (both directions, by the partition of their first end), "rows": their ends'
    sketch rows (by the partition of their id)}`` →
    ``(partition, Labelled)``: the sketch rows of the edges' ends with their component's label (its smallest
    id), by the partition of that label.

    ``rounds`` of large-star/small-star (no single machine holds the graph) shrink every component towards a
    star around its smallest id; then each node takes the smallest of itself and its neighbours as label and
    tells its neighbours, where it meets its sketch row. Edges whose ends still disagree (few, once most
    components are stars; the ``cc_crossing_edges`` counter) are merged by a union-find over their labels on
    one worker, and the merged labels are applied to every node. Exact for any number of rounds: rounds only
    trade shuffles of the whole edge set against the size of that last merge."""

    def __init__(self, rounds: int, parts: int):
        super().__init__()
        self.rounds, self.parts = rounds, parts

    def expand(self, inputs):
        parts = self.parts
        graph = inputs["edges"]
        for round_index in range(self.rounds):
            graph = (
                graph
                | f"LargeStarGroup{round_index}" >> ByPartition(parts)
                | f"LargeStar{round_index}" >> timed(STEP_NAME, _large_star, parts)
                | f"SmallStarGroup{round_index}" >> ByPartition(parts)
                | f"SmallStar{round_index}" >> timed(STEP_NAME, _small_star, parts)
            )
        messages = (
            graph
            | "LabelGroup" >> ByPartition(parts)
            | "ComponentLabel" >> timed(STEP_NAME, _label_messages, parts)
        )
        labelled = (
            {"messages": messages, "sketch": inputs["rows"]}
            | "LabelMessages" >> ByPartition(parts)
            | "CrossingLabels" >> timed(STEP_NAME, _crossing_labels, Metrics.counter(STEP_NAME, "cc_crossing_edges"),
                                        Metrics.counter(STEP_NAME, LABELS_WITHOUT_SKETCH)).with_outputs(
                "crossing", main="labelled")
        )
        merged = (
            labelled.crossing
            | "GatherCrossing" >> ByPartition(1)
            | "MergeLabels" >> timed(STEP_NAME, _merge_labels)
        )
        return labelled.labelled | "FinalLabel" >> timed(STEP_NAME, _final_labels, beam.pvalue.AsList(merged), parts)


def _resolve(element, cfg: NearDedupConfig, parts: int, decisions_made):
    decisions = blocks.resolve_components(element[1], cfg)
    if decisions:
        decisions_made.inc(len(decisions))
        rows = DecisionRows.of(decisions)
        yield from blocks.split_columns(rows, partition_of(rows.ids, parts), parts)


class VerifiedStars(beam.PTransform):
    """``(partition, Labelled)`` → ``(partition, DecisionRows)``: each component resolved on its own into verified
    stars (every removed document similar enough to the document kept for it: no chaining), the decisions by
    the partition of their document."""

    def __init__(self, cfg: NearDedupConfig, parts: int):
        super().__init__()
        self.cfg, self.parts = cfg, parts

    def expand(self, labelled):
        return (
            labelled
            | "GroupComponents" >> ByPartition(self.parts)
            | "ResolveComponents" >> timed(STEP_NAME, _resolve, self.cfg, self.parts,
                                           Metrics.counter(STEP_NAME, DECISIONS_MADE))
        )


class DistributedDecisions(beam.PTransform):
    """``{"sketches", "bands"}`` blocks → ``(partition, DecisionRows)`` by shuffles only: memory per worker bounded
    by a partition's band entries, sketches or components, whose number grows with the input."""

    def __init__(self, cfg: NearDedupConfig, parts: int):
        super().__init__()
        self.cfg, self.parts = cfg, parts

    def expand(self, inputs):
        edges = inputs["bands"] | "CandidateEdges" >> CandidateEdges(self.parts)
        verified = ((inputs["sketches"], edges)
                    | "VerifiedEdges" >> VerifiedEdges(self.cfg, self.parts))
        labelled = ({"edges": verified.edges, "rows": verified.rows}
                    | "ConnectedComponents" >> ConnectedComponents(self.cfg.cc_max_rounds, self.parts))
        return labelled | "VerifiedStars" >> VerifiedStars(self.cfg, self.parts)


# ---------------------------------------------------------------- the in-memory path


def _index_rows(sketches, cfg: NearDedupConfig):
    """The index rows of kept new documents: their sketch rows and band-key rows."""
    if not sketches:
        return
    keys = bucket_key_matrix([s.signature for s in sketches], cfg).tolist()
    for sketch, row in zip(sketches, keys):
        yield beam.pvalue.TaggedOutput("index_sketches", sketch_row(sketch))
        for key in row:
            yield beam.pvalue.TaggedOutput("index_bands", {"key": key, "id": sketch.id})


def _resolve_all(element, cfg: NearDedupConfig, with_index: bool, as_blocks_of: Optional[int] = None,
                 decisions_made=None):
    """Every sketch block (new and earlier runs') on one worker → ``dedup_in_memory``'s decisions, as
    ``(id, Decision)`` or, with ``as_blocks_of`` partitions, as ``(partition, DecisionRows)``."""
    _, pieces = element
    rows = SketchRows.concat(list(pieces))
    if rows is None:
        return
    new = rows.take(np.flatnonzero(~rows.old)) if rows.old.any() else rows
    check_unique_ids(new.ids.tolist())
    old = blocks.surviving_old_rows(new, rows.take(np.flatnonzero(rows.old))) if rows.old.any() else None
    sketches = new.sketches() + (old.sketches() if old is not None else [])
    decisions = dedup_in_memory(sketches, cfg)
    if decisions_made is not None:
        decisions_made.inc(len(decisions))
    if as_blocks_of:
        if decisions:
            decided = DecisionRows.of(decisions)
            yield from blocks.split_columns(decided, partition_of(decided.ids, as_blocks_of), as_blocks_of)
    else:
        for decision in decisions:
            yield decision.id, decision
    if with_index:
        removed = {d.id for d in decisions if d.removed}
        yield from _index_rows([s for s in sketches if not s.old and s.id not in removed], cfg)


class DedupInMemory(beam.PTransform):
    """Sketch blocks (any partitions) → ``(id, Decision)`` (or, with ``as_blocks_of``, ``(partition,
    DecisionRows)``): every sketch on one worker, ``dedup_in_memory``; with ``with_index``, the kept documents'
    index rows on ``index_sketches`` / ``index_bands`` too."""

    def __init__(self, cfg: NearDedupConfig, with_index: bool = False, as_blocks_of: Optional[int] = None):
        super().__init__()
        self.cfg, self.with_index, self.as_blocks_of = cfg, with_index, as_blocks_of

    def expand(self, sketches):
        return (
            sketches
            | "OneGroup" >> beam.Map(lambda kv: (0, kv[1]))
            | "GatherAll" >> ByPartition(1)
            | "DedupInMemory" >> timed(STEP_NAME, _resolve_all, self.cfg, self.with_index, self.as_blocks_of,
                                     Metrics.counter(STEP_NAME, DECISIONS_MADE)).with_outputs(
                "index_sketches", "index_bands", main="decisions")
        )


class _DecideWithSideInputFn(StepFn):
    """A document and every decision as a side input (the in-memory path: they fit one worker anyway) →
    ``(doc, reason)``. The documents are read again from the step's input: they are neither re-keyed nor
    shuffled."""

    def __init__(self):
        super().__init__(STEP_NAME)
        self._applied = Metrics.counter(STEP_NAME, DECISIONS_APPLIED)

    def process(self, doc, decisions):
        started = time.perf_counter()
        cpu_started = time.thread_time()
        decision = decisions.get(int(doc["id"]))
        if decision is not None:
            self._applied.inc()
        reason = decide(doc, decision)
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        yield doc, reason


# ---------------------------------------------------------------- decisions → (doc, reason)


class _DecideFn(StepFn):
    """Per partition of ids: record each document's decision on it and emit ``(doc, reason)``; a kept new
    document's index rows go to ``index_sketches`` / ``index_bands``."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__(STEP_NAME)
        self._cfg = cfg
        self._applied = Metrics.counter(STEP_NAME, DECISIONS_APPLIED)

    infer_output_type = any_output_type

    def process(self, element):
        groups = blocks.by_type(element[1])
        docs = [doc for block in groups.get(list, ()) for doc in block]
        if not docs:  # an old run's document: nothing to emit
            return []
        started = time.perf_counter()
        cpu_started = time.thread_time()
        out = list(self._decide(docs, groups))
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        return out

    def _decide(self, docs, groups):
        check_unique_ids([int(doc["id"]) for doc in docs])
        decided = blocks.concat_columns(groups.get(DecisionRows, []))
        by_id = {d.id: d for d in decided.decisions()} if decided is not None else {}
        applied, kept_ids = 0, []
        for doc in docs:
            decision = by_id.get(int(doc["id"]))
            applied += decision is not None
            reason = decide(doc, decision)
            if reason is None:
                kept_ids.append(int(doc["id"]))
            yield doc, reason
        if applied:
            self._applied.inc(applied)
        rows = SketchRows.concat(groups.get(SketchRows, []))
        if rows is not None and kept_ids:
            at = rows.index_of(np.array(kept_ids, dtype=np.int64))
            at = at[at >= 0]
            kept = rows.take(at[~rows.old[at]])
            yield from _index_rows(kept.sketches(), self._cfg)


class Decisions(beam.PTransform):
    """``(docs, decisions[, sketches])``: blocks (lists of documents, ``DecisionRows``, ``SketchRows``) keyed by the
    partition of ids → ``(doc, reason)`` pairs on the main output, and the kept documents' ``index_sketches`` /
    ``index_bands`` rows when the sketches are given."""

    def __init__(self, cfg: NearDedupConfig, parts: int):
        super().__init__()
        self.cfg, self.parts = cfg, parts

    def expand(self, keyed):
        return (
            keyed
            | "JoinDecisions" >> ByPartition(self.parts)
            | "Decide" >> beam.ParDo(_DecideFn(self.cfg)).with_outputs("index_sketches", "index_bands",
                                                                         main="decided")
        )


def _rows_in(element) -> int:
    return len(element[1])


class NearDedupDecide(beam.PTransform):
    """The annotate-and-decide part of near-dedup: documents → ``(doc, reason)`` pairs (and the index written
    when ``index_out_dir`` is given). See ``NearDedup``."""

    def __init__(self, cfg: NearDedupConfig, index_out_dir: Optional[str] = None, against_dirs: Sequence[str] = (),
                 path: str = "auto", parts: int = blocks.MIN_PARTITIONS, carry: Optional[Callable[[dict], dict]] = None):
        super().__init__()
        self.cfg, self.index_out_dir, self.against_dirs = cfg, index_out_dir, list(against_dirs)
        self.path, self.parts, self.carry = path, parts, carry

    def expand(self, docs):
        cfg, parts = self.cfg, self.parts
        if self.path == "memory":  # the documents take the decisions as a side input: no shuffle of documents
            sketches = (docs | "Sketch" >> Sketch(cfg, parts=1))[SKETCHES]
            if self.against_dirs:
                old, _ = docs.pipeline | "ReadIndex" >> ReadIndex(self.against_dirs, cfg, parts, bands=False)
                sketches = (sketches, old) | "WithOldSketches" >> beam.Flatten()
            resolved = sketches | "DedupInMemory" >> DedupInMemory(cfg, with_index=bool(self.index_out_dir))
            decided = docs | "Decide" >> beam.ParDo(_DecideWithSideInputFn(), beam.pvalue.AsDict(resolved.decisions))
            index = resolved
        else:
            # Band entries are made by the sketching step, or, with earlier runs' indexes, where the new
            # sketches meet the old ones.
            sketched = docs | "Sketch" >> Sketch(cfg, parts, bands=not self.against_dirs, docs=True, carry=self.carry)
            if self.against_dirs:
                sketches, bands = sketched[SKETCHES] | "SketchesAndBands" >> SketchesAndBands(
                    cfg, self.against_dirs, parts)
            else:
                sketches, bands = sketched[SKETCHES], sketched[BANDS]
            if self.path == "beam":
                decisions = ({"sketches": sketches, "bands": bands}
                             | "Distributed" >> DistributedDecisions(cfg, parts))
            else:  # auto: choose at run time from the number of sketches; the other path then sees empty inputs
                count = beam.pvalue.AsSingleton(
                    sketches | "SketchRows" >> beam.Map(_rows_in) | "CountSketches" >> beam.CombineGlobally(sum))
                limit = cfg.memory_max_docs
                route = lambda _, n_routes, n, limit=limit: 0 if n <= limit else 1  # noqa: E731
                if self.spill_dir is not None:  # a step waiting for a side input: its input is held until then
                    sketches = sketches | "SpillSketches" >> beam.Map(_spill, self.spill_dir)
                    bands = bands | "SpillBands" >> beam.Map(_spill, self.spill_dir)
                routed_sketches = sketches | "RouteSketches" >> beam.Partition(route, 2, count)
                routed_bands = bands | "RouteBands" >> beam.Partition(route, 2, count)
                if self.spill_dir is not None:
                    routed_sketches = [routed | f"UnspillSketches{i}" >> beam.Map(_unspill)
                                       for i, routed in enumerate(routed_sketches)]
                    routed_bands = [routed | f"UnspillBands{i}" >> beam.Map(_unspill)
                                    for i, routed in enumerate(routed_bands)]
                decisions = (
                    ((routed_sketches[0] | "DedupInMemory" >> DedupInMemory(cfg, as_blocks_of=parts)).decisions,
                     {"sketches": routed_sketches[1], "bands": routed_bands[1]}
                     | "Distributed" >> DistributedDecisions(cfg, parts))
                    | "AllDecisions" >> beam.Flatten()
                )
            # The sketches join the decisions only when the kept documents' index is wanted.
            to_join = (sketched[DOCS], decisions, sketches) if self.index_out_dir else (sketched[DOCS], decisions)
            joined = to_join | "Decisions" >> Decisions(cfg, parts)
            decided, index = joined.decided, joined
        if self.index_out_dir:
            ({"sketches": index.index_sketches, "bands": index.index_bands}
             | "WriteIndex" >> WriteIndex(self.index_out_dir, cfg))
        return decided


class NearDedup(beam.PTransform):
    """Near-duplicate removal over a PCollection of documents (Contract 1 dicts with int ids).

    ``expand`` returns ``.kept`` / ``.removed`` (``out["kept"]`` too) from the shared routing tail; removed
    documents carry ``removed_by="near_dedup"``, ``reason="near_duplicate"`` and ``annotations["near_dedup"]``
    with ``cluster`` (the kept document's id) and ``similarity``. When ``index_out_dir`` is given, the sketches
    and band keys of the kept documents are written there (``transforms.near_dedup.index``). ``against_dirs``
    are earlier runs' index folders: their documents always win and only new documents are removed; their text
    is never read.

    ``cfg.mode`` chooses the path; ``auto`` decides from ``input_bytes`` (the caller's input size, when given)
    when the graph is built, otherwise at run time from the number of sketches (new + old):
    ``memory`` gathers all sketches on one worker and runs ``dedup_in_memory``; ``beam`` groups band entries by
    partitions of their keys (``CandidateEdges``), verifies star edges by joins (``VerifiedEdges``), finds
    components by large-star/small-star rounds (``ConnectedComponents``) and resolves each component on its own
    (``VerifiedStars``). Its partitions (``blocks.partitions_for(input_bytes, workers)``; ``workers``: how many
    workers share the shuffles, when the caller knows) grow with the input, so memory per worker is bounded by
    a partition's band entries, sketches, components or documents. A small input needs no shortcut of the
    distributed path: ``auto`` gives it the in-memory path (``memory_max_input_bytes``). Both paths give the same decisions; both
    are deterministic on any number of workers and partitions. The documents are in the global window.

    ``carry``: what of each document the distributed path carries from its sketching to its decision (default:
    the whole document, as the step's output must be); a caller that only reports clusters carries ids and
    spares its text two trips through the shuffles (``corpusmill dedup``). The in-memory path decides the
    step's input documents themselves.
    """

    def __init__(self, cfg: NearDedupConfig, index_out_dir: Optional[str] = None, against_dirs: Sequence[str] = (),
                 input_bytes: Optional[int] = None, progress_dir: Optional[str] = None,
                 carry: Optional[Callable[[dict], dict]] = None, workers: Optional[int] = None):
        super().__init__()
        self.cfg, self.carry, self.workers = cfg, carry, workers
        self.index_out_dir = str(index_out_dir) if index_out_dir else None
        self.against_dirs = [str(d) for d in against_dirs]
        self.input_bytes = input_bytes
        self.progress_dir = progress_dir
        for directory in self.against_dirs:
            check_index_params(directory, cfg)

    def path(self) -> str:
        """memory | beam | auto (decided at run time from the number of sketches)."""
        if self.cfg.mode != "auto" or self.input_bytes is None:
            return self.cfg.mode
        return chosen_path(self.cfg, self.input_bytes, index_bytes(self.against_dirs))

    def partitions(self) -> int:
        """The partitions of the distributed path's blocks (and of every shuffle of either path):
        ``blocks.partitions_for`` of the input (earlier runs' indexes included; unknown when neither the input's
        size nor an index is given) and ``workers``."""
        old_bytes = index_bytes(self.against_dirs) if self.against_dirs else 0
        size = None if self.input_bytes is None and not old_bytes else (self.input_bytes or 0) + old_bytes
        return blocks.partitions_for(size, self.workers)

    def expand(self, docs):
        if not self.cfg.enabled:  # switched off: every document passes untouched
            decided = docs | "NotEnabled" >> beam.Map(lambda doc: (doc, None))
        else:
            decided = docs | "Decide" >> NearDedupDecide(self.cfg, self.index_out_dir, self.against_dirs,
                                                         self.path(), self.partitions(), self.carry)
        return decided | "Tail" >> Route(STEP_NAME, self.progress_dir)


# ---------------------------------------------------------------- decisions from stored sketches (phased clean)


class _LoadSketchesFn(StepFn):
    """A file of pickled ``SketchRows`` (one unit of the clean's documents) → ``(partition, SketchRows)`` blocks,
    without the rows of ``drop_ids`` (documents an earlier step removed), and on ``bands`` their band entries."""

    def __init__(self, cfg: NearDedupConfig, parts: int, bands: bool, drop_ids: np.ndarray):
        super().__init__(STEP_NAME)
        self._cfg, self._parts, self._bands, self._drop = cfg, parts, bands, drop_ids

    infer_output_type = any_output_type

    def process(self, path: str):
        started = time.perf_counter()
        cpu_started = time.thread_time()
        with open(path, "rb") as fh:
            rows = pickle.load(fh)
        out = []
        if rows is not None and len(self._drop):
            rows = rows.take(np.flatnonzero(~np.isin(rows.ids, self._drop)))
        if rows is not None and len(rows):
            out.extend(_windowed(block) for block in rows.split(partition_of(rows.ids, self._parts), self._parts))
            if self._bands:
                entries = blocks.band_entries(rows, self._cfg)
                out.extend(beam.pvalue.TaggedOutput(BANDS, _windowed(block)) for block in
                           blocks.split_columns(entries, partition_of(entries.keys, self._parts), self._parts))
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        return out


def _write_decisions(element, path: str):
    from runio.files import write_atomic  # (runio is a lower floor; deferred only to keep this module's imports)

    decided = blocks.concat_columns(list(element[1]))
    write_atomic(path, pickle.dumps(decided, protocol=pickle.HIGHEST_PROTOCOL))
    yield path


class DecisionsFromSketches(beam.PTransform):
    """Near-dedup's decisions from sketches stored by the phased clean (``pipelines.clean_units``), without the
    documents: ``p | DecisionsFromSketches(cfg, sketch_files, drop_ids, decisions_path, ...)`` reads every
    unit's ``SketchRows`` file (``drop_ids``: documents removed before near-dedup, e.g. exact duplicates), takes
    the same path as ``NearDedupDecide`` (``path``: memory | beam | auto; earlier runs' indexes in
    ``against_dirs``) and writes all decisions, as one pickled ``DecisionRows`` (None: no decision), to
    ``decisions_path``. The documents then take their decisions in their own units. ``spill_dir``: every shuffle's
    blocks go through files there (``shuffles_spilled_to``), so that a runner keeping shuffles in one process
    (the local FnApiRunner's driver) holds paths, not the corpus's sketches; the caller removes it afterwards."""

    def __init__(self, cfg: NearDedupConfig, sketch_files: Sequence[str], drop_ids: np.ndarray, decisions_path: str,
                 against_dirs: Sequence[str] = (), path: str = "auto", parts: int = blocks.MIN_PARTITIONS,
                 spill_dir: Optional[str] = None):
        super().__init__()
        self.cfg, self.sketch_files, self.drop_ids = cfg, list(sketch_files), drop_ids
        self.decisions_path, self.against_dirs, self.path, self.parts = decisions_path, list(against_dirs), path, parts
        self.spill_dir = spill_dir

    def expand(self, pbegin):
        if self.spill_dir is None:
            return self._expand(pbegin)
        with shuffles_spilled_to(self.spill_dir):
            return self._expand(pbegin)

    def _expand(self, pbegin):
        cfg, parts = self.cfg, self.parts
        with_bands = self.path != "memory" and not self.against_dirs
        loaded = (pbegin
                  | "SketchFiles" >> beam.Create(self.sketch_files)
                  | "SpreadFiles" >> beam.Reshuffle()
                  | "LoadSketches" >> beam.ParDo(_LoadSketchesFn(cfg, parts, with_bands, self.drop_ids)).with_outputs(
                      BANDS, main=SKETCHES))
        sketches = loaded[SKETCHES]
        if self.path == "memory":
            if self.against_dirs:
                old, _ = pbegin | "ReadIndex" >> ReadIndex(self.against_dirs, cfg, parts, bands=False)
                sketches = (sketches, old) | "WithOldSketches" >> beam.Flatten()
            decisions = (sketches | "DedupInMemory" >> DedupInMemory(cfg, as_blocks_of=parts)).decisions
        else:
            if self.against_dirs:
                sketches, bands = sketches | "SketchesAndBands" >> SketchesAndBands(cfg, self.against_dirs, parts)
            else:
                bands = loaded[BANDS]
            if self.path == "beam":
                decisions = ({"sketches": sketches, "bands": bands}
                             | "Distributed" >> DistributedDecisions(cfg, parts))
            else:  # auto: as NearDedupDecide, chosen at run time from the number of sketches
                count = beam.pvalue.AsSingleton(
                    sketches | "SketchRows" >> beam.Map(_rows_in) | "CountSketches" >> beam.CombineGlobally(sum))
                limit = cfg.memory_max_docs
                route = lambda _, n_routes, n, limit=limit: 0 if n <= limit else 1  # noqa: E731
                routed_sketches = sketches | "RouteSketches" >> beam.Partition(route, 2, count)
                routed_bands = bands | "RouteBands" >> beam.Partition(route, 2, count)
                decisions = (
                    ((routed_sketches[0] | "DedupInMemory" >> DedupInMemory(cfg, as_blocks_of=parts)).decisions,
                     {"sketches": routed_sketches[1], "bands": routed_bands[1]}
                     | "Distributed" >> DistributedDecisions(cfg, parts))
                    | "AllDecisions" >> beam.Flatten()
                )
        return (decisions
                | "OneKey" >> beam.Map(lambda kv: (0, kv[1]))
                | "GatherDecisions" >> ByPartition(1)
                | "WriteDecisions" >> beam.FlatMap(_write_decisions, self.decisions_path))

"""The Beam wrapper of near-duplicate removal: ``NearDedup(cfg, index_out_dir, against_dirs)``.

The decisions themselves are the pure core's (``transforms.near_dedup.core``); this module only moves sketches,
band keys and components between workers, as named sub-transforms (see ``NearDedup``'s docstring):

    Sketch → CandidateEdges → VerifiedEdges → ConnectedComponents → VerifiedStars → Decisions → routing tail

(or, on the in-memory path, Sketch → DedupInMemory → Decisions). Every function doing the step's work is timed
into the ``near_dedup`` ``busy_ms`` counter.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms.beam_step import Route, StepFn, timed
from transforms.near_dedup.core import (SKETCH_BATCH, STEP_NAME, NearDedupConfig, SketchBuilder, bucket_key_matrix, bucket_keys,
                                        check_unique_ids, chosen_path, connected_components, decide, dedup_in_memory, resolve_component,
                                        star_edges, verify_edge)
from transforms.near_dedup.index import ReadIndex, WriteIndex, check_index_params, index_bytes, sketch_row
from transforms.near_dedup.minhash import Sketch as SketchData

SKETCHES, DOCS, BANDS = "sketches", "docs", "bands"
# Documents sketched together (numpy over the batch): large enough to amortize the per-call overhead, small
# enough that the buffered documents stay a few MB per worker.


# ---------------------------------------------------------------- sketches and band keys

class _SketchFn(StepFn):
    """doc → ``(id, doc)`` on the main output, ``(id, sketch)`` on ``sketches`` (a sketch travels as the plain
    tuple ``Sketch.to_wire()``), and with ``bands`` its bucket keys ``(key, (rank, id, False))`` on ``bands``.

    Documents are buffered and sketched ``SKETCH_BATCH`` at a time (flushed when full and at the end of each
    bundle); every document keeps its own window and timestamp."""

    def __init__(self, cfg: NearDedupConfig, bands: bool = False, docs: bool = True, batch_size: int = SKETCH_BATCH):
        super().__init__(STEP_NAME)
        self._cfg, self._bands, self._docs, self._batch_size = cfg, bands, docs, batch_size
        self._no_tokens = Metrics.counter(STEP_NAME, "docs_without_tokens")
        self._buffer: list = []

    def setup(self):
        self._builder = SketchBuilder(self._cfg)

    def start_bundle(self):
        self._buffer = []

    def process(self, doc, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
        self._buffer.append((doc, window, timestamp))
        if len(self._buffer) >= self._batch_size:
            yield from self._flush()

    def finish_bundle(self):
        yield from self._flush()
        self._flush_busy()

    def _flush(self):
        batch, self._buffer = self._buffer, []
        if not batch:
            return
        started = time.perf_counter()
        cpu_started = time.thread_time()
        sketches = self._builder.sketch_batch([doc for doc, _, _ in batch])
        present = [s for s in sketches if s is not None]
        keys = (bucket_key_matrix([s.signature for s in present], self._cfg).tolist()
                if self._bands and present else [])
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        if len(present) < len(batch):
            self._no_tokens.inc(len(batch) - len(present))
        row = 0
        for (doc, window, timestamp), sketch in zip(batch, sketches):
            windows = (window,)
            if sketch is not None:
                yield beam.pvalue.TaggedOutput(SKETCHES, WindowedValue((sketch.id, sketch.to_wire()), timestamp,
                                                                       windows))
                if self._bands:
                    member = (sketch.rank, sketch.id, False)
                    for key in keys[row]:
                        yield beam.pvalue.TaggedOutput(BANDS, WindowedValue((key, member), timestamp, windows))
                row += 1
            if self._docs:
                yield WindowedValue((int(doc["id"]), doc), timestamp, windows)


class Sketch(beam.PTransform):
    """Documents → ``.sketches`` ``(id, sketch tuple)`` (none for a tokenless document), with ``docs=True``
    ``.docs`` ``(id, doc)`` and with ``bands=True`` ``.bands`` ``(bucket key, (rank, id, False))``."""

    def __init__(self, cfg: NearDedupConfig, bands: bool = False, docs: bool = True):
        super().__init__()
        self.cfg, self.bands, self.docs = cfg, bands, docs

    def expand(self, docs):
        return docs | "Sketch" >> beam.ParDo(_SketchFn(self.cfg, self.bands, self.docs)).with_outputs(
            SKETCHES, BANDS, main=DOCS)


def _join_old(element, cfg: NearDedupConfig):
    """Per id: the new sketch, or, when the id is not in the new input, the old sketch and its band keys."""
    doc_id, groups = element
    new, old, old_bands = list(groups["new"]), list(groups["old"]), list(groups["old_bands"])
    if new:
        sketch = SketchData.from_wire(new[0])
        yield beam.pvalue.TaggedOutput("sketches", (doc_id, new[0]))
        for key in bucket_keys(sketch, cfg):
            yield beam.pvalue.TaggedOutput("bands", (key, (sketch.rank, doc_id, False)))
    elif old:
        yield beam.pvalue.TaggedOutput("sketches", (doc_id, old[0]))
        rank = old[0][1]
        for key in old_bands:
            yield beam.pvalue.TaggedOutput("bands", (key, (rank, doc_id, True)))


class SketchesAndBands(beam.PTransform):
    """New sketches and earlier runs' indexes → ``(sketches, bands)``: ``(id, sketch tuple)`` and
    ``(band key, (rank, id, old))``. A document in the new input and in an old index is the new one. (Without
    earlier runs the sketching step emits the band keys itself and this join is not needed.)"""

    def __init__(self, cfg: NearDedupConfig, against_dirs: Sequence[str]):
        super().__init__()
        self.cfg, self.against_dirs = cfg, list(against_dirs)

    def expand(self, new_sketches):
        cfg = self.cfg
        old_sketches, old_bands = new_sketches.pipeline | "ReadIndex" >> ReadIndex(self.against_dirs, cfg)
        joined = (
            {"new": new_sketches, "old": old_sketches, "old_bands": old_bands}
            | "JoinOldIndex" >> beam.CoGroupByKey()
            | "SketchesAndBands" >> timed(STEP_NAME, _join_old, cfg).with_outputs("sketches", "bands")
        )
        return joined.sketches, joined.bands


# ---------------------------------------------------------------- the distributed path

def _bucket_edges(element):
    _, members = element
    # Ids only (a few bytes each): a hot bucket costs memory linear in its size and edges linear in its size.
    yield from star_edges(members)


class CandidateEdges(beam.PTransform):
    """Band keys → candidate edges ``(first member, other member)``: a linear star per bucket (the same edge
    from several bands is merged where the edges are joined with their centre, ``VerifiedEdges``)."""

    def expand(self, bands):
        return (
            bands
            | "GroupBuckets" >> beam.GroupByKey()
            | "StarEdges" >> timed(STEP_NAME, _bucket_edges)
        )


PROBE_TO, IS_MEMBER = 0, 1


def _edge_ends(edge):
    """An edge ``(first end, second end)`` as a message to each end: the first end is to send its sketch to the
    second, and the second end learns that it is one (so that only such documents' sketches travel again)."""
    center, other = edge
    yield center, (PROBE_TO, other)
    yield other, (IS_MEMBER, center)


def _probe_from_center(element):
    """Per id: its sketch to every distinct second end of its edges (probes), and, when it is itself the second
    end of an edge, its sketch on ``member_sketches`` for the verification join."""
    doc_id, groups = element
    sketches = list(groups["sketch"])
    if not sketches:
        return
    targets, is_member = set(), False
    for kind, other in groups["ends"]:
        if kind == PROBE_TO:
            targets.add(other)
        else:
            is_member = True
    for other in targets:
        yield other, sketches[0]
    if is_member:
        yield beam.pvalue.TaggedOutput("member_sketches", (doc_id, sketches[0]))


def _verify_probes(element, cfg: NearDedupConfig, counter):
    """At the second end: verify each probe; emit the verified edges, and on ``verified_sketches`` the sketches
    of both ends (the components are resolved from these, so only near-duplicates' sketches travel further)."""
    doc_id, groups = element
    sketches = list(groups["sketch"])
    if not sketches:
        return
    member = SketchData.from_wire(sketches[0])
    verified = False
    for wire in groups["probes"]:
        center = SketchData.from_wire(wire)
        if verify_edge(center, member, cfg):
            verified = True
            yield center.id, doc_id
            yield beam.pvalue.TaggedOutput("verified_sketches", (center.id, wire))
        else:
            counter.inc()
    if verified:
        yield beam.pvalue.TaggedOutput("verified_sketches", (doc_id, sketches[0]))


class VerifiedEdges(beam.PTransform):
    """``{"sketches", "edges"}`` → ``.edges``: the distinct candidate edges whose two documents are similar
    enough, and ``.verified_sketches``: the sketches of their ends (repeated ids are harmless). Two joins: every
    sketch meets the edges of its document, and travels on to the second ends of its edges; a second end's own
    sketch travels with it only when it is one (most documents are in no candidate edge, and their sketches go
    no further). Estimates settle the clear cases."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, inputs):
        sketches, edges = inputs["sketches"], inputs["edges"]
        rejected = Metrics.counter(STEP_NAME, "candidate_edges_rejected")
        probed = (
            {"sketch": sketches, "ends": edges | "EdgeEnds" >> timed(STEP_NAME, _edge_ends)}
            | "JoinCenters" >> beam.CoGroupByKey()
            | "ProbeFromCenter" >> timed(STEP_NAME, _probe_from_center).with_outputs("member_sketches",
                                                                                       main="probes")
        )
        verified = (
            {"sketch": probed.member_sketches, "probes": probed.probes}
            | "JoinMembers" >> beam.CoGroupByKey()
            | "VerifyEdges" >> timed(STEP_NAME, _verify_probes, self.cfg, rejected).with_outputs(
                "verified_sketches", main="edges")
        )
        return verified


def _both_directions(edge):
    a, b = edge
    yield a, b
    yield b, a


def _large_star(element):
    node, neighbours = element
    neighbours = set(neighbours)
    smallest = min(neighbours | {node})
    for other in neighbours:
        if other > node:
            yield other, smallest


def _small_star(element):
    node, neighbours = element
    lower = {v for v in neighbours if v < node}
    smallest = min(lower | {node})
    for other in lower | {node}:
        if other != smallest:
            yield other, smallest


LABEL, NEIGHBOUR_LABEL = 0, 1


def _component_label(element):
    """A node's provisional label (the smallest of itself and its lower neighbours) to itself, and to each
    neighbour, so that an edge whose ends got different labels shows up at one of them (``_crossing_labels``)."""
    node, neighbours = element
    neighbours = set(neighbours)
    label = min(neighbours | {node}) if any(v < node for v in neighbours) else node
    yield node, (LABEL, label)
    for other in neighbours:
        yield other, (NEIGHBOUR_LABEL, label)


def _crossing_labels(element, counter):
    """Per node: its label, and one (label, other label) pair per differing label a neighbour sent."""
    node, messages = element
    own, others = None, set()
    for kind, label in messages:
        if kind == LABEL:
            own = label
        else:
            others.add(label)
    yield beam.pvalue.TaggedOutput("labels", (node, own))
    for other in others - {own}:
        counter.inc()
        yield own, other


def _merge_labels(element):
    """Union-find over the crossing label pairs: label → the smallest label it is connected to."""
    _, pairs = element
    for label, root in connected_components(pairs).items():
        if label != root:
            yield label, root


def _final_label(element, merged):
    node, label = element
    yield node, merged.get(label, label)


class ConnectedComponents(beam.PTransform):
    """Verified edges → ``(id, component label)``, the label being the component's smallest id.

    ``rounds`` of large-star/small-star (no single machine holds the graph) shrink every component towards a
    star around its smallest id; then each node takes the smallest of itself and its lower neighbours as
    label and tells its neighbours. Edges whose ends still disagree (few, once most components are stars; the
    ``cc_crossing_edges`` counter) are merged by a union-find over their labels on one worker, and the merged
    labels are applied to every node. Exact for any number of rounds: rounds only trade shuffles of the
    whole edge set against the size of that last merge. Nodes are ordered by their ids."""

    def __init__(self, rounds: int):
        super().__init__()
        self.rounds = rounds

    def expand(self, edges):
        crossing_counter = Metrics.counter(STEP_NAME, "cc_crossing_edges")
        graph = edges
        for round_index in range(self.rounds):
            graph = (
                graph
                | f"LargeStarSym{round_index}" >> timed(STEP_NAME, _both_directions)
                | f"LargeStarGroup{round_index}" >> beam.GroupByKey()
                | f"LargeStar{round_index}" >> timed(STEP_NAME, _large_star)
                | f"SmallStarGroup{round_index}" >> beam.GroupByKey()
                | f"SmallStar{round_index}" >> timed(STEP_NAME, _small_star)
            )  # repeated edges are harmless: every grouping step turns neighbours into a set
        checked = (
            graph
            | "LabelSym" >> timed(STEP_NAME, _both_directions)
            | "LabelGroup" >> beam.GroupByKey()
            | "ComponentLabel" >> timed(STEP_NAME, _component_label)
            | "LabelMessages" >> beam.GroupByKey()
            | "CrossingLabels" >> timed(STEP_NAME, _crossing_labels, crossing_counter).with_outputs(
                "labels", main="crossing")
        )
        merged = (
            checked.crossing
            | "OneMerge" >> beam.Map(lambda pair: (0, pair))
            | "GatherCrossing" >> beam.GroupByKey()
            | "MergeLabels" >> timed(STEP_NAME, _merge_labels)
        )
        return checked.labels | "FinalLabel" >> timed(STEP_NAME, _final_label, beam.pvalue.AsDict(merged))


# Consistency counters: every labelled document has its sketch, and every decision made reaches its document.
# A runner that dropped part of a stage's input would otherwise keep documents silently (the accounting still
# balances: they are kept instead of removed); `pipelines.prepare.collect_stats` fails the run on a mismatch.
DECISIONS_MADE, DECISIONS_APPLIED, LABELS_WITHOUT_SKETCH = "decisions_made", "decisions_applied", "labels_without_sketch"


def _label_sketch(element, labels_without_sketch=None):
    _, groups = element
    labels, sketches = list(groups["label"]), list(groups["sketch"])
    if labels and sketches:
        yield labels[0], sketches[0]
    elif labels and labels_without_sketch is not None:  # a verified edge's end always has its sketch
        labels_without_sketch.inc()


def _resolve(element, cfg: NearDedupConfig, decisions_made=None):
    _, members = element
    decisions = resolve_component([SketchData.from_wire(m) for m in members], cfg)
    if decisions_made is not None:
        decisions_made.inc(len(decisions))
    for decision in decisions:
        yield decision.id, decision


class VerifiedStars(beam.PTransform):
    """``{"sketches", "labels"}`` → ``(id, Decision)``: each component resolved on its own into verified stars
    (every removed document similar enough to the document kept for it: no chaining)."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, inputs):
        return (
            {"label": inputs["labels"], "sketch": inputs["sketches"]}
            | "JoinLabels" >> beam.CoGroupByKey()
            | "ByComponent" >> timed(STEP_NAME, _label_sketch, Metrics.counter(STEP_NAME, LABELS_WITHOUT_SKETCH))
            | "GroupComponents" >> beam.GroupByKey()
            | "ResolveComponents" >> timed(STEP_NAME, _resolve, self.cfg, Metrics.counter(STEP_NAME, DECISIONS_MADE))
        )


class DistributedDecisions(beam.PTransform):
    """``{"sketches", "bands"}`` → ``(id, Decision)`` by shuffles only: memory per worker bounded by a bucket's
    ids or a component's sketches."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, inputs):
        sketches = inputs["sketches"]
        edges = inputs["bands"] | "CandidateEdges" >> CandidateEdges()
        verified = {"sketches": sketches, "edges": edges} | "VerifiedEdges" >> VerifiedEdges(self.cfg)
        labels = verified.edges | "ConnectedComponents" >> ConnectedComponents(self.cfg.cc_max_rounds)
        return ({"sketches": verified.verified_sketches, "labels": labels}
                | "VerifiedStars" >> VerifiedStars(self.cfg))


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


def _resolve_all(element, cfg: NearDedupConfig, with_index: bool, decisions_made=None):
    _, wires = element
    sketches = [SketchData.from_wire(w) for w in wires]
    check_unique_ids([s.id for s in sketches if not s.old])
    decisions = dedup_in_memory(sketches, cfg)
    if decisions_made is not None:
        decisions_made.inc(len(decisions))
    for decision in decisions:
        yield decision.id, decision
    if with_index:
        removed = {d.id for d in decisions if d.removed}
        yield from _index_rows([s for s in sketches if not s.old and s.id not in removed], cfg)


class DedupInMemory(beam.PTransform):
    """``(id, sketch tuple)`` → ``(id, Decision)``: every sketch on one worker, ``dedup_in_memory``; with
    ``with_index``, the kept documents' index rows on ``index_sketches`` / ``index_bands`` too."""

    def __init__(self, cfg: NearDedupConfig, with_index: bool = False):
        super().__init__()
        self.cfg, self.with_index = cfg, with_index

    def expand(self, sketches):
        return (
            sketches
            | "OneGroup" >> beam.Map(lambda kv: (0, kv[1]))
            | "GatherAll" >> beam.GroupByKey()
            | "DedupInMemory" >> timed(STEP_NAME, _resolve_all, self.cfg, self.with_index,
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
    """Per id: record the decision on the document and emit ``(doc, reason)``; a kept document's index rows go
    to ``index_sketches`` / ``index_bands``."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__(STEP_NAME)
        self._cfg = cfg
        self._applied = Metrics.counter(STEP_NAME, DECISIONS_APPLIED)

    def process(self, element):
        _, groups = element
        docs = list(groups["doc"])
        if not docs:  # an old run's document: nothing to emit
            return []
        started = time.perf_counter()
        cpu_started = time.thread_time()
        out = list(self._decide(docs, groups))
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        return out

    def _decide(self, docs, groups):
        if len(docs) > 1:
            raise ValueError(f"near_dedup: document id {docs[0]['id']} occurs {len(docs)} times; ids must be unique")
        decisions, sketches = list(groups["decision"]), list(groups.get("sketch", ()))
        if decisions:
            self._applied.inc()
        doc = docs[0]
        reason = decide(doc, decisions[0] if decisions else None)
        yield doc, reason
        if reason is None and sketches:
            sketch = SketchData.from_wire(sketches[0])
            if not sketch.old:
                yield from _index_rows([sketch], self._cfg)


class Decisions(beam.PTransform):
    """``{"doc", "decision"[, "sketch"]}`` keyed by id → ``(doc, reason)`` pairs on the main output, and the kept
    documents' ``index_sketches`` / ``index_bands`` rows when the sketches are given."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, keyed):
        return (
            keyed
            | "JoinDecisions" >> beam.CoGroupByKey()
            | "Decide" >> beam.ParDo(_DecideFn(self.cfg)).with_outputs("index_sketches", "index_bands",
                                                                         main="decided")
        )


class NearDedupDecide(beam.PTransform):
    """The annotate-and-decide part of near-dedup: documents → ``(doc, reason)`` pairs (and the index written
    when ``index_out_dir`` is given). See ``NearDedup``."""

    def __init__(self, cfg: NearDedupConfig, index_out_dir: Optional[str] = None, against_dirs: Sequence[str] = (),
                 path: str = "auto"):
        super().__init__()
        self.cfg, self.index_out_dir, self.against_dirs, self.path = cfg, index_out_dir, list(against_dirs), path

    def expand(self, docs):
        cfg = self.cfg
        # Band keys are needed by the distributed path only (the in-memory path keys its signature matrix);
        # without earlier runs' indexes they are emitted by the sketching step itself.
        emit_bands = self.path != "memory" and not self.against_dirs
        sketched = docs | "Sketch" >> Sketch(cfg, bands=emit_bands, docs=self.path != "memory")
        if self.against_dirs:
            sketches, bands = sketched[SKETCHES] | "SketchesAndBands" >> SketchesAndBands(cfg, self.against_dirs)
        else:
            sketches, bands = sketched[SKETCHES], sketched[BANDS]
        if self.path == "memory":  # the documents take the decisions as a side input: no shuffle of documents
            resolved = sketches | "DedupInMemory" >> DedupInMemory(cfg, with_index=bool(self.index_out_dir))
            decided = docs | "Decide" >> beam.ParDo(_DecideWithSideInputFn(), beam.pvalue.AsDict(resolved.decisions))
            index = resolved
        else:
            if self.path == "beam":
                decisions = {"sketches": sketches, "bands": bands} | "Distributed" >> DistributedDecisions(cfg)
            else:  # auto: choose at run time from the number of sketches; the other path then sees empty inputs
                count = beam.pvalue.AsSingleton(sketches | "CountSketches" >> beam.combiners.Count.Globally())
                limit = cfg.memory_max_docs
                route = lambda _, parts, n, limit=limit: 0 if n <= limit else 1  # noqa: E731
                routed_sketches = sketches | "RouteSketches" >> beam.Partition(route, 2, count)
                routed_bands = bands | "RouteBands" >> beam.Partition(route, 2, count)
                decisions = (
                    ((routed_sketches[0] | "DedupInMemory" >> DedupInMemory(cfg)).decisions,
                     {"sketches": routed_sketches[1], "bands": routed_bands[1]}
                     | "Distributed" >> DistributedDecisions(cfg))
                    | "AllDecisions" >> beam.Flatten()
                )
            # The sketches join the decisions only when the kept documents' index is wanted.
            to_join = {"doc": sketched[DOCS], "decision": decisions}
            if self.index_out_dir:
                to_join["sketch"] = sketches
            joined = to_join | "Decisions" >> Decisions(cfg)
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
    ``memory`` gathers all sketches on one worker and runs ``dedup_in_memory``; ``beam`` groups band keys with
    the runner's shuffle (``CandidateEdges``), verifies star edges by joins (``VerifiedEdges``), finds
    components by large-star/small-star rounds (``ConnectedComponents``) and resolves each component on its own
    (``VerifiedStars``; memory per worker bounded by a bucket's ids or a component's sketches). Both give the
    same decisions; both are deterministic on any number of workers.
    """

    def __init__(self, cfg: NearDedupConfig, index_out_dir: Optional[str] = None, against_dirs: Sequence[str] = (),
                 input_bytes: Optional[int] = None, progress_dir: Optional[str] = None):
        super().__init__()
        self.cfg = cfg
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

    def expand(self, docs):
        if not self.cfg.enabled:  # switched off: every document passes untouched
            decided = docs | "NotEnabled" >> beam.Map(lambda doc: (doc, None))
        else:
            decided = docs | "Decide" >> NearDedupDecide(self.cfg, self.index_out_dir, self.against_dirs,
                                                         self.path())
        return decided | "Tail" >> Route(STEP_NAME, self.progress_dir)

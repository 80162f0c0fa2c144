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

from transforms.beam_step import Route, StepFn, timed
from transforms.near_dedup.core import (STEP_NAME, NearDedupConfig, SketchBuilder, bucket_keys, decide,
                                        dedup_in_memory, resolve_component, star_edges, verify_edge)
from transforms.near_dedup.index import ReadIndex, WriteIndex, check_index_params, index_bytes, sketch_row

SKETCHES, DOCS = "sketches", "docs"


# ---------------------------------------------------------------- sketches and band keys

class _SketchFn(StepFn):
    """doc → (id, doc) on the main output, (id, Sketch) on ``sketches``."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__(STEP_NAME)
        self._cfg = cfg
        self._no_tokens = Metrics.counter(STEP_NAME, "docs_without_tokens")

    def setup(self):
        self._builder = SketchBuilder(self._cfg)

    def process(self, doc):
        started = time.perf_counter()
        sketch = self._builder.sketch(doc)
        self.busy(time.perf_counter() - started)
        if sketch is None:
            self._no_tokens.inc()
        else:
            yield beam.pvalue.TaggedOutput(SKETCHES, (sketch.id, sketch))
        yield (int(doc["id"]), doc)


class Sketch(beam.PTransform):
    """Documents → ``.docs`` ``(id, doc)`` and ``.sketches`` ``(id, Sketch)`` (none for a tokenless document)."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        return docs | "Sketch" >> beam.ParDo(_SketchFn(self.cfg)).with_outputs(SKETCHES, main=DOCS)


def _new_bands(element, cfg: NearDedupConfig):
    doc_id, sketch = element
    for key in bucket_keys(sketch, cfg):
        yield key, (sketch.rank, doc_id, False)


def _join_old(element, cfg: NearDedupConfig):
    """Per id: the new sketch, or, when the id is not in the new input, the old sketch and its band keys."""
    doc_id, groups = element
    new, old, old_bands = list(groups["new"]), list(groups["old"]), list(groups["old_bands"])
    if new:
        yield beam.pvalue.TaggedOutput("sketches", (doc_id, new[0]))
        for key in bucket_keys(new[0], cfg):
            yield beam.pvalue.TaggedOutput("bands", (key, (new[0].rank, doc_id, False)))
    elif old:
        yield beam.pvalue.TaggedOutput("sketches", (doc_id, old[0]))
        for key in old_bands:
            yield beam.pvalue.TaggedOutput("bands", (key, (old[0].rank, doc_id, True)))


class SketchesAndBands(beam.PTransform):
    """New sketches (and earlier runs' indexes) → ``(sketches, bands)``: ``(id, Sketch)`` and
    ``(band key, (rank, id, old))``. A document in the new input and in an old index is the new one."""

    def __init__(self, cfg: NearDedupConfig, against_dirs: Sequence[str]):
        super().__init__()
        self.cfg, self.against_dirs = cfg, list(against_dirs)

    def expand(self, new_sketches):
        cfg = self.cfg
        if not self.against_dirs:  # nothing to join: spare a shuffle of every sketch
            return new_sketches, new_sketches | "BandKeys" >> timed(STEP_NAME, _new_bands, cfg)
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
    """Band keys → distinct candidate edges ``(first member, other member)``: a linear star per bucket."""

    def expand(self, bands):
        return (
            bands
            | "GroupBuckets" >> beam.GroupByKey()
            | "StarEdges" >> timed(STEP_NAME, _bucket_edges)
            | "DistinctEdges" >> beam.Distinct()
        )


def _probe_from_center(element):
    """Edges grouped by their first end: send that end's sketch to every second end."""
    center, groups = element
    sketches = list(groups["sketch"])
    if not sketches:
        return
    for other in groups["edges"]:
        yield other, sketches[0]


def _verify_probes(element, cfg: NearDedupConfig, counter):
    doc_id, groups = element
    sketches = list(groups["sketch"])
    if not sketches:
        return
    for center in groups["probes"]:
        if verify_edge(center, sketches[0], cfg):
            yield center.id, doc_id
        else:
            counter.inc()


class VerifiedEdges(beam.PTransform):
    """``{"sketches", "edges"}`` → the candidate edges whose two documents are similar enough (two joins: the
    first end's sketch travels to the second end)."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, inputs):
        sketches, edges = inputs["sketches"], inputs["edges"]
        rejected = Metrics.counter(STEP_NAME, "candidate_edges_rejected")
        probes = (
            {"sketch": sketches, "edges": edges}
            | "JoinCenters" >> beam.CoGroupByKey()
            | "ProbeFromCenter" >> timed(STEP_NAME, _probe_from_center)
        )
        return (
            {"sketch": sketches, "probes": probes}
            | "JoinMembers" >> beam.CoGroupByKey()
            | "VerifyEdges" >> timed(STEP_NAME, _verify_probes, self.cfg, rejected)
        )


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


def _component_label(element, not_converged):
    """After the rounds every component should be a star around its smallest id: a node with a smaller
    neighbour has no other neighbour. Count violations (the component is then split, which removes less but
    never chains, since resolution verifies every removal)."""
    node, neighbours = element
    neighbours = set(neighbours)
    lower = {v for v in neighbours if v < node}
    if lower and len(neighbours) > 1:
        not_converged.inc()
    yield node, min(lower | {node})


class ConnectedComponents(beam.PTransform):
    """Verified edges → ``(id, component label)``, the label being the component's smallest id, by
    ``rounds`` of large-star/small-star (no single machine holds the graph)."""

    def __init__(self, rounds: int):
        super().__init__()
        self.rounds = rounds

    def expand(self, edges):
        not_converged = Metrics.counter(STEP_NAME, "cc_nodes_not_converged")
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
        return (
            graph
            | "LabelSym" >> timed(STEP_NAME, _both_directions)
            | "LabelGroup" >> beam.GroupByKey()
            | "ComponentLabel" >> timed(STEP_NAME, _component_label, not_converged)
        )


def _label_sketch(element):
    _, groups = element
    labels, sketches = list(groups["label"]), list(groups["sketch"])
    if labels and sketches:
        yield labels[0], sketches[0]


def _resolve(element, cfg: NearDedupConfig):
    _, members = element
    for decision in resolve_component(list(members), cfg):
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
            | "ByComponent" >> timed(STEP_NAME, _label_sketch)
            | "GroupComponents" >> beam.GroupByKey()
            | "ResolveComponents" >> timed(STEP_NAME, _resolve, self.cfg)
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
        labels = verified | "ConnectedComponents" >> ConnectedComponents(self.cfg.cc_max_rounds)
        return {"sketches": sketches, "labels": labels} | "VerifiedStars" >> VerifiedStars(self.cfg)


# ---------------------------------------------------------------- the in-memory path

def _resolve_all(element, cfg: NearDedupConfig):
    _, sketches = element
    for decision in dedup_in_memory(sketches, cfg):
        yield decision.id, decision


class DedupInMemory(beam.PTransform):
    """``(id, Sketch)`` → ``(id, Decision)``: every sketch on one worker, ``dedup_in_memory``."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, sketches):
        return (
            sketches
            | "OneGroup" >> beam.Map(lambda kv: (0, kv[1]))
            | "GatherAll" >> beam.GroupByKey()
            | "DedupInMemory" >> timed(STEP_NAME, _resolve_all, self.cfg)
        )


# ---------------------------------------------------------------- decisions → (doc, reason)

class _DecideFn(StepFn):
    """Per id: record the decision on the document and emit ``(doc, reason)``; a kept document's index rows go
    to ``index_sketches`` / ``index_bands``."""

    def __init__(self, cfg: NearDedupConfig):
        super().__init__(STEP_NAME)
        self._cfg = cfg

    def process(self, element):
        _, groups = element
        docs = list(groups["doc"])
        if not docs:  # an old run's document: nothing to emit
            return []
        started = time.perf_counter()
        out = list(self._decide(docs, groups))
        self.busy(time.perf_counter() - started)
        return out

    def _decide(self, docs, groups):
        if len(docs) > 1:
            raise ValueError(f"near_dedup: document id {docs[0]['id']} occurs {len(docs)} times; ids must be unique")
        decisions, sketches = list(groups["decision"]), list(groups.get("sketch", ()))
        doc = docs[0]
        reason = decide(doc, decisions[0] if decisions else None)
        yield doc, reason
        if reason is None and sketches and not sketches[0].old:
            sketch = sketches[0]
            yield beam.pvalue.TaggedOutput("index_sketches", sketch_row(sketch))
            for key in bucket_keys(sketch, self._cfg):
                yield beam.pvalue.TaggedOutput("index_bands", {"key": key, "id": sketch.id})


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
        sketched = docs | "Sketch" >> Sketch(cfg)
        sketches, bands = sketched[SKETCHES] | "SketchesAndBands" >> SketchesAndBands(cfg, self.against_dirs)
        if self.path == "memory":
            decisions = sketches | "DedupInMemory" >> DedupInMemory(cfg)
        elif self.path == "beam":
            decisions = {"sketches": sketches, "bands": bands} | "Distributed" >> DistributedDecisions(cfg)
        else:  # auto: choose at run time from the number of sketches; the other path then sees empty inputs
            count = beam.pvalue.AsSingleton(sketches | "CountSketches" >> beam.combiners.Count.Globally())
            limit = cfg.memory_max_docs
            route = lambda _, parts, n, limit=limit: 0 if n <= limit else 1  # noqa: E731
            routed_sketches = sketches | "RouteSketches" >> beam.Partition(route, 2, count)
            routed_bands = bands | "RouteBands" >> beam.Partition(route, 2, count)
            decisions = (
                (routed_sketches[0] | "DedupInMemory" >> DedupInMemory(cfg),
                 {"sketches": routed_sketches[1], "bands": routed_bands[1]}
                 | "Distributed" >> DistributedDecisions(cfg))
                | "AllDecisions" >> beam.Flatten()
            )
        # The sketches join the decisions only when the kept documents' index is wanted.
        to_join = {"doc": sketched[DOCS], "decision": decisions}
        if self.index_out_dir:
            to_join["sketch"] = sketches
        decided = to_join | "Decisions" >> Decisions(cfg)
        if self.index_out_dir:
            ({"sketches": decided.index_sketches, "bands": decided.index_bands}
             | "WriteIndex" >> WriteIndex(self.index_out_dir, cfg))
        return decided.decided


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
        total = self.input_bytes + index_bytes(self.against_dirs)
        return "memory" if total <= self.cfg.memory_max_input_bytes else "beam"

    def expand(self, docs):
        if not self.cfg.enabled:  # switched off: every document passes untouched
            decided = docs | "NotEnabled" >> beam.Map(lambda doc: (doc, None))
        else:
            decided = docs | "Decide" >> NearDedupDecide(self.cfg, self.index_out_dir, self.against_dirs,
                                                         self.path())
        return decided | "Tail" >> Route(STEP_NAME, self.progress_dir)

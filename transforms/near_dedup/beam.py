"""The Beam wrapper of near-duplicate removal: ``NearDedup(cfg, index_out_dir, against_dirs)``.

The decisions themselves are the pure core's (``transforms.near_dedup.core``); this module only moves sketches,
band keys and components between workers (see ``NearDedup``'s docstring).
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.near_dedup.core import (BAND_FILES, PARAMS_FILE, SKETCH_FILES, STEP_NAME, NearDedupConfig,
                                        SketchBuilder, annotate, bucket_keys, check_index_params, dedup_in_memory,
                                        resolve_component, sketch_from_row, sketch_row, star_edges, verify_edge)
from transforms.near_dedup.minhash import Sketch
KEPT, REMOVED = "kept", "removed"


class _SketchFn(beam.DoFn):
    """doc → (id, doc) on the main output, (id, Sketch) on ``sketches``."""

    def __init__(self, cfg: NearDedupConfig):
        self._cfg = cfg
        self._no_tokens = Metrics.counter(STEP_NAME, "docs_without_tokens")

    def setup(self):
        self._builder = SketchBuilder(self._cfg)

    def process(self, doc):
        sketch = self._builder.sketch(doc)
        if sketch is None:
            self._no_tokens.inc()
        else:
            yield beam.pvalue.TaggedOutput("sketches", (sketch.id, sketch))
        yield (int(doc["id"]), doc)


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


def _bucket_edges(element):
    _, members = element
    # Ids only (a few bytes each): a hot bucket costs memory linear in its size and edges linear in its size.
    yield from star_edges(members)


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


def _label_sketch(element):
    _, groups = element
    labels, sketches = list(groups["label"]), list(groups["sketch"])
    if labels and sketches:
        yield labels[0], sketches[0]


def _resolve(element, cfg: NearDedupConfig):
    _, members = element
    for decision in resolve_component(list(members), cfg):
        yield decision.id, decision


def _resolve_all(element, cfg: NearDedupConfig):
    _, sketches = element
    for decision in dedup_in_memory(sketches, cfg):
        yield decision.id, decision


class _Finish(beam.DoFn):
    """Per id: annotate the document, route it to kept/removed, and emit the kept document's index rows."""

    def __init__(self, cfg: NearDedupConfig):
        self._cfg = cfg
        self._kept = Metrics.counter(STEP_NAME, "kept")
        self._removed = Metrics.counter(STEP_NAME, "removed")

    def process(self, element):
        _, groups = element
        docs = list(groups["doc"])
        if not docs:  # an old run's document: nothing to emit
            return iter(())
        return self._finish(docs, groups)

    def _finish(self, docs, groups):
        if len(docs) > 1:
            raise ValueError(f"near_dedup: document id {docs[0]['id']} occurs {len(docs)} times; ids must be unique")
        decisions, sketches = list(groups["decision"]), list(groups.get("sketch", ()))
        doc = annotate(docs[0], decisions[0] if decisions else None)
        if doc.get("removed_by") == STEP_NAME:
            self._removed.inc()
            yield beam.pvalue.TaggedOutput(REMOVED, doc)
            return
        self._kept.inc()
        yield doc
        if sketches and not sketches[0].old:
            sketch = sketches[0]
            yield beam.pvalue.TaggedOutput("index_sketches", sketch_row(sketch))
            for key in bucket_keys(sketch, self._cfg):
                yield beam.pvalue.TaggedOutput("index_bands", {"key": key, "id": sketch.id})


class NearDedup(beam.PTransform):
    """Near-duplicate removal over a PCollection of documents (Contract 1 dicts with int ids).

    ``expand`` returns ``{"kept", "removed"}``; removed documents carry ``removed_by="near_dedup"``,
    ``reason="near_duplicate"`` and ``annotations.dup_cluster`` (the kept document's id) and
    ``dup_similarity``. When ``index_out_dir`` is given, the sketches and band keys of the kept documents are
    written there as Parquet (``sketches-*.parquet``: id, signature, shingles; ``bands-*.parquet``: key, id;
    ``index_params.json``). ``against_dirs`` are earlier runs' index folders: their documents always win and
    only new documents are removed; their text is never read.

    ``cfg.mode`` chooses the path; ``auto`` decides from ``input_bytes`` (the caller's input size, when given)
    when the graph is built, otherwise at run time from the number of sketches (new + old):
    ``memory`` gathers all sketches on one worker and runs ``dedup_in_memory``; ``beam`` groups band keys with
    the runner's shuffle, verifies star edges by joins, finds components by large-star/small-star rounds and
    resolves each component on its own (memory per worker bounded by a bucket's ids or a component's
    sketches). Both give the same decisions; both are deterministic on any number of workers.
    """

    def __init__(self, cfg: NearDedupConfig, index_out_dir: Optional[str] = None, against_dirs: Sequence[str] = (),
                 input_bytes: Optional[int] = None):
        super().__init__()
        self.cfg = cfg
        self.index_out_dir = index_out_dir
        self.against_dirs = list(against_dirs)
        self.input_bytes = input_bytes
        for directory in self.against_dirs:
            check_index_params(directory, cfg)

    def path(self) -> str:
        """memory | beam | auto (decided at run time from the number of sketches)."""
        if self.cfg.mode != "auto" or self.input_bytes is None:
            return self.cfg.mode
        from apache_beam.io.filesystems import FileSystems

        index_bytes = sum(meta.size_in_bytes for directory in self.against_dirs for result in FileSystems.match(
            [FileSystems.join(directory, f"{SKETCH_FILES}-*.parquet")]) for meta in result.metadata_list)
        return "memory" if self.input_bytes + index_bytes <= self.cfg.memory_max_input_bytes else "beam"

    def expand(self, docs):
        cfg = self.cfg
        if not cfg.enabled:
            empty = docs.pipeline | "NoRemovals" >> beam.Create([])
            return {KEPT: docs, REMOVED: empty}
        sketched = docs | "Sketch" >> beam.ParDo(_SketchFn(cfg)).with_outputs("sketches", main="docs")
        docs_by_id, new_sketches = sketched.docs, sketched.sketches

        if self.against_dirs:
            old_sketches, old_bands = self._read_against(docs.pipeline)
            joined = (
                {"new": new_sketches, "old": old_sketches, "old_bands": old_bands}
                | "JoinOldIndex" >> beam.CoGroupByKey()
                | "SketchesAndBands" >> beam.FlatMap(_join_old, cfg).with_outputs("sketches", "bands")
            )
            sketches, bands = joined.sketches, joined.bands
        else:  # nothing to join: spare a shuffle of every sketch
            sketches = new_sketches
            bands = new_sketches | "BandKeys" >> beam.FlatMap(
                lambda kv, cfg=cfg: ((key, (kv[1].rank, kv[0], False)) for key in bucket_keys(kv[1], cfg)))

        path = self.path()
        if path == "memory":
            decisions = self._in_memory(sketches)
        elif path == "beam":
            decisions = self._distributed(sketches, bands)
        else:  # auto: choose at run time from the number of sketches; the other path then sees empty inputs
            count = beam.pvalue.AsSingleton(sketches | "CountSketches" >> beam.combiners.Count.Globally())
            limit = cfg.memory_max_docs
            route = lambda _, parts, n, limit=limit: 0 if n <= limit else 1  # noqa: E731
            routed_sketches = sketches | "RouteSketches" >> beam.Partition(route, 2, count)
            routed_bands = bands | "RouteBands" >> beam.Partition(route, 2, count)
            decisions = (
                (self._in_memory(routed_sketches[0]), self._distributed(routed_sketches[1], routed_bands[1]))
                | "AllDecisions" >> beam.Flatten()
            )

        # The sketches join the decisions only when the kept documents' index is wanted.
        to_join = {"doc": docs_by_id, "decision": decisions}
        if self.index_out_dir:
            to_join["sketch"] = sketches
        finished = (
            to_join
            | "JoinDecisions" >> beam.CoGroupByKey()
            | "Finish" >> beam.ParDo(_Finish(cfg)).with_outputs(REMOVED, "index_sketches", "index_bands", main=KEPT)
        )
        if self.index_out_dir:
            self._write_index(docs.pipeline, finished.index_sketches, finished.index_bands)
        return {KEPT: finished[KEPT], REMOVED: finished[REMOVED]}

    def _in_memory(self, sketches):
        return (
            sketches
            | "OneGroup" >> beam.Map(lambda kv: (0, kv[1]))
            | "GatherAll" >> beam.GroupByKey()
            | "DedupInMemory" >> beam.FlatMap(_resolve_all, self.cfg)
        )

    def _distributed(self, sketches, bands):
        cfg = self.cfg
        rejected = Metrics.counter(STEP_NAME, "candidate_edges_rejected")
        not_converged = Metrics.counter(STEP_NAME, "cc_nodes_not_converged")
        edges = (
            bands
            | "GroupBuckets" >> beam.GroupByKey()
            | "StarEdges" >> beam.FlatMap(_bucket_edges)
            | "DistinctEdges" >> beam.Distinct()
        )
        probes = (
            {"sketch": sketches, "edges": edges}
            | "JoinCenters" >> beam.CoGroupByKey()
            | "ProbeFromCenter" >> beam.FlatMap(_probe_from_center)
        )
        verified = (
            {"sketch": sketches, "probes": probes}
            | "JoinMembers" >> beam.CoGroupByKey()
            | "VerifyEdges" >> beam.FlatMap(_verify_probes, cfg, rejected)
        )
        graph = verified
        for round_index in range(cfg.cc_max_rounds):
            graph = (
                graph
                | f"LargeStarSym{round_index}" >> beam.FlatMap(_both_directions)
                | f"LargeStarGroup{round_index}" >> beam.GroupByKey()
                | f"LargeStar{round_index}" >> beam.FlatMap(_large_star)
                | f"SmallStarGroup{round_index}" >> beam.GroupByKey()
                | f"SmallStar{round_index}" >> beam.FlatMap(_small_star)
            )  # repeated edges are harmless: every grouping step turns neighbours into a set
        labels = (
            graph
            | "LabelSym" >> beam.FlatMap(_both_directions)
            | "LabelGroup" >> beam.GroupByKey()
            | "ComponentLabel" >> beam.FlatMap(_component_label, not_converged)
        )
        return (
            {"label": labels, "sketch": sketches}
            | "JoinLabels" >> beam.CoGroupByKey()
            | "ByComponent" >> beam.FlatMap(_label_sketch)
            | "GroupComponents" >> beam.GroupByKey()
            | "ResolveComponents" >> beam.FlatMap(_resolve, cfg)
        )

    def _read_against(self, pipeline):
        cfg = self.cfg
        if not self.against_dirs:
            return (pipeline | "NoOldSketches" >> beam.Create([]),
                    pipeline | "NoOldBands" >> beam.Create([]))
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.io.parquetio import ReadFromParquet

        sketch_reads, band_reads = [], []
        for i, directory in enumerate(self.against_dirs):
            sketch_reads.append(pipeline | f"ReadOldSketches{i}" >> ReadFromParquet(
                FileSystems.join(directory, f"{SKETCH_FILES}-*.parquet")))
            band_reads.append(pipeline | f"ReadOldBands{i}" >> ReadFromParquet(
                FileSystems.join(directory, f"{BAND_FILES}-*.parquet")))
        # An id kept by two earlier runs is one document: keep one sketch (the same id means the same text).
        old_sketches = (
            sketch_reads | "FlattenOldSketches" >> beam.Flatten()
            | "OldSketch" >> beam.Map(lambda row: (int(row["id"]), sketch_from_row(row, cfg)))
            | "GroupOldById" >> beam.GroupByKey()
            | "OneOldSketch" >> beam.Map(lambda kv: (kv[0], min(kv[1], key=lambda s: s.shingles.tobytes()))))
        old_bands = (
            band_reads | "FlattenOldBands" >> beam.Flatten()
            | "OldBand" >> beam.Map(lambda row: (int(row["id"]), bytes(row["key"])))
            | "DistinctOldBands" >> beam.Distinct())
        return old_sketches, old_bands

    def _write_index(self, pipeline, sketch_rows, band_rows):
        import pyarrow as pa
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.io.parquetio import WriteToParquet

        out = self.index_out_dir
        sketch_rows | "WriteIndexSketches" >> WriteToParquet(
            FileSystems.join(out, SKETCH_FILES), file_name_suffix=".parquet",
            schema=pa.schema([("id", pa.int64()), ("signature", pa.binary()), ("shingles", pa.binary())]))
        band_rows | "WriteIndexBands" >> WriteToParquet(
            FileSystems.join(out, BAND_FILES), file_name_suffix=".parquet",
            schema=pa.schema([("key", pa.binary()), ("id", pa.int64())]))
        (pipeline
         | "IndexParams" >> beam.Create([json.dumps(self.cfg.index_params(), sort_keys=True)])
         | "WriteIndexParams" >> beam.io.WriteToText(FileSystems.join(out, PARAMS_FILE), shard_name_template=""))

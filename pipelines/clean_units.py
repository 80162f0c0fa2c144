"""The clean in units and phases: memory bounded by a unit, not by the corpus, and a killed clean resumes.

The inputs are cut into *units* (consecutive input files up to ``runner.unit_bytes``; a larger JSONL file cut at
line boundaries into parts of that size: ``plan_units``). The clean runs in phases,
each a Beam pipeline (on whichever runner is configured), none of which shuffles the whole corpus:

    A  per unit: read, the steps before dedup (url_filter … filters); the survivors, their exact-dedup hashes
       and their near-dedup sketches, the removed and quarantined rows, written to ``work/clean/A/<unit>/``
    B  global: exact dedup over the hashes (sorted arrays in this process: 24 bytes a document), then
       near-dedup's decisions from the sketches (``DecisionsFromSketches``), to ``work/clean/B/``
    C  per unit: the decisions applied (the same ``Route`` tails, counters and annotations as the one-graph
       clean), then the steps after dedup (quality, pii); kept and removed rows, the near-dedup index rows
    D  the runs of every unit merged into docs/, removed/, quarantine/, dedup/ (``beamio.sorted_merge``):
       the files the one-graph clean writes, byte for byte

A unit's outputs are written first and its *marker* (``<unit>.done``: its counters and sizes) last, atomically;
the marker names the clean's settings digest and the unit's input checksums (and, in C, phase B's), so a
changed config or input never reuses stale work. A clean run again after being killed at any moment redoes
only the units without a valid marker; counters are summed from the markers, so the accounting stays exact.
"""
from __future__ import annotations

import functools
import json
import math
import os
import pickle
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from beamio.beam_options import make_pipeline
from beamio.read import InputFile, split_compressed_jsonl, split_jsonl, splittable
from beamio.read_beam import ReadCorpus
from beamio.sorted_merge import merge_runs, read_run, write_run
from beamio.write import DOCS_SCHEMA, REMOVED_SCHEMA, doc_row, jsonl_writer, parquet_writer, removed_row
from pipelines.config import RunConfig
from pipelines.progress import ProgressPrinter
from pipelines.steps import STEPS, StepContext, takedown_ledgers
from runio.layout import RunPaths
from runio.files import read_json, sha256_bytes, write_atomic, write_json
from runio.heap import release_free_heap
from transforms.base import annotate
from transforms.beam_step import Route, StepFn, any_output_type
from transforms.exact_dedup import REASON as EXACT_REASON, STEP as EXACT, text_key
from transforms.near_dedup.beam import DecisionsFromSketches
from transforms.near_dedup.blocks import SketchRows
from transforms.near_dedup.core import SKETCH_BATCH, STEP_NAME as NEAR, Decision, SketchBuilder, bucket_key_matrix, \
    decide
from transforms.near_dedup.index import (BAND_FILES, BAND_ROW_HELD_BYTES, INDEX_FILE_BYTES, PARAMS_FILE,
                                         SKETCH_FILES, SKETCH_ROW_HELD_BYTES, index_params_text, index_schemas,
                                         sketch_row)

DEDUP_STEPS = (EXACT, NEAR)
SIZES = "unit_sizes"  # counter namespace of the sizes the writers measure (for the merge's part counts): not stats
# the sort keys of the run directory's outputs (as WriteSorted's)
BY_ID = lambda r: r["id"]  # noqa: E731
BY_POSITION = lambda r: (r["source"], r["position"])  # noqa: E731
BY_ID_KEY = lambda r: (r["id"], r["key"])  # noqa: E731
CLEAN_SECTIONS = ("input", "output", "url_filter", "extract", "normalize", "langid", "filters", "exact_dedup",
                  "near_dedup", "quality", "pii")


def phased_clean_applies(cfg: RunConfig) -> bool:
    """Whether the clean runs in units (``clean_in_units``): every step but quality's ``top_fraction`` (a
    corpus-wide cut-off over scores made after dedup: one more global phase, not built yet) works per unit."""
    return not (cfg.quality.enabled and cfg.quality.mode == "top_fraction")


@dataclass(frozen=True)
class Unit:
    """Consecutive input files, about ``runner.unit_bytes`` together: what the clean commits at a time."""

    index: int
    files: tuple[InputFile, ...]

    @property
    def name(self) -> str:
        return f"unit-{self.index:05d}"

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def inputs(self) -> list[str]:
        """What the unit's markers are valid for: each file's content key (a part's with its byte range)."""
        return [f.part_key for f in self.files]


def plan_units(files: list[InputFile], unit_bytes: int, input_format: str = "auto",
               log: Callable[[str], None] | None = None, parts_dir: str | None = None) -> list[Unit]:
    """The units of ``files``: consecutive files of about ``unit_bytes`` together. A JSONL file larger than that
    (decompressed) is cut at line boundaries into parts of at most ``unit_bytes``, each packed as a file of its
    own: a plain one as byte ranges of itself (``beamio.read.split_jsonl``), a compressed one decompressed once
    into part files under ``parts_dir`` (``split_compressed_jsonl``; without ``parts_dir`` they are only
    counted). A larger file of another format is one unit, said through ``log``. Ids and positions do not depend
    on the cut, so neither do the outputs."""
    pieces: list[InputFile] = []
    for f in files:
        how = splittable(f, input_format)
        if how == "range" and f.bytes > unit_bytes:
            pieces.extend(_ranged_parts(f, unit_bytes))
        elif how == "copy":  # its size decompressed is known only by decompressing it: counted first (once a
            # process), so that a file that fits a unit is never written out decompressed
            counted = _counted_parts(f, unit_bytes)
            pieces.extend(split_compressed_jsonl(f, unit_bytes, parts_dir) if len(counted) > 1 and parts_dir
                          else counted)
        else:
            pieces.append(f)
            if f.bytes > unit_bytes and log is not None:
                log(f"input {f.name} ({f.bytes / 1e6:.1f} MB) is one unit, larger than runner.unit_bytes="
                    f"{unit_bytes}: only JSONL files are cut into units")
    units, current, size = [], [], 0
    for f in pieces:
        if current and size + f.bytes > unit_bytes:
            units.append(Unit(len(units), tuple(current)))
            current, size = [], 0
        current.append(f)
        size += f.bytes
    if current:
        units.append(Unit(len(units), tuple(current)))
    return units


@functools.lru_cache(maxsize=4096)
def _ranged_parts(source: InputFile, unit_bytes: int) -> list[InputFile]:
    """A plain JSONL file's byte ranges (``split_jsonl``: one read of the file), found once a process."""
    return split_jsonl(source, unit_bytes)


@functools.lru_cache(maxsize=4096)
def _counted_parts(source: InputFile, unit_bytes: int) -> list[InputFile]:
    """A compressed JSONL file's parts, counted without writing them (``split_compressed_jsonl`` without a
    folder): the choice between the one-graph clean and the phases, then the phases' plan, decompress it once."""
    return split_compressed_jsonl(source, unit_bytes, None)


def _digest(value) -> str:
    return sha256_bytes(json.dumps(value, sort_keys=True, default=str).encode("utf-8"))[:16]


def settings_digest(cfg: RunConfig, against: tuple[str, ...] = (), ctx: StepContext | None = None) -> str:
    """What a unit's outputs depend on besides its inputs: the cleaning sections of the config, the earlier
    runs it is cleaned against, the URL filter's list files' content and the takedown ledgers' content (a
    ``forget`` between a killed clean and its rerun changes what the units keep)."""
    dump = cfg.model_dump(mode="json")
    lists = {}
    for key in ("block_list", "allow_list"):
        path = getattr(cfg.url_filter, key, None)
        if path and os.path.exists(path):
            lists[key] = sha256_bytes(Path(path).read_bytes())
    ledgers = [sha256_bytes(p.read_bytes()) for p in takedown_ledgers(cfg, ctx or StepContext(RunPaths.of(cfg)))
               if p.is_file()]
    return _digest({"config": {s: dump.get(s) for s in CLEAN_SECTIONS}, "lists": lists, "ledgers": ledgers,
                    "against": sorted(os.path.abspath(str(a)) for a in against)})


# ---------------------------------------------------------------- markers


class Markers:
    """``work/clean/<phase>/<unit>.done``: written after the unit's outputs, atomically; valid only for the same
    settings digest and input checksums (and ``upstream``: phase B's digest, for phase C)."""

    def __init__(self, root: Path, phase: str, digest: str):
        self.dir = root / phase
        self.digest = digest

    def path(self, unit: Unit | str) -> Path:
        return self.dir / f"{unit if isinstance(unit, str) else unit.name}.done"

    def outputs(self, unit: Unit | str) -> Path:
        return self.dir / (unit if isinstance(unit, str) else unit.name)

    def valid(self, unit: Unit | str, inputs: list[str]) -> dict | None:
        marker = read_json(self.path(unit))
        if not isinstance(marker, dict) or marker.get("digest") != self.digest or marker.get("inputs") != inputs:
            return None
        return marker

    def start(self, unit: Unit | str) -> Path:
        """Clear what an unfinished attempt left of this unit; its outputs' folder, empty."""
        self.path(unit).unlink(missing_ok=True)
        out = self.outputs(unit)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        return out

    def commit(self, unit: Unit | str, inputs: list[str], counters: dict, extra: dict | None = None) -> dict:
        marker = {"digest": self.digest, "inputs": inputs,
                  "counters": [[ns, name, v] for (ns, name), v in sorted(counters.items())], **(extra or {})}
        write_json(self.path(unit), marker)
        return marker


def marker_counters(marker: dict) -> dict[tuple[str, str], int]:
    return {(ns, name): int(v) for ns, name, v in marker["counters"]}


def _add(total: dict, more: dict) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


# ---------------------------------------------------------------- Beam pieces


def counters_of(result) -> dict[tuple[str, str], int]:
    """A finished pipeline's counters by (namespace, name): committed values where the runner has them."""
    counters: dict[tuple[str, str], int] = {}
    for c in result.metrics().query(MetricsFilter())["counters"]:
        key = (c.key.metric.namespace, c.key.metric.name)
        value = c.committed if c.committed is not None else c.attempted
        counters[key] = counters.get(key, 0) + int(value or 0)
    return counters


def _gather(pcoll, label: str):
    """Every element of a unit's PCollection at one worker (a unit is bounded, so is what it gathers)."""
    return pcoll | f"{label}Key" >> beam.Map(lambda row: (0, row)) | f"{label}Group" >> beam.GroupByKey()


def _write_rows(element, path: str, sort_key, size_of, rows_name: str, bytes_name: str):
    rows = sorted(element[1], key=sort_key)
    write_run(path, rows)
    Metrics.counter(SIZES, rows_name).inc(len(rows))
    Metrics.counter(SIZES, bytes_name).inc(sum(size_of(r) for r in rows))
    return [len(rows)]


def _docs_size(row: dict) -> int:  # as WriteSorted's size_of in pipelines.prepare.build_cleaning_graph
    return len(row["text"]) + len(row["annotations"]) + 64


def _removed_size(row: dict) -> int:
    return len(row["annotations"]) + 96


def _quarantine_size(row: dict) -> int:
    return 256


class _SurvivorBatchFn(StepFn):
    """Survivors of the steps before dedup → batches ``(docs, text keys, SketchRows)``: each document's exact-dedup
    key (with exact dedup) and near-dedup sketch (with near dedup), made where the documents are."""

    def __init__(self, cfg: RunConfig, exact: bool, near: bool):
        super().__init__(NEAR)
        self._exact_cfg, self._near_cfg, self._exact, self._near = cfg.exact_dedup, cfg.near_dedup, exact, near
        self._exact_ms = Metrics.counter(EXACT, "busy_ms")

    infer_output_type = any_output_type

    def setup(self):
        self._builder = SketchBuilder(self._near_cfg) if self._near else None

    def start_bundle(self):
        self._batch = []
        self._exact_s = 0.0

    def process(self, doc):
        self._batch.append(doc)
        if len(self._batch) >= SKETCH_BATCH:
            yield from self._flush()

    def finish_bundle(self):
        yield from self._flush()
        if int(self._exact_s * 1000):
            self._exact_ms.inc(int(self._exact_s * 1000))
        self._flush_busy()

    def _flush(self):
        batch, self._batch = self._batch, []
        if not batch:
            return
        keys = None
        if self._exact:
            started = time.perf_counter()
            keys = [text_key(doc["text"], self._exact_cfg.casefold) for doc in batch]
            self._exact_s += time.perf_counter() - started
        rows = None
        if self._near:
            started, cpu_started = time.perf_counter(), time.thread_time()
            present = [s for s in self._builder.sketch_batch(batch) if s is not None]
            rows = SketchRows.of(present) if present else None
            self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        yield beam.transforms.window.GlobalWindows.windowed_value((batch, keys, rows))


def _write_survivors(element, out: str):
    docs, keys, sketches = [], [], []
    for batch_docs, batch_keys, rows in element[1]:
        docs.extend(batch_docs)
        if batch_keys is not None:
            keys.extend(batch_keys)
        if rows is not None:
            sketches.append(rows)
    ids = np.fromiter((int(d["id"]) for d in docs), dtype=np.int64, count=len(docs))
    order = np.argsort(ids, kind="stable")
    write_run(os.path.join(out, "survivors.run"), (docs[i] for i in order.tolist()))
    sketched = SketchRows.concat(sketches)
    # near-dedup counts the documents it could not sketch among those exact dedup kept: phase B does
    unsketched = np.setdiff1d(ids, sketched.ids if sketched is not None else np.zeros(0, dtype=np.int64))
    hashes = {"ids": ids[order], "keys": np.array(keys, dtype="S32")[order] if keys else None,
              "unsketched": unsketched}
    write_atomic(os.path.join(out, "hashes.pkl"), pickle.dumps(hashes, protocol=pickle.HIGHEST_PROTOCOL))
    write_atomic(os.path.join(out, "sketches.pkl"),
                 pickle.dumps(sketched, protocol=pickle.HIGHEST_PROTOCOL))
    Metrics.counter(SIZES, "survivors").inc(len(docs))
    return [len(docs)]


class _ApplyDecisionsFn(StepFn):
    """A survivor → ``(doc, reason)`` for ``step``: exact dedup's (``dup_of``) or near-dedup's (``Decision``)
    decisions of this unit's documents, made in phase B."""

    def __init__(self, step: str, decisions: dict):
        super().__init__(step)
        self._decisions = decisions
        self._applied = Metrics.counter(NEAR, "decisions_applied") if step == NEAR else None

    infer_output_type = any_output_type

    def process(self, doc):
        started, cpu_started = time.perf_counter(), time.thread_time()
        decision = self._decisions.get(int(doc["id"]))
        if self.step == EXACT:
            reason = None
            if decision is not None:
                annotate(doc, EXACT, dup_of=decision)
                reason = EXACT_REASON
        else:
            if decision is not None:
                self._applied.inc()
            reason = decide(doc, decision)
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        yield doc, reason


# ---------------------------------------------------------------- the phases


@dataclass
class PhasedClean:
    cfg: RunConfig
    ctx: StepContext
    units: list[Unit]
    digest: str
    log: Callable[[str], None]
    dask_address: str | None = None  # the scheduler of runner dask (a Slurm cluster's, when runner.slurm)

    def __post_init__(self):
        self.root = self.ctx.paths.clean_work
        enabled = [s for s in STEPS if s.is_enabled(self.cfg, self.ctx)]
        names = [s.name for s in enabled]
        dedup = [i for i, s in enumerate(enabled) if s.name in DEDUP_STEPS]
        first, last = (dedup[0], dedup[-1]) if dedup else (len(enabled), len(enabled) - 1)
        self.pre, self.post = enabled[:first], enabled[last + 1:]
        self.exact, self.near = EXACT in names, NEAR in names
        self.steps = names
        self.reused: dict[str, int] = {}
        # Spreading a unit's documents after reading lets every worker clean a share of them; with one worker it
        # would only hold the whole unit in the runner's shuffle buffer (None: a runner of unknown size), as in
        # the one-graph clean (pipelines.prepare.build_cleaning_graph)
        self._spread = self.ctx.workers is None or self.ctx.workers > 1

    def _pipeline(self, input_bytes: int):
        r = self.cfg.runner
        return make_pipeline(r.name, r.workers, r.options, self.dask_address, worker_memory=r.worker_memory,
                             input_bytes=input_bytes)

    def _run(self, pipeline) -> dict:
        result = pipeline.run()
        result.wait_until_finish()
        return counters_of(result)

    def run(self) -> dict[tuple[str, str], int]:
        """Every phase; returns the clean's counters (the sizes apart)."""
        counters: dict[tuple[str, str], int] = {}
        done_a = self._phase(self.units, "A", self.digest, self._unit_a)
        markers_a = [done_a[u.name] for u in self.units]
        for m in markers_a:
            _add(counters, marker_counters(m))
        global_marker = self._phase_b(markers_a)
        release_free_heap()
        _add(counters, marker_counters(global_marker))
        done_c = self._phase(self.units, "C", _digest([self.digest, global_marker["units_digest"]]), self._unit_c)
        markers_c = [done_c[u.name] for u in self.units]
        for m in markers_c:
            _add(counters, marker_counters(m))
        release_free_heap()
        self._merge(markers_a, markers_c, counters)
        return {k: v for k, v in counters.items() if k[0] != SIZES}

    def _phase(self, units: list[Unit], phase: str, digest: str, work) -> dict[str, dict]:
        markers = Markers(self.root, phase, digest)
        done: dict[str, dict] = {}
        todo = []
        for unit in units:
            marker = markers.valid(unit, unit.inputs)
            if marker is not None:
                done[unit.name] = marker
            else:
                todo.append(unit)
        self.reused[phase] = len(done)
        if done:
            reused_bytes = sum(u.bytes for u in units if u.name in done)
            self.log(f"clean phase {phase}: {len(done)} of {len(units)} units reused from an earlier attempt "
                     f"({reused_bytes / 1e6:.1f} MB of input); {len(todo)} to do")
        prefix = f"phase {phase} ({len(done)} of {len(units)} units reused): "
        for unit in todo:
            out = markers.start(unit)
            with ProgressPrinter(self.ctx.paths.progress, self.steps, lambda line: self.log(prefix + line)):
                counters = work(unit, out)
            done[unit.name] = markers.commit(unit, unit.inputs, counters)
            release_free_heap()  # the unit's pipeline is gone: the next starts from what is live (one worker's
            # runner holds a unit's shuffles in this process)
        return done

    # A: read and the steps before dedup

    def _unit_a(self, unit: Unit, out: Path) -> dict:
        cfg, ctx = self.cfg, self.ctx
        p = self._pipeline(unit.bytes)
        read = p | "Read" >> ReadCorpus(cfg.input, list(unit.files), progress_dir=ctx.progress_dir,
                                        spread_documents=self._spread)
        docs, removed = read["docs"], []
        for step in self.pre:
            step_out = docs | step.name >> step.build(cfg, ctx)
            docs = step_out["kept"]
            removed.append(step_out["removed"])
        (_gather(docs | "Batches" >> beam.ParDo(_SurvivorBatchFn(cfg, self.exact, self.near)), "Survivors")
         | "Survivors" >> beam.FlatMap(_write_survivors, str(out)))
        self._write_removed(p, removed, out)
        (_gather(read["quarantined"], "Quarantine")
         | "WriteQuarantine" >> beam.FlatMap(_write_rows, str(out / "quarantine.run"), BY_POSITION,
                                             _quarantine_size, "quarantine_rows", "quarantine_bytes"))
        return self._run(p)

    def _write_removed(self, p, removed: list, out: Path) -> None:
        if not removed:
            return
        rows = removed | "AllRemoved" >> beam.Flatten() | "RemovedRows" >> beam.Map(removed_row)
        (_gather(rows, "Removed")
         | "WriteRemoved" >> beam.FlatMap(_write_rows, str(out / "removed.run"), BY_ID, _removed_size,
                                          "removed_rows", "removed_bytes"))

    # B: the dedup decisions, over hashes and sketches

    def _phase_b(self, markers_a: list[dict]) -> dict:
        units_digest = _digest([self.digest, [m["inputs"] for m in markers_a]])
        markers = Markers(self.root, "B", units_digest)
        marker = markers.valid("global", [u.name for u in self.units])
        if marker is not None:
            self.reused["B"] = 1
            self.log("clean phase B: the dedup decisions are reused from an earlier attempt")
            return marker
        self.reused["B"] = 0
        out = markers.start("global")
        a_dir = self.root / "A"
        exact_removed: dict[int, int] = {}
        counters: dict[tuple[str, str], int] = {}
        drop = np.zeros(0, dtype=np.int64)
        ids, keys, unsketched = [], [], []
        for unit in self.units:
            with open(a_dir / unit.name / "hashes.pkl", "rb") as fh:
                hashes = pickle.load(fh)
            unsketched.append(hashes["unsketched"])
            if hashes["keys"] is not None:
                ids.append(hashes["ids"])
                keys.append(hashes["keys"])
        if self.exact:
            started = time.process_time()
            if ids:
                all_ids, all_keys = np.concatenate(ids), np.concatenate(keys)
                order = np.lexsort((all_ids, all_keys))  # by key, then id: the smallest id of each key first
                sorted_ids, sorted_keys = all_ids[order], all_keys[order]
                first = np.ones(len(order), dtype=bool)
                first[1:] = sorted_keys[1:] != sorted_keys[:-1]
                group_first = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
                dup = ~first
                drop = sorted_ids[dup]
                exact_removed = dict(zip(drop.tolist(), sorted_ids[group_first[dup]].tolist()))
                drop = np.sort(drop)
            counters[(EXACT, "busy_ms")] = int((time.process_time() - started) * 1000)
        with open(out / "exact.pkl", "wb") as fh:
            pickle.dump(exact_removed, fh, protocol=pickle.HIGHEST_PROTOCOL)
        if self.near:
            without_tokens = int((~np.isin(np.concatenate(unsketched), drop)).sum()) if unsketched else 0
            if without_tokens:
                counters[(NEAR, "docs_without_tokens")] = without_tokens
            decisions_path = out / "near.pkl"
            step = next(s for s in STEPS if s.name == NEAR)
            near = step.build(self.cfg, self.ctx)  # the step as the one-graph clean builds it: its path and parts
            p = self._pipeline(self.ctx.input_bytes or 0)
            # the shuffles' blocks through files: on the local runner the driver would hold them all (issue 44)
            spill = out / "spill"
            p | "NearDedup" >> DecisionsFromSketches(
                self.cfg.near_dedup, [str(a_dir / u.name / "sketches.pkl") for u in self.units], drop,
                str(decisions_path), near.against_dirs, near.path(), near.partitions(), spill_dir=str(spill))
            with ProgressPrinter(self.ctx.paths.progress, self.steps, self.log):
                _add(counters, self._run(p))
            shutil.rmtree(spill, ignore_errors=True)
        marker = markers.commit("global", [u.name for u in self.units], counters, {"units_digest": units_digest})
        return marker

    def _decisions_of(self, ids: np.ndarray) -> tuple[dict, dict]:
        b_dir = self.root / "B" / "global"
        with open(b_dir / "exact.pkl", "rb") as fh:
            exact_all = pickle.load(fh)
        exact = {i: exact_all[i] for i in ids.tolist() if i in exact_all}
        near: dict[int, Decision] = {}
        path = b_dir / "near.pkl"
        if self.near and path.exists():
            with open(path, "rb") as fh:
                rows = pickle.load(fh)
            if rows is not None:
                mine = np.flatnonzero(np.isin(rows.ids, ids))
                picked = type(rows)(*(column[mine] for column in rows))
                near = {d.id: d for d in picked.decisions()}
        return exact, near

    # C: the decisions applied, the steps after dedup

    def _unit_c(self, unit: Unit, out: Path) -> dict:
        cfg, ctx = self.cfg, self.ctx
        a_out = self.root / "A" / unit.name
        with open(a_out / "hashes.pkl", "rb") as fh:
            ids = pickle.load(fh)["ids"]
        exact, near = self._decisions_of(ids)
        p = self._pipeline(unit.bytes)
        docs = (p | "Survivors" >> beam.Create([str(a_out / "survivors.run")])
                | "ReadSurvivors" >> beam.FlatMap(lambda path: read_run(path)))
        if self._spread:
            docs = docs | "Spread" >> beam.Reshuffle()
        removed = []
        for name, decisions in ((EXACT, exact), (NEAR, near)):
            if (name == EXACT and self.exact) or (name == NEAR and self.near):
                routed = (docs | f"{name}Apply" >> beam.ParDo(_ApplyDecisionsFn(name, decisions))
                          | f"{name}Tail" >> Route(name, ctx.progress_dir))
                docs = routed["kept"]
                removed.append(routed["removed"])
        for step in self.post:
            step_out = docs | step.name >> step.build(cfg, ctx)
            docs = step_out["kept"]
            removed.append(step_out["removed"])
        (_gather(docs | "DocRows" >> beam.Map(doc_row), "Docs")
         | "WriteDocs" >> beam.FlatMap(_write_rows, str(out / "docs.run"), BY_ID, _docs_size, "docs_rows",
                                       "docs_bytes"))
        self._write_removed(p, removed, out)
        counters = self._run(p)
        if self.near:
            _add(counters, self._index_rows(unit, out, exact, near))
        return counters

    def _index_rows(self, unit: Unit, out: Path, exact: dict, near: dict) -> dict:
        """The near-dedup index rows of the unit's documents that near-dedup kept (as ``_DecideFn`` emits them)."""
        with open(self.root / "A" / unit.name / "sketches.pkl", "rb") as fh:
            rows = pickle.load(fh)
        gone = set(exact) | {i for i, d in near.items() if d.removed}
        sketches, bands = [], []
        if rows is not None:
            kept = rows.take(np.flatnonzero(~np.isin(rows.ids, np.array(sorted(gone), dtype=np.int64))))
            kept_sketches = kept.sketches()
            if kept_sketches:
                keys = bucket_key_matrix([s.signature for s in kept_sketches], self.cfg.near_dedup).tolist()
                for sketch, row in zip(kept_sketches, keys):
                    sketches.append(sketch_row(sketch))
                    bands.extend({"key": key, "id": sketch.id} for key in row)
        sketches.sort(key=BY_ID)
        bands.sort(key=BY_ID_KEY)
        write_run(str(out / "index_sketches.run"), sketches)
        write_run(str(out / "index_bands.run"), bands)
        return {(SIZES, "index_sketch_bytes"): sum(len(r["signature"]) + len(r["shingles"]) + SKETCH_ROW_HELD_BYTES
                                                   for r in sketches),
                (SIZES, "index_band_bytes"): BAND_ROW_HELD_BYTES * len(bands)}

    # D: the merge

    def _merge(self, markers_a: list[dict], markers_c: list[dict], counters: dict) -> None:
        paths, target = self.ctx.paths, self.cfg.output.target_shard_bytes
        scratch = str(self.root / "D")

        def runs(phase: str, name: str) -> list[str]:
            found = [str(self.root / phase / u.name / name) for u in self.units]
            return [r for r in found if os.path.exists(r)]

        def parts(total: int, per_file: int) -> int:
            return max(1, math.ceil(total / per_file))

        sizes = lambda name: counters.get((SIZES, name), 0)  # noqa: E731
        merge_runs(runs("C", "docs.run"), parts(sizes("docs_bytes"), target), BY_ID, str(paths.docs),
                   paths.docs.name, ".parquet", parquet_writer(DOCS_SCHEMA), scratch)
        merge_runs(runs("A", "removed.run") + runs("C", "removed.run"), parts(sizes("removed_bytes"), target), BY_ID,
                   str(paths.removed), paths.removed.name, ".parquet", parquet_writer(REMOVED_SCHEMA), scratch)
        merge_runs(runs("A", "quarantine.run"), parts(sizes("quarantine_bytes"), target), BY_POSITION,
                   str(paths.quarantine), paths.quarantine.name, ".jsonl", jsonl_writer, scratch)
        if self.near:
            sketch_schema, band_schema = index_schemas()
            merge_runs(runs("C", "index_sketches.run"), parts(sizes("index_sketch_bytes"), INDEX_FILE_BYTES), BY_ID,
                       str(paths.dedup), SKETCH_FILES, ".parquet", parquet_writer(sketch_schema), scratch)
            merge_runs(runs("C", "index_bands.run"), parts(sizes("index_band_bytes"), INDEX_FILE_BYTES), BY_ID_KEY,
                       str(paths.dedup), BAND_FILES, ".parquet", parquet_writer(band_schema), scratch)
            write_atomic(str(paths.dedup / PARAMS_FILE), index_params_text(self.cfg.near_dedup).encode("utf-8"))


def clean_in_units(cfg: RunConfig, files: list[InputFile], ctx: StepContext, digest: str,
                   log: Callable[[str], None], dask_address: str | None = None
                   ) -> tuple[dict[tuple[str, str], int], dict]:
    """The phased clean of ``files`` into the run directory's cleaning outputs. Returns its counters and what
    it reused (``{"units": n, "reused": {phase: units}}``); ``work/clean/`` is removed once the outputs are
    written."""
    parts_dir = ctx.paths.clean_work / "parts"  # a large compressed JSONL file's parts, decompressed
    parts_dir.mkdir(parents=True, exist_ok=True)
    units = plan_units(files, cfg.runner.unit_bytes, cfg.input.format, parts_dir=str(parts_dir))
    clean = PhasedClean(cfg, ctx, units, digest, log, dask_address)
    counters = clean.run()
    shutil.rmtree(ctx.paths.clean_work, ignore_errors=True)
    try:
        ctx.paths.clean_work.parent.rmdir()  # work/, when nothing else works there
    except OSError:
        pass  # not empty (or already gone): left as it is
    return counters, {"units": len(units), "reused": dict(clean.reused)}

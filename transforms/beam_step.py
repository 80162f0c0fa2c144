"""The step contract on Beam: one routing tail for every cleaning step, and the timing of a step's work.

Every step — per document (normalize, filters, PII, quality by threshold or pareto) or global (exact dedup,
near dedup, quality by top fraction) — is "annotate and decide": a PTransform whose output is ``(doc, reason)``
pairs, ``reason`` ``None`` to keep the document. It then ends in ``Route(step)``, the only place that
counts ``kept`` and ``removed`` (Beam counters in the step's namespace, what ``pipelines.prepare.collect_stats``
reads), reports the documents done to the terminal progress line (``runio.progress``), marks removed
documents (``removed_by``, ``reason``) and splits them off. datatrove's ``BaseFilter.__call__`` is the pattern.

A step's work is timed where it is done: DoFns derive from ``StepFn`` (or wrap a function with ``timed``), which
sums the time spent in the step's own code into the ``busy_ms`` counter of the step. The shuffles between them
are the runner's and are not counted.

    docs | ApplyStep(step)                    # a per-document DocStep: DecideEach(step) | Route(step.name)
    docs | "Decide" >> MyDecisions() | Route("my_step")      # a global step: (doc, reason) pairs, then the tail
"""
from __future__ import annotations

import time

import apache_beam as beam
from apache_beam import typehints
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms.base import DocStep, mark_removed
from runio.progress import ProgressFile

KEPT = "kept"
REMOVED = "removed"
DEFAULT_BATCH_SIZE = 256


def any_output_type(self, input_type):
    """``infer_output_type`` of a DoFn whose outputs Beam infers as ``Any`` anyway (documents, blocks, a list
    returned): saying so spares Beam's bytecode inference of ``process`` and all it calls, 1-12 ms per
    transform, a fixed cost of building every run's graph."""
    return typehints.Any


class StepFn(beam.DoFn):
    """Base of the DoFns that do a step's work: ``self.busy(seconds, cpu_seconds)`` adds to the step's
    ``busy_ms`` (wall time in the step's code) and ``cpu_ms`` (CPU time of the worker thread running it, from
    ``time.thread_time``: what the step costs on a loaded machine, where wall time also counts waiting).

    Time is summed in the worker and reported once per bundle (a counter update per document would cost
    more than many a step's work); the sub-millisecond remainder carries over to the next bundle."""

    def __init__(self, step: str):
        self.step = step
        self._busy_ms = Metrics.counter(step, "busy_ms")
        self._cpu_ms = Metrics.counter(step, "cpu_ms")
        self._busy_s = self._cpu_s = 0.0

    def busy(self, seconds: float, cpu_seconds: float = 0.0) -> None:
        self._busy_s += seconds
        self._cpu_s += cpu_seconds

    def start_bundle(self):
        pass

    def finish_bundle(self):
        self._flush_busy()

    def _flush_busy(self) -> None:
        ms = int(self._busy_s * 1000)
        if ms:
            self._busy_ms.inc(ms)
            self._busy_s -= ms / 1000
        cpu_ms = int(self._cpu_s * 1000)
        if cpu_ms:
            self._cpu_ms.inc(cpu_ms)
            self._cpu_s -= cpu_ms / 1000


class _TimedFn(StepFn):
    def __init__(self, step: str, fn):
        super().__init__(step)
        self._fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def process(self, element, *args, **kwargs):
        started = time.perf_counter()
        cpu_started = time.thread_time()
        out = self._fn(element, *args, **kwargs)
        out = list(out) if out is not None else []  # a generator's work is done while it is consumed
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        return out

    def default_label(self):
        return f"Timed({self.__name__})"

    infer_output_type = any_output_type


def timed(step: str, fn, *args, **kwargs) -> beam.ParDo:
    """``beam.FlatMap(fn, *args, **kwargs)`` whose time counts into ``step``'s ``busy_ms`` (side inputs work as
    with FlatMap)."""
    return beam.ParDo(_TimedFn(step, fn), *args, **kwargs)


class _RouteFn(beam.DoFn):
    def __init__(self, step: str, progress_dir: str | None):
        self._step = step
        self._progress_dir = progress_dir
        self._kept_counter = Metrics.counter(step, KEPT)
        self._removed_counter = Metrics.counter(step, REMOVED)
        self._progress = None
        self._kept = self._removed = 0

    def setup(self):
        self._progress = ProgressFile(self._progress_dir, self._step)

    def start_bundle(self):
        self._kept = self._removed = 0

    def process(self, decided):
        doc, reason = decided
        self._progress.add(1)
        if reason is None:
            self._kept += 1
            yield doc
        else:
            self._removed += 1
            yield beam.pvalue.TaggedOutput(REMOVED, mark_removed(doc, self._step, reason))

    def finish_bundle(self):
        # once per bundle: per document, counter updates cost a tenth of a fast step's work
        if self._kept:
            self._kept_counter.inc(self._kept)
        if self._removed:
            self._removed_counter.inc(self._removed)
        self._kept = self._removed = 0
        self._progress.flush()


class Route(beam.PTransform):
    """The routing tail of every step: ``(doc, reason | None)`` pairs → ``.kept`` / ``.removed``.

    Counts ``kept`` and ``removed`` under the step's name, reports progress, and marks removed documents with
    ``removed_by`` and ``reason``. Returns a ``DoOutputsTuple`` (``out["kept"]`` or ``out.kept``)."""

    def __init__(self, step: str, progress_dir: str | None = None):
        super().__init__()
        self.step, self.progress_dir = step, progress_dir

    def expand(self, decided):
        return decided | "Route" >> beam.ParDo(_RouteFn(self.step, self.progress_dir)).with_outputs(
            REMOVED, main=KEPT)


class _DecideEachFn(StepFn):
    """Runs a ``DocStep`` on batches of documents and emits ``(doc, reason)``. It batches by itself (a buffer
    flushed when full and at the end of each bundle), which costs less per document than a separate
    BatchElements step; every document keeps its own window and timestamp."""

    def __init__(self, step: DocStep, batch_size: int):
        super().__init__(step.name)
        self._doc_step = step
        self._batch_size = batch_size
        self._buffer: list = []

    # Beam's bytecode inference of ``process`` reads the attributes of what it calls: through PiiStep's ``engine``
    # property it built the PII engine (Presidio, spaCy: ~480 MB, 40-60 s) in the driver for every graph,
    # i.e. once per unit of the phased clean (issue 44).
    infer_output_type = any_output_type

    def setup(self):
        self._doc_step.setup()

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
        docs = [doc for doc, _, _ in batch]
        started = time.perf_counter()
        cpu_started = time.thread_time()
        reasons = self._doc_step.apply(docs)
        self.busy(time.perf_counter() - started, time.thread_time() - cpu_started)
        for (doc, window, timestamp), reason in zip(batch, reasons):
            yield WindowedValue((doc, reason), timestamp, (window,))


class DecideEach(beam.PTransform):
    """The "annotate and decide" part of a per-document step: documents → ``(doc, reason)`` pairs."""

    def __init__(self, step: DocStep, batch_size: int | None = None):
        super().__init__()
        self.step = step
        self.batch_size = batch_size or getattr(step, "batch_size", None) or DEFAULT_BATCH_SIZE

    def expand(self, docs):
        return docs | "Apply" >> beam.ParDo(_DecideEachFn(self.step, self.batch_size))


class ApplyStep(beam.PTransform):
    """A per-document step under the contract: ``DecideEach(step) | Route(step.name)``.

    Returns a ``DoOutputsTuple`` with ``.kept`` and ``.removed``."""

    def __init__(self, step: DocStep, batch_size: int | None = None, progress_dir: str | None = None):
        super().__init__()
        self._step = step
        self._batch_size = batch_size
        self._progress_dir = progress_dir

    def expand(self, docs):
        return (docs
                | "Decide" >> DecideEach(self._step, self._batch_size)
                | "Tail" >> Route(self._step.name, self._progress_dir))

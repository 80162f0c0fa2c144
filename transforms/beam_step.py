"""The thin Beam wrapper shared by every per-document step."""
from __future__ import annotations

import time

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.base import DocStep, mark_removed
from transforms.progress import ProgressFile

KEPT = "kept"
REMOVED = "removed"


class _ApplyStepFn(beam.DoFn):
    def __init__(self, step: DocStep, progress_dir: str | None = None):
        self._step = step
        self._progress_dir = progress_dir
        self._progress = None
        self._kept = Metrics.counter(step.name, "kept")
        self._removed = Metrics.counter(step.name, "removed")
        self._busy_ms = Metrics.counter(step.name, "busy_ms")

    def setup(self):
        self._step.setup()
        self._progress = ProgressFile(self._progress_dir, self._step.name)

    def finish_bundle(self):
        self._progress.flush()

    def process(self, batch):
        started = time.perf_counter()
        reasons = self._step.apply(batch)
        self._busy_ms.inc(int((time.perf_counter() - started) * 1000))
        self._progress.add(len(batch))
        for doc, reason in zip(batch, reasons):
            if reason is None:
                self._kept.inc()
                yield doc
            else:
                self._removed.inc()
                yield beam.pvalue.TaggedOutput(REMOVED, mark_removed(doc, self._step.name, reason))


class ApplyStep(beam.PTransform):
    """Batch documents, run one step on each batch, and split the result into kept and removed.

    Returns a ``DoOutputsTuple`` with ``.kept`` and ``.removed``.
    """

    def __init__(self, step: DocStep, min_batch_size: int = 16, max_batch_size: int = 256,
                 progress_dir: str | None = None):
        super().__init__(label=None)
        self._step = step
        self._progress_dir = progress_dir
        self._min_batch = min_batch_size
        self._max_batch = max_batch_size

    def expand(self, docs):
        return (
            docs
            | "Batch" >> beam.BatchElements(min_batch_size=self._min_batch, max_batch_size=self._max_batch)
            | "Apply" >> beam.ParDo(_ApplyStepFn(self._step, self._progress_dir)).with_outputs(REMOVED, main=KEPT)
        )

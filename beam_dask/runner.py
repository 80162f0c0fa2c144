"""``DaskRunner``: a Beam runner that executes a pipeline on a dask.distributed cluster.

It is a translation, not an engine: ``translate.py`` turns the pipeline into one Dask task graph, submitted
at once with ``Client.get`` and left fire-and-forget; Dask's scheduler places the tasks, moves the data between
workers, and recomputes what a lost worker held that is still needed. See ``execute.py`` for what runs in a
task and ``watch.py`` for how completion, errors and metrics are tracked on the scheduler.

Metrics are committed: each stage task reports its counter deltas to the scheduler as it finishes, and
``watch.JobWatch`` keeps, per task key, the deltas of the attempt whose result the scheduler kept (the first
time the key reached memory); the client sums those. ``attempted`` equals ``committed``: the deltas of
attempts that died with a worker are not observable here, and are not counted.

Options (``DaskRunnerOptions``): ``--dask_address HOST:PORT`` (default: a LocalCluster started in this
process), ``--dask_workers N`` (its worker processes), ``--dask_worker_memory 2.5GiB`` (each one's memory limit:
its shuffle data spills to disk beyond 60-70% of it), ``--dask_partitions N`` (partitions of every shuffle's
output; default 2 per worker thread, between 2 and 32, or one per 8 MB of input when the pipeline's input size
is given, ``DaskRunner(input_bytes=...)`` or ``--dask_input_bytes N``), ``--dask_staged_shuffle_above N`` (a
shuffle of more source × output partition pairs goes in two rounds; default ``translate.STAGED_SHUFFLE_ABOVE``),
``--dask_whole_source_shuffle_max_bytes N`` (a job whose given input is at most N bytes, default one partition's
8 MB, shuffles without pick tasks: one scheduling round trip less per shuffle, see ``translate._WholeSource``).
"""
from __future__ import annotations

import argparse
import logging
import math
import pickle
import time
import uuid
from typing import Any

import distributed
from apache_beam.metrics.execution import MetricResult
from apache_beam.metrics.metric import MetricResults
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState

from beam_dask import cluster, execute, watch
from beam_dask.translate import STAGED_SHUFFLE_ABOVE, Translation, plan_pipeline, translate

log = logging.getLogger(__name__)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


PARTITION_INPUT_BYTES = 8 << 20  # input bytes (as stored, e.g. gzip) per shuffle partition when the size is known


def whole_source_shuffles(input_bytes: int | None, max_bytes: int = PARTITION_INPUT_BYTES) -> bool:
    """Whether a job of ``input_bytes`` (0 or None: unknown) shuffles from whole sources, without pick tasks
    (``translate._WholeSource``): a known input of at most ``max_bytes``."""
    return 0 < (input_bytes or 0) <= max_bytes


class DaskRunnerOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--dask_address", default=None,
                            help="address of a running Dask scheduler (tcp://HOST:PORT or HOST:PORT); default: a "
                                 "LocalCluster started by this process")
        parser.add_argument("--dask_workers", type=int, default=None,
                            help="worker processes of the LocalCluster started when no address is given")
        parser.add_argument("--dask_worker_memory", default=None,
                            help="memory limit of each LocalCluster worker (e.g. 2.5GiB): shuffle data beyond "
                                 "60-70%% of it spills to disk; default: Dask's (machine memory / workers)")
        parser.add_argument("--dask_partitions", type=int, default=None,
                            help="partitions of every shuffle's output (default: 2 per worker thread, 2..32, or "
                                 "one per 8 MB of input when the input size is known)")
        parser.add_argument("--dask_input_bytes", type=_non_negative_int, default=0,
                            help="the pipeline's input size in bytes, when known: the shuffles' default partition "
                                 "count grows with it (one per 8 MB), and a small input shuffles from whole sources "
                                 "(default 0: unknown)")
        parser.add_argument("--dask_staged_shuffle_above", type=_non_negative_int, default=STAGED_SHUFFLE_ABOVE,
                            help="a shuffle with more source x output partition pairs than this goes in two rounds "
                                 "of about sources x sqrt(outputs) tasks each, instead of one pick task per pair "
                                 f"(default {STAGED_SHUFFLE_ABOVE})")
        parser.add_argument("--dask_whole_source_shuffle_max_bytes", type=_non_negative_int,
                            default=PARTITION_INPUT_BYTES,
                            help="a job whose input size is given and at most this many bytes shuffles without "
                                 "pick tasks: each reducer reads its sources' whole outputs (a worker may hold a "
                                 "copy of a whole shuffle; one scheduling round trip less per shuffle); 0: never "
                                 f"(default {PARTITION_INPUT_BYTES}, one partition's input)")


_KIND_TO_FIELD = {"counter": MetricResults.COUNTERS, "distribution": MetricResults.DISTRIBUTIONS,
                  "gauge": MetricResults.GAUGES, "string_set": MetricResults.STRINGSETS,
                  "bounded_trie": MetricResults.BOUNDED_TRIES, "histogram": MetricResults.HISTOGRAMS}


class DaskMetrics(MetricResults):
    """Committed metrics: the sum of the updates returned by the kept result of every stage task."""

    def __init__(self, merged: dict):
        self._merged = dict(merged)

    def query(self, filter=None):
        out: dict[str, list] = {name: [] for name in _KIND_TO_FIELD.values()}
        for (kind, key), value in self._merged.items():
            if not self.matches(filter, key):
                continue
            result = value if kind == "counter" else value.get_result()
            out[_KIND_TO_FIELD[kind]].append(MetricResult(key, result, result))
        return out


class DaskPipelineResult(PipelineResult):
    """A job on the cluster. Its stage tasks are fire-and-forget; ``watch.JobWatch`` on the scheduler says
    which are done, keeps the first error, and holds the committed metrics."""

    WAIT_S = 2.0  # longest wait on the scheduler for the job to end before its status is looked at again

    def __init__(self, client: distributed.Client, job_id: str, translation: Translation, tracked: list,
                 close_client: bool):
        super().__init__(PipelineState.RUNNING)
        self.client = client
        self.job_id = job_id
        self.translation_info = {"stages": translation.stages, "stage_tasks": translation.stage_tasks,
                                 "tasks": translation.tasks}
        self._tracked = tracked
        self._close_client = close_client
        self._merged: dict = {}
        self._status = {"done": 0, "total": len(tracked), "error": None}
        self._ended = False
        self.worker_summaries: dict = {}

    def progress(self) -> tuple[int, int]:
        """(stage tasks done, all stage tasks), from the scheduler's task states."""
        if self._state == PipelineState.RUNNING:
            self._poll()
        return self._status["done"], self._status["total"]

    def _poll(self) -> dict:
        status = self.client.run_on_scheduler(watch.job_status, self.job_id)
        if status.get("known"):
            self._status = status
        return self._status

    def wait_until_finish(self, duration: int | None = None) -> str:
        if self._state != PipelineState.RUNNING:
            return self._state
        deadline = None if duration is None else time.monotonic() + duration / 1000
        try:
            while True:
                # answered as soon as the job ends (no polling delay after its last task), else after WAIT_S
                wait_s = self.WAIT_S if deadline is None else max(0.0, min(self.WAIT_S, deadline - time.monotonic()))
                status = self.client.run_on_scheduler(watch.wait_job, self.job_id, wait_s)
                if status.get("known"):
                    self._status = status
                else:  # the scheduler does not know the job (yet, or any more): ask again shortly
                    time.sleep(0.1)
                status = self._status
                if status["error"]:
                    raise _job_error(status["error"])
                if status["done"] >= status["total"]:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    return self._state
            for blob in self.client.run_on_scheduler(watch.job_metrics, self.job_id):
                if blob is not None:
                    execute.merge_metric_updates(self._merged, pickle.loads(blob))
        except BaseException:
            self._state = PipelineState.FAILED
            self._cancel_tasks()
            self._end()
            raise
        self._state = PipelineState.DONE
        self._end()
        return self._state

    def _cancel_tasks(self) -> None:
        try:
            self.client.run_on_scheduler(watch.cancel_job, self.job_id, self._tracked)
        except Exception as error:  # noqa: BLE001 - a cluster that went away: nothing left to cancel
            log.warning("dask runner: cancelling job %s's tasks failed (%s: %s)", self.job_id, type(error).__name__,
                        error)

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            self.worker_summaries = self.client.run(execute.end_job, self.job_id)
            self.client.run_on_scheduler(watch.forget_job, self.job_id)
        except Exception as error:  # noqa: BLE001 - a cluster that went away: nothing left to tear down
            self.worker_summaries = {}
            log.warning("dask runner: ending job %s on the workers failed (%s: %s); their DoFns were not torn "
                        "down", self.job_id, type(error).__name__, error)
        if self._close_client:
            self.client.close()

    def cancel(self) -> str:
        if self._state == PipelineState.RUNNING:
            self._state = PipelineState.CANCELLING
            self._cancel_tasks()
            self._state = PipelineState.CANCELLED
            self._end()
        return self._state

    def metrics(self) -> DaskMetrics:
        """Committed metrics: complete once the job is DONE (while it runs: none yet)."""
        return DaskMetrics(self._merged)


def _job_error(error: dict) -> BaseException:
    exception = error.get("exception")
    if exception is not None:
        try:
            from distributed.protocol import pickle as dpickle
            from distributed.protocol.serialize import Serialized, deserialize

            if isinstance(exception, Serialized):
                exception = deserialize(exception.header, exception.frames)
            if isinstance(exception, (bytes, bytearray, memoryview)):  # the worker pickles it once more
                exception = dpickle.loads(exception)
            if isinstance(exception, BaseException):
                return exception
        except Exception as undecodable:  # noqa: BLE001 - a class this process cannot load: its text, and why
            return RuntimeError(f"dask runner: {error.get('text')} (the worker's exception could not be rebuilt "
                                f"here: {type(undecodable).__name__}: {undecodable})")
    return RuntimeError(f"dask runner: {error.get('text')}")


_watched: set = set()


def _ensure_watch(client: distributed.Client) -> None:
    """Install ``watch.JobWatch`` on the scheduler once (the scheduler must be able to import beam_dask)."""
    address = client.scheduler.address
    if address in _watched:
        return
    if not client.run_on_scheduler(watch.has_plugin):
        client.register_plugin(watch.JobWatch(), name=watch.PLUGIN_NAME)
    _watched.add(address)


MAX_PARTITIONS = 512


def default_partitions(client: distributed.Client, input_bytes: int = 0) -> int:
    """2 per worker thread (2..32), or more when the input is large: one per ``PARTITION_INPUT_BYTES`` of input,
    so that a task's share of a shuffle (what one worker holds at once while it runs) stays about the same size
    whatever the corpus size, instead of growing with it."""
    threads = sum(client.nthreads().values()) or 1
    by_threads = max(2, min(32, 2 * threads))
    return min(MAX_PARTITIONS, max(by_threads, math.ceil((input_bytes or 0) / PARTITION_INPUT_BYTES)))


class DaskRunner(PipelineRunner):
    """Runs a Beam pipeline on dask.distributed.

    ``DaskRunner(address=None, client=None, workers=None, partitions=None)``: an explicit ``client`` is used
    as is (and left open); else ``address`` (or ``--dask_address``) is connected to for the run; else the
    process-wide LocalCluster of ``workers`` (or ``--dask_workers``, default 2) processes is used.
    """

    def __init__(self, address: str | None = None, client: distributed.Client | None = None,
                 workers: int | None = None, partitions: int | None = None, memory_limit: str | None = None,
                 input_bytes: int = 0):
        self.address, self.client, self.workers, self.partitions = address, client, workers, partitions
        self.memory_limit, self.input_bytes = memory_limit, input_bytes
        self.last_result: DaskPipelineResult | None = None

    def _client(self, opts: DaskRunnerOptions) -> tuple[distributed.Client, bool]:
        if self.client is not None:
            return self.client, False
        address = self.address or opts.dask_address
        if address:
            return cluster.connect(address), True
        return cluster.shared_local_cluster(self.workers or opts.dask_workers,
                                            self.memory_limit or opts.dask_worker_memory).client, False

    def run_pipeline(self, pipeline, options: PipelineOptions) -> DaskPipelineResult:
        opts = options.view_as(DaskRunnerOptions)
        plan = plan_pipeline(pipeline)  # unsupported constructs fail here, before a cluster is touched
        client, close_client = self._client(opts)
        try:
            input_bytes = self.input_bytes or opts.dask_input_bytes
            partitions = self.partitions or opts.dask_partitions or default_partitions(client, input_bytes)
            job_id = uuid.uuid4().hex
            options_dict: dict[str, Any] = options.get_all_options(drop_default=True, retain_unknown_options=True)
            translation = translate(plan, job_id, partitions, options_dict, opts.dask_staged_shuffle_above,
                                    whole_source_shuffles(input_bytes, opts.dask_whole_source_shuffle_max_bytes))
            tracked = [watch.key_id(k) for k in translation.stage_keys + translation.terminal_keys]
            _ensure_watch(client)
            client.run_on_scheduler(watch.register_job, job_id, job_id[:8], tracked,
                                    [watch.key_id(k) for k in translation.stage_keys])
            keys = translation.stage_keys + translation.terminal_keys
            if keys:
                futures = client.get(translation.graph, keys, sync=False)
                distributed.fire_and_forget(futures)
                for future in futures:  # from now on only the fire-and-forget "client" wants them
                    future.release()
        except BaseException:
            if close_client:
                client.close()
            raise
        result = DaskPipelineResult(client, job_id, translation, keys, close_client)
        self.last_result = result
        return result

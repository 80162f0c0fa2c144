"""The scheduler side of a job: which stage tasks finished, their committed metrics, the first error.

Why not simply gather each stage task's metrics from its result: a result lives on a worker. If that worker
dies after the task finished but before the client fetched the result, the scheduler recomputes the task only
because the client still wants it, which re-runs a sink's side effects (e.g. a Beam file sink writing a bundle
again after its finalize step already ran). So the stage tasks are submitted fire-and-forget (nobody holds
their results once they finish), and this plugin, running inside the scheduler, keeps the bookkeeping:

- every stage task, when it finishes, logs an event (``metrics_topic(job)``) holding its metric updates and
  the worker it ran on. A worker's messages reach the scheduler in order, so that event arrives before the
  worker reports the task finished;
- when the scheduler moves a tracked key to ``memory`` for the first time — the attempt whose result it
  kept — the plugin commits the updates that this worker logged for that key. Attempts that died, or
  recomputations of a key already committed, are never counted;
- the first ``erred`` transition of any key of the job is kept, with its exception, for the client.

The client asks ``wait_job``, which answers as soon as every tracked key is done or one erred (or after a
few seconds, to say how far the job is), and then fetches ``job_metrics``. This module
imports no Beam: the scheduler needs only ``distributed`` and this package.
"""
from __future__ import annotations

import asyncio
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

PLUGIN_NAME = "beam-dask-jobs"
_TOPIC_PREFIX = "beam-dask-metrics-"


def metrics_topic(job_id: str) -> str:
    return _TOPIC_PREFIX + job_id


def key_id(key: Any) -> str:
    """One spelling of a task key on both sides (events carry tuples as lists)."""
    return repr(tuple(key)) if isinstance(key, (list, tuple)) else repr(key)


class _Job:
    def __init__(self, tag: str, tracked: list, needs_metrics: list):
        self.tag = tag
        self.pending = set(tracked)
        self.total = len(self.pending)
        self.needs_metrics = set(needs_metrics)
        self.reported: dict[tuple[str, str], bytes] = {}  # (key, worker) -> updates of that attempt
        self.committed: dict[str, bytes] = {}
        self.error: dict | None = None
        self.ended: asyncio.Event | None = None  # made by the first wait (on the scheduler's event loop)

    def settled(self) -> bool:
        return not self.pending or self.error is not None

    def tell_waiters(self) -> None:
        if self.ended is not None and self.settled():
            self.ended.set()


class JobWatch(SchedulerPlugin):
    name = PLUGIN_NAME

    def __init__(self):
        self.jobs: dict[str, _Job] = {}
        self.scheduler = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    # called through Client.run_on_scheduler ------------------------------------------------------------
    def register(self, job_id: str, tag: str, tracked: list, needs_metrics: list) -> None:
        self.jobs[job_id] = _Job(tag, tracked, needs_metrics)

    def status(self, job_id: str) -> dict:
        job = self.jobs.get(job_id)
        if job is None:
            return {"known": False}
        return {"known": True, "done": job.total - len(job.pending), "total": job.total, "error": job.error}

    async def wait(self, job_id: str, timeout_s: float) -> dict:
        """``status`` as soon as the job is done or failed, or after ``timeout_s``."""
        job = self.jobs.get(job_id)
        if job is not None and not job.settled():
            if job.ended is None:
                job.ended = asyncio.Event()
            try:
                await asyncio.wait_for(job.ended.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
        return self.status(job_id)

    def metrics(self, job_id: str) -> list[bytes]:
        job = self.jobs.get(job_id)
        return list(job.committed.values()) if job else []

    def forget(self, job_id: str) -> None:
        job = self.jobs.pop(job_id, None)
        if job is not None and self.scheduler is not None:
            self.scheduler._broker.truncate(metrics_topic(job_id))

    # scheduler hooks -----------------------------------------------------------------------------------
    def log_event(self, topic: str, msg: Any) -> None:
        if not topic.startswith(_TOPIC_PREFIX):
            return
        job = self.jobs.get(topic[len(_TOPIC_PREFIX):])
        if job is not None and isinstance(msg, dict):
            job.reported[(key_id(msg["key"]), msg["worker"])] = msg["metrics"]

    def transition(self, key, start, finish, *args, stimulus_id=None, **kwargs) -> None:
        if not self.jobs or finish not in ("memory", "erred"):
            return
        k = key_id(key)
        for job in self.jobs.values():
            if finish == "memory" and k in job.pending:
                job.pending.discard(k)
                if k in job.needs_metrics:
                    updates = job.reported.get((k, kwargs.get("worker")))
                    if updates is None and job.error is None:
                        job.error = {"text": f"no metrics report from the attempt of {k} that the scheduler kept "
                                             f"(worker {kwargs.get('worker')}): counters would be wrong",
                                     "exception": None}
                    job.committed[k] = updates
                for stale in [r for r in job.reported if r[0] == k]:
                    del job.reported[stale]
            elif finish == "erred" and job.error is None and job.tag in k:
                job.error = {"text": str(kwargs.get("exception_text") or f"task {k} failed"),
                             "exception": kwargs.get("exception"), "key": k}
            job.tell_waiters()


# Client.run_on_scheduler passes the scheduler as the keyword argument ``dask_scheduler``.
def _plugin(dask_scheduler) -> JobWatch:
    return dask_scheduler.plugins[PLUGIN_NAME]


def register_job(job_id: str, tag: str, tracked: list, needs_metrics: list, dask_scheduler=None) -> None:
    _plugin(dask_scheduler).register(job_id, tag, tracked, needs_metrics)


def job_status(job_id: str, dask_scheduler=None) -> dict:
    return _plugin(dask_scheduler).status(job_id)


async def wait_job(job_id: str, timeout_s: float, dask_scheduler=None) -> dict:
    return await _plugin(dask_scheduler).wait(job_id, timeout_s)


def job_metrics(job_id: str, dask_scheduler=None) -> list[bytes]:
    return _plugin(dask_scheduler).metrics(job_id)


def cancel_job(job_id: str, keys: list, dask_scheduler=None) -> None:
    """Nobody wants the job's keys any more: the scheduler releases (and forgets) what has not run."""
    dask_scheduler.client_releases_keys(keys=keys, client="fire-and-forget", stimulus_id=f"beam-cancel-{job_id}")


def forget_job(job_id: str, dask_scheduler=None) -> None:
    _plugin(dask_scheduler).forget(job_id)


def has_plugin(dask_scheduler=None) -> bool:
    return PLUGIN_NAME in dask_scheduler.plugins

"""Restart bookkeeping: every resume from a checkpoint, what kind it was, and how long a failure cost.

The first step completed after a resume appends one line to ``train/recovery.jsonl`` (rank 0 only, as for the
metrics log). Its ``kind`` tells three cases apart:

    restart after a failure        torchrun restarted the workers of a running job (``--max-restarts``):
                                   ``recovery_seconds`` runs from the last step logged before the failure (its
                                   ``time`` in ``metrics.jsonl``) to now, an upper bound of the recovery time
    resume after an interruption   a new ``corpusmill train`` continues a run that had not reached its
                                   ``train.steps`` (a crash, Ctrl-C, a killed job, a damaged newer checkpoint)
    resume extending train.steps   a new ``corpusmill train`` continues a run that had completed, with a larger
                                   ``train.steps``: deliberate, nothing failed (no recovery time)
    elastic: world 2 → 1           an elastic job (``--nnodes MIN:MAX``) formed its worker group again with
                                   another number of processes than the checkpoint's (a node lost, or one that
                                   came back at the next rendezvous), ``world_before``/``world_after``;
                                   ``recovery_seconds`` as for a restart: from the last step logged before to
                                   the first step completed on the new world size

Times are written as epoch seconds (``last_record_time``, ``resumed_at``) for tools and as UTC text
(``last_record_utc``, ``resumed_utc``) for people; the report shows the text.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

import psutil

from runio.files import append_jsonl, read_jsonl
from runio.layout import RunPaths

log = logging.getLogger(__name__)

RESTART_AFTER_FAILURE = "restart after a failure"
RESUME_AFTER_INTERRUPTION = "resume after an interruption"
RESUME_EXTENDING_STEPS = "resume extending train.steps"
ELASTIC_PREFIX = "elastic: world"
# Set by the launcher for an elastic job (``--nnodes MIN:MAX``): a resume on another world size is a re-formed
# worker group, not a new command.
ELASTIC_ENV = "CORPUSMILL_ELASTIC"


def elastic_kind(world_before: int, world_after: int) -> str:
    return f"{ELASTIC_PREFIX} {world_before} → {world_after}"


def utc_text(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def resume_kind(checkpoint_step: int, provenance: dict | None, train_steps_now: int, restart_count: int,
                world_size: int | None = None, elastic: bool = False) -> str:
    world_before = (provenance or {}).get("world_size")
    if elastic and world_size is not None and world_before is not None and world_before != world_size:
        return elastic_kind(int(world_before), world_size)
    if restart_count > 0:
        return RESTART_AFTER_FAILURE
    steps_before = (provenance or {}).get("train_steps")
    if steps_before is not None and checkpoint_step >= steps_before and train_steps_now > steps_before:
        return RESUME_EXTENDING_STEPS
    return RESUME_AFTER_INTERRUPTION


def _process_started_at() -> float | None:
    """When this process started (epoch seconds), or None when psutil cannot tell."""
    try:
        return float(psutil.Process().create_time())
    except (psutil.Error, OSError) as error:  # a breakdown is optional: said at debug level, then left out
        log.debug("process start time unknown (%s: %s)", type(error).__name__, error)
        return None


def _process_cpu_seconds() -> float | None:
    """CPU seconds this process has used (user + system, all its threads), or None when psutil cannot tell."""
    try:
        times = psutil.Process().cpu_times()
        return float(times.user + times.system)
    except (psutil.Error, OSError) as error:  # as above
        log.debug("process CPU time unknown (%s: %s)", type(error).__name__, error)
        return None


class RecoveryTracker:
    """The training loop's restart component: ``resumed(...)`` after a resume from a checkpoint, ``observe(step)``
    after every step (it writes once, at the first step after the resume)."""

    def __init__(self, paths: RunPaths, *, is_main: bool, say: Callable[[str], None]):
        self.paths, self.is_main, self.say = paths, is_main, say
        self._pending: dict | None = None

    def resumed(self, checkpoint_name: str, checkpoint_step: int = 0, provenance: dict | None = None,
                train_steps_now: int = 0) -> None:
        if not self.is_main:
            return
        restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        elastic = os.environ.get(ELASTIC_ENV) == "1"
        kind = resume_kind(checkpoint_step, provenance, train_steps_now, restart_count, world_size, elastic)
        last = self._last_logged()
        self._pending = {"kind": kind, "resumed_from": checkpoint_name, "checkpoint_step": checkpoint_step,
                         "last_logged_step": last[0] if last else None,
                         "last_record_time": last[1] if last else None,
                         "train_steps_before": (provenance or {}).get("train_steps"),
                         "train_steps_now": train_steps_now, "restart_count": restart_count,
                         "world_before": (provenance or {}).get("world_size"), "world_after": world_size}

    def _last_logged(self) -> tuple[int, float] | None:
        last = None
        for record in read_jsonl(self.paths.metrics_jsonl):  # a line cut short by the failure is skipped
            if "time" in record and "step" in record:
                last = (int(record["step"]), float(record["time"]))
        return last

    def observe(self, step: int) -> None:
        if self._pending is None:
            return
        entry, self._pending = self._pending, None
        now = time.time()
        entry.update(first_step_after=step, resumed_at=now, resumed_utc=utc_text(now),
                     last_record_utc=utc_text(entry["last_record_time"]))
        elastic = entry["kind"].startswith(ELASTIC_PREFIX)
        if (entry["kind"] == RESTART_AFTER_FAILURE or elastic) and entry["last_record_time"] is not None:
            entry["recovery_seconds"] = round(now - entry["last_record_time"], 3)
            started = _process_started_at()
            if started is not None and started >= entry["last_record_time"]:
                # The two parts: noticing the failure and re-forming the group (torchrun), then this worker's
                # start (imports, process group, model, checkpoint load) and its first step.
                entry["worker_started_at"] = round(started, 3)
                entry["until_worker_start_seconds"] = round(started - entry["last_record_time"], 3)
                entry["worker_start_to_step_seconds"] = round(now - started, 3)
                cpu = _process_cpu_seconds()
                if cpu is not None:  # what that part cost this process (wall ≫ cpu: a machine shared with others)
                    entry["worker_start_to_step_cpu_seconds"] = round(cpu, 3)
        append_jsonl(self.paths.recovery_jsonl, entry)
        if "recovery_seconds" in entry:
            what = (f"an elastic restart (world {entry['world_before']} → {entry['world_after']})" if elastic
                    else "a restart")
            self.say(f"recovered from {what} in {entry['recovery_seconds']:.1f} s "
                     f"(last step logged before it: {entry['last_logged_step']})")

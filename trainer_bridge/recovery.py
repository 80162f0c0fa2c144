"""Restart bookkeeping: how long training took to come back after a failure.

A rank killed mid-run makes torchrun restart the whole group, which resumes from the latest checkpoint. The
first step completed after such a restart appends one line to ``train/recovery.jsonl``: from the last step
logged before the failure (its ``time`` in ``metrics.jsonl``) to now, an upper bound of the recovery time (the
failure happened at some point after that line was written). Rank 0 only, as for the metrics log.
"""
from __future__ import annotations

import time
from typing import Callable

from runio.files import append_jsonl, read_jsonl
from runio.layout import RunPaths


class RecoveryTracker:
    """The training loop's restart component: ``resumed(name)`` after a resume from checkpoint ``name``,
    ``observe(step)`` after every step (it writes once, at the first step after the resume)."""

    def __init__(self, paths: RunPaths, *, is_main: bool, say: Callable[[str], None]):
        self.paths, self.is_main, self.say = paths, is_main, say
        self._since: tuple[int, float] | None = None  # (last step logged before the restart, its wall time)
        self._resumed_from: str | None = None

    def resumed(self, checkpoint_name: str) -> None:
        self._resumed_from = checkpoint_name
        self._since = self._last_logged() if self.is_main else None

    def _last_logged(self) -> tuple[int, float] | None:
        last = None
        for record in read_jsonl(self.paths.metrics_jsonl):  # a line cut short by the failure is skipped
            if "time" in record and "step" in record:
                last = (int(record["step"]), float(record["time"]))
        return last

    def observe(self, step: int) -> None:
        if self._since is None:
            return
        failed_after, last_time = self._since
        self._since = None
        now = time.time()
        entry = {"failed_after_step": failed_after, "last_record_time": last_time,
                 "resumed_from": self._resumed_from, "first_step_after_restart": step, "recovered_at": now,
                 "recovery_seconds": round(now - last_time, 3)}
        append_jsonl(self.paths.recovery_jsonl, entry)
        self.say(f"recovered from a restart in {entry['recovery_seconds']:.1f} s "
                 f"(last step logged before it: {failed_after})")

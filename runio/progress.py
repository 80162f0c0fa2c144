"""Worker-side progress counters: each worker process writes how many documents each step has done.

Workers are separate processes (or machines), so each writes its own small file into the run directory's
`.progress/` (throttled to about one write a second, replaced atomically); `pipelines/progress.py` sums them
in the launching process. Only local run directories get progress files.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from runio.files import atomic_output, read_json


class ProgressFile:
    """Counts documents for one step in one worker; the file is replaced atomically, never half written."""

    def __init__(self, directory: str | None, step: str, every_s: float = 1.0):
        self.path = None
        if directory and "://" not in directory:
            os.makedirs(directory, exist_ok=True)
            self.path = os.path.join(directory, f"{step}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self.step, self.every_s = step, every_s
        self.docs = 0
        self._last_write = 0.0

    def add(self, docs: int) -> None:
        self.docs += docs
        now = time.monotonic()
        if self.path is not None and now - self._last_write >= self.every_s:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if self.path is None:
            return
        self._last_write = now if now is not None else time.monotonic()
        with atomic_output(self.path, "w", fsync=False) as fh:  # a counter, not data: no fsync
            json.dump({"step": self.step, "docs": self.docs}, fh)


def read_progress(directory: Path) -> dict[str, int]:
    totals: dict[str, int] = {}
    for path in Path(directory).glob("*.json"):
        record = read_json(path)
        if not isinstance(record, dict):
            continue  # replaced while reading: the next round reads it
        totals[record["step"]] = totals.get(record["step"], 0) + int(record["docs"])
    return totals

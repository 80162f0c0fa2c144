"""Progress of a running Beam stage in the terminal: documents done per step, rate and ETA.

The workers' counters come from `runio/progress.py` (every step's routing tail and the reader write them
into the run's ``RunPaths.progress``); this thread in the launching process sums them every few seconds and
prints one line: read, then every step in order.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from runio.progress import read_progress


def progress_line(totals: dict[str, int], steps: list[str], rates: dict[str, float], read_done: bool) -> str:
    parts = [f"read {totals.get('read', 0):,}"]
    for step in steps:
        if step in totals:
            parts.append(f"{step} {totals[step]:,} ({rates.get(step, 0):.0f}/s)")
    line = "clean: " + " | ".join(parts)
    last = next((s for s in reversed(steps) if s in totals), None)
    if read_done and last is not None and rates.get(last, 0) > 0:
        # Every document read passes the first step; later steps see fewer, so this is an upper bound.
        remaining = max(totals.get("read", 0) - totals[last], 0)
        line += f" | ETA ≤ {remaining / rates[last]:.0f}s"
    return line


class ProgressPrinter:
    """Prints a progress line every ``interval_s`` seconds while a stage runs (a daemon thread)."""

    def __init__(self, directory: Path, steps: list[str], log: Callable[[str], None], interval_s: float = 10.0):
        self.directory, self.steps, self.log, self.interval_s = Path(directory), steps, log, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpusmill-progress", daemon=True)

    def __enter__(self) -> "ProgressPrinter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        previous: dict[str, int] = {}
        last_time = time.monotonic()
        stable_read_rounds = 0
        while not self._stop.wait(self.interval_s):
            totals = read_progress(self.directory)
            now = time.monotonic()
            rates = {k: (v - previous.get(k, 0)) / (now - last_time) for k, v in totals.items()}
            stable_read_rounds = stable_read_rounds + 1 if totals.get("read") == previous.get("read") else 0
            if totals:
                self.log(progress_line(totals, self.steps, rates, read_done=stable_read_rounds > 0))
            previous, last_time = totals, now

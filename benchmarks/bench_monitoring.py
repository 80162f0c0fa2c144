"""Per-step cost of monitoring and alerts, as a ratio to the trainer's own per-step metrics write (MetricsLog.log).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_monitoring.py [--steps 20000]

The baseline is measured in the same run: one JSON line appended and flushed per step, which the trainer does
anyway. The exporter and the alert rules must stay within a small multiple of it (microseconds per step).
"""
from __future__ import annotations

import argparse
import tempfile
import time

from runio.layout import RunPaths
from trainer_bridge.observe.alerts import AlertMonitor, AlertsConfig
from trainer_bridge.observe.metrics import MetricsLog
from trainer_bridge.observe.monitoring import MonitoringConfig, TrainingMonitor


def record(step: int) -> dict:
    return {"loss": 3.0 + (step % 7) * 0.01, "grad_norm": 0.8, "lr": 3e-4, "loss_scale": 1.0, "real_tokens": 4096,
            "sum_squared_segment_lengths": 1 << 20, "step": step, "step_time_s": 0.25, "data_wait_s": 0.002,
            "data_wait_fraction": 0.008, "tokens_per_s": 16384.0 + step % 5, "mfu": 0.31, "tokens_seen": 4096 * step,
            "samples": 8 * step, "peak_memory_bytes": 1 << 30, "skipped_bad_steps": 0, "skipped_overflow_steps": 0,
            "rollbacks": 0}


def best_of(repeats: int, fn, steps: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for step in range(steps):
            fn(step)
        best = min(best, time.perf_counter() - started)
    return best / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = [record(s) for s in range(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        log = MetricsLog(RunPaths(tmp), enabled=True, tensorboard=False)
        baseline = best_of(args.repeats, lambda s: log.log(records[s]), args.steps)
        log.close()
        monitor = TrainingMonitor(MonitoringConfig(port=0, hardware_interval_s=0)).start()
        exporter = best_of(args.repeats, lambda s: monitor.observe_step(records[s]), args.steps)
        monitor.close()
        alerts = AlertMonitor(AlertsConfig(), RunPaths(tmp))
        rules = best_of(args.repeats, lambda s: alerts.observe(s, records[s]), args.steps)
        alerts.close()
    print(f"baseline MetricsLog.log      {baseline * 1e6:8.1f} µs/step  1.00×")
    print(f"TrainingMonitor.observe_step {exporter * 1e6:8.1f} µs/step  {exporter / baseline:.2f}×")
    print(f"AlertMonitor.observe         {rules * 1e6:8.1f} µs/step  {rules / baseline:.2f}×")


if __name__ == "__main__":
    main()

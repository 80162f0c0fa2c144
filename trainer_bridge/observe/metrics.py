"""FLOP counting, MFU, the metrics log (``train/metrics.jsonl`` and TensorBoard when installed), and the loop's
metrics component ``StepMetrics`` (step timing, throughput, MFU, the log and the console line).

Training FLOPs of one step, forward + backward (backward = 2 × forward):
- dense part: 6 · N per token, N = parameters taking part in matmuls (all but the input embedding, which is
  a lookup; with tied embeddings the shared matrix counts once, as the output projection);
- attention: per layer and head, QKᵀ and AV each cost 2·d_head FLOPs per (query, key) pair. Causal attention
  within a document of length l has ≈ l²/2 pairs (the causal half), and packed documents never attend to each
  other, so a step has Σ l²/2 pairs over all documents. Forward: 2 matmuls · 2·d_head · H · Σl²/2 =
  2·H·d_head·Σl² per layer; training: 3× that = 6 · n_layers · (H·d_head) · Σ l².
Only real (non-padding) tokens count: padding is work done but not useful, so it lowers MFU.
"""
from __future__ import annotations

import json
import math
import sys
import time
from typing import Callable

from runio.layout import RunPaths
from trainer_bridge.parallel import device as devices
from trainer_bridge.config import ModelConfig, TrainConfig
from trainer_bridge.model.transformer import active_parameters


def dense_flops_per_token(non_embedding_params: int) -> float:
    return 6.0 * non_embedding_params


def attention_flops(n_layers: int, attention_dim: int, sum_squared_segment_lengths: int) -> float:
    return 6.0 * n_layers * attention_dim * sum_squared_segment_lengths


class FlopCounter:
    """``non_embedding_params`` is the N of 6·N: for an MoE model the *active* parameters only (router, shared
    expert and top_k of the experts per token, transformer.active_parameters), not the total."""

    def __init__(self, cfg: ModelConfig):
        self.non_embedding_params = active_parameters(cfg)
        self.n_layers = cfg.n_layers
        self.attention_dim = cfg.dim  # n_heads · head_dim

    def step_flops(self, tokens: int, sum_squared_segment_lengths: int) -> float:
        return (dense_flops_per_token(self.non_embedding_params) * tokens
                + attention_flops(self.n_layers, self.attention_dim, sum_squared_segment_lengths))


def mfu(step_flops: float, step_seconds: float, peak_flops_per_device: float, n_devices: int) -> float:
    return step_flops / (step_seconds * peak_flops_per_device * n_devices)


class MetricsLog:
    """Rank 0 appends one JSON object per logged step; TensorBoard scalars too when the package exists."""

    def __init__(self, paths: RunPaths, enabled: bool, tensorboard: bool):
        self.enabled = enabled
        self._writer = None
        self._file = None
        if not enabled:
            return
        paths.train.mkdir(parents=True, exist_ok=True)
        # One handle for the whole run (a line per step; runio.files.append_jsonl would reopen the file each time).
        self._file = open(paths.metrics_jsonl, "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(paths.tensorboard))
            except ImportError:
                print("corpusmill train: the 'tensorboard' package is not installed; metrics go to "
                      f"{paths.metrics_jsonl} only", file=sys.stderr)

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self._writer is not None:
            step = record.get("step", 0)
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, step)
                elif isinstance(value, dict):  # val_loss_by_domain: one scalar per domain
                    for name, inner in value.items():
                        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                            self._writer.add_scalar(f"{key}/{name}", inner, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._writer is not None:
            self._writer.close()


class StepMetrics:
    """The training loop's metrics component.

    ``measure(step, record, counters)`` is the step's timing point, right after the optimizer step: it adds the
    wall time since the previous timing point (so a validation or a checkpoint after step s counts in step s+1),
    the process CPU time, the data wait, tokens/s, MFU, peak memory and the loop's counters. ``log(step, record,
    position)`` completes the record (time, hardware readings), feeds the Prometheus monitor every step, and
    writes ``metrics.jsonl`` and the console line every ``metrics.log_interval`` steps and on every event or
    validation."""

    def __init__(self, cfg: TrainConfig, paths: RunPaths, runtime: devices.Runtime, monitor,
                 say: Callable[[str], None]):
        self.runtime = runtime
        self.monitor = monitor
        self.say = say
        self.total_steps = cfg.steps
        self.log_interval = cfg.metrics.log_interval
        self.flops = FlopCounter(cfg.model)
        self.peak_flops, self.peak_source = devices.peak_flops(runtime.device, cfg.precision.dtype,
                                                               cfg.metrics.peak_flops)
        self.log_file = MetricsLog(paths, enabled=runtime.is_main, tensorboard=cfg.metrics.tensorboard)
        self.loader = None

    def start(self, loader, first_step: int) -> None:
        """Before the first step: ``loader.wait_seconds`` (cumulative) gives each step's data wait."""
        self.loader, self.first_step = loader, first_step
        self.started = self._last_time = time.perf_counter()
        self._last_cpu = time.process_time()
        self._last_wait = loader.wait_seconds
        devices.reset_peak_memory(self.runtime.device)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def measure(self, step: int, record: dict, counters: dict) -> None:
        devices.synchronize(self.runtime.device)
        now = time.perf_counter()
        step_time, self._last_time = now - self._last_time, now
        # CPU seconds of this process (all threads) for the step: unlike wall time, not inflated when other
        # processes compete for the cores; used by benchmarks/bench_trainer.py.
        cpu_now = time.process_time()
        step_cpu, self._last_cpu = cpu_now - self._last_cpu, cpu_now
        data_wait, self._last_wait = self.loader.wait_seconds - self._last_wait, self.loader.wait_seconds
        step_flops = self.flops.step_flops(record["real_tokens"], record["sum_squared_segment_lengths"])
        record.update(step=step, step_time_s=step_time, process_cpu_s=step_cpu, data_wait_s=data_wait,
                      data_wait_fraction=data_wait / step_time, tokens_per_s=record["real_tokens"] / step_time,
                      mfu=mfu(step_flops, step_time, self.peak_flops, self.runtime.world_size),
                      peak_memory_bytes=devices.peak_memory_bytes(self.runtime.device), **counters)

    def log(self, step: int, record: dict, position: int) -> None:
        """``position``: completed steps now (step + 1, or the checkpoint's step after a rollback)."""
        record["time"] = time.time()
        record.update(self.monitor.hardware())
        self.monitor.observe_step(record)
        if step % self.log_interval and "event" not in record and "val_loss" not in record:
            return
        self.log_file.log(record)
        eta_s = (self.total_steps - position) * self.elapsed() / max(position - self.first_step, 1)
        self.say(f"step {step:>6}/{self.total_steps} eta {eta_s:4.0f}s "
                 f"loss {record['loss']:.4f} gnorm {record['grad_norm']:.3f} "
                 f"lr {record['lr']:.3g} {record['tokens_per_s']:.0f} tok/s mfu {record['mfu']:.3f}"
                 + (f" val {record['val_loss']:.4f}" if "val_loss" in record else "")
                 + (f" [{record['event']}]" if "event" in record else ""))

    def close(self) -> None:
        self.log_file.close()

"""Live monitoring of training: a Prometheus endpoint for the trainer (the cleaning pipelines' counters are pushed
to a Pushgateway by ``runio.pushgateway``, which both sides may import).

The trainer loop feeds ``TrainingMonitor`` the same record it writes to ``metrics.jsonl``; the monitor turns it
into Prometheus series (names in ``configs/monitoring/``: the Grafana dashboard and the alert rules read them).
Hardware is sampled in a background thread: CPU and memory always (psutil), GPUs through NVML when the
``nvidia-ml-py`` package and a driver are present (imported lazily: a CPU machine never needs it).

Each monitor owns its ``CollectorRegistry`` (no process-global state), so several can live in one process
(tests, or one per rank) and each rank serves its own endpoint on ``port + rank``.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runio.layout import RunPaths
from runio.pushgateway import PREFIX

log = logging.getLogger("corpusmill.monitoring")


class MonitoringConfig(BaseModel):
    """The ``monitoring`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    prometheus: bool = Field(True, description="serve /metrics while training")
    host: str = Field("127.0.0.1", description="bind address; 0.0.0.0 exposes the endpoint to the network")
    port: int = Field(9464, ge=0, le=65535, description="rank r serves on port + r; 0: any free port (logged)")
    pushgateway_url: str | None = Field(None, description="e.g. http://127.0.0.1:9091; pipelines push their "
                                                          "counters there at the end of a stage; None: no push")
    push_timeout_s: float = Field(5.0, gt=0, description="seconds a Pushgateway push may take")
    hardware_interval_s: float = Field(5.0, ge=0, description="hardware sampling period; 0: no sampling")
    gpu: bool = Field(True, description="sample GPUs through NVML when present")


# ------------------------------------------------------------------------------------------ hardware

class GpuSampler:
    """NVML readings per GPU; ``available`` is False (and nothing is imported twice) without NVML or a GPU."""

    def __init__(self):
        self.available = False
        self._nvml = None
        self._handles: list = []
        self._missing: set[str] = set()  # readings a device does not have (logged once each)
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
            self.available = bool(self._handles)
        except Exception as error:  # no package, no driver, no device: GPU metrics are simply absent
            log.debug("NVML unavailable: %s", error)

    def sample(self) -> list[dict[str, float]]:
        if not self.available:
            return []
        nv, readings = self._nvml, []
        for handle in self._handles:
            reading: dict[str, float] = {}
            # Each query may be unsupported on a given board (power on some, temperature in some VMs).
            for key, query in (
                ("utilization_percent", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                ("memory_used_bytes", lambda h: nv.nvmlDeviceGetMemoryInfo(h).used),
                ("memory_total_bytes", lambda h: nv.nvmlDeviceGetMemoryInfo(h).total),
                ("temperature_celsius", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                ("power_watts", lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ):
                try:
                    reading[key] = float(query(handle))
                except Exception as error:  # noqa: BLE001 - NVML's own errors: a device without this sensor
                    if key not in self._missing:
                        self._missing.add(key)
                        log.info("GPU %s not readable (%s: %s): left out of the hardware metrics", key,
                                 type(error).__name__, error)
            readings.append(reading)
        return readings

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception as error:  # noqa: BLE001 - closing is best effort: said, not raised
                log.debug("NVML shutdown failed: %s", error)
            self.available = False


def sample_host() -> dict[str, float]:
    import psutil

    memory = psutil.virtual_memory()
    return {"cpu_percent": psutil.cpu_percent(interval=None), "memory_used_bytes": float(memory.used),
            "memory_total_bytes": float(memory.total),
            "process_rss_bytes": float(psutil.Process(os.getpid()).memory_info().rss)}


# ------------------------------------------------------------------------------------------ the exporter

def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# metrics.jsonl key -> (gauge name, help)
STEP_GAUGES = {
    "loss": ("train_loss", "training loss of the last step"),
    "val_loss": ("val_loss", "validation loss at the last evaluation"),
    "lr": ("learning_rate", "learning rate of the last step"),
    "grad_norm": ("grad_norm", "global gradient norm of the last step, before clipping"),
    "tokens_per_s": ("tokens_per_second", "real (non-padding) tokens per second of the last step"),
    "mfu": ("mfu_ratio", "model FLOPs utilization of the last step (0..1)"),
    "data_wait_fraction": ("data_wait_ratio", "share of the last step spent waiting for data (0..1)"),
    "loss_scale": ("loss_scale", "fp16 dynamic loss scale"),
    "peak_memory_bytes": ("peak_memory_bytes", "peak accelerator (or process) memory since start"),
    "skipped_bad_steps": ("skipped_bad_steps", "steps skipped by the NaN/spike guard so far"),
    "skipped_overflow_steps": ("skipped_overflow_steps", "fp16 overflow steps skipped so far"),
    "rollbacks": ("rollbacks", "rollbacks to an earlier checkpoint so far"),
    "tokens_seen": ("tokens_seen", "real tokens trained on so far"),
    "moe_dropped_fraction": ("moe_dropped_ratio", "MoE: share of the last step's expert assignments dropped at "
                             "capacity (0..1)"),
    "moe_aux_loss": ("moe_aux_loss", "MoE: weighted auxiliary losses (load balancing + router z) of the last step"),
}
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class TrainingMonitor:
    """Prometheus series for one training process. Call ``start()`` once, ``observe_step`` after every logged
    step, ``observe_checkpoint`` after every save, ``close()`` at the end (also on errors)."""

    def __init__(self, cfg: MonitoringConfig | None = None, *, run: str = "", rank: int = 0):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.cfg = cfg or MonitoringConfig()
        self.rank = rank
        self.registry = CollectorRegistry()
        self.port: int | None = None
        self._server = None
        self._stop = threading.Event()
        self._sampler_thread: threading.Thread | None = None
        self._followers: list[threading.Thread] = []
        self._gpu: GpuSampler | None = None
        self._lock = threading.Lock()
        self._hardware: dict[str, float] = {}
        labels = {"run": run, "rank": str(rank)}
        self._labels = labels
        names = list(labels)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()):
            return Gauge(f"{PREFIX}_{name}", doc, names + list(extra), registry=self.registry)

        self._step_gauges = {key: gauge(name, doc).labels(**labels) for key, (name, doc) in STEP_GAUGES.items()}
        self._step = gauge("train_step", "last completed optimizer step").labels(**labels)
        self._steps = Counter(f"{PREFIX}_train_steps", "optimizer steps observed", names,
                              registry=self.registry).labels(**labels)
        self._tokens = Counter(f"{PREFIX}_train_tokens", "real tokens processed", names,
                               registry=self.registry).labels(**labels)
        self._step_seconds = Histogram(f"{PREFIX}_step_seconds", "wall time per optimizer step", names,
                                       buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self._data_wait = Histogram(f"{PREFIX}_data_wait_seconds", "time per step spent waiting for data", names,
                                    buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self._ckpt = Histogram(f"{PREFIX}_checkpoint_seconds", "checkpoint save time, end to end", names,
                               buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self._ckpt_blocking = Histogram(f"{PREFIX}_checkpoint_blocking_seconds",
                                        "time training was blocked by a checkpoint save", names,
                                        buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self._durable_lag = gauge("checkpoint_durable_lag_seconds", "age of the oldest checkpoint not yet copied "
                                  "to every durable tier (train.checkpoint.tiers)").labels(**labels)
        self._durable_failures = Counter(f"{PREFIX}_checkpoint_durable_failures", "checkpoint copies to a durable "
                                         "tier that failed or arrived damaged", names,
                                         registry=self.registry).labels(**labels)
        self._durable_failures_seen = 0
        self._ckpt_last = gauge("checkpoint_last_timestamp_seconds", "unix time of the last checkpoint").labels(**labels)
        self._last_step_time = gauge("last_step_timestamp_seconds", "unix time of the last observed step").labels(**labels)
        self._expert_tokens = gauge("moe_expert_tokens", "MoE: tokens routed to an expert in the last step (before "
                                    "capacity dropping)", ("layer", "expert"))
        self._alerts = Counter(f"{PREFIX}_alerts", "alerts fired by the trainer's alert rules", names + ["rule", "action"],
                               registry=self.registry)
        self._cpu = gauge("host_cpu_percent", "host CPU utilization, all cores (0..100)")
        self._mem = gauge("host_memory_used_bytes", "host memory in use")
        self._mem_total = gauge("host_memory_total_bytes", "host memory installed")
        self._rss = gauge("process_resident_memory_bytes", "resident memory of this training process")
        gpu = ("gpu",)
        self._gpu_gauges = {
            "utilization_percent": gauge("gpu_utilization_percent", "GPU utilization (NVML, 0..100)", gpu),
            "memory_used_bytes": gauge("gpu_memory_used_bytes", "GPU memory in use (NVML)", gpu),
            "memory_total_bytes": gauge("gpu_memory_total_bytes", "GPU memory installed (NVML)", gpu),
            "temperature_celsius": gauge("gpu_temperature_celsius", "GPU temperature (NVML)", gpu),
            "power_watts": gauge("gpu_power_watts", "GPU power draw (NVML)", gpu),
        }

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> "TrainingMonitor":
        cfg = self.cfg
        if cfg.prometheus:
            from prometheus_client import start_http_server

            port = cfg.port + self.rank if cfg.port else 0
            try:
                self._server, _ = start_http_server(port, addr=cfg.host, registry=self.registry)
                self.port = self._server.server_port
                log.info("Prometheus metrics on http://%s:%d/metrics", cfg.host, self.port)
            except OSError as error:  # a busy port must not cost a training run: say so and go on
                log.warning("Prometheus endpoint %s:%d not started (%s); set monitoring.port (0: any free port)",
                            cfg.host, port, error)
        if cfg.hardware_interval_s > 0:
            if cfg.gpu:
                self._gpu = GpuSampler()
            self.sample_hardware()
            self._sampler_thread = threading.Thread(target=self._sample_loop, name="corpusmill-hw", daemon=True)
            self._sampler_thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        for thread in [self._sampler_thread, *self._followers]:
            if thread is not None:
                thread.join(timeout=5)
        self._sampler_thread, self._followers = None, []
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._gpu is not None:
            self._gpu.close()

    def __enter__(self) -> "TrainingMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- observations ----------------------------------------------------------------------------------
    def observe_step(self, metrics: dict) -> None:
        """One ``metrics.jsonl`` record (missing keys are fine; NaN leaves a gauge at NaN, which alerts see)."""
        for key, child in self._step_gauges.items():
            if key in metrics and isinstance(metrics[key], (int, float)) and not isinstance(metrics[key], bool):
                child.set(float(metrics[key]))
            elif key in metrics and metrics[key] is None and key in ("loss", "grad_norm"):
                child.set(math.nan)  # MetricsLog writes non-finite values as null
        step = _finite(metrics.get("step"))
        if step is not None:
            self._step.set(step)
        self._steps.inc()
        tokens = _finite(metrics.get("real_tokens"))
        if tokens:
            self._tokens.inc(tokens)
        step_time = _finite(metrics.get("step_time_s"))
        if step_time is not None:
            self._step_seconds.observe(step_time)
        for layer, loads in (metrics.get("moe_expert_load") or {}).items():
            for expert, tokens in enumerate(loads if isinstance(loads, list) else []):
                if _finite(tokens) is not None:
                    self._expert_tokens.labels(**self._labels, layer=str(layer), expert=str(expert)).set(tokens)
        wait = _finite(metrics.get("data_wait_s"))
        if wait is not None:
            self._data_wait.observe(wait)
        self._last_step_time.set(time.time())

    def observe_checkpoint(self, seconds: float, blocking_seconds: float | None = None) -> None:
        self._ckpt.observe(seconds)
        self._ckpt_blocking.observe(seconds if blocking_seconds is None else blocking_seconds)
        self._ckpt_last.set(time.time())

    def observe_durable_tier(self, lag_seconds: float, failures: int) -> None:
        """The tier uploader's lag and its failures so far (a running total: the counter catches up to it)."""
        self._durable_lag.set(lag_seconds)
        if failures > self._durable_failures_seen:
            self._durable_failures.inc(failures - self._durable_failures_seen)
            self._durable_failures_seen = failures

    def observe_alert(self, rule: str, action: str) -> None:
        self._alerts.labels(**self._labels, rule=rule, action=action).inc()

    def hardware(self) -> dict[str, float]:
        """The latest hardware reading, flat: host keys, plus ``gpu_*`` maxima over GPUs (for alert rules and
        for merging into the metrics record)."""
        with self._lock:
            return dict(self._hardware)

    def sample_hardware(self) -> dict[str, float]:
        host = sample_host()
        labels = self._labels
        self._cpu.labels(**labels).set(host["cpu_percent"])
        self._mem.labels(**labels).set(host["memory_used_bytes"])
        self._mem_total.labels(**labels).set(host["memory_total_bytes"])
        self._rss.labels(**labels).set(host["process_rss_bytes"])
        flat = {"host_cpu_percent": host["cpu_percent"], "host_memory_used_bytes": host["memory_used_bytes"],
                "rss_bytes": host["process_rss_bytes"]}
        gpus = self._gpu.sample() if self._gpu is not None else []
        for index, reading in enumerate(gpus):
            for key, value in reading.items():
                self._gpu_gauges[key].labels(**labels, gpu=str(index)).set(value)
        for key, flat_key in (("utilization_percent", "gpu_utilization_percent"),
                              ("memory_used_bytes", "gpu_memory_bytes"), ("temperature_celsius", "gpu_temperature_c"),
                              ("power_watts", "gpu_power_w")):
            values = [r[key] for r in gpus if key in r]
            if values:
                flat[flat_key] = max(values)
        with self._lock:
            self._hardware = flat
        return flat

    def follow(self, paths: RunPaths, poll_s: float = 0.5) -> "TrainingMonitor":
        """Observe the run's ``metrics.jsonl`` and ``alerts.jsonl`` as they grow, from a background thread.

        For a process that does not run the loop itself (``corpusmill run`` supervising a torchrun job): the
        training series then need no call in the loop. Checkpoint times still come from ``observe_checkpoint``.
        """
        logs = {paths.metrics_jsonl: self.observe_step,
                paths.alerts_jsonl: lambda r: self.observe_alert(str(r.get("rule", "?")), str(r.get("action", "warn")))}

        def tail() -> None:
            offsets = {path: 0 for path in logs}
            while True:
                stopping = self._stop.is_set()  # one more read after close(): the last lines count too
                for path, observe in logs.items():
                    for record in self._read_new(path, offsets):
                        observe(record)
                if stopping:
                    return
                self._stop.wait(poll_s)

        thread = threading.Thread(target=tail, name="corpusmill-follow", daemon=True)
        thread.start()
        self._followers.append(thread)
        return self

    @staticmethod
    def _read_new(path, offsets: dict) -> list[dict]:
        """Complete new lines since the last read (a line still being written waits for its newline)."""
        import json

        try:
            with open(path, "rb") as fh:
                fh.seek(offsets[path])
                chunk = fh.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        offsets[path] += end
        records = []
        for line in chunk[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.cfg.hardware_interval_s):
            try:
                self.sample_hardware()
            except Exception as error:  # a sensor hiccup must never end training
                log.debug("hardware sampling failed: %s", error)

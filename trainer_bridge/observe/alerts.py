"""Alert rules on the training metrics: a record in ``train/alerts.jsonl``, a log line, an optional webhook call,
and an action per rule: ``warn`` (only tell), ``pause`` (the loop checkpoints and waits for a resume signal)
or ``stop`` (the loop checkpoints and ends).

Rules look at the record the loop logs each step (``metrics.jsonl`` keys) plus the hardware keys the monitor
adds (``gpu_temperature_c``):

- ``nan``: the loss or the gradient norm is NaN/Inf (or null, as metrics.jsonl stores them);
- ``loss_spike``: loss > factor × the running mean (EMA) of earlier finite losses, after a warm-up;
- ``throughput_drop``: tokens/s < (1 - drop_fraction) × the median of the previous ``window`` steps;
- ``data_wait``: the mean share of step time spent waiting for data over ``window`` steps > max_share;
- ``gpu_temperature``: the hottest GPU is above max_celsius.

A rule that fired stays quiet for ``cooldown_steps`` steps, so a slow stretch gives one alert, not hundreds.
The webhook is POSTed from a background thread with a timeout and retries: training never waits on it.
"""
from __future__ import annotations

import json
import logging
import math
import os
import queue
import statistics
import threading
import time
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from runio.files import append_jsonl, write_json
from runio.layout import RunPaths

log = logging.getLogger("corpusmill.alerts")

Action = Literal["warn", "pause", "stop"]
SEVERITY = {"warn": 0, "pause": 1, "stop": 2}


def run_paths(run_dir: RunPaths | str | os.PathLike) -> RunPaths:
    """A run directory given as a path, or its layout already."""
    return run_dir if isinstance(run_dir, RunPaths) else RunPaths(run_dir)


def resume_signal(paths: RunPaths) -> Path:
    """``train/RESUME``: its mtime releases every pause that began before it."""
    return paths.resume


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="check this rule")
    action: Action = Field("warn", description="when it fires: warn, pause (checkpoint and wait) or stop (checkpoint "
                                               "and end)")


class NanRule(_Rule):
    pass


class LossSpikeRule(_Rule):
    factor: float = Field(2.0, gt=1, description="alert when loss > factor × running mean of earlier losses")
    warmup_steps: int = Field(20, ge=0, description="finite losses seen before spikes are judged")
    ema_beta: float = Field(0.9, gt=0, lt=1, description="smoothing of the running mean of losses")


class ThroughputDropRule(_Rule):
    drop_fraction: float = Field(0.5, gt=0, lt=1, description="alert when tokens/s < (1 - drop) × recent median")
    window: int = Field(20, ge=2, description="steps in the reference median")
    warmup_steps: int = Field(5, ge=0, description="first steps ignored (compilation, cache warm-up)")


class DataWaitRule(_Rule):
    max_share: float = Field(0.3, gt=0, le=1, description="alert when the data wait share of step time exceeds it")
    window: int = Field(10, ge=1, description="steps averaged")


class GpuTemperatureRule(_Rule):
    max_celsius: float = Field(85.0, gt=0, description="alert above this GPU temperature (degrees Celsius)")


class WebhookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="POST each alert as JSON here; None: no webhook")
    timeout_s: float = Field(5.0, gt=0, description="seconds one POST may take")
    retries: int = Field(3, ge=0, description="retries after the first attempt, with doubling back-off")
    backoff_s: float = Field(1.0, ge=0, description="seconds before the first retry, doubling after each")
    close_timeout_s: float = Field(30.0, ge=0, description="at the end of training, the longest wait for alerts "
                                                             "still queued")


class AlertsConfig(BaseModel):
    """The ``alerts`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="check the alert rules")
    nan: NanRule = Field(NanRule(), description="loss or grad norm not finite")
    loss_spike: LossSpikeRule = Field(LossSpikeRule(), description="loss above factor x its running mean")
    throughput_drop: ThroughputDropRule = Field(ThroughputDropRule(),
                                                description="tokens/s below (1 - drop_fraction) x the recent median")
    data_wait: DataWaitRule = Field(DataWaitRule(), description="data-wait share of step time above max_share")
    gpu_temperature: GpuTemperatureRule = Field(GpuTemperatureRule(), description="a GPU hotter than max_celsius")
    cooldown_steps: int = Field(50, ge=0, description="steps a rule stays quiet after it fired")
    webhook: WebhookConfig = Field(WebhookConfig(), description="POST each alert as JSON from a background thread")
    resume_poll_s: float = Field(5.0, gt=0, description="how often a paused trainer looks for the resume signal")


@dataclass
class Alert:
    time: float
    step: int
    rule: str
    action: str
    value: float | None
    threshold: float | None
    message: str

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("value", "threshold"):
            if d[key] is not None and not math.isfinite(d[key]):
                d[key] = None  # JSON has no NaN
        return d


def most_severe(alerts: list[Alert]) -> str | None:
    """The action the loop must take for these alerts: stop > pause > warn; None when there are none."""
    return max((a.action for a in alerts), key=SEVERITY.__getitem__, default=None)


def _value(metrics: dict, key: str) -> float | None:
    v = metrics.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class RuleState:
    """Running state of all rules (reference windows, EMA, cooldowns), separate from the I/O."""

    def __init__(self, cfg: AlertsConfig):
        self.cfg = cfg
        self.loss_mean = 0.0
        self.finite_losses = 0
        self.throughput: deque[float] = deque(maxlen=cfg.throughput_drop.window)
        self.throughput_steps = 0
        self.wait_shares: deque[float] = deque(maxlen=cfg.data_wait.window)
        self.last_fired: dict[str, int] = {}

    def evaluate(self, step: int, metrics: dict, now: float) -> list[Alert]:
        """All rule verdicts for one step (before cooldown), updating the running state."""
        cfg, found = self.cfg, []

        def fire(rule: str, action: str, value, threshold, message: str) -> None:
            found.append(Alert(now, step, rule, action, value, threshold, message))

        loss = _value(metrics, "loss")
        grad_norm = _value(metrics, "grad_norm")
        loss_bad = ("loss" in metrics and (loss is None or not math.isfinite(loss)))
        grad_bad = ("grad_norm" in metrics and (grad_norm is None or not math.isfinite(grad_norm)))
        if cfg.nan.enabled and (loss_bad or grad_bad):
            what = "loss" if loss_bad else "gradient norm"
            fire("nan", cfg.nan.action, loss if loss_bad else grad_norm, None, f"{what} is not finite at step {step}")

        spike = cfg.loss_spike
        if loss is not None and math.isfinite(loss):
            if spike.enabled and self.finite_losses >= spike.warmup_steps and loss > spike.factor * self.loss_mean:
                fire("loss_spike", spike.action, loss, spike.factor * self.loss_mean,
                     f"loss {loss:.4g} > {spike.factor} × running mean {self.loss_mean:.4g}")
            else:  # a spike does not move the reference it is judged against
                self.loss_mean = loss if self.finite_losses == 0 else \
                    spike.ema_beta * self.loss_mean + (1 - spike.ema_beta) * loss
                self.finite_losses += 1

        drop = cfg.throughput_drop
        tps = _value(metrics, "tokens_per_s")
        if tps is not None and math.isfinite(tps):
            self.throughput_steps += 1
            if self.throughput_steps > drop.warmup_steps:
                if drop.enabled and len(self.throughput) == self.throughput.maxlen:
                    reference = statistics.median(self.throughput)
                    floor = (1 - drop.drop_fraction) * reference
                    if tps < floor:
                        fire("throughput_drop", drop.action, tps, floor,
                             f"{tps:.4g} tokens/s < {1 - drop.drop_fraction:.0%} of the recent median {reference:.4g}")
                self.throughput.append(tps)

        wait = cfg.data_wait
        share = _value(metrics, "data_wait_fraction")
        if share is None:
            waited, took = _value(metrics, "data_wait_s"), _value(metrics, "step_time_s")
            share = waited / took if waited is not None and took else None
        if share is not None and math.isfinite(share):
            self.wait_shares.append(share)
            mean = sum(self.wait_shares) / len(self.wait_shares)
            if wait.enabled and len(self.wait_shares) == self.wait_shares.maxlen and mean > wait.max_share:
                fire("data_wait", wait.action, mean, wait.max_share,
                     f"data wait is {mean:.0%} of step time over {wait.window} steps (> {wait.max_share:.0%}): "
                     "the input pipeline is the bottleneck")

        temp_rule = cfg.gpu_temperature
        temperature = _value(metrics, "gpu_temperature_c")
        if temp_rule.enabled and temperature is not None and temperature > temp_rule.max_celsius:
            fire("gpu_temperature", temp_rule.action, temperature, temp_rule.max_celsius,
                 f"GPU at {temperature:.0f} °C (> {temp_rule.max_celsius:.0f} °C)")

        passed = []
        for alert in found:
            last = self.last_fired.get(alert.rule)
            if last is not None and step - last < cfg.cooldown_steps:
                continue
            self.last_fired[alert.rule] = step
            passed.append(alert)
        return passed


class Webhook:
    """POSTs alerts from a daemon thread: timeout per attempt, retries with doubling back-off, never raises."""

    def __init__(self, cfg: WebhookConfig):
        self.cfg = cfg
        self.delivered = 0
        self.failed = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="corpusmill-webhook", daemon=True)
        self._thread.start()

    def send(self, payload: dict) -> None:
        self._queue.put(payload)

    def _post(self, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(self.cfg.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "User-Agent": "corpusmill-alerts"})
        with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as response:
            response.read()

    def _run(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                self._queue.task_done()
                return
            delay = self.cfg.backoff_s
            for attempt in range(self.cfg.retries + 1):
                try:
                    self._post(payload)
                    self.delivered += 1
                    break
                except Exception as error:
                    if attempt == self.cfg.retries:
                        self.failed += 1
                        log.warning("alert webhook %s failed after %d attempt(s): %s", self.cfg.url, attempt + 1, error)
                    else:
                        time.sleep(delay)
                        delay *= 2
            self._queue.task_done()

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (bounded by ``timeout``), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)


class AlertMonitor:
    """Evaluates the rules each step and reports what fired. Only the process that logs metrics (rank 0)
    should own one; the loop then broadcasts ``most_severe(alerts)`` so every rank takes the same action."""

    def __init__(self, cfg: AlertsConfig | None, run_dir: RunPaths | str | os.PathLike, *, run: str = "",
                 clock=time.time):
        self.cfg = cfg or AlertsConfig()
        self.paths = run_paths(run_dir)
        self.run = run or self.paths.name
        self.path = self.paths.alerts_jsonl
        self.state = RuleState(self.cfg)
        self.clock = clock
        self.fired: list[Alert] = []
        self.webhook = Webhook(self.cfg.webhook) if self.cfg.enabled and self.cfg.webhook.url else None

    def observe(self, step: int, metrics: dict) -> list[Alert]:
        if not self.cfg.enabled:
            return []
        alerts = self.state.evaluate(step, metrics, self.clock())
        for alert in alerts:
            self._record(alert)
        return alerts

    def _record(self, alert: Alert) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = alert.to_dict()
        append_jsonl(self.path, record)  # alerts are rare: a file opened per alert costs nothing
        self.fired.append(alert)
        log.warning("alert %s (%s) at step %d: %s", alert.rule, alert.action, alert.step, alert.message)
        if self.webhook is not None:
            self.webhook.send({"run": self.run, **record})

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close(timeout=self.cfg.webhook.close_timeout_s)

    # -- pause / resume --------------------------------------------------------------------------------
    def mark_paused(self, alert: Alert | None = None) -> float:
        """Write ``train/PAUSED`` (what paused, and how to resume); returns the pause time."""
        return mark_paused(self.paths, alert, self.clock())


def mark_paused(run_dir: RunPaths | str | os.PathLike, alert: Alert | None = None, now: float | None = None, *,
                reason: str | None = None, until: float | None = None, resume: str | None = None) -> float:
    """Write ``train/PAUSED``: when, why (the alert, or ``reason``), until when (``until``, epoch seconds, for a
    pause that ends by itself: the schedule's) and how it ends (``resume``; default: the resume command)."""
    now = time.time() if now is None else now
    paths = run_paths(run_dir)
    info = {"paused_at": now, "alert": alert.to_dict() if alert else None,
            "resume": resume or f"corpusmill resume {paths}  (or create {resume_signal(paths)})"}
    if reason is not None:
        info["reason"] = reason
    if until is not None:
        info["until"] = until
        info["until_utc"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until))
    write_json(paths.paused, info)
    return now


def request_resume(run_dir: RunPaths | str | os.PathLike) -> Path:
    """What ``corpusmill resume RUN_DIR`` does: (re)write ``train/RESUME``; its mtime releases every pause
    that began before it."""
    path = resume_signal(run_paths(run_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{time.time()}\n", encoding="utf-8")
    os.utime(path)
    return path


def resume_requested(run_dir: RunPaths | str | os.PathLike, paused_at: float) -> bool:
    try:
        return resume_signal(run_paths(run_dir)).stat().st_mtime >= paused_at
    except FileNotFoundError:
        return False


def wait_for_resume(run_dir: RunPaths | str | os.PathLike, paused_at: float, poll_s: float = 5.0,
                    timeout_s: float | None = None) -> bool:
    """Block until a resume is requested after ``paused_at`` (every rank may call this: nothing is deleted,
    so no rank can miss the signal). Returns False on timeout. Removes ``train/PAUSED`` once resumed."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not resume_requested(run_dir, paused_at):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))
    try:
        run_paths(run_dir).paused.unlink()
    except FileNotFoundError:
        pass  # another rank removed it first
    return True


# -------------------------------------------------------------------------------------------- in the loop

ACTION_CODES = {None: 0, "warn": 1, "pause": 2, "stop": 3}


def action_code(alerts: list[Alert]) -> int:
    """An integer the ranks can max-reduce, so all of them take the most severe action any of them saw."""
    return ACTION_CODES[most_severe(alerts)]


def respond(code: int, *, run_dir: RunPaths | str | os.PathLike, checkpoint, poll_s: float = 5.0,
            alert: Alert | None = None, say=print) -> bool:
    """Carry out an agreed action on every rank. ``warn``: nothing. ``pause``: ``checkpoint()``, then wait for
    ``corpusmill resume RUN_DIR``. ``stop``: ``checkpoint()``. Returns True when training must end."""
    if code < ACTION_CODES["pause"]:
        return False
    checkpoint()
    if code >= ACTION_CODES["stop"]:
        say(f"stopped by an alert{f' ({alert.rule}: {alert.message})' if alert else ''}; checkpoint saved, "
            f"re-run to resume")
        return True
    paused_at = mark_paused(run_dir, alert)
    say(f"paused by an alert{f' ({alert.rule}: {alert.message})' if alert else ''}; checkpoint saved. "
        f"Continue with: corpusmill resume {run_dir}")
    wait_for_resume(run_dir, paused_at, poll_s)
    say("resumed")
    return False


class AlertCheck:
    """The training loop's alert component. ``check(step, record)`` after every step: rank 0 evaluates the rules
    (``AlertMonitor``: alerts.jsonl, log line, webhook) and counts what fired on the Prometheus monitor; every
    rank then takes the most severe action any rank saw (``agree``: a max-reduce over the ranks, so that none
    waits in a collective alone) and carries it out (``respond``). Returns True when training must end."""

    def __init__(self, cfg: AlertsConfig, paths: RunPaths, *, is_main: bool, monitor, agree: Callable[[int], int],
                 checkpoint: Callable[[], None], say: Callable[[str], None]):
        self.cfg, self.paths = cfg, paths
        self.rules = AlertMonitor(cfg, paths, run=paths.name) if is_main else None
        self.monitor, self.agree, self.checkpoint, self.say = monitor, agree, checkpoint, say

    def check(self, step: int, record: dict) -> bool:
        fired = self.rules.observe(step, record) if self.rules is not None else []
        for alert in fired:
            self.monitor.observe_alert(alert.rule, alert.action)
        return respond(self.agree(action_code(fired)), run_dir=self.paths, checkpoint=self.checkpoint,
                       poll_s=self.cfg.resume_poll_s, alert=fired[0] if fired else None, say=self.say)

    def close(self) -> None:
        if self.rules is not None:
            self.rules.close()

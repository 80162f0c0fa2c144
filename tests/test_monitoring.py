"""The Prometheus exporter scraped over 127.0.0.1, the Pushgateway push against a local receiver, and the shipped
Grafana dashboard and alert rules: valid (promtool when installed) and naming only metrics that exist."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from runio.layout import RunPaths
from runio.pushgateway import pipeline_registry, push_pipeline_stats
from trainer_bridge.observe.monitoring import MonitoringConfig, TrainingMonitor

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "configs" / "monitoring"
PROMTOOL_HINT = "make system-tools, or apt-get install -y prometheus"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and all((k, v2) in ls for k, v2 in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def step_record(step: int) -> dict:
    return {"step": step, "loss": 5.0 - step, "val_loss": 4.5, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 1000.0 + step,
            "mfu": 0.25, "data_wait_fraction": 0.1, "data_wait_s": 0.02, "step_time_s": 0.2, "real_tokens": 200,
            "peak_memory_bytes": 123456789, "skipped_bad_steps": 1, "tokens_seen": 200 * (step + 1)}


@pytest.fixture
def monitor():
    cfg = MonitoringConfig(port=0, hardware_interval_s=0.05)
    with TrainingMonitor(cfg, run="demo", rank=0) as m:
        yield m


def test_endpoint_serves_training_and_hardware_metrics(monitor):
    assert monitor.port and monitor.cfg.host == "127.0.0.1"
    for step in range(3):
        monitor.observe_step(step_record(step))
    monitor.observe_checkpoint(1.5, blocking_seconds=0.25)
    monitor.observe_alert("loss_spike", "warn")
    s = scrape(monitor.port)
    labels = {"run": "demo", "rank": "0"}
    assert value(s, "corpusmill_train_loss", **labels) == 3.0
    assert value(s, "corpusmill_tokens_per_second", **labels) == 1002.0
    assert value(s, "corpusmill_mfu_ratio", **labels) == 0.25
    assert value(s, "corpusmill_train_step", **labels) == 2
    assert value(s, "corpusmill_train_steps_total", **labels) == 3
    assert value(s, "corpusmill_train_tokens_total", **labels) == 600
    assert value(s, "corpusmill_step_seconds_count", **labels) == 3
    assert value(s, "corpusmill_step_seconds_sum", **labels) == pytest.approx(0.6)
    assert value(s, "corpusmill_data_wait_seconds_sum", **labels) == pytest.approx(0.06)
    assert value(s, "corpusmill_checkpoint_seconds_sum", **labels) == 1.5
    assert value(s, "corpusmill_checkpoint_blocking_seconds_sum", **labels) == 0.25
    assert value(s, "corpusmill_alerts_total", rule="loss_spike", action="warn") == 1
    # hardware: CPU and memory always; GPU series only where NVML sees a GPU
    assert 0 <= value(s, "corpusmill_host_cpu_percent", **labels) <= 100
    assert value(s, "corpusmill_host_memory_used_bytes", **labels) > 0
    assert value(s, "corpusmill_process_resident_memory_bytes", **labels) > 10 * 2**20
    hardware = monitor.hardware()
    assert hardware["rss_bytes"] > 0
    has_gpu = monitor._gpu is not None and monitor._gpu.available
    assert any(n == "corpusmill_gpu_temperature_celsius" for n, _ in s) == has_gpu
    # an MoE step: dropped share, auxiliary loss, and the tokens routed to each expert of each MoE layer
    monitor.observe_step({"step": 3, "moe_dropped_fraction": 0.125, "moe_aux_loss": 0.0625,
                          "moe_expert_load": {"1": [10, 20, 30, 40], "3": [25, 25, 25, 25]}})
    s = scrape(monitor.port)
    assert value(s, "corpusmill_moe_dropped_ratio", **labels) == 0.125
    assert value(s, "corpusmill_moe_aux_loss", **labels) == 0.0625
    assert value(s, "corpusmill_moe_expert_tokens", **labels, layer="1", expert="3") == 40
    assert value(s, "corpusmill_moe_expert_tokens", **labels, layer="3", expert="0") == 25
    # a NaN loss (null in metrics.jsonl) shows as NaN, which the alert rule `x != x` catches
    monitor.observe_step({"step": 3, "loss": None})
    loss = value(scrape(monitor.port), "corpusmill_train_loss", **labels)
    assert loss != loss


def test_busy_port_does_not_stop_training(monitor, caplog):
    cfg = MonitoringConfig(port=monitor.port, hardware_interval_s=0)
    with caplog.at_level("WARNING", logger="corpusmill.monitoring"):
        with TrainingMonitor(cfg, run="demo") as second:
            second.observe_step(step_record(0))
            assert second.port is None
    assert "not started" in caplog.text


class Gateway(BaseHTTPRequestHandler):
    def do_PUT(self):
        self.server.requests.append((self.path, self.rfile.read(int(self.headers["Content-Length"])).decode()))
        self.send_response(200)
        self.end_headers()

    do_POST = do_PUT

    def log_message(self, *args):
        pass


STATS = {"documents_read": 10, "text_bytes_read": 999, "kept": 6, "quarantined": {"total": 1, "by_kind": {"bad_json": 1}},
         "steps": [{"step": "filters", "in": 9, "kept": 6, "removed": 3, "removed_by_reason": {"gopher_min_words": 3},
                    "busy_seconds": 1.5}],
         "accounting": {"balanced": True}, "cleaning_seconds": 4.0}


def test_pipeline_stats_pushed_to_gateway():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    server.requests = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert push_pipeline_stats(STATS, url, run="demo", stage="prepare")
    finally:
        server.shutdown()
        server.server_close()
    (path, body), = server.requests
    assert path == "/metrics/job/corpusmill_pipeline/run/demo/stage/prepare"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(body) for s in f.samples}
    assert samples[("corpusmill_pipeline_documents_read", ())] == 10
    assert samples[("corpusmill_pipeline_documents_removed", (("reason", "gopher_min_words"), ("step", "filters")))] == 3
    assert samples[("corpusmill_pipeline_documents_quarantined", (("kind", "bad_json"),))] == 1
    assert samples[("corpusmill_pipeline_accounting_balanced", ())] == 1


def test_push_failure_is_a_warning(caplog):
    assert not push_pipeline_stats(STATS, None)  # no gateway configured: nothing to do
    with caplog.at_level("WARNING", logger="corpusmill.pushgateway"):
        assert not push_pipeline_stats(STATS, "http://127.0.0.1:9", timeout_s=1)
    assert "push of" in caplog.text and "stats.json" in caplog.text


def exported_names(monitor) -> set[str]:
    """Every sample name the trainer and the pipeline push can produce (GPU gauges included: declared up front)."""
    names = set()
    for registry in (monitor.registry, pipeline_registry(STATS)):
        for family in registry.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
            if family.type == "counter":
                names.add(family.name + "_total")
            if family.type == "histogram":
                names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def test_dashboard_and_rules_name_only_exported_metrics(monitor):
    monitor.observe_step(step_record(0))
    monitor.observe_alert("nan", "stop")
    names = exported_names(monitor)
    dashboard = json.loads((MONITORING / "grafana_dashboard.json").read_text())
    rules = yaml.safe_load((MONITORING / "alert_rules.yml").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"\bcorpusmill_[a-z_]+", e)}
    assert used and used <= names, sorted(used - names)
    gpu = {"corpusmill_gpu_utilization_percent", "corpusmill_gpu_memory_used_bytes", "corpusmill_gpu_temperature_celsius",
           "corpusmill_gpu_power_watts"}
    assert gpu <= used  # the dashboard shows the GPU series
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def check_rules_schema(doc: dict) -> None:
    """The rule-file schema (what promtool checks first), for machines without promtool."""
    assert set(doc) == {"groups"}
    seen = set()
    for group in doc["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"} and group["name"] not in seen
        seen.add(group["name"])
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]) and rule["expr"].strip()
            assert rule["expr"].count("(") == rule["expr"].count(")")
            if "for" in rule:
                assert re.fullmatch(r"\d+[smhd]", rule["for"])
            assert all(isinstance(v, str) for v in {**rule.get("labels", {}), **rule.get("annotations", {})}.values())


def test_alert_rules_are_valid_prometheus_rules():
    rules_file = MONITORING / "alert_rules.yml"
    check_rules_schema(yaml.safe_load(rules_file.read_text()))
    with pytest.raises(AssertionError):
        check_rules_schema({"groups": [{"name": "g", "rules": [{"alert": "bad name", "expr": "up"}]}]})
    promtool = shutil.which("promtool")
    # `make test` installs promtool (make system-tools): missing is a failure, not a skip
    assert promtool is not None, f"promtool not installed ({PROMTOOL_HINT})"
    for args in (["check", "rules", str(rules_file)], ["check", "config", str(MONITORING / "prometheus.yml")]):
        result = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_endpoint_scraped_during_a_real_training_run(tmp_path):
    """A short real training run (the trainer's own loop and metrics.jsonl) followed by a monitor; the endpoint
    is scraped from inside the run, between steps, and again after it."""
    import numpy as np

    from tokenizer.shards import write_shards
    from trainer_bridge.config import TrainConfig
    from trainer_bridge.loop.train import TrainHooks, train

    rng = np.random.default_rng(0)
    seq_len, vocab = 32, 256
    rows = [(rng.integers(3, vocab, seq_len).astype(np.uint16), [seq_len], [i]) for i in range(64)]
    run = RunPaths(tmp_path)
    write_shards(str(run.shards), rows, split="train", seq_len=seq_len, vocab_size=vocab, pad_id=0, bos_id=1,
                 eos_id=2, tokenizer_sha256="cd" * 32, packing={"algorithm": "test"}, rows_per_shard=64)
    cfg = TrainConfig.model_validate({
        "device": "cpu", "steps": 8, "model": {"dim": 32, "n_layers": 1, "n_heads": 2},
        "batch": {"global_batch_size": 4, "micro_batch_size": 4}, "optimizer": {"warmup_steps": 2},
        "checkpoint": {"enabled": False}, "eval": {"interval": 0}, "metrics": {"tensorboard": False}})
    monitor = TrainingMonitor(MonitoringConfig(port=0, hardware_interval_s=0.2), run="tiny").start()
    monitor.follow(run, poll_s=0.02)
    seen_mid_run = []

    def scrape_mid_run(step, model):
        if step == 6:
            import time

            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                samples = scrape(monitor.port)
                if value(samples, "corpusmill_train_steps_total", run="tiny") >= 6:
                    break
                time.sleep(0.05)
            seen_mid_run.append(samples)

    try:
        result = train(cfg, run, hooks=TrainHooks(after_backward=scrape_mid_run))
    finally:
        monitor.close()
    mid, = seen_mid_run
    assert value(mid, "corpusmill_train_steps_total", run="tiny") == 6
    assert value(mid, "corpusmill_train_loss", run="tiny") == pytest.approx(result.losses[5])
    assert value(mid, "corpusmill_tokens_per_second", run="tiny") > 0
    assert value(mid, "corpusmill_mfu_ratio", run="tiny") > 0
    assert value(mid, "corpusmill_step_seconds_count", run="tiny") == 6
    # close() reads what was written after the last poll: every step is counted
    families = {f.name: f for f in monitor.registry.collect()}
    steps_total = [s.value for s in families["corpusmill_train_steps"].samples if s.name.endswith("_total")]
    assert steps_total == [8]


def test_gpu_readings_through_nvml(monkeypatch):
    """The NVML path, on a machine without a GPU: a stand-in ``pynvml`` module with two boards, one of which has
    no power sensor. Readings become per-GPU series and flat maxima (what the temperature alert reads)."""
    import sys
    import types

    class Board:
        def __init__(self, util, used, temp, power_mw):
            self.util, self.used, self.temp, self.power_mw = util, used, temp, power_mw

    boards = [Board(90, 40 * 2**30, 71, 350_000), Board(30, 10 * 2**30, 88, None)]
    nvml = types.SimpleNamespace(NVML_TEMPERATURE_GPU=0, calls=[])
    nvml.nvmlInit = lambda: nvml.calls.append("init")
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: len(boards)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: boards[i]
    nvml.nvmlDeviceGetUtilizationRates = lambda b: types.SimpleNamespace(gpu=b.util)
    nvml.nvmlDeviceGetMemoryInfo = lambda b: types.SimpleNamespace(used=b.used, total=80 * 2**30)
    nvml.nvmlDeviceGetTemperature = lambda b, sensor: b.temp

    def power(board):
        if board.power_mw is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return board.power_mw

    nvml.nvmlDeviceGetPowerUsage = power
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with TrainingMonitor(MonitoringConfig(port=0, hardware_interval_s=60), run="gpu") as monitor:
        flat = monitor.hardware()
        samples = scrape(monitor.port)
    assert flat["gpu_temperature_c"] == 88 and flat["gpu_utilization_percent"] == 90
    assert flat["gpu_power_w"] == 350.0 and flat["gpu_memory_bytes"] == 40 * 2**30
    assert value(samples, "corpusmill_gpu_temperature_celsius", gpu="1") == 88
    assert value(samples, "corpusmill_gpu_power_watts", gpu="0") == 350.0
    assert not [k for k in samples if k[0] == "corpusmill_gpu_power_watts" and ("gpu", "1") in k[1]]
    assert nvml.calls == ["init", "shutdown"]
    # without the package, no GPU series and no error
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with TrainingMonitor(MonitoringConfig(port=0, hardware_interval_s=60), run="cpu") as monitor:
        assert not any(k.startswith("gpu_") for k in monitor.hardware())

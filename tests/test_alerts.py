"""Alert rules one by one, cooldown, the alerts.jsonl record, the webhook (local HTTP server, retries, never
blocking), and pause/resume through the signal file and `corpusmill resume`."""
from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from trainer_bridge.observe.alerts import (AlertMonitor, AlertsConfig, RuleState, mark_paused, most_severe, request_resume,
                                   resume_requested, wait_for_resume)

ONLY = {rule: {"enabled": False} for rule in ("nan", "loss_spike", "throughput_drop", "data_wait", "gpu_temperature")}


def only(rule: str, **settings) -> AlertsConfig:
    """A config with one rule enabled, no cooldown: each test sees exactly that rule's verdicts."""
    return AlertsConfig(**{**ONLY, rule: {"enabled": True, **settings}}, cooldown_steps=0)


def steps(state: RuleState, records: list[dict]) -> list[tuple[int, str]]:
    return [(s, a.rule) for s, r in enumerate(records) for a in state.evaluate(s, r, 0.0)]


def test_nan_rule_fires_on_nan_inf_and_null():
    state = RuleState(only("nan", action="stop"))
    records = [{"loss": 2.0, "grad_norm": 1.0}, {"loss": math.nan, "grad_norm": 1.0},
               {"loss": 2.0, "grad_norm": math.inf}, {"loss": None, "grad_norm": 1.0}, {"loss": 2.0, "grad_norm": 0.5},
               {"lr": 1e-3}]  # a record without loss says nothing about NaN
    fired = [(s, a) for s, r in enumerate(records) for a in state.evaluate(s, r, 0.0)]
    assert [s for s, _ in fired] == [1, 2, 3]
    assert all(a.action == "stop" for _, a in fired)
    assert "gradient norm" in fired[1][1].message


def test_loss_spike_against_running_mean_after_warmup():
    state = RuleState(only("loss_spike", factor=2.0, warmup_steps=3))
    losses = [3.0, 7.0, 3.0, 3.0, 3.1, 9.5, 3.0, 2.9]  # step 1 is a spike, but inside the warm-up
    assert steps(state, [{"loss": v} for v in losses]) == [(5, "loss_spike")]
    # the spike did not enter the mean it was judged against
    assert state.loss_mean < 3.5


def test_throughput_drop_against_recent_median():
    state = RuleState(only("throughput_drop", drop_fraction=0.5, window=4, warmup_steps=2))
    tps = [10.0, 50.0, 100.0, 100.0, 104.0, 98.0, 101.0, 49.0, 100.0, 60.0]
    # steps 0-1 are warm-up (slow first steps never alert); 49 < 0.5 × median(≈100) fires; 60 does not
    assert steps(state, [{"tokens_per_s": v} for v in tps]) == [(7, "throughput_drop")]


def test_data_wait_share_over_a_window():
    state = RuleState(only("data_wait", max_share=0.3, window=3))
    shares = [0.6, 0.05, 0.05, 0.5, 0.5, 0.5, 0.0, 0.0]
    # 0.6 alone (a cold first batch) is averaged away; a stretch at 0.5 is not
    fired = steps(state, [{"data_wait_fraction": v} for v in shares])
    assert fired == [(4, "data_wait"), (5, "data_wait"), (6, "data_wait")]
    # the share is computed from seconds when the fraction is absent
    state = RuleState(only("data_wait", max_share=0.3, window=1))
    assert steps(state, [{"data_wait_s": 0.5, "step_time_s": 1.0}, {"data_wait_s": 0.1, "step_time_s": 1.0}]) == \
        [(0, "data_wait")]


def test_gpu_temperature_rule():
    state = RuleState(only("gpu_temperature", max_celsius=80, action="pause"))
    fired = steps(state, [{"gpu_temperature_c": 70}, {}, {"gpu_temperature_c": 83}])
    assert fired == [(2, "gpu_temperature")]


def test_cooldown_and_severity():
    cfg = AlertsConfig(**{**ONLY, "nan": {"enabled": True, "action": "pause"}}, cooldown_steps=3)
    state = RuleState(cfg)
    fired = steps(state, [{"loss": math.nan}] * 8)
    assert [s for s, _ in fired] == [0, 3, 6]
    alerts = RuleState(only("nan", action="pause")).evaluate(0, {"loss": math.nan}, 0.0)
    assert most_severe(alerts) == "pause" and most_severe([]) is None


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="loss_spike.action"):
        AlertsConfig(loss_spike={"action": "explode"})
    with pytest.raises(ValidationError, match="data_wait.max_share"):
        AlertsConfig(data_wait={"max_share": 2})


class Hook(BaseHTTPRequestHandler):
    """Fails the first ``fail_first`` requests with 503, then records the JSON bodies."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.attempts += 1
        if server.attempts <= server.fail_first:
            self.send_response(503)
            self.end_headers()
            return
        if server.delay:
            time.sleep(server.delay)
        server.bodies.append(body)
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")
        except OSError:
            pass  # the client timed out first (the slow-receiver test)

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.attempts, server.fail_first, server.bodies, server.delay = 0, 0, [], 0.0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_monitor_writes_record_log_and_webhook_with_retries(tmp_path, hook_server, caplog):
    hook_server.fail_first = 2
    url = f"http://127.0.0.1:{hook_server.server_address[1]}/alert"
    cfg = AlertsConfig(**{**ONLY, "nan": {"action": "stop"}}, webhook={"url": url, "retries": 3, "backoff_s": 0.05})
    monitor = AlertMonitor(cfg, tmp_path / "run", run="r1", clock=lambda: 1234.5)
    with caplog.at_level("WARNING", logger="corpusmill.alerts"):
        alerts = monitor.observe(42, {"loss": math.nan, "grad_norm": 1.0})
    monitor.close()
    assert most_severe(alerts) == "stop"
    record = json.loads((tmp_path / "run" / "train" / "alerts.jsonl").read_text())
    assert record == {"time": 1234.5, "step": 42, "rule": "nan", "action": "stop", "value": None, "threshold": None,
                      "message": "loss is not finite at step 42"}
    assert "alert nan (stop) at step 42" in caplog.text
    assert hook_server.attempts == 3 and hook_server.bodies == [{"run": "r1", **record}]
    assert monitor.webhook.delivered == 1


def test_webhook_never_blocks_training(tmp_path, hook_server):
    hook_server.delay = 1.0  # a slow receiver, and a timeout shorter than its answer
    url = f"http://127.0.0.1:{hook_server.server_address[1]}/"
    cfg = AlertsConfig(**{**ONLY, "nan": {}}, cooldown_steps=0, webhook={"url": url, "timeout_s": 0.2, "retries": 1,
                                                                             "backoff_s": 0.0})
    monitor = AlertMonitor(cfg, tmp_path)
    started = time.perf_counter()
    for step in range(5):
        monitor.observe(step, {"loss": math.nan})
    assert time.perf_counter() - started < 0.5  # five alerts recorded without waiting on the receiver
    monitor.close()
    assert monitor.webhook.failed == 5 and monitor.webhook.delivered == 0  # each timed out, was retried, given up
    assert len((tmp_path / "train" / "alerts.jsonl").read_text().splitlines()) == 5


def test_unreachable_webhook_only_warns(tmp_path, caplog):
    cfg = AlertsConfig(**{**ONLY, "nan": {}}, webhook={"url": "http://127.0.0.1:9/x", "retries": 0, "timeout_s": 0.5})
    monitor = AlertMonitor(cfg, tmp_path)
    with caplog.at_level("WARNING", logger="corpusmill.alerts"):
        monitor.observe(0, {"loss": math.inf})
        monitor.close()
    assert "webhook http://127.0.0.1:9/x failed after 1 attempt(s)" in caplog.text


def test_pause_waits_for_resume_signal_and_cli(tmp_path):
    run_dir = tmp_path / "run"
    paused_at = mark_paused(run_dir)
    assert (run_dir / "train" / "PAUSED").exists()
    assert not wait_for_resume(run_dir, paused_at, poll_s=0.01, timeout_s=0.1)

    released = []
    waiter = threading.Thread(target=lambda: released.append(wait_for_resume(run_dir, paused_at, poll_s=0.01)))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive()
    import argparse

    from cli import report as cmd_report

    parser = argparse.ArgumentParser()
    cmd_report.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["resume", str(run_dir)])
    assert args.handler(args) == 0
    waiter.join(5)
    assert released == [True] and not (run_dir / "train" / "PAUSED").exists()
    # an old resume signal does not release a later pause
    later = mark_paused(run_dir, now=time.time() + 60)
    assert not resume_requested(run_dir, later)
    request_resume(run_dir)
    assert resume_requested(run_dir, paused_at)


def test_respond_checkpoints_then_pauses_or_stops(tmp_path):
    from trainer_bridge.observe.alerts import ACTION_CODES, action_code, respond

    saved, said = [], []
    assert not respond(ACTION_CODES["warn"], run_dir=tmp_path, checkpoint=lambda: saved.append(1), say=said.append)
    assert saved == [] and said == []
    assert respond(ACTION_CODES["stop"], run_dir=tmp_path, checkpoint=lambda: saved.append("stop"), say=said.append)
    assert saved == ["stop"] and "stopped by an alert" in said[-1]

    alert = RuleState(only("gpu_temperature", action="pause")).evaluate(3, {"gpu_temperature_c": 99}, 0.0)
    assert action_code(alert) == ACTION_CODES["pause"]
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(respond(
        action_code(alert), run_dir=tmp_path, checkpoint=lambda: saved.append("pause"), poll_s=0.01,
        alert=alert[0], say=said.append)))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive() and saved[-1] == "pause" and (tmp_path / "train" / "PAUSED").exists()
    assert "corpusmill resume" in said[-1]
    paused = json.loads((tmp_path / "train" / "PAUSED").read_text())
    assert paused["alert"]["rule"] == "gpu_temperature"
    request_resume(tmp_path)
    worker.join(5)
    assert outcome == [False] and said[-1] == "resumed"

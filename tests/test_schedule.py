"""Schedule windows (trainer_bridge/loop/schedule.py): the windows' arithmetic, and a run that pauses with a
checkpoint when its window closes and goes on at the next one with the losses of an uninterrupted run, also
across a restart during the pause. An injected clock: no test sleeps."""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from scenario_configs import base_config, run_with_shards  # noqa: E402

from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.loop.schedule import Schedule, ScheduleConfig, wait_for_window  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402


def at(text: str, zone=timezone.utc) -> float:
    """'2026-12-04 23:00' (a Friday) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=zone).timestamp()


class FakeClock:
    """Epoch seconds that move only when told: by ``sleep`` (the pause) or by the test (time a step takes)."""

    def __init__(self, now: float, power_cut_during_sleep: bool = False):
        self.t, self.slept, self.power_cut = now, [], power_cut_during_sleep

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if self.power_cut:
            raise SystemExit("the machine was switched off during the pause")
        self.slept.append(seconds)
        self.t += seconds


def test_windows_open_close_and_next():
    s = Schedule(ScheduleConfig(windows=["22:00-07:00", "Sat 00:00-Sun 23:59"]))
    assert s.is_open(at("2026-12-01 23:30")) and s.is_open(at("2026-12-02 06:59"))  # Tue night, past midnight
    assert not s.is_open(at("2026-12-02 07:00")) and not s.is_open(at("2026-12-02 12:00"))
    assert s.next_open(at("2026-12-02 12:00")) == at("2026-12-02 22:00")
    assert s.closes_at(at("2026-12-02 03:00")) == at("2026-12-02 07:00")
    # Friday night runs into the weekend, the weekend into Sunday night: one window until Monday 07:00
    assert s.closes_at(at("2026-12-04 23:00")) == at("2026-12-07 07:00")
    assert s.is_open(at("2026-12-05 14:00")) and not s.is_open(at("2026-12-07 08:00"))
    berlin = Schedule(ScheduleConfig(windows=["22:00-07:00"], timezone="Europe/Berlin"))
    assert not berlin.is_open(at("2026-12-01 20:30"))  # 21:30 CET
    assert berlin.is_open(at("2026-12-01 21:30"))  # 22:30 CET
    assert berlin.next_open(at("2026-12-01 12:00")) == at("2026-12-01 21:00")
    assert Schedule(ScheduleConfig()).always_open and Schedule(ScheduleConfig()).is_open(0.0)


def test_wait_for_window_sleeps_on_the_injected_clock():
    clock = FakeClock(at("2026-12-02 12:00"))
    waited = wait_for_window(Schedule(ScheduleConfig(windows=["22:00-07:00"])), clock, say=lambda line: None)
    assert waited == 10 * 3600 and clock.t == at("2026-12-02 22:00")


def test_schedule_errors_name_the_field():
    with pytest.raises(ValidationError, match=r"schedule\.windows"):
        TrainConfig.model_validate({"schedule": {"windows": ["25:00-07:00"]}})
    with pytest.raises(ValidationError, match=r"not a day"):
        TrainConfig.model_validate({"schedule": {"windows": ["Sam 00:00-Sun 23:59"]}})
    with pytest.raises(ValidationError, match=r"schedule\.timezone"):
        TrainConfig.model_validate({"schedule": {"timezone": "Mars/Olympus"}})


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "shards"
    write_synthetic_shards(path)
    return path


def windowed(windows: list[str]) -> TrainConfig:
    return base_config({"model": {"n_layers": 2}, "steps": 6, "eval": {"interval": 0},
                        "batch": {"global_batch_size": 4, "micro_batch_size": 2},
                        "checkpoint": {"interval": 100}, "schedule": {"windows": windows}})


def twenty_minutes_a_step(clock: FakeClock) -> TrainHooks:
    def on_step(step, record):
        clock.t += 20 * 60

    return TrainHooks(on_step=on_step)


def test_a_run_pauses_at_the_window_end_and_resumes_bit_identically(shards, tmp_path):
    """Window 22:00-23:00 UTC, 20 minutes a step, started at 22:00: steps 0-2 fit; at 23:00 the run checkpoints
    step 3, pauses (PAUSED says why and until when) and goes on at 22:00 next day; the losses equal a run with no
    schedule. A second run is switched off during its pause and restarted in the next window: it resumes from
    the pause's checkpoint, again with the same losses."""
    reference = train(windowed([]), run_with_shards(tmp_path / "ref", shards))

    clock = FakeClock(at("2026-12-01 22:00"))
    run = run_with_shards(tmp_path / "paused", shards)
    hooks = twenty_minutes_a_step(clock)
    paused = train(windowed(["22:00-23:00"]), run, hooks=hooks, clock=clock)
    assert clock.slept == [23 * 3600]  # 23:00 → 22:00 the next day
    pauses = [e for e in paused.events if e["event"] == "schedule pause"]
    assert [(e["step"], e["until"]) for e in pauses] == [(3, at("2026-12-02 22:00"))]
    assert [e["step"] for e in paused.events if e["event"] == "checkpoint"] == [3, 6]
    assert paused.losses == reference.losses
    assert not run.paused.exists()  # removed when the window opened

    cut_clock = FakeClock(at("2026-12-01 22:00"), power_cut_during_sleep=True)
    cut = run_with_shards(tmp_path / "cut", shards)
    with pytest.raises(SystemExit):
        train(windowed(["22:00-23:00"]), cut, hooks=twenty_minutes_a_step(cut_clock), clock=cut_clock)
    info = json.loads(cut.paused.read_text())
    assert "outside the schedule windows (22:00-23:00)" in info["reason"]
    assert info["until"] == at("2026-12-02 22:00") and info["until_utc"] == "2026-12-02 22:00:00 UTC"
    assert "resumes by itself" in info["resume"]

    morning = FakeClock(at("2026-12-02 21:00"))  # restarted before the next window: waits, then resumes
    rest = train(windowed(["22:00-23:00"]), cut, hooks=twenty_minutes_a_step(morning), clock=morning)
    assert morning.slept == [3600]
    assert rest.resumed_from == "step-00000003"
    assert rest.losses == {s: reference.losses[s] for s in range(3, 6)}


def test_refresh_waits_or_exits_outside_the_windows(tmp_path, capsys):
    from runio.errors import ExitCode
    from trainer_bridge.loop.schedule import refresh_gate

    said = []
    cfg = ScheduleConfig(windows=["22:00-07:00"])
    clock = FakeClock(at("2026-12-02 12:00"))
    assert refresh_gate(cfg, clock, said.append) is None and clock.t == at("2026-12-02 22:00")  # waited
    assert "waiting until Wed 2026-12-02 22:00 UTC" in said[0]
    assert refresh_gate(cfg.model_copy(update={"outside": "exit"}), FakeClock(at("2026-12-02 22:30")),
                        said.append) is None  # inside: runs
    assert refresh_gate(cfg.model_copy(update={"outside": "exit"}), FakeClock(at("2026-12-02 12:00")),
                        said.append) == ExitCode.OUTSIDE_WINDOW == 75

    # the command: a window six hours from now, outside: exit → 75 and one line, before any stage starts
    import time

    from cli.main import main

    start = time.gmtime(time.time() + 6 * 3600)
    end = time.gmtime(time.time() + 7 * 3600)
    window = f"{start.tm_hour:02d}:{start.tm_min:02d}-{end.tm_hour:02d}:{end.tm_min:02d}"
    config = tmp_path / "refresh.yaml"
    config.write_text(json.dumps({"name": "r", "input": {"paths": [str(tmp_path / "new")]},
                                  "output": {"runs_dir": str(tmp_path / "runs")},
                                  "train": {"schedule": {"windows": [window], "outside": "exit"}}}))
    code = main(["refresh", str(config), "--against", str(tmp_path / "runs" / "base")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 75 and len(err) == 1 and "outside the schedule windows" in err[0], err
    assert not (tmp_path / "runs" / "r").exists()


def test_windows_and_tiers_do_not_change_the_train_stage_fingerprint(tmp_path):
    from pipelines.config import validate_config
    from pipelines.run import stage_settings

    base = {"name": "f", "input": {"paths": [str(tmp_path)]}}
    plain = validate_config(base)
    scheduled = validate_config({**base, "train": {"schedule": {"windows": ["22:00-07:00"], "timezone": "UTC"},
                                                   "checkpoint": {"tiers": [{}, {"path": str(tmp_path)}]}}})
    assert stage_settings(plain, "train") == stage_settings(scheduled, "train")
    longer = validate_config({**base, "train": {"steps": 5}})
    assert stage_settings(plain, "train") != stage_settings(longer, "train")  # the check can fail

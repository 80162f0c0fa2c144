"""`corpusmill sweep`: Optuna study over real (tiny) trainings on shards prepared from the demo corpus.

One tiny run is prepared once (240 English demo documents, cheap cleaning, 512-token BPE, rows of 64); every
test sweeps in its own run directory whose shards and tokenizer link to it.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import optuna  # the `sweep` extra, which `make test` installs: missing is an error, not a skip
from experiments.sweep import read_overlay, run_sweep, shares
from pipelines.config import ConfigError, load_config  # noqa: E402
from runio.layout import RunPaths, SweepPaths  # noqa: E402
from test_report import CHROMEDRIVER, CHROMIUM, chromium, colored_pixels, empty_charts  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]

SPACE = {"train.optimizer.lr": {"type": "float", "low": 1.0e-5, "high": 3.0e-2, "log": True},
         "train.optimizer.warmup_steps": {"type": "int", "low": 0, "high": 3}}


def base_config(root: Path, name: str, docs: Path) -> dict:
    return {
        "name": name, "input": {"paths": [str(docs)]}, "output": {"runs_dir": str(root)},
        "runner": {"name": "inprocess", "workers": 1},
        "quality": {"enabled": False}, "near_dedup": {"enabled": False}, "pii": {"enabled": False},
        "tokenizer": {"vocab_size": 512}, "packing": {"seq_len": 64, "val_fraction": 0.1},
        "train": {"device": "cpu", "model": {"dim": 32, "n_layers": 1, "n_heads": 2},
                  "batch": {"global_batch_size": 4, "micro_batch_size": 4},
                  "optimizer": {"lr": 0.003, "warmup_steps": 0}, "checkpoint": {"enabled": False},
                  "eval": {"interval": 2, "max_rows": 8}, "metrics": {"tensorboard": False}, "steps": 6},
        "sweep": {"space": SPACE, "trials": 4, "pruner_startup_trials": 1},
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, demo_corpus) -> tuple[Path, Path]:
    """(runs dir, docs file) with run 'base' prepared: shards and tokenizer."""
    from pipelines.config import validate_config
    from pipelines.run import DATA_STAGES, run_stages

    root = tmp_path_factory.mktemp("sweep")
    docs = root / "small.jsonl"
    docs.write_text("".join(json.dumps(r) + "\n" for r in [r for r in demo_corpus if r["lang"] == "en"][:240]))
    run_stages(validate_config(base_config(root, "base", docs)), DATA_STAGES, log=lambda line: None)
    return root, docs


def new_run(prepared, name: str, **sweep) -> tuple[dict, Path]:
    """A run directory named ``name`` reading the prepared shards; returns (config dict, config file)."""
    root, docs = prepared
    base = RunPaths(root / "base")
    run = RunPaths(root / name)
    run.root.mkdir()
    run.shards.symlink_to(base.shards)
    run.tokenizer_dir.symlink_to(base.tokenizer_dir)
    data = base_config(root, name, docs)
    data["sweep"].update(sweep)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return data, path


def metrics_lines(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in (RunPaths(run_dir).metrics_jsonl).read_text().splitlines()]


def test_sweep_prunes_and_writes_a_usable_best_overlay(prepared):
    # a known-good point and a hopeless one first (sweep.enqueue), then TPE proposes the rest
    _, path = new_run(prepared, "tpe", enqueue=[{"train.optimizer.lr": 0.01, "train.optimizer.warmup_steps": 0},
                                                {"train.optimizer.lr": 1.0e-5, "train.optimizer.warmup_steps": 3},
                                                {"train.optimizer.lr": 0.02, "train.optimizer.warmup_steps": 0}])
    cfg = load_config(path)
    summary = run_sweep(cfg, log=lambda line: None)
    study = optuna.load_study(study_name="tpe", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(SweepPaths(RunPaths.of(cfg)).journal))))
    states = [t.state.name for t in study.trials]
    assert len(states) == 4 and set(states) <= {"COMPLETE", "PRUNED"}
    assert "PRUNED" in states and "COMPLETE" in states
    assert isinstance(study.sampler, optuna.samplers.TPESampler) or summary["sampler"] == "tpe"
    assert study.trials[1].state.name == "PRUNED"  # lr 1e-5 cannot beat the first trial at its first report

    run_dirs = {t["run_dir"] for t in summary["trials"]}
    assert len(run_dirs) == 4  # each trial its own run directory ...
    for t in study.trials:
        lines = metrics_lines(t.user_attrs["run_dir"])  # ... and its own metrics, written by the trainer
        trained = json.loads((RunPaths(t.user_attrs["run_dir"]).train_config).read_text())
        assert trained["optimizer"]["lr"] == pytest.approx(t.params["train.optimizer.lr"])
        assert trained["steps"] == 6
        val = {m["step"] + 1: m["val_loss"] for m in lines if "val_loss" in m}
        assert val == pytest.approx(t.intermediate_values)  # what the pruner saw is what the trainer logged
        if t.state.name == "PRUNED":
            assert len(lines) < 6
        else:
            assert len(lines) == 6 and t.value == pytest.approx(val[6])

    best = min((t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    paths = SweepPaths(RunPaths.of(cfg))
    overlay = yaml.safe_load(paths.best_yaml.read_text())
    assert overlay["train"]["optimizer"]["lr"] == pytest.approx(best.params["train.optimizer.lr"])
    applied = load_config(path, read_overlay(paths.best_yaml))  # usable as --set items
    assert applied.train.optimizer.lr == pytest.approx(best.params["train.optimizer.lr"])
    assert applied.train.optimizer.warmup_steps == best.params["train.optimizer.warmup_steps"]
    from_set = load_config(path, paths.best_set.read_text().split())
    assert from_set.train == applied.train

    # a second call finds the study finished: nothing is trained again
    mtimes = {d: os.path.getmtime(RunPaths(d).metrics_jsonl) for d in run_dirs}
    again = run_sweep(cfg, log=lambda line: None)
    assert again["counts"] == summary["counts"]
    assert {d: os.path.getmtime(RunPaths(d).metrics_jsonl) for d in run_dirs} == mtimes

    # the report's Sweep section
    from report.build import build_report

    html = build_report(RunPaths.of(cfg)).read_text(encoding="utf-8")
    assert '<section id="sweep">' in html
    for chart in ("sweep-history", "sweep-parallel", "sweep-importance", "sweep-intermediate", "sweep-states"):
        assert f'data-chart="{chart}"' in html


def finished(journal: Path, name: str) -> list:
    if not journal.is_file():  # the sweep has not created its study yet
        return []
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return []
    return [t for t in study.get_trials(deepcopy=False) if t.state.name in ("COMPLETE", "PRUNED")]


def test_sweep_killed_after_two_trials_resumes_to_exactly_four(prepared):
    _, path = new_run(prepared, "killed", pruner="none")
    journal = SweepPaths(RunPaths(prepared[0] / "killed")).journal
    command = [sys.executable, "-m", "cli.main", "sweep", str(path), "--trials", "4"]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None and len(finished(journal, "killed")) < 2:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = {t.number: (t.value, t.datetime_complete, t.params) for t in finished(journal, "killed")}
    assert 2 <= len(before) < 4, f"the sweep was not killed mid-way: {len(before)} finished"
    mtimes = {n: os.path.getmtime(RunPaths(prepared[0] / "killed" / "sweep" / "trials" / f"{n:04d}").metrics_jsonl)
              for n in before}

    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    after = finished(journal, "killed")
    assert len(after) == 4
    for t in after:  # the trials finished before the kill are the same records, not trained again
        if t.number in before:
            assert (t.value, t.datetime_complete, t.params) == before[t.number]
            assert os.path.getmtime(RunPaths(t.user_attrs["run_dir"]).metrics_jsonl) == mtimes[t.number]
    new = [t for t in after if t.number not in before]
    assert len(new) == 4 - len(before)
    study = optuna.load_study(study_name="killed", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))))
    # a trial running at the kill is marked failed (its budget reused), never left running
    assert all(t.state.name in ("COMPLETE", "PRUNED", "FAIL") for t in study.trials)


def test_parallel_trials_run_at_once(prepared):
    _, path = new_run(prepared, "parallel", pruner="none", trials=2, parallel=2)
    cfg = load_config(path)
    summary = run_sweep(cfg, log=lambda line: None)
    assert summary["counts"] == {"COMPLETE": 2}
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
        str(SweepPaths(RunPaths.of(cfg)).journal)))
    a, b = optuna.load_study(study_name="parallel", storage=storage).trials
    assert a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete  # overlapping
    assert a.params != b.params  # the workers' samplers are seeded differently


def test_sweep_config_errors(prepared, tmp_path):
    root, docs = prepared
    data = base_config(root, "bad", docs)
    from pipelines.config import validate_config

    with pytest.raises(ConfigError, match="train.optimizer.lr"):
        validate_config({**data, "sweep": {"space": {"optimizer.lr": SPACE["train.optimizer.lr"]}}})
    with pytest.raises(ConfigError, match="log-scaled"):
        validate_config({**data, "sweep": {"space": {"train.optimizer.lr": {"type": "float", "low": 0, "high": 1,
                                                                            "log": True}}}})
    cfg = validate_config({**data, "sweep": {"space": SPACE, "budget_steps": 5}})
    with pytest.raises(ConfigError, match="multiple of the validation interval"):
        run_sweep(cfg, log=lambda line: None)
    with pytest.raises(ConfigError, match="sweep.space is empty"):
        run_sweep(validate_config({**data, "sweep": {}}), log=lambda line: None)
    assert shares(5, 2) == [3, 2] and shares(1, 3) == [1]
    assert math.isclose(sum(shares(7, 3)), 7)


def test_sweep_section_draws_in_chromium(prepared, chromium):
    """The Sweep charts draw in headless Chromium: SVG marks and data colours in every one."""
    report = RunPaths(prepared[0] / "tpe").report_html
    assert report.is_file(), "test_sweep_prunes_and_writes_a_usable_best_overlay writes this report"
    empty = empty_charts(chromium, report)
    assert {k: v for k, v in empty.items() if k.startswith("sweep")} == {}
    drawn = chromium.execute_script("return Array.from(document.querySelectorAll('#sweep div.chart'))"
                                    ".map(b => b.dataset.chart)")
    assert len(drawn) == 5
    # parallel coordinates: one polyline per complete trial across objective + 2 parameters
    lines = chromium.execute_script("return document.getElementById('chart-sweep-parallel').data"
                                    ".filter(t => t.mode === 'lines').map(t => t.x.length)")
    assert len(lines) >= 2 and set(lines) == {3}
    history = chromium.execute_script("return document.getElementById('chart-sweep-history').data[0].y")
    assert len(history) >= 2 and all(math.isfinite(v) for v in history)

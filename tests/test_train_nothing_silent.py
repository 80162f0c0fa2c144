"""Nothing lost and nothing silent in training (issue 17, the trainer's side).

- retention never deletes the newest sound checkpoint; every checkpoint damaged → exit 4 naming them, and
  ``--from-scratch`` starts over with the old ones set aside;
- a checkpoint records the resolved model config and the shards; a resume with another ``n_layers``/``dim`` or
  other shards is refused in one line (exit 4), before any rank starts;
- a flipped byte in a shard stops the run, the shard named;
- SIGINT (one process, and torchrun with 2 ranks) → at most 3 lines on stderr, exit 130, the last checkpoint kept
  and resumed from (SIGTERM to one process: the same, exit 143); a read-only run directory → one line, exit 5;
- a checkpoint past ``train.steps``, and ``checkpoint.resume: false`` beside checkpoints, are refused (exit 4);
  ``--from-scratch`` sets every training log aside with the checkpoints;
- during a 2-rank run no socket of the job listens outside 127.0.0.0/8 (the rendezvous store included), as
  /proc/net/tcp{,6} and `ss -ltnp` (where installed) show it;
- the report's training facts agree with the console, and its restarts table tells a restart after a failure,
  a resume after an interruption and a deliberate extension of ``train.steps`` apart, with readable times.

CLI runs are subprocesses of ``corpusmill train`` (a refusal happens before torch starts a rank: seconds); the
only torchrun launches are the 2-rank interrupt and its resume. Waits are bounded generously (a loaded machine
is slow, never wrong).
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import run_with_shards  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge import hf  # noqa: E402
from trainer_bridge.checkpoint import run_model  # noqa: E402
from trainer_bridge.checkpoint.store import (  # noqa: E402
    LATEST,
    MODEL_CONFIG_FILE,
    PROVENANCE_FILE,
    checkpoint_problem,
    latest_checkpoint,
    prune_checkpoints,
    step_dir_name,
    write_checksums,
)
from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.outcomes import TrainRefused  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import train  # noqa: E402

TRAIN = {"device": "cpu", "steps": 4, "seed": 3,
         "model": {"dim": 32, "n_layers": 2, "n_heads": 2, "multiple_of": 16},
         "batch": {"global_batch_size": 4, "micro_batch_size": 2},
         "optimizer": {"lr": 3e-3, "warmup_steps": 2},
         "checkpoint": {"interval": 2, "keep_last": 2}, "eval": {"interval": 0},
         "metrics": {"tensorboard": False, "peak_flops": 1e11}, "monitoring": {"prometheus": False},
         "alerts": {"enabled": False}, "collective_timeout_s": 120, "connect_timeout_s": 300}
WAIT_S = 900  # bound of any wait on a subprocess: generous, a loaded machine is slow


def merged(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def make_run(root: Path, name: str, train_overrides: dict | None = None, *, seed: int = 0) -> tuple[Path, RunPaths]:
    runs = root / "runs"
    paths = RunPaths(runs / name)
    write_synthetic_shards(paths.shards, seed=seed)
    config = {"name": name, "input": {"paths": ["unused.jsonl"]}, "output": {"runs_dir": str(runs)},
              "train": merged(TRAIN, train_overrides or {})}
    config_file = root / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    return config_file, paths


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def cli(config_file: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "train", str(config_file), *extra], cwd=REPO,
                          env=env(), capture_output=True, text=True, timeout=WAIT_S, **kwargs)


def start(config_file: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "train", str(config_file), *extra], cwd=REPO,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_one_line(done: subprocess.CompletedProcess, code: int) -> str:
    lines = stderr_lines(done.stderr)
    assert done.returncode == code, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return lines[0]


def flip_byte(path: Path, where: float = 0.5) -> None:
    raw = bytearray(path.read_bytes())
    raw[int(len(raw) * where)] ^= 0x01
    path.write_bytes(bytes(raw))


def damage(checkpoint: Path) -> None:
    flip_byte(max((p for p in checkpoint.iterdir() if p.suffix == ".distcp"), key=lambda p: p.stat().st_size))


def logged_steps(paths: RunPaths) -> list[int]:
    if not paths.metrics_jsonl.exists():
        return []
    steps = []
    for line in paths.metrics_jsonl.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue  # a line being written
    return steps


def cfg(overrides: dict | None = None) -> TrainConfig:
    return TrainConfig.model_validate(merged(TRAIN, overrides or {}))


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "shards"
    write_synthetic_shards(path)
    return path


# -- retention ----------------------------------------------------------------------------------------------
def fake_checkpoint(root: Path, step: int) -> Path:
    path = root / step_dir_name(step)
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"meta")
    (path / "__0_0.distcp").write_bytes(bytes(range(256)) * 4)
    write_checksums(path)
    (root / LATEST).write_text(path.name + "\n")
    return path


def test_pruning_counts_only_sound_checkpoints(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8):
        fake_checkpoint(root, step)
    damage(root / step_dir_name(8))
    damage(root / step_dir_name(6))
    # keep_last 2: the newest two are damaged, so the two sound ones below them stay, and nothing older goes
    assert prune_checkpoints(root, keep_last=2) == []
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [step_dir_name(s) for s in (2, 4, 6, 8)]
    assert prune_checkpoints(root, keep_last=1) == [root / step_dir_name(2)]  # older than the newest sound one
    assert (root / step_dir_name(4)).is_dir() and checkpoint_problem(root / step_dir_name(4)) is None
    fake_checkpoint(root, 10)
    # a new sound checkpoint: everything older than it goes, the damaged ones included
    assert prune_checkpoints(root, keep_last=1) == [root / step_dir_name(s) for s in (8, 6, 4)]
    assert not list(root.glob("*.deleting"))


def test_retention_keeps_the_last_sound_checkpoint_and_records_model_and_shards(shards, tmp_path):
    run = run_with_shards(tmp_path / "run", shards)
    train(cfg({"steps": 4}), run)  # checkpoints 2 and 4 (keep_last 2)
    root = run.checkpoints
    newest = root / step_dir_name(4)
    # the checkpoint is self-describing: the resolved model config (read by hf) and the shards it was trained on
    assert MODEL_CONFIG_FILE == hf.MODEL_CONFIG_FILE
    model = json.loads((newest / MODEL_CONFIG_FILE).read_text())
    assert model["n_layers"] == 2 and model["vocab_size"] == 64 and model["max_seq_len"] == 32
    assert run_model.checkpoint_model_config(run, newest).model_dump(mode="json") == model
    provenance = json.loads((newest / PROVENANCE_FILE).read_text())
    assert provenance["step"] == 4 and provenance["train_steps"] == 4
    assert len(provenance["shards"]["manifest_sha256"]) == 64 and provenance["shards"]["splits"]["train"]
    listed = json.loads((newest / "checksums.json").read_text())
    assert {MODEL_CONFIG_FILE, PROVENANCE_FILE} <= set(listed)  # covered by the checksums like the tensors

    damage(newest)
    # A save at step 5 only (no cadence save: the damaged step 4 is not rewritten): the old rule kept the newest
    # two by name (4 damaged, 5) and deleted the sound step 2.
    resumed = train(cfg({"steps": 5, "checkpoint": {"interval": 100}}), run)
    assert resumed.resumed_from == step_dir_name(2)
    assert sorted(p.name for p in root.glob("step-*")) == [step_dir_name(s) for s in (2, 4, 5)]
    damage(root / step_dir_name(5))
    again = train(cfg({"steps": 6, "checkpoint": {"interval": 100}}), run)
    assert again.resumed_from == step_dir_name(2)  # not a silent start from step 0


def test_every_checkpoint_damaged_is_refused_and_from_scratch_starts_over(tmp_path):
    config_file, paths = make_run(tmp_path, "damaged")
    first = cli(config_file)
    assert first.returncode == 0, first.stderr[-3000:]
    for checkpoint in paths.checkpoints.glob("step-*"):
        damage(checkpoint)
    metrics_before = paths.metrics_jsonl.read_text()
    refused = cli(config_file, "--set", "train.steps=6")
    line = assert_one_line(refused, 4)
    assert "step-00000004" in line and "step-00000002" in line and "--from-scratch" in line
    assert paths.metrics_jsonl.read_text() == metrics_before  # nothing trained

    over = cli(config_file, "--set", "train.steps=6", "--from-scratch")
    assert over.returncode == 0, over.stderr[-3000:]
    assert "resumed from" not in over.stdout and "--from-scratch: the previous checkpoints" in over.stdout
    aside = next(paths.train.glob("set-aside-*"))
    assert sorted(p.name for p in (aside / "checkpoints").glob("step-*")) == ["step-00000002", "step-00000004"]
    assert (aside / "metrics.jsonl").read_text() == metrics_before
    assert logged_steps(paths) == list(range(6)) and latest_checkpoint(paths.checkpoints).name == "step-00000006"


# -- a resume must match model and shards -----------------------------------------------------------------------
def test_resume_with_another_model_or_other_shards_is_refused_in_one_line(tmp_path):
    config_file, paths = make_run(tmp_path, "changed")
    first = cli(config_file)
    assert first.returncode == 0, first.stderr[-3000:]
    before = sorted(p.name for p in paths.checkpoints.iterdir())
    # mesh.dp=2: a torchrun job, yet refused in the launcher before any rank (so no rank traceback)
    for setting, named in (("train.model.n_layers=3", "train.model.n_layers 2 → 3"),
                           ("train.model.dim=64", "train.model.dim 32 → 64")):
        refused = cli(config_file, "--set", setting, "--set", "train.mesh.dp=2", "--set", "train.steps=6")
        line = assert_one_line(refused, 4)
        assert named in line and "step-00000004" in line, line
        assert "trainer_bridge.torchrun" not in refused.stdout  # no process was started
    shutil.rmtree(paths.shards)
    write_synthetic_shards(paths.shards, seed=1)  # other documents: every train shard differs
    refused = cli(config_file, "--set", "train.steps=6")
    line = assert_one_line(refused, 4)
    assert "shards: " in line and "train shards changed: train-00000.arrow" in line, line
    assert sorted(p.name for p in paths.checkpoints.iterdir()) == before


def test_a_checkpoint_past_train_steps_is_refused_and_one_at_it_is_done(tmp_path, capsys):
    from trainer_bridge.launch import run_training

    config_file, paths = make_run(tmp_path, "past")
    train(cfg({"steps": 4}), paths)  # checkpoints 2 and 4
    metrics_before = paths.metrics_jsonl.read_text()
    refused = cli(config_file, "--set", "train.steps=3")  # resumed, it used to say "done: 4/3 steps completed"
    line = assert_one_line(refused, 4)
    assert "step-00000004, the newest sound checkpoint, is past train.steps (3): nothing to train" in line, line
    assert "train.steps to 4 or more" in line and "--from-scratch" in line and "export RUN_DIR --step 2" in line
    with pytest.raises(TrainRefused, match=r"past train.steps \(1\)"):  # the trainer itself, without the launcher
        train(cfg({"steps": 1}), paths)
    assert paths.metrics_jsonl.read_text() == metrics_before  # nothing trained
    # a checkpoint at train.steps is a finished run launched again: done, nothing left to train
    capsys.readouterr()
    assert run_training(SimpleNamespace(run_dir=paths.root, train=cfg({"steps": 4}))) == 0
    assert "done: 4/4 steps completed (last step 3)" in capsys.readouterr().out
    assert paths.metrics_jsonl.read_text() == metrics_before


def test_resume_false_beside_checkpoints_is_refused_and_from_scratch_starts_anew(shards, tmp_path):
    from trainer_bridge.launch import run_training

    run = run_with_shards(tmp_path / "run", shards)
    train(cfg({"steps": 4}), run)  # checkpoints 2 and 4
    before = sorted(p.name for p in run.checkpoints.iterdir())
    anew = cfg({"steps": 2, "checkpoint": {"interval": 1, "resume": False}})
    said: list[str] = []
    assert run_training(SimpleNamespace(run_dir=run.root, train=anew), outcome=said.append) == 4
    assert len(said) == 1 and "train.checkpoint.resume is false" in said[0], said
    assert "(step-00000002, step-00000004)" in said[0] and "--from-scratch" in said[0], said
    with pytest.raises(TrainRefused, match="resume is false"):  # the trainer itself, without the launcher
        train(anew, run)
    assert sorted(p.name for p in run.checkpoints.iterdir()) == before  # nothing written beside them
    # --from-scratch sets the old run aside: the new run's checkpoints are alone in checkpoints/
    assert run_training(SimpleNamespace(run_dir=run.root, train=anew), from_scratch=True) == 0
    assert sorted(p.name for p in run.checkpoints.glob("step-*")) == ["step-00000001", "step-00000002"]
    aside = next(run.train.glob("set-aside-*"))
    assert sorted(p.name for p in (aside / "checkpoints").glob("step-*")) == ["step-00000002", "step-00000004"]


def test_training_without_checkpoints_never_appends_to_another_runs_logs(shards, tmp_path):
    """checkpoint.enabled: false starts at step 0: beside checkpoints it is refused (they may be meant to be
    continued); an earlier attempt's logs alone are set aside with a line, so metrics.jsonl holds one run."""
    from trainer_bridge.launch import run_training

    run = run_with_shards(tmp_path / "run", shards)
    off = cfg({"steps": 2, "checkpoint": {"enabled": False}})
    assert run_training(SimpleNamespace(run_dir=run.root, train=off)) == 0
    first = [json.loads(line)["step"] for line in run.metrics_jsonl.read_text().splitlines() if '"step"' in line]
    said: list[str] = []
    assert run_training(SimpleNamespace(run_dir=run.root, train=off), outcome=said.append) == 0
    steps = [json.loads(line)["step"] for line in run.metrics_jsonl.read_text().splitlines() if '"step"' in line]
    assert steps == first  # the second run's log alone, not appended to the first's
    aside = next(run.train.glob("set-aside-*"))
    assert (aside / run.metrics_jsonl.name).exists()
    shutil.rmtree(aside)
    train(cfg({"steps": 2}), run)  # a run with checkpoints
    said.clear()
    assert run_training(SimpleNamespace(run_dir=run.root, train=off), outcome=said.append) == 4
    assert len(said) == 1 and "train.checkpoint.enabled is false" in said[0] and "--from-scratch" in said[0], said
    assert not list(run.train.glob("set-aside-*"))  # refused: nothing moved


def test_from_scratch_sets_aside_every_training_log(tmp_path):
    from trainer_bridge.checkpoint.store import set_aside

    paths = RunPaths(tmp_path / "run")
    fake_checkpoint(paths.checkpoints, 2)
    for log in (paths.metrics_jsonl, paths.recovery_jsonl, paths.alerts_jsonl, paths.samples_jsonl, paths.paused):
        log.write_text("{}\n")
    paths.tensorboard.mkdir()
    (paths.tensorboard / "events.out.tfevents.1").write_bytes(b"old run")
    paths.train_config.write_text("{}")  # rewritten by every start
    paths.resume.write_text("1\n")  # the operator's resume signal, not the run's
    aside = set_aside(paths)
    # the old run's samples and TensorBoard events no longer show in the new run's report
    assert sorted(p.name for p in aside.iterdir()) == sorted(
        ["checkpoints", "metrics.jsonl", "recovery.jsonl", "alerts.jsonl", "samples.jsonl", "tensorboard", "PAUSED"])
    assert sorted(p.name for p in paths.train.iterdir()) == sorted([aside.name, "train_config.json", "RESUME"])


def test_a_ranks_failure_under_torchrun_is_one_line_and_a_missing_init_from_is_a_config_error(tmp_path):
    config_file, paths = make_run(tmp_path, "stopped", {"mesh": {"dp": 2}})
    missing = cli(config_file, "--set", f"train.init_from=hf:{tmp_path / 'nowhere'}")
    line = assert_one_line(missing, 2)
    assert f"train.init_from: {tmp_path / 'nowhere'} does not exist" in line, line
    # every step a "spike" (no warmup, running mean 0) and stop at the first: both ranks raise TrainingStopped
    stopped = cli(config_file, "--set", "train.guards.spike_warmup_steps=0", "--set", "train.guards.max_consecutive_bad=1",
                  "--set", "train.guards.on_persistent=stop")
    line = assert_one_line(stopped, 3)
    assert line.startswith("corpusmill train: stopped at step 1") and "guards.on_persistent is 'stop'" in line
    for noise in ("[rank", "ChildFailedError", "torch.distributed.elastic"):
        assert noise not in stopped.stdout + stopped.stderr


def test_init_from_another_model_is_refused(shards, tmp_path):
    base = run_with_shards(tmp_path / "base", shards)
    train(cfg({"steps": 2}), base)
    other = cfg({"steps": 4, "model": {"n_layers": 3}, "init_from": str(base.root)})
    with pytest.raises(TrainRefused, match=r"train.model.n_layers 2 → 3"):
        train(other, run_with_shards(tmp_path / "refresh", shards))
    # --from-scratch checks train.init_from before it sets anything aside: a refused start moves nothing
    from trainer_bridge.launch import preflight
    from trainer_bridge.outcomes import TrainConfigError

    before = sorted(p.name for p in base.checkpoints.iterdir())
    for init_from, error in ((f"hf:{tmp_path / 'nowhere'}", TrainConfigError), (str(base.shards), TrainRefused)):
        with pytest.raises(error, match="train.init_from"):
            preflight(cfg({"steps": 4, "init_from": init_from}), base, from_scratch=True, say=lambda line: None)
        assert sorted(p.name for p in base.checkpoints.iterdir()) == before
        assert not any(p.name.startswith("set-aside-") for p in base.train.iterdir())


# -- the trainer verifies what it reads ----------------------------------------------------------------------
def test_a_flipped_byte_in_a_shard_stops_the_run_naming_it(tmp_path):
    from tokenizer.shards import ShardFormatError
    from trainer_bridge.loop.data import open_split

    config_file, paths = make_run(tmp_path, "flipped")
    shard = paths.shards / "train-00000.arrow"
    flip_byte(shard, 0.6)
    refused = cli(config_file)
    line = assert_one_line(refused, 4)
    assert str(shard) in line and "sha256" in line, line
    assert not paths.checkpoints.exists() and not paths.metrics_jsonl.exists()
    # the switch: 'full' hashes, 'manifest' compares sizes only (the flipped byte passes unseen)
    with pytest.raises(ShardFormatError, match="train-00000.arrow"):
        open_split(paths.shards, "train", verify="full")
    assert len(open_split(paths.shards, "train", verify="manifest")) > 0


def test_a_damaged_val_shard_stops_training_instead_of_turning_validation_off(shards, tmp_path):
    from tokenizer.shards import ShardFormatError

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    flip_byte(copy / "val-00000.arrow")
    with pytest.raises(ShardFormatError, match="val-00000.arrow"):
        train(cfg({"steps": 1, "eval": {"interval": 1}}), run_with_shards(tmp_path / "run", copy))


# -- interrupts and permissions -----------------------------------------------------------------------------
def wait_for_checkpoint_and_steps(process: subprocess.Popen, paths: RunPaths, steps: int) -> None:
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        assert process.poll() is None, process.communicate()
        latest = latest_checkpoint(paths.checkpoints) if paths.checkpoints.exists() else None
        if latest is not None and len(logged_steps(paths)) >= steps:
            return
        time.sleep(0.2)
    raise AssertionError("training made no progress in time")


def assert_quiet_interrupt(process: subprocess.Popen, code: int = 130, said: str = "interrupted") -> tuple[str, str]:
    out, err = process.communicate(timeout=WAIT_S)
    lines = stderr_lines(err)
    assert process.returncode == code, (process.returncode, out[-2000:], err[-4000:])
    assert 1 <= len(lines) <= 3, err
    assert lines[-1].startswith(f"corpusmill train: {said}; the last checkpoint, step-") and "is kept" in lines[-1]
    for noise in ("Traceback", "KeyboardInterrupt", "Terminated", "[rank", "SignalException", "ChildFailedError"):
        assert noise not in out + err
    return out, err


def test_sigint_and_sigterm_single_process_keep_the_last_checkpoint_and_resume(tmp_path):
    # a checkpoint every step: the interrupt often lands inside a save (DCP used to wrap it in a traceback)
    config_file, paths = make_run(tmp_path, "ctrlc", {"steps": 100000, "checkpoint": {"interval": 1}})
    process = start(config_file)
    wait_for_checkpoint_and_steps(process, paths, 3)
    process.send_signal(signal.SIGINT)  # to the launcher alone
    assert_quiet_interrupt(process)
    kept = latest_checkpoint(paths.checkpoints)
    assert kept is not None and checkpoint_problem(kept) is None
    # the same command resumes; a SIGTERM to it (one rank: no torchrun) ends it as the Ctrl-C did, with 143
    steps_before = len(logged_steps(paths))
    process = start(config_file)
    wait_for_checkpoint_and_steps(process, paths, steps_before + 2)
    process.send_signal(signal.SIGTERM)
    out, _ = assert_quiet_interrupt(process, 143, "terminated")
    assert f"resumed from {kept.name}" in out
    last = latest_checkpoint(paths.checkpoints)
    assert last is not None and last.name > kept.name and checkpoint_problem(last) is None


def test_an_interrupt_during_a_save_waits_for_its_end():
    from trainer_bridge.checkpoint.store import interrupts_deferred

    # as in `corpusmill train` (an earlier test in this session, or a library it started, may have left a handler
    # of its own on SIGINT: the deferral applies only where SIGINT raises KeyboardInterrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    finished = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the signal is handled meanwhile: recorded, not raised
                finished = True
        assert finished and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    # a SIGTERM to training alone (launch.sigterm_raises) waits for the save's end too, then ends it
    from trainer_bridge.launch import sigterm_raises
    from trainer_bridge.outcomes import Terminated

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    finished = False
    try:
        with pytest.raises(Terminated):
            with sigterm_raises(), interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                finished = True
        assert finished and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def listening_sockets(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state that one of ``pids`` holds (/proc/net/tcp{,6})."""
    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes[int(link[8:-1])] = pid
        except OSError:
            continue  # the process ended meanwhile
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_address, hex_port = local.split(":")
            raw = bytes.fromhex(hex_address)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order 32-bit words
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16), inodes[inode]))
    return found


def ss_listening(pids: set[int]) -> list[tuple[str, int, int]]:
    """The same as ``ss -Hltnp`` shows it: (address, port, pid) of the listening TCP sockets of ``pids``."""
    done = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=60)
    found = []
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        address, _, port = fields[3].rpartition(":")
        address = address.strip("[]").split("%", 1)[0]
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((address, int(port), pid))
    return found


def is_loopback(address: str) -> bool:
    if address in ("*", "0.0.0.0", "::"):
        return False
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def job_pids(launcher: psutil.Process) -> set[int]:
    try:
        return {launcher.pid, *(p.pid for p in launcher.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def test_two_ranks_listen_only_on_loopback_and_sigint_is_quiet_and_resumable(tmp_path):
    config_file, paths = make_run(tmp_path, "ranks", {"steps": 100000, "mesh": {"dp": 2}})
    process = start(config_file)
    launcher = psutil.Process(process.pid)
    wait_for_checkpoint_and_steps(process, paths, 4)

    seen: list[tuple[str, int, int]] = []
    from_ss: list[tuple[str, int, int]] = []
    for _ in range(3):  # a few samples while both ranks train
        pids = job_pids(launcher)
        workers = [p for p in launcher.children(recursive=True)
                   if "trainer_bridge.launch" in (line := " ".join(p.cmdline())) and "trainer_bridge.torchrun" not in line]
        assert len(workers) == 2
        seen += listening_sockets(pids)
        if shutil.which("ss"):  # the bar's own check, `ss -ltn`, where the tool is installed
            from_ss += ss_listening(pids)
        time.sleep(1)
    outside = [s for s in seen + from_ss if not is_loopback(s[0])]
    assert not outside, f"listening outside 127.0.0.0/8: {outside}"
    assert not shutil.which("ss") or {pid for _, _, pid in from_ss} & {process.pid}, (from_ss, seen)  # the store
    store_ports = {port for _, port, pid in seen if pid == process.pid}
    assert store_ports, seen  # the rendezvous store is the launcher's own, on loopback
    worker_pids = {p.pid for p in workers}
    assert {pid for _, _, pid in seen} & worker_pids  # gloo's sockets were seen, on loopback too

    procs = [psutil.Process(pid) for pid in job_pids(launcher)]
    os.killpg(process.pid, signal.SIGINT)  # as a Ctrl-C in the terminal: the launcher's whole process group
    out, _ = assert_quiet_interrupt(process)
    assert re.search(r"--rdzv-endpoint=127\.0\.0\.1:(\d+)", out).group(1) in {str(p) for p in store_ports}
    gone, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, alive  # no orphaned rank
    kept = latest_checkpoint(paths.checkpoints)
    assert kept is not None and checkpoint_problem(kept) is None
    step = int(kept.name.split("-")[1])

    resumed = cli(config_file, "--set", f"train.steps={step + 2}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {kept.name}" in resumed.stdout
    assert f"done: {step + 2}/{step + 2} steps completed" in resumed.stdout
    recovery = [json.loads(line) for line in paths.recovery_jsonl.read_text().splitlines()]
    assert recovery[-1]["kind"] == "resume after an interruption" and recovery[-1]["resumed_from"] == kept.name


def respect_file_modes() -> None:
    """In the child, before exec: root ignores file modes through the capabilities CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH and CAP_FOWNER; drop them from the bounding set, so the command runs as an owner bound by
    the modes (as any user is)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # PR_CAPBSET_DROP = 24
        if libc.prctl(24, capability, 0, 0, 0) != 0:
            os._exit(97)


def test_read_only_run_directory_is_one_line_exit_5(tmp_path):
    config_file, paths = make_run(tmp_path, "readonly")
    try:
        for directory, _, files in os.walk(paths.root):
            for name in files:
                os.chmod(os.path.join(directory, name), 0o444)
            os.chmod(directory, 0o555)
        done = cli(config_file, preexec_fn=respect_file_modes if os.geteuid() == 0 else None)
        line = assert_one_line(done, 5)
        assert "cannot write the run directory" in line and str(paths.train) in line, line
    finally:
        for directory, _, _ in os.walk(paths.root):
            os.chmod(directory, stat.S_IRWXU)


# -- the launcher's job control (fake torchrun commands: no torch needed) --------------------------------------
def test_a_ranks_outcome_replaces_the_noise_that_follows_it(tmp_path, capfd):
    from trainer_bridge.launch import TorchrunJob
    from trainer_bridge.outcomes import OUTCOME_DIR_ENV, OUTCOME_FILE, read_outcome

    script = textwrap.dedent("""
        import sys, time
        from trainer_bridge.outcomes import report_outcome
        print("before the failure", flush=True)
        report_outcome(4, "the one line")
        print("Traceback (most recent call last): rank noise", file=sys.stderr, flush=True)
        time.sleep(120)
    """)
    job = TorchrunJob([sys.executable, "-c", script], {**env(), OUTCOME_DIR_ENV: str(tmp_path)},
                      tmp_path / OUTCOME_FILE)
    started = time.time()
    code = job.run()
    out, err = capfd.readouterr()
    assert code != 0 and time.time() - started < 100  # stopped, not waited for
    assert read_outcome(tmp_path) == (4, "the one line")
    assert "before the failure" in out and "Traceback" not in out + err


def test_an_interrupt_is_passed_on_once_and_what_follows_is_dropped(tmp_path, capfd):
    from trainer_bridge.launch import TorchrunJob

    script = textwrap.dedent("""
        import signal, sys, time
        def stop(*_):
            print("Traceback (most recent call last): KeyboardInterrupt", file=sys.stderr, flush=True)
            sys.exit(1)
        signal.signal(signal.SIGINT, stop)
        print("running", flush=True)
        time.sleep(120)
    """)
    job = TorchrunJob([sys.executable, "-c", script], env(), tmp_path / "never")
    timer = threading.Timer(5.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        code = job.run()
    finally:
        timer.cancel()
    out, err = capfd.readouterr()
    assert job.interrupted == 130 and code == 1
    assert "running" in out and "Traceback" not in out + err


def test_the_hosted_store_listens_on_its_address_only():
    from trainer_bridge.launch import HostedStore, Rendezvous, host_store

    store = host_store(Rendezvous())
    try:
        mine = [s for s in listening_sockets({os.getpid()}) if s[1] == store.port]
        assert mine == [("127.0.0.1", store.port, os.getpid())]
        # a multi-node c10d endpoint on this machine is hosted there; one of another machine is not ours
        assert host_store(Rendezvous(nnodes="2", rdzv_backend="c10d", rdzv_endpoint="198.51.100.7:29400")) is None
        explicit = host_store(Rendezvous(nnodes="1", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0"))
        assert isinstance(explicit, HostedStore) and explicit.endpoint.startswith("127.0.0.1:")
    finally:
        store.close()


# -- what the report and the console say ---------------------------------------------------------------------
def report_tables(path: Path) -> dict[str, list[list[str]]]:
    """Cell text of every table with an id in the report."""
    from html.parser import HTMLParser

    tables: dict[str, list[list[str]]] = {}

    class Cells(HTMLParser):
        table = cell = None

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "table" and attrs.get("id"):
                self.table = tables.setdefault(attrs["id"], [])
            elif tag == "tr" and self.table is not None:
                self.table.append([])
            elif tag in ("td", "th") and self.table is not None:
                self.cell = []

        def handle_endtag(self, tag):
            if tag == "table":
                self.table = None
            elif tag in ("td", "th") and self.cell is not None:
                self.table[-1].append("".join(self.cell).strip())
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    Cells().feed(path.read_text(encoding="utf-8"))
    return tables


def test_report_agrees_with_the_console_and_tells_resume_kinds_apart(shards, tmp_path, capsys):
    from report.build import build_report
    from trainer_bridge.launch import run_training
    from trainer_bridge.loop.train import TrainHooks

    run = RunPaths(tmp_path / "run")
    shutil.copytree(shards, run.shards)
    train(cfg({"steps": 4}), run)
    train(cfg({"steps": 6}), run)  # deliberate: the finished run goes on
    train(cfg({"steps": 10}), run, hooks=TrainHooks(stop_after_step=8))  # a crash after step 8's checkpoint
    capsys.readouterr()
    assert run_training(SimpleNamespace(run_dir=run.root, train=cfg({"steps": 10}))) == 0
    console = capsys.readouterr().out
    assert "done: 10/10 steps completed (last step 9)" in console

    kinds = [json.loads(line)["kind"] for line in run.recovery_jsonl.read_text().splitlines()]
    assert kinds == ["resume extending train.steps", "resume extending train.steps", "resume after an interruption"]

    tables = report_tables(build_report(run))
    facts = dict(tables["train-facts"][1:])
    assert facts["steps completed"] == "10" and facts["last step"] == "9"
    header, *rows = tables["recovery"]
    assert header[:5] == ["kind", "resumed from", "last step logged before", "first step after", "train.steps"]
    assert [r[0] for r in rows] == kinds and rows[0][4] == "4 → 6" and rows[2][1] == "step-00000008"
    utc = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
    assert all(utc.match(r[5]) and utc.match(r[6]) for r in rows), rows
    assert not any(re.fullmatch(r"\d{10}(\.\d+)?", cell) for r in rows for cell in r)  # no raw epoch seconds

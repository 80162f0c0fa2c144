"""Elastic fault migration (issue 12 item 4): two nodes' launchers (``corpusmill train --nnodes 1:2``, c10d
rendezvous on the store the first launcher hosts) on this machine; the other node's torchrun agent and worker are
SIGKILLed mid-run, and the survivor finishes alone on world size 1 from the latest checkpoint: every sample of
the run consumed exactly once, losses as a single process's, the recovery time in ``train/recovery.jsonl``.
Plus the pieces, without processes: ``mesh.dp: auto``, the refusals, the torchrun command line."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from runio.layout import RunPaths
from trainer_bridge.config import TrainConfig
from trainer_bridge.launch import Rendezvous, check_world_sizes, planned_world_size, rdzv_conf, torchrun_command
from trainer_bridge.outcomes import TrainConfigError
from trainer_bridge.checkpoint.recovery import resume_kind
from trainer_bridge.loop.synthetic import write_synthetic_shards

REPO = Path(__file__).resolve().parents[1]
STEPS = 20  # × 4 rows = 80 of the synthetic shards' 91: one epoch, so every sample is seen at most once
TRAIN = {"device": "cpu", "steps": STEPS, "seed": 3,
         "model": {"dim": 32, "n_layers": 2, "n_heads": 2, "multiple_of": 16},
         "mesh": {"dp": "auto"}, "batch": {"global_batch_size": 4, "micro_batch_size": 2},
         "optimizer": {"lr": 3e-3, "warmup_steps": 2},
         "checkpoint": {"interval": 2, "keep_last": 3}, "eval": {"interval": 0},
         "metrics": {"tensorboard": False, "peak_flops": 1e11}, "monitoring": {"prometheus": False},
         "collective_timeout_s": 60, "connect_timeout_s": 300}


# -- the pieces --------------------------------------------------------------------------------------------

def test_auto_dp_is_resolved_per_world_size_and_keeps_the_global_batch():
    cfg = TrainConfig.model_validate({"mesh": {"dp": "auto"}, "batch": {"global_batch_size": 8,
                                                                        "micro_batch_size": 2}})
    assert cfg.mesh.world_size == 1  # one data-parallel replica
    two, one = cfg.for_world_size(2), cfg.for_world_size(1)
    assert (two.mesh.dp, two.grad_accum_steps) == (2, 2) and (one.mesh.dp, one.grad_accum_steps) == (1, 4)
    assert two.batch == one.batch == cfg.batch
    fixed = TrainConfig.model_validate({"mesh": {"dp": 2}})
    assert fixed.for_world_size(2) is fixed
    with pytest.raises(TrainConfigError, match="global_batch_size"):
        cfg.for_world_size(3)  # 8 rows cannot split into 3 × 2
    with pytest.raises(TrainConfigError, match="multiple of mesh.pp"):
        TrainConfig.model_validate({"mesh": {"dp": "auto", "pp": 2}, "model": {"n_layers": 2}}).for_world_size(3)


def test_elastic_job_needs_auto_dp_and_every_world_size_to_fit():
    elastic = Rendezvous(nnodes="1:2", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29500")
    with pytest.raises(TrainConfigError, match="needs mesh.dp: auto"):
        check_world_sizes(TrainConfig.model_validate({"mesh": {"dp": 2}}), elastic)
    auto = TrainConfig.model_validate({"mesh": {"dp": "auto"}, "batch": {"global_batch_size": 4,
                                                                         "micro_batch_size": 2}})
    check_world_sizes(auto, elastic)
    assert planned_world_size(auto, elastic) == 2
    with pytest.raises(TrainConfigError, match="3 processes"):
        check_world_sizes(auto, Rendezvous(nnodes="1:3", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29500"))
    with pytest.raises(TrainConfigError, match="expected KEY=VALUE"):
        check_world_sizes(auto, Rendezvous(nnodes="1:2", rdzv_conf="last_call_timeout"))


def test_elastic_torchrun_command_has_fast_rendezvous_timeouts_the_user_can_override():
    elastic = Rendezvous(nnodes="1:2", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29500", rdzv_id="j",
                         rdzv_conf="last_call_timeout=5,join_timeout=900")
    assert rdzv_conf(elastic) == ("is_host=false,last_call_timeout=5,keep_alive_interval=1,"
                                  "keep_alive_max_attempt=3,join_timeout=900")
    command = torchrun_command(Path("c.json"), Path("run"), 2, elastic, "127.0.0.1:29500")
    assert {"--nnodes=1:2", "--nproc-per-node=1", f"--rdzv-conf={rdzv_conf(elastic)}"} <= set(command)
    fixed = Rendezvous(nnodes="2", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29500")
    assert rdzv_conf(fixed) == "is_host=false"  # torch's defaults outside elastic jobs
    with pytest.raises(ValueError, match="is_host"):
        rdzv_conf(Rendezvous(nnodes="1:2", rdzv_conf="is_host=true"))


def test_a_resume_on_another_world_size_in_an_elastic_job_is_an_elastic_restart():
    provenance = {"world_size": 2, "train_steps": 20}
    assert resume_kind(10, provenance, 20, 1, world_size=1, elastic=True) == "elastic: world 2 → 1"
    assert resume_kind(10, {"world_size": 1}, 20, 0, world_size=2, elastic=True) == "elastic: world 1 → 2"
    assert resume_kind(10, provenance, 20, 1, world_size=2, elastic=True) == "restart after a failure"
    assert resume_kind(10, provenance, 20, 0, world_size=1, elastic=False) == "resume after an interruption"


def test_multi_node_workers_name_their_start_by_the_rendezvous_round(monkeypatch):
    from trainer_bridge.parallel.device import MULTI_NODE_ENV, incarnation

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "node-a")
    monkeypatch.setenv("MASTER_PORT", "41234")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert incarnation() == "restart1-world2"
    monkeypatch.setenv(MULTI_NODE_ENV, "1")
    names = {incarnation()}
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")  # the node that joined late counts otherwise
    names.add(incarnation())
    assert names == {"round-node-a-41234-world2"}


# -- two nodes, one lost -----------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _records(directory: Path) -> list[dict]:
    out = []
    for path in directory.glob("samples-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by the kill
                pass
    return sorted(out, key=lambda r: r["time"])


def _effective_samples(records: list[dict]) -> dict[int, list[int]]:
    """The rows each step of the run's final trajectory trained on: for every step, the world size that ran it
    last, and the last record of each of that world's ranks (a step repeated after the resume replaces the
    attempt that the failure cut short)."""
    out = {}
    for step in sorted({r["step"] for r in records}):
        tries = [r for r in records if r["step"] == step]
        world = tries[-1]["world"]
        last = {r["rank"]: r for r in tries if r["world"] == world}
        assert sorted(last) == list(range(world)), f"step {step}: ranks {sorted(last)} of world {world}"
        out[step] = sorted(i for r in last.values() for i in r["sample_ids"])
    return out


def _reference(run_dir: RunPaths) -> tuple[dict[int, list[int]], dict[int, float]]:
    """One process, same config: the rows of each step and the losses."""
    from trainer_bridge.parallel.device import shutdown
    from trainer_bridge.loop.train import TrainHooks, train

    seen: dict[int, list[int]] = {}
    cfg = TrainConfig.model_validate(TRAIN)
    result = train(cfg, run_dir, hooks=TrainHooks(on_batch=lambda step, ids: seen.__setitem__(step, sorted(ids))))
    return seen, result.losses


def _workers(launcher: subprocess.Popen) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if "trainer_bridge.launch" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def _hold_lone_worker(launcher: subprocess.Popen):
    """The launcher's first worker, stopped if it trains alone (world 1); False if it does not; None: not yet."""
    for worker in _workers(launcher):
        try:
            if worker.environ().get("WORLD_SIZE") != "1":
                return False
            worker.send_signal(signal.SIGSTOP)
            return worker
        except psutil.Error:
            continue
    return None


def _sigterm_pending(process: psutil.Process) -> bool:
    """A SIGTERM waits for the stopped process (its agent stops the group), or it is gone."""
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except OSError:
        return True
    pending = int(next(line.split()[1] for line in status.splitlines() if line.startswith("ShdPnd:")), 16)
    return bool(pending & (1 << (signal.SIGTERM - 1))) or not process.is_running()


def _train(config: Path, port: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "train", str(config), "--nnodes", "1:2",
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "elastic"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_losing_the_other_node_finishes_on_one_with_every_sample_once(tmp_path):
    runs = tmp_path / "runs"
    run_dir = RunPaths(runs / "elastic")
    write_synthetic_shards(run_dir.shards)
    config = tmp_path / "elastic.yaml"
    config.write_text(yaml.safe_dump({"name": "elastic", "input": {"paths": ["unused.jsonl"]},
                                      "output": {"runs_dir": str(runs)}, "train": TRAIN}))
    samples = tmp_path / "samples"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "CORPUSMILL_TRAIN_SAMPLE_LOG": str(samples),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    port = _free_port()
    survivor = _train(config, port, env)  # hosts the store: its endpoint is an address of this machine
    lost = None
    try:
        deadline = time.time() + 300
        while not _listening(port):
            assert survivor.poll() is None and time.time() < deadline, survivor.communicate()[0][-3000:]
            time.sleep(0.2)
        lost = _train(config, port, env)  # finds the port taken: joins the store as the second node
        # The first rendezvous usually closes with the survivor alone (the second node's launcher starts later),
        # and the second node's arrival then grows the job to world 2 (an elastic restart too). Lest the lone
        # worker finish the run first, it is held (SIGSTOP) until its agent, seeing the new node, asks it to
        # stop (SIGTERM pending), then let go so it can exit.
        held = None
        while len({r["step"] for r in _records(samples) if r["world"] == 2}) < 3:
            for process in (survivor, lost):
                assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.time() < deadline, "the two nodes did not train together within 300 s"
            if held is None:
                held = _hold_lone_worker(survivor)
            elif held is not False and _sigterm_pending(held):
                held.send_signal(signal.SIGCONT)
                held = False
            time.sleep(0.2)
        tree = psutil.Process(lost.pid).children(recursive=True)
        agent = [p for p in tree if "trainer_bridge.torchrun" in " ".join(p.cmdline())]
        worker = [p for p in tree if "trainer_bridge.launch" in " ".join(p.cmdline())]
        assert agent and worker, [p.cmdline() for p in tree]
        killed_at = time.time()
        for process in agent + worker:
            process.send_signal(signal.SIGKILL)
        out, _ = survivor.communicate(timeout=600)
        assert survivor.returncode == 0, out[-4000:]
        lost.communicate(timeout=60)
    finally:
        for process in (survivor, lost):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)

    recovery = [json.loads(line) for line in run_dir.recovery_jsonl.read_text().splitlines()]
    shrink = [r for r in recovery if r["kind"] == "elastic: world 2 → 1"]
    assert len(shrink) == 1, recovery
    record = shrink[0]
    assert record["resumed_at"] > killed_at and record["recovery_seconds"] > 0
    # The bar: recovered within 60 s. Most of it is the new worker's start (importing torch, the process group,
    # the checkpoint load, a step): CPU work that a machine shared with a test suite and other jobs stretches
    # many times over (load 20+ on 2 cores: 23–44 s for under 5 CPU-seconds). So the wall time must meet it when
    # the worker had its core to itself; on a crowded machine, the wall time until the new worker started plus
    # the CPU time it needed from there (both measured by the trainer, in recovery.jsonl).
    contention = record["worker_start_to_step_seconds"] / max(record["worker_start_to_step_cpu_seconds"], 1e-3)
    uncrowded = record["until_worker_start_seconds"] + record["worker_start_to_step_cpu_seconds"]
    assert record["recovery_seconds"] <= 60 or (contention > 2 and uncrowded <= 60), record
    assert "recovered from an elastic restart (world 2 → 1)" in out
    from report.build import recovery_rows

    row = recovery_rows(shrink)[0]
    assert row[0] == "elastic: world 2 → 1" and row[-1] == shrink[0]["recovery_seconds"]  # as the report shows it
    assert record["until_worker_start_seconds"] + record["worker_start_to_step_seconds"] == \
        pytest.approx(record["recovery_seconds"], abs=0.01)
    print(f"elastic recovery: {record['recovery_seconds']} s (until the new worker started "
          f"{record['until_worker_start_seconds']} s, then {record['worker_start_to_step_seconds']} s for "
          f"{record['worker_start_to_step_cpu_seconds']} CPU-s); kill → first step "
          f"{record['resumed_at'] - killed_at:.1f} s; all resumes: {[r['kind'] for r in recovery]}")

    effective = _effective_samples(_records(samples))
    assert sorted(effective) == list(range(STEPS))
    assert {r["world"] for r in _records(samples) if r["step"] == STEPS - 1} == {1}  # finished on one node
    consumed = [i for ids in effective.values() for i in ids]
    assert len(consumed) == len(set(consumed)) == STEPS * TRAIN["batch"]["global_batch_size"]  # each once

    reference_dir = RunPaths(tmp_path / "runs" / "reference")
    write_synthetic_shards(reference_dir.shards)
    reference_samples, reference_losses = _reference(reference_dir)
    assert effective == reference_samples  # the same rows at every step, whatever the world size
    losses = {r["step"]: r["loss"] for r in map(json.loads, run_dir.metrics_jsonl.read_text().splitlines())}
    assert sorted(losses) == list(range(STEPS))
    assert max(abs(losses[s] - reference_losses[s]) for s in range(STEPS)) < 1e-4

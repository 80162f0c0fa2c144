"""The project's cleaning and shard stages on dask.distributed, end to end, against the local runner.

Module fixtures run ``configs/demo.yaml`` (the demo cleaning stage takes about a minute on two cores, so the
scenarios share one reference run):

1. the reference: the config as it is (the FnApiRunner), stages clean + shards;
2. ``corpusmill prepare configs/demo.yaml`` on the Dask runner (``beam_dask``) through the config, as a user's
   would run it, with ``runner.slurm``: its Dask workers are two batch jobs of a real single-node Slurm
   (munged, slurmctld and slurmd started by the fixture, ``tests/slurm_node.py``), clean + shards;
3. the cleaning stage on the Dask runner on a 2-worker LocalCluster, with one worker process SIGKILLed while
   it executes a stage task in the middle of the stage (the nanny restarts it; the scheduler reschedules and
   recomputes).

The runs share the checkout's quality-model cache (``runs/.cache``, as ``make demo``; the default model is keyed
by its training data and parameters), so it is trained at most once. The Dask runner is patched in where
``pipelines.prepare`` builds its pipelines for the SIGKILL scenario.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import distributed  # noqa: F401  (the [dask] extra is required for this suite)
import pyarrow.parquet as pq
import pytest

import beam_dask
import pipelines.prepare as prepare
from pipelines.config import load_config
from pipelines.run import run_stages
from pipelines.runners import SlurmUnavailable, dask_scheduler
from slurm_node import PARTITION, SingleNodeSlurm

REPO = Path(__file__).resolve().parents[1]
COMPARED = ("docs", "removed", "quarantine", "dedup", "tokenizer", "shards")


def published_files(run: Path, sub: str) -> dict[str, str]:
    """sha256 of every published file under run/sub (private temporary siblings ``*.tmp-*`` excluded)."""
    out = {}
    for path in sorted((run / sub).rglob("*")):
        if path.is_file() and ".tmp-" not in path.name:
            out[str(path.relative_to(run))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def dedup_rows(run: Path) -> dict[str, list]:
    """The dedup/ index as rows, whatever the number of files it was written into."""
    rows: dict[str, list] = {}
    for path in sorted((run / "dedup").glob("*.parquet")):
        kind = path.name.split("-")[0]
        rows.setdefault(kind, []).extend(json.dumps(r, sort_keys=True, default=str)
                                         for r in pq.read_table(path).to_pylist())
    return {kind: sorted(r) for kind, r in rows.items()}


def counts(stats: dict) -> dict:
    """stats.json without its timings (busy_ms / busy_seconds / cleaning_seconds depend on the machine)."""
    return {
        "counters": {k: v for k, v in stats["counters"].items() if not k.endswith(("/busy_ms", "/cpu_ms"))},
        "steps": [{k: v for k, v in row.items() if k not in ("busy_seconds", "cpu_seconds")} for row in stats["steps"]],
        **{k: stats[k] for k in ("documents_read", "text_bytes_read", "quarantined", "kept", "accounting")},
    }


class _Killer(threading.Thread):
    """SIGKILLs one worker process once a fraction of the cleaning stage's tasks are done, choosing a worker
    that is executing a stage task at that moment."""

    def __init__(self, cluster: beam_dask.LocalDaskCluster, runners: list, fraction: float = 0.3):
        super().__init__(daemon=True, name="dask-killer")
        self.cluster, self.runners, self.fraction = cluster, runners, fraction
        self.stop = threading.Event()
        self.killed: dict | None = None

    def run(self) -> None:
        while not self.stop.wait(0.2):
            result = self.runners[0].last_result if self.runners else None
            if result is None:
                continue
            done, total = result.progress()
            if total == 0 or done < self.fraction * total:
                continue
            executing = self.cluster.client.run(_executing)
            for address, (pid, keys) in executing.items():
                stage_keys = [k for k in keys if "beam-stage-" in k]
                if stage_keys:
                    os.kill(pid, signal.SIGKILL)
                    self.killed = {"worker": address, "pid": pid, "executing": stage_keys, "done": done,
                                   "total": total}
                    return


def _executing(dask_worker) -> tuple[int, list[str]]:
    return os.getpid(), [str(ts.key) for ts in dask_worker.state.executing]


def runs_dir(base: Path, which: str) -> Path:
    """A runs directory of its own, sharing the checkout's cache of the default quality model (keyed by its
    training data and parameters): the one `make demo` uses, so the model is trained at most once per checkout,
    not once per test session."""
    cache = REPO / "runs" / ".cache"
    cache.mkdir(parents=True, exist_ok=True)
    path = base / which
    path.mkdir()
    (path / ".cache").symlink_to(cache, target_is_directory=True)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The demo's clean + shards on the local runner (the FnApiRunner): the run directory every Dask run is
    compared with."""
    cfg = load_config(REPO / "configs" / "demo.yaml",
                      [f"output.runs_dir={runs_dir(tmp_path_factory.mktemp('reference'), 'fnapi')}"])
    assert cfg.runner.name == "direct"
    started = time.time()
    run_stages(cfg, ("clean", "shards"), log=lambda _: None)
    print(f"reference (FnApiRunner) clean + shards: {time.time() - started:.1f} s")
    return Path(cfg.run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, reference):
    base = tmp_path_factory.mktemp("dask-e2e")

    def config(which: str, *overrides: str):
        return load_config(REPO / "configs" / "demo.yaml", [f"output.runs_dir={runs_dir(base, which)}", *overrides])

    timings = {}

    cluster = beam_dask.shared_local_cluster(2)
    cluster.wait_for_workers(2)
    runners: list = []

    def dask_pipeline(name, workers, options, address=None, worker_memory=None, input_bytes=0):
        pipeline = beam_dask.make_dask_pipeline(client=cluster.client, extra_args=options, input_bytes=input_bytes)
        runners.append(pipeline.runner)
        return pipeline

    # the killed run needs a handle on the runner (its progress): the runner is patched in
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare, "make_pipeline", dask_pipeline)
        killed = config("dask-sigkill")
        killer = _Killer(cluster, runners)
        killer.start()
        started = time.time()
        try:
            run_stages(killed, ("clean",), log=lambda _: None)
        finally:
            killer.stop.set()
            killer.join(timeout=10)
        timings["dask_sigkill_clean"] = time.time() - started
    cluster.wait_for_workers(2, timeout=120)
    print("end-to-end timings (s):", {k: round(v, 1) for k, v in timings.items()}, "kill:", killer.killed)
    return {"fnapi": reference, "sigkill": killed.run_dir, "killed": killer.killed}


def assert_same_as_reference(ref: Path, got: Path) -> None:
    """Every published output byte for byte, stats.json's counts and the dedup index row for row as the
    reference's, and the run complete."""
    for sub in COMPARED:
        expected = published_files(ref, sub)
        if sub != "quarantine":  # the demo corpus has no unreadable record: quarantine/ is empty on both
            assert expected, f"the reference run wrote nothing into {sub}/"
        assert published_files(got, sub) == expected, f"{sub}/ differs from the FnApiRunner run"
    ref_stats = json.loads((ref / "stats.json").read_text())
    got_stats = json.loads((got / "stats.json").read_text())
    assert counts(got_stats) == counts(ref_stats)
    assert got_stats["accounting"]["balanced"]
    assert dedup_rows(got) == dedup_rows(ref) and dedup_rows(ref)  # (the index is not empty)
    manifest = json.loads((got / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["stages_done"] == ["clean", "shards"]
    assert manifest["runner"]["name"] == "dask"


def test_sigkill_of_a_worker_mid_stage_changes_nothing(runs):
    killed = runs["killed"]
    assert killed is not None, "no worker was killed: the scenario did not happen"
    assert killed["done"] < killed["total"], "the worker was killed after the stage had finished"
    ref, got = Path(runs["fnapi"]), Path(runs["sigkill"])
    for sub in ("docs", "removed", "quarantine", "dedup"):
        assert published_files(got, sub) == published_files(ref, sub), sub
    got_stats = json.loads((got / "stats.json").read_text())
    assert got_stats["accounting"]["balanced"], got_stats["accounting"]["problems"]
    # committed counters: the killed attempt's increments are not counted, the rescheduled attempt's are
    assert counts(got_stats) == counts(json.loads((ref / "stats.json").read_text()))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A real single-node Slurm (its daemons fail the test with their logs if they cannot start)."""
    node = SingleNodeSlurm(tmp_path_factory.mktemp("slurm"), cpus=2)
    try:
        yield node.start()
    finally:
        node.stop()


def test_prepare_with_dask_workers_started_as_slurm_jobs(reference, slurm, tmp_path):
    runs = runs_dir(tmp_path, "slurm")
    settings = {"output.runs_dir": runs, "runner.name": "dask", "runner.slurm.jobs": 2, "runner.slurm.cores": 1,
                "runner.slurm.memory": "3GiB", "runner.slurm.queue": PARTITION, "runner.slurm.walltime": "00:15:00",
                "runner.slurm.scheduler_host": "127.0.0.1", "runner.slurm.start_timeout_s": 120}
    command = [sys.executable, "-m", "cli.main", "prepare", "configs/demo.yaml"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    # the jobs inherit this environment (sbatch's --export=ALL): SLURM_CONF, and PYTHONPATH to this checkout
    env = {**slurm.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    started = time.time()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    print(f"corpusmill prepare on Slurm-started Dask workers: {time.time() - started:.1f} s")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}" \
                                 f"\n{slurm.log_tails()}"
    assert "runner.slurm: 2 Dask workers in 2 Slurm jobs" in done.stdout, done.stdout
    got = runs / "demo"
    # each job ran a Dask worker that registered with the command's scheduler, and Slurm allocated it
    job_logs = sorted((got / "logs" / "slurm").glob("corpusmill-dask-*.err"))
    assert len(job_logs) == 2, job_logs
    controller_log = (slurm.root / "log" / "slurmctld.log").read_text()
    for job_log in job_logs:
        assert "Registered to:" in job_log.read_text(), job_log.read_text()[-2000:]
        job_id = job_log.stem.rsplit("-", 1)[1]
        assert f"Allocate JobId={job_id} " in controller_log
    # the command cancelled its jobs when its data stages ended
    deadline = time.monotonic() + 30
    while slurm.job_ids() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.job_ids() == [], "the command left its Slurm jobs in the queue"
    assert_same_as_reference(reference, got)


def test_a_request_slurm_refuses_fails_at_once_in_one_line_and_submits_nothing(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    runner = load_config(REPO / "configs" / "demo.yaml", [
        "runner.name=dask", "runner.slurm.queue=no-such-partition", "runner.slurm.scheduler_host=127.0.0.1"]).runner
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable) as refused:
        dask_scheduler(runner, str(tmp_path / "run"), log=lambda _: None)
    assert time.monotonic() - started < 30  # sbatch --test-only answers; the start timeout (600 s) is not waited
    message = str(refused.value)
    assert message.startswith("runner.slurm: Slurm refuses the jobs: ") and "\n" not in message, message
    assert "invalid partition" in message.lower(), message
    assert slurm.job_ids() == []


def test_jobs_whose_workers_cannot_start_end_the_wait_with_their_log(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    missing_python = tmp_path / "no-such-venv" / "bin" / "python"
    runner = load_config(REPO / "configs" / "demo.yaml", [
        "runner.name=dask", f"runner.slurm.python={missing_python}", "runner.slurm.scheduler_host=127.0.0.1",
        "runner.slurm.memory=1GiB"]).runner
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable) as failed:
        dask_scheduler(runner, str(tmp_path / "run"), log=lambda _: None)
    assert time.monotonic() - started < 60  # the job's end is noticed; the start timeout (600 s) is not waited
    message = str(failed.value)
    assert "ended with 0 of 1 Dask workers connected" in message and "\n" not in message, message
    assert f"{missing_python}: No such file or directory" in message, message  # the job log's tail
    assert slurm.job_ids() == []

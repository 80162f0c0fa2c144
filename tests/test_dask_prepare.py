"""The project's cleaning and shard stages on a 2-worker dask.distributed LocalCluster, end to end.

One module fixture runs ``configs/demo.yaml`` three times (the demo cleaning stage takes about a minute on
two cores, so the scenarios are batched):

1. the reference: the config as it is (the FnApiRunner), stages clean + shards;
2. the same config on the Dask runner (``beam_dask``), clean + shards;
3. the cleaning stage on the Dask runner again, with one worker process SIGKILLed while it executes a stage
   task in the middle of the stage (the nanny restarts it; the scheduler reschedules and recomputes).

The runs share the checkout's quality-model cache (``runs/.cache``, as ``make demo``; the default model is keyed
by its training data and parameters), so it is trained at most once. The Dask runner is patched in where ``pipelines.prepare`` builds its pipelines.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("dask-e2e")
    # the runs directories' shared cache (the default quality model, keyed by its training data and parameters):
    # the one `make demo` uses, so the model is trained at most once per checkout, not once per test session
    cache = REPO / "runs" / ".cache"
    cache.mkdir(parents=True, exist_ok=True)

    def config(which: str, *overrides: str):
        runs_dir = base / which
        runs_dir.mkdir()
        (runs_dir / ".cache").symlink_to(cache, target_is_directory=True)
        return load_config(REPO / "configs" / "demo.yaml", [f"output.runs_dir={runs_dir}", *overrides])

    timings = {}
    started = time.time()
    reference = config("fnapi")
    assert reference.runner.name == "direct"
    run_stages(reference, ("clean", "shards"), log=lambda _: None)
    timings["fnapi"] = time.time() - started

    cluster = beam_dask.shared_local_cluster(2)
    cluster.wait_for_workers(2)
    runners: list = []

    def dask_pipeline(name, workers, options, address=None, worker_memory=None, input_bytes=0):
        pipeline = beam_dask.make_dask_pipeline(client=cluster.client, extra_args=options, input_bytes=input_bytes)
        runners.append(pipeline.runner)
        return pipeline

    # the undisturbed run goes through the config, as a user's would: runner.name: dask at the cluster's address
    started = time.time()
    undisturbed = config("dask", "runner.name=dask", f"runner.dask_address={cluster.address}")
    run_stages(undisturbed, ("clean", "shards"), log=lambda _: None)
    timings["dask"] = time.time() - started
    assert json.loads((Path(undisturbed.run_dir) / "manifest.json").read_text())["runner"]["name"] == "dask"

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
    return {"fnapi": reference.run_dir, "dask": undisturbed.run_dir, "sigkill": killed.run_dir,
            "killed": killer.killed}


def test_demo_on_dask_is_byte_identical_to_the_fnapi_runner(runs):
    ref, got = Path(runs["fnapi"]), Path(runs["dask"])
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


def test_sigkill_of_a_worker_mid_stage_changes_nothing(runs):
    killed = runs["killed"]
    assert killed is not None, "no worker was killed: the scenario did not happen"
    assert killed["done"] < killed["total"], "the worker was killed after the stage had finished"
    ref, undisturbed, got = Path(runs["fnapi"]), Path(runs["dask"]), Path(runs["sigkill"])
    for sub in ("docs", "removed", "quarantine"):
        assert published_files(got, sub) == published_files(undisturbed, sub) == published_files(ref, sub), sub
    assert published_files(got, "dedup") == published_files(undisturbed, "dedup") == published_files(ref, "dedup")
    got_stats = json.loads((got / "stats.json").read_text())
    assert got_stats["accounting"]["balanced"], got_stats["accounting"]["problems"]
    # committed counters: the killed attempt's increments are not counted, the rescheduled attempt's are
    assert counts(got_stats) == counts(json.loads((undisturbed / "stats.json").read_text()))
    assert counts(got_stats) == counts(json.loads((ref / "stats.json").read_text()))

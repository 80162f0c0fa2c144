"""Near-dedup as the corpus grows (issue 18, items 3 and 4): ``corpusmill dedup`` on the shuffle path
(``near_dedup.mode=beam``) over the scale benchmark's corpora, on the local runner (``local``: FnApiRunner, 2
worker processes) and on a 2-worker Dask LocalCluster (``dask``), beside the one-process in-memory path
(``memory``: ``near_dedup.mode=memory``, no Beam), interleaved (each runner at each size, ``--reps`` times).

Per run: wall time, CPU seconds of the whole process tree (the kernel's rusage of the reaped tree), the
driver's and each worker process's peak RSS (``bench_scale.TreeSampler``), and the clusters file's digest
(sorted lines), so that the runners can be seen to agree.

The corpora are the ones ``benchmarks/bench_scale.py`` writes (``<work>/corpus_<k>x/*.jsonl.gz``); run it
first, or point ``--work`` at its folder.

Usage:
  python benchmarks/bench_dedup_scale.py --work /tmp/scale30 --sizes 1,16 --runners memory,local,dask \
      [--worker-memory 2GiB] [--reps 1] [--out /tmp/scale30/dedup_out]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import TreeSampler, kind  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run_dedup(paths: list[str], out_file: Path, runner: str, workers: int, worker_memory: str | None,
              sample_s: float) -> dict:
    command = [sys.executable, "-m", "cli.main", "dedup", *paths, "--out", str(out_file)]
    if runner == "memory":  # the one-process, Beam-free in-memory path (what `mode: auto` takes below 200 MB)
        command += ["--set", "near_dedup.mode=memory"]
    else:
        command += ["--set", "near_dedup.mode=beam", "--workers", str(workers),
                    "--runner", "direct" if runner == "local" else "dask"]
    if runner == "dask" and worker_memory:
        command += ["--worker-memory", worker_memory]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid, sample_s)
    sampler.start()
    log = proc.stdout.read()
    rc = proc.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = {pid: {**info, "kind": kind(pid, info, proc.pid)} for pid, info in sampler.procs.items()}
    lines = sorted(out_file.read_text(encoding="utf-8").splitlines()) if rc == 0 else []
    return {"rc": rc, "wall_s": round(wall, 1),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "driver_peak_MB": round(max((p["peak_rss"] for p in procs.values() if p["kind"] == "driver"),
                                        default=0) / 1e6),
            "worker_peak_MB": sorted(round(p["peak_rss"] / 1e6) for p in procs.values() if p["kind"] == "worker"),
            # CPU seconds per process kind, as last sampled (a process's final slice after its last sample is
            # missed; the tree's total above is exact)
            "sampled_cpu_s": {k: round(sum(p["cpu"] for p in procs.values() if p["kind"] == k), 1)
                              for k in ("driver", "worker", "other")},
            "docs": len(lines), "removed": sum('"kept": false' in line for line in lines),
            "clusters_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16],
            "log_tail": log.strip().splitlines()[-1:] if log.strip() else []}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/tmp/bench_scale", help="bench_scale.py's --work folder")
    parser.add_argument("--sizes", default="1,16")
    parser.add_argument("--runners", default="memory,local,dask")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-memory", default="2GiB")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--out", default=None, help="folder for the JSON results (default: <work>/dedup_scale)")
    args = parser.parse_args()
    work = Path(args.work)
    out = Path(args.out) if args.out else work / "dedup_scale"
    out.mkdir(parents=True, exist_ok=True)
    corpora = {}
    for k in args.sizes.split(","):
        paths = sorted(str(p) for p in (work / f"corpus_{k}x").glob("*.jsonl.gz"))
        if not paths:
            raise SystemExit(f"bench_dedup_scale: no corpus at {work / f'corpus_{k}x'}: run benchmarks/bench_scale.py "
                             f"--work {work} --sizes {args.sizes} first")
        corpora[k] = paths
    results = []
    for rep in range(args.reps):
        for k, paths in corpora.items():
            for runner in args.runners.split(","):  # interleaved: local, dask at each size
                load = os.getloadavg()[0]
                row = {"size": k, "runner": runner, "rep": rep, "loadavg_before": round(load, 2),
                       **run_dedup(paths, out / f"clusters-{k}x-{runner}.jsonl", runner, args.workers,
                                   args.worker_memory, args.sample_s)}
                results.append(row)
                print(json.dumps(row), flush=True)
                (out / "bench_dedup_scale.json").write_text(json.dumps({"args": vars(args), "runs": results},
                                                                       indent=1))
    print("\n| size | runner | rep | docs | removed | wall s | CPU s | driver peak MB | worker peak MB | clusters |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['size']}× | {r['runner']} | {r['rep']} | {r['docs']:,} | {r['removed']:,} | {r['wall_s']} | "
              f"{r['cpu_s']} | {r['driver_peak_MB']} | {', '.join(map(str, r['worker_peak_MB']))} | "
              f"{r['clusters_sha256']} |")


if __name__ == "__main__":
    main()

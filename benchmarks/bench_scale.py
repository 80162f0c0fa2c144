"""Scale benchmark (issue 11, item 6): the cleaning + shards pipeline (``corpusmill prepare`` on the demo
config's steps, training left out) on 1×, 4×, 16× a real corpus, on the local runner and on a 2-worker Dask
cluster (a ``distributed.LocalCluster`` of 2 one-thread worker processes started by the command).

Per run: wall time, CPU seconds per input MB, peak RSS of the driver and of each worker process, and CPU
seconds per stage: each cleaning step's own ``cpu_seconds`` from ``stats.json`` (thread CPU time of the step's
code, summed by Beam counters on the workers; committed counters on Dask), ``clean_other`` (the rest of the
clean stage: reading, shuffles, sorted writes, the runner), and ``shards`` (tokenizer training, tokenizing,
shard writing). Stage CPU totals come from sampling the CPU times of every process of the command's process
tree (driver and workers, every ``--sample-s`` seconds), split at the ``[2/2] shards`` line of the log; the
run's total is the kernel's rusage of the whole reaped tree. The growth exponent of each stage is the slope of
a least-squares fit of log CPU seconds on log input MB over the sizes, with the pairwise slopes beside it.

The corpus is grown by ``benchmarks/scale_corpus.py`` (fresh real text, then edited copies; no identical
repeats). Near-dedup runs its shuffle-based path (``near_dedup.mode: beam``) at every size: the path whose
memory is bounded by bucket and component size, which is what a corpus beyond one machine uses (``auto`` would
pick the one-worker in-memory path below 200 MB of input).

Usage:
  python benchmarks/bench_scale.py --base-mb 5 --sizes 1,4,16 --runners local,dask \
      [--corpus ../shared/corpora/real_text_sample.jsonl.gz] [--work /tmp/bench_scale] [--out benchmarks/out]
The default quality models are trained once into ``<work>/runs/.cache`` by a warm-up run (``--warmup``, on
by default) and reused, so model training is not part of any measured run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_corpus import grow, host_documents, read_jsonl, write_corpus  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STEPS = ("normalize", "langid", "filters", "exact_dedup", "near_dedup", "quality", "pii")
STAGES = STEPS + ("clean_other", "clean", "shards", "total")


def config_for(name: str, paths: list[str], runs_dir: str, runner: str, workers: int,
               worker_memory: str | None = None, unit_mb: float | None = None) -> dict:
    cfg = yaml.safe_load((REPO / "configs/demo.yaml").read_text())
    for key in ("train", "cost"):
        cfg.pop(key, None)
    cfg["name"] = name
    cfg["input"]["paths"] = paths
    cfg["output"]["runs_dir"] = runs_dir
    cfg["runner"] = {"name": "direct" if runner == "local" else "dask", "workers": workers}
    if runner == "dask" and worker_memory:  # the LocalCluster's per-worker limit: Dask spills above it
        cfg["runner"]["worker_memory"] = worker_memory
    if unit_mb:  # the clean's unit of work (runner.unit_bytes): smaller than the corpus shows the bound
        cfg["runner"]["unit_bytes"] = int(unit_mb * 1e6)
    cfg["near_dedup"]["mode"] = "beam"
    return cfg


class TreeSampler(threading.Thread):
    """Samples RSS and CPU times of a process and all its descendants every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        self.root, self.interval = pid, interval
        self.procs: dict[int, dict] = {}
        self._handles: dict[int, psutil.Process] = {}
        self.stop = threading.Event()

    def _sample(self) -> None:
        try:
            root = psutil.Process(self.root)
            tree = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for proc in tree:
            handle = self._handles.setdefault(proc.pid, proc)
            try:
                with handle.oneshot():
                    rss = handle.memory_info().rss
                    cpu = handle.cpu_times()
                    info = self.procs.setdefault(proc.pid, {"cmd": " ".join(handle.cmdline())[:300],
                                                            "parent": handle.ppid(), "peak_rss": 0, "cpu": 0.0})
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            info["peak_rss"] = max(info["peak_rss"], rss)
            info["cpu"] = cpu.user + cpu.system
        return

    def cpu_now(self) -> float:
        return sum(p["cpu"] for p in self.procs.values())

    def run(self) -> None:
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(self.interval)


def kind(pid: int, info: dict, root: int) -> str:
    cmd = info["cmd"]
    if pid == root:
        return "driver"
    if "sdk_worker" in cmd or "worker_main" in cmd or "beamio.worker" in cmd or "runners.worker" in cmd:
        return "worker"
    if "spawn_main" in cmd and "resource_tracker" not in cmd:
        return "worker"
    return "other"


def run_once(cfg_path: Path, log_path: Path, sample_s: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "prepare", str(cfg_path)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    sampler = TreeSampler(proc.pid, sample_s)
    sampler.start()
    boundary = {}
    with open(log_path, "w") as log:
        for line in proc.stdout:
            log.write(line)
            if line.startswith("[2/2] shards") and "clean_cpu" not in boundary:
                sampler._sample()
                boundary = {"clean_cpu": sampler.cpu_now(), "clean_wall": time.monotonic() - started}
    rc = proc.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    procs = {pid: {**info, "kind": kind(pid, info, proc.pid)} for pid, info in sampler.procs.items()}
    return {"rc": rc, "wall_s": wall, "total_cpu_s": total_cpu, "sampled_cpu_s": sampler.cpu_now(),
            **boundary, "procs": procs}


def tree_digest(root: Path) -> str | None:
    """sha256 over every file under ``root`` (relative path and bytes, in sorted order): runs whose ``docs/``
    have the same digest wrote the same files byte for byte."""
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def fit_exponent(sizes: list[float], values: list[float]) -> float | None:
    pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values) if v and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(REPO.parent / "shared/corpora/real_text_sample.jsonl.gz"))
    parser.add_argument("--base-mb", type=float, default=30.0, help="1× in MB of UTF-8 text")
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--runners", default="local,dask")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fresh-share", type=float, default=0.75)
    parser.add_argument("--files-per-base", type=int, default=2, help="input files per 1× of data")
    parser.add_argument("--work", default="/tmp/bench_scale")
    parser.add_argument("--out", default=str(REPO / "benchmarks/out"))
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--fixed-mb", type=float, default=0.5,
                        help="also run a tiny corpus of this many MB per runner first: its CPU seconds estimate the "
                             "fixed cost (start-up, model loading), reported and subtracted in a second fit; 0: off")
    parser.add_argument("--worker-memory", default=None,
                        help="runner.worker_memory of the Dask runs (e.g. 2.5GiB): each worker's memory limit, "
                             "above which Dask spills task results to disk; default: Dask's own (no spilling here)")
    parser.add_argument("--unit-mb", type=float, default=None,
                        help="runner.unit_bytes in MB (the clean's unit of work); default: the config's")
    parser.add_argument("--only-grow", action="store_true", help="grow the corpora (for a later run) and stop")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runners = args.runners.split(",")
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    runs_dir = str(work / "runs")

    base_docs = read_jsonl(args.corpus)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"), None)
    corpora = {}
    plan = ([("fixed", args.fixed_mb)] if args.fixed_mb else []) + [(k, k * args.base_mb) for k in sizes]
    for k, target_mb in plan:
        started = time.monotonic()
        files = args.files_per_base if k == "fixed" else max(1, args.files_per_base * k)
        corpus_dir = work / f"corpus_{k}x"
        # a corpus grown earlier with the same recipe is reused (growing 5 GB takes minutes and ~10 GB of memory);
        # grow() is deterministic, so the files are the ones this recipe would write again
        recipe = {"corpus": args.corpus, "target_mb": target_mb, "fresh_share": args.fresh_share, "files": files,
                  "seed": 0}
        manifest = corpus_dir / "manifest.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("recipe") == recipe \
                and all(Path(p).exists() for p in json.loads(manifest.read_text())["corpus"]["paths"]):
            corpora[k] = json.loads(manifest.read_text())["corpus"]
            print(f"corpus {k}x: reused from {manifest}", flush=True)
            continue
        docs = grow(base_docs, int(target_mb * 1e6), fresh_share=args.fresh_share, seed=0,
                    extra_docs=host_documents(site_packages=str(site) if site else None))
        paths = write_corpus(docs, str(corpus_dir), files=files)
        mb = sum(len(d["text"].encode()) for d in docs) / 1e6
        corpora[k] = {"paths": paths, "docs": len(docs), "MB": mb,
                      "edited_copies": sum("~edit" in d["id"] for d in docs),
                      "sources": len({d["source"] for d in docs})}
        manifest.write_text(json.dumps({"recipe": recipe, "corpus": corpora[k]}, indent=1))
        print(f"corpus {k}x: {len(docs)} docs, {mb:.1f} MB text, {len(paths)} files "
              f"({time.monotonic() - started:.0f}s to grow)", flush=True)
        del docs
    if args.only_grow:
        return

    if not args.no_warmup:  # trains the default quality models into runs/.cache once
        cfg = config_for("warmup", corpora[sizes[0]]["paths"][:1], runs_dir, "local", args.workers)
        path = work / "warmup.yaml"
        path.write_text(yaml.safe_dump(cfg))
        print("warm-up run (quality models into the cache) ...", flush=True)
        run_once(path, work / "warmup.log", 1.0)

    results = []
    for k, _ in plan:
        for runner in runners:  # interleaved: local, dask at each size
            name = f"scale-{k}{'' if k == 'fixed' else 'x'}-{runner}"
            cfg = config_for(name, corpora[k]["paths"], runs_dir, runner, args.workers, args.worker_memory,
                             args.unit_mb)
            path = work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            subprocess.run(["rm", "-rf", str(Path(runs_dir) / name)], check=False)
            load = os.getloadavg()
            print(f"run {name} (load {load[0]:.2f}) ...", flush=True)
            res = run_once(path, work / f"{name}.log", args.sample_s)
            stats_path = Path(runs_dir) / name / "stats.json"
            stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
            steps = {row["step"]: row for row in stats.get("steps", [])}
            cpu = {s: steps.get(s, {}).get("cpu_seconds") for s in STEPS}
            clean = res.get("clean_cpu")
            cpu["clean"] = clean
            cpu["clean_other"] = clean - sum(cpu[s] or 0 for s in STEPS) if clean is not None else None
            cpu["total"] = res["total_cpu_s"]
            cpu["shards"] = res["total_cpu_s"] - clean if clean is not None else None
            workers = [p for p in res["procs"].values() if p["kind"] == "worker"]
            driver = [p for p in res["procs"].values() if p["kind"] == "driver"]
            row = {"size": k, "runner": runner, "rc": res["rc"], "docs": corpora[k]["docs"],
                   "MB": round(corpora[k]["MB"], 2), "wall_s": round(res["wall_s"], 1),
                   "clean_wall_s": round(res.get("clean_wall", float("nan")), 1),
                   "cpu_s": {s: (round(v, 2) if v is not None else None) for s, v in cpu.items()},
                   "cpu_s_per_MB": round(res["total_cpu_s"] / corpora[k]["MB"], 2),
                   "peak_rss_MB_driver": round(max((p["peak_rss"] for p in driver), default=0) / 1e6),
                   "peak_rss_MB_per_worker": sorted(round(p["peak_rss"] / 1e6) for p in workers),
                   "worker_processes": len(workers),
                   "kept": stats.get("kept"), "accounting_balanced": stats.get("accounting", {}).get("balanced"),
                   "docs_sha256": tree_digest(Path(runs_dir) / name / "docs"),
                   "loadavg_before": [round(x, 2) for x in load], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                   "procs": res["procs"]}
            results.append(row)
            (out / "bench_scale.json").write_text(json.dumps({"args": vars(args), "corpora": corpora,
                                                              "runs": results}, indent=1))
            print(json.dumps({k2: v for k2, v in row.items() if k2 != "procs"}), flush=True)

    summary = summarize(results, sizes, runners)
    (out / "bench_scale.json").write_text(json.dumps({"args": vars(args), "corpora": corpora, "runs": results,
                                                      "summary": summary}, indent=1))
    (out / "bench_scale.md").write_text(markdown(results, summary, sizes, runners))
    print(markdown(results, summary, sizes, runners))


def summarize(results: list[dict], sizes: list[int], runners: list[str]) -> dict:
    summary = {}
    for runner in runners:
        fixed = next((r for r in results if r["runner"] == runner and r["size"] == "fixed" and r["rc"] == 0), None)
        rows = sorted((r for r in results if r["runner"] == runner and r["rc"] == 0 and r["size"] != "fixed"),
                      key=lambda r: r["size"])
        if len(rows) < 2:
            continue
        mbs = [r["MB"] for r in rows]
        exps = {}
        for stage in STAGES:
            vals = [r["cpu_s"].get(stage) for r in rows]
            pairs = [round(math.log(vals[i + 1] / vals[i]) / math.log(mbs[i + 1] / mbs[i]), 2)
                     if vals[i] and vals[i + 1] else None for i in range(len(rows) - 1)]
            fit = fit_exponent(mbs, vals)
            exps[stage] = {"fit": round(fit, 3) if fit is not None else None, "pairwise": pairs}
            if fixed and stage in ("clean_other", "clean", "shards", "total"):
                net = [max(1e-9, v - fixed["cpu_s"][stage]) for v in vals]
                fit_net = fit_exponent(mbs, net)
                exps[stage]["fit_minus_fixed"] = round(fit_net, 3) if fit_net is not None else None
                exps[stage]["fixed_s"] = fixed["cpu_s"][stage]
        peak_1 = max(rows[0]["peak_rss_MB_per_worker"] or [0])
        peak_n = max(rows[-1]["peak_rss_MB_per_worker"] or [0])
        largest = lambda r: max([r["peak_rss_MB_driver"]] + (r["peak_rss_MB_per_worker"] or []))  # noqa: E731
        summary[runner] = {"exponents": exps, "worker_rss_ratio_last_vs_first": round(peak_n / peak_1, 2)
                           if peak_1 else None,
                           # issue 44's bars: the largest process's peak and CPU s/MB, largest size over smallest
                           "largest_process_peak_ratio_last_vs_first": round(largest(rows[-1]) / largest(rows[0]), 3),
                           "cpu_s_per_MB_ratio_last_vs_first": round(rows[-1]["cpu_s_per_MB"] / rows[0]["cpu_s_per_MB"],
                                                                     3)}
    for k in sizes:  # the runners' docs/ at each size: byte-identical or not
        digests = {r["runner"]: r.get("docs_sha256") for r in results if r["size"] == k and r["rc"] == 0}
        if len(digests) > 1:
            summary.setdefault("docs_identical_across_runners", {})[str(k)] = len(set(digests.values())) == 1
    return summary


def markdown(results, summary, sizes, runners) -> str:
    lines = ["| size | runner | docs | MB | wall s | CPU s | CPU s/MB | driver peak RSS MB | worker peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['size']}{'' if r['size'] == 'fixed' else '×'} | {r['runner']} | {r['docs']:,} | {r['MB']} | {r['wall_s']} | "
                     f"{r['cpu_s']['total']:.0f} | {r['cpu_s_per_MB']} | {r['peak_rss_MB_driver']} | "
                     f"{', '.join(map(str, r['peak_rss_MB_per_worker']))} |")
    lines += ["", "CPU seconds per stage:", "",
              "| stage | " + " | ".join(f"{r['size']}{'' if r['size'] == 'fixed' else '×'} {r['runner']}" for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(
            f"{r['cpu_s'][stage]:.1f}" if r["cpu_s"].get(stage) is not None else "–" for r in results) + " |")
    identical = summary.get("docs_identical_across_runners", {})
    summary = {runner: s for runner, s in summary.items() if runner in runners}
    lines += ["", "Growth exponent of CPU time in input MB (least-squares fit; pairwise in brackets):", "",
              "| stage | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    for stage in STAGES:
        cells = []
        for runner in summary:
            e = summary[runner]["exponents"][stage]
            net = f"; minus fixed {e['fixed_s']:.0f} s: {e['fit_minus_fixed']}" if "fit_minus_fixed" in e else ""
            cells.append(f"{e['fit']} ({', '.join(map(str, e['pairwise']))}){net}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines += ["", "Peak worker RSS, largest size / smallest: " + ", ".join(
        f"{runner} {s['worker_rss_ratio_last_vs_first']}" for runner, s in summary.items())]
    lines += ["Largest process's peak RSS, largest size / smallest: " + ", ".join(
        f"{runner} {s['largest_process_peak_ratio_last_vs_first']}" for runner, s in summary.items())]
    lines += ["CPU s per MB, largest size / smallest: " + ", ".join(
        f"{runner} {s['cpu_s_per_MB_ratio_last_vs_first']}" for runner, s in summary.items())]
    lines += [f"docs/ byte-identical across runners at {k}×: {'yes' if same else 'NO'}" for k, same in identical.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

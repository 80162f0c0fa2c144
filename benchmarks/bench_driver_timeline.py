"""The phased clean's driver memory as a timeline per phase (issue 44): which phase makes the driver grow.

Runs the clean stage alone (``run_stages(cfg, ("clean",))``, bench_scale's config: demo steps, near-dedup's
``beam`` path, ``runner.unit_bytes`` small so there are several units) in a child process whose phases
(A per unit, B, C per unit, D) print their boundaries with the child's RSS; this process samples the child's
RSS (the driver: the FnApiRunner keeps every shuffle's data there) and its workers' every ``--sample-s``
seconds and reports each phase's driver peak, at each size, sizes interleaved over ``--reps``.

Usage:
  python benchmarks/bench_driver_timeline.py --sizes-mb 4,16 --unit-mb 2 [--reps 1] [--out benchmarks/out]
The corpora are grown as bench_scale's (``scale_corpus.grow``); the quality models are trained into the shared
``runs/.cache`` by a warm-up clean of the smallest corpus first, so no measured run trains them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import config_for  # noqa: E402
from scale_corpus import grow, host_documents, read_jsonl, write_corpus  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# The child: the clean stage with each phase's boundaries printed as "PHASE <name> <start|end> <monotonic> <rss>".
CHILD = r"""
import sys, time, psutil
from pipelines import clean_units
from pipelines.config import load_config
from pipelines.run import run_stages

me = psutil.Process()

def mark(name, edge):
    print(f"PHASE {name} {edge} {time.monotonic():.3f} {me.memory_info().rss}", flush=True)

def wrap(method, label):
    def wrapped(self, *args, **kwargs):
        name = label(args)
        mark(name, "start")
        try:
            return method(self, *args, **kwargs)
        finally:
            mark(name, "end")
    return wrapped

P = clean_units.PhasedClean
P._unit_a = wrap(P._unit_a, lambda a: "A")
P._unit_c = wrap(P._unit_c, lambda a: "C")
P._phase_b = wrap(P._phase_b, lambda a: "B")
P._merge = wrap(P._merge, lambda a: "D")
run_stages(load_config(sys.argv[1]), ("clean",), log=lambda line: print(line, flush=True))
mark("end", "end")
"""


def run_clean(cfg_path: Path, sample_s: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(cfg_path)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    samples: list[tuple[float, int, int]] = []  # (monotonic, driver rss, largest worker rss)
    stop = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                driver = root.memory_info().rss
                workers = [c.memory_info().rss for c in root.children(recursive=True)]
            except psutil.Error:
                workers, driver = [], 0
            samples.append((time.monotonic(), driver, max(workers, default=0)))
            stop.wait(sample_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    marks, tail = [], []
    for line in proc.stdout:
        if line.startswith("PHASE "):
            _, name, edge, at, rss = line.split()
            marks.append((name, edge, float(at), int(rss)))
        else:
            tail = (tail + [line.rstrip()])[-20:]
    rc = proc.wait()
    stop.set()
    sampler.join()
    if rc != 0:
        raise SystemExit(f"clean failed (rc {rc}):\n" + "\n".join(tail))
    # each sample to the phase whose span holds it (A and C: every unit's span; between phases: "glue")
    spans = []
    open_at: dict[str, float] = {}
    for name, edge, at, _ in marks:
        if edge == "start":
            open_at[name] = at
        elif name in open_at:
            spans.append((name, open_at.pop(name), at))
    per_phase: dict[str, int] = {}
    for at, driver, _ in samples:
        phase = next((n for n, a, b in spans if a <= at <= b), "glue")
        per_phase[phase] = max(per_phase.get(phase, 0), driver)
    at_edges = {f"{name}_{edge}": round(rss / 1e6) for name, edge, _, rss in marks
                if name in ("B", "D", "end")}
    return {"wall_s": round(time.monotonic() - started, 1),
            "driver_peak_MB": round(max(s[1] for s in samples) / 1e6),
            "worker_peak_MB": round(max(s[2] for s in samples) / 1e6),
            "driver_peak_MB_by_phase": {k: round(v / 1e6) for k, v in sorted(per_phase.items())},
            "driver_rss_MB_at": at_edges,
            "units_A": sum(1 for m in marks if m[0] == "A" and m[1] == "start"),
            "driver_rss_MB_at_phase_starts": [f"{name}:{round(rss / 1e6)}" for name, edge, _, rss in marks
                                              if edge == "start"],
            "timeline": [(round(at - started, 1), round(d / 1e6), round(w / 1e6)) for at, d, w in samples]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(REPO.parent / "shared/corpora/real_text_sample.jsonl.gz"))
    parser.add_argument("--sizes-mb", default="4,16")
    parser.add_argument("--unit-mb", type=float, default=2.0)
    parser.add_argument("--files-per-mb", type=float, default=1.0, help="input files per MB of text")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--work", default="/tmp/bench_driver_timeline")
    parser.add_argument("--out", default=str(REPO / "benchmarks/out"))
    parser.add_argument("--label", default="run", help="names this run's results file (e.g. before / after)")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs_dir = str(work / "runs")
    base_docs = None
    corpora = {}
    for mb in sizes:
        folder = work / f"corpus_{mb:g}mb"
        paths = sorted(str(p) for p in folder.glob("*.jsonl.gz")) if folder.is_dir() else []
        if not paths:
            base_docs = base_docs or read_jsonl(args.corpus)
            site = next(Path(sys.prefix).glob("lib/python3*/site-packages"), None)
            docs = grow(base_docs, int(mb * 1e6), fresh_share=0.75, seed=0,
                        extra_docs=host_documents(site_packages=str(site) if site else None))
            paths = write_corpus(docs, str(folder), files=max(1, round(mb * args.files_per_mb)))
        corpora[mb] = paths

    def config(name: str, paths: list[str]) -> Path:
        cfg = config_for(name, paths, runs_dir, "local", args.workers, unit_mb=args.unit_mb)
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        subprocess.run(["rm", "-rf", str(Path(runs_dir) / name)], check=False)
        return path

    if not (Path(runs_dir) / ".cache").is_dir():
        print("warm-up clean (quality models into the cache) ...", flush=True)
        run_clean(config("warmup", corpora[sizes[0]][:1]), 1.0)
    results = []
    for rep in range(args.reps):
        for mb in sizes:  # interleaved
            load = os.getloadavg()[0]
            res = run_clean(config(f"timeline-{mb:g}mb", corpora[mb]), args.sample_s)
            row = {"label": args.label, "size_MB": mb, "rep": rep, "load": round(load, 2),
                   **{k: v for k, v in res.items() if k != "timeline"}}
            print(json.dumps(row), flush=True)
            results.append({**row, "timeline": res["timeline"]})
            (out / f"driver_timeline_{args.label}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()

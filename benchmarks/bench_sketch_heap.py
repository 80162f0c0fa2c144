"""Near-dedup's sketching under glibc's heap settings (``runio/heap.py``): CPU seconds and minor page faults of
``SketchBuilder.sketch_batch`` over a corpus, 256 documents a batch, each setting in a fresh process, interleaved.

Settings: ``default`` (glibc's dynamic thresholds), ``dask`` (``MALLOC_TRIM_THRESHOLD_=65536``, what Dask's
nanny gives its workers: the dynamic thresholds off), ``dask+mmap`` (that and ``numpy_friendly_heap()``, what a
Dask worker runs with), ``dask+mmap+top`` (``numpy_friendly_heap(keep_free_top=True)``, what the in-memory
``corpusmill dedup`` process sets).

Usage: python benchmarks/bench_sketch_heap.py CORPUS.jsonl.gz [...] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"default": ({}, None), "dask": ({"MALLOC_TRIM_THRESHOLD_": "65536"}, None),
            "dask+mmap": ({"MALLOC_TRIM_THRESHOLD_": "65536"}, False),
            "dask+mmap+top": ({"MALLOC_TRIM_THRESHOLD_": "65536"}, True)}


def measure(paths: list[str], keep_free_top: bool | None) -> dict:
    """In this process: sketch every document once to warm up, then once more, measured."""
    import resource
    import time

    from beamio.config_base import InputConfig
    from beamio.read import iter_records, resolve_inputs
    from runio.heap import numpy_friendly_heap
    from transforms.near_dedup.core import NearDedupConfig, SketchBuilder

    if keep_free_top is not None:
        numpy_friendly_heap(keep_free_top=keep_free_top)
    docs = [d for _, _, d in iter_records(InputConfig(paths=paths), resolve_inputs(paths)) if isinstance(d, dict)]
    builder = SketchBuilder(NearDedupConfig())
    for start in range(0, len(docs), 256):  # warm-up: tables, the heap's first growth
        builder.sketch_batch(docs[start:start + 256])
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for start in range(0, len(docs), 256):
        builder.sketch_batch(docs[start:start + 256])
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"docs": len(docs), "cpu_s": round(time.process_time() - cpu, 2),
            "sys_s": round(after.ru_stime - before.ru_stime, 2), "minor_faults": after.ru_minflt - before.ru_minflt}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--measure", choices=["none", "mmap", "mmap+top"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.paths, {"none": None, "mmap": False, "mmap+top": True}[args.measure])))
        return
    results: dict[str, list] = {name: [] for name in SETTINGS}
    for _ in range(args.reps):
        for name, (env, top) in SETTINGS.items():
            flag = "none" if top is None else "mmap+top" if top else "mmap"
            out = subprocess.run([sys.executable, __file__, *args.paths, "--measure", flag], cwd=REPO, check=True,
                                 capture_output=True, text=True, env={**os.environ, **env,
                                                                      "PYTHONPATH": str(REPO)}).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    print("| setting | CPU s (reps) | system s | minor page faults |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        cpu = ", ".join(str(r["cpu_s"]) for r in runs)
        system = ", ".join(str(r["sys_s"]) for r in runs)
        faults = ", ".join(format(r["minor_faults"], ",") for r in runs)
        print(f"| {name} | {cpu} | {system} | {faults} |")


if __name__ == "__main__":
    main()

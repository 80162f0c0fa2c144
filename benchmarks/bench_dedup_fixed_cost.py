"""What near-dedup's Beam path costs before any document is read: building its Beam graph and translating it
for the Dask runner, against the in-memory path in the same pipeline, interleaved (issue 18, point 3).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_dedup_fixed_cost.py [--corpus data/demo/corpus.jsonl.gz]
        [--reps 12] [--workers 2]

Each rep builds, for each path, the graph ``corpusmill dedup`` builds (read → ``NearDedup``; the partitions
of the command for ``--workers`` workers), then plans and translates it as the Dask runner does
(``plan_pipeline`` + ``translate``: the graph of tasks), without running it. Reported per path: the median
and each rep's seconds of building (wall; it is one thread's CPU), of planning + translating, the number of
transforms applied (``Pipeline.apply`` calls, composites included) and the Dask graph's tasks.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import apache_beam as beam

from beam_dask.runner import whole_source_shuffles
from beam_dask.translate import plan_pipeline, translate
from beamio.beam_options import make_pipeline
from beamio.config_base import InputConfig
from beamio.read import resolve_inputs
from beamio.read_beam import ReadCorpus
from transforms.near_dedup import NearDedup
from transforms.near_dedup.core import NearDedupConfig

PATHS = ("beam", "memory")


class _CountingPipeline(beam.Pipeline):
    """A pipeline that counts the transforms applied to it (each costs Beam an options view, type inference
    and, for a ParDo, an inspection of its DoFn)."""

    applied = 0

    def apply(self, transform, pvalueish=None, label=None):
        self.applied += 1
        return super().apply(transform, pvalueish, label)


def build_and_translate(path: str, corpus: str, workers: int) -> dict:
    files = resolve_inputs([corpus])
    input_bytes = sum(f.bytes for f in files)
    dedup = NearDedup(NearDedupConfig(mode=path), input_bytes=input_bytes, workers=workers)
    parts = dedup.partitions()
    options = make_pipeline("direct", workers, [], input_bytes=input_bytes)._options
    started = time.perf_counter()
    pipeline = _CountingPipeline(options=options)
    read = pipeline | "Read" >> ReadCorpus(InputConfig(paths=[corpus]), files, spread_documents=len(files) < 2 * parts)
    read["docs"] | "NearDedup" >> dedup
    built = time.perf_counter()
    translation = translate(plan_pipeline(pipeline), "bench", parts, {},
                            whole_sources=whole_source_shuffles(input_bytes))  # as the runner decides by default
    translated = time.perf_counter()
    return {"build_s": built - started, "translate_s": translated - built, "applied": pipeline.applied,
            "tasks": len(translation.graph), "partitions": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="data/demo/corpus.jsonl.gz")
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.reps < 1 or args.workers < 1:
        parser.error("--reps and --workers must be at least 1")
    for path in PATHS:  # warm: imports, and Beam's caches of what it has inspected once
        build_and_translate(path, args.corpus, args.workers)
    runs: dict[str, list[dict]] = {path: [] for path in PATHS}
    for rep in range(args.reps):
        for path in (PATHS if rep % 2 == 0 else PATHS[::-1]):  # A B B A: neither always first
            runs[path].append(build_and_translate(path, args.corpus, args.workers))
    summary = {}
    for path, rows in runs.items():
        summary[path] = {
            "build_s_median": round(statistics.median(r["build_s"] for r in rows), 4),
            "translate_s_median": round(statistics.median(r["translate_s"] for r in rows), 4),
            "build_s": [round(r["build_s"], 4) for r in rows],
            "translate_s": [round(r["translate_s"], 4) for r in rows],
            "applied": rows[0]["applied"], "tasks": rows[0]["tasks"], "partitions": rows[0]["partitions"],
        }
    print(json.dumps({"corpus": args.corpus, "workers": args.workers, "reps": args.reps, "paths": summary}, indent=1))


if __name__ == "__main__":
    main()

"""Throughput of the cleaning backbone (read → normalize → filters → exact dedup → write the run directory).

Measures, in one run: the pure-Python cores on one process (the baseline: no Beam, no I/O beyond reading),
and `prepare` through Beam with 1 and 2 local workers; reports docs/s and MB/s per worker and the ratio
Beam/baseline. Usage: python benchmarks/bench_backbone.py [--corpus PATH ...] [--out benchmarks/out]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pipelines.config import validate_config
from pipelines.run import run_stages
from beamio.read import read_file
from transforms.exact_dedup import text_key
from transforms.filters import FiltersConfig, HeuristicFilterStep
from transforms.normalize import NormalizeConfig, NormalizeStep
from pipelines.config import InputConfig

REPO = Path(__file__).resolve().parents[1]


def pure_core_seconds(path: str) -> tuple[float, int, int]:
    docs = [d for d in read_file(path, InputConfig(paths=[path])) if isinstance(d, dict)]
    n_bytes = sum(len(d["text"].encode()) for d in docs)
    started = time.perf_counter()
    norm, filt = NormalizeStep(NormalizeConfig()), HeuristicFilterStep(FiltersConfig())
    seen = set()
    for i in range(0, len(docs), 256):
        batch = docs[i:i + 256]
        reasons = norm.apply(batch)
        live = [d for d, r in zip(batch, reasons) if r is None]
        for d, r in zip(live, filt.apply(live)):
            if r is None:
                seen.add(text_key(d["text"]))
    return time.perf_counter() - started, len(docs), n_bytes


def beam_seconds(path: str, workers: int, runs_dir: str, label: str) -> float:
    # The backbone alone: the later steps (near-dedup, quality, PII) have their own benchmarks.
    cfg = validate_config({"name": f"bench-{label}-{workers}", "input": {"paths": [path]},
                           "output": {"runs_dir": runs_dir}, "runner": {"name": "direct", "workers": workers},
                           "near_dedup": {"enabled": False}, "quality": {"enabled": False},
                           "pii": {"enabled": False}})
    started = time.perf_counter()
    run_stages(cfg, ("clean",), log=lambda _: None)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", action="append")
    args = parser.parse_args()
    corpora = args.corpus or [str(REPO / "data/demo/corpus.jsonl.gz")]
    shared = REPO.parent / "shared/corpora/real_text_sample.jsonl.gz"
    if not args.corpus and shared.exists():
        corpora.append(str(shared))
    rows = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for index, path in enumerate(corpora):
            base_s, n_docs, n_bytes = pure_core_seconds(path)
            mb = n_bytes / 1e6
            row = {"corpus": Path(path).name, "docs": n_docs, "MB": round(mb, 2),
                   "pure_core_docs_s": round(n_docs / base_s), "pure_core_MB_s": round(mb / base_s, 2)}
            for workers in (1, 2):
                secs = beam_seconds(path, workers, runs_dir, str(index))
                row[f"beam_{workers}w_docs_s_per_worker"] = round(n_docs / secs / workers)
                row[f"beam_{workers}w_MB_s_per_worker"] = round(mb / secs / workers, 2)
                row[f"beam_{workers}w_vs_pure_core"] = round(base_s / secs, 2)
            rows.append(row)
            print(json.dumps(row))
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()

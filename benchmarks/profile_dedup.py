"""Where `corpusmill dedup`'s in-memory path spends its CPU time, phase by phase, in this process.

    PYTHONPATH=. .venv/bin/python benchmarks/profile_dedup.py FILE.jsonl.gz [...]

Runs what ``pipelines.dedup.write_clusters`` runs in this process (``core.dedup_documents``: the same functions,
in the same order), with a CPU timer (``time.process_time``) around each phase, and a cProfile of the sketching
to split it into tokenization (code points, NFKC / lower-case tables, word runs), word and shingle hashing and
signatures. Prints one Markdown row
per phase. The Beam path's fixed costs are measured by bench_dedup.py (whole runs; its workers are processes).
"""
from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time

T0 = time.process_time()

from beamio.config_base import InputConfig  # noqa: E402
from beamio.read import Quarantined, iter_records  # noqa: E402
from transforms.near_dedup.core import (SKETCH_BATCH, NearDedupConfig, SketchBuilder, bucket_key_matrix,  # noqa: E402
                                        component_labels, dedup_in_memory, star_edge_arrays)

def main(paths: list[str]) -> int:
    imports = time.process_time() - T0
    cfg = NearDedupConfig()
    builder = SketchBuilder(cfg)
    phases: dict[str, float] = {"imports (numpy, pydantic, the reader, near_dedup)": imports}
    clock = time.process_time
    docs, batches = [], []
    start = clock()
    batch = []
    for _, _, item in iter_records(InputConfig(paths=paths)):
        if isinstance(item, Quarantined):
            continue
        batch.append(item)
        if len(batch) >= SKETCH_BATCH:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    phases["reading (gzip, JSON, records, ids)"] = clock() - start
    profile = cProfile.Profile()
    sketches = []
    start = clock()
    profile.enable()
    for batch in batches:
        sketches.extend(s for s in builder.sketch_batch(batch) if s is not None)
    profile.disable()
    sketch_total = clock() - start
    stats = pstats.Stats(profile).stats

    def cumulative(name: str) -> float:
        return sum(v[3] for k, v in stats.items() if "near_dedup/minhash.py" in k[0] and k[2] == name)

    def own(name: str) -> float:
        return sum(v[2] for k, v in stats.items() if "near_dedup/minhash.py" in k[0] and k[2] == name)

    parts = {  # cProfile's times, scaled below to the batch loop's CPU time
        "tokenization (code points, NFKC/lower-case tables, classes, word runs)":
            cumulative("_lowered_chunk") + cumulative("_runs") + own("shingle_sets"),
        "word + shingle hashing (prefix sums, n-gram combine, sort-unique)": cumulative("_spans_batch"),
        "signatures (one-permutation MinHash + densification)": cumulative("signatures"),
    }
    profiled = sum(v[2] for v in stats.values()) or 1.0
    for name, seconds in parts.items():
        phases[f"sketching: {name}"] = sketch_total * seconds / profiled
    phases["sketching: bookkeeping (batches, Sketch objects, ranks)"] = sketch_total * max(
        0.0, 1 - sum(parts.values()) / profiled)
    ordered = sorted(sketches, key=lambda s: s.rank)
    import numpy as np

    start = clock()
    signatures = np.stack([s.signature for s in ordered])
    keys = bucket_key_matrix(signatures, cfg)
    phases["band keys (packed int64)"] = clock() - start
    start = clock()
    a, b = star_edge_arrays(keys, np.zeros(len(ordered), dtype=bool))
    phases["candidate edges (stars per bucket, by sort)"] = clock() - start
    start = clock()
    decisions = dedup_in_memory(sketches, cfg)
    whole = clock() - start
    phases["dedup_in_memory as a whole (band keys, candidates, verification, components, stars)"] = whole
    start = clock()
    component_labels(len(ordered), a, b)
    phases["  of which: connected components of all candidate edges (array union-find)"] = clock() - start
    start = clock()
    removed = {d.id: d.cluster for d in decisions if d.removed}
    lines = [json.dumps({"id": s.id, "cluster": removed.get(s.id, s.id), "kept": s.id not in removed})
             for s in ordered]
    phases["writing the cluster lines (JSON)"] = clock() - start
    total = sum(v for k, v in phases.items() if not k.startswith("  ") and "band keys" not in k
                and "candidate edges" not in k)
    n = sum(len(b) for b in batches)
    print(f"{n} documents, {sum(len(d['text']) for b in batches for d in b) / max(n, 1):.0f} chars/doc, "
          f"{len(lines)} sketched, {len(removed)} removed")
    print("| phase | CPU s | share |\n|---|---|---|")
    for name, seconds in phases.items():
        print(f"| {name} | {seconds:.2f} | {100 * seconds / total:.0f} % |")
    print(f"| total (CPU of this process) | {time.process_time() - T0:.2f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Near-duplicate removal on the labelled dev set: quality against both truths and throughput against datasketch.

    .venv/bin/python benchmarks/bench_dedup.py [--data ../shared/eval/dedup_dev.jsonl.gz] [--quick]

Runs, in one process and one sitting (so the machine's load is shared alike):
  * the baseline: datasketch ``MinHash`` (128 permutations, ``update`` per 5-word shingle) + ``MinHashLSH``
    (threshold 0.8), clusters by union-find over query results; and the same keeping only candidate pairs
    whose estimated Jaccard is >= 0.8;
  * ``corpusmill dedup`` end to end (a subprocess: read, sketch, dedup, write), DirectRunner, default config;
    then the variants: the distributed Beam path, rank-order resolution, SimHash.
Each is scored as ``../shared/eval/README.md`` defines (pairs within a predicted cluster vs exact-Jaccard >= 0.8
pairs and vs cluster labels; recall per Jaccard bin; predicted pairs with J < 0.5; residual duplicates and
truth clusters lost when one document per predicted cluster is kept). Writes benchmarks/out/dedup.json and
prints a Markdown table for benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORD_RE = re.compile(r"\w+")
BINS = [(0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0001)]


def load_records(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def load_pairs(path: str) -> dict[frozenset, float]:
    pairs = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            a, b, jaccard, _ = line.rstrip("\n").split("\t")
            pairs[frozenset((a, b))] = float(jaccard)
    return pairs


def predicted_pairs(clusters: dict[str, object]) -> set[frozenset]:
    members = collections.defaultdict(list)
    for doc_id, cluster in clusters.items():
        members[cluster].append(doc_id)
    return {frozenset(p) for group in members.values() for p in itertools.combinations(group, 2)}


def _prf(predicted: set, truth: set) -> dict:
    tp = len(predicted & truth)
    precision = tp / len(predicted) if predicted else 1.0
    recall = tp / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}


def score(clusters: dict[str, object], kept: set[str], records: list[dict], pairs: dict[frozenset, float]) -> dict:
    """``clusters``: doc id → predicted cluster; ``kept``: the one document kept per predicted cluster."""
    predicted = predicted_pairs(clusters)
    exact_truth = {p for p, j in pairs.items() if j >= 0.8}
    by_cluster = collections.defaultdict(list)
    for rec in records:
        by_cluster[rec["cluster_id"]].append(rec["id"])
    cluster_truth = {frozenset(p) for group in by_cluster.values() for p in itertools.combinations(group, 2)}
    recall_by_bin = {}
    for lo, hi in BINS:
        in_bin = {p for p, j in pairs.items() if lo <= j < hi}
        recall_by_bin[f"{lo:.1f}-{min(hi, 1.0):.1f}"] = round(len(in_bin & predicted) / len(in_bin), 4) if in_bin else None
    kept_pairs = {p for p in exact_truth if p <= kept}
    return {
        "exact_j08": _prf(predicted, exact_truth),
        "cluster_truth": _prf(predicted, cluster_truth),
        "recall_by_jaccard_bin": recall_by_bin,
        "predicted_pairs": len(predicted),
        "pairs_below_j05": sum(1 for p in predicted if pairs.get(p, 0.0) < 0.5),
        "residual_dup_pairs_j08": len(kept_pairs),
        "truth_clusters_lost": sum(1 for group in by_cluster.values() if not any(d in kept for d in group)),
        "removed": len(records) - len(kept),
    }


class PeakRss:
    """Peak resident memory of this process or of a child process tree, sampled every 50 ms."""

    def __init__(self, pid: int):
        import psutil

        self._proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self._proc] + self._proc.children(recursive=True)
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_datasketch(records: list[dict], verify_estimate: bool) -> tuple[dict, set, float, float]:
    """The plain baseline: MinHash.update per 5-word shingle, MinHashLSH(0.8), union-find over query hits."""
    from datasketch import MinHash, MinHashLSH

    started, cpu_started = time.perf_counter(), time.process_time()
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    sketches = []
    for index, rec in enumerate(records):
        words = WORD_RE.findall(unicodedata.normalize("NFKC", rec["text"]).lower())
        sketch = MinHash(num_perm=128)
        for start in range(max(len(words) - 4, 1)):
            sketch.update(" ".join(words[start:start + 5]).encode("utf-8"))
        lsh.insert(index, sketch)
        sketches.append(sketch)
    parent = list(range(len(records)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for index, sketch in enumerate(sketches):
        for other in lsh.query(sketch):
            if other != index and (not verify_estimate or sketch.jaccard(sketches[other]) >= 0.8):
                ra, rb = find(index), find(other)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    clusters = {rec["id"]: find(i) for i, rec in enumerate(records)}
    kept = {rec["id"] for i, rec in enumerate(records) if find(i) == i}
    return clusters, kept, elapsed, cpu


def children_cpu() -> float:
    """User + system CPU seconds of all terminated, waited-for descendants (Beam worker processes included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_corpusmill(data: str, overrides: list[str], extra: list[str]) -> tuple[dict, set, float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "clusters.jsonl")
        cmd = [sys.executable, "-m", "cli.main", "dedup", data, "--out", out]
        for item in overrides:
            cmd += ["--set", item]
        cmd += extra
        started, cpu_started = time.perf_counter(), children_cpu()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        with PeakRss(proc.pid) as rss:
            stdout, stderr = proc.communicate()
        elapsed, cpu = time.perf_counter() - started, children_cpu() - cpu_started
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
        clusters, kept = {}, set()
        with open(out, encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                clusters[row["id"]] = row["cluster"]
                if row["kept"]:
                    kept.add(row["id"])
    return clusters, kept, elapsed, cpu, rss.peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO.parent / "shared/eval/dedup_dev.jsonl.gz"))
    parser.add_argument("--pairs", help="default: the _pairs.tsv.gz next to --data")
    parser.add_argument("--quick", action="store_true", help="baseline and the default configuration only")
    parser.add_argument("--out", default=str(REPO / "benchmarks/out/dedup.json"))
    args = parser.parse_args()
    if not os.path.exists(args.data):
        print(f"bench_dedup: {args.data} not found (the dev set lives in ../shared/eval/)", file=sys.stderr)
        return 2
    pairs_path = args.pairs or args.data.replace(".jsonl.gz", "_pairs.tsv.gz")
    records, pairs = load_records(args.data), load_pairs(pairs_path)
    n = len(records)
    results = []

    def record(name, clusters, kept, elapsed, cpu, peak):
        row = {"method": name, "docs_per_s": round(n / elapsed, 1), "seconds": round(elapsed, 2),
               "cpu_seconds": round(cpu, 2), "docs_per_cpu_s": round(n / cpu, 1),
               "peak_rss_mb": round(peak / 2**20) if peak else None, **score(clusters, kept, records, pairs)}
        results.append(row)
        print(json.dumps(row), flush=True)

    import psutil

    me = psutil.Process()
    for verify in (False, True):
        before = me.memory_info().rss
        with PeakRss(os.getpid()) as rss:
            clusters, kept, elapsed, cpu = run_datasketch(records, verify)
        name = "datasketch 128 perm, MinHashLSH 0.8" + (", estimated J >= 0.8 kept" if verify else "")
        record(name, clusters, kept, elapsed, cpu, max(rss.peak - before, 0) or None)

    variants = [("corpusmill dedup (default: minhash, exact verify, degree stars; direct runner)", [], [])]
    if not args.quick:
        variants += [
            ("corpusmill dedup, distributed Beam path (mode=beam)", ["near_dedup.mode=beam"], []),
            ("corpusmill dedup, rank-order stars (resolution=rank)", ["near_dedup.resolution=rank"], []),
            ("corpusmill dedup, SimHash (6 blocks, <=3 bits), exact verify", ["near_dedup.method=simhash"], []),
            ("corpusmill dedup, verify=estimated", ["near_dedup.verify=estimated"], []),
        ]
    for name, overrides, extra in variants:
        clusters, kept, elapsed, cpu, peak = run_corpusmill(args.data, overrides, extra)
        record(name, clusters, kept, elapsed, cpu, peak)

    baseline, baseline_cpu = results[0]["docs_per_s"], results[0]["docs_per_cpu_s"]
    for row in results:
        row["speedup_vs_datasketch"] = round(row["docs_per_s"] / baseline, 2)
        row["cpu_speedup_vs_datasketch"] = round(row["docs_per_cpu_s"] / baseline_cpu, 2)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"data": args.data, "docs": n, "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                   "results": results}, fh, indent=1)

    print("\n| method | docs/s (wall) | × datasketch (wall) | × datasketch (CPU time) | peak RSS MB | F1 / P / R exact-J≥0.8 | F1 cluster truth | "
          "pairs J<0.5 | truth clusters lost | residual J≥0.8 pairs | recall by J bin (0.5–0.6 … 0.9–1.0) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        e, c = r["exact_j08"], r["cluster_truth"]
        bins = " / ".join("-" if v is None else f"{v:.3f}" for v in r["recall_by_jaccard_bin"].values())
        print(f"| {r['method']} | {r['docs_per_s']} | {r['speedup_vs_datasketch']} | "
              f"{r['cpu_speedup_vs_datasketch']} | {r['peak_rss_mb']} | "
              f"{e['f1']:.3f} / {e['precision']:.3f} / {e['recall']:.3f} | {c['f1']:.3f} | {r['pairs_below_j05']} | "
              f"{r['truth_clusters_lost']} | {r['residual_dup_pairs_j08']} | {bins} |")
    print(f"\nload average during the run: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

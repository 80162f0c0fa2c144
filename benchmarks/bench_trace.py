"""How `corpusmill trace RUN --id ID` scales with the size of a run's shards.

    PYTHONPATH=. python benchmarks/bench_trace.py --sizes-gb 0.1 0.5 1.5 --repeats 3

Builds one synthetic run directory per size under --work (default /tmp/bench_trace; reused when present):
2048-token uint16 rows of random tokens, two documents per row, written by the project's shard writer
(``tokenizer.shards.write_shard_file``, 8,192 rows per shard); ``docs/`` with an input id per document in
``meta``; ``manifest.json``/``stats.json`` with the input's sha256 (ids are the reader's ids of its positions);
a ``train/data_order.jsonl`` of two epochs (global batch 256) and a checkpoint per half epoch. Then, interleaved
per repeat: the baseline — one full pass over the shard files' bytes (what any trace that decodes every shard
costs at least) — and the trace of one document's input id as a separate `corpusmill trace --json` process
(wall and CPU, the child's rusage), checked to find the document with steps. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from beamio.records import doc_id  # noqa: E402
from runio.files import write_json  # noqa: E402
from runio.layout import RunPaths  # noqa: E402
from tokenizer.docs import write_docs_parquet  # noqa: E402
from tokenizer.shards import shard_file_name, write_manifest, write_shard_file  # noqa: E402
from trainer_bridge.loop.data import SAMPLE_ORDER  # noqa: E402

SEQ_LEN, VOCAB, ROWS_PER_SHARD, GBS = 2048, 32000, 8192, 256
INPUT_KEY = "c0ffee" * 10 + "abcd"  # the stand-in sha256 of the one input file


def build_run(root: Path, size_gb: float) -> tuple[RunPaths, int]:
    """A run of about ``size_gb`` GB of shards; returns it and its number of train rows."""
    paths = RunPaths(root)
    rows_total = int(size_gb * 1e9 / (SEQ_LEN * 2))
    if paths.data_order_jsonl.is_file():
        return paths, rows_total
    rng = np.random.default_rng(0)
    paths.shards.mkdir(parents=True, exist_ok=True)
    entries, docs, position = [], [], 0
    for shard in range((rows_total + ROWS_PER_SHARD - 1) // ROWS_PER_SHARD):
        n = min(ROWS_PER_SHARD, rows_total - shard * ROWS_PER_SHARD)
        tokens = rng.integers(3, VOCAB, size=(n, SEQ_LEN), dtype=np.uint16)
        cuts = rng.integers(64, SEQ_LEN - 64, size=n)
        rows = []
        for r in range(n):
            first, second = position + 1, position + 2
            position += 2
            ids = [doc_id(INPUT_KEY, first), doc_id(INPUT_KEY, second)]
            rows.append((tokens[r], [int(cuts[r]), SEQ_LEN - int(cuts[r])], ids))
            docs += [{"id": ids[0], "text": f"document {first}", "source": "input.jsonl",
                      "meta": {"id": f"rec-{first}"}}, {"id": ids[1], "text": f"document {second}",
                                                         "source": "input.jsonl", "meta": {"id": f"rec-{second}"}}]
        entries.append(write_shard_file(str(paths.shards / shard_file_name("train", shard)), rows,
                                        seq_len=SEQ_LEN, vocab_size=VOCAB, pad_id=0))
    write_manifest(str(paths.shards), {"train": entries}, seq_len=SEQ_LEN, vocab_size=VOCAB, pad_id=0, bos_id=1,
                   eos_id=2, tokenizer_sha256="0" * 64, packing={"algorithm": "synthetic"})
    paths.docs.mkdir(parents=True, exist_ok=True)
    for part in range(4):  # as the clean writes them: split by id % parts, sorted
        write_docs_parquet(str(paths.docs / f"docs-{part:05d}-of-00004.parquet"), [d for d in docs if d["id"] % 4 == part])
    write_json(paths.manifest, {"inputs": [{"source": "input.jsonl", "path": "input.jsonl", "sha256": INPUT_KEY}]})
    write_json(paths.stats, {"documents_read": len(docs), "quarantined": {"total": 0}})
    steps = 2 * rows_total // GBS
    for step in range(steps // 4, steps + 1, max(1, steps // 4)):
        checkpoint = paths.checkpoints / f"step-{step:08d}"
        checkpoint.mkdir(parents=True, exist_ok=True)
        write_json(checkpoint / "provenance.json", {"step": step, "samples": step * GBS})
    common = {"order": SAMPLE_ORDER, "seed": 0, "train_rows": rows_total, "global_batch_size": GBS,
              "micro_batch_size": 8, "dp": 8, "shards_manifest_sha256": None}
    with open(paths.data_order_jsonl, "w") as fh:
        fh.write(json.dumps({"event": "stretch", "cause": "start", "step": 0, "sample": 0, **common, "time": 0}) + "\n")
        fh.write(json.dumps({"event": "end", "step": steps, "sample": steps * GBS, "time": 1}) + "\n")
    return paths, rows_total


def full_pass(paths: RunPaths) -> tuple[float, float]:
    """Wall and CPU seconds to read every shard byte once (the floor of any full decode)."""
    start, cpu = time.perf_counter(), time.process_time()
    buffer = bytearray(1 << 24)
    for file in sorted(paths.shards.glob("*.arrow")):
        with open(file, "rb", buffering=0) as fh:
            while fh.readinto(buffer):
                pass
    return time.perf_counter() - start, time.process_time() - cpu


def trace_once(paths: RunPaths, input_id: str) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "trace", str(paths.root), "--id", input_id, "--json"],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout.splitlines()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[0.1, 0.5, 1.5])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default="/tmp/bench_trace")
    args = parser.parse_args()
    print("| shards | rows | documents | full pass wall / CPU s | trace wall / CPU s (median) | trace / full pass (wall) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes_gb:
        paths, rows = build_run(Path(args.work) / f"run-{size:g}gb", size)
        shard_bytes = sum(f.stat().st_size for f in paths.shards.glob("*.arrow"))
        target = f"rec-{rows}"  # a document in the middle of the corpus
        passes, traces = [], []
        for _ in range(args.repeats):
            passes.append(full_pass(paths))
            wall, cpu, record = trace_once(paths, target)
            assert record["fate"] == "kept" and record["rows"] and record["steps"], record
            traces.append((wall, cpu))
        pw, pc = np.median([p[0] for p in passes]), np.median([p[1] for p in passes])
        tw, tc = np.median([t[0] for t in traces]), np.median([t[1] for t in traces])
        print(f"| {shard_bytes / 1e9:.2f} GB | {rows} | {2 * rows} | {pw:.2f} / {pc:.2f} | {tw:.2f} / {tc:.2f} | "
              f"{tw / pw:.2f} |", flush=True)


if __name__ == "__main__":
    main()

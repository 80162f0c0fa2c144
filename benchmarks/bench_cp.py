"""Context parallel on CPU: per-rank peak memory and seconds of one forward + backward of one long packed row.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_cp.py [--seq-len 32768] [--dense-max 8192]

One row of ``--seq-len`` tokens packing documents of 2k-6k tokens (seeded), a small model (dim 64, 2 layers,
4 heads, 2 kv heads). Each configuration runs in fresh processes (torchrun for cp=2), so a process's peak RSS
(``ru_maxrss``) is that configuration's alone; the RSS before the step (model built, row collated) is given too:

- ``dense cp=1``: the model's own path (SDPA on the dense [S, S] document-causal mask), only up to
  ``--dense-max`` tokens (at 32k the scores alone are 4 heads × 32k² × 4 B = 17 GB);
- ``tiled cp=1``: the context-parallel kernel on a one-rank group: the memory-efficient single-process reference;
- ``ring cp=2`` and ``allgather cp=2``: two ranks, each with its head-tail half of the row.

The summed token loss of every configuration is printed: they must agree (the same row, the same weights).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 32}


def packed_row(seq_len: int):
    import numpy as np

    rng = np.random.default_rng(0)
    lens, used = [], 0
    while used < seq_len:
        n = min(int(rng.integers(2048, 6144)), seq_len - used)
        lens.append(n)
        used += n
    tokens = rng.integers(1, MODEL["vocab_size"], seq_len)
    return tokens, lens


def worker(mode: str, seq_len: int, out: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from trainer_bridge.config import ModelConfig
    from trainer_bridge.parallel.context_parallel import apply_cp, shard_batch
    from trainer_bridge.loop.data import collate
    from trainer_bridge.model.transformer import Transformer
    from trainer_bridge.parallel.parallelize import materialize

    torch.set_num_threads(1)
    distributed = mode != "dense"
    if distributed:
        if "RANK" not in os.environ:  # tiled cp=1: a one-rank group
            os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo")
    rank, size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    cfg = ModelConfig(**MODEL, max_seq_len=seq_len)
    with torch.device("meta"):
        model = Transformer(cfg)
    materialize(model, torch.device("cpu"), seed=1)
    tokens, lens = packed_row(seq_len)
    batch = collate([(tokens, lens)], [0], seq_len)
    if distributed:
        apply_cp(model, dist.group.WORLD, "allgather" if mode == "allgather" else "ring")
        batch = shard_batch(batch, size, rank)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    logits = model(batch.input_ids, batch.position_ids, batch.segment_ids)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100, reduction="sum")
    loss.backward()
    seconds = time.perf_counter() - start
    total = loss.detach().double()
    if distributed:
        dist.all_reduce(total)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"mode": mode, "cp": size, "rank": rank, "seq_len": seq_len, "documents": len(lens),
              "seconds": round(seconds, 2), "rss_before_mib": round(rss_before), "peak_rss_mib": round(peak),
              "loss_sum": float(total)}
    (out / f"{mode}.{seq_len}.rank{rank}.json").write_text(json.dumps(record))
    if distributed:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=32768)
    parser.add_argument("--dense-max", type=int, default=8192, help="longest row for the dense single process")
    parser.add_argument("--worker", nargs=3, metavar=("MODE", "SEQ_LEN", "OUT"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), Path(args.worker[2]))
        return
    import tempfile

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    me = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        runs = [("dense", n, 1) for n in (args.dense_max,) if n <= args.seq_len]
        runs += [("tiled", n, 1) for n in sorted({args.dense_max, args.seq_len})]
        runs += [("ring", args.seq_len, 2), ("allgather", args.seq_len, 2)]
        for mode, seq_len, procs in runs:
            command = [sys.executable, me, "--worker", mode, str(seq_len), str(out)]
            if procs > 1:
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={procs}", *command[1:]]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{mode} S={seq_len} failed:\n{(done.stdout + done.stderr)[-3000:]}")
            for rank in range(procs):
                record = json.loads((out / f"{mode}.{seq_len}.rank{rank}.json").read_text())
                print(f"{mode:>9} cp={record['cp']} rank {rank}  S={seq_len:>6} ({record['documents']} docs)  "
                      f"{record['seconds']:>7.2f} s  peak RSS {record['peak_rss_mib']:>6} MiB "
                      f"(before the step {record['rss_before_mib']} MiB)  loss sum {record['loss_sum']:.4f}",
                      flush=True)


if __name__ == "__main__":
    main()

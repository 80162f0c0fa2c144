"""Context-parallel scenarios (issue 12), many per torchrun launch; compared with a single process by
tests/test_parallel_cp.py.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/cp_scenarios.py WORKDIR two
    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/dist/cp_scenarios.py WORKDIR four

WORKDIR holds ``shards/`` (the shared 32-token synthetic rows, several documents each) and ``shards_long/``
(rows of LONG_SEQ_LEN tokens, several documents each, for the long-context recipe).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import SampleLog, base_config, run_with_shards  # noqa: E402
from train_scenarios import rank  # noqa: E402

from trainer_bridge.loop.train import train  # noqa: E402

LONG_SEQ_LEN = 8192
# A tiny model on 8k-token rows: one row per micro-batch, accumulation 2, clipping active, no validation.
LONG = {"model": {"dim": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "multiple_of": 16},
        "batch": {"global_batch_size": 2, "micro_batch_size": 1}, "optimizer": {"clip_grad_norm": 0.05},
        "eval": {"interval": 0}, "checkpoint": {"enabled": False}, "steps": 3}

TWO_RANK = {"cp2_ring": {"mesh": {"cp": 2, "cp_mode": "ring"}},
            "cp2_allgather": {"mesh": {"cp": 2, "cp_mode": "allgather"}}}
# All-gather shares the ring's kernel and is covered at cp=2; one dp×cp scenario keeps the test's wall time down.
FOUR_RANK = {"dp2_cp2_ring": {"mesh": {"dp": 2, "cp": 2, "cp_mode": "ring"}}}


def long_config(overrides: dict | None = None):
    from scenario_configs import merge

    return base_config(merge(LONG, overrides or {}))


def run(workdir: Path, name: str, cfg, shards: str = "shards") -> None:
    samples = SampleLog()
    paths = run_with_shards(workdir / "runs" / name, workdir / shards)
    result = train(cfg, paths, hooks=samples.hooks())
    out = workdir / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.rank{rank()}.json").write_text(json.dumps({
        "losses": {str(k): v for k, v in result.losses.items()},
        "grad_norms": {str(k): v for k, v in result.grad_norms.items()},
        "val_losses": {str(k): v for k, v in result.val_losses.items()},
        "sample_ids": {str(k): v for k, v in samples.sample_ids.items()},
        "train_seconds": result.train_seconds}))
    dist.barrier()


def two_ranks(workdir: Path) -> None:
    for name, overrides in TWO_RANK.items():
        run(workdir, name, base_config(overrides))
    run(workdir, "long_cp2_ring", long_config({"mesh": {"cp": 2}}), shards="shards_long")


def four_ranks(workdir: Path) -> None:
    for name, overrides in FOUR_RANK.items():
        run(workdir, name, base_config(overrides))


if __name__ == "__main__":
    torch.set_num_threads(1)
    workdir, group = Path(sys.argv[1]), sys.argv[2]
    from trainer_bridge.parallel.device import init_runtime, shutdown

    runtime = init_runtime("cpu")
    {"two": two_ranks, "four": four_ranks}[group](workdir)
    shutdown(runtime)

"""Tensor-parallel scenarios (issue 12), many per torchrun launch; compared with a single process by
tests/test_parallel_tp.py.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/tp_scenarios.py WORKDIR two
    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/dist/tp_scenarios.py WORKDIR four

Every scenario also records, at each step, the pre-issue-12 global norm (``.to_local()`` squares summed as if
disjoint) so the test can show that the old computation is wrong under TP while the new one is exact.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import SampleLog, base_config, run_with_shards  # noqa: E402
from train_scenarios import copy_checkpoint, rank  # noqa: E402

from trainer_bridge.parallelize import local_squared_norm_sum  # noqa: E402
from trainer_bridge.train import TrainHooks, train  # noqa: E402

TWO_RANK = {"tp2": {"mesh": {"tp": 2}}}
FOUR_RANK = {"dp2_tp2": {"mesh": {"dp": 2, "tp": 2}}}


def old_norm_hook(store: dict):
    def hook(step, model):
        squared = local_squared_norm_sum(model)
        dist.all_reduce(squared)
        store[str(step)] = float(squared.sqrt())
    return hook


def run(workdir: Path, name: str, overrides: dict, out_name: str | None = None, **hook_args) -> None:
    samples, old_norms = SampleLog(), {}
    hooks = TrainHooks(on_batch=samples, after_backward=old_norm_hook(old_norms), **hook_args)
    paths = run_with_shards(workdir / "runs" / (out_name or name), workdir / "shards")
    result = train(base_config(overrides), paths, hooks=hooks)
    out = workdir / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.rank{rank()}.json").write_text(json.dumps({
        "losses": {str(k): v for k, v in result.losses.items()},
        "grad_norms": {str(k): v for k, v in result.grad_norms.items()},
        "val_losses": {str(k): v for k, v in result.val_losses.items()},
        "old_grad_norms": old_norms, "sample_ids": {str(k): v for k, v in samples.sample_ids.items()},
        "resumed_from": result.resumed_from}))
    dist.barrier()


def two_ranks(workdir: Path) -> None:
    for name, overrides in TWO_RANK.items():
        run(workdir, name, overrides)
    # A TP=2 checkpoint (step 5) resumed on dp=2 (FSDP, no TP): DCP reshards; the pytest side resumes it on 1 rank.
    copy_checkpoint(workdir / "runs" / "tp2", 5, workdir / "runs" / "tp2_to_dp2")
    copy_checkpoint(workdir / "runs" / "tp2", 5, workdir / "tp2_to_one")
    run(workdir, "tp2_to_dp2", {"mesh": {"dp": 2}})


def four_ranks(workdir: Path) -> None:
    for name, overrides in FOUR_RANK.items():
        run(workdir, name, overrides)


if __name__ == "__main__":
    torch.set_num_threads(1)
    workdir, group = Path(sys.argv[1]), sys.argv[2]
    from trainer_bridge.device import init_runtime, shutdown

    runtime = init_runtime("cpu")
    {"two": two_ranks, "four": four_ranks}[group](workdir)
    shutdown(runtime)

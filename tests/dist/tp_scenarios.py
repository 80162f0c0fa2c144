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
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import SampleLog, base_config, run_with_shards  # noqa: E402
from train_scenarios import copy_checkpoint, rank  # noqa: E402

from trainer_bridge.parallel.parallelize import local_squared_norm_sum  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402

TWO_RANK = {"tp2": {"mesh": {"tp": 2}}}
FOUR_RANK = {"dp2_tp2": {"mesh": {"dp": 2, "tp": 2}},
             # pp × tp = 2 × 2 (3-D mesh pp × dp × tp with dp = 1): each stage tensor-parallel over its tp pair.
             "pp2_tp2": {"mesh": {"pp": 2, "tp": 2}, "batch": {"micro_batch_size": 4},
                         "pipeline": {"schedule": "1f1b"}},
             "pp2_tp2_interleaved": {"mesh": {"pp": 2, "tp": 2}, "batch": {"micro_batch_size": 4},
                                     "pipeline": {"schedule": "interleaved_1f1b", "stages_per_rank": 2}}}


def old_norm_hook(store: dict):
    def hook(step, model):
        squared = local_squared_norm_sum(model)
        dist.all_reduce(squared)
        store[str(step)] = float(squared.sqrt())
    return hook


def stage_shapes_hook(store: dict):
    """After step 0, watch what each model part receives and returns (a pipeline stage's boundary tensors):
    shapes of the local tensors and whether they are DTensors, recorded at step 1."""
    def record(module, args, kwargs, output):
        if "in" not in store:
            store.update({"in": list(args[0].shape), "in_dtensor": isinstance(args[0], DTensor),
                          "out": list(output.shape if not isinstance(output, DTensor) else output.to_local().shape),
                          "out_dtensor": isinstance(output, DTensor)})

    def hook(step, model):
        if step == 0:
            store["stages"] = model.stage_ids
            model.parts[0].register_forward_hook(record, with_kwargs=True)
    return hook


def run(workdir: Path, name: str, overrides: dict, out_name: str | None = None, **hook_args) -> None:
    samples, old_norms, shapes = SampleLog(), {}, {}
    norm_hook, shapes_hook = old_norm_hook(old_norms), stage_shapes_hook(shapes)

    def after_backward(step, model):
        norm_hook(step, model)
        shapes_hook(step, model)
    hooks = TrainHooks(on_batch=samples, after_backward=after_backward, **hook_args)
    paths = run_with_shards(workdir / "runs" / (out_name or name), workdir / "shards")
    result = train(base_config(overrides), paths, hooks=hooks)
    out = workdir / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.rank{rank()}.json").write_text(json.dumps({
        "losses": {str(k): v for k, v in result.losses.items()},
        "grad_norms": {str(k): v for k, v in result.grad_norms.items()},
        "val_losses": {str(k): v for k, v in result.val_losses.items()},
        "old_grad_norms": old_norms, "sample_ids": {str(k): v for k, v in samples.sample_ids.items()},
        "resumed_from": result.resumed_from, "part_io": shapes}))
    dist.barrier()


def two_ranks(workdir: Path) -> None:
    for name, overrides in TWO_RANK.items():
        run(workdir, name, overrides)
    # A TP=2 checkpoint (step 5) resumed on dp=2 (FSDP, no TP): DCP reshards; the pytest side resumes it on 1 rank.
    copy_checkpoint(workdir / "runs" / "tp2", 5, workdir / "runs" / "tp2_to_dp2")
    copy_checkpoint(workdir / "runs" / "tp2", 5, workdir / "tp2_to_one")
    run(workdir, "tp2_to_dp2", {"mesh": {"dp": 2}})


def four_ranks(workdir: Path, only: list[str] | None = None) -> None:
    for name, overrides in FOUR_RANK.items():
        if only and name not in only:
            continue
        run(workdir, name, overrides)
    # A pp × tp checkpoint (step 5) resumed on one process (pytest side): DCP gathers stages and tp shards.
    if not only or "pp2_tp2" in only:
        copy_checkpoint(workdir / "runs" / "pp2_tp2", 5, workdir / "pp2_tp2_to_one")


if __name__ == "__main__":
    torch.set_num_threads(1)
    workdir, group = Path(sys.argv[1]), sys.argv[2]
    from trainer_bridge.parallel.device import init_runtime, shutdown

    runtime = init_runtime("cpu")
    {"two": two_ranks, "four": four_ranks}[group](workdir, *([sys.argv[3:]] if len(sys.argv) > 3 else []))
    shutdown(runtime)

"""Mixture-of-Experts scenarios (issue 12), one torchrun launch of 2 processes; compared with the same MoE in a
single process by tests/test_moe.py.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/moe_scenarios.py WORKDIR two
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_configs import SampleLog, base_config, merge, run_with_shards  # noqa: E402
from train_scenarios import rank  # noqa: E402

from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402

MOE = {"model": {"n_experts": 4, "top_k": 2, "moe_every": 2, "capacity_factor": 4.0,
                 "load_balance_coef": 0.05, "router_z_loss_coef": 0.01}}
MOE_DROP = merge(MOE, {"model": {"capacity_factor": 1.0}})
TWO_RANK = {
    "moe_ep2": merge(MOE, {"mesh": {"dp": 2, "ep": 2}}),
    "moe_ep2_cf1": merge(MOE_DROP, {"mesh": {"dp": 2, "ep": 2}}),
    "moe_fsdp2_cf1": merge(MOE_DROP, {"mesh": {"dp": 2}}),
}
MOE_KEYS = ("moe_expert_load", "moe_dropped_tokens", "moe_dropped_fraction", "moe_aux_loss")


class StepRecords:
    def __init__(self):
        self.records: dict[str, dict] = {}

    def __call__(self, step, record):
        self.records[str(step)] = {k: record[k] for k in MOE_KEYS + ("loss", "grad_norm", "mfu")}


def run_moe(workdir: Path, name: str, overrides: dict) -> dict:
    """Train ``overrides`` in ``runs/<name>``; returns per-step losses, grad norms and MoE statistics."""
    records = StepRecords()
    paths = run_with_shards(workdir / "runs" / name, workdir / "shards")
    result = train(base_config(overrides), paths, hooks=TrainHooks(on_batch=SampleLog(), on_step=records))
    return {"losses": {str(k): v for k, v in result.losses.items()},
            "grad_norms": {str(k): v for k, v in result.grad_norms.items()}, "steps": records.records}


def two_ranks(workdir: Path) -> None:
    out = workdir / "results"
    out.mkdir(parents=True, exist_ok=True)
    for name, overrides in TWO_RANK.items():
        (out / f"{name}.rank{rank()}.json").write_text(json.dumps(run_moe(workdir, name, overrides)))
        dist.barrier()


if __name__ == "__main__":
    torch.set_num_threads(1)
    workdir, group = Path(sys.argv[1]), sys.argv[2]
    from trainer_bridge.parallel.device import init_runtime, shutdown

    runtime = init_runtime("cpu")
    {"two": two_ranks}[group](workdir)
    shutdown(runtime)

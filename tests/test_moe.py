"""Mixture of Experts and expert parallel (issue 12).

Distributed (one torchrun launch of 2 processes, tests/dist/moe_scenarios.py) against the same MoE in this
process, fp32, 10 steps, clipping and accumulation on, auxiliary losses on: EP=2 without dropping
(capacity_factor = n_experts), EP=2 with capacity_factor 1.0 (dropped tokens counted identically at every
step), FSDP2 (dp=2) with dropping. Units: capacity dropping, the auxiliary loss gradient, MFU from active
parameters against a hand count, the expert-load fields of metrics.jsonl.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from moe_scenarios import MOE, MOE_DROP, TWO_RANK, run_moe  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.config import ModelConfig, TrainConfig  # noqa: E402
from trainer_bridge.observe.metrics import FlopCounter  # noqa: E402
from trainer_bridge.model.moe import MoE  # noqa: E402
from trainer_bridge.model.transformer import active_parameters  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402

TOLERANCE = 1e-5
REFERENCE_OF = {"moe_ep2": "moe", "moe_ep2_cf1": "moe_cf1", "moe_fsdp2_cf1": "moe_cf1"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("train_moe")
    write_synthetic_shards(work / "shards")
    refs = {"moe": run_moe(work, "ref_moe", MOE), "moe_cf1": run_moe(work, "ref_moe_cf1", MOE_DROP)}
    (work / "reference.json").write_text(json.dumps(refs))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(REPO / "tests" / "dist" / "moe_scenarios.py"), str(work), "two"]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200)
    (work / "two.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"torchrun failed:\n{(done.stdout + done.stderr)[-6000:]}"
    return work


@pytest.mark.parametrize("name", sorted(TWO_RANK))
def test_moe_distributed_equivalence(workdir, name):
    ref = json.loads((workdir / "reference.json").read_text())[REFERENCE_OF[name]]
    steps = [str(s) for s in range(10)]
    for r in range(2):
        got = json.loads((workdir / "results" / f"{name}.rank{r}.json").read_text())
        assert sorted(got["losses"], key=int) == steps
        assert max(abs(got["losses"][s] - ref["losses"][s]) for s in steps) <= TOLERANCE
        assert max(abs(got["grad_norms"][s] - ref["grad_norms"][s]) for s in steps) <= TOLERANCE
        for s in steps:
            mine, theirs = got["steps"][s], ref["steps"][s]
            assert mine["moe_expert_load"] == theirs["moe_expert_load"]
            assert mine["moe_dropped_tokens"] == theirs["moe_dropped_tokens"]
            assert abs(mine["moe_aux_loss"] - theirs["moe_aux_loss"]) <= 1e-6
    dropped = [ref["steps"][s]["moe_dropped_tokens"] for s in steps]
    if REFERENCE_OF[name] == "moe":
        assert dropped == [0] * 10  # capacity_factor = n_experts never drops
    else:
        assert min(dropped) > 0  # capacity_factor 1.0 drops on every step here


def test_expert_load_in_metrics_jsonl(workdir):
    lines = [json.loads(l) for l in RunPaths(workdir / "runs" / "ref_moe_cf1").metrics_jsonl.read_text().splitlines()]
    steps = [l for l in lines if "moe_expert_load" in l]
    assert len(steps) == 10
    tokens = 8 * 32  # global batch × seq_len of the synthetic shards (padding is routed too)
    for record in steps:
        assert set(record["moe_expert_load"]) == {"1", "3"}  # moe_every 2: layers 1 and 3 of 4
        for load in record["moe_expert_load"].values():
            assert sum(load) == tokens * 2  # top_k assignments per token, counted before dropping
        assert record["moe_dropped_tokens"] == round(record["moe_dropped_fraction"] * tokens * 2 * 2)
        assert record["moe_aux_loss"] > 0


def small_cfg(**moe) -> ModelConfig:
    return ModelConfig(vocab_size=100, max_seq_len=32, dim=64, n_layers=4, n_heads=4, n_kv_heads=2, multiple_of=16,
                       n_experts=4, top_k=2, moe_every=2, **moe)


def test_capacity_drops_the_overflow_of_each_expert():
    torch.manual_seed(0)
    moe = MoE(small_cfg(capacity_factor=1.0), hidden=176)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        logits = moe.router(x.reshape(-1, 64))
        routed = torch.bincount(logits.topk(2, dim=-1).indices.reshape(-1), minlength=4)
    moe.reset_stats()
    moe(x)
    capacity = math.ceil(1.0 * 32 * 2 / 4)
    assert moe.stats["dropped"] == int((routed - capacity).clamp(min=0).sum())
    assert moe.stats["dropped"] > 0
    assert moe.stats["tokens_per_expert"].tolist() == routed.tolist()


def test_aux_loss_gradient_reaches_the_router_only_with_coefficients():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 64)
    grads = []
    for coef in (0.0, 1.0):
        torch.manual_seed(1)
        moe = MoE(small_cfg(load_balance_coef=coef, router_z_loss_coef=coef), hidden=176)
        for p in moe.parameters():
            torch.nn.init.normal_(p, std=0.1)
        moe(x).sum().backward()
        grads.append(moe.router.weight.grad.clone())
    assert (grads[1] - grads[0]).abs().max() > 1e-4


def test_moe_mfu_counts_active_parameters_by_hand():
    cfg = small_cfg()
    attention = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64  # wq, wk, wv (2 kv heads × 16), wo
    norms = 2 * 64
    hidden = 176  # 8/3·64 = 170 → multiple of 16
    dense_ffn = 3 * 64 * hidden
    moe_active = 64 * 4 + 2 * 3 * 64 * hidden  # router + top_k = 2 of the 4 experts
    output = 64 * 100 + 64  # output projection + final norm (the input embedding is a lookup)
    hand = 4 * (attention + norms) + 2 * dense_ffn + 2 * moe_active + output
    assert active_parameters(cfg) == hand
    counter = FlopCounter(cfg)
    assert counter.non_embedding_params == hand
    assert counter.step_flops(tokens=1000, sum_squared_segment_lengths=0) == 6.0 * hand * 1000
    dense = cfg.model_copy(update={"n_experts": 0})
    assert FlopCounter(dense).non_embedding_params == 4 * (attention + norms + dense_ffn) + output


def test_moe_config_checks():
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig(n_experts=2, top_k=3)
    with pytest.raises(ValueError, match="mesh.ep"):
        TrainConfig.model_validate({"model": {"n_experts": 4}, "mesh": {"ep": 2, "dp": 1}})
    with pytest.raises(ValueError, match="mesh.ep"):
        TrainConfig.model_validate({"model": {"n_experts": 3}, "mesh": {"ep": 2, "dp": 2}})

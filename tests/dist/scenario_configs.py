"""The tiny fp32 training setup shared by the single-process reference and the torchrun scenarios."""
from __future__ import annotations

from trainer_bridge.config import TrainConfig

BASE = {
    "model": {"dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 16},
    # 8 rows per step; micro-batches of 2 → accumulation 4 on one rank, 2 on two data-parallel ranks.
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    # Gradient norms are ~1.2 here: clipping at 0.8 is active on every step.
    "optimizer": {"lr": 3e-3, "warmup_steps": 2, "clip_grad_norm": 0.8},
    "checkpoint": {"interval": 5, "keep_last": 3},
    "eval": {"interval": 5, "max_rows": 8},
    "metrics": {"tensorboard": False, "peak_flops": 1e11},
    "steps": 10,
    "device": "cpu",
}


def merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def base_config(overrides: dict | None = None) -> TrainConfig:
    return TrainConfig.model_validate(merge(BASE, overrides or {}))

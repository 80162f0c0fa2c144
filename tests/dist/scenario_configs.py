"""The tiny fp32 training setup shared by the single-process reference and the torchrun scenarios, and the
test-side helpers around it (a run directory over shared shards, the sample recorder hook)."""
from __future__ import annotations

from pathlib import Path

from runio.layout import RunPaths
from trainer_bridge.config import TrainConfig
from trainer_bridge.train import TrainHooks

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


def run_with_shards(root: Path, shards: Path) -> RunPaths:
    """A run directory at ``root`` whose shards are ``shards`` (linked: tests share one synthetic set)."""
    paths = RunPaths(root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        paths.shards.symlink_to(Path(shards).resolve(), target_is_directory=True)
    except FileExistsError:  # linked before (a resumed run), or by another rank of the same job just now
        pass
    return paths


class SampleLog:
    """A test-side ``TrainHooks.on_batch``: the rows each step trained on on this rank (``sample_ids``: step ->
    rows, the last time the step ran) and every batch in order (``consumed``: a step repeated after a rollback
    appears twice)."""

    def __init__(self):
        self.sample_ids: dict[int, list[int]] = {}
        self.consumed: list[list[int]] = []

    def __call__(self, step: int, sample_ids: list[int]) -> None:
        self.sample_ids[step] = sample_ids
        self.consumed.append(sample_ids)

    def hooks(self, **others) -> TrainHooks:
        return TrainHooks(on_batch=self, **others)

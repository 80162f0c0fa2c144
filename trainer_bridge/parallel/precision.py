"""Mixed precision: the compute context and dynamic loss scaling for fp16.

With FSDP (dp > 1) the ``MixedPrecisionPolicy`` casts parameters for compute (``parallelize.apply_fsdp``);
without it ``torch.autocast`` does. Either way the master weights and optimizer state stay fp32.

``torch.amp.GradScaler`` checks for inf/NaN per local tensor; here the gradient is spread over FSDP shards
and pipeline stages, so the overflow check must be agreed by every rank. ``DynamicLossScaler`` does exactly
that with one all-reduce, and works unchanged with and without pipelining.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from trainer_bridge.parallel import device as devices
from trainer_bridge.config import LossScaleConfig, PrecisionConfig
from trainer_bridge.parallel.parallelize import ModelParts, compute_dtype, local_grads, scale_grads


def compute_context(cfg: PrecisionConfig, device: torch.device, uses_fsdp: bool):
    if cfg.dtype == "fp32" or uses_fsdp:
        return contextlib.nullcontext()
    return torch.autocast(devices.autocast_device_type(device), dtype=compute_dtype(cfg.dtype))


class DynamicLossScaler:
    """Multiply the loss by ``scale``; after backward, unscale, and skip the step if any rank overflowed.

    On overflow the scale backs off by ``backoff_factor``; after ``growth_interval`` clean steps it grows."""

    def __init__(self, cfg: LossScaleConfig, enabled: bool):
        self.cfg = cfg
        self.enabled = enabled
        self.scale = cfg.init_scale if enabled else 1.0
        self.clean_steps = 0

    def unscale_and_check(self, model: ModelParts, distributed: bool) -> bool:
        """Unscale gradients in place; return True when they are finite on every rank."""
        if not self.enabled:
            return True
        scale_grads(model, 1.0 / self.scale)
        device = next(model.parameters()).device
        overflow = torch.zeros((), device=device)
        for grad in local_grads(model):
            if not torch.isfinite(grad).all():
                overflow.fill_(1.0)
                break
        if distributed:
            dist.all_reduce(overflow, op=dist.ReduceOp.MAX)
        return overflow.item() == 0

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        if finite:
            self.clean_steps += 1
            if self.clean_steps >= self.cfg.growth_interval:
                self.scale *= self.cfg.growth_factor
                self.clean_steps = 0
        else:
            self.scale *= self.cfg.backoff_factor
            self.clean_steps = 0

    def state(self) -> torch.Tensor:
        return torch.tensor([self.scale, float(self.clean_steps)], dtype=torch.float64)

    def load(self, state: torch.Tensor) -> None:
        self.scale, self.clean_steps = float(state[0]), int(state[1])

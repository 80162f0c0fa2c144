"""Parallelism applied from outside to the unmodified model: device mesh, pipeline split, activation
checkpointing, FSDP2, materialization from the meta device, and the global gradient norm.

Order (torchtitan's): build on meta → split into pipeline stages → activation checkpointing per block →
``fully_shard`` per block then root → allocate on the device → initialize every parameter from a seed derived
from its fully-qualified name. The last step makes the initial weights identical for every topology: a
single process, 2 FSDP ranks and 4 pipeline×FSDP ranks start from exactly the same model.
"""
from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor

from trainer_bridge import device as devices
from trainer_bridge.config import TrainConfig
from trainer_bridge.model import Transformer

_PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def compute_dtype(name: str) -> torch.dtype:
    return _PRECISION_DTYPES[name]


@dataclass
class ModelParts:
    """What this rank holds: one module (no pipeline) or its pipeline stages, plus the schedule."""

    parts: list[nn.Module]
    stage_ids: list[int]
    num_stages: int
    schedule: object | None = None  # a torch.distributed.pipelining schedule when pp > 1
    uses_fsdp: bool = False
    pp_rank: int = 0
    dp_rank: int = 0
    mesh: DeviceMesh | None = None
    loss_fn: object | None = None
    extra: dict = field(default_factory=dict)

    @property
    def has_first_stage(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last_stage(self) -> bool:
        return self.num_stages - 1 in self.stage_ids

    def parameters(self):
        for part in self.parts:
            yield from part.parameters()


def build_mesh(cfg: TrainConfig, runtime: devices.Runtime) -> DeviceMesh | None:
    if cfg.mesh.world_size != runtime.world_size:
        raise ValueError(f"mesh.pp × mesh.dp = {cfg.mesh.world_size} but {runtime.world_size} processes were "
                         "started: launch as many processes as the mesh has ranks")
    if runtime.world_size == 1:
        return None
    return init_device_mesh(runtime.device.type, (cfg.mesh.pp, cfg.mesh.dp), mesh_dim_names=("pp", "dp"))


def stage_layer_ranges(n_layers: int, n_stages: int) -> list[range]:
    """Contiguous, as-even-as-possible layer ranges; earlier stages get the extra layers."""
    base, extra = divmod(n_layers, n_stages)
    ranges, start = [], 0
    for stage in range(n_stages):
        stop = start + base + (1 if stage < extra else 0)
        ranges.append(range(start, stop))
        start = stop
    return ranges


def split_stage(model: Transformer, stage: int, n_stages: int) -> Transformer:
    """A copy of the (meta) model keeping only this stage's layers; names of kept parameters do not change."""
    part = copy.deepcopy(model)
    keep = stage_layer_ranges(model.cfg.n_layers, n_stages)[stage]
    for name in list(part.layers.keys()):
        if int(name) not in keep:
            del part.layers[name]
    if stage != 0:
        part.tok_embeddings = None
    if stage != n_stages - 1:
        part.norm = None
        part.output = None
    return part


def apply_activation_checkpointing(part: Transformer, mode: str, every_n: int) -> None:
    if mode == "none":
        return
    from torch.distributed._composable import checkpoint  # composable: parameter names stay unchanged

    for name, block in part.layers.items():
        if mode == "every" or int(name) % every_n == 0:
            checkpoint(block)


def apply_fsdp(part: Transformer, dp_mesh: DeviceMesh, precision: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # Parameters are gathered in the compute dtype; gradients are reduced in fp32 and the sharded fp32
    # parameters are the master weights the optimizer updates.
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype(precision), reduce_dtype=torch.float32)
    blocks = list(part.layers.values())
    for i, block in enumerate(blocks):
        # The last block's parameters are needed again at once by backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(part, mesh=dp_mesh, mp_policy=policy)


def parameter_seed(seed: int, fqn: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(fqn.encode())) % (2**63)


@torch.no_grad()
def materialize(part: Transformer, device: torch.device, seed: int) -> None:
    """Allocate on ``device`` and initialize each parameter as its full tensor would be in a single process."""
    part.to_empty(device=device)
    for fqn, param in part.named_parameters():
        generator = torch.Generator(device=device)
        generator.manual_seed(parameter_seed(seed, fqn))
        full = torch.empty(param.shape, device=device, dtype=torch.float32)
        std = part.init_std(fqn)
        if std is None:
            full.fill_(1.0)
        else:
            full.normal_(0.0, std, generator=generator)
        if isinstance(param, DTensor):
            local = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()
            param.to_local().copy_(local)
        else:
            param.copy_(full)
    part.init_buffers()


def build_model(cfg: TrainConfig, runtime: devices.Runtime, mesh: DeviceMesh | None, loss_fn) -> ModelParts:
    use_flex = devices.use_flex_attention(runtime.device, cfg.attention)
    with torch.device("meta"):
        whole = Transformer(cfg.model, use_flex_attention=use_flex)
    pp, dp = cfg.mesh.pp, cfg.mesh.dp
    pp_rank = mesh["pp"].get_local_rank() if mesh is not None else 0
    dp_rank = mesh["dp"].get_local_rank() if mesh is not None else 0
    if pp > 1:
        if cfg.model.tie_embeddings:
            raise ValueError("model.tie_embeddings is not supported with mesh.pp > 1 (first and last stage differ)")
        n_stages = pp * cfg.pipeline.stages_per_rank
        # Looped assignment: rank r holds stages r, r + pp, r + 2·pp, ... (what the interleaved schedule needs).
        stage_ids = [pp_rank + v * pp for v in range(cfg.pipeline.stages_per_rank)]
        parts = [split_stage(whole, s, n_stages) for s in stage_ids]
    else:
        n_stages, stage_ids, parts = 1, [0], [whole]
    for part in parts:
        apply_activation_checkpointing(part, cfg.activation_checkpointing.mode, cfg.activation_checkpointing.every_n)
        if dp > 1:
            apply_fsdp(part, mesh["dp"], cfg.precision.dtype)
        materialize(part, runtime.device, cfg.seed)
    if cfg.compile:
        for part in parts:
            for block in part.layers.values():
                block.compile()
    model = ModelParts(parts=parts, stage_ids=stage_ids, num_stages=n_stages, uses_fsdp=dp > 1,
                       pp_rank=pp_rank, dp_rank=dp_rank, mesh=mesh, loss_fn=loss_fn)
    if pp > 1:
        model.schedule = _build_schedule(cfg, runtime, mesh, parts, stage_ids, n_stages, loss_fn)
    return model


def _build_schedule(cfg, runtime, mesh, parts, stage_ids, n_stages, loss_fn):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    group = mesh["pp"].get_group()
    stages = [PipelineStage(part, stage_index=s, num_stages=n_stages, device=runtime.device, group=group)
              for part, s in zip(parts, stage_ids)]
    # scale_grads=False: the loss function already divides by the global number of target tokens.
    n_micro = cfg.pipeline.microbatches
    if cfg.pipeline.schedule == "interleaved_1f1b":
        return ScheduleInterleaved1F1B(stages, n_microbatches=n_micro, loss_fn=loss_fn, scale_grads=False)
    schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[cfg.pipeline.schedule]
    return schedule_class(stages[0], n_microbatches=n_micro, loss_fn=loss_fn, scale_grads=False)


def local_grads(model: ModelParts) -> list[torch.Tensor]:
    grads = []
    for param in model.parameters():
        if param.grad is not None:
            grad = param.grad
            grads.append(grad.to_local() if isinstance(grad, DTensor) else grad)
    return grads


def global_grad_norm(model: ModelParts, distributed: bool) -> torch.Tensor:
    """L2 norm of the whole model's gradient. Every rank holds a disjoint piece (FSDP shards × pipeline
    stages; no replicas), so the squared norm is the sum over all ranks of the local squared norms."""
    grads = local_grads(model)
    device = next(model.parameters()).device
    squared = torch.zeros((), device=device, dtype=torch.float32)
    if grads:
        norms = torch._foreach_norm(grads, 2.0)
        squared = torch.stack(norms).float().pow(2).sum()
    if distributed:
        dist.all_reduce(squared)
    return squared.sqrt()


@torch.no_grad()
def scale_grads(model: ModelParts, factor: torch.Tensor | float) -> None:
    grads = local_grads(model)
    if grads:
        torch._foreach_mul_(grads, factor)


def zero_grads(model: ModelParts) -> None:
    for param in model.parameters():
        param.grad = None

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
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

from trainer_bridge.parallel import device as devices
from trainer_bridge.config import TrainConfig
from trainer_bridge.model.moe import moe_modules
from trainer_bridge.model.transformer import Transformer
from trainer_bridge.parallel.context_parallel import apply_cp, shard_batch
from trainer_bridge.parallel.tensor_parallel import apply_tp, check_tp_compatible

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
    tp: int = 1
    cp: int = 1
    cp_rank: int = 0
    mesh: DeviceMesh | None = None
    loss_fn: object | None = None
    extra: dict = field(default_factory=dict)

    @property
    def has_first_stage(self) -> bool:
        return 0 in self.stage_ids

    @property
    def has_last_stage(self) -> bool:
        return self.num_stages - 1 in self.stage_ids

    @property
    def reports_loss(self) -> bool:
        """Whether this rank's pipeline losses count in the global sum: every tp rank of the last stage
        computes the same loss, tp rank 0 reports it."""
        return self.tp == 1 or self.mesh["tp"].get_local_rank() == 0

    def local_batch(self, batch):
        """The part of a (device) batch this rank computes: its context-parallel shard of every row, or all."""
        if self.cp == 1:
            return batch
        return shard_batch(batch, self.cp, self.cp_rank)

    def parameters(self):
        for part in self.parts:
            yield from part.parameters()


def build_mesh(cfg: TrainConfig, runtime: devices.Runtime) -> DeviceMesh | None:
    """``pp × dp`` (2-D) or, with tensor parallelism, ``pp × dp × tp`` (3-D, tp innermost), or with context
    parallelism ``pp × dp × cp`` (pp 1, cp innermost; build_model flattens dp and cp for FSDP)."""
    if cfg.mesh.world_size != runtime.world_size:
        raise ValueError(f"mesh.pp × mesh.dp × mesh.tp × mesh.cp = {cfg.mesh.world_size} but {runtime.world_size} "
                         "processes were started: launch as many processes as the mesh has ranks")
    if runtime.world_size == 1:
        return None
    if cfg.mesh.cp > 1:
        return init_device_mesh(runtime.device.type, (cfg.mesh.pp, cfg.mesh.dp, cfg.mesh.cp),
                                mesh_dim_names=("pp", "dp", "cp"))
    if cfg.mesh.tp > 1:
        return init_device_mesh(runtime.device.type, (cfg.mesh.pp, cfg.mesh.dp, cfg.mesh.tp),
                                mesh_dim_names=("pp", "dp", "tp"))
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


def apply_ep(part: Transformer, ep_mesh: DeviceMesh, dp: int) -> set[nn.Parameter]:
    """Expert parallel over ``ep_mesh`` (the dp ranks): each MoE layer's expert weights become DTensors sharded
    on the expert dim, tokens are dispatched by all-to-all (moe.MoE._run_experts). Returns the expert
    parameters, which FSDP must leave alone (they are sharded already).

    Gradient scale: the loss is multiplied by dp because FSDP averages gradients over dp; an expert's gradient
    is not averaged (it already sums the contributions of every rank's tokens, through the all-to-all's
    backward), so a hook divides it by dp (:func:`_scale_expert_grads`, after materialization: ``to_empty``
    swaps the parameter tensors)."""
    from torch.distributed.tensor import Shard


    expert_params = set()
    for _, moe in moe_modules(part):
        moe.ep_group, moe.ep_size = ep_mesh.get_group(), ep_mesh.size()
        for name in ("w1", "w2", "w3"):
            full = getattr(moe.experts, name)
            sharded = nn.Parameter(distribute_tensor(full.data, ep_mesh, [Shard(0)], src_data_rank=None))
            setattr(moe.experts, name, sharded)
            expert_params.add(sharded)
    return expert_params


def apply_fsdp(part: Transformer, dp_mesh: DeviceMesh, precision: str,
               ignored_params: set[nn.Parameter] | None = None) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # Parameters are gathered in the compute dtype; gradients are reduced in fp32 and the sharded fp32
    # parameters are the master weights the optimizer updates.
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype(precision), reduce_dtype=torch.float32)
    blocks = list(part.layers.values())
    for i, block in enumerate(blocks):
        # The last block's parameters are needed again at once by backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=i < len(blocks) - 1,
                    ignored_params=ignored_params or None)
    fully_shard(part, mesh=dp_mesh, mp_policy=policy, ignored_params=ignored_params or None)


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
    tp, cp = cfg.mesh.tp, cfg.mesh.cp
    cp_rank = mesh["cp"].get_local_rank() if cp > 1 else 0
    # FSDP shards over the dp and cp ranks flattened: the cp ranks of a row hold the same parameters and their
    # gradients must be summed (kept here: slicing a flattened dim from the root mesh is deprecated).
    fsdp_mesh = mesh["dp", "cp"]._flatten(mesh_dim_name="dp_cp") if cp > 1 else (mesh["dp"] if dp > 1 else None)
    for part in parts:
        if tp > 1:
            check_tp_compatible(part, tp)
            apply_tp(part, mesh["tp"])
        expert_params = apply_ep(part, mesh["dp"], dp) if cfg.mesh.ep > 1 else set()
        if cp > 1:
            apply_cp(part, mesh["cp"].get_group(), cfg.mesh.cp_mode)
        apply_activation_checkpointing(part, cfg.activation_checkpointing.mode, cfg.activation_checkpointing.every_n)
        if dp * cp > 1:
            apply_fsdp(part, fsdp_mesh, cfg.precision.dtype, expert_params)
        _connect_aux_losses(part, loss_fn)
        materialize(part, runtime.device, cfg.seed)
        if cfg.mesh.ep > 1:
            _scale_expert_grads(part, dp)
    if cfg.compile:
        for part in parts:
            for block in part.layers.values():
                block.compile()
    model = ModelParts(parts=parts, stage_ids=stage_ids, num_stages=n_stages, uses_fsdp=dp * cp > 1,
                       pp_rank=pp_rank, dp_rank=dp_rank, tp=tp, cp=cp, cp_rank=cp_rank, mesh=mesh, loss_fn=loss_fn)
    if pp > 1:
        model.schedule = _build_schedule(cfg, runtime, mesh, parts, stage_ids, n_stages, loss_fn)
    return model


def _scale_expert_grads(part: Transformer, dp: int) -> None:

    for _, moe in moe_modules(part):
        for param in moe.experts.parameters():
            param.register_hook(lambda grad: grad / dp)


def _connect_aux_losses(part: Transformer, loss_fn) -> None:
    """MoE auxiliary losses are weighted like the summed token loss: by the loss function's current factor."""

    for _, moe in moe_modules(part):
        moe.aux_scale = (lambda: loss_fn.factor) if loss_fn is not None else (lambda: 1.0)


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


def _replication(grad: DTensor) -> int:
    """On how many ranks of its mesh a DTensor's local piece is repeated (product of its Replicate dims)."""
    copies = 1
    for dim, placement in enumerate(grad.placements):
        if placement.is_replicate():
            copies *= grad.device_mesh.size(dim)
    return copies


def norm_pieces(model: ModelParts) -> tuple[list[torch.Tensor], list[int]]:
    """Each gradient as a local piece and the number of ranks holding the same piece.

    Under FSDP alone every rank's piece is disjoint (copies 1). Under tensor parallelism the gradient's
    placements differ from the parameter's: an embedding gradient may be ``Replicate`` over tp (the same
    values on every tp rank: counted once), a norm gain's ``Partial`` (each rank holds a summand: reduced
    first). Summing ``.to_local()`` squares as if all were disjoint is wrong there (issue 12: 1.719 vs 1.508)."""
    pieces, copies = [], []
    for param in model.parameters():
        grad = param.grad
        if grad is None:
            continue
        if isinstance(grad, DTensor):
            if any(p.is_partial() for p in grad.placements):
                grad = grad.redistribute(placements=[Replicate() if p.is_partial() else p for p in grad.placements])
            pieces.append(grad.to_local())
            copies.append(_replication(grad))
        else:
            pieces.append(grad)
            copies.append(1)
    return pieces, copies


def global_grad_norm(model: ModelParts, distributed: bool) -> torch.Tensor:
    """L2 norm of the whole model's gradient: the sum over all ranks of the local squared norms, each piece
    weighted by 1 / (ranks holding it) — exact (the weights are 1/2^k for power-of-two degrees), and one
    all-reduce. Pipeline stages and FSDP shards are disjoint (weight 1, the computation of a dense run)."""
    grads, copies = norm_pieces(model)
    device = next(model.parameters()).device
    squared = torch.zeros((), device=device, dtype=torch.float32)
    if grads:
        norms = torch._foreach_norm(grads, 2.0)
        squares = torch.stack(norms).float().pow(2)
        if any(c != 1 for c in copies):
            squares = squares / torch.tensor(copies, dtype=torch.float32, device=squares.device)
        squared = squares.sum()
    if distributed:
        dist.all_reduce(squared)
    return squared.sqrt()


def local_squared_norm_sum(model: ModelParts) -> torch.Tensor:
    """The pre-issue-12 computation (every ``.to_local()`` piece counted as disjoint), kept for the regression
    test that shows it is wrong under tensor parallelism; not used by training."""
    grads = local_grads(model)
    norms = torch._foreach_norm(grads, 2.0) if grads else [torch.zeros(())]
    return torch.stack(norms).float().pow(2).sum()


@torch.no_grad()
def scale_grads(model: ModelParts, factor: torch.Tensor | float) -> None:
    grads = local_grads(model)
    if grads:
        torch._foreach_mul_(grads, factor)


def zero_grads(model: ModelParts) -> None:
    for param in model.parameters():
        param.grad = None

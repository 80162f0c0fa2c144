"""Tensor parallelism with sequence parallelism (Megatron-style), applied from outside to the unmodified model,
and the vocabulary-parallel cross-entropy.

Per block (torchtitan's plan, measured on gloo, ENVIRONMENT.md):
- the residual stream between blocks is sharded along the sequence (``Shard(1)``): the norms run on a
  sequence shard (``SequenceParallel``);
- before attention and the FFN the normalized activations are all-gathered (``PrepareModuleInput``
  ``Shard(1) → Replicate``); wq/wk/wv/w1/w3 are column-parallel (each rank holds a slice of the heads / of
  the hidden units), wo/w2 row-parallel with a reduce-scatter back to a sequence shard (``Shard(1)``);
- the attention's local head counts are divided by the TP degree (the only attribute changed);
- the token embedding is row-parallel over the vocabulary (masked lookup, reduce-scatter to a sequence
  shard); the output projection is column-parallel over the vocabulary and its logits stay sharded
  (``Shard(-1)``, a DTensor): the loss is computed without ever gathering the logits
  (:func:`cross_entropy_sum`).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

IGNORE_INDEX = -100


def check_tp_compatible(model: nn.Module, tp: int) -> None:
    """Divisibility the plan needs, with the field to change in the message."""
    cfg = model.cfg
    kv = cfg.n_kv_heads or cfg.n_heads
    hidden = next(iter(model.layers.values())).feed_forward.w1.out_features if len(model.layers) else 0
    problems = []
    if cfg.n_heads % tp:
        problems.append(f"model.n_heads ({cfg.n_heads})")
    if kv % tp:
        problems.append(f"model.n_kv_heads ({kv})")
    if hidden % tp:
        problems.append(f"the FFN hidden size ({hidden})")
    if cfg.vocab_size % tp:
        problems.append(f"model.vocab_size ({cfg.vocab_size})")
    if problems:
        raise ValueError(f"mesh.tp = {tp} must divide {', '.join(problems)}")
    if cfg.tie_embeddings:
        raise ValueError("model.tie_embeddings is not supported with mesh.tp > 1 (embedding is sharded by rows of "
                         "the vocabulary, the output projection by columns)")


def apply_tp(part: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Tensor + sequence parallel over ``tp_mesh`` (1-D), in place; parameter names do not change."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    tp = tp_mesh.size()
    top_plan = {}
    if part.tok_embeddings is not None:
        top_plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if part.norm is not None:
        top_plan["norm"] = SequenceParallel()
    if part.output is not None:
        top_plan["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    if top_plan:
        parallelize_module(part, tp_mesh, top_plan)
    for block in part.layers.values():
        plan = {
            "attention_norm": SequenceParallel(),
            # x, cos, sin, mask, use_flex: only x is sequence-sharded; rope angles and the mask are full-length.
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None, None, None),
                                            desired_input_layouts=(Replicate(), None, None, None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
        parallelize_module(block, tp_mesh, plan)
        block.attention.n_heads //= tp
        block.attention.n_kv_heads //= tp


class _VocabParallelCrossEntropySum(torch.autograd.Function):
    """Summed token cross-entropy over logits sharded by vocabulary ranges across ``group``.

    Forward: global max (all-reduce MAX), global Σexp (all-reduce SUM), the target's logit from the rank owning
    it (all-reduce SUM). Backward is local: softmax − one-hot on this rank's vocabulary range."""

    @staticmethod
    def forward(ctx, local_logits, labels, vocab_start, group, ignore_index):
        logits = local_logits.float()
        local_vocab = logits.shape[-1]
        valid = labels != ignore_index
        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - logits_max.unsqueeze(-1)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        local_target = labels - vocab_start
        owned = valid & (local_target >= 0) & (local_target < local_vocab)
        index = torch.where(owned, local_target, torch.zeros_like(local_target))
        target_logit = shifted.gather(-1, index.unsqueeze(-1)).squeeze(-1) * owned
        dist.all_reduce(target_logit, group=group)
        per_token = (sum_exp.log() - target_logit) * valid
        softmax = exp / sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, index, owned, valid)
        ctx.input_dtype = local_logits.dtype
        return per_token.sum()

    @staticmethod
    def backward(ctx, grad_output):
        softmax, index, owned, valid = ctx.saved_tensors
        grad = softmax * valid.unsqueeze(-1)
        grad.scatter_add_(-1, index.unsqueeze(-1), -owned.unsqueeze(-1).to(grad.dtype))
        return (grad * grad_output).to(ctx.input_dtype), None, None, None, None


def cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor,
                      ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token cross-entropy of ``logits`` [B, S, V] against ``labels`` [B, S].

    Returns (the loss to backpropagate, its detached value to report). With plain logits this is
    ``F.cross_entropy(reduction='sum')``. With vocabulary-sharded DTensor logits (tensor parallel) the loss is
    computed vocabulary-parallel; every TP rank backpropagates it, but only TP rank 0 reports it (the others
    report 0), so a sum of the reports over all ranks counts each data-parallel shard once."""
    if not isinstance(logits, DTensor):
        total = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=ignore_index,
                                reduction="sum")
        return total, total.detach()
    mesh = logits.device_mesh
    if mesh.ndim != 1 or not isinstance(logits.placements[0], Shard) or logits.placements[0].dim not in (-1, 2):
        raise ValueError(f"vocabulary-parallel loss needs logits sharded on the last dim of a 1-D mesh, got "
                         f"{logits.placements} on {mesh}")
    local = logits.to_local()
    vocab_start = mesh.get_local_rank() * local.shape[-1]
    if isinstance(labels, DTensor):
        labels = labels.full_tensor()
    total = _VocabParallelCrossEntropySum.apply(local.flatten(0, 1), labels.flatten(), vocab_start,
                                                mesh.get_group(), ignore_index)
    reported = total.detach() if mesh.get_local_rank() == 0 else torch.zeros_like(total.detach())
    return total, reported

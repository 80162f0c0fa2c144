"""Context parallelism (``mesh.cp``): each row's sequence is split across the cp ranks of a data-parallel rank,
applied from outside to the unmodified model (torchtitan's lesson), hand-written because torch's built-in
``context_parallel`` has no CPU SDPA sharding and no masks (ENVIRONMENT.md).

- **Causal load balancing** (head-tail): the row is cut into 2·cp chunks and rank r keeps chunks r and
  2·cp−1−r, so every rank holds as many early (cheap) as late (expensive) queries.
- **Positions**: the shard keeps its tokens' ``position_ids`` (they restart at every document), so RoPE needs
  nothing else; the labels are the full row's, cut the same way (a target across a chunk edge stays right).
- **Document mask**: each rank knows every token's document (``segment_ids``, all-gathered once per forward)
  and its index in the row; a query attends to a key iff same document and key index ≤ query index —
  exactly the single-process block-diagonal causal mask, padding included.
- **Attention across shards** (``mesh.cp_mode``): ``allgather`` gathers every rank's K/V (backward:
  reduce-scatter of their gradients); ``ring`` passes K/V blocks around the cp ranks with
  ``batch_isend_irecv`` while the current block is computed, merges the partial outputs by log-sum-exp, and
  in backward sends the key/value gradients along with the blocks back to their owners. Both run the same
  query/key-tiled kernel (flash-attention arithmetic in plain torch, fp32 inside): scores exist only for one
  tile pair at a time and pairs the mask rules out are skipped, so a 32k-token row fits where a dense [S, S]
  mask and score matrix would not.
- **Loss and gradients**: each rank sums its own tokens' loss; FSDP shards over the flattened dp×cp mesh and
  averages over dp·cp ranks, so the loss factor carries dp·cp (train.py) and the gradient of every
  replicated parameter is the single-process one. The global norm adds disjoint FSDP shards, as before.
"""
from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

# Queries and keys per tile of the kernel. Scores exist for one tile pair at a time (a few MiB: the allocator
# reuses them, where 64 MiB temporaries were mapped and zeroed by the kernel on every call), and a pair in
# which no query may see any key (another document, or later keys) is skipped: in packed rows most are.
TILE = 512


def head_tail_indices(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """Indices in the row of the tokens cp rank ``rank`` holds: chunks ``rank`` and ``2·cp−1−rank`` of 2·cp."""
    if seq_len % (2 * cp):
        raise ValueError(f"sequence length {seq_len} must be divisible by 2 × mesh.cp = {2 * cp}")
    chunk = seq_len // (2 * cp)
    first = torch.arange(rank * chunk, (rank + 1) * chunk, device=device)
    second = torch.arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, device=device)
    return torch.cat((first, second))


def shard_batch(batch, cp: int, rank: int):
    """This cp rank's part of every row of ``batch`` (data.Batch). The counts (target/real tokens, squared
    segment lengths) stay those of the whole rows: they normalize the loss, which every cp rank shares."""
    index = head_tail_indices(batch.input_ids.shape[1], cp, rank, device=batch.input_ids.device)
    return dataclasses.replace(batch, **{name: getattr(batch, name).index_select(1, index)
                                         for name in ("input_ids", "labels", "position_ids", "segment_ids")})


@dataclass
class ShardMask:
    """The document-causal mask of one sequence shard against every shard: built once per forward.

    ``query_segments`` [B, S_local], ``query_index`` [S_local]: this rank's tokens; ``key_segments``
    [cp, B, S_local] and ``key_index`` [cp, S_local]: every cp rank's tokens (rank order)."""

    query_segments: torch.Tensor
    query_index: torch.Tensor
    key_segments: torch.Tensor
    key_index: torch.Tensor


def _allowed(q_seg, q_idx, k_seg, k_idx) -> torch.Tensor:
    """[B, 1, 1, Tq, Tk] bool: same document and key not after query (broadcasts over kv heads and groups)."""
    same = q_seg[:, :, None] == k_seg[:, None, :]
    causal = q_idx[:, None] >= k_idx[None, :]
    return (same & causal)[:, None, None]


def _tile_pairs(queries: int, keys: int, q_seg, q_idx, k_seg, k_idx):
    """(query slice, key slice, allowed mask) for every tile pair with at least one allowed entry."""
    for q_start in range(0, queries, TILE):
        q_tile = slice(q_start, q_start + TILE)
        q_seg_tile, q_idx_tile = q_seg[:, q_tile], q_idx[q_tile]
        for k_start in range(0, keys, TILE):
            k_tile = slice(k_start, k_start + TILE)
            if int(k_idx[k_tile].min()) > int(q_idx_tile.max()):
                continue  # every key after every query: causality alone rules the pair out
            allowed = _allowed(q_seg_tile, q_idx_tile, k_seg[:, k_tile], k_idx[k_tile])
            if bool(allowed.any()):
                yield q_tile, k_tile, allowed


@torch.no_grad()
def block_forward(q, k, v, q_seg, q_idx, k_seg, k_idx, scale, out, lse) -> None:
    """Fold the attention of queries q [B, Hkv, G, Sq, D] over one key block k/v [B, Hkv, 1, Sk, D] into the
    running ``out`` [B, Hkv, G, Sq, D] (normalized) and ``lse`` [B, Hkv, G, Sq] (log-sum-exp), in place."""
    for q_tile, k_tile, allowed in _tile_pairs(q.shape[-2], k.shape[-2], q_seg, q_idx, k_seg, k_idx):
        scores = (q[..., q_tile, :] @ k[..., k_tile, :].transpose(-1, -2)) * scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        tile_lse = torch.logsumexp(scores, dim=-1)
        # A query row with no allowed key here has lse −inf: its probabilities are 0, not exp(−inf + inf) = NaN.
        probs = torch.where(allowed, torch.exp(scores - tile_lse.unsqueeze(-1)), 0.0)
        tile_out = probs @ v[..., k_tile, :]
        old_lse = lse[..., q_tile]
        new_lse = torch.logaddexp(old_lse, tile_lse)
        finite = torch.where(torch.isinf(new_lse), 0.0, new_lse)  # both −inf: keep 0 weights, not NaN
        out[..., q_tile, :] = (out[..., q_tile, :] * torch.exp(old_lse - finite).unsqueeze(-1)
                               + tile_out * torch.exp(tile_lse - finite).unsqueeze(-1))
        lse[..., q_tile] = new_lse


@torch.no_grad()
def block_backward(q, k, v, out_grad, delta, lse, q_seg, q_idx, k_seg, k_idx, scale, dq, dk, dv) -> None:
    """Gradients through one key block given the final ``lse`` and ``delta`` = rowsum(dout · out): adds into
    dq [B, Hkv, G, Sq, D] and dk/dv [B, Hkv, 1, Sk, D] (summed over the query groups sharing a kv head)."""
    for q_tile, k_tile, allowed in _tile_pairs(q.shape[-2], k.shape[-2], q_seg, q_idx, k_seg, k_idx):
        q_part, dout_part = q[..., q_tile, :], out_grad[..., q_tile, :]
        k_part, v_part = k[..., k_tile, :], v[..., k_tile, :]
        scores = (q_part @ k_part.transpose(-1, -2)) * scale
        probs = torch.where(allowed, torch.exp(scores - lse[..., q_tile].unsqueeze(-1)), 0.0)
        dv[..., k_tile, :] += (probs.transpose(-1, -2) @ dout_part).sum(2, keepdim=True)
        dprobs = dout_part @ v_part.transpose(-1, -2)
        dscores = probs * (dprobs - delta[..., q_tile].unsqueeze(-1)) * scale
        dq[..., q_tile, :] += dscores @ k_part
        dk[..., k_tile, :] += (dscores.transpose(-1, -2) @ q_part).sum(2, keepdim=True)


# torch 2.13 names the flat collectives *_single (the *_tensor names are deprecated); older torch has only those.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def gather_ranks(tensor: torch.Tensor, group) -> torch.Tensor:
    """[cp, *tensor.shape]: every rank's ``tensor``, rank order (gloo wants the output flat along dim 0)."""
    tensor = tensor.contiguous()
    size = dist.get_world_size(group)
    flat = torch.empty((size * tensor.shape[0], *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    _all_gather_single(flat, tensor, group=group)
    return flat.unflatten(0, (size, tensor.shape[0]))


class _Ring:
    """This rank's neighbours in the cp group (global ranks, what P2P needs) and a two-way exchange."""

    def __init__(self, group):
        self.group = group
        self.size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        ranks = dist.get_process_group_ranks(group)
        self.next, self.prev = ranks[(self.rank + 1) % self.size], ranks[(self.rank - 1) % self.size]

    def start(self, send: torch.Tensor) -> tuple[torch.Tensor, list]:
        """Send ``send`` to the next rank, receive the previous rank's into a fresh contiguous buffer (gloo)."""
        if self.size == 1:  # a one-rank group (the benchmark's memory-efficient reference): nothing to pass
            return send, []
        received = torch.empty_like(send, memory_format=torch.contiguous_format)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send.contiguous(), self.next, self.group),
                                        dist.P2POp(dist.irecv, received, self.prev, self.group)])
        return received, works

    @staticmethod
    def finish(works: list) -> None:
        for work in works:
            work.wait()


class RingAttention(torch.autograd.Function):
    """q [B, Hkv, G, S_local, D], k/v [B, Hkv, 1, S_local, D] (fp32) → out like q. At step i rank r holds the
    K/V of rank r−i; the next block is in flight while the current one is computed."""

    @staticmethod
    def forward(ctx, q, k, v, mask: ShardMask, group, scale: float):
        ring = _Ring(group)
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        kv = torch.stack((k, v))
        for step in range(ring.size):
            source = (ring.rank - step) % ring.size
            pending = ring.start(kv) if step < ring.size - 1 else None
            block_forward(q, kv[0], kv[1], mask.query_segments, mask.query_index, mask.key_segments[source],
                          mask.key_index[source], scale, out, lse)
            if pending is not None:
                ring.finish(pending[1])
                kv = pending[0]
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.group, ctx.scale = mask, group, scale
        return out

    @staticmethod
    def backward(ctx, out_grad):
        q, k, v, out, lse = ctx.saved_tensors
        mask, ring, scale = ctx.mask, _Ring(ctx.group), ctx.scale
        out_grad = out_grad.contiguous()
        delta = (out_grad * out).sum(-1)
        dq = torch.zeros_like(q)
        kv = torch.stack((k, v))
        # The gradient of a block travels with it: after every rank has added its queries' share, one more
        # hop brings it home (the block of rank r−i sits on rank r at step i).
        dkv = torch.zeros_like(kv)
        for step in range(ring.size):
            source = (ring.rank - step) % ring.size
            pending = ring.start(kv) if step < ring.size - 1 else None
            block_backward(q, kv[0], kv[1], out_grad, delta, lse, mask.query_segments, mask.query_index,
                           mask.key_segments[source], mask.key_index[source], scale, dq, dkv[0], dkv[1])
            if pending is not None:
                ring.finish(pending[1])
                kv = pending[0]
            dkv, works = ring.start(dkv)
            ring.finish(works)
        return dq, dkv[0], dkv[1], None, None, None


class AllGatherAttention(torch.autograd.Function):
    """Every rank's K/V gathered (rank order), one pass of the kernel; backward reduce-scatters dK/dV."""

    @staticmethod
    def forward(ctx, q, k, v, mask: ShardMask, group, scale: float):
        size = dist.get_world_size(group)
        gathered = gather_ranks(torch.stack((k, v)), group)
        # [cp, 2, B, Hkv, 1, S_local, D] → [2, B, Hkv, 1, cp·S_local, D], keys in the order of mask.key_*.
        kv_all = gathered.movedim(0, -3).flatten(-3, -2)
        key_segments = mask.key_segments.movedim(0, 1).flatten(1)  # [B, cp·S_local]
        key_index = mask.key_index.flatten()
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        block_forward(q, kv_all[0], kv_all[1], mask.query_segments, mask.query_index, key_segments, key_index,
                      scale, out, lse)
        ctx.save_for_backward(q, kv_all, out, lse)
        ctx.mask, ctx.group, ctx.scale, ctx.size = mask, group, scale, size
        return out

    @staticmethod
    def backward(ctx, out_grad):
        q, kv_all, out, lse = ctx.saved_tensors
        mask, size = ctx.mask, ctx.size
        out_grad = out_grad.contiguous()
        delta = (out_grad * out).sum(-1)
        dq, dkv_all = torch.zeros_like(q), torch.zeros_like(kv_all)
        block_backward(q, kv_all[0], kv_all[1], out_grad, delta, lse, mask.query_segments, mask.query_index,
                       mask.key_segments.movedim(0, 1).flatten(1), mask.key_index.flatten(), ctx.scale,
                       dq, dkv_all[0], dkv_all[1])
        # Back to [cp, 2, B, Hkv, 1, S_local, D]: rank j's slice holds every rank's gradient for rank j's keys.
        local = kv_all.shape[-2] // size
        per_rank = dkv_all.unflatten(-2, (size, local)).movedim(-3, 0).contiguous()
        dkv = torch.empty_like(per_rank[0])
        # gloo takes the flat form: the input is the rank pieces concatenated along dim 0.
        _reduce_scatter_single(dkv.flatten(0, 1), per_rank.flatten(0, 2), group=ctx.group)
        return dq, dkv[0], dkv[1], None, None, None


class ContextParallel:
    """What apply_cp installs on a model: the cp group, this rank's place in it, the mode."""

    def __init__(self, group, mode: str):
        self.group, self.mode = group, mode
        self.size, self.rank = dist.get_world_size(group), dist.get_rank(group)

    def shard_mask(self, segment_ids: torch.Tensor) -> ShardMask:
        """``segment_ids`` [B, S_local] of this rank's shard → the mask against every rank's keys."""
        local = segment_ids.contiguous()
        gathered = gather_ranks(local, self.group)
        total = local.shape[1] * self.size
        index = torch.stack([head_tail_indices(total, self.size, r, device=local.device) for r in range(self.size)])
        return ShardMask(query_segments=local, query_index=index[self.rank], key_segments=gathered, key_index=index)

    def attend(self, attention: nn.Module, q, k, v, mask: ShardMask) -> torch.Tensor:
        """q [B, H, S_local, D], k/v [B, H_kv, S_local, D] → [B, H, S_local, D], as the model's own core."""
        batch, heads, seq, head_dim = q.shape
        kv_heads = k.shape[1]
        # Query heads sharing a kv head (repeat_interleave order) become a group axis: K/V are never copied.
        grouped = q.float().reshape(batch, kv_heads, heads // kv_heads, seq, head_dim)
        k32, v32 = k.float().unsqueeze(2), v.float().unsqueeze(2)
        function = RingAttention if self.mode == "ring" else AllGatherAttention
        out = function.apply(grouped.contiguous(), k32.contiguous(), v32.contiguous(), mask, self.group,
                             1.0 / math.sqrt(head_dim))
        return out.reshape(batch, heads, seq, head_dim).to(q.dtype)


def apply_cp(model: nn.Module, cp_group, mode: str) -> ContextParallel:
    """Context parallel over ``cp_group``, in place: the model's mask builder and every attention core are
    swapped for the shard-aware ones; parameters and their names are untouched (FSDP/checkpoints as before)."""
    cp = ContextParallel(cp_group, mode)

    def attention_mask(self, segment_ids):
        return cp.shard_mask(segment_ids)

    def attend(self, q, k, v, mask, use_flex):
        return cp.attend(self, q, k, v, mask)

    model.attention_mask = types.MethodType(attention_mask, model)
    for block in model.layers.values():
        block.attention.attend = types.MethodType(attend, block.attention)
    return cp

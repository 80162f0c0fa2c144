"""A Llama-style decoder: RMSNorm, RoPE driven by position ids, SwiGLU, grouped-query attention.

The model knows nothing of parallelism (torchtitan's lesson): FSDP, pipelining and activation checkpointing
are applied from outside (``parallelize.py``). Two things make that possible without touching this file:
- ``layers`` is a ``ModuleDict`` keyed by the layer number, so a pipeline stage deletes the layers it does not
  own and every parameter keeps its fully-qualified name (checkpoints stay valid across topologies);
- ``tok_embeddings``, ``norm`` and ``output`` may be ``None`` (a middle pipeline stage): forward then takes
  and returns hidden states.

Packed rows hold several documents. ``position_ids`` restart at each document and ``segment_ids`` (document
index in the row, -1 for padding) restrict attention to the token's own document, causally.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer_bridge.config import ModelConfig
from trainer_bridge.model.feed_forward import FeedForward, dense_hidden, is_moe_layer
from trainer_bridge.model.moe import MoE, moe_modules


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32: the mean of squares loses too much precision in bf16/fp16.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_inverse_frequencies(head_dim: int, cfg: ModelConfig) -> torch.Tensor:
    """Per-pair rotation frequencies; 'linear' and 'llama3' scaling stretch them for longer contexts."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    factor = cfg.rope_scaling_factor
    if cfg.rope_scaling == "linear":
        inv_freq = inv_freq / factor
    elif cfg.rope_scaling == "llama3":
        # Long wavelengths (beyond the original context) are interpolated, short ones kept, smooth in between.
        low_freq_factor, high_freq_factor = 1.0, 4.0
        wavelength = 2 * math.pi / inv_freq
        low_freq_wavelength = cfg.rope_original_max_len / low_freq_factor
        high_freq_wavelength = cfg.rope_original_max_len / high_freq_factor
        smooth = (cfg.rope_original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelength > low_freq_wavelength, inv_freq / factor,
                               torch.where(wavelength < high_freq_wavelength, inv_freq, blended))
    return inv_freq.float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]); x is [B, S, H, D], cos/sin are [B, S, D/2]."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


@functools.cache
def _compiled_flex_attention():
    # flex_attention is only fast compiled; compiling once per process is what its docs prescribe.
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def document_causal_mask(segment_ids: torch.Tensor, use_flex: bool):
    """Attention allowed iff same segment and key not after query. Padding (-1) attends to earlier padding,
    so no query row is empty (an empty row gives NaN in SDPA) while no real token ever sees padding."""
    if use_flex:
        from torch.nn.attention.flex_attention import create_block_mask

        def same_document_causal(b, h, q, kv):
            return (segment_ids[b, q] == segment_ids[b, kv]) & (q >= kv)

        batch, seq = segment_ids.shape
        return create_block_mask(same_document_causal, batch, None, seq, seq, device=segment_ids.device)
    seq = segment_ids.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=segment_ids.device).tril()
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (same_segment & causal).unsqueeze(1)  # [B, 1, S, S]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask, use_flex: bool):
        batch, seq, _ = x.shape
        q = apply_rope(self.wq(x).view(batch, seq, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
        out = self.attend(q, k, v, mask, use_flex)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))

    def attend(self, q, k, v, mask, use_flex: bool) -> torch.Tensor:
        """The attention core: q [B, H, S, D], k/v [B, H_kv, S, D] → [B, H, S, D]. Context parallelism
        replaces it per module (context_parallel.apply_cp) with a version that sees the other ranks' keys."""
        if use_flex:
            # Run flex outside autocast with one dtype for q, k, v: its compiled backward under autocast is
            # fragile (pytorch/pytorch#176025); the projections above already ran in the compute dtype.
            with torch.autocast(device_type=q.device.type, enabled=False):
                q, k = q.to(v.dtype), k.to(v.dtype)
                return _compiled_flex_attention()(q, k, v, block_mask=mask, enable_gqa=self.n_kv_heads != self.n_heads)
        repeats = self.n_heads // self.n_kv_heads
        if repeats > 1:
            k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def forward_with_cache(self, x, cos, sin, mask, cache: "KVCache", layer: int):
        """Inference: append this call's keys/values to ``cache`` and attend over all cached ones.

        ``mask`` is [B, 1, S, cache.length + S]; SDPA as in ``forward``, so the numbers match a full recompute."""
        batch, seq, _ = x.shape
        q = apply_rope(self.wq(x).view(batch, seq, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
        k, v = cache.append(layer, k, v)
        repeats = self.n_heads // self.n_kv_heads
        if repeats > 1:
            # The query heads sharing a kv head become extra query rows of that head: no copy of the cache.
            q = q.reshape(batch, self.n_kv_heads, repeats * seq, self.head_dim)
            if mask is not None:
                mask = mask.unsqueeze(2).expand(-1, -1, repeats, -1, -1).reshape(batch, 1, repeats * seq, -1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.reshape(batch, self.n_heads, seq, self.head_dim)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        if is_moe_layer(cfg, layer):
            self.feed_forward = MoE(cfg, dense_hidden(cfg))  # a Mixture of Experts in place of the dense one
        else:
            self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask, use_flex: bool):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, use_flex)
        return x + self.feed_forward(self.ffn_norm(x))

    def forward_with_cache(self, x, cos, sin, mask, cache: "KVCache", layer: int):
        x = x + self.attention.forward_with_cache(self.attention_norm(x), cos, sin, mask, cache, layer)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, use_flex_attention: bool = False):
        super().__init__()
        if cfg.vocab_size is None or cfg.max_seq_len is None:
            raise ValueError("model.vocab_size and model.max_seq_len must be resolved (from the shards) first")
        self.cfg = cfg
        self.use_flex_attention = use_flex_attention
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg, i) for i in range(cfg.n_layers)})
        self.norm: RMSNorm | None = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output: nn.Linear | None = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        head_dim = cfg.dim // cfg.n_heads
        self.register_buffer("rope_inv_freq", rope_inverse_frequencies(head_dim, cfg), persistent=False)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        """tokens [B, S] ids (first stage) or hidden states [B, S, dim]; returns logits or hidden states."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        angles = position_ids.unsqueeze(-1).float() * self.rope_inv_freq
        cos, sin = angles.cos(), angles.sin()
        mask = self.attention_mask(segment_ids)
        for layer in self.layers.values():
            h = layer(h, cos, sin, mask, self.use_flex_attention)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h

    def attention_mask(self, segment_ids: torch.Tensor):
        """What every block's attention core receives as its mask (opaque to the blocks): the document-causal
        mask of this row. Context parallelism replaces it with the mask of a sequence shard against all keys."""
        return document_causal_mask(segment_ids, self.use_flex_attention)

    # -- inference with a key/value cache (generation; the training path above does not use it) -----------
    def new_cache(self, batch: int, capacity: int | None = None) -> "KVCache":
        ref = self.tok_embeddings.weight
        return KVCache(self.cfg, batch, capacity or self.cfg.max_seq_len, device=ref.device, dtype=ref.dtype)

    def forward_with_cache(self, tokens: torch.Tensor, position_ids: torch.Tensor, cache: "KVCache",
                           token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, vocab] for ``tokens`` [B, S] that follow the ``cache.length`` tokens already cached.

        ``token_mask`` [B, S] marks real tokens (False: left padding of a shorter prompt in a batch); a token
        attends causally to the real tokens of its own row, cached or new. Needs a whole model (no pipeline
        stage). The cache grows by S."""
        if self.tok_embeddings is None or self.output is None:
            raise ValueError("forward_with_cache needs the whole model (not a pipeline stage)")
        batch, seq = tokens.shape
        if token_mask is None:
            token_mask = torch.ones(batch, seq, dtype=torch.bool, device=tokens.device)
        start = cache.length
        if start + seq > cache.capacity:
            raise ValueError(f"KV cache holds {cache.capacity} positions; {start} + {seq} do not fit")
        cache.key_valid[:, start:start + seq] = token_mask
        if not bool(token_mask.all()):
            cache.has_padding = True
        if seq == 1 and not cache.has_padding:
            mask = None  # one new token, every cached key real: it attends to all of them
        else:
            keys = torch.arange(start + seq, device=tokens.device)
            queries = torch.arange(start, start + seq, device=tokens.device)
            causal = keys[None, :] <= queries[:, None]  # [S, L]
            # A padding query attends to itself only: its row is never empty (no NaN) and is never read.
            mask = ((causal[None] & cache.key_valid[:, None, :start + seq])
                    | (keys[None, None, :] == queries[None, :, None])).unsqueeze(1)  # [B, 1, S, L]
        h = self.tok_embeddings(tokens)
        angles = position_ids.unsqueeze(-1).float() * self.rope_inv_freq
        cos, sin = angles.cos(), angles.sin()
        for index, layer in enumerate(self.layers.values()):
            h = layer.forward_with_cache(h, cos, sin, mask, cache, index)
        cache.length = start + seq
        return self.output(self.norm(h))

    # -- initialization (used by parallelize.materialize, after sharding, on the real device) --------------
    def init_buffers(self) -> None:
        head_dim = self.cfg.dim // self.cfg.n_heads
        self.rope_inv_freq = rope_inverse_frequencies(head_dim, self.cfg).to(self.rope_inv_freq.device)

    def init_std(self, fqn: str) -> float | None:
        """Standard deviation of a parameter's normal init; None means 'ones' (norm gains).

        Residual output projections are scaled down by sqrt(2·n_layers) so the residual stream's variance
        does not grow with depth (GPT-2)."""
        if fqn.endswith("norm.weight"):
            return None
        std = self.cfg.init_std
        if fqn.endswith(("attention.wo.weight", "feed_forward.w2.weight", "feed_forward.experts.w2",
                         "shared_expert.w2.weight")):
            std /= math.sqrt(2 * self.cfg.n_layers)
        return std


class KVCache:
    """Keys and values of every layer for incremental decoding: [B, n_kv_heads, capacity, head_dim] each.

    ``length`` slots are filled (the same for every row: prompts are left-padded to a common length);
    ``key_valid`` [B, capacity] says which filled slots hold real tokens."""

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, *, device, dtype):
        n_kv, head_dim = cfg.n_kv_heads or cfg.n_heads, cfg.dim // cfg.n_heads
        shape = (batch, n_kv, capacity, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.key_valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.capacity = capacity
        self.length = 0
        self.has_padding = False  # some filled slot is padding: every step needs an explicit mask

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, H_kv, S, D] after the filled slots; return all keys and values so far."""
        end = self.length + k.shape[2]
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the given batch rows (finished sequences leave the batch)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.key_valid = self.key_valid[rows]
        self.has_padding = not bool(self.key_valid[:, :self.length].all())


def count_parameters(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts without building the model: total, embedding, and the non-embedding N used in 6·N."""
    with torch.device("meta"):
        model = Transformer(cfg)
    total = sum(p.numel() for p in model.parameters())
    embedding = model.tok_embeddings.weight.numel()
    non_embedding = total - (0 if cfg.tie_embeddings else embedding)
    return {"total": total, "embedding": embedding, "non_embedding": non_embedding}


def active_parameters(cfg) -> int:
    """Parameters a token passes through in matmuls (the non-embedding N of 6·N): everything but the input
    embedding, with only top_k of each MoE layer's experts (plus its router and shared expert)."""
    counts = count_parameters(cfg)
    if not cfg.n_experts:
        return counts["non_embedding"]
    with torch.device("meta"):
        model = Transformer(cfg)
    inactive = 0
    for _, moe in moe_modules(model):
        per_expert = sum(p[0].numel() for p in moe.experts.parameters())
        inactive += per_expert * (moe.n_experts - moe.top_k)
    return counts["non_embedding"] - inactive

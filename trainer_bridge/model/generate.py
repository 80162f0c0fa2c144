"""Sampling from the project's model: a key/value cache (one forward pass per new token), or full recompute.

``generate(model, prompts, ...)`` decodes a batch of token-id prompts. Prompts of different lengths are
left-padded to a common length; each row keeps its own positions (0 at its first real token) and attends only
to its own real tokens, so a prompt decodes the same alone or in a batch. A row stops at an end token or when
prompt + continuation reach the model's ``max_seq_len``; finished rows leave the batch (and the cache).

Sampling follows the order of ``transformers``' logits processors: temperature, then top-k, then top-p
(nucleus; the smallest set of tokens whose probability reaches ``top_p``, at least one). ``temperature == 0``
is greedy decoding (argmax; top-k/top-p then change nothing). ``seed`` makes sampling reproducible.

``use_cache=False`` recomputes the whole sequence for every new token with the training forward pass: the
reference that the cache is tested and benchmarked against.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainer_bridge.model.transformer import Transformer


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: int | None = None

    def __post_init__(self):
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Generation:
    """One prompt's continuation: the new token ids (the end token included when it stopped the row)."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    stop: str = "max_new_tokens"  # "eos" | "max_new_tokens" | "max_seq_len"


def next_token_scores(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, top-k and top-p applied to logits [B, V] (float32); removed tokens get -inf."""
    scores = logits.float() / cfg.temperature
    vocab = scores.shape[-1]
    if cfg.top_k and cfg.top_k < vocab:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1)
        cumulative = ascending.softmax(-1).cumsum(-1)
        remove_sorted = cumulative <= 1 - cfg.top_p
        remove_sorted[..., -1:] = False  # keep at least the most likely token
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores


def _pick(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    if cfg.temperature == 0:
        return logits.argmax(-1)
    probs = next_token_scores(logits, cfg).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(prompts), width), dtype=torch.bool)
    positions = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        offset = width - len(prompt)
        tokens[row, offset:] = torch.tensor(prompt, dtype=torch.long)
        real[row, offset:] = True
        positions[row, offset:] = torch.arange(len(prompt))
    return tokens.to(device), real.to(device), positions.to(device)


@torch.inference_mode()
def generate(model: Transformer, prompts: list[list[int]], cfg: SamplingConfig, *,
             eos_ids: tuple[int, ...] | list[int] = (), pad_id: int = 0, use_cache: bool = True) -> list[Generation]:
    """Continue every prompt (a non-empty list of token ids); returns one ``Generation`` per prompt, in order."""
    if not prompts:
        return []
    max_len = model.cfg.max_seq_len
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(f"prompt {i} is empty: it needs at least one token (e.g. the bos token)")
        if len(prompt) >= max_len:
            raise ValueError(f"prompt {i} has {len(prompt)} tokens; the model's context (max_seq_len) is {max_len}, "
                             "which leaves no room for a continuation")
    was_training = model.training
    model.eval()
    device = model.tok_embeddings.weight.device
    generator = None
    if cfg.seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(cfg.seed)
    results = [Generation(prompt=list(p)) for p in prompts]
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    try:
        if use_cache:
            _decode_cached(model, prompts, cfg, results, eos, pad_id, generator, device)
        else:
            _decode_recompute(model, prompts, cfg, results, eos, generator, device)
    finally:
        model.train(was_training)
    return results


def _finish(results, active: list[int], new_tokens: torch.Tensor, lengths: list[int], cfg, eos, max_len) -> list[int]:
    """Record one new token per active row; return the positions (in ``active``) of rows that go on."""
    keep = []
    is_eos = torch.isin(new_tokens, eos).tolist() if eos.numel() else [False] * len(active)
    for slot, (row, token) in enumerate(zip(active, new_tokens.tolist())):
        result = results[row]
        result.tokens.append(token)
        lengths[slot] += 1
        if is_eos[slot]:
            result.stop = "eos"
        elif len(result.tokens) >= cfg.max_new_tokens:
            result.stop = "max_new_tokens"
        elif lengths[slot] >= max_len:
            result.stop = "max_seq_len"
        else:
            keep.append(slot)
    return keep


def _decode_cached(model, prompts, cfg, results, eos, pad_id, generator, device) -> None:
    max_len = model.cfg.max_seq_len
    if cfg.max_new_tokens == 0:
        return
    tokens, real, positions = _left_padded(prompts, pad_id, device)
    width = tokens.shape[1]
    # Every row needs at most width + max_new_tokens slots (left padding included), never more than needed.
    capacity = min(width + cfg.max_new_tokens, width + max_len)
    cache = model.new_cache(len(prompts), capacity)
    logits = model.forward_with_cache(tokens, positions, cache, real)[:, -1]
    active = list(range(len(prompts)))
    lengths = [len(p) for p in prompts]
    next_positions = torch.tensor(lengths, dtype=torch.long, device=device)
    while True:
        new = _pick(logits, cfg, generator)
        keep = _finish(results, active, new, lengths, cfg, eos, max_len)
        if not keep:
            return
        if len(keep) < len(active):
            index = torch.tensor(keep, dtype=torch.long, device=device)
            cache.select(index)
            new, next_positions = new[index], next_positions[index]
            active = [active[k] for k in keep]
            lengths = [lengths[k] for k in keep]
        logits = model.forward_with_cache(new[:, None], next_positions[:, None], cache)[:, -1]
        next_positions = next_positions + 1


def _decode_recompute(model, prompts, cfg, results, eos, generator, device) -> None:
    """The reference: every step runs the training forward pass over each row's whole sequence."""
    max_len = model.cfg.max_seq_len
    if cfg.max_new_tokens == 0:
        return
    sequences = [list(p) for p in prompts]
    active = list(range(len(prompts)))
    lengths = [len(p) for p in prompts]
    while True:
        last_logits = []
        for row in active:
            seq = torch.tensor(sequences[row], dtype=torch.long, device=device)[None]
            positions = torch.arange(seq.shape[1], device=device)[None]
            segments = torch.zeros_like(seq)
            last_logits.append(model(seq, positions, segments)[0, -1])
        new = _pick(torch.stack(last_logits), cfg, generator)
        keep = _finish(results, active, new, lengths, cfg, eos, max_len)
        for row, token in zip(active, new.tolist()):
            sequences[row].append(token)
        if not keep:
            return
        active = [active[k] for k in keep]
        lengths = [lengths[k] for k in keep]

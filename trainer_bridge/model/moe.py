"""Mixture of Experts feed-forward (token-choice top-k routing, SwiGLU experts) and expert parallelism.

Routing, per forward call (one micro-batch on one rank): router logits → softmax → top-k experts per token, the
k gates renormalized to sum to 1. With ``capacity_factor`` set, each expert takes at most
``ceil(capacity_factor · tokens · k / n_experts)`` assignments of this call, first choices before second
choices, earlier tokens first; the rest are dropped (the token keeps its residual, and the shared expert when
there is one). The decision is taken where the tokens are, before any dispatch, so it is the same whether the
experts live on this rank or are spread over an expert-parallel group.

Auxiliary losses (per call, over its tokens): load balancing ``E · Σ_e f_e · P_e`` (f_e: fraction of
assignments routed to e before dropping, P_e: mean router probability of e) and the router z-loss
``mean(logsumexp(logits)²)``, weighted by ``load_balance_coef`` and ``router_z_loss_coef``. They join the
objective as ``aux · tokens`` per call, with the same factor as the summed token cross-entropy (1 / global target
tokens, × dp, × loss scale): ``aux_scale`` is set by ``parallelize.build_model`` to read the loss function's
factor. So, like the main loss, the gradient does not depend on the split into ranks and micro-batches. The
auxiliary gradient enters in backward only (:class:`_AddAuxLossGrad`), the forward output is unchanged.

Expert parallel (``parallelize.apply_ep``): the expert weights ``[E, ...]`` are DTensors sharded on dim 0 over the
ep group; tokens go to the rank holding their expert by ``all_to_all_single`` with variable splits (the
per-expert counts are exchanged first), are regrouped by local expert, run, and come back the same way.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from trainer_bridge.model.feed_forward import FeedForward, is_moe_layer


class _AddAuxLossGrad(torch.autograd.Function):
    """Identity on ``output``; in backward, ``aux`` receives the gradient ``scale`` (as if ``scale · aux`` were
    added to the objective)."""

    @staticmethod
    def forward(ctx, output, aux, scale: float):
        ctx.scale = scale
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, torch.full((), ctx.scale, dtype=torch.float32, device=grad_output.device), None


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


class GroupedExperts(nn.Module):
    """``n`` SwiGLU experts as three stacked weights: w1, w3 [n, dim, hidden], w2 [n, hidden, dim]."""

    def __init__(self, n_experts: int, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden, dim))

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """``x`` rows grouped by (local) expert, ``counts[e]`` rows for expert e."""
        w1, w2, w3 = _local(self.w1), _local(self.w2), _local(self.w3)
        outputs = []
        for e, chunk in enumerate(torch.split(x, counts)):
            outputs.append((F.silu(chunk @ w1[e]) * (chunk @ w3[e])) @ w2[e])
        return torch.cat(outputs) if outputs else x.new_zeros(0, w2.shape[-1])


class MoE(nn.Module):
    def __init__(self, cfg, hidden: int):
        super().__init__()
        self.n_experts = cfg.n_experts
        self.top_k = cfg.top_k
        self.capacity_factor = cfg.capacity_factor
        self.load_balance_coef = cfg.load_balance_coef
        self.router_z_loss_coef = cfg.router_z_loss_coef
        self.router = nn.Linear(cfg.dim, cfg.n_experts, bias=False)
        self.experts = GroupedExperts(cfg.n_experts, cfg.dim, cfg.moe_hidden or hidden)
        self.shared_expert = None
        if cfg.moe_shared_expert:
            self.shared_expert = FeedForward(cfg)
        # Set from outside (parallelize): the factor of the summed token loss, and the expert-parallel group.
        self.aux_scale = lambda: 1.0
        self.ep_group = None
        self.ep_size = 1
        self.reset_stats()

    # -- statistics of the calls since the last reset (a training step's micro-batches) -------------------
    def reset_stats(self) -> None:
        self.stats = {"tokens_per_expert": torch.zeros(self.n_experts, dtype=torch.int64, device="cpu"), "assignments": 0,
                      "dropped": 0, "aux_loss_sum": 0.0, "tokens": 0}

    def capacity(self, tokens: int) -> int | None:
        if self.capacity_factor is None:
            return None
        return math.ceil(self.capacity_factor * tokens * self.top_k / self.n_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xt = x.reshape(-1, shape[-1])
        n_tokens, n_experts, k = xt.shape[0], self.n_experts, self.top_k
        logits = self.router(xt).float()
        probs = logits.softmax(dim=-1)
        top_p, top_i = probs.topk(k, dim=-1)
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
        # Assignments k-major: every token's first choice before any second choice.
        expert = top_i.t().reshape(-1)
        token = torch.arange(n_tokens, device=x.device).repeat(k)
        gate = top_p.t().reshape(-1)
        routed = torch.bincount(expert, minlength=n_experts)
        capacity = self.capacity(n_tokens)
        if capacity is not None:
            position = F.one_hot(expert, n_experts).cumsum(0).gather(1, expert[:, None]).squeeze(1) - 1
            keep = position < capacity
            expert, token, gate = expert[keep], token[keep], gate[keep]
        order = torch.argsort(expert, stable=True)
        expert, token, gate = expert[order], token[order], gate[order]
        counts = torch.bincount(expert, minlength=n_experts)
        y = self._run_experts(xt[token], counts)
        out = torch.zeros_like(xt).index_add(0, token, (y.float() * gate[:, None]).to(xt.dtype))

        fraction = routed.float() / (n_tokens * k)
        load_balance = n_experts * (fraction * probs.mean(dim=0)).sum()
        z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
        aux = self.load_balance_coef * load_balance + self.router_z_loss_coef * z_loss
        if torch.is_grad_enabled() and (self.load_balance_coef or self.router_z_loss_coef):
            out = _AddAuxLossGrad.apply(out, aux * n_tokens, float(self.aux_scale()))
        stats = self.stats
        if not torch.is_grad_enabled():  # validation: not part of the training step's statistics
            stats = {"tokens_per_expert": stats["tokens_per_expert"].clone(), "assignments": 0, "dropped": 0,
                     "aux_loss_sum": 0.0, "tokens": 0}
        stats["tokens_per_expert"] += routed.detach().cpu()
        stats["assignments"] += n_tokens * k
        stats["dropped"] += n_tokens * k - int(counts.sum())
        stats["aux_loss_sum"] += float(aux.detach()) * n_tokens
        stats["tokens"] += n_tokens
        out = out.reshape(shape)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out

    def _run_experts(self, routed_x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.ep_size == 1:
            return self.experts(routed_x, counts.tolist())
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        ep, local_experts = self.ep_size, self.n_experts // self.ep_size
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts, group=self.ep_group)  # [src rank, local expert], src-major
        received = received.view(ep, local_experts)
        send_splits = counts.view(ep, local_experts).sum(1).tolist()
        recv_splits = received.sum(1).tolist()
        recv_x = all_to_all_single_autograd(routed_x.contiguous(), recv_splits, send_splits, self.ep_group)
        # Received rows are grouped by source rank, then by expert: regroup by local expert.
        segment_expert = torch.arange(local_experts, device=counts.device).repeat(ep)
        row_expert = torch.repeat_interleave(segment_expert, received.reshape(-1))
        perm = torch.argsort(row_expert, stable=True)
        y = self.experts(recv_x[perm], received.sum(0).tolist())
        y = y[torch.argsort(perm)]
        return all_to_all_single_autograd(y.contiguous(), send_splits, recv_splits, self.ep_group)


def moe_modules(module: nn.Module) -> list[tuple[str, MoE]]:
    return [(name, m) for name, m in module.named_modules() if isinstance(m, MoE)]


def step_stats(parts, cfg, device: torch.device, distributed: bool) -> dict:
    """The MoE layers' statistics since the last call, summed over all ranks (each rank routes its own tokens;
    pipeline stages hold different layers), for the metrics record; resets them. Empty for a dense model.

    ``moe_expert_load``: layer -> tokens routed to each expert (before capacity dropping);
    ``moe_dropped_tokens`` / ``moe_dropped_fraction``: assignments dropped at capacity (of tokens × top_k);
    ``moe_aux_loss``: the weighted auxiliary losses, token-weighted mean per layer, summed over layers."""
    if not cfg.n_experts:
        return {}
    layers = [i for i in range(cfg.n_layers) if is_moe_layer(cfg, i)]
    n = cfg.n_experts
    table = torch.zeros(len(layers), n + 4, dtype=torch.float64)
    for part in parts:
        for name, moe in moe_modules(part):
            row = layers.index(int(name.split(".")[1]))  # layers.<i>.feed_forward
            st = moe.stats
            table[row, :n] = st["tokens_per_expert"].double()
            table[row, n:] = torch.tensor([st["assignments"], st["dropped"], st["aux_loss_sum"], st["tokens"]],
                                          dtype=torch.float64)
            moe.reset_stats()
    if distributed:
        table = table.to(device)
        dist.all_reduce(table)
        table = table.cpu()
    assignments, dropped = table[:, n].sum(), table[:, n + 1].sum()
    return {"moe_expert_load": {str(layer): [int(v) for v in table[row, :n]] for row, layer in enumerate(layers)},
            "moe_dropped_tokens": int(dropped), "moe_dropped_fraction": float(dropped / max(float(assignments), 1.0)),
            "moe_aux_loss": float((table[:, n + 2] / table[:, n + 3].clamp(min=1)).sum())}

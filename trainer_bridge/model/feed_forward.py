"""The dense feed-forward layer (SwiGLU) and which layers a Mixture of Experts replaces it in: what both the
transformer (``transformer``) and the MoE layer (``moe``: its shared expert) build on."""
from __future__ import annotations

import math

import torch.nn.functional as F
from torch import nn

from trainer_bridge.config import ModelConfig


def dense_hidden(cfg: ModelConfig) -> int:
    """The dense feed-forward's hidden size: ``ffn_hidden``, else 8/3·dim rounded up to ``multiple_of``."""
    return cfg.ffn_hidden or cfg.multiple_of * math.ceil(int(8 * cfg.dim / 3) / cfg.multiple_of)


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = dense_hidden(cfg)
        self.w1 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def is_moe_layer(cfg: ModelConfig, layer: int) -> bool:
    return bool(cfg.n_experts) and layer % cfg.moe_every == cfg.moe_every - 1

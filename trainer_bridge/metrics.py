"""FLOP counting, MFU, and the metrics log (``train/metrics.jsonl`` and TensorBoard when installed).

Training FLOPs of one step, forward + backward (backward = 2 × forward):
- dense part: 6 · N per token, N = parameters taking part in matmuls (all but the input embedding, which is
  a lookup; with tied embeddings the shared matrix counts once, as the output projection);
- attention: per layer and head, QKᵀ and AV each cost 2·d_head FLOPs per (query, key) pair. Causal attention
  within a document of length l has ≈ l²/2 pairs (the causal half), and packed documents never attend to each
  other, so a step has Σ l²/2 pairs over all documents. Forward: 2 matmuls · 2·d_head · H · Σl²/2 =
  2·H·d_head·Σl² per layer; training: 3× that = 6 · n_layers · (H·d_head) · Σ l².
Only real (non-padding) tokens count: padding is work done but not useful, so it lowers MFU.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from trainer_bridge.config import ModelConfig
from trainer_bridge.model import count_parameters


def dense_flops_per_token(non_embedding_params: int) -> float:
    return 6.0 * non_embedding_params


def attention_flops(n_layers: int, attention_dim: int, sum_squared_segment_lengths: int) -> float:
    return 6.0 * n_layers * attention_dim * sum_squared_segment_lengths


class FlopCounter:
    def __init__(self, cfg: ModelConfig):
        self.non_embedding_params = count_parameters(cfg)["non_embedding"]
        self.n_layers = cfg.n_layers
        self.attention_dim = cfg.dim  # n_heads · head_dim

    def step_flops(self, tokens: int, sum_squared_segment_lengths: int) -> float:
        return (dense_flops_per_token(self.non_embedding_params) * tokens
                + attention_flops(self.n_layers, self.attention_dim, sum_squared_segment_lengths))


def mfu(step_flops: float, step_seconds: float, peak_flops_per_device: float, n_devices: int) -> float:
    return step_flops / (step_seconds * peak_flops_per_device * n_devices)


class MetricsLog:
    """Rank 0 appends one JSON object per logged step; TensorBoard scalars too when the package exists."""

    def __init__(self, out_dir: Path, enabled: bool, tensorboard: bool):
        self.enabled = enabled
        self._writer = None
        self._file = None
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(out_dir / "metrics.jsonl", "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
            except ImportError:
                print("corpusmill train: the 'tensorboard' package is not installed; metrics go to "
                      f"{out_dir / 'metrics.jsonl'} only", file=sys.stderr)

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self._writer is not None:
            step = record.get("step", 0)
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._writer is not None:
            self._writer.close()

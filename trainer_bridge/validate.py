"""Validation: the loss on a fixed held-out slice (the first ``eval.max_rows`` rows of the 'val' split).

The slice is split evenly across the data-parallel ranks; every target token weighs the same, whatever the
split into ranks and micro-batches, as in training. A run without a 'val' split, or with one too small for the
ranks and the pipeline's micro-batches, trains without validation (and says so once).
"""
from __future__ import annotations

from typing import Callable

import torch

from runio.layout import RunPaths
from trainer_bridge import device as devices
from trainer_bridge.config import TrainConfig
from trainer_bridge.data import has_split, open_split, validation_batches
from trainer_bridge.parallelize import ModelParts


class Validator:
    """The training loop's validation component: ``due(step)`` after every step, ``run()`` when it is."""

    def __init__(self, cfg: TrainConfig, paths: RunPaths, runtime: devices.Runtime, *, model: ModelParts, loss_fn,
                 context, dp_group, tokenizer_sha256: str | None, say: Callable[[str], None],
                 verify: str = "manifest"):
        """``verify``: as ``data.open_split``; a 'val' split that exists but is damaged stops the run
        (``ShardFormatError`` naming the shard), only a missing one turns validation off."""
        self.interval = cfg.eval.interval
        self.runtime, self.model, self.loss_fn, self.context, self.dp_group = runtime, model, loss_fn, context, dp_group
        self.batches = []
        if self.interval <= 0:
            return
        if not has_split(paths.shards, "val"):
            say(f"no 'val' split in {paths.shards}; validation is off")
            return
        source = open_split(paths.shards, "val", tokenizer_sha256, verify=verify)
        self.batches = validation_batches(source, max_rows=cfg.eval.max_rows,
                                          micro_batch_size=cfg.batch.micro_batch_size, dp_rank=model.dp_rank,
                                          dp_size=cfg.mesh.dp,
                                          # pipeline stages keep the micro-batch shapes of training
                                          divisible_by=cfg.batch.micro_batch_size if cfg.mesh.pp > 1 else 1)
        if not self.batches:
            say(f"the 'val' split has {len(source)} row(s): too few for {cfg.mesh.dp} data-parallel rank(s) and "
                "the pipeline's micro-batches; validation is off")

    def due(self, step: int) -> bool:
        """After ``step`` completed steps."""
        return bool(self.batches) and step % self.interval == 0

    @torch.no_grad()
    def run(self) -> float:
        """The mean token loss over the slice (every rank gets the same number)."""
        model, loss_fn = self.model, self.loss_fn
        loss_fn.factor, loss_fn.sums = 1.0, []
        pipeline_losses: list[torch.Tensor] = []
        tokens = 0
        for mb in self.batches:
            mb = mb.to(self.runtime.device)
            tokens += mb.target_tokens
            with self.context:
                if model.schedule is not None:
                    args = (mb.input_ids,) if model.has_first_stage else ()
                    losses: list[torch.Tensor] = []
                    model.schedule.eval(*args, target=mb.labels, losses=losses, position_ids=mb.position_ids,
                                        segment_ids=mb.segment_ids)
                    pipeline_losses.extend(losses)
                else:
                    loss_fn(model.parts[0](mb.input_ids, mb.position_ids, mb.segment_ids), mb.labels)
        sums = pipeline_losses if model.schedule is not None else loss_fn.sums
        loss_sum = torch.stack([l.float() for l in sums]).sum() if sums else torch.zeros(())
        totals = torch.tensor([float(loss_sum), 0.0], dtype=torch.float64, device=self.runtime.device)
        counted = torch.tensor([tokens], dtype=torch.int64, device=self.runtime.device)
        self.runtime.all_reduce(totals)
        self.runtime.all_reduce(counted, self.dp_group)
        return float(totals[0]) / max(1, int(counted[0]))

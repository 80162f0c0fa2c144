"""The training loop, top to bottom.

    setup:   runtime (device, process group) → shards → model (meta → parallelized → materialized)
             → optimizer, loss scaler, guard, checkpointer, metrics → resume from 'latest' if any
    per step: next batch (prefetched) → forward/backward over the micro-batches (accumulation, or the pipeline
             schedule) → unscale and agree on overflow → guard (NaN/Inf, spike) → clip by global norm →
             AdamW step → log → validation every N steps → checkpoint every N steps

Loss normalization: every token of a global batch weighs the same. Each micro-batch's summed token loss is
divided by the number of target tokens in the whole global batch (all micro-batches, all data-parallel
ranks), counted before the forward pass. The gradient is then identical whatever the split into ranks,
micro-batches and pipeline micro-batches, which is what makes runs on different topologies comparable.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tokenizer.shards import ShardFormatError
from trainer_bridge import device as devices
from trainer_bridge.alerts import AlertMonitor, action_code, respond
from trainer_bridge.checkpoint import (Checkpointer, checkpoint_candidates, checkpoint_problem, latest_checkpoint,
                                       step_dir_name)
from trainer_bridge.config import GuardConfig, OptimizerConfig, TrainConfig
from trainer_bridge.data import IGNORE_INDEX, StepBatch, StepBatches, open_split, validation_batches
from trainer_bridge.metrics import FlopCounter, MetricsLog, mfu
from trainer_bridge.monitoring import TrainingMonitor
from trainer_bridge.parallelize import ModelParts, build_mesh, build_model, global_grad_norm, scale_grads, zero_grads
from trainer_bridge.precision import DynamicLossScaler, compute_context


class TrainingStopped(RuntimeError):
    """Training cannot continue (persistent bad steps); the message says why and what to do."""


@dataclass
class TrainHooks:
    """Test and tooling hooks. ``after_backward(step, model)`` may alter gradients (fault injection);
    ``stop_after_step`` ends the run early without a final checkpoint, as a crash would."""

    after_backward: Callable[[int, ModelParts], None] | None = None
    stop_after_step: int | None = None


@dataclass
class TrainResult:
    final_step: int
    losses: dict[int, float] = field(default_factory=dict)  # step -> global loss (every rank knows it)
    grad_norms: dict[int, float] = field(default_factory=dict)
    val_losses: dict[int, float] = field(default_factory=dict)
    sample_ids: dict[int, list[int]] = field(default_factory=dict)  # step -> rows this rank trained on
    consumed: list[list[int]] = field(default_factory=list)  # every batch in order, repeated steps included
    events: list[dict] = field(default_factory=list)
    skipped_bad_steps: int = 0
    skipped_overflow_steps: int = 0
    rollbacks: int = 0
    loss_scale: float = 1.0
    resumed_from: str | None = None
    data_wait_seconds: float = 0.0
    train_seconds: float = 0.0
    stopped_by_alert: bool = False
    initialized_from: str | None = None


def learning_rate(step: int, cfg: OptimizerConfig, total_steps: int) -> float:
    """Linear warmup, then cosine decay to min_lr, or WSD: hold, then decay linearly over the last fraction."""
    min_lr = cfg.lr * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "cosine":
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
        return min_lr + (cfg.lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_steps = max(1, round(cfg.decay_fraction * total_steps))
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return cfg.lr
    return cfg.lr + (min_lr - cfg.lr) * min(1.0, (step - decay_start + 1) / decay_steps)


class TokenSumLoss:
    """Summed next-token cross-entropy times ``factor`` (1 / global target tokens, × dp, × loss scale).

    Also the pipeline schedules' ``loss_fn``; it keeps the unscaled sums of the current step in ``sums``."""

    def __init__(self):
        self.factor = 1.0
        self.sums: list[torch.Tensor] = []

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        total = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                reduction="sum")
        self.sums.append(total.detach())
        return total * self.factor


class StepGuard:
    """Judges each step: NaN/Inf loss or gradient, or a loss spike over the running mean of good losses."""

    def __init__(self, cfg: GuardConfig):
        self.cfg = cfg
        self.mean = 0.0
        self.good_steps = 0
        self.consecutive_bad = 0

    def verdict(self, loss: float, grad_norm: float) -> str | None:
        if not self.cfg.enabled:
            return None
        if not math.isfinite(loss):
            return "non-finite loss"
        if not math.isfinite(grad_norm):
            return "non-finite gradient"
        if self.good_steps >= self.cfg.spike_warmup_steps and loss > self.cfg.spike_factor * self.mean:
            return f"loss spike ({loss:.4g} > {self.cfg.spike_factor} × running mean {self.mean:.4g})"
        return None

    def record(self, loss: float | None) -> None:
        """``None``: a bad step; otherwise a good step's loss."""
        if loss is None:
            self.consecutive_bad += 1
            return
        self.consecutive_bad = 0
        beta = self.cfg.ema_beta
        self.mean = loss if self.good_steps == 0 else beta * self.mean + (1 - beta) * loss
        self.good_steps += 1

    def state(self) -> torch.Tensor:
        return torch.tensor([self.mean, float(self.good_steps), float(self.consecutive_bad)], dtype=torch.float64)

    def load(self, state: torch.Tensor) -> None:
        self.mean, self.good_steps, self.consecutive_bad = float(state[0]), int(state[1]), int(state[2])


def build_optimizers(model: ModelParts, cfg: OptimizerConfig) -> list[torch.optim.Optimizer]:
    """One AdamW per model part; no weight decay on gains (1-D parameters)."""
    optimizers = []
    for part in model.parts:
        decay = [p for p in part.parameters() if p.ndim >= 2]
        no_decay = [p for p in part.parameters() if p.ndim < 2]
        optimizers.append(torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, foreach=True))
    return optimizers


def resolve_model_config(cfg: TrainConfig, train_source) -> TrainConfig:
    """Fill vocab_size and max_seq_len from the shards; refuse a model that cannot embed the shards' ids."""
    model = cfg.model
    vocab = model.vocab_size or train_source.vocab_size
    if vocab < train_source.vocab_size:
        raise ValueError(f"model.vocab_size ({vocab}) < the shards' vocab_size ({train_source.vocab_size})")
    seq_len = model.max_seq_len or train_source.seq_len
    if seq_len < train_source.seq_len:
        raise ValueError(f"model.max_seq_len ({seq_len}) < the shards' seq_len ({train_source.seq_len})")
    return cfg.model_copy(update={"model": model.model_copy(update={"vocab_size": vocab, "max_seq_len": seq_len})})


class Trainer:
    def __init__(self, cfg: TrainConfig, *, shard_dir: Path, out_dir: Path, hooks: TrainHooks | None = None,
                 tokenizer_sha256: str | None = None):
        self.hooks = hooks or TrainHooks()
        self.runtime = devices.init_runtime(cfg.device, cfg.collective_timeout_s)
        self.out_dir = Path(out_dir)
        torch.manual_seed(cfg.seed)

        self.train_source = open_split(shard_dir, "train", tokenizer_sha256)
        self.cfg = cfg = resolve_model_config(cfg, self.train_source)
        self.val_source = None
        if cfg.eval.interval > 0:
            try:
                self.val_source = open_split(shard_dir, "val", tokenizer_sha256)
            except ShardFormatError as error:
                self._say(f"no 'val' split in {shard_dir} ({error}); validation is off")

        self.mesh = build_mesh(cfg, self.runtime)
        self.dp_group = self.mesh["dp"].get_group() if self.mesh is not None else None
        self.loss_fn = TokenSumLoss()
        self.model = build_model(cfg, self.runtime, self.mesh, self.loss_fn)
        self.optimizers = build_optimizers(self.model, cfg.optimizer)
        self.scaler = DynamicLossScaler(cfg.precision.loss_scale, enabled=cfg.precision.dtype == "fp16")
        self.guard = StepGuard(cfg.guards)
        self.context = compute_context(cfg.precision, self.runtime.device, self.model.uses_fsdp)
        self.checkpointer = (Checkpointer(self.out_dir / "checkpoints", cfg.checkpoint, self.runtime)
                             if cfg.checkpoint.enabled else None)
        self.log = MetricsLog(self.out_dir, enabled=self.runtime.is_main, tensorboard=cfg.metrics.tensorboard)
        self.flops = FlopCounter(cfg.model)
        self.peak_flops, self.peak_source = devices.peak_flops(self.runtime.device, cfg.precision.dtype,
                                                               cfg.metrics.peak_flops)
        run_name = self.out_dir.parent.name
        self.monitor = TrainingMonitor(cfg.monitoring, run=run_name, rank=self.runtime.rank)
        self.alerts = AlertMonitor(cfg.alerts, self.out_dir.parent, run=run_name) if self.runtime.is_main else None
        self._recovering_since: tuple[int, float] | None = None
        self.step = 0
        self.samples = 0  # global sample index: the whole data state
        self.tokens_seen = 0
        self.result = TrainResult(final_step=0)

    # -- helpers ------------------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if self.runtime.is_main:
            print(f"corpusmill train: {message}", flush=True)

    def _all_reduce(self, tensor: torch.Tensor, group=None, op=dist.ReduceOp.SUM) -> torch.Tensor:
        if self.runtime.distributed:
            dist.all_reduce(tensor, op=op, group=group)
        return tensor

    def _checkpoint_now(self) -> None:
        """Before pausing or stopping for an alert: a checkpoint of this step, unless one was just taken."""
        if self.checkpointer is None:
            return
        latest = latest_checkpoint(self.out_dir / "checkpoints")
        if latest is None or latest.name != step_dir_name(self.step):
            self._save()
        self.checkpointer.wait()

    def _train_state(self) -> dict[str, torch.Tensor]:
        r = self.result
        return {
            "progress": torch.tensor([self.step, self.samples, self.tokens_seen, r.skipped_bad_steps,
                                      r.skipped_overflow_steps, r.rollbacks], dtype=torch.int64),
            "lr_schedule": torch.tensor([self.step], dtype=torch.int64),
            "loss_scale": self.scaler.state(),
            "guard": self.guard.state(),
        }

    def _load(self, path: Path, keep_data_position: bool = False) -> None:
        state = self._train_state()
        had_rng = self.checkpointer.load(path, self.model.parts, self.optimizers, state)
        step, samples, tokens, bad, overflow, rollbacks = (int(v) for v in state["progress"])
        self.step = step
        if not keep_data_position:
            self.samples, self.tokens_seen = samples, tokens
            self.result.skipped_bad_steps, self.result.skipped_overflow_steps = bad, overflow
            self.result.rollbacks = rollbacks
        self.scaler.load(state["loss_scale"])
        self.guard.load(state["guard"])
        if not had_rng:
            self._say(f"{path.name} has no RNG state for rank {self.runtime.rank} (world size changed); "
                      "this rank keeps its seeded RNG")

    def _save(self) -> None:
        started = time.perf_counter()
        self.checkpointer.save(self.step, self.model.parts, self.optimizers, self._train_state())
        self.monitor.observe_checkpoint(time.perf_counter() - started, self.checkpointer.last_blocking_seconds)
        self.result.events.append({"step": self.step, "event": "checkpoint",
                                   "blocking_s": self.checkpointer.last_blocking_seconds})

    # -- one step -----------------------------------------------------------------------------------------
    def _forward_backward(self, batch: StepBatch, loss_factor: float) -> torch.Tensor:
        """Forward and backward over this rank's micro-batches; returns its summed token loss (unscaled)."""
        self.loss_fn.factor = loss_factor
        self.loss_fn.sums = []
        pipeline_losses: list[torch.Tensor] = []
        model = self.model
        last = len(batch.micro_batches) - 1
        for i, mb in enumerate(batch.micro_batches):
            mb = mb.to(self.runtime.device)
            if model.schedule is not None:
                args = (mb.input_ids,) if model.has_first_stage else ()
                losses: list[torch.Tensor] = []
                with self.context:
                    model.schedule.step(*args, target=mb.labels, losses=losses, return_outputs=False,
                                        position_ids=mb.position_ids, segment_ids=mb.segment_ids)
                pipeline_losses.extend(losses)
            else:
                part = model.parts[0]
                if model.uses_fsdp:
                    part.set_requires_gradient_sync(i == last)  # reduce-scatter once, after the last micro-batch
                with self.context:
                    logits = part(mb.input_ids, mb.position_ids, mb.segment_ids)
                self.loss_fn(logits, mb.labels).backward()
        if model.schedule is not None:
            # The schedule reports each micro-batch's loss as returned by loss_fn (× factor); only the last
            # stage has them.
            if not pipeline_losses:
                return torch.zeros((), device=self.runtime.device)
            return torch.stack([l.detach().float() for l in pipeline_losses]).sum() / loss_factor
        return torch.stack(self.loss_fn.sums).sum()

    def train_step(self, batch: StepBatch) -> dict:
        cfg = self.cfg
        lr = learning_rate(self.step, cfg.optimizer, cfg.steps)
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr
        # Global counts, before the forward pass: they normalize the loss of every micro-batch.
        local = torch.tensor([batch.target_tokens, sum(b.real_tokens for b in batch.micro_batches),
                              sum(b.sum_squared_segment_lengths for b in batch.micro_batches)],
                             dtype=torch.int64, device=self.runtime.device)
        target_tokens, real_tokens, sum_sq = (int(v) for v in self._all_reduce(local, self.dp_group))
        # FSDP averages gradients over dp ranks; multiplying by dp turns that average into the global sum.
        loss_factor = self.scaler.scale * cfg.mesh.dp / max(1, target_tokens)
        loss_sum = self._forward_backward(batch, loss_factor)
        loss = float(self._all_reduce(loss_sum.float().reshape(1)).item()) / max(1, target_tokens)
        if self.hooks.after_backward is not None:
            self.hooks.after_backward(self.step, self.model)

        finite = self.scaler.unscale_and_check(self.model, self.runtime.distributed)
        grad_norm = float(global_grad_norm(self.model, self.runtime.distributed)) if finite else float("nan")
        verdict = self.guard.verdict(loss, grad_norm if finite or not self.scaler.enabled else 0.0)
        record = {"loss": loss, "grad_norm": grad_norm, "lr": lr, "loss_scale": self.scaler.scale}
        if verdict is None and not finite:  # fp16 overflow: not the model's fault, back off the scale
            self.scaler.update(False)
            self.result.skipped_overflow_steps += 1
            record["event"] = "overflow skipped"
        elif verdict is not None:
            self.guard.record(None)
            self.result.skipped_bad_steps += 1
            record["event"] = f"skipped: {verdict}"
        else:
            if cfg.optimizer.clip_grad_norm is not None:
                clip = min(1.0, cfg.optimizer.clip_grad_norm / (grad_norm + 1e-6))
                scale_grads(self.model, clip)
            for optimizer in self.optimizers:
                optimizer.step()
            self.scaler.update(True)
            self.guard.record(loss)
        zero_grads(self.model)
        self.step += 1
        self.samples += cfg.batch.global_batch_size
        self.tokens_seen += real_tokens
        record.update(real_tokens=real_tokens, sum_squared_segment_lengths=sum_sq)
        return record

    @torch.no_grad()
    def evaluate(self, batches) -> float:
        self.loss_fn.factor, self.loss_fn.sums = 1.0, []
        pipeline_losses: list[torch.Tensor] = []
        tokens = 0
        for mb in batches:
            mb = mb.to(self.runtime.device)
            tokens += mb.target_tokens
            with self.context:
                if self.model.schedule is not None:
                    args = (mb.input_ids,) if self.model.has_first_stage else ()
                    losses: list[torch.Tensor] = []
                    self.model.schedule.eval(*args, target=mb.labels, losses=losses, position_ids=mb.position_ids,
                                             segment_ids=mb.segment_ids)
                    pipeline_losses.extend(losses)
                else:
                    self.loss_fn(self.model.parts[0](mb.input_ids, mb.position_ids, mb.segment_ids), mb.labels)
        sums = pipeline_losses if self.model.schedule is not None else self.loss_fn.sums
        loss_sum = torch.stack([l.float() for l in sums]).sum() if sums else torch.zeros(())
        totals = torch.tensor([float(loss_sum), 0.0], dtype=torch.float64, device=self.runtime.device)
        counted = torch.tensor([tokens], dtype=torch.int64, device=self.runtime.device)
        self._all_reduce(totals)
        self._all_reduce(counted, self.dp_group)
        return float(totals[0]) / max(1, int(counted[0]))

    def _rollback(self, bad_step: int, reason: str) -> None:
        cfg = self.cfg.guards
        path = None
        if self.checkpointer is not None:
            self.checkpointer.wait()  # an async save in flight may be the newest healthy state
            if self.runtime.distributed:
                dist.barrier()  # rank 0 has promoted it before anyone reads 'latest'
            path = latest_checkpoint(self.out_dir / "checkpoints")
        if cfg.on_persistent == "stop" or path is None or self.result.rollbacks >= cfg.max_rollbacks:
            why = ("guards.on_persistent is 'stop'" if cfg.on_persistent == "stop" else
                   "no checkpoint to roll back to" if path is None else
                   f"already rolled back {self.result.rollbacks} time(s) (guards.max_rollbacks)")
            raise TrainingStopped(
                f"stopped at step {self.step}: {cfg.max_consecutive_bad} bad steps in a row (last: {reason}); {why}. "
                "Lower optimizer.lr, raise optimizer.warmup_steps, or inspect the data around sample "
                f"{self.samples}.")
        rollbacks = self.result.rollbacks + 1
        # Weights, optimizer, schedule position and scaler come back; the data keeps moving forward, so the
        # batches that caused the trouble are not replayed.
        self._load(path, keep_data_position=True)
        self.result.rollbacks = rollbacks
        self.guard.consecutive_bad = 0
        self.result.events.append({"step": bad_step, "event": "rollback", "to": path.name})
        self._say(f"{cfg.max_consecutive_bad} bad steps in a row (last: {reason}): rolled back to {path.name}")

    def _resume_from_newest_sound_checkpoint(self) -> None:
        """Load the newest checkpoint that passes its checksums; a damaged one is skipped, with a log line."""
        for path in checkpoint_candidates(self.out_dir / "checkpoints"):
            problem = checkpoint_problem(path)
            if problem is not None:
                self._say(f"checkpoint {path.name} is damaged ({problem}); falling back to an older one")
                continue
            self._load(path)
            self.result.resumed_from = path.name
            self._say(f"resumed from {path.name}: step {self.step}, sample {self.samples}")
            self._recovering_since = self._last_logged_time()
            return

    def _initialize_from_run(self, run_dir: Path) -> None:
        """Continue another run's training on this run's data: its weights, optimizer and step, our samples."""
        for path in checkpoint_candidates(run_dir / "train" / "checkpoints"):
            problem = checkpoint_problem(path)
            if problem is not None:
                self._say(f"init_from: checkpoint {path.name} is damaged ({problem}); trying an older one")
                continue
            self._load(path, keep_data_position=True)
            self.result.initialized_from = f"{run_dir}/{path.name}"
            self._say(f"initialized from {run_dir} {path.name}: step {self.step}, data from sample 0 of this run")
            return
        raise FileNotFoundError(f"train.init_from: no usable checkpoint under {run_dir}/train/checkpoints")

    def _last_logged_time(self) -> tuple[int, float] | None:
        """(step, wall time) of the last step logged before a restart, to measure the recovery time."""
        path = self.out_dir / "metrics.jsonl"
        if not self.runtime.is_main or not path.exists():
            return None
        last = None
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by the failure
                if "time" in record and "step" in record:
                    last = (int(record["step"]), float(record["time"]))
        return last

    def _record_recovery(self, step: int) -> None:
        """Failure to first completed step after restart: from the last logged step to now (an upper bound)."""
        failed_after, last_time = self._recovering_since
        self._recovering_since = None
        now = time.time()
        entry = {"failed_after_step": failed_after, "last_record_time": last_time, "resumed_from":
                 self.result.resumed_from, "first_step_after_restart": step, "recovered_at": now,
                 "recovery_seconds": round(now - last_time, 3)}
        with open(self.out_dir / "recovery.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        self._say(f"recovered from a restart in {entry['recovery_seconds']:.1f} s "
                  f"(last step logged before it: {failed_after})")

    # -- the loop -----------------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        cfg, result = self.cfg, self.result
        if self.checkpointer is not None and cfg.checkpoint.resume:
            self._resume_from_newest_sound_checkpoint()
        if result.resumed_from is None and cfg.init_from:
            self._initialize_from_run(Path(cfg.init_from))
        dp_rank = self.model.dp_rank
        loader = StepBatches(self.train_source, seed=cfg.seed, start_sample=self.samples,
                             global_batch_size=cfg.batch.global_batch_size, micro_batch_size=cfg.batch.micro_batch_size,
                             dp_rank=dp_rank, dp_size=cfg.mesh.dp, prefetch=cfg.batch.prefetch_batches)
        val_batches = (validation_batches(self.val_source, max_rows=cfg.eval.max_rows,
                                          micro_batch_size=cfg.batch.micro_batch_size, dp_rank=dp_rank,
                                          dp_size=cfg.mesh.dp,
                                          # pipeline stages keep the micro-batch shapes of training
                                          divisible_by=cfg.batch.micro_batch_size if cfg.mesh.pp > 1 else 1)
                       if self.val_source is not None else [])
        if self.val_source is not None and not val_batches:
            self._say(f"the 'val' split has {len(self.val_source)} row(s): too few for {cfg.mesh.dp} data-parallel "
                      "rank(s) and the pipeline's micro-batches; validation is off")
        self._say(f"{self.flops.non_embedding_params / 1e6:.2f}M non-embedding parameters, mesh pp={cfg.mesh.pp} "
                  f"dp={cfg.mesh.dp}, {cfg.precision.dtype}, {cfg.grad_accum_steps} accumulation step(s), "
                  f"peak {self.peak_flops / 1e12:.3g} TFLOP/s per device ({self.peak_source})")
        self.monitor.start()
        first_step = self.step
        start = last_time = time.perf_counter()
        last_cpu = time.process_time()
        devices.reset_peak_memory(self.runtime.device)
        try:
            while self.step < cfg.steps:
                wait_before = loader.wait_seconds
                batch = next(loader)
                step = self.step
                result.sample_ids[step] = [i for mb in batch.micro_batches for i in mb.sample_ids]
                result.consumed.append(result.sample_ids[step])
                record = self.train_step(batch)
                devices.synchronize(self.runtime.device)
                now = time.perf_counter()
                step_time, last_time = now - last_time, now
                # CPU seconds of this process (all threads) for the step: unlike wall time, not inflated when
                # other processes compete for the cores; used by benchmarks/bench_trainer.py.
                cpu_now = time.process_time()
                step_cpu, last_cpu = cpu_now - last_cpu, cpu_now
                data_wait = loader.wait_seconds - wait_before
                result.losses[step] = record["loss"]
                result.grad_norms[step] = record["grad_norm"]
                step_flops = self.flops.step_flops(record["real_tokens"], record["sum_squared_segment_lengths"])
                record.update(step=step, step_time_s=step_time, process_cpu_s=step_cpu, data_wait_s=data_wait,
                              data_wait_fraction=data_wait / step_time, tokens_per_s=record["real_tokens"] / step_time,
                              mfu=mfu(step_flops, step_time, self.peak_flops, self.runtime.world_size),
                              tokens_seen=self.tokens_seen, samples=self.samples,
                              peak_memory_bytes=devices.peak_memory_bytes(self.runtime.device),
                              skipped_bad_steps=result.skipped_bad_steps,
                              skipped_overflow_steps=result.skipped_overflow_steps, rollbacks=result.rollbacks)
                if "event" in record:
                    result.events.append({"step": step, "event": record["event"]})
                if self.guard.consecutive_bad >= cfg.guards.max_consecutive_bad:
                    self._rollback(step, record.get("event", "bad step"))
                    record["event"] = "rollback"
                if val_batches and cfg.eval.interval and self.step % cfg.eval.interval == 0:
                    record["val_loss"] = result.val_losses[self.step] = self.evaluate(val_batches)
                record["time"] = time.time()
                if self._recovering_since is not None:
                    self._record_recovery(step)
                record.update(self.monitor.hardware())
                self.monitor.observe_step(record)
                fired = self.alerts.observe(step, record) if self.alerts is not None else []
                for alert in fired:
                    self.monitor.observe_alert(alert.rule, alert.action)
                # Every rank takes the most severe action any rank saw, so none waits in a collective alone.
                action = int(self._all_reduce(torch.tensor([action_code(fired)]), op=dist.ReduceOp.MAX)[0]) \
                    if self.runtime.distributed else action_code(fired)
                if step % cfg.metrics.log_interval == 0 or "event" in record or "val_loss" in record:
                    self.log.log(record)
                    done = max(self.step - first_step, 1)
                    eta_s = (cfg.steps - self.step) * (time.perf_counter() - start) / done
                    self._say(f"step {step:>6}/{cfg.steps} eta {eta_s:4.0f}s "
                              f"loss {record['loss']:.4f} gnorm {record['grad_norm']:.3f} "
                              f"lr {record['lr']:.3g} {record['tokens_per_s']:.0f} tok/s mfu {record['mfu']:.3f}"
                              + (f" val {record['val_loss']:.4f}" if "val_loss" in record else "")
                              + (f" [{record['event']}]" if "event" in record else ""))
                if self.checkpointer is not None:
                    self.checkpointer.poll()
                    # Never checkpoint in the middle of a bad streak: a rollback must land on a healthy state.
                    due = self.step % cfg.checkpoint.interval == 0 or self.step == cfg.steps
                    if due and self.guard.consecutive_bad == 0:
                        self._save()
                if action and respond(action, run_dir=self.out_dir.parent, checkpoint=self._checkpoint_now,
                                      poll_s=cfg.alerts.resume_poll_s, alert=fired[0] if fired else None,
                                      say=self._say):
                    result.stopped_by_alert = True
                    break
                if self.hooks.stop_after_step is not None and self.step >= self.hooks.stop_after_step:
                    break
        finally:
            self.monitor.close()
            if self.alerts is not None:
                self.alerts.close()
            loader.close()
            if self.checkpointer is not None:
                self.checkpointer.close()
            self.log.close()
        result.final_step = self.step
        result.loss_scale = self.scaler.scale
        result.data_wait_seconds = loader.wait_seconds
        result.train_seconds = time.perf_counter() - start
        return result


def train(cfg: TrainConfig, *, shard_dir: Path, out_dir: Path, hooks: TrainHooks | None = None,
          tokenizer_sha256: str | None = None) -> TrainResult:
    """Train in this process (one rank of a torchrun job, or alone). The process group is left initialized."""
    return Trainer(cfg, shard_dir=shard_dir, out_dir=out_dir, hooks=hooks, tokenizer_sha256=tokenizer_sha256).fit()

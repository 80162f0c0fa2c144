"""The training loop, top to bottom.

    setup:    runtime (device, process group) → shards → model (meta → parallelized → materialized) → optimizer,
              loss scaler, guard → the loop's components → the start plan (``checkpoint/start.py``: fresh, resume
              this run's checkpoint, or initialise from other weights) loaded
    per step: next batch (prefetched) → forward/backward over the micro-batches (accumulation, or the pipeline
              schedule) → unscale and agree on overflow → guard (NaN/Inf, spike) → clip by global norm → AdamW
              step → the components, each on its own cadence: metrics, validation, checkpoint, alerts

Components (each owns its cadence and its files; ``Trainer.fit`` only calls them in order):
    StepMetrics (metrics.py)        step timing, tokens/s, MFU, metrics.jsonl/TensorBoard, console, Prometheus
    Validator (validate.py)         the 'val' split loss (overall and per domain) every ``eval.interval`` steps
    Sampler (validate.py)           greedy samples from fixed prompts every ``eval.sample_interval`` steps
    CheckpointManager (checkpoint)  saves every ``checkpoint.interval`` steps, loads the start plan's, rollback target
    AlertCheck (alerts.py)          alert rules on rank 0, the action agreed by all ranks, pause/stop
    ScheduleCheck (schedule.py)     outside train.schedule's windows: checkpoint, pause, resume at the next one
    RecoveryTracker (recovery.py)   recovery time after a torchrun restart (recovery.jsonl)
    TrainHooks (here)               observation and fault injection for tests and tools; no production use

Loss normalization: every token of a global batch weighs the same. Each micro-batch's summed token loss is
divided by the number of target tokens in the whole global batch (all micro-batches, all data-parallel
ranks), counted before the forward pass. The gradient is then identical whatever the split into ranks,
micro-batches and pipeline micro-batches, which is what makes runs on different topologies comparable.
"""
from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from runio.files import sha256_file
from runio.layout import RunPaths
from trainer_bridge.parallel import device as devices
from trainer_bridge import hf
from trainer_bridge.observe.alerts import AlertCheck
from trainer_bridge.checkpoint.manager import CheckpointManager
from trainer_bridge.checkpoint.start import INIT, RESUME, StartPlan, agreed_plan, plan_start, restarted_by_torchrun
from trainer_bridge.checkpoint.store import RunIdentity
from trainer_bridge.config import GuardConfig, OptimizerConfig, TrainConfig
from trainer_bridge.loop.distill import Distiller, load_teacher
from trainer_bridge.loop.data import IGNORE_INDEX, DataOrderLog, StepBatch, StepBatches, open_split, shards_identity
from trainer_bridge.observe.metrics import StepMetrics
from trainer_bridge.observe.monitoring import TrainingMonitor
from trainer_bridge.outcomes import TrainConfigError, TrainingStopped
from trainer_bridge.parallel.parallelize import ModelParts, build_mesh, build_model, global_grad_norm, scale_grads, zero_grads
from trainer_bridge.parallel.precision import DynamicLossScaler, compute_context
from trainer_bridge.checkpoint.recovery import RecoveryTracker
from trainer_bridge.loop.schedule import Clock, ScheduleCheck, SystemClock
from trainer_bridge.model.moe import step_stats as moe_step_stats
from trainer_bridge.parallel.tensor_parallel import cross_entropy_sum
from trainer_bridge.loop.validate import Sampler, Validator


@dataclass
class TrainHooks:
    """Test and tooling hooks; the loop needs none of them.

    ``after_backward(step, model)`` may alter gradients (fault injection); ``on_batch(step, sample_ids)`` sees the
    rows this rank trains on at each step (a step repeated after a rollback is seen again); ``on_step(step,
    record)`` sees each step's complete metrics record; ``stop_after_step`` ends the run early without a final
    checkpoint, as a crash would."""

    after_backward: Callable[[int, ModelParts], None] | None = None
    on_batch: Callable[[int, list[int]], None] | None = None
    on_step: Callable[[int, dict], None] | None = None
    stop_after_step: int | None = None

    def batch(self, step: int, batch: StepBatch) -> None:
        if self.on_batch is not None:
            self.on_batch(step, batch.sample_ids)

    def step_done(self, step: int, record: dict) -> None:
        if self.on_step is not None:
            self.on_step(step, record)

    def should_stop(self, completed_steps: int) -> bool:
        return self.stop_after_step is not None and completed_steps >= self.stop_after_step


@dataclass
class TrainResult:
    final_step: int
    losses: dict[int, float] = field(default_factory=dict)  # step -> global loss (every rank knows it)
    grad_norms: dict[int, float] = field(default_factory=dict)
    val_losses: dict[int, float] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)  # train/samples.jsonl records written by this process
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

    def observe(self, step: int, record: dict) -> None:
        self.losses[step] = record["loss"]
        self.grad_norms[step] = record["grad_norm"]
        if "event" in record:
            self.events.append({"step": step, "event": record["event"]})


@dataclass
class Progress:
    """Where training stands: completed steps, the global sample index (the whole data state, Contract 4), real
    tokens seen, and the guards' counters. A checkpoint's ``train.progress`` holds these six, in this order."""

    step: int = 0
    samples: int = 0
    tokens_seen: int = 0
    skipped_bad_steps: int = 0
    skipped_overflow_steps: int = 0
    rollbacks: int = 0

    def tensor(self) -> torch.Tensor:
        return torch.tensor(astuple(self), dtype=torch.int64)

    def load(self, tensor: torch.Tensor, keep_data_position: bool) -> None:
        """The step always; the rest only when the data position comes back too (not for a rollback or
        ``train.init_from``, where the data keeps moving forward or starts at 0)."""
        values = [int(v) for v in tensor]
        self.step = values[0]
        if not keep_data_position:
            _, self.samples, self.tokens_seen, self.skipped_bad_steps, self.skipped_overflow_steps, \
                self.rollbacks = values

    def counters(self) -> dict[str, int]:
        """For the metrics record."""
        return {"tokens_seen": self.tokens_seen, "samples": self.samples, "skipped_bad_steps": self.skipped_bad_steps,
                "skipped_overflow_steps": self.skipped_overflow_steps, "rollbacks": self.rollbacks}


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
        # Plain logits: F.cross_entropy(sum); vocabulary-sharded logits (tensor parallel): vocabulary-parallel.
        total, reported = cross_entropy_sum(logits, labels, IGNORE_INDEX)
        self.sums.append(reported)
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
        raise TrainConfigError(f"train.model.vocab_size ({vocab}) < the shards' vocab_size ({train_source.vocab_size})")
    seq_len = model.max_seq_len or train_source.seq_len
    if seq_len < train_source.seq_len:
        raise TrainConfigError(f"train.model.max_seq_len ({seq_len}) < the shards' seq_len ({train_source.seq_len})")
    return cfg.model_copy(update={"model": model.model_copy(update={"vocab_size": vocab, "max_seq_len": seq_len})})


class LoopState:
    """What a checkpoint holds of the loop besides model and optimizer (``train.*``): progress, the LR schedule's
    position (a function of the step), the fp16 loss scale and the guard's statistics."""

    def __init__(self, progress: Progress, scaler: DynamicLossScaler, guard: StepGuard):
        self.progress, self.scaler, self.guard = progress, scaler, guard

    @property
    def healthy(self) -> bool:
        return self.guard.consecutive_bad == 0

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"progress": self.progress.tensor(),
                "lr_schedule": torch.tensor([self.progress.step], dtype=torch.int64),
                "loss_scale": self.scaler.state(), "guard": self.guard.state()}

    def load(self, tensors: dict[str, torch.Tensor], keep_data_position: bool = False) -> None:
        self.progress.load(tensors["progress"], keep_data_position)
        self.scaler.load(tensors["loss_scale"])
        self.guard.load(tensors["guard"])


def expected_tokenizer_sha256(paths: RunPaths) -> str | None:
    """The sha256 the shards must name: that of the run's tokenizer.json, when the run has one."""
    return sha256_file(paths.tokenizer_json) if paths.tokenizer_json.is_file() else None


def run_identity(cfg: TrainConfig, paths: RunPaths, world_size: int | None = None) -> RunIdentity:
    """What this run's checkpoints record and a resume must match (``cfg``: with the model config resolved);
    ``world_size``: the processes that save (recorded, not matched: a resume may use another world size)."""
    return RunIdentity(model=cfg.model.model_dump(mode="json"), shards=shards_identity(paths.shards),
                       train_steps=cfg.steps, world_size=world_size, init_from=cfg.init_from)


class Trainer:
    def __init__(self, cfg: TrainConfig, paths: RunPaths, *, hooks: TrainHooks | None = None,
                 shards_verified: bool = False, clock: Clock | None = None, plan: StartPlan | None = None):
        """``shards_verified``: the launcher has already checked the shards as ``train.verify_shards`` asks (once
        per run, not once per rank); only the reader's own checks run here. ``plan``: the launcher's start plan
        (``checkpoint.start.plan_start``); without one, rank 0 makes it. ``clock``: what the schedule windows
        are judged by (default: the system's)."""
        self.paths = paths
        self.plan = plan
        self.hooks = hooks or TrainHooks()
        self.runtime = runtime = devices.init_runtime(cfg.device, cfg.collective_timeout_s, cfg.connect_timeout_s)
        cfg = cfg.for_world_size(runtime.world_size)  # mesh.dp auto: the processes of this (re)start
        torch.manual_seed(cfg.seed)

        tokenizer_sha256 = expected_tokenizer_sha256(paths)
        verify = "manifest" if shards_verified else cfg.verify_shards
        self.train_source = open_split(paths.shards, "train", tokenizer_sha256, verify=verify)
        if cfg.verify_shards == "manifest" and not shards_verified:
            self._say("shards: sizes and row counts checked against the manifest, checksums not verified "
                      "(train.verify_shards: manifest)")
        self.cfg = cfg = resolve_model_config(cfg, self.train_source)
        if cfg.mesh.cp > 1 and self.train_source.seq_len % (2 * cfg.mesh.cp):
            raise TrainConfigError(f"train.mesh.cp = {cfg.mesh.cp}: the shards' seq_len ({self.train_source.seq_len}) "
                                   f"must be divisible by 2 × mesh.cp (each row is cut into 2·cp chunks)")
        self.identity = run_identity(cfg, paths, world_size=runtime.world_size)
        self.mesh = build_mesh(cfg, runtime)
        self.dp_group = self.mesh["dp"].get_group() if self.mesh is not None else None
        self.loss_fn = TokenSumLoss()
        self.model = build_model(cfg, runtime, self.mesh, self.loss_fn)
        self.optimizers = build_optimizers(self.model, cfg.optimizer)
        self.distiller = self._distiller()
        self.scaler = DynamicLossScaler(cfg.precision.loss_scale, enabled=cfg.precision.dtype == "fp16")
        self.guard = StepGuard(cfg.guards)
        self.context = compute_context(cfg.precision, runtime.device, self.model.uses_fsdp)
        self.progress = Progress()
        self.result = TrainResult(final_step=0)

        # The loop's components.
        say = self._say
        self.monitor = TrainingMonitor(cfg.monitoring, run=paths.name, rank=runtime.rank)
        self.metrics = StepMetrics(cfg, paths, runtime, self.monitor, say)
        self.validator = Validator(cfg, paths, runtime, model=self.model, loss_fn=self.loss_fn, context=self.context,
                                   dp_group=self.dp_group, tokenizer_sha256=tokenizer_sha256, say=say, verify=verify)
        self.sampler = Sampler(cfg, paths, runtime, model=self.model, say=say)
        self.checkpoints = CheckpointManager(paths, cfg.checkpoint, runtime, parts=self.model.parts,
                                             optimizers=self.optimizers,
                                             state=LoopState(self.progress, self.scaler, self.guard),
                                             monitor=self.monitor, events=self.result.events, say=say,
                                             identity=self.identity)
        self.alerts = AlertCheck(cfg.alerts, paths, is_main=runtime.is_main, monitor=self.monitor,
                                 agree=self._most_severe_on_any_rank,
                                 checkpoint=lambda: self.checkpoints.save_now(self.progress.step), say=say)
        self.recovery = RecoveryTracker(paths, is_main=runtime.is_main, say=say)
        self.data_order = DataOrderLog(paths, seed=cfg.seed, global_batch_size=cfg.batch.global_batch_size,
                                       micro_batch_size=cfg.batch.micro_batch_size, dp=cfg.mesh.dp,
                                       train_rows=len(self.train_source),
                                       shards_manifest_sha256=(self.identity.shards or {}).get("manifest_sha256"),
                                       is_main=runtime.is_main)
        self.schedule = ScheduleCheck(cfg.schedule, paths, clock=clock or SystemClock(),
                                      agree=self._most_severe_on_any_rank,
                                      checkpoint=lambda: self.checkpoints.save_now(self.progress.step),
                                      events=self.result.events, say=say, is_main=runtime.is_main)

    # -- the loop -----------------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        cfg, progress, result = self.cfg, self.progress, self.result
        cause = self._restore()
        self.data_order.stretch(cause, progress.step, progress.samples, world_size=self.runtime.world_size)
        loader = self._loader()
        self._describe()
        self.monitor.start()
        self.metrics.start(loader, first_step=progress.step)
        try:
            self.schedule.before_start(progress.step)
            while progress.step < cfg.steps:
                step = progress.step
                batch = next(loader)
                self.hooks.batch(step, batch)
                record = self.train_step(batch)
                self.metrics.measure(step, record, progress.counters())
                result.observe(step, record)
                self._roll_back_if_persistent(step, record)
                if self.validator.due(progress.step):
                    record.update(self.validator.run())
                    result.val_losses[progress.step] = record["val_loss"]
                    self.checkpoints.note_val_loss(progress.step, record["val_loss"])
                if self.sampler.due(progress.step):
                    result.samples.extend(self.sampler.run(progress.step))
                self.recovery.observe(step)
                self.metrics.log(step, record, position=progress.step)
                self.hooks.step_done(step, record)
                self.checkpoints.maybe_save(progress.step, last=progress.step == cfg.steps)
                if self.alerts.check(step, record):
                    result.stopped_by_alert = True
                    break
                if self.hooks.should_stop(progress.step):
                    break
                if progress.step < cfg.steps:
                    self.schedule.check(progress.step)
            self.data_order.end(progress.step, progress.samples)
        finally:
            for component in (self.monitor, self.alerts, loader, self.checkpoints, self.metrics, self.schedule):
                component.close()
        return self._finish(loader)

    # -- around the loop ----------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if self.runtime.is_main:
            print(f"corpusmill train: {message}", flush=True)

    def _most_severe_on_any_rank(self, code: int) -> int:
        return int(self.runtime.all_reduce(torch.tensor([code]), op=dist.ReduceOp.MAX)[0])

    def _restore(self) -> str:
        """Start as the plan says (``checkpoint.start``): the launcher's, or, without one (``train`` called
        directly, ranks restarted by torchrun), rank 0's made here and handed to every rank. Returns how the data
        position was reached (for ``train/data_order.jsonl``): resume, init_from or start."""
        progress = self.progress
        plan = self._start_plan()
        if plan.kind == RESUME:
            resumed = Path(plan.path)
            self.checkpoints.load(resumed)
            self.result.resumed_from = resumed.name
            self._say(f"resumed from {resumed.name}: step {progress.step}, sample {progress.samples}")
            self.recovery.resumed(resumed.name, progress.step, self.checkpoints.provenance(resumed), self.cfg.steps)
            return "resume"
        elif plan.kind == INIT and plan.weights_only:  # hf:PATH or an import-hf folder: weights only
            described = hf.load_initial_weights(
                plan.path, self.model.parts, self.cfg.model,
                shard_vocab_size=self.train_source.vocab_size,
                shard_tokenizer_sha256=self.train_source.tokenizer_sha256, say=self._say)
            self.result.initialized_from = described
            self._say(f"initialized the weights from {described}: fresh optimizer, step 0")
            return "init_from"
        elif plan.kind == INIT:
            path = Path(plan.path)
            source = RunPaths(self.cfg.init_from)
            self.checkpoints.load(path, keep_data_position=True)
            self.result.initialized_from = f"{source}/{path.name}"
            self._say(f"initialized from {source} {path.name}: step {progress.step}, data from sample 0 of this run")
            return "init_from"
        return "start"

    def _start_plan(self) -> StartPlan:
        restarted = restarted_by_torchrun()  # the launcher's plan predates what the failed attempt saved
        given = None if restarted else self.plan
        runtime = self.runtime
        return agreed_plan(lambda: given or plan_start(self.cfg, self.paths, self.identity, by_ranks=True,
                                                       say=self._say),
                           distributed=runtime.distributed, is_main=runtime.is_main, device=runtime.device)

    def _distiller(self):
        """``train.distill``: the frozen teacher, replicated on every rank; None without distillation."""
        if self.cfg.distill is None:
            return None
        teacher = load_teacher(self.cfg.distill, self.cfg.model, shard_tokenizer_sha256=self.train_source.tokenizer_sha256,
                               seq_len=self.train_source.seq_len, device=self.runtime.device, say=self._say)
        self._say(f"distilling from {self.cfg.distill.teacher} ({teacher.cfg.n_layers} layers, dim {teacher.cfg.dim}): "
                  f"alpha {self.cfg.distill.alpha}, temperature {self.cfg.distill.temperature}")
        return Distiller(self.cfg.distill, teacher)

    def _loader(self) -> StepBatches:
        cfg = self.cfg
        return StepBatches(self.train_source, seed=cfg.seed, start_sample=self.progress.samples,
                           global_batch_size=cfg.batch.global_batch_size, micro_batch_size=cfg.batch.micro_batch_size,
                           dp_rank=self.model.dp_rank, dp_size=cfg.mesh.dp, prefetch=cfg.batch.prefetch_batches)

    def _describe(self) -> None:
        cfg, metrics = self.cfg, self.metrics
        context = f" cp={cfg.mesh.cp} ({cfg.mesh.cp_mode})" if cfg.mesh.cp > 1 else ""
        self._say(f"{metrics.flops.non_embedding_params / 1e6:.2f}M non-embedding parameters, mesh pp={cfg.mesh.pp} "
                  f"dp={cfg.mesh.dp} tp={cfg.mesh.tp}{context}, {cfg.precision.dtype}, {cfg.grad_accum_steps} "
                  f"accumulation step(s), "
                  f"peak {metrics.peak_flops / 1e12:.3g} TFLOP/s per device ({metrics.peak_source})")

    def _finish(self, loader: StepBatches) -> TrainResult:
        result, progress = self.result, self.progress
        result.final_step = progress.step
        result.skipped_bad_steps, result.skipped_overflow_steps = progress.skipped_bad_steps, progress.skipped_overflow_steps
        result.rollbacks = progress.rollbacks
        result.loss_scale = self.scaler.scale
        result.data_wait_seconds = loader.wait_seconds
        result.train_seconds = self.metrics.elapsed()
        return result

    def _roll_back_if_persistent(self, bad_step: int, record: dict) -> None:
        """After ``guards.max_consecutive_bad`` bad steps in a row: back to the newest checkpoint (weights,
        optimizer, schedule position and scaler; the data keeps moving forward, so the batches that caused the
        trouble are not replayed), or stop when that is not possible or allowed."""
        cfg, progress = self.cfg.guards, self.progress
        if self.guard.consecutive_bad < cfg.max_consecutive_bad:
            return
        reason = record.get("event", "bad step")
        path = self.checkpoints.rollback_target()
        if cfg.on_persistent == "stop" or path is None or progress.rollbacks >= cfg.max_rollbacks:
            why = ("guards.on_persistent is 'stop'" if cfg.on_persistent == "stop" else
                   "no checkpoint to roll back to" if path is None else
                   f"already rolled back {progress.rollbacks} time(s) (guards.max_rollbacks)")
            raise TrainingStopped(
                f"stopped at step {progress.step}: {cfg.max_consecutive_bad} bad steps in a row (last: {reason}); "
                f"{why}. Lower optimizer.lr, raise optimizer.warmup_steps, or inspect the data around sample "
                f"{progress.samples}.")
        rollbacks = progress.rollbacks + 1
        self.checkpoints.load(path, keep_data_position=True)
        progress.rollbacks = rollbacks
        self.guard.consecutive_bad = 0
        self.result.events.append({"step": bad_step, "event": "rollback", "to": path.name})
        self.data_order.stretch("rollback", progress.step, progress.samples, previous_last_step=bad_step,
                                world_size=self.runtime.world_size)
        self._say(f"{cfg.max_consecutive_bad} bad steps in a row (last: {reason}): rolled back to {path.name}")
        record["event"] = "rollback"

    # -- one step -----------------------------------------------------------------------------------------
    def _forward_backward(self, batch: StepBatch, loss_factor: float) -> torch.Tensor:
        """Forward and backward over this rank's micro-batches; returns its summed token loss (unscaled)."""
        self.loss_fn.factor = loss_factor
        self.loss_fn.sums = []
        pipeline_losses: list[torch.Tensor] = []
        model = self.model
        last = len(batch.micro_batches) - 1
        for i, mb in enumerate(batch.micro_batches):
            mb = model.local_batch(mb.to(self.runtime.device))
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
                    loss = self.loss_fn(logits, mb.labels)
                    if self.distiller is not None:
                        loss = self.distiller.loss(loss, self.loss_fn.sums[-1], logits, mb, loss_factor)
                loss.backward()
        if self.distiller is not None:
            return self.distiller.step_sums(self.runtime.device)
        if model.schedule is not None:
            # The schedule reports each micro-batch's loss as returned by loss_fn (× factor); only the last
            # stage has them, and under tensor parallelism every tp rank of it: tp rank 0 alone counts them.
            if not pipeline_losses or not model.reports_loss:
                return torch.zeros((), device=self.runtime.device)
            return torch.stack([l.detach().float() for l in pipeline_losses]).sum() / loss_factor
        return torch.stack(self.loss_fn.sums).sum()

    def train_step(self, batch: StepBatch) -> dict:
        cfg = self.cfg
        progress = self.progress
        lr = learning_rate(progress.step, cfg.optimizer, cfg.steps)
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr
        # Global counts, before the forward pass: they normalize the loss of every micro-batch.
        local = torch.tensor([batch.target_tokens, sum(b.real_tokens for b in batch.micro_batches),
                              sum(b.sum_squared_segment_lengths for b in batch.micro_batches)],
                             dtype=torch.int64, device=self.runtime.device)
        target_tokens, real_tokens, sum_sq = (int(v) for v in self.runtime.all_reduce(local, self.dp_group))
        # FSDP averages gradients over its dp (× cp) ranks; multiplying by that count turns the average into the
        # global sum (the cp ranks of a row each hold a part of its token loss).
        loss_factor = self.scaler.scale * cfg.mesh.dp * cfg.mesh.cp / max(1, target_tokens)
        if self.distiller is not None:
            self.distiller.start_step()
        loss_sum = self._forward_backward(batch, loss_factor)
        # With distillation: [cross-entropy, KL, combined] sums; the combined loss is the step's loss.
        sums = [float(v) / max(1, target_tokens) for v in self.runtime.all_reduce(loss_sum.float().reshape(-1))]
        loss = sums[-1]
        parts = {"ce_loss": sums[0], "kl_loss": sums[1]} if self.distiller is not None else {}
        if self.hooks.after_backward is not None:
            self.hooks.after_backward(progress.step, self.model)

        finite = self.scaler.unscale_and_check(self.model, self.runtime.distributed)
        grad_norm = float(global_grad_norm(self.model, self.runtime.distributed)) if finite else float("nan")
        verdict = self.guard.verdict(loss, grad_norm if finite or not self.scaler.enabled else 0.0)
        record = {"loss": loss, **parts, "grad_norm": grad_norm, "lr": lr, "loss_scale": self.scaler.scale,
                  **moe_step_stats(self.model.parts, cfg.model, self.runtime.device, self.runtime.distributed)}
        if verdict is None and not finite:  # fp16 overflow: not the model's fault, back off the scale
            self.scaler.update(False)
            progress.skipped_overflow_steps += 1
            record["event"] = "overflow skipped"
        elif verdict is not None:
            self.guard.record(None)
            progress.skipped_bad_steps += 1
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
        progress.step += 1
        progress.samples += cfg.batch.global_batch_size
        progress.tokens_seen += real_tokens
        record.update(real_tokens=real_tokens, sum_squared_segment_lengths=sum_sq)
        return record


def train(cfg: TrainConfig, paths: RunPaths, *, hooks: TrainHooks | None = None,
          shards_verified: bool = False, clock: Clock | None = None, plan: StartPlan | None = None) -> TrainResult:
    """Train in this process (one rank of a torchrun job, or alone) on ``paths.shards``, writing under
    ``paths.train``. The process group is left initialized. ``clock``: for the schedule windows (tests)."""
    return Trainer(cfg, paths, hooks=hooks, shards_verified=shards_verified, clock=clock, plan=plan).fit()

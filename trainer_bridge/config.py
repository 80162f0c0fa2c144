"""Configuration of the trainer: one pydantic model (``TrainConfig``), the ``train`` section of the run config.

Every sub-config forbids unknown keys, so a typo fails loudly with the field's name. Cross-field rules (batch
divisibility, mesh vs. pipeline schedule, heads vs. dimensions) are checked here, before any process starts.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer_bridge.observe.alerts import AlertsConfig
from trainer_bridge.observe.monitoring import MonitoringConfig
from trainer_bridge.loop.schedule import ScheduleConfig
from trainer_bridge.outcomes import TrainConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    """A Llama-style decoder. ``vocab_size`` and ``max_seq_len`` default to the shards' manifest."""

    vocab_size: int | None = Field(None, gt=0, description="None: the shards' vocab_size")
    dim: int = Field(256, gt=0, description="model width (hidden size)")
    n_layers: int = Field(4, gt=0, description="transformer blocks")
    n_heads: int = Field(4, gt=0, description="attention heads (divides dim; the head dim must be even)")
    n_kv_heads: int | None = Field(None, gt=0, description="grouped-query attention; None: = n_heads")
    ffn_hidden: int | None = Field(None, gt=0, description="None: 8/3·dim rounded up to multiple_of")
    multiple_of: int = Field(64, gt=0, description="the SwiGLU width is rounded up to a multiple of this")
    norm_eps: float = Field(1e-5, gt=0, description="RMSNorm epsilon")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base")
    rope_scaling: Literal["none", "linear", "llama3"] = Field("none",
                                                              description="long-context RoPE scaling: none, linear or "
                                                                          "llama3")
    rope_scaling_factor: float = Field(1.0, ge=1.0, description="RoPE scaling factor (1.0: none)")
    rope_original_max_len: int = Field(8192, gt=0, description="llama3 scaling: the pre-training context")
    max_seq_len: int | None = Field(None, gt=0, description="None: the shards' seq_len")
    tie_embeddings: bool = Field(False, description="share the input embedding and the output projection")
    init_std: float = Field(0.02, gt=0, description="standard deviation of the initial weights")
    # Mixture of Experts (trainer_bridge/model/moe.py); n_experts 0: a dense model.
    n_experts: int = Field(0, ge=0, description="experts per MoE layer; 0: dense feed-forward everywhere")
    top_k: int = Field(2, ge=1, description="experts per token")
    moe_every: int = Field(1, ge=1, description="layer i is an MoE layer iff i % moe_every == moe_every - 1")
    moe_hidden: int | None = Field(None, gt=0, description="expert hidden size; None: the dense FFN's")
    capacity_factor: float | None = Field(None, gt=0, description="per expert at most ceil(cf·tokens·top_k/"
                                                                  "n_experts) assignments per call; None: no drop")
    load_balance_coef: float = Field(0.01, ge=0, description="MoE load-balancing auxiliary loss weight")
    router_z_loss_coef: float = Field(0.001, ge=0, description="MoE router z-loss weight")
    moe_shared_expert: bool = Field(False, description="MoE: add one expert every token goes through")

    @model_validator(mode="after")
    def _heads(self) -> "ModelConfig":
        if self.n_experts and self.top_k > self.n_experts:
            raise ValueError(f"model.top_k ({self.top_k}) must be <= model.n_experts ({self.n_experts})")
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim ({self.dim}) must be divisible by model.n_heads ({self.n_heads})")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("model.dim / model.n_heads (the head dimension) must be even for RoPE")
        kv = self.n_kv_heads or self.n_heads
        if self.n_heads % kv:
            raise ValueError(f"model.n_heads ({self.n_heads}) must be divisible by model.n_kv_heads ({kv})")
        return self


class MeshConfig(_Strict):
    """Device mesh ``pp × dp × tp``: pipeline stages × data-parallel (FSDP2) ranks × tensor-parallel ranks
    (tensor + sequence parallel, innermost: neighbouring ranks); pp·dp·tp processes in all. Or, with context
    parallelism, ``dp × cp`` (cp innermost; FSDP2 over the flattened dp·cp ranks); dp·cp processes."""

    pp: int = Field(1, ge=1, description="pipeline stages")
    dp: int | Literal["auto"] = Field(1, description="data-parallel (FSDP2) ranks, or 'auto': the started "
                                                     "processes / (pp·tp), resolved at every (re)start: what an "
                                                     "elastic job (--nnodes MIN:MAX) needs; the global batch, and "
                                                     "with it the data order, does not depend on it")
    tp: int = Field(1, ge=1, description="tensor + sequence parallel degree (divides heads, kv heads, FFN, vocab)")
    ep: int = Field(1, ge=1, description="expert parallel degree; reuses the dp ranks: 1 or mesh.dp")
    cp: int = Field(1, ge=1, description="context parallel degree: each row's sequence split across cp ranks "
                                         "(head-tail causal balance; seq_len divisible by 2·cp); dp × cp mesh")
    cp_mode: Literal["ring", "allgather"] = Field("ring", description="context parallel attention: ring passes "
                                                                      "K/V blocks between neighbours; allgather "
                                                                      "gathers every rank's K/V (more memory)")

    @field_validator("dp")
    @classmethod
    def _positive(cls, value):
        if value != "auto" and value < 1:
            raise ValueError("mesh.dp must be >= 1 or 'auto'")
        return value

    @property
    def auto_dp(self) -> bool:
        return self.dp == "auto"

    @property
    def world_size(self) -> int:
        """pp·dp·tp·cp processes; with dp 'auto', those of one data-parallel replica (pp·tp·cp)."""
        return self.pp * (1 if self.auto_dp else self.dp) * self.tp * self.cp


class PipelineConfig(_Strict):
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = Field("1f1b",
                                                                   description="pipeline schedule: gpipe, 1f1b or "
                                                                               "interleaved_1f1b")
    microbatches: int = Field(2, ge=1, description="pipeline micro-batches per micro_batch_size rows")
    stages_per_rank: int = Field(1, ge=1, description="virtual stages per rank (interleaved_1f1b: >= 2)")


class LossScaleConfig(_Strict):
    init_scale: float = Field(2.0**16, gt=0, description="initial loss scale")
    growth_factor: float = Field(2.0, gt=1, description="scale multiplier after growth_interval good steps")
    backoff_factor: float = Field(0.5, gt=0, lt=1, description="scale multiplier after an overflow")
    growth_interval: int = Field(1000, ge=1, description="overflow-free steps before the scale grows")


class PrecisionConfig(_Strict):
    """fp32; bf16 (bf16 compute, fp32 reductions and master weights); fp16 with dynamic loss scaling."""

    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="compute precision: fp32, bf16 or fp16 (fp32 "
                                                                       "master weights)")
    loss_scale: LossScaleConfig = Field(LossScaleConfig(), description="fp16: dynamic loss scaling")


class ActivationCheckpointConfig(_Strict):
    mode: Literal["none", "every", "every_n"] = Field("none", description="recompute activations: none, every block, "
                                                                          "or every_n-th block")
    every_n: int = Field(2, ge=1, description="mode every_n: recompute every n-th block")


class OptimizerConfig(_Strict):
    """AdamW; warmup then cosine decay, or warmup-stable-decay (WSD)."""

    lr: float = Field(3e-4, gt=0, description="peak AdamW learning rate")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="final learning rate as a share of lr")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW betas")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon")
    weight_decay: float = Field(0.1, ge=0, description="AdamW weight decay (none on norm gains)")
    schedule: Literal["cosine", "wsd"] = Field("cosine", description="learning-rate schedule after warmup: cosine or "
                                                                     "wsd")
    warmup_steps: int = Field(100, ge=0, description="linear warmup steps")
    decay_fraction: float = Field(0.2, gt=0, le=1, description="wsd: final fraction of steps spent decaying")
    clip_grad_norm: float | None = Field(1.0, gt=0, description="global norm across FSDP and PP ranks; None: off")


class BatchConfig(_Strict):
    """Rows per optimizer step (all ranks together) and rows per forward pass on one rank.

    Gradient accumulation = global_batch_size / (micro_batch_size · dp): so the same global batch, and the
    same samples, are used whatever the number of data-parallel ranks.
    """

    global_batch_size: int = Field(8, ge=1, description="rows per optimizer step, all ranks together")
    micro_batch_size: int = Field(2, ge=1, description="rows per forward pass on one rank")
    prefetch_batches: int = Field(2, ge=1, description="optimizer-step batches loaded ahead in the background")


class CheckpointTier(_Strict):
    """One storage tier. The first is the fast tier: the run's own ``train/checkpoints`` (local; ``path`` stays
    unset), where every save lands. Each further tier is durable: a local directory or an fsspec URI
    (``s3://…``, a mounted volume), to which a background thread copies complete checkpoints, verified by
    checksum after the copy; the run's checkpoints go under ``<path>/<run name>/checkpoints``."""

    path: str | None = Field(None, min_length=1, description="durable tiers: a directory or fsspec URI")
    keep_last: int = Field(2, ge=1, description="sound checkpoints kept on this tier")
    every: int = Field(1, ge=1, description="durable tiers: copy the checkpoints whose step is a multiple of "
                                            "every × interval, and the final one (and one saved before a pause); "
                                            "an uploader behind by more checkpoints copies only the newest due "
                                            "(unless coalesce is false)")
    coalesce: bool = Field(True, description="durable tiers: when the uploader has fallen behind, copy only the "
                                             "newest checkpoint due (false: every due checkpoint, in order, however "
                                             "far behind; for a tier that must hold each one)")

    @field_validator("path")
    @classmethod
    def _known_protocol(cls, value: str | None) -> str | None:
        """A URI's protocol must have an fsspec implementation here (fsspec itself comes with torch)."""
        if value is not None and "://" in value:
            import fsspec

            protocol = value.split("://", 1)[0]
            try:
                fsspec.get_filesystem_class(protocol)
            except (ValueError, ImportError) as error:
                raise ValueError(f"{value}: no fsspec file system for {protocol!r} here ({error})") from None
        return value


class CheckpointConfig(_Strict):
    enabled: bool = Field(True, description="save checkpoints (false: train from step 0, refused beside checkpoints)")
    interval: int = Field(100, ge=1, description="save every N steps (and at the end)")
    keep_last: int = Field(3, ge=1, description="without tiers: sound checkpoints kept; with tiers: tiers[0]'s")
    async_save: bool = Field(False, description="stage to CPU and write in the background")
    resume: bool = Field(True, description="resume from the newest sound checkpoint (false: refused while any exist)")
    tiers: list[CheckpointTier] = Field(default_factory=list, description="[] : one tier, train/checkpoints; else "
                                                                          "the fast tier first, then durable ones")

    @model_validator(mode="after")
    def _tiers(self) -> "CheckpointConfig":
        if self.tiers and self.tiers[0].path is not None:
            raise ValueError("checkpoint.tiers.0.path: the fast tier is the run's own train/checkpoints; leave path "
                             "unset (put the runs directory on the fast disk)")
        for index, tier in enumerate(self.tiers[1:], 1):
            if tier.path is None:
                raise ValueError(f"checkpoint.tiers.{index}.path: a durable tier needs a directory or fsspec URI")
        return self

    @property
    def fast_keep_last(self) -> int:
        return self.tiers[0].keep_last if self.tiers else self.keep_last

    @property
    def durable_tiers(self) -> list[CheckpointTier]:
        return self.tiers[1:]


class EvalConfig(_Strict):
    interval: int = Field(100, ge=0, description="validation every N steps; 0: never")
    max_rows: int = Field(64, ge=1, description="rows of the 'val' split used")
    domain_key: str | None = Field(None, min_length=1,
                                   description="per-domain validation loss: a document's domain is this field of "
                                               "its input record (docs/ 'meta'), else its 'source' (the input "
                                               "file); None: the 'source' column")
    max_domains: int = Field(12, ge=0, description="domains with the most validation tokens get a curve each; the "
                                                   "rest are pooled as '(other)'; 0: no per-domain loss")
    sample_interval: int | None = Field(None, ge=0, description="greedy samples from sample_prompts every N steps "
                                                                "(train/samples.jsonl); None: at every "
                                                                "validation; 0: never")
    sample_prompts: list[str] = Field(["The", "In the beginning"], max_length=16,
                                      description="prompts of the greedy samples (at most 16)")
    sample_tokens: int = Field(24, ge=1, description="new tokens per sample (greedy)")


class DistillConfig(_Strict):
    """Knowledge distillation (trainer_bridge/loop/distill.py): loss = alpha · T² · KL(teacher ‖ student at temperature
    T) + (1 − alpha) · cross-entropy, both summed over target tokens and normalized like the training loss."""

    teacher: str = Field(..., min_length=1, description="a run directory (its newest sound checkpoint) or "
                                                        "'hf:PATH' (a local Hugging Face Llama folder); same "
                                                        "tokenizer and vocabulary as the student")
    alpha: float = Field(0.5, ge=0, le=1, description="weight of the KL term; 1 - alpha weighs cross-entropy")
    temperature: float = Field(1.0, gt=0, description="softens both distributions; the KL term is scaled by T²")


class GuardConfig(_Strict):
    """Skip a step whose loss or gradient is NaN/Inf or whose loss spikes; act after K bad steps in a row."""

    enabled: bool = Field(True, description="skip bad steps (NaN/Inf, loss spikes)")
    spike_factor: float = Field(3.0, gt=1, description="bad if loss > factor · running mean of good losses")
    spike_warmup_steps: int = Field(20, ge=0, description="good steps seen before spikes are judged")
    ema_beta: float = Field(0.9, gt=0, lt=1, description="smoothing of the running mean of good losses")
    max_consecutive_bad: int = Field(3, ge=1, description="bad steps in a row before on_persistent acts")
    on_persistent: Literal["rollback", "stop"] = Field("rollback", description="after max_consecutive_bad: rollback "
                                                                               "to latest, or stop")
    max_rollbacks: int = Field(2, ge=0, description="rollbacks allowed before the run stops")


class MetricsConfig(_Strict):
    log_interval: int = Field(1, ge=1, description="write metrics.jsonl every N steps")
    tensorboard: bool = Field(True, description="also write tensorboard/ (when the package is installed)")
    peak_flops: float | None = Field(None, gt=0, description="per device; None: table (CUDA) or measured (CPU)")


class TrainConfig(_Strict):
    model: ModelConfig = Field(ModelConfig(), description="the Llama-style decoder")
    mesh: MeshConfig = Field(MeshConfig(), description="the device mesh: pp x dp x tp (or dp x cp)")
    pipeline: PipelineConfig = Field(PipelineConfig(), description="pipeline-parallel schedule")
    precision: PrecisionConfig = Field(PrecisionConfig(), description="compute precision and loss scaling")
    activation_checkpointing: ActivationCheckpointConfig = Field(ActivationCheckpointConfig(),
                                                                 description="activation recomputation")
    optimizer: OptimizerConfig = Field(OptimizerConfig(), description="AdamW and the learning-rate schedule")
    batch: BatchConfig = Field(BatchConfig(), description="global and micro batch sizes")
    checkpoint: CheckpointConfig = Field(CheckpointConfig(), description="saving, retention, resume and tiers")
    eval: EvalConfig = Field(EvalConfig(), description="validation loss, per-domain loss and samples")
    guards: GuardConfig = Field(GuardConfig(), description="bad-step detection, rollback and stop")
    metrics: MetricsConfig = Field(MetricsConfig(), description="metrics.jsonl, tensorboard and MFU")
    monitoring: MonitoringConfig = Field(MonitoringConfig(), description="Prometheus endpoint and hardware sampling")
    alerts: AlertsConfig = Field(AlertsConfig(), description="alert rules on the training record")
    distill: DistillConfig | None = Field(None, description="knowledge distillation from a teacher; null: off")
    schedule: ScheduleConfig = Field(ScheduleConfig(), description="time windows in which training may run")
    device: str = Field("auto", pattern=r"^[a-z][a-z0-9_]*$",
                        description="auto (the available accelerator, else cpu), cpu, or an accelerator type: "
                                    "cuda (also ROCm), xpu, mps, npu, ... (trainer_bridge/parallel/device.py)")
    attention: Literal["auto", "sdpa", "flex"] = Field("auto", description="auto: flex on CUDA, sdpa elsewhere")
    compile: bool = Field(False, description="torch.compile the model")
    verify_shards: Literal["full", "manifest", "off"] = Field(
        "full", description="checks of the shards when a split is opened, once per run: 'full' hashes every shard "
                            "against the manifest's sha256 and checks its rows (a flipped byte stops the run, the "
                            "shard named); 'manifest' only compares each file's size, schema and row count with the "
                            "manifest (nothing hashed; says so once); 'off': the same without the note (the reader "
                            "always makes those checks)")
    seed: int = Field(1234, description="seed of initialization and data order")
    init_from: str | None = Field(None, description="a run directory whose newest sound checkpoint initializes the "
                                                    "model, optimizer and step when this run has none of its own "
                                                    "(continue training after a refresh; the data position starts "
                                                    "at 0 on this run's shards); or weights only (fresh optimizer, "
                                                    "step 0): 'hf:PATH' (a local Hugging Face Llama folder) or a "
                                                    "'corpusmill import-hf' output")
    collective_timeout_s: float = Field(600.0, gt=0, description="a collective waiting longer than this fails the "
                                                                 "rank, so torchrun can restart the group")
    connect_timeout_s: float = Field(300.0, gt=0, description="how long a starting (or restarted) rank waits for "
                                                              "every rank of its group to arrive before the process "
                                                              "group is formed; then it fails, and torchrun restarts")
    steps: int = Field(1000, ge=1, description="optimizer steps to train in all (numbered from 0)")

    @property
    def grad_accum_steps(self) -> int:
        if self.mesh.auto_dp:
            raise ValueError("mesh.dp is 'auto': resolve it first (TrainConfig.for_world_size)")
        return self.batch.global_batch_size // (self.batch.micro_batch_size * self.mesh.dp)

    def for_world_size(self, world_size: int) -> "TrainConfig":
        """This config with ``mesh.dp: auto`` resolved for ``world_size`` processes (dp = world / (pp·tp·cp)), all
        cross-field rules checked again; a config with a fixed dp comes back as it is. Raises
        ``outcomes.TrainConfigError`` when the world size does not fit."""
        if not self.mesh.auto_dp:
            return self
        replica = self.mesh.pp * self.mesh.tp * self.mesh.cp
        if world_size % replica:
            raise TrainConfigError(f"train.mesh.dp auto: {world_size} processes are not a multiple of mesh.pp × "
                                   f"mesh.tp × mesh.cp ({self.mesh.pp} × {self.mesh.tp} × {self.mesh.cp})")
        data = self.model_dump(mode="json")
        data["mesh"]["dp"] = world_size // replica
        if self.mesh.ep > 1:
            data["mesh"]["ep"] = data["mesh"]["dp"]  # ep reuses the dp ranks
        try:
            return TrainConfig.model_validate(data)
        except ValueError as error:
            first = error.errors()[0] if hasattr(error, "errors") else {"msg": str(error)}
            raise TrainConfigError(f"train.mesh.dp auto with {world_size} processes (dp {data['mesh']['dp']}): "
                                   f"{first['msg'].removeprefix('Value error, ')}") from None

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if self.mesh.auto_dp:
            return self  # checked when resolved (for_world_size), at every start
        rows_per_pass = self.batch.micro_batch_size * self.mesh.dp
        if self.batch.global_batch_size % rows_per_pass:
            raise ValueError(
                f"batch.global_batch_size ({self.batch.global_batch_size}) must be a multiple of "
                f"batch.micro_batch_size × mesh.dp ({self.batch.micro_batch_size} × {self.mesh.dp})"
            )
        if self.mesh.ep > 1:
            if self.mesh.ep != self.mesh.dp:
                raise ValueError(f"mesh.ep ({self.mesh.ep}) must be 1 or mesh.dp ({self.mesh.dp}): experts are "
                                 "sharded over the data-parallel ranks")
            if not self.model.n_experts or self.model.n_experts % self.mesh.ep:
                raise ValueError(f"mesh.ep ({self.mesh.ep}) needs model.n_experts > 0 and divisible by it "
                                 f"(got {self.model.n_experts})")
            if self.mesh.tp > 1 or self.mesh.pp > 1:
                raise ValueError("mesh.ep > 1 together with mesh.tp or mesh.pp > 1 is not supported yet")
        if self.mesh.cp > 1:
            others = {name: getattr(self.mesh, name) for name in ("pp", "tp", "ep") if getattr(self.mesh, name) > 1}
            if others:
                named = ", ".join(f"mesh.{k} ({v})" for k, v in others.items())
                raise ValueError(f"mesh.cp > 1 together with {named} is not supported yet (use cp with dp)")
            if self.model.n_experts:
                raise ValueError("mesh.cp > 1 with an MoE model (model.n_experts > 0) is not supported yet")
            if self.distill is not None:
                raise ValueError(f"distill: not supported with mesh.cp ({self.mesh.cp}) > 1")
        if self.distill is not None and (self.mesh.pp > 1 or self.mesh.tp > 1):
            raise ValueError(f"distill: supported with data parallelism (FSDP2) only, not mesh.pp "
                             f"({self.mesh.pp}) or mesh.tp ({self.mesh.tp}) > 1")
        if self.mesh.tp > 1 and self.model.n_experts:
            raise ValueError("mesh.tp > 1 with an MoE model (model.n_experts > 0) is not supported yet")
        if self.mesh.tp > 1:
            tp, kv = self.mesh.tp, self.model.n_kv_heads or self.model.n_heads
            if self.model.n_heads % tp or kv % tp:
                raise ValueError(f"mesh.tp ({tp}) must divide model.n_heads ({self.model.n_heads}) and "
                                 f"model.n_kv_heads ({kv})")
        if self.mesh.pp > 1:
            if self.batch.micro_batch_size % self.pipeline.microbatches:
                raise ValueError(
                    f"batch.micro_batch_size ({self.batch.micro_batch_size}) must be divisible by "
                    f"pipeline.microbatches ({self.pipeline.microbatches})"
                )
            stages = self.mesh.pp * self.pipeline.stages_per_rank
            if self.pipeline.schedule == "interleaved_1f1b" and self.pipeline.stages_per_rank < 2:
                raise ValueError("pipeline.schedule interleaved_1f1b needs pipeline.stages_per_rank >= 2")
            if self.pipeline.schedule != "interleaved_1f1b" and self.pipeline.stages_per_rank != 1:
                raise ValueError(
                    f"pipeline.stages_per_rank > 1 needs pipeline.schedule interleaved_1f1b "
                    f"(got {self.pipeline.schedule!r}; allowed: 'gpipe', '1f1b', 'interleaved_1f1b')"
                )
            if self.model.n_layers < stages:
                raise ValueError(
                    f"model.n_layers ({self.model.n_layers}) must be >= pipeline stages "
                    f"(mesh.pp × pipeline.stages_per_rank = {stages})"
                )
        return self

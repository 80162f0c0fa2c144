"""Knowledge distillation (``train.distill``): a frozen teacher's token distribution added to the loss.

    loss = alpha · T² · KL(p_teacher,T ‖ p_student,T) + (1 − alpha) · CE(student, next token)

where ``p_·,T = softmax(logits / T)``. Both terms are sums over the target tokens (labels that count in the
cross-entropy: inside a document, not padding), normalized like the training loss (1 / global target tokens),
so the gradient does not depend on the split into ranks and micro-batches. The T² factor keeps the KL term's
gradient on the scale of the cross-entropy's when T changes (Hinton et al., 2015).

The teacher is a run directory (its newest sound checkpoint, model-only: DCP tensors through the project's safe
reader) or ``hf:PATH`` (a local Hugging Face Llama folder, safetensors). It must share the student's tokenizer
(same sha256 when both know it) and vocabulary size, and cover the shards' sequence length. Every rank holds the
whole teacher (replicated; the student may be FSDP2-sharded), frozen, in eval mode, run under no_grad.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from runio.files import sha256_file
from runio.layout import RunPaths
from tokenizer.shards import ShardFormatError, manifest_path, read_manifest
from trainer_bridge import hf
from trainer_bridge.checkpoint import run_model
from trainer_bridge.config import DistillConfig, ModelConfig
from trainer_bridge.loop.data import IGNORE_INDEX
from trainer_bridge.model.transformer import Transformer
from trainer_bridge.outcomes import TrainConfigError


def kl_sum(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
           temperature: float) -> torch.Tensor:
    """T² · Σ over target tokens of KL(softmax(teacher / T) ‖ softmax(student / T)), in float32."""
    mask = labels != IGNORE_INDEX
    student = F.log_softmax(student_logits[mask].float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits[mask].float() / temperature, dim=-1)
    return F.kl_div(student, teacher, log_target=True, reduction="sum") * temperature ** 2


class Distiller:
    """The training loop's distillation term: ``loss(...)`` mixes the step's cross-entropy with the KL to the
    teacher; ``ce_sums`` / ``kl_sums`` keep the unscaled sums of the current step, for the metrics."""

    def __init__(self, cfg: DistillConfig, teacher: Transformer):
        self.alpha, self.temperature, self.teacher = cfg.alpha, cfg.temperature, teacher
        self.ce_sums: list[torch.Tensor] = []
        self.kl_sums: list[torch.Tensor] = []

    def start_step(self) -> None:
        self.ce_sums, self.kl_sums = [], []

    def loss(self, ce_scaled: torch.Tensor, ce_sum: torch.Tensor, student_logits: torch.Tensor, batch,
             factor: float) -> torch.Tensor:
        """``ce_scaled``: the cross-entropy sum × ``factor`` (what the loop would backpropagate alone)."""
        with torch.no_grad():
            teacher_logits = self.teacher(batch.input_ids, batch.position_ids, batch.segment_ids)
        kl = kl_sum(student_logits, teacher_logits, batch.labels, self.temperature)
        self.ce_sums.append(ce_sum.detach().float())
        self.kl_sums.append(kl.detach())
        return (1 - self.alpha) * ce_scaled + self.alpha * kl * factor

    def step_sums(self, device) -> torch.Tensor:
        """[ce sum, kl sum, combined sum] of this rank's micro-batches this step."""
        ce = torch.stack(self.ce_sums).sum() if self.ce_sums else torch.zeros((), device=device)
        kl = torch.stack(self.kl_sums).sum() if self.kl_sums else torch.zeros((), device=device)
        return torch.stack([ce, kl, (1 - self.alpha) * ce + self.alpha * kl]).to(device)


def _teacher_tokenizer_sha256(paths: RunPaths, say: Callable[[str], None]) -> str | None:
    """The teacher's tokenizer: its run's tokenizer.json, else its shards' manifest. A run with neither has no
    known tokenizer (said; the vocabulary check remains); a manifest that cannot be read is an error (a
    ``ShardFormatError``, which ``load_teacher`` reports naming the field), never a silently skipped check."""
    if paths.tokenizer_json.is_file():
        return sha256_file(paths.tokenizer_json)
    if not Path(manifest_path(str(paths.shards))).is_file():
        say(f"train.distill.teacher: {paths.root} has neither tokenizer/tokenizer.json nor shards: its tokenizer "
            "cannot be compared with the student's (the vocabulary size still is)")
        return None
    return read_manifest(str(paths.shards)).get("tokenizer_sha256")


def load_teacher(cfg: DistillConfig, student: ModelConfig, *, shard_tokenizer_sha256: str | None,
                 seq_len: int, device, say: Callable[[str], None] | None = None) -> Transformer:
    """The frozen teacher on ``device``; a ``TrainConfigError`` naming ``train.distill.teacher`` when it cannot be
    loaded or does not fit the student (tokenizer, vocabulary, context). ``say``: where a damaged newer
    checkpoint of a teacher run, passed over, is said (default: ``run_model.say_on_stderr``)."""
    spec, where = cfg.teacher, f"train.distill.teacher ({cfg.teacher})"
    try:
        if spec.startswith(hf.HF_PREFIX):
            model = hf.read_hf_model(spec[len(hf.HF_PREFIX):])
            config, state = model.config, model.state
            tokenizer_sha256 = sha256_file(model.tokenizer_json) if model.tokenizer_json is not None else None
        else:
            paths = RunPaths(spec)
            if not Path(spec).is_dir():
                raise TrainConfigError(f"{where}: not a directory (a run directory or hf:PATH)")
            checkpoint = run_model.find_checkpoint(paths, say=say or run_model.say_on_stderr)
            config = run_model.checkpoint_model_config(paths, checkpoint)
            state = run_model.load_model_state(checkpoint)
            tokenizer_sha256 = _teacher_tokenizer_sha256(paths, say or run_model.say_on_stderr)
    except TrainConfigError:
        raise
    except (FileNotFoundError, ValueError, OSError, ShardFormatError, hf.MissingExtra) as error:
        raise TrainConfigError(f"{where}: cannot load the teacher: {error}") from error
    if shard_tokenizer_sha256 and tokenizer_sha256 and shard_tokenizer_sha256 != tokenizer_sha256:
        raise TrainConfigError(f"{where}: the teacher's tokenizer (sha256 {tokenizer_sha256[:12]}) is not the one "
                               f"the shards were encoded with ({shard_tokenizer_sha256[:12]}): distillation needs "
                               "the same tokenizer")
    if config.vocab_size != student.vocab_size:
        raise TrainConfigError(f"{where}: the teacher's vocab_size ({config.vocab_size}) differs from the "
                               f"student's ({student.vocab_size})")
    if config.max_seq_len < seq_len:
        raise TrainConfigError(f"{where}: the teacher's max_seq_len ({config.max_seq_len}) < the shards' seq_len "
                               f"({seq_len})")
    if config.tie_embeddings and "output.weight" not in state:
        state["output.weight"] = state["tok_embeddings.weight"]
    teacher = run_model.build_model(config, state, device)
    teacher.requires_grad_(False)
    return teacher.eval()

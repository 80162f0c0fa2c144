"""Distillation (``train.distill``, issue 13): the loss against a hand-computed KL on a fixed batch, config
errors naming the field, teacher checks, and a single-process run with a frozen teacher. The 2-rank FSDP2 run
is a scenario of the ``two`` torchrun launch (tests/test_train_dist.py::test_distill_fsdp2_trains)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import base_config, run_with_shards  # noqa: E402

from trainer_bridge.config import DistillConfig, ModelConfig, TrainConfig  # noqa: E402
from trainer_bridge.loop.data import IGNORE_INDEX  # noqa: E402
from trainer_bridge.loop.distill import Distiller, kl_sum, load_teacher  # noqa: E402
from trainer_bridge.outcomes import TrainConfigError  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import Trainer  # noqa: E402


def hand_kl(student, teacher, labels, temperature) -> float:
    """Σ over counted tokens of Σ_v p_t(v) (log p_t(v) − log p_s(v)) · T², with plain Python floats."""
    total = 0.0
    for b in range(labels.shape[0]):
        for s in range(labels.shape[1]):
            if int(labels[b, s]) == IGNORE_INDEX:
                continue
            zs = [float(x) / temperature for x in student[b, s]]
            zt = [float(x) / temperature for x in teacher[b, s]]
            ls = math.log(sum(math.exp(z) for z in zs))
            lt = math.log(sum(math.exp(z) for z in zt))
            for a, c in zip(zs, zt):
                total += math.exp(c - lt) * ((c - lt) - (a - ls))
    return total * temperature ** 2


class FixedTeacher(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, position_ids, segment_ids):
        return self.logits


class Rows:
    def __init__(self, labels):
        self.labels = labels
        self.input_ids = self.position_ids = self.segment_ids = torch.zeros_like(labels)


def test_loss_equals_hand_computed_kl_on_a_fixed_batch():
    generator = torch.Generator().manual_seed(0)
    student = torch.randn(2, 5, 7, generator=generator, dtype=torch.float64) * 2
    teacher = torch.randn(2, 5, 7, generator=generator, dtype=torch.float64) * 2
    labels = torch.tensor([[1, 2, 3, IGNORE_INDEX, IGNORE_INDEX], [4, 5, IGNORE_INDEX, 6, 0]])
    for temperature in (1.0, 2.0, 0.5):
        got = float(kl_sum(student, teacher, labels, temperature))
        assert got == pytest.approx(hand_kl(student, teacher, labels, temperature), rel=1e-5)
    # The whole loss: alpha · KL + (1 − alpha) · CE, each × the normalization factor.
    alpha, temperature, factor = 0.3, 2.0, 1 / 7
    distiller = Distiller(DistillConfig(teacher="unused", alpha=alpha, temperature=temperature),
                          FixedTeacher(teacher))
    ce = F.cross_entropy(student.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    loss = distiller.loss(ce * factor, ce, student, Rows(labels), factor)
    expected = (alpha * hand_kl(student, teacher, labels, temperature) + (1 - alpha) * float(ce)) * factor
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    ce_sum, kl, combined = distiller.step_sums("cpu").tolist()
    assert kl == pytest.approx(hand_kl(student, teacher, labels, temperature), rel=1e-5)
    assert combined == pytest.approx(expected / factor, rel=1e-5)
    # Identical distributions: no KL.
    assert float(kl_sum(student, student, labels, 3.0)) == pytest.approx(0.0, abs=1e-9)


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match=r"distill\.alpha"):
        TrainConfig.model_validate({"distill": {"teacher": "runs/big", "alpha": 1.5}})
    with pytest.raises(ValidationError, match=r"distill\.temperature"):
        TrainConfig.model_validate({"distill": {"teacher": "runs/big", "temperature": 0}})
    with pytest.raises(ValidationError, match=r"distill\.teacher"):
        TrainConfig.model_validate({"distill": {"alpha": 0.5}})
    with pytest.raises(ValidationError, match=r"distill\.tmperature"):
        TrainConfig.model_validate({"distill": {"teacher": "runs/big", "tmperature": 2}})
    with pytest.raises(ValidationError, match="distill: supported with data parallelism"):
        TrainConfig.model_validate({"distill": {"teacher": "runs/big"}, "mesh": {"pp": 2}})


def test_teacher_must_exist_and_fit(tmp_path):
    student = ModelConfig(vocab_size=64, max_seq_len=32, dim=32, n_layers=2, n_heads=2)
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher .*not a directory"):
        load_teacher(DistillConfig(teacher=str(tmp_path / "nowhere")), student, shard_tokenizer_sha256=None,
                     seq_len=32, device="cpu")
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher .*no checkpoints"):
        load_teacher(DistillConfig(teacher=str(tmp_path)), student, shard_tokenizer_sha256=None, seq_len=32,
                     device="cpu")


SMALL = {"model": {"dim": 32, "n_layers": 2, "n_heads": 2, "multiple_of": 16}, "steps": 6,
         "eval": {"interval": 0}, "checkpoint": {"interval": 6}}


def test_distill_single_process_teacher_frozen(tmp_path):
    write_synthetic_shards(tmp_path / "shards")
    teacher_run = run_with_shards(tmp_path / "teacher", tmp_path / "shards")
    Trainer(base_config({"steps": 6, "eval": {"interval": 0}, "checkpoint": {"interval": 6}}), teacher_run).fit()
    # The teacher's vocabulary is the student's; another vocabulary is refused, naming the field.
    cfg = base_config({**SMALL, "distill": {"teacher": str(teacher_run.root), "alpha": 0.7, "temperature": 2.0}})
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher .*vocab_size \(64\) differs"):
        Trainer(base_config({**SMALL, "model": {**SMALL["model"], "vocab_size": 80},
                             "distill": {"teacher": str(teacher_run.root)}}),
                run_with_shards(tmp_path / "wrong", tmp_path / "shards"))
    trainer = Trainer(cfg, run_with_shards(tmp_path / "student", tmp_path / "shards"))
    teacher = trainer.distiller.teacher
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    records = []
    trainer.hooks.on_step = lambda step, record: records.append(record)
    result = trainer.fit()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert all(p.grad is None for p in teacher.parameters())
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())
    for record in records:
        assert math.isfinite(record["kl_loss"]) and record["kl_loss"] > 0
        assert record["loss"] == pytest.approx(0.7 * record["kl_loss"] + 0.3 * record["ce_loss"], rel=1e-5)
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


def test_a_teacher_whose_shard_manifest_is_damaged_is_refused_not_unchecked(tmp_path):
    """The teacher's tokenizer comes from its shards' manifest when its run has no tokenizer.json: a manifest that
    cannot be read is an error naming the field (the tokenizer check used to be skipped without a word)."""
    write_synthetic_shards(tmp_path / "shards")
    teacher_run = run_with_shards(tmp_path / "teacher", tmp_path / "shards")
    Trainer(base_config({"steps": 2, "eval": {"interval": 0}, "checkpoint": {"interval": 2}}), teacher_run).fit()
    teacher_run.shards.unlink()  # the teacher's own copy of the shards' manifest, damaged
    teacher_run.shards.mkdir()
    (teacher_run.shards / "manifest.json").write_text("{not json")
    student = ModelConfig(vocab_size=64, max_seq_len=32, dim=32, n_layers=2, n_heads=2)
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher.*unreadable manifest"):
        load_teacher(DistillConfig(teacher=str(teacher_run.root)), student, shard_tokenizer_sha256="ab" * 32,
                     seq_len=32, device="cpu")


def test_preflight_names_a_missing_teacher(tmp_path):
    from types import SimpleNamespace

    from pipelines.config import ConfigError
    from pipelines.run import _check_distill

    for teacher in (str(tmp_path / "nowhere"), f"hf:{tmp_path / 'nowhere'}", str(tmp_path)):
        cfg = SimpleNamespace(train=TrainConfig.model_validate({"distill": {"teacher": teacher}}))
        with pytest.raises(ConfigError, match=r"train\.distill\.teacher"):
            _check_distill(cfg)
    (tmp_path / "train" / "checkpoints").mkdir(parents=True)
    _check_distill(SimpleNamespace(train=TrainConfig.model_validate({"distill": {"teacher": str(tmp_path)}})))


def test_hf_teacher_loads_frozen_and_is_checked(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from test_hf_import import hf_llama, write_tokenizer

    from runio.files import sha256_file

    reference = hf_llama(tmp_path / "llama", 4, 2, True, {"rope_type": "default", "rope_theta": 10000.0}, vocab=64,
                         max_pos=32)
    write_tokenizer(tmp_path / "llama")
    student = ModelConfig(vocab_size=64, max_seq_len=32, dim=32, n_layers=2, n_heads=2)
    sha = sha256_file(tmp_path / "llama" / "tokenizer.json")
    teacher = load_teacher(DistillConfig(teacher=f"hf:{tmp_path / 'llama'}"), student, shard_tokenizer_sha256=sha,
                           seq_len=32, device="cpu")
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    tokens = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(16).expand(2, 16)
    with torch.no_grad():
        ours = teacher(tokens, positions, torch.zeros_like(tokens))
        theirs = reference(input_ids=tokens, position_ids=positions).logits
    assert torch.allclose(ours, theirs, atol=1e-4)
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher .*tokenizer"):
        load_teacher(DistillConfig(teacher=f"hf:{tmp_path / 'llama'}"), student, shard_tokenizer_sha256="0" * 64,
                     seq_len=32, device="cpu")
    with pytest.raises(TrainConfigError, match=r"train\.distill\.teacher .*max_seq_len \(32\) < the shards' seq_len"):
        load_teacher(DistillConfig(teacher=f"hf:{tmp_path / 'llama'}"), student, shard_tokenizer_sha256=sha,
                     seq_len=64, device="cpu")

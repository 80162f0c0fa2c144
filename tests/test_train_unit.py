"""Single-process trainer tests: config errors, collation, document masking, data order, MFU, LR schedules,
checkpoint atomicity/retention/safe loading, guards (skip, rollback, stop), fp16 overflow, bf16."""
from __future__ import annotations

import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import SampleLog, base_config, run_with_shards  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.checkpoint.store import LATEST, PARTIAL_SUFFIX, SafeFileSystemReader, latest_checkpoint  # noqa: E402
from trainer_bridge.config import OptimizerConfig, TrainConfig  # noqa: E402
from trainer_bridge.loop.data import IGNORE_INDEX, SampleOrder, StepBatches, collate  # noqa: E402
from trainer_bridge.observe.metrics import FlopCounter, mfu  # noqa: E402
from trainer_bridge.model.transformer import Transformer, count_parameters  # noqa: E402
from trainer_bridge.parallel.parallelize import local_grads, materialize  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, learning_rate, train  # noqa: E402
from trainer_bridge.outcomes import TrainingStopped  # noqa: E402


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "shards"
    write_synthetic_shards(path)
    return path


# -- config -------------------------------------------------------------------------------------------------
def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="schedule"):
        TrainConfig.model_validate({"pipeline": {"schedule": "zero_bubble"}})
    with pytest.raises(ValidationError, match="global_batch_size"):
        TrainConfig.model_validate({"batch": {"global_batch_size": 6, "micro_batch_size": 4}})
    with pytest.raises(ValidationError, match="stages_per_rank"):
        TrainConfig.model_validate({"mesh": {"pp": 2}, "pipeline": {"schedule": "interleaved_1f1b"}})
    with pytest.raises(ValidationError, match="extra"):
        TrainConfig.model_validate({"optimizer": {"learning_rate": 1.0}})
    assert TrainConfig.model_validate({"mesh": {"dp": 2}, "batch": {"global_batch_size": 8}}).grad_accum_steps == 2


# -- collation and document masking ----------------------------------------------------------------------
def test_collate_labels_positions_segments():
    tokens = np.array([5, 6, 7, 8, 9, 3, 0, 0])
    batch = collate([(tokens, np.array([3, 3], dtype=np.int32))], [42], seq_len=8)
    assert batch.position_ids[0].tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    assert batch.segment_ids[0].tolist() == [0, 0, 0, 1, 1, 1, -1, -1]
    # the last token of a document has no target; padding has none either
    assert batch.labels[0].tolist() == [6, 7, IGNORE_INDEX, 9, 3, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]
    assert batch.target_tokens == 4 and batch.real_tokens == 6 and batch.sum_squared_segment_lengths == 18
    with pytest.raises(ValueError, match="malformed row"):
        collate([(tokens, np.array([5, 5], dtype=np.int32))], [7], seq_len=8)


def tiny_model(seed: int = 0) -> Transformer:
    cfg = base_config().model.model_copy(update={"vocab_size": 64, "max_seq_len": 32})
    with torch.device("meta"):
        model = Transformer(cfg)
    materialize(model, torch.device("cpu"), seed)
    return model


def test_packed_row_loss_is_token_weighted_mean_of_documents():
    model = tiny_model()
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 64, size=n) for n in (7, 12, 5)]
    row = np.concatenate(docs + [np.zeros(32 - 24, dtype=np.int64)])
    packed = collate([(row, np.array([7, 12, 5], dtype=np.int32))], [0], seq_len=32)
    # positions restart at every document
    assert packed.position_ids[0, :24].tolist() == list(range(7)) + list(range(12)) + list(range(5))
    with torch.no_grad():
        logits = model(packed.input_ids, packed.position_ids, packed.segment_ids)
        packed_loss = F.cross_entropy(logits.flatten(0, 1), packed.labels.flatten(), ignore_index=IGNORE_INDEX)
        per_doc, weights = [], []
        for doc in docs:
            alone = collate([(doc, np.array([len(doc)], dtype=np.int32))], [0], seq_len=len(doc))
            out = model(alone.input_ids, alone.position_ids, alone.segment_ids)
            per_doc.append(F.cross_entropy(out.flatten(0, 1), alone.labels.flatten(), ignore_index=IGNORE_INDEX))
            weights.append(len(doc) - 1)
    expected = sum(l * w for l, w in zip(per_doc, weights)) / sum(weights)
    assert abs(float(packed_loss) - float(expected)) < 1e-5
    # and without the document mask the packed loss would differ: the test can fail
    with torch.no_grad():
        unmasked = model(packed.input_ids, packed.position_ids, torch.zeros_like(packed.segment_ids))
        unmasked_loss = F.cross_entropy(unmasked.flatten(0, 1), packed.labels.flatten(), ignore_index=IGNORE_INDEX)
    assert abs(float(unmasked_loss) - float(expected)) > 1e-4


# -- data order --------------------------------------------------------------------------------------------
def test_sample_order_is_deterministic_permutation_per_epoch():
    order = SampleOrder(10, seed=7)
    epoch0 = [order.row_index(i) for i in range(10)]
    epoch1 = [order.row_index(i) for i in range(10, 20)]
    assert sorted(epoch0) == list(range(10)) and sorted(epoch1) == list(range(10)) and epoch0 != epoch1
    assert [SampleOrder(10, seed=7).row_index(i) for i in range(10)] == epoch0


def test_rank_slices_cover_the_global_batch_whatever_the_world_size(shards):
    from tokenizer.shards import ShardReader

    source = ShardReader(str(shards), "train")

    def samples(dp_size: int) -> list[int]:
        out = []
        for rank in range(dp_size):
            loader = StepBatches(source, seed=1, start_sample=16, global_batch_size=8, micro_batch_size=2,
                                 dp_rank=rank, dp_size=dp_size, prefetch=1)
            out += [i for mb in next(loader).micro_batches for i in mb.sample_ids]
            loader.close()
        return sorted(out)

    assert samples(1) == samples(2) == samples(4)
    assert len(set(samples(1))) == 8


# -- FLOPs and MFU -----------------------------------------------------------------------------------------
def test_mfu_against_hand_computed_flops():
    cfg = base_config().model.model_copy(update={"vocab_size": 64, "max_seq_len": 32})
    # dim 64, 4 layers, 4 heads (head 16), 2 kv heads (kv dim 32), ffn hidden = 16·ceil(170/16) = 176
    per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176 + 2 * 64  # wq, wk+wv, wo, w1 w2 w3, 2 norms
    n = 4 * per_layer + 64 + 64 * 64  # final norm + output projection (input embedding excluded)
    assert count_parameters(cfg)["non_embedding"] == n
    tokens, doc_lens = 24, [7, 12, 5]
    expected = 6 * n * tokens + 6 * 4 * 64 * sum(l * l for l in doc_lens)
    counter = FlopCounter(cfg)
    assert counter.step_flops(tokens, sum(l * l for l in doc_lens)) == expected
    assert mfu(expected, step_seconds=2.0, peak_flops_per_device=1e9, n_devices=4) == pytest.approx(expected / 8e9)


def test_learning_rate_schedules():
    cos = OptimizerConfig(lr=1.0, min_lr_ratio=0.1, warmup_steps=10, schedule="cosine")
    assert learning_rate(0, cos, 110) == pytest.approx(0.1)
    assert learning_rate(9, cos, 110) == pytest.approx(1.0)
    assert learning_rate(60, cos, 110) == pytest.approx(0.55)
    assert learning_rate(110, cos, 110) == pytest.approx(0.1)
    wsd = OptimizerConfig(lr=1.0, min_lr_ratio=0.0, warmup_steps=10, schedule="wsd", decay_fraction=0.2)
    assert learning_rate(50, wsd, 100) == 1.0 and learning_rate(79, wsd, 100) == 1.0
    assert learning_rate(89, wsd, 100) == pytest.approx(0.5) and learning_rate(99, wsd, 100) == pytest.approx(0.0)


# -- checkpoints, guards, precision (single process) -------------------------------------------------------
def quick(overrides: dict) -> TrainConfig:
    return base_config({"model": {"n_layers": 2}, **overrides})


def test_checkpoint_retention_atomic_latest_and_safe_metadata(shards, tmp_path):
    run = run_with_shards(tmp_path / "run", shards)
    result = train(quick({"steps": 6, "checkpoint": {"interval": 2, "keep_last": 2}, "eval": {"interval": 0}}), run)
    root = run.checkpoints
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000004", "step-00000006"]
    assert latest_checkpoint(root).name == "step-00000006" and result.final_step == 6
    # An interrupted save (a .partial directory) is never "latest" and is cleared on the next start.
    (root / ("step-00000008" + PARTIAL_SUFFIX)).mkdir()
    resumed = train(quick({"steps": 7, "checkpoint": {"interval": 2, "keep_last": 2}, "eval": {"interval": 0}}), run)
    assert resumed.resumed_from == "step-00000006" and sorted(resumed.losses) == [6]
    assert not list(root.glob("*" + PARTIAL_SUFFIX)) and (root / LATEST).read_text().strip() == "step-00000007"
    # Metadata that names anything but DCP's own types is refused, not unpickled.
    evil = root / "evil"
    evil.mkdir()
    (evil / ".metadata").write_bytes(pickle.dumps(print))
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        SafeFileSystemReader(evil).read_metadata()


def test_async_checkpoint_resume_is_bit_identical(shards, tmp_path):
    cfg = quick({"steps": 6, "checkpoint": {"interval": 3, "async_save": True}, "eval": {"interval": 0}})
    full = train(cfg, run_with_shards(tmp_path / "full", shards))
    train(cfg, run_with_shards(tmp_path / "cut", shards), hooks=TrainHooks(stop_after_step=3))
    rest = train(cfg, run_with_shards(tmp_path / "cut", shards))
    assert rest.resumed_from == "step-00000003"
    assert {s: full.losses[s] for s in range(3, 6)} == rest.losses


def inject(value: float, steps: set[int]):
    def hook(step, model):
        if step in steps:
            local_grads(model)[0].view(-1)[0] = value
    return hook


def test_guard_skips_one_nan_step_and_rolls_back_on_persistent_nan(shards, tmp_path):
    single = train(quick({"steps": 6, "checkpoint": {"enabled": False}, "eval": {"interval": 0}}),
                   run_with_shards(tmp_path / "one", shards), hooks=TrainHooks(after_backward=inject(math.nan, {2})))
    assert single.skipped_bad_steps == 1 and single.rollbacks == 0
    assert all(math.isfinite(v) for v in single.losses.values())

    calls = {"n": 0}

    def persistent(step, model):  # NaN gradients at steps 4, 5, 6 of the first pass, then healthy again
        calls["n"] += 1
        if calls["n"] in (5, 6, 7):
            local_grads(model)[0].view(-1)[0] = math.nan

    cfg = quick({"steps": 8, "checkpoint": {"interval": 3}, "eval": {"interval": 0},
                 "guards": {"max_consecutive_bad": 3}})
    batches = SampleLog()
    rolled = train(cfg, run_with_shards(tmp_path / "rollback", shards), hooks=batches.hooks(after_backward=persistent))
    assert rolled.rollbacks == 1 and rolled.skipped_bad_steps == 3
    assert {"step": 6, "event": "rollback", "to": "step-00000003"} in rolled.events
    assert rolled.final_step == 8
    # data moved on: the samples of the bad steps are not replayed after the rollback
    ids = [tuple(v) for v in batches.consumed]
    assert len(ids) == 7 + 5 and len(set(ids)) == 12  # steps 0-6, rollback to 3, steps 3-7

    stop = quick({"steps": 8, "checkpoint": {"enabled": False}, "eval": {"interval": 0},
                  "guards": {"max_consecutive_bad": 2}})
    with pytest.raises(TrainingStopped, match="no checkpoint to roll back to"):
        train(stop, run_with_shards(tmp_path / "stop", shards), hooks=TrainHooks(after_backward=inject(math.inf, {1, 2})))


def test_fp16_overflow_skipped_and_scale_backs_off(shards, tmp_path):
    cfg = quick({"steps": 6, "precision": {"dtype": "fp16"}, "checkpoint": {"enabled": False}, "eval": {"interval": 0}})
    result = train(cfg, run_with_shards(tmp_path / "fp16", shards), hooks=TrainHooks(after_backward=inject(math.inf, {2})))
    assert result.skipped_overflow_steps == 1 and result.skipped_bad_steps == 0
    assert result.loss_scale == 2.0**15


def test_bf16_runs_in_bf16_and_trains(shards, tmp_path):
    from trainer_bridge.parallel.precision import compute_context

    model = tiny_model()
    batch = collate([(np.arange(1, 33), np.array([32], dtype=np.int32))], [0], seq_len=32)
    with compute_context(base_config({"precision": {"dtype": "bf16"}}).precision, torch.device("cpu"), False):
        assert model(batch.input_ids, batch.position_ids, batch.segment_ids).dtype == torch.bfloat16
    cfg = quick({"steps": 16, "precision": {"dtype": "bf16"}, "checkpoint": {"enabled": False}, "eval": {"interval": 0}})
    losses = train(cfg, run_with_shards(tmp_path / "bf16", shards)).losses
    assert sum(losses[s] for s in (13, 14, 15)) / 3 < sum(losses[s] for s in (0, 1, 2)) / 3 - 0.4


# -- launcher ----------------------------------------------------------------------------------------------
def test_torchrun_command_passes_rendezvous_options(tmp_path):
    from trainer_bridge.launch import Rendezvous, torchrun_command

    # Single node: no --standalone (torchrun's own store would listen on every interface); torchrun joins the
    # store corpusmill hosts on 127.0.0.1 and opens none of its own.
    local = torchrun_command(tmp_path / "c.json", tmp_path, 4, Rendezvous(max_restarts=2), "127.0.0.1:29999")
    assert "--standalone" not in local and "--nproc-per-node=4" in local and "--max-restarts=2" in local
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29999", "--rdzv-conf=is_host=false",
            "--local-addr=127.0.0.1"} <= set(local)
    assert local[-4:] == ["--train-config", str(tmp_path / "c.json"), "--run-dir", str(tmp_path)]
    with pytest.raises(ValueError, match="store"):
        torchrun_command(tmp_path / "c.json", tmp_path, 4, Rendezvous())
    multi = torchrun_command(tmp_path / "c.json", tmp_path, 8, Rendezvous(
        nnodes="2", rdzv_backend="c10d", rdzv_endpoint="head:29500", rdzv_id="job7"), "head:29500")
    assert "--standalone" not in multi and "--nproc-per-node=4" in multi and "--nnodes=2" in multi
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=head:29500", "--rdzv-id=job7"} <= set(multi)
    # torchrun's default static backend: passed through, torchrun keeps its own store (see docs/scale-out.md)
    static = torchrun_command(tmp_path / "c.json", tmp_path, 8, Rendezvous(nnodes="2", node_rank=1,
                                                                         rdzv_endpoint="head:29500"))
    assert {"--node-rank=1", "--rdzv-endpoint=head:29500"} <= set(static) and "--rdzv-conf=is_host=false" not in static


def test_run_training_in_process_writes_metrics(shards, tmp_path, capsys):
    import json
    import shutil
    from types import SimpleNamespace

    from trainer_bridge.launch import run_training

    run = RunPaths(tmp_path)
    shutil.copytree(shards, run.shards)
    cfg = SimpleNamespace(name="t", run_dir=tmp_path, train=quick({"steps": 2, "eval": {"interval": 1}}))
    assert run_training(cfg) == 0
    records = [json.loads(line) for line in run.metrics_jsonl.read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1] and all("val_loss" in r and r["mfu"] > 0 for r in records)
    assert (run.checkpoints / LATEST).read_text().strip() == "step-00000002"
    # shards without the run's docs/ (as a sweep trial reads them): the true reason, not "did the cleaning run?"
    out = capsys.readouterr().out
    assert f"per-domain validation loss is off: this run directory has no cleaned documents ({run.docs} does not " \
           "exist)" in out and "did the cleaning pipeline run" not in out


def test_activation_checkpointing_changes_memory_not_math(shards, tmp_path):
    plain = train(quick({"steps": 3, "checkpoint": {"enabled": False}, "eval": {"interval": 0}}),
                  run_with_shards(tmp_path / "plain", shards))
    for mode in ("every", "every_n"):
        cfg = quick({"steps": 3, "checkpoint": {"enabled": False}, "eval": {"interval": 0},
                     "activation_checkpointing": {"mode": mode, "every_n": 2}})
        recomputed = train(cfg, run_with_shards(tmp_path / mode, shards))
        assert max(abs(recomputed.losses[s] - plain.losses[s]) for s in range(3)) < 1e-6


def test_activation_checkpointing_recomputes_the_chosen_blocks(monkeypatch):
    from trainer_bridge.parallel.parallelize import apply_activation_checkpointing

    silu_calls = []
    real_silu = F.silu
    monkeypatch.setattr(F, "silu", lambda x: silu_calls.append(1) or real_silu(x))  # one call per block forward
    batch = collate([(np.arange(1, 33), np.array([20, 12], dtype=np.int32))], [0], seq_len=32)
    for mode, expected in (("none", 4), ("every_n", 4 + 2), ("every", 4 + 4)):  # 4 blocks; every_n=2: 0 and 2
        model = tiny_model()
        apply_activation_checkpointing(model, mode, every_n=2)
        silu_calls.clear()
        model(batch.input_ids, batch.position_ids, batch.segment_ids).sum().backward()
        assert len(silu_calls) == expected, mode  # checkpointed blocks run forward again during backward


def test_spike_guard_judges_against_running_mean():
    from trainer_bridge.config import GuardConfig
    from trainer_bridge.loop.train import StepGuard

    guard = StepGuard(GuardConfig(spike_factor=2.0, spike_warmup_steps=3, ema_beta=0.5))
    assert guard.verdict(100.0, 1.0) is None  # no statistic yet: never a spike during warm-up
    for loss in (4.0, 4.0, 4.0):
        guard.record(loss)
    assert guard.verdict(7.9, 1.0) is None
    assert guard.verdict(8.1, 1.0).startswith("loss spike")
    assert guard.verdict(float("nan"), 1.0) == "non-finite loss"
    assert guard.verdict(3.0, float("inf")) == "non-finite gradient"
    guard.record(None)
    guard.record(None)
    assert guard.consecutive_bad == 2
    guard.record(3.0)
    assert guard.consecutive_bad == 0 and guard.mean == pytest.approx(3.5)


def test_validation_rows_are_split_evenly_across_ranks(shards):
    from tokenizer.shards import ShardReader
    from trainer_bridge.loop.data import validation_batches

    source = ShardReader(str(shards), "val")
    assert len(source) >= 5
    per_rank = [validation_batches(source, max_rows=5, micro_batch_size=2, dp_rank=r, dp_size=2) for r in (0, 1)]
    assert [[len(b.sample_ids) for b in batches] for batches in per_rank] == [[2], [2]]
    assert sorted(i for batches in per_rank for b in batches for i in b.sample_ids) == [0, 1, 2, 3]
    three = validation_batches(source, max_rows=5, micro_batch_size=3, dp_rank=0, dp_size=1)
    assert [len(b.sample_ids) for b in three] == [3, 2]
    whole_only = validation_batches(source, max_rows=5, micro_batch_size=3, dp_rank=0, dp_size=1, divisible_by=3)
    assert [len(b.sample_ids) for b in whole_only] == [3]


def test_rope_scaling_stretches_only_long_wavelengths():
    from trainer_bridge.config import ModelConfig
    from trainer_bridge.model.transformer import rope_inverse_frequencies

    base = rope_inverse_frequencies(64, ModelConfig(rope_theta=500000.0))
    linear = rope_inverse_frequencies(64, ModelConfig(rope_theta=500000.0, rope_scaling="linear", rope_scaling_factor=8))
    assert torch.allclose(linear, base / 8)
    llama3 = rope_inverse_frequencies(64, ModelConfig(rope_theta=500000.0, rope_scaling="llama3",
                                                      rope_scaling_factor=8, rope_original_max_len=8192))
    assert llama3[0] == base[0]  # highest frequency (short wavelength) kept
    assert torch.isclose(llama3[-1], base[-1] / 8)  # lowest frequency interpolated by the factor
    assert bool(((llama3 <= base) & (llama3 >= base / 8 - 1e-12)).all())


def test_init_from_continues_another_runs_training_on_new_data(shards, tmp_path):
    base = quick({"steps": 4, "checkpoint": {"interval": 2}, "eval": {"interval": 0}})
    first_batches, continued_batches = SampleLog(), SampleLog()
    train(base, run_with_shards(tmp_path / "base", shards), hooks=first_batches.hooks())
    continued_cfg = base.model_copy(update={"steps": 6, "init_from": str(tmp_path / "base")})
    continued = train(continued_cfg, run_with_shards(tmp_path / "refresh", shards), hooks=continued_batches.hooks())
    assert continued.initialized_from.endswith("step-00000004") and continued.resumed_from is None
    assert sorted(continued.losses) == [4, 5]  # the step (and LR schedule) continue where the base run ended
    # but the data starts at sample 0 of this run's shards
    assert continued_batches.consumed[0] == first_batches.consumed[0]

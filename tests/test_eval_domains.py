"""Evaluation during training (issue 13): validation loss per domain (domains from docs/, by the shards'
doc_ids), greedy samples from fixed prompts in train/samples.jsonl, and checkpoints/best (kept by retention)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import DOMAINS, EVAL, base_config, make_domain_run  # noqa: E402

from runio.files import read_jsonl  # noqa: E402
from trainer_bridge.checkpoint.store import BEST, LATEST, best_checkpoint, prune_checkpoints, read_checkpoint_json  # noqa: E402
from trainer_bridge.loop.train import train  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    paths = make_domain_run(tmp_path_factory.mktemp("eval") / "run")
    result = train(base_config(EVAL), paths)
    return paths, result


def test_validation_loss_per_domain(trained):
    paths, result = trained
    records = [r for r in read_jsonl(paths.metrics_jsonl) if "val_loss" in r]
    assert [r["step"] for r in records] == [1, 3, 5]
    for record in records:
        by_domain = record["val_loss_by_domain"]
        assert set(by_domain) == set(DOMAINS)  # from meta 'source', not the 'source' column (one file)
        assert all(math.isfinite(v) and v > 0 for v in by_domain.values())
        # The overall loss is the token-weighted mean of the domains' losses: between their min and max.
        assert min(by_domain.values()) - 1e-6 <= record["val_loss"] <= max(by_domain.values()) + 1e-6


def test_samples_are_greedy_continuations_of_the_fixed_prompts(trained):
    from tokenizers import Tokenizer

    from trainer_bridge.model.generate import SamplingConfig, generate
    from trainer_bridge.checkpoint.run_model import build_model
    from trainer_bridge.hf import load_for_inference

    paths, _ = trained
    samples = read_jsonl(paths.samples_jsonl)
    assert [(s["step"], s["prompt"]) for s in samples] == [(step, p) for step in (2, 4, 6)
                                                           for p in ("alpha document", "the")]
    assert all(1 <= len(s["tokens"]) <= 6 and isinstance(s["completion"], str) for s in samples)
    # The last samples are what `corpusmill generate --temperature 0` gives with the final checkpoint.
    loaded = load_for_inference(paths.root, step=6)
    tok = Tokenizer.from_file(str(paths.tokenizer_json))
    prompts = [tok.encode(p, add_special_tokens=False).ids for p in ("alpha document", "the")]
    expected = generate(build_model(loaded.config, loaded.state), prompts,
                        SamplingConfig(max_new_tokens=6, temperature=0.0), eos_ids=[2])
    assert [s["tokens"] for s in samples[-2:]] == [g.tokens for g in expected]


def test_best_checkpoint_tracked_and_kept(trained):
    paths, result = trained
    best = best_checkpoint(paths.checkpoints)
    assert best is not None and best.is_dir()
    val = {r["step"] + 1: r["val_loss"] for r in read_jsonl(paths.metrics_jsonl) if "val_loss" in r}
    assert int(best.name.split("-")[1]) == min(val, key=val.get)
    assert read_checkpoint_json(best, "provenance.json")["val_loss"] == pytest.approx(min(val.values()))


def test_retention_keeps_the_best_checkpoint(tmp_path):
    for step in range(1, 6):
        (tmp_path / f"step-{step:08d}").mkdir()
        (tmp_path / f"step-{step:08d}" / ".metadata").write_text("x")
    (tmp_path / LATEST).write_text("step-00000005\n")
    (tmp_path / BEST).write_text("step-00000001\n")
    deleted = prune_checkpoints(tmp_path, keep_last=2)
    assert sorted(p.name for p in deleted) == ["step-00000002", "step-00000003"]
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000001", "step-00000004", "step-00000005"]


def test_domains_off_without_docs(tmp_path, capsys):
    from trainer_bridge.loop.synthetic import write_synthetic_shards

    from scenario_configs import run_with_shards

    write_synthetic_shards(tmp_path / "shards")
    paths = run_with_shards(tmp_path / "run", tmp_path / "shards")
    train(base_config({"model": {"dim": 32, "n_layers": 2, "n_heads": 2, "multiple_of": 16}, "steps": 2,
                       "eval": {"interval": 2}, "checkpoint": {"enabled": False}}), paths)
    out = capsys.readouterr().out
    assert "per-domain validation loss is off" in out and "samples are off: no tokenizer" in out
    record = [r for r in read_jsonl(paths.metrics_jsonl) if "val_loss" in r][0]
    assert "val_loss_by_domain" not in record and not paths.samples_jsonl.exists()

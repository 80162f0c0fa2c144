"""`corpusmill ablate` on a tiny input: every variant is evaluated on exactly the same token ids, and no
evaluation document is in any variant's training shards."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from experiments.ablate import (Variant, check_exclusion, evaluated_tokens, parse_variants, run_ablation,
                                split_doc_ids)
from pipelines.config import ConfigError, validate_config
from runio.layout import AblationPaths, RunPaths
from test_report import CHROMEDRIVER, CHROMIUM, chromium, colored_pixels, empty_charts  # noqa: F401

VARIANTS = "raw,cleaned,minus:exact_dedup"


def tiny_config(root: Path, docs: Path) -> dict:
    return {
        "name": "ab", "input": {"paths": [str(docs)]}, "output": {"runs_dir": str(root)},
        "runner": {"name": "inprocess", "workers": 1},
        "quality": {"enabled": False}, "near_dedup": {"enabled": False}, "pii": {"enabled": False},
        "tokenizer": {"vocab_size": 400}, "packing": {"seq_len": 64, "val_fraction": 0.15},
        "train": {"device": "cpu", "model": {"dim": 32, "n_layers": 1, "n_heads": 2},
                  "batch": {"global_batch_size": 4, "micro_batch_size": 4},
                  "optimizer": {"lr": 0.01, "warmup_steps": 0}, "checkpoint": {"enabled": False},
                  "eval": {"interval": 2, "max_rows": 8}, "metrics": {"tensorboard": False}, "steps": 4},
    }


@pytest.fixture(scope="module")
def ablated(tmp_path_factory, demo_corpus):
    root = tmp_path_factory.mktemp("ablate")
    docs = root / "tiny.jsonl"
    english = [r for r in demo_corpus if r["lang"] == "en"][:90]
    records = english + english[:15]  # exact duplicates: something for exact_dedup to remove
    docs.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = validate_config(tiny_config(root, docs))
    logs: list[str] = []
    results = run_ablation(cfg, parse_variants(VARIANTS, cfg), log=logs.append)
    return cfg, results, logs


def test_every_variant_evaluates_on_the_same_tokens_none_trains_on_them(ablated):
    cfg, results, _ = ablated
    ablation = AblationPaths(RunPaths.of(cfg))
    variants = parse_variants(VARIANTS, cfg)
    cleaned = ablation.variant(Variant("cleaned"))
    eval_ids = split_doc_ids(cleaned.shards, "val")
    assert eval_ids

    reference = evaluated_tokens(ablation.view(Variant("cleaned")), cfg)
    assert reference.size > 0 and (reference != 0).any()
    for variant in variants:
        view = ablation.view(variant)
        assert np.array_equal(evaluated_tokens(view, cfg), reference), variant.name  # the trainer's val rows
        own_train = split_doc_ids(ablation.variant(variant).shards, "train")
        assert split_doc_ids(view.shards, "train") == own_train  # trains on its own corpus ...
        assert not (own_train & eval_ids), variant.name  # ... which holds no evaluation document

    rows = {r["variant"]: r for r in results["variants"]}
    assert set(rows) == {"raw", "cleaned", "minus:exact_dedup"}
    # the variants really differ: raw keeps everything, cleaned removes duplicates and filtered documents
    assert rows["raw"]["train_docs"] > rows["minus:exact_dedup"]["train_docs"] >= rows["cleaned"]["train_docs"]
    assert rows["raw"]["funnel"]["kept"] == rows["raw"]["funnel"]["documents_read"]
    assert rows["cleaned"]["funnel"]["removed_by_step"]["exact_dedup"] > 0
    for row in rows.values():  # same budget and seed: the same number of steps and validations
        assert math.isfinite(row["final_val_loss"])
        assert sorted(row["val_losses"]) == ["2", "4"]
        metrics = (AblationPaths(RunPaths.of(cfg)).view(Variant(row["variant"])).metrics_jsonl).read_text()
        assert len(metrics.splitlines()) == 4
    # raw's own hash-chosen val documents are a superset of the evaluation ids: same ids, same hash
    assert eval_ids <= split_doc_ids(ablation.variant(Variant("raw")).shards, "val")


def test_leak_check_and_variant_parsing(ablated):
    cfg, _, _ = ablated
    ablation = AblationPaths(RunPaths.of(cfg))
    raw = ablation.variant(Variant("raw"))
    with pytest.raises(ConfigError, match="evaluation document"):
        check_exclusion(Variant("raw"), raw.shards, set(list(split_doc_ids(raw.shards, "train"))[:1]))
    with pytest.raises(ConfigError, match="not enabled"):
        parse_variants("minus:near_dedup", cfg)
    with pytest.raises(ConfigError, match="unknown variant"):
        parse_variants("raw,half", cfg)


def test_rerun_reuses_prepares_and_trainings(ablated):
    cfg, results, _ = ablated
    ablation = AblationPaths(RunPaths.of(cfg))
    done = {v: os.path.getmtime(ablation.view(Variant(v)).train / "ablation_result.json")
            for v in ("raw", "cleaned")}
    logs: list[str] = []
    again = run_ablation(cfg, parse_variants("raw,cleaned", cfg), log=logs.append)
    assert sum("training already done" in line for line in logs) == 2
    stages = [line for line in logs if line.startswith("  [")]
    assert len(stages) == 4 and all("already done with this config, skipped" in line for line in stages)
    assert {v: os.path.getmtime(ablation.view(Variant(v)).train / "ablation_result.json") for v in done} == done
    first = {r["variant"]: r["final_val_loss"] for r in results["variants"]}
    assert {r["variant"]: r["final_val_loss"] for r in again["variants"]} == {k: first[k] for k in ("raw", "cleaned")}


def test_ablation_section_draws_in_chromium(ablated, chromium):
    from report.build import build_report

    cfg, results, _ = ablated
    # results.json from the first (3-variant) run is rewritten by the rerun test; write all three again
    (AblationPaths(RunPaths.of(cfg)).results).write_text(json.dumps(results))
    report = build_report(RunPaths.of(cfg))
    html = report.read_text(encoding="utf-8")
    assert '<section id="ablation">' in html and "Does cleaning pay" in html
    empty = empty_charts(chromium, report)
    assert {k: v for k, v in empty.items() if k.startswith("ablation")} == {}
    names = chromium.execute_script("return document.getElementById('chart-ablation-loss').data.map(t => t.name)")
    assert sorted(names) == ["cleaned", "minus:exact_dedup", "raw"]

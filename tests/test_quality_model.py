"""The default quality model (trained from the shipped subset, as the demo does), Beam step and CLI.

One model is trained per test session module (~15-25 s on 2 cores) and shared by every test here.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.quality.step import QualityConfig, QualityFilter, QualityStep, ensure_default_model
from transforms.quality.model import QualityModel, sidecar_paths

REPO = Path(__file__).resolve().parents[1]
SUBSET = REPO / "data" / "quality" / "quality_train_subset.jsonl.gz"
SHARED_EVAL = REPO.parent / "shared" / "eval" / "quality_train.jsonl.gz"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    cache = tmp_path_factory.mktemp("quality-cache")
    messages: list[str] = []
    path = ensure_default_model(cache, QualityConfig(), log=messages.append)
    assert any("training the default model" in m for m in messages)
    # a second call finds the cached model and trains nothing
    again: list[str] = []
    assert ensure_default_model(cache, QualityConfig(), log=again.append) == path and not again
    return path


@pytest.fixture(scope="module")
def records() -> list[dict]:
    with gzip.open(SUBSET, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _docs(records: list[dict], n: int) -> list[dict]:
    return [{"id": i, "text": r["text"], "source": "test", "meta": {"label": r["label"]}, "annotations": {}}
            for i, r in enumerate(records[:n])]


def _pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=1"]))


def test_default_model_card_reports_held_out_metrics(model_path):
    card = json.loads(Path(sidecar_paths(model_path)[1]).read_text())
    stacked, fasttext_only = card["metrics"]["stacked"], card["metrics"]["fasttext_only"]
    # trained on ~3.1k records of the shipped subset, judged on its group-disjoint held-out fifth
    assert stacked["accuracy"] >= 0.94
    assert stacked["auc"] >= 0.97
    by = card["metrics"]["by_subtype"]
    gibberish = [by[s]["accuracy"] for s in ("word_salad", "markov_babble")]
    gibberish_ft = [by[s]["fasttext_only_accuracy"] for s in ("word_salad", "markov_babble")]
    assert sum(gibberish) > sum(gibberish_ft) + 0.3  # the second stage is what catches fluent gibberish
    assert card["data"]["split"].startswith("by group")


def test_model_scores_are_probabilities_and_reload_identically(model_path, records):
    model = QualityModel.load(model_path)
    texts = [r["text"] for r in records[:50]] + ["", "数据清洗", "a"]
    scores = model.score(texts)
    for key in ("score", "logit", "fasttext", "gibberish"):
        assert scores[key].shape == (len(texts),)
    assert (np.diff(scores["score"][np.argsort(scores["logit"])]) >= -1e-12).all()  # the logit ranks as the score
    for key in ("score", "fasttext"):
        assert ((scores[key] >= 0) & (scores[key] <= 1)).all()
    # the second stage (and its gibberish probability) runs exactly on what fastText passes
    second = scores["fasttext"] >= model.stacker.gate
    assert np.isfinite(scores["gibberish"][second]).all() and np.isnan(scores["gibberish"][~second]).all()
    np.testing.assert_allclose(scores["score"][~second], scores["fasttext"][~second])
    again = QualityModel.load(model_path).score(texts)
    np.testing.assert_allclose(again["score"], scores["score"])
    # batching does not change a document's score
    np.testing.assert_allclose(model.score(texts[:7])["score"], scores["score"][:7], rtol=1e-6, atol=1e-9)


def test_model_behind_a_filesystems_uri_is_copied_locally(tmp_path, model_path):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.localfilesystem import LocalFileSystem

    from transforms.quality.step import local_model_copy

    class PrefixedLocalFileSystem(LocalFileSystem):
        """Local files behind a URI scheme, standing in for gs:// or s3:// (Beam finds FileSystem subclasses)."""

        @classmethod
        def scheme(cls):
            return "corpusmilltest"

        def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
            return super().open(path.split("://", 1)[1], mime_type, compression_type)

        def exists(self, path):
            return super().exists(path.split("://", 1)[1])

    uri = "corpusmilltest://" + model_path
    local = local_model_copy(uri, str(tmp_path))
    assert local == str(tmp_path / Path(model_path).name)
    for original, copy in zip((model_path, *sidecar_paths(model_path)), (local, *sidecar_paths(local))):
        assert Path(copy).read_bytes() == Path(original).read_bytes()
    assert local_model_copy(model_path) == model_path  # local paths are used in place


def test_load_fails_clearly_without_the_sidecar(tmp_path, model_path):
    lone = tmp_path / "lone.bin"
    lone.write_bytes(Path(model_path).read_bytes())
    with pytest.raises(FileNotFoundError, match="order.npz"):
        QualityModel.load(str(lone))


def test_quality_filter_threshold_annotates_and_accounts_for_every_document(model_path, records):
    docs = _docs(records, 120)
    step = QualityStep(QualityConfig(), model_path)
    expected = [d["id"] for d, reason in zip(docs, step.apply([dict(d, annotations={}) for d in docs]))
                if reason is None]
    with _pipeline() as p:
        out = p | beam.Create(docs) | QualityFilter(QualityConfig(), model_path)
        assert_that(out["kept"] | "KeptIds" >> beam.Map(lambda d: d["id"]), equal_to(expected), label="kept")
        removed = out["removed"] | "Reasons" >> beam.Map(lambda d: (d["removed_by"], d["reason"],
                                                                    d["annotations"]["quality"]["score"] < 0.5))
        n_removed = len(docs) - len(expected)
        assert_that(removed, equal_to([("quality", "low_quality", True)] * n_removed), label="removed")
        annotated = out["kept"] | "Keys" >> beam.Map(
            lambda d: (tuple(sorted(d["annotations"])), tuple(sorted(d["annotations"]["quality"]))))
        assert_that(annotated, equal_to([(("quality",), ("fasttext", "gibberish", "logit", "score"))]
                                         * len(expected)),
                    label="annotations")
    labels = [r["label"] for r in records[:120]]
    kept_hq = sum(1 for i in expected if labels[i] == "hq")
    assert kept_hq / max(len(expected), 1) > 0.9


def test_quality_filter_disabled_passes_everything(model_path, records):
    docs = _docs(records, 20)
    with _pipeline() as p:
        out = p | beam.Create(docs) | QualityFilter(QualityConfig(enabled=False), model_path)
        assert_that(out["kept"] | beam.Map(lambda d: d["id"]), equal_to(list(range(20))), label="kept")
        assert_that(out["removed"], equal_to([]), label="removed")


def test_quality_filter_pareto_matches_the_pure_core(model_path, records):
    docs = _docs(records, 200)
    cfg = QualityConfig(mode="pareto", seed=5, batch_size=64)
    step = QualityStep(cfg, model_path)
    reasons = step.apply([dict(d, annotations={}) for d in docs])
    assert set(reasons) <= {None, "pareto_sampled_out"}
    assert step.apply([dict(d, annotations={}) for d in docs]) == reasons  # deterministic
    expected = [d["id"] for d, reason in zip(docs, reasons) if reason is None]
    with _pipeline() as p:
        out = p | beam.Create(docs) | QualityFilter(cfg, model_path)
        assert_that(out["kept"] | beam.Map(lambda d: d["id"]), equal_to(expected))


def test_quality_filter_top_fraction_keeps_about_the_fraction(model_path, records):
    docs = _docs(records, 200)
    cfg = QualityConfig(mode="top_fraction", top_fraction=0.3, batch_size=64)
    with _pipeline() as p:
        out = p | beam.Create(docs) | QualityFilter(cfg, model_path)
        n_kept = out["kept"] | "CountKept" >> beam.combiners.Count.Globally()
        n_removed = out["removed"] | "CountRemoved" >> beam.combiners.Count.Globally()
        assert_that(n_kept | "Near" >> beam.Map(lambda n: 50 <= n <= 70), equal_to([True]), label="kept")
        assert_that((n_kept, n_removed) | beam.Flatten() | "Sum" >> beam.CombineGlobally(sum), equal_to([200]),
                    label="total")
        reasons = out["removed"] | "Reason" >> beam.Map(lambda d: d["reason"]) | beam.Distinct()
        assert_that(reasons, equal_to(["below_top_fraction"]), label="reason")


def test_cli_train_and_score(tmp_path, records):
    from cli.main import main

    data = tmp_path / "labeled.jsonl"
    with open(data, "w", encoding="utf-8") as fh:
        for r in records[:700]:
            fh.write(json.dumps(r) + "\n")
        fh.write("{not json\n")  # a bad line is reported and skipped, never a traceback
    model = tmp_path / "m" / "quality.bin"
    assert main(["quality", "train", "--data", str(data), "--out", str(model), "--param", "epoch=5",
                 "--param", "folds=2", "--param", "bucket=20000", "--param", "quantize_cutoff=5000",
                 "--quantize"]) == 0
    for path in (model, *map(Path, sidecar_paths(str(model))), tmp_path / "m" / "quality.ftz"):
        assert path.exists(), path
    card = json.loads(Path(sidecar_paths(str(model))[1]).read_text())
    assert {"accuracy", "precision", "recall", "auc"} <= set(card["metrics"]["stacked"])
    assert card["data"]["skipped_lines"] == 1
    quantized_card = json.loads(Path(sidecar_paths(str(tmp_path / "m" / "quality.ftz"))[1]).read_text())
    assert quantized_card["metrics_quantized"]["accuracy"] > 0.8
    assert (tmp_path / "m" / "quality.ftz").stat().st_size < model.stat().st_size / 4

    inputs = tmp_path / "in.jsonl"
    with open(inputs, "w", encoding="utf-8") as fh:
        for i, r in enumerate(records[700:760]):
            fh.write(json.dumps({"doc": f"d{i}", "text": r["text"]}) + "\n")
        fh.write('{"doc": "broken", "text": 5}\n')  # quarantined with a reason
    scores = tmp_path / "scores.jsonl"
    assert main(["quality", "score", str(inputs), "--model", str(model), "--out", str(scores),
                 "--id-field", "doc", "--runner", "inprocess", "--workers", "1"]) == 0
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(f"d{i}" for i in range(60))
    assert all(set(r) == {"id", "score", "keep"} and r["keep"] == (r["score"] >= 0.5) for r in rows)
    # the same model through the pure core gives the same scores
    direct = QualityModel.load(str(model)).score([r["text"] for r in records[700:760]])["score"]
    by_id = {r["id"]: r["score"] for r in rows}
    np.testing.assert_allclose([by_id[f"d{i}"] for i in range(60)], direct, atol=1e-6)

    assert main(["quality", "score", str(inputs), "--model", str(tmp_path / "missing.bin"),
                 "--out", str(scores)]) == 2


@pytest.mark.skipif(not SHARED_EVAL.exists(), reason="../shared/eval is not present")
def test_default_model_on_the_shared_labelled_set(model_path):
    """Sanity check of the shipped default model on the full labelled set (which includes its own training
    documents, so this is no held-out figure: benchmarks/bench_quality.py measures those)."""
    with gzip.open(SHARED_EVAL, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh][:1500]
    scores = QualityModel.load(model_path).score([r["text"] for r in rows])["score"]
    correct = (scores >= 0.5) == np.array([r["label"] == "hq" for r in rows])
    assert correct.mean() > 0.95

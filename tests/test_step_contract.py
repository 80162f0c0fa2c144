"""The step contract: one routing tail for every step (counters, busy time, progress), build-time checks that
exit 2 before any worker starts, and the annotation namespace (every step writes only under its own name)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.steps import enabled_steps
from runio.layout import RunPaths

REPO = Path(__file__).resolve().parents[1]
DEMO_CORPUS = REPO / "data" / "demo" / "corpus.jsonl.gz"


def _counters(result, namespace: str) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(c.committed or 0)
    return out


def _slow_decision(doc):
    time.sleep(0.003)  # work the step does: it must show in busy_ms
    yield doc, ("odd_id" if doc["id"] % 2 else None)


def test_the_routing_tail_counts_marks_times_and_reports_progress(tmp_path):
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.beam_step import Route, timed
    from runio.progress import read_progress

    docs = [{"id": i, "text": f"doc {i}", "source": "t", "meta": {}, "annotations": {}} for i in range(12)]
    pipeline = beam.Pipeline(runner=FnApiRunner())
    out = (pipeline | beam.Create(docs)
           | "Decide" >> timed("toy", _slow_decision)
           | "Tail" >> Route("toy", str(tmp_path)))
    assert_that(out.kept | "KeptIds" >> beam.Map(lambda d: (d["id"], "removed_by" in d)),
                equal_to([(i, False) for i in range(0, 12, 2)]), label="kept")
    assert_that(out["removed"] | "Marks" >> beam.Map(lambda d: (d["id"], d["removed_by"], d["reason"])),
                equal_to([(i, "toy", "odd_id") for i in range(1, 12, 2)]), label="removed")
    result = pipeline.run()
    result.wait_until_finish()
    counters = _counters(result, "toy")
    assert counters["kept"] == 6 and counters["removed"] == 6
    assert counters["busy_ms"] >= 12 * 3
    assert counters.get("cpu_ms", 0) < counters["busy_ms"]  # sleeping is wall time, not CPU time
    assert read_progress(tmp_path) == {"toy": 12}


def _busy_decision(doc):
    deadline = time.thread_time() + 0.005  # CPU work: it must show in cpu_ms
    while time.thread_time() < deadline:
        pass
    yield doc, None


def test_a_step_counts_its_cpu_time():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.beam_step import timed

    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create([{"id": i} for i in range(10)]) | timed("burn", _busy_decision)
    result = pipeline.run()
    result.wait_until_finish()
    counters = _counters(result, "burn")
    assert counters["cpu_ms"] >= 10 * 5 - 2 and counters["busy_ms"] >= counters["cpu_ms"] - 2


# ---------------------------------------------------------------- checks when the graph is built

def _write_config(tmp_path: Path, demo_corpus, name: str = "checked") -> Path:
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in demo_corpus[:20]), encoding="utf-8")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "input": {"paths": [str(corpus)]},
                                    "output": {"runs_dir": str(tmp_path / "runs")},
                                    "runner": {"name": "inprocess", "workers": 1}}))
    return path


@pytest.mark.parametrize("overrides, field", [
    (["quality.model=/nonexistent/quality.bin"], "quality.model"),
    (["pii.ner=on", "pii.ner_model=no_such_spacy_model_xyz"], "pii.ner"),
    (["filters.default.min_words=500", "filters.default.max_words=100"], "filters.default.min_words"),
    (["near_dedup.keep=highest_quality"], "near_dedup.keep"),
], ids=["missing-quality-model", "ner-on-without-model", "impossible-threshold", "quality-rank-before-scores"])
def test_a_config_that_cannot_work_exits_2_before_any_worker_starts(tmp_path, demo_corpus, capsys, monkeypatch,
                                                                     overrides, field):
    from cli.main import main

    def no_pipeline(self, *args, **kwargs):
        raise AssertionError("a Beam pipeline was started")

    monkeypatch.setattr(beam.Pipeline, "run", no_pipeline)
    config = _write_config(tmp_path, demo_corpus)
    argv = ["prepare", str(config)] + [arg for item in overrides for arg in ("--set", item)]
    started = time.monotonic()
    assert main(argv) == 2
    elapsed = time.monotonic() - started
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err  # one line ...
    assert err[0].startswith(f"corpusmill prepare: {field}"), err[0]  # ... that names the field
    assert "Traceback" not in err[0]
    paths = RunPaths(tmp_path / "runs" / "checked")
    assert not any(p.exists() for p in (paths.docs, paths.removed, paths.quarantine, paths.dedup, paths.stats))
    assert elapsed < 60  # no model loaded, no input hashed, no worker started


def test_filter_thresholds_no_document_can_pass_are_refused():
    from transforms.base import StepConfigError
    from transforms.filters import FiltersConfig, Thresholds, check

    check(FiltersConfig())  # the defaults can work
    check(FiltersConfig(default=Thresholds(min_words=100, max_words=100)))
    with pytest.raises(StepConfigError, match=r"^filters\.cjk\.min_mean_word_len \(5\.0\) is above "
                                              r"filters\.cjk\.max_mean_word_len \(4\.0\)"):
        check(FiltersConfig(cjk=Thresholds(min_mean_word_len=5.0, max_mean_word_len=4.0)))
    with pytest.raises(StepConfigError, match=r"^filters\.default\.min_alpha_word_frac \(1\.5\) is above 1"):
        check(FiltersConfig(default=Thresholds(min_alpha_word_frac=1.5)))
    with pytest.raises(StepConfigError, match=r"^filters\.default\.max_dup_ngram_char_frac\.5 \(-0\.1\) is below 0"):
        check(FiltersConfig(default=Thresholds(max_dup_ngram_char_frac={5: -0.1})))


def test_near_dedup_ranks_by_quality_only_when_quality_ran_first():
    from pipelines.config import ConfigError, validate_config
    from pipelines.steps import StepContext, check_steps

    cfg = validate_config({"name": "x", "input": {"paths": ["a.jsonl"]}, "near_dedup": {"keep": "highest_quality"}})
    with pytest.raises(ConfigError, match=r"^near_dedup\.keep: highest_quality ranks by quality\.score"):
        check_steps(cfg, StepContext(RunPaths.of(cfg)))
    with pytest.raises(ConfigError, match=r"near_dedup\.quality_field: 'quality_score' is not <step>\.<key>"):
        validate_config({"name": "x", "input": {"paths": ["a.jsonl"]}, "near_dedup": {"quality_field": "quality_score"}})


# ---------------------------------------------------------------- the whole cleaning stage under the contract

def test_every_step_counts_times_reports_progress_and_annotates_only_its_own_namespace(tmp_path, monkeypatch):
    import pipelines.prepare as prepare
    from pipelines.config import validate_config
    from pipelines.progress import ProgressPrinter, progress_line
    from pipelines.run import run_stages
    from runio.progress import read_progress

    seen: dict[str, int] = {}
    lines: list[str] = []

    class RecordingPrinter(ProgressPrinter):
        def __exit__(self, *exc):  # the stage has ended: every worker's counters are on disk
            seen.update(read_progress(self.directory))
            lines.append(progress_line(seen, self.steps, {}, read_done=True))
            super().__exit__(*exc)

    monkeypatch.setattr(prepare, "ProgressPrinter", RecordingPrinter)
    block_list = tmp_path / "block.txt"  # the URL filter on too: the demo's records have corpus:// URLs
    block_list.write_text("re:^corpus://gcide/\n", encoding="utf-8")
    cfg = validate_config({"name": "contract", "input": {"paths": [str(DEMO_CORPUS)]},
                           "output": {"runs_dir": str(tmp_path / "runs")},
                           "runner": {"name": "inprocess", "workers": 1}, "pii": {"ner": "off"},
                           "url_filter": {"block_list": str(block_list)}})
    run_stages(cfg, ("clean",), log=lambda _: None)
    paths = RunPaths.of(cfg)
    stats = json.loads(paths.stats.read_text())
    steps = enabled_steps(cfg)  # every step the config enables, in the order they run
    assert {"url_filter", "normalize", "filters", "exact_dedup", "near_dedup", "quality", "pii"} <= set(steps)
    assert [row["step"] for row in stats["steps"]] == steps and stats["accounting"]["balanced"]
    for row in stats["steps"]:
        step = row["step"]
        assert row["busy_seconds"] > 0, row
        assert stats["counters"][f"{step}/kept"] == row["kept"], step
        assert stats["counters"].get(f"{step}/removed", 0) == row["removed"], step
    assert {row["step"] for row in stats["steps"] if row["removed"]} >= {"url_filter", "filters", "exact_dedup",
                                                                        "near_dedup", "quality"}
    # the progress line lists every step, with the documents each one saw
    assert {k: v for k, v in seen.items() if k != "read"} == {row["step"]: row["in"] for row in stats["steps"]}
    assert all(f" {step} " in lines[-1] for step in steps), lines[-1]

    # every annotation key is a step name; each step's results sit under its name
    kept = [json.loads(a) for p in sorted(paths.docs.glob("*.parquet"))
            for a in pq.read_table(p, columns=["annotations"]).column("annotations").to_pylist()]
    removed = [r for p in sorted(paths.removed.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    keys = {key for ann in kept + [json.loads(r["annotations"]) for r in removed] for key in ann}
    assert keys <= set(steps), keys - set(steps)
    assert all({"normalize", "filters", "quality", "pii"} <= set(ann) for ann in kept)
    # a model's score, or why none; the policy's route and the text-ness judge's score for the unsure/unmodelled
    policy_keys = {"route", "policy", "textness"}
    assert all(set(ann["quality"]) - policy_keys in ({"score", "logit", "fasttext", "gibberish"}, {"score", "skipped"})
               for ann in kept)
    assert all(ann["normalize"]["script"] in ("cjk", "other") for ann in kept)
    for row in removed:
        ann = json.loads(row["annotations"])
        assert row["removed_by"] in ann, row  # the deciding step recorded why
        if row["removed_by"] == "exact_dedup":
            assert set(ann["exact_dedup"]) == {"dup_of"}
        if row["removed_by"] == "near_dedup":
            assert {"cluster", "similarity"} <= set(ann["near_dedup"]) <= {"cluster", "similarity", "of_earlier_run"}

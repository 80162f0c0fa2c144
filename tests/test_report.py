"""The run report: numbers match stats.json and metrics.jsonl, every section degrades without its stage, and in
headless Chromium every chart draws something (and the checker catches a chart that draws nothing)."""
from __future__ import annotations

import io
import json
import math
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from report import build_report, load_run
from report.figures import pipeline_edges
from runio.files import append_jsonl
from runio.cost import CostConfig, record_stage
from runio.layout import RunPaths
from trainer_bridge.observe.alerts import AlertMonitor, AlertsConfig
from trainer_bridge.observe.metrics import MetricsLog

DOMAINS = ("austen", "gcide", "reviews_zh")
SAMPLE_PROMPTS = ("The", "In the beginning")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALL_HINT = "make system-tools, or apt-get install -y chromium chromium-driver"


# ------------------------------------------------------------------------------------ a run directory

def write_parquet(path: Path, rows: list[dict], schema) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def make_run(run_dir: Path, records: list[dict], *, shards: bool = True, train: bool = True) -> dict:
    """A run directory as the stages write it: docs/ and removed/ through the run-dir schemas, stats.json by the
    lead's own collect_stats, shards through tokenizer.shards, metrics through the trainer's MetricsLog and
    alerts through AlertMonitor. Texts are real (the demo corpus); decisions are spread over the steps."""
    from pipelines.prepare import collect_stats
    from beamio.write import DOCS_SCHEMA, REMOVED_SCHEMA, doc_row, removed_row
    from tokenizer.shards import write_shards

    rng = np.random.default_rng(7)
    kept, removed = [], []
    reasons = [("filters", "gopher_min_words"), ("filters", "fineweb_char_dup"), ("exact_dedup", "exact_duplicate"),
               ("near_dedup", "near_duplicate"), ("quality", "low_quality")]
    for i, record in enumerate(records[:60]):
        text = record["text"]
        ann = {"filters": {"n_words": len(text.split())}, "quality": {"score": round(float(rng.uniform(0.2, 1.0)), 4)}}
        doc = {"id": 1000 + i, "text": text, "source": "demo.jsonl.gz", "meta": {}, "annotations": ann}
        if i % 3 == 2:
            step, reason = reasons[(i // 3) % len(reasons)]
            if step == "exact_dedup":
                ann["exact_dedup"] = {"dup_of": 1000 + i - 2}
            if step == "near_dedup":
                ann["near_dedup"] = {"cluster": 1000 + (i % 4)}
            removed.append(removed_row({**doc, "removed_by": step, "reason": reason}))
        else:
            ann["pii"] = {"EMAIL_ADDRESS": i % 3, "PERSON": 1} if i % 5 else {}
            if i % 4 == 0:
                ann["near_dedup"] = {"cluster": 1000 + (i % 4), "cluster_size": 2}
            kept.append(doc_row(doc))
    write_parquet(run_dir / "docs" / "docs-00000-of-00001.parquet", kept, DOCS_SCHEMA)
    write_parquet(run_dir / "removed" / "removed-00000-of-00001.parquet", removed, REMOVED_SCHEMA)
    (run_dir / "quarantine").mkdir()
    (run_dir / "quarantine" / "quarantine-00000.jsonl").write_text(
        json.dumps({"source": "demo.jsonl.gz", "position": 7, "kind": "bad_json", "reason": "x"}) + "\n")
    steps = ["normalize", "filters", "exact_dedup", "near_dedup", "quality", "pii"]
    counters = {("read", "documents"): len(kept) + len(removed), ("read", "quarantined"): 1,
                ("filters", "busy_ms"): 1234, ("pii", "busy_ms"): 5678}
    stats = collect_stats(run_dir, steps, counters)
    stats["cleaning_seconds"] = 12.5
    (run_dir / "stats.json").write_text(json.dumps(stats))
    (run_dir / "manifest.json").write_text(json.dumps({
        "status": "complete", "name": run_dir.name, "config_fingerprint": "feedc0de",
        "inputs": [{"path": "demo.jsonl.gz", "bytes": 123456, "sha256": "0" * 64}],
        "timings": {"cleaning_seconds": 12.5, "shards_seconds": 3.25, "train_seconds": 4.0}}))
    if shards:
        seq_len, vocab = 64, 512
        for split, ids in (("train", [d["id"] for d in kept[:-4]]), ("val", [d["id"] for d in kept[-4:]])):
            rows = []
            for doc_id in ids:
                used = int(rng.integers(20, seq_len + 1))
                tokens = np.zeros(seq_len, dtype=np.uint16)
                tokens[:used] = rng.integers(3, vocab, used)
                rows.append((tokens, [used], [doc_id]))
            write_shards(str(run_dir / "shards"), rows, split=split, seq_len=seq_len, vocab_size=vocab, pad_id=0,
                         bos_id=1, eos_id=2, tokenizer_sha256="ab" * 32, packing={"algorithm": "test"},
                         rows_per_shard=16)
    if train:
        log = MetricsLog(RunPaths(run_dir), enabled=True, tensorboard=False)
        alerts = AlertMonitor(AlertsConfig(loss_spike={"warmup_steps": 5}, throughput_drop={"window": 5}), run_dir)
        tokens_seen = 0
        for step in range(30):
            loss = 6.0 * math.exp(-step / 20) + 1.0 + (9.0 if step == 17 else 0.0)
            step_time = 0.2 if step != 23 else 0.9
            tokens_seen += 256
            record = {"loss": loss, "grad_norm": 1.0 / (1 + step), "lr": 1e-3 * min(1, (step + 1) / 5),
                      "loss_scale": 1.0, "real_tokens": 256, "sum_squared_segment_lengths": 4096, "step": step,
                      "step_time_s": step_time, "data_wait_s": 0.01, "data_wait_fraction": 0.01 / step_time,
                      "tokens_per_s": 256 / step_time, "mfu": 0.01 / step_time, "tokens_seen": tokens_seen,
                      "samples": 4 * (step + 1), "peak_memory_bytes": 2**27 + step * 2**20,
                      "skipped_bad_steps": int(step >= 17), "skipped_overflow_steps": 0, "rollbacks": 0,
                      # a distillation run's parts of the loss (train.distill, alpha 0.5)
                      "ce_loss": loss + 0.5, "kl_loss": loss - 0.5,
                      # an MoE model's routing (4 experts in layers 1 and 3): layer 3's expert 0 grows hot
                      "moe_expert_load": {"1": [64, 64, 64, 64], "3": [64 + 4 * step, 64, 64, max(0, 64 - 4 * step)]},
                      "moe_dropped_tokens": step % 3, "moe_dropped_fraction": (step % 3) / 512,
                      "moe_aux_loss": 0.01 + 0.001 * step}
            if step == 17:
                record["event"] = "skipped: loss spike"
            if step % 10 == 9:
                record["val_loss"] = loss + 0.1
                record["val_loss_by_domain"] = {d: loss + 0.1 + k * 0.3 for k, d in enumerate(DOMAINS)}
                for prompt in SAMPLE_PROMPTS:  # as the trainer's Sampler writes them (after step + 1 steps)
                    append_jsonl(RunPaths(run_dir).samples_jsonl, {
                        "step": step + 1, "prompt": prompt, "completion": f" continued after {step + 1} steps",
                        "tokens": [5, 6, 7], "stop": "max_new_tokens"})
            log.log(record)
            alerts.observe(step, record)
        log.close()
        alerts.close()
    cost_cfg = CostConfig(price_per_kwh=0.3, price_per_cpu_hour=0.05, carbon_g_per_kwh=350, currency="EUR",
                          project={"tokens": 1e12})
    for stage, wall, cpu in (("clean", 12.5, 30.25), ("shards", 3.25, 4.5), ("train", 4.0, 7.75)):
        if (stage == "shards" and not shards) or (stage == "train" and not train):
            continue
        measured = {"wall_s": wall, "cpu_s": cpu, "gpus": 0, "runs": 1,
                    "energy": {"cpu": {"joules": cpu * 10.0, "source": "estimate", "assumption": "10 W per core"},
                               "gpu": {"joules": 0.0, "source": "none"}}}
        record_stage(RunPaths(run_dir).cost_json, stage, measured, cost_cfg,
                     documents_cleaned=stats["documents_read"] if stage == "clean" else None,
                     tokens_trained=30 * 256 if stage == "train" else None)
    return stats


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, demo_corpus) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "demo"
    run_dir.mkdir()
    make_run(run_dir, demo_corpus)
    build_report(run_dir)
    return run_dir


# ------------------------------------------------------------------------------------ numbers

class Tables(HTMLParser):
    """Cell text of every table with an id, and every chart name."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.charts: list[str] = []
        self.missing: list[str] = []
        self._table = None
        self._cell = None
        self._in_missing = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "div" and "chart" in (attrs.get("class") or "").split():
            self.charts.append(attrs["data-chart"])
        elif tag == "p" and attrs.get("class") == "missing":
            self._in_missing = True
            self.missing.append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "p":
            self._in_missing = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_missing:
            self.missing[-1] += data


def parse(path: Path) -> Tables:
    parser = Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def shard_doc_ids(path: Path) -> list[int]:
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as fh:
        return [i for ids in pa.ipc.open_file(fh).read_all().column("doc_ids").to_pylist() for i in ids]


def test_report_numbers_match_stats_and_metrics(full_run):
    stats = json.loads((full_run / "stats.json").read_text())
    metrics = [json.loads(line) for line in (full_run / "train" / "metrics.jsonl").read_text().splitlines()]
    shards = json.loads((full_run / "shards" / "manifest.json").read_text())
    page = parse(full_run / "report.html")

    steps = {row[0]: row[1:] for row in page.tables["pipeline-steps"][1:]}
    for row in stats["steps"]:
        shown = steps[row["step"]]
        assert [number(c) for c in shown[:3]] == [row["in"], row["kept"], row["removed"]], row["step"]
    assert number(steps["filters"][3]) == next(r["busy_seconds"] for r in stats["steps"] if r["step"] == "filters")

    edges = {(r[0], r[1]): r[2:] for r in page.tables["pipeline-edges"][1:]}
    assert number(edges[("input", "read")][0]) == stats["documents_read"]
    assert number(edges[("read", "quarantined: bad_json")][0]) == 1
    for row in stats["steps"]:
        for reason, count in row["removed_by_reason"].items():
            assert number(edges[(row["step"], f"{row['step']}: {reason}")][0]) == count
    last_step = stats["steps"][-1]["step"]
    assert number(edges[(last_step, "kept documents")][0]) == stats["kept"]
    # the language mix at every step (issue 15): the table's numbers are stats.json's
    mix = stats["languages"]
    table = page.tables["language-mix"]
    assert table[0][1:-2] == [f"into {row['step']}" for row in mix["steps"]]
    for cells in table[1:]:
        lang = cells[0]
        assert [number(c) for c in cells[1:-2]] == [row["docs"].get(lang, 0) for row in mix["steps"]]
        assert number(cells[-2]) == mix["kept"]["docs"].get(lang, 0)
    assert sum(number(cells[-2]) for cells in table[1:]) == stats["kept"]
    for split in ("train", "val"):
        docs, tokens = edges[("kept documents", f"{split} shards")]
        assert number(docs) == len({i for e in shards["splits"][split] for i in shard_doc_ids(full_run / "shards" / e["file"])})
        assert number(tokens) == shards["totals"][split]["tokens"]
    assert number(edges[("train shards", "model")][1]) == metrics[-1]["tokens_seen"]
    # documents are conserved along the graph: what enters a step leaves it, kept or removed
    flows = pipeline_edges(load_run(full_run))
    for node in ["read", *(r["step"] for r in stats["steps"])]:
        assert sum(e.documents for e in flows if e.target == node) == sum(e.documents for e in flows if e.source == node)

    facts = dict(page.tables["train-facts"][1:])
    assert number(facts["last step"]) == metrics[-1]["step"]
    assert number(facts["last loss"]) == pytest.approx(metrics[-1]["loss"], rel=1e-3)
    assert number(facts["last validation loss"]) == pytest.approx([m for m in metrics if "val_loss" in m][-1]["val_loss"],
                                                                  rel=1e-3)
    assert number(facts["tokens trained"]) == metrics[-1]["tokens_seen"]
    assert number(facts["mean tokens/s"]) == pytest.approx(np.mean([m["tokens_per_s"] for m in metrics]), rel=1e-3)
    assert number(facts["skipped steps"]) == 1
    assert number(facts["MoE dropped tokens (all steps)"]) == sum(m["moe_dropped_tokens"] for m in metrics)
    assert number(facts["MoE dropped-token share (mean)"]) == pytest.approx(
        np.mean([m["moe_dropped_fraction"] for m in metrics]), rel=1e-3)
    assert number(facts["MoE auxiliary loss (last)"]) == pytest.approx(metrics[-1]["moe_aux_loss"], rel=1e-3)

    alerts = [json.loads(line) for line in (full_run / "train" / "alerts.jsonl").read_text().splitlines()]
    assert {a["rule"] for a in alerts} >= {"loss_spike", "throughput_drop"}
    assert [(int(r[0]), r[1]) for r in page.tables["alerts"][1:]] == [(a["step"], a["rule"]) for a in alerts]
    totals = {r[0]: r[1:] for r in page.tables["shard-totals"][1:]}
    assert number(totals["train"][1]) == shards["totals"]["train"]["rows"]
    assert set(page.charts) == {"pipeline", "quality", "doc_chars", "doc_words", "dup_clusters", "pii", "shards",
                                "loss", "val-domains", "distill", "lr", "grad_norm", "throughput", "mfu", "memory", "data_wait", "skipped",
                                "expert-load", "alerts", "cost"}
    # samples: the newest step first, every fixed prompt, the continuation as written
    samples = page.tables["samples"][1:]
    assert [(int(r[0]), r[1], r[2]) for r in samples] == [
        (step, prompt, f" continued after {step} steps") for step in (30, 20, 10) for prompt in sorted(SAMPLE_PROMPTS)]
    pii = dict(page.tables["pii-spans"][1:])
    assert number(pii["PERSON"]) == sum(1 for i in range(60) if i % 3 != 2 and i % 5)


def test_report_cost_section_matches_cost_json(full_run):
    cost = json.loads((full_run / "cost.json").read_text())
    page = parse(full_run / "report.html")
    header, *rows = page.tables["cost-stages"]
    assert header[7] == "money (EUR)"
    shown = {row[0]: row for row in rows}
    assert list(shown) == [*cost["stages"], "total"]
    for stage, entry in [*cost["stages"].items(), ("total", cost["total"])]:
        row = shown[stage]
        assert number(row[1]) == entry["runs"]
        for cell, value in zip((row[2], row[3], row[5], row[7], row[8]),
                               (entry["wall_s"], entry["cpu_s"], entry["kwh"], entry["money"]["total"],
                                entry["co2_g"])):
            assert number(cell) == pytest.approx(value, rel=1e-3), stage
        assert row[6] == entry["energy_source"] == "estimate"
    rates = {row[0]: row[1:] for row in page.tables["cost-rates"][1:]}
    per_token = rates["per million tokens trained (train stage)"]
    assert number(per_token[2]) == pytest.approx(cost["per_million_tokens_trained"]["kwh"], rel=1e-3)
    assert number(per_token[3]) == pytest.approx(cost["per_million_tokens_trained"]["money"]["total"], rel=1e-3)
    projection = rates["projection: 1,000,000,000,000 tokens"]
    assert number(projection[2]) == pytest.approx(cost["projection"]["kwh"], rel=1e-3)
    assert number(projection[4]) == pytest.approx(cost["projection"]["co2_g"], rel=1e-3)
    per_doc = rates["per million documents cleaned (clean stage)"]
    assert number(per_doc[2]) == pytest.approx(cost["per_million_documents_cleaned"]["kwh"], rel=1e-3)
    assert "cost" in page.charts


def test_report_is_self_contained(full_run):
    text = (full_run / "report.html").read_text(encoding="utf-8")
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js travels inside the file
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"<link[^>]+href=\"http", text)


def test_report_degrades_stage_by_stage(tmp_path, demo_corpus):
    empty = tmp_path / "empty"
    empty.mkdir()
    page = parse(build_report(empty))
    assert page.charts == []
    assert any("cleaning stage has not run" in m for m in page.missing)
    assert any("Training has not run" in m for m in page.missing)
    assert any("no cost.json" in m for m in page.missing)

    cleaned = tmp_path / "cleaned"
    cleaned.mkdir()
    make_run(cleaned, demo_corpus, shards=False, train=False)
    page = parse(build_report(cleaned))
    assert "pipeline" in page.charts and "shards" not in page.charts and "loss" not in page.charts
    assert any("No shards yet" in m for m in page.missing)
    assert any("Training has not run" in m for m in page.missing)

    # a torn metrics line (a crash mid-write) is skipped and said, the rest still plotted
    trained = tmp_path / "trained"
    trained.mkdir()
    make_run(trained, demo_corpus)
    with open(trained / "train" / "metrics.jsonl", "a") as fh:
        fh.write('{"loss": 1.0, "st')
    (trained / "shards" / "manifest.json").write_text("{not json")
    text = build_report(trained).read_text()
    assert "1 unreadable line(s) skipped" in text and "manifest.json: unreadable" in text
    assert "loss" in parse(trained / "report.html").charts


def test_report_cli(full_run, tmp_path, capsys):
    import argparse

    from cli import report as cmd_report

    parser = argparse.ArgumentParser()
    cmd_report.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "r.html"
    args = parser.parse_args(["report", str(full_run), "--out", str(out)])
    assert args.handler(args) == 0 and out.stat().st_size > 1_000_000
    args = parser.parse_args(["report", str(tmp_path / "nope")])
    assert args.handler(args) == 2
    assert "no such run directory" in capsys.readouterr().err
    # a folder that is not a run (its shards folder, an empty one) is refused, nothing written into it
    (tmp_path / "empty").mkdir()
    for folder in (full_run / "shards", tmp_path / "empty"):
        args = parser.parse_args(["report", str(folder)])
        assert args.handler(args) == 2 and "not a run directory" in capsys.readouterr().err
        assert not (folder / "report.html").exists()
    args = parser.parse_args(["report", str(full_run), "--out", str(tmp_path)])
    assert args.handler(args) == 2 and "is a directory" in capsys.readouterr().err
    for bad in ("0", "-5"):
        args = parser.parse_args(["report", str(full_run), "--max-docs", bad])
        assert args.handler(args) == 2 and "--max-docs must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["report", str(full_run), "--max-docs", "many"])


# ------------------------------------------------------------------------------------ headless Chromium

# Drawn marks per chart: plotly draws traces as SVG paths (lines, bars, histogram bins, sankey links/nodes).
DRAWN_MARKS_JS = """
const out = {};
for (const box of document.querySelectorAll('div.chart')) {
  const gd = box.querySelector('.js-plotly-plot');
  const marks = gd ? gd.querySelectorAll(
      'g.trace path.js-line, g.trace path.point, g.points path, g.sankey-link path, path.sankey-link, ' +
      'g.sankey-node rect, rect.node-rect, g.hm image') : [];  // g.hm image: a heat map's cells
  let drawn = 0;
  for (const m of marks) { const b = m.getBBox(); if (b.width * b.height > 0 || (m.getAttribute('d') || '').length > 8) drawn++; }
  out[box.dataset.chart] = {drawn: drawn, traces: gd && gd.data ? gd.data.length : 0};
}
return out;
"""


def colored_pixels(png: bytes) -> int:
    """Pixels in a saturated colour: trace colours are saturated, axes, grid and text are grey."""
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 60).sum())


def empty_charts(driver, path: Path) -> dict[str, str]:
    """Load the report; return {chart: why it is empty} for every chart that draws nothing."""
    from selenium.webdriver.common.by import By

    driver.get(path.as_uri())  # returns after the load event: every Plotly.newPlot has run
    marks = driver.execute_script(DRAWN_MARKS_JS)
    empty = {}
    for box in driver.find_elements(By.CSS_SELECTOR, "div.chart"):
        name = box.get_attribute("data-chart")
        driver.execute_script("arguments[0].scrollIntoView()", box)
        if marks[name]["drawn"] == 0:
            empty[name] = f"no drawn SVG marks ({marks[name]})"
        elif colored_pixels(box.screenshot_as_png) < 200:
            empty[name] = "screenshot shows no data colours"
    return empty


@pytest.fixture(scope="module")
def chromium():
    # `make test` installs Chromium (make system-tools): missing is a failure, not a skip
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), f"Chromium not installed ({INSTALL_HINT})"
    from selenium import webdriver  # a project test dependency (selenium==4.50.0): missing is an error, not a skip
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-extensions", "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_every_chart_draws_in_chromium(full_run, chromium, tmp_path):
    assert empty_charts(chromium, full_run / "report.html") == {}
    # the numbers the browser plotted: the Sankey's links are the stats' edges
    stats = json.loads((full_run / "stats.json").read_text())
    link = chromium.execute_script("return document.getElementById('chart-pipeline').data[0].link")
    labels = chromium.execute_script("return document.getElementById('chart-pipeline').data[0].node.label")
    by_target = {labels[t].split("<br>")[0].split(" ")[0]: v for t, v in zip(link["target"], link["value"])}
    assert by_target["read"] == stats["documents_read"]
    assert by_target["kept"] == stats["kept"]
    loss = chromium.execute_script("return document.getElementById('chart-loss').data[0].y")
    metrics = [json.loads(line) for line in (full_run / "train" / "metrics.jsonl").read_text().splitlines()]
    assert loss == pytest.approx([m["loss"] for m in metrics])
    # one validation curve per domain, drawn (checked non-empty above), with the logged values
    curves = chromium.execute_script(
        "return document.getElementById('chart-val-domains').data.map(t => [t.name, t.y])")
    assert sorted(name for name, _ in curves) == sorted(DOMAINS)
    for name, y in curves:
        assert y == pytest.approx([m["val_loss_by_domain"][name] for m in metrics if "val_loss_by_domain" in m])
    kl = chromium.execute_script("return document.getElementById('chart-distill').data.map(t => [t.name, t.y])")
    assert dict(kl)["KL to the teacher"] == pytest.approx([m["kl_loss"] for m in metrics])
    # the expert-load heat map: each layer's share of the tokens routed to each expert, summed over the run
    heat = chromium.execute_script("return document.getElementById('chart-expert-load').data[0]")
    assert heat["y"] == ["layer 1", "layer 3"]
    for row, layer in zip(heat["z"], ("1", "3")):
        loads = np.sum([m["moe_expert_load"][layer] for m in metrics], axis=0)
        assert row == pytest.approx(list(loads / loads.sum()))
    assert heat["z"][0] == pytest.approx([0.25] * 4) and heat["z"][1][0] > 0.4 > 0.1 > heat["z"][1][3]

    # the cost section as the browser shows it: the kWh bars and the table's rows are cost.json's
    cost = json.loads((full_run / "cost.json").read_text())
    bars = chromium.execute_script("return document.getElementById('chart-cost').data[0]")
    assert bars["x"] == list(cost["stages"]) and bars["y"] == pytest.approx([e["kwh"] for e in cost["stages"].values()])
    shown = chromium.execute_script(
        "return [...document.querySelectorAll('#cost-stages tbody tr')].map(r => r.innerText.split('\\t')[0])")
    assert shown == [*cost["stages"], "total"]
    assert chromium.execute_script("return document.getElementById('cost-stages').getBoundingClientRect().height") > 50

    # the checker must catch an empty chart: blank one chart's data and load the page again
    text = (full_run / "report.html").read_text(encoding="utf-8")
    data_at = re.search(r'Plotly\.newPlot\(\s*"chart-lr",\s*', text).end()
    _, end = json.JSONDecoder().raw_decode(text, data_at)
    broken = tmp_path / "broken.html"
    broken.write_text(text[:data_at] + "[]" + text[end:], encoding="utf-8")
    assert set(empty_charts(chromium, broken)) == {"lr"}


def test_report_edge_cases(tmp_path):
    """An empty corpus draws no flow; metrics without step times fall back to a step axis; a resumed run's
    re-logged steps count once."""
    run_dir = tmp_path / "edge"
    run_dir.mkdir()
    (run_dir / "stats.json").write_text(json.dumps({"documents_read": 0, "quarantined": {"total": 0, "by_kind": {}},
                                                    "steps": [{"step": "filters", "in": 0, "kept": 0, "removed": 0,
                                                               "removed_by_reason": {}, "busy_seconds": 0.0}],
                                                    "kept": 0, "accounting": {"balanced": True}}))
    (run_dir / "train").mkdir()
    lines = [{"step": s, "loss": 3.0 - 0.1 * s} for s in (0, 1, 2, 1, 2, 3)]  # crashed after 2, resumed from 1
    lines[2]["time"], lines[3]["time"] = 100.0, 112.5
    (run_dir / "train" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    page = parse(build_report(run_dir))
    assert "pipeline" not in page.charts and any("No document was read" in m for m in page.missing)
    assert page.charts == ["loss"]
    facts = dict(page.tables["train-facts"][1:])
    assert number(facts["steps logged"]) == 4 and number(facts["steps re-logged after a resume"]) == 2
    assert page.tables["restarts"][1:] == [["2", "1", "2", "12.5"]]
    assert '"xaxis":{"title":{"text":"step"}' in (run_dir / "report.html").read_text().replace(" ", "")

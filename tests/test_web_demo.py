"""The web demo end to end (issue 45): `corpusmill run configs/web.yaml` from the shipped crawl's WARC records to a
trained model and report.html, with the records' accounting balanced and every kind of skipped record counted.
Training is shortened (a few steps, one process: two-rank training is the demo's test) to keep the suite's time;
everything else is the config as shipped."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_web_demo_goes_from_warc_records_to_a_trained_model_and_report(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", str(REPO / "configs/web.yaml"),
         "--set", f"output.runs_dir={tmp_path}", "--set", "train.steps=4", "--set", "train.mesh.dp=1", "--set", "train.checkpoint.interval=2",
         "--set", "train.eval.interval=2"],
        cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = tmp_path / "web"
    stats = json.loads((run / "stats.json").read_text())

    records = stats["records"]
    skipped = records["skipped"]["by_reason"]
    assert records["read"] == records["documents"] + records["skipped"]["total"] + records["quarantined"]
    # the crawl holds a request per response (pages, non-HTML responses, a 404 and a 301), its warcinfo, a revisit
    assert skipped["request_record"] == records["documents"] + skipped["content_type"] + skipped["http_status"]
    assert skipped["warcinfo_record"] == 1 and skipped["revisit_record"] == 1
    assert skipped["http_status"] == 2 and skipped["content_type"] >= 1

    steps = {row["step"]: row for row in stats["steps"]}
    assert list(steps)[:3] == ["url_filter", "extract", "normalize"]
    assert steps["url_filter"]["removed_by_reason"].get("blocked_url", 0) > 0
    assert steps["extract"]["kept"] > 0.9 * steps["extract"]["in"]  # documentation pages all have a main text
    accounting = stats["accounting"]
    assert accounting["balanced"] and accounting["read"] == records["documents"]
    assert {row["domain"] for row in stats["domains"]["rows"]} >= {"rust-lang.org", "nodejs.org"}

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["counts"]["kept"] > 50 and manifest["counts"]["skipped_records"] == records["skipped"]["total"]
    assert manifest["stages_done"] == ["clean", "shards", "train", "report"], manifest["stages_done"]
    assert (run / "train" / "checkpoints" / "step-00000004").is_dir()
    report = (run / "report.html").read_text()
    assert "Skipped records" in report and "Domains" in report
    texts = _kept_texts(run)
    assert texts and not any(tag in row["text"] for row in texts for tag in ("<div", "<script", "<nav", "</p>"))


def _kept_texts(run: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows = []
    for part in sorted((run / "docs").glob("*.parquet")):
        rows += pq.read_table(part, columns=["text"]).to_pylist()
    return rows

"""The run report: ``runs/<name>/report.html``, the whole run as one picture.

One self-contained HTML file (plotly.js is embedded inline, so it opens from disk with no network). It is
rebuilt from the run directory alone, so ``corpusmill report RUN_DIR`` works on any finished or half-finished
run and ``corpusmill run`` calls ``build_report`` at the end:

    stats.json, manifest.json            → header, pipeline graph (Sankey) and its edge table, step times
    docs/*.parquet, removed/*.parquet    → distributions (quality, lengths, duplicate clusters), PII spans
    shards/manifest.json                 → tokenizer and shard summary
    train/metrics.jsonl                  → loss, LR, grad norm, tokens/s, MFU, memory, data wait, skipped steps
    train/alerts.jsonl                   → alerts on the same time axis

Every input is optional: a stage that has not run (or whose file is unreadable) gets a sentence saying so,
never an empty chart. Each chart sits in ``<div class="chart" data-chart="NAME">`` so tests can find it.

Modules: ``config`` (the ``report`` config section), ``data`` (reading the run directory into ``RunData``),
``figures`` (plotly figures from it), ``build`` (the HTML page and ``build_report``).
"""
from report.build import build_report, render_html
from pipelines.report_config import ReportConfig
from report.data import RunData, load_run

__all__ = ["ReportConfig", "RunData", "build_report", "load_run", "render_html"]

"""The report page: one section per stage (run facts, pipeline, distributions, shards, training), and
``build_report``, which writes it into the run directory."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Iterable

from pipelines.report_config import ReportConfig
from report.data import RunData, _number, load_run
from report.figures import (_fmt, alerts_figure, cost_figure, distribution_figures, pipeline_edges, pipeline_figure, shard_figure,
                            step_seconds, training_figures)
from report.experiments import experiment_sections  # "Sweep" and "Does cleaning pay", when the run has them
from lineage.card import read_data_card
from report.page import html_chart, html_missing, html_section, html_table
from runio.files import write_atomic
from runio.layout import RunPaths
from trainer_bridge.checkpoint.names import complete_checkpoints


def header_section(data: RunData) -> str:
    m, s = data.manifest or {}, data.stats or {}
    name = m.get("name") or data.paths.name
    facts = [("run", name), ("status", m.get("status", "incomplete (no manifest.json)")),
             ("created", m.get("created")), ("config fingerprint", m.get("config_fingerprint"))]
    for key, value in sorted((m.get("timings") or {}).items()):
        facts.append((key.replace("_", " "), f"{value:.1f}" if _number(value) is not None else value))
    if m.get("empty"):
        facts.append(("result", "empty: no document survived cleaning (shards and training skipped)"))
    acc = s.get("accounting")
    if acc:
        facts.append(("accounting", f"read {acc.get('read', 0):,} = kept {acc.get('kept', 0):,} + removed "
                                    f"{acc.get('removed', 0):,} + quarantined {acc.get('quarantined', 0):,}: "
                                    + ("balanced" if acc.get("balanced") else "NOT BALANCED")))
    rec = s.get("records") or {}
    if (rec.get("skipped") or {}).get("total"):
        facts.append(("records", f"read {rec.get('read', 0):,} = documents {rec.get('documents', 0):,} + skipped "
                                 f"{rec['skipped']['total']:,} + quarantined {rec.get('quarantined', 0):,}"))
    body = html_table(("", ""), facts, "run-facts")
    if data.problems:
        body += '<ul class="problems">' + "".join(f"<li>{html.escape(p)}</li>" for p in data.problems) + "</ul>"
    return f"<header><h1>corpusmill run report: {html.escape(str(name))}</h1>{body}</header>"


def pipeline_section(data: RunData) -> str:
    if not data.stats:
        return html_section("Pipeline",
                            html_missing("The cleaning stage has not run: no stats.json in this run directory."),
                            "pipeline")
    edges = pipeline_edges(data)
    seconds = step_seconds(data.stats, data.manifest)
    if any(e.documents > 0 for e in edges):
        body = html_chart("pipeline", pipeline_figure(data, edges))
    else:
        body = html_missing("No document was read, so there is no flow to draw.")
    body += "<h3>Every edge</h3>" + html_table(
        ("from", "to", "documents", "tokens"),
        ((e.source, e.target, e.documents, e.tokens) for e in edges), "pipeline-edges")
    rows = [(row["step"], row.get("in"), row.get("kept"), row.get("removed"), seconds.get(row["step"]))
            for row in data.stats.get("steps", [])]
    steps_shown = {r[0] for r in rows}
    for stage, stage_seconds in seconds.items():  # whole stages, from manifest timings (clean, shards, train, ...)
        if stage not in steps_shown:
            rows.append((f"stage: {stage}", None, None, None, stage_seconds))
    body += "<h3>Steps</h3>" + html_table(("step", "in", "kept", "removed", "seconds"), rows, "pipeline-steps")
    body += language_mix_body(data.stats.get("languages") or {})
    skipped = (data.stats.get("records") or {}).get("skipped") or {}
    if skipped.get("total"):
        body += "<h3>Skipped records</h3>" + html_table(("reason", "records"),
                                                        sorted((skipped.get("by_reason") or {}).items()), "skipped")
    body += domains_body(data.stats.get("domains") or {})
    q = data.stats.get("quarantined") or {}
    if q.get("total"):
        body += "<h3>Quarantined input</h3>" + html_table(("kind", "records"), sorted((q.get("by_kind") or {}).items()),
                                                       "quarantine")
    if data.shards is None:
        skipped = _skipped(data, "shards")
        body += html_missing(f"The shards stage was skipped: {skipped}." if skipped else
                             "Tokenizing and packing have not run: no shards/manifest.json, so the graph ends at the "
                             "kept documents.")
    return html_section("Pipeline", body, "pipeline")


def domains_body(domains: dict) -> str:
    """The URL filter's per-domain counts (stats.json ``domains``), when the step ran: the largest registered
    domains, the others summed, documents without a URL apart."""
    if not domains:
        return ""
    rows = [(row["domain"], row["documents"], row["kept"], row["removed"],
             ", ".join(f"{step} {n}" for step, n in (row.get("removed_by") or {}).items()))
            for row in domains.get("rows", [])]
    other = domains.get("other") or {}
    if other.get("domains"):
        rows.append((f"other ({other['domains']} domains)", other["documents"], other["kept"], other["removed"], ""))
    no_url = domains.get("without_url") or {}
    if no_url.get("documents"):
        rows.append(("(no url)", no_url["documents"], no_url["kept"], no_url["removed"], ""))
    return (f"<h3>Domains</h3><p>Registered domains of the documents' URLs ({domains.get('domains', 0)} in all), "
            f"most documents first.</p>"
            + html_table(("domain", "documents", "kept", "removed", "removed by step"), rows, "domains"))


def language_mix_body(mix: dict) -> str:
    """stats.json's language mix: documents (and word units) of each language entering every step, and kept;
    then each language's quality scoring (scored, skipped and why, and what the policy for unmodelled and unsure
    languages decided: quality.unmodelled / quality.unsure)."""
    steps, kept = mix.get("steps") or [], mix.get("kept") or {}
    langs = list((steps[0]["docs"] if steps else {}) or kept.get("docs") or {})
    if not langs:
        return ""
    header = ("language", *(f"into {row['step']}" for row in steps), "kept", "kept word units")
    rows = [(lang, *((row.get("docs") or {}).get(lang, 0) for row in steps), (kept.get("docs") or {}).get(lang, 0),
             (kept.get("tokens") or {}).get(lang, 0)) for lang in langs]
    body = "<h3>Languages at every step (documents)</h3>" + html_table(header, rows, "language-mix")
    quality = mix.get("quality") or {}
    if quality:
        body += html_table(("language", "quality-scored", "no model (reason: documents)",
                            "policy (route/policy: kept, removed)"),
                           ((lang, q.get("scored"), ", ".join(f"{k}: {v}" for k, v in (q.get("skipped") or {}).items())
                             or "none", "; ".join(f"{k}: {c.get('kept', 0)} kept, {c.get('removed', 0)} removed"
                                                  for k, c in (q.get("policy") or {}).items()) or "none")
                            for lang, q in quality.items()), "language-quality")
    return body


def distributions_section(data: RunData, cfg: ReportConfig) -> str:
    if data.docs is None:
        text = ("No document was read or kept, so there are no distributions (an empty result)."
                if (data.manifest or {}).get("empty") else "No docs/ or removed/ Parquet files yet.")
        return html_section("Distributions", html_missing(text), "distributions")
    figures, notes = distribution_figures(data.docs, cfg.histogram_bins)
    body = "".join(html_chart(n, f) for n, f in figures) + "".join(html_missing(n) for n in notes)
    if not data.docs.pii_spans:
        body += html_missing("PII: no span was masked in the kept documents (or the PII step did not run).")
    else:
        body += "<h3>PII spans masked</h3>" + html_table(("entity type", "spans"), data.docs.pii_spans.most_common(),
                                                         "pii-spans")
    if data.docs.truncated:
        body += html_missing(f"Distributions cover the first {data.docs.kept_scanned:,} kept and "
                             f"{data.docs.removed_scanned:,} removed documents (report.max_docs_scanned).")
    return html_section("Distributions", body, "distributions")


def shards_section(data: RunData) -> str:
    sh = data.shards
    if sh is None:
        skipped = _skipped(data, "shards")
        text = f"No shards: the stage was skipped ({skipped})." if skipped else \
            "No shards yet (shards/manifest.json is missing)."
        return html_section("Tokenizer and shards", html_missing(text), "shards")
    packing = sh.get("packing") or {}
    facts = [("vocab size", sh.get("vocab_size")), ("sequence length", sh.get("seq_len")), ("dtype", sh.get("dtype")),
             ("pad / bos / eos", f"{sh.get('pad_id')} / {sh.get('bos_id')} / {sh.get('eos_id')}"),
             ("tokenizer sha256", str(sh.get("tokenizer_sha256", ""))[:16]),
             ("packing", packing.get("algorithm")), ("fill ratio", packing.get("fill_ratio"))]
    body = html_table(("", ""), facts, "shard-facts")
    totals = sh.get("totals") or {}
    body += html_table(("split", "shards", "rows", "documents", "tokens", "padding", "fill", "docs split across rows"),
                       ((split, t.get("shards"), t.get("rows"), t.get("docs"), t.get("tokens"), t.get("padding"),
                     t.get("fill_ratio"), t.get("docs_split")) for split, t in sorted(totals.items())), "shard-totals")
    check = sh.get("tokenizer_check") or {}
    if check.get("by_language"):  # a tokenizer that covers a language poorly encodes it near byte level
        body += html_table(("language", "bytes per token", "documents sampled", "bytes", "tokens"),
                           ((lang, row.get("bytes_per_token"), row.get("docs"), row.get("bytes"), row.get("tokens"))
                        for lang, row in check["by_language"].items()), "tokenizer-languages")
        body += "".join(f"<p class='warning'>{html.escape(w)}</p>" for w in check.get("warnings", []))
    fig = shard_figure(sh)
    body += html_chart("shards", fig) if fig is not None else html_missing("The shard manifest lists no shard files.")
    return html_section("Tokenizer and shards", body, "shards")


def training_section(data: RunData) -> str:
    if not data.metrics:
        skipped = _skipped(data, "train")
        text = "Training has not run: no train/metrics.jsonl." if not data.paths.train.is_dir() else \
            "Training started but logged no step yet (train/metrics.jsonl is empty)."
        if skipped:
            text = f"Training was skipped: {skipped}."
        body = html_missing(text)
        if data.alerts:
            body += alerts_body(data)
        return html_section("Training", body, "training")
    figures, notes = training_figures(data)
    last = data.metrics[-1]
    val = [r for r in data.metrics if _number(r.get("val_loss")) is not None]
    last_step = last.get("step")
    completed = last_step + 1 if isinstance(last_step, int) and not isinstance(last_step, bool) else None
    # "steps completed" is what the console's "done: N/M steps completed" says; steps are numbered from 0.
    facts = [("steps logged", len(data.metrics)), ("steps completed", completed), ("last step", last_step),
             ("last loss", _number(last.get("loss"))),
             ("last validation loss", _number(val[-1]["val_loss"]) if val else None),
             ("tokens trained", last.get("tokens_seen")),
             ("mean tokens/s", _mean(r.get("tokens_per_s") for r in data.metrics)),
             ("mean MFU", _mean(r.get("mfu") for r in data.metrics)),
             ("skipped steps", (last.get("skipped_bad_steps") or 0) + (last.get("skipped_overflow_steps") or 0)),
             ("rollbacks", last.get("rollbacks")), ("alerts", len(data.alerts))]
    moe_records = [r for r in data.metrics if "moe_dropped_fraction" in r]
    if moe_records:  # an MoE model: what capacity dropping and the auxiliary losses did
        facts += [("MoE dropped-token share (mean)", _mean(r.get("moe_dropped_fraction") for r in moe_records)),
                  ("MoE dropped tokens (all steps)", sum(r.get("moe_dropped_tokens") or 0 for r in moe_records)),
                  ("MoE auxiliary loss (last)", _number(moe_records[-1].get("moe_aux_loss")))]
    if data.relogged_steps:
        facts.append(("steps re-logged after a resume", data.relogged_steps))
    if data.restarts:
        facts.append(("restarts", len(data.restarts)))
    body = html_table(("", ""), facts, "train-facts")
    body += "".join(html_chart(n, f) for n, f in figures) + "".join(html_missing(n) for n in notes)
    body += samples_body(data)
    body += data_cards_body(data.paths)
    body += alerts_body(data)
    if data.restarts:
        keys = list(data.restarts[0])
        body += "<h3>Restarts seen in metrics.jsonl</h3>" + html_table(
            keys, ([r[k] for k in keys] for r in data.restarts), "restarts")
    if data.recovery:
        body += "<h3>Restarts and resumes</h3>" + html_table(RECOVERY_COLUMNS, recovery_rows(data.recovery), "recovery")
    return html_section("Training", body, "training")


SAMPLE_STEPS_SHOWN = 5
CARD_SOURCES_SHOWN = 3


def data_cards_body(paths: RunPaths) -> str:
    """What each checkpoint had seen (its ``data_card.json``, docs/compliance.md), withdrawn documents first."""
    rows = []
    for checkpoint in complete_checkpoints(paths.checkpoints):
        card = read_data_card(paths, checkpoint)
        if card is None:
            rows.append((checkpoint.name, None, None, "no data card", None))
        elif "unknown" in card:
            rows.append((checkpoint.name, None, None, card["unknown"], None))
        else:
            withdrawn = card["withdrawn"]
            sources = ", ".join(f"{name} {v['tokens']}" for name, v in list(card["by_source"].items())[:CARD_SOURCES_SHOWN])
            rows.append((checkpoint.name, card["tokens"], card["documents"], sources,
                         f"{withdrawn['tokens']} tokens of {withdrawn['documents']} documents"
                         if withdrawn["documents"] else "none"))
    if not rows:
        return ""
    return "<h3>Data seen per checkpoint</h3>" + html_table(
        ("checkpoint", "tokens", "documents", "tokens by source (largest)", "withdrawn since (takedown ledger)"),
        rows, "data-cards")


def samples_body(data: RunData) -> str:
    """The greedy samples of the last SAMPLE_STEPS_SHOWN sampling steps, newest first (a step re-run after a
    resume shows its last samples)."""
    latest: dict[tuple, dict] = {}
    for record in data.samples:
        if isinstance(record.get("step"), int):
            latest[(record["step"], str(record.get("prompt")))] = record
    if not latest:
        return ""
    steps = sorted({step for step, _ in latest}, reverse=True)[:SAMPLE_STEPS_SHOWN]
    rows = [(step, prompt, str(r.get("completion", "")), r.get("stop"))
            for (step, prompt), r in sorted(latest.items(), key=lambda kv: (-kv[0][0], kv[0][1]))
            if step in steps]
    return ("<h3>Samples (greedy, fixed prompts; <code>train/samples.jsonl</code>)</h3>"
            + html_table(("after step", "prompt", "continuation", "stop"), rows, "samples"))


COST_COLUMNS = ("stage", "runs", "wall s", "CPU s", "GPU hours", "kWh", "energy source", "money", "CO₂ g")


def _money(entry: dict) -> Any:
    return (entry.get("money") or {}).get("total")


def cost_section(data: RunData) -> str:
    """cost.json: per stage and in total, the rates per million tokens trained / documents cleaned, and the
    projection for ``cost.project.tokens``. Estimated energy says so in its source column."""
    cost = data.cost
    if not cost or not cost.get("stages"):
        return html_section("Cost", html_missing("No stage has been measured yet: no cost.json in this run directory."),
                            "cost")
    currency = cost.get("currency", "")
    rows = [(stage, e.get("runs"), e["wall_s"], e["cpu_s"], e.get("gpu_hours"), e["kwh"], e["energy_source"],
             _money(e), e.get("co2_g")) for stage, e in cost["stages"].items()]
    total = cost.get("total")
    if total:
        rows.append(("total", total.get("runs"), total["wall_s"], total["cpu_s"], total.get("gpu_hours"),
                     total["kwh"], total["energy_source"], _money(total), total.get("co2_g")))
    columns = tuple(f"money ({currency})" if c == "money" else c for c in COST_COLUMNS)
    body = html_table(columns, rows, "cost-stages")
    if any("estimate" in e["energy_source"] for e in cost["stages"].values()):
        body += html_missing(f"CPU energy marked 'estimate' is CPU seconds × {_fmt(cost.get('watts_per_core'))} W per "
                             "core (cost.watts_per_core): RAPL was not readable on this machine.")
    if total and total.get("money") is None:
        body += html_missing("No price configured (cost.price_per_kwh, price_per_cpu_hour, price_per_gpu_hour): no "
                             "money computed.")
    rates = []
    for label, key in (("per million tokens trained (train stage)", "per_million_tokens_trained"),
                       ("per million documents cleaned (clean stage)", "per_million_documents_cleaned")):
        r = cost.get(key)
        if r:
            rates.append((label, r["wall_s"], r["cpu_s"], r["kwh"], (r.get("money") or {}).get("total"),
                          r.get("co2_g")))
    projection = cost.get("projection")
    if projection:
        rates.append((f"projection: {_fmt(projection['tokens'])} tokens", projection["wall_s"], projection["cpu_s"],
                      projection["kwh"], (projection.get("money") or {}).get("total"), projection.get("co2_g")))
    if rates:
        body += "<h3>Rates and projection</h3>" + html_table(
            ("", "wall s", "CPU s", "kWh", f"money ({currency})", "CO₂ g"), rates, "cost-rates")
    fig = cost_figure(cost)
    if fig is not None:
        body += html_chart("cost", fig)
    return html_section("Cost", body, "cost")


RECOVERY_COLUMNS = ("kind", "resumed from", "last step logged before", "first step after", "train.steps",
                    "last step logged at", "resumed at", "recovery seconds")


def _utc(seconds: Any) -> str | None:
    import time

    value = _number(seconds)
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value)) if value is not None else None


def recovery_rows(records: list[dict]) -> list[tuple]:
    """train/recovery.jsonl for people: the kind of each resume (a restart after a failure, a resume after an
    interruption, a deliberate extension of train.steps, an elastic job's worker group re-formed on another world
    size: "elastic: world 2 → 1", with its recovery seconds), readable times instead of epoch seconds. Lines of
    older versions (no ``kind``: written only after torchrun restarts) read as restarts after a failure."""
    rows = []
    for r in records:
        before, now = r.get("train_steps_before"), r.get("train_steps_now")
        steps = f"{before} → {now}" if before is not None and now is not None and before != now else now
        rows.append((r.get("kind", "restart after a failure"), r.get("resumed_from"),
                     r.get("last_logged_step", r.get("failed_after_step")), r.get("first_step_after",
                                                                                  r.get("first_step_after_restart")),
                     steps, r.get("last_record_utc") or _utc(r.get("last_record_time")),
                     r.get("resumed_utc") or _utc(r.get("resumed_at", r.get("recovered_at"))),
                     _number(r.get("recovery_seconds"))))
    return rows


def alerts_body(data: RunData) -> str:
    if not data.alerts:
        return html_missing("Alerts: none fired.")
    fig = alerts_figure(data)
    return ("<h3>Alerts</h3>" + (html_chart("alerts", fig) if fig is not None else "") + html_table(
        ("step", "rule", "action", "value", "threshold", "message"),
        ((a.get("step"), a.get("rule"), a.get("action"), _number(a.get("value")), _number(a.get("threshold")),
          a.get("message", "")) for a in data.alerts), "alerts"))


def _skipped(data: RunData, stage: str) -> str | None:
    """Why the run skipped ``stage`` (an empty result), from manifest.json, or None."""
    reason = ((data.manifest or {}).get("skipped") or {}).get(stage)
    return str(reason) if reason else None


def _mean(values: Iterable[Any]) -> float | None:
    finite = [v for v in (_number(x) for x in values) if v is not None]
    return sum(finite) / len(finite) if finite else None


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1200px;color:#1d3557}
h1{font-size:1.5em}h2{border-bottom:2px solid #e9ecef;padding-bottom:4px;margin-top:36px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.9em}td,th{border:1px solid #dee2e6;padding:3px 8px;
text-align:left}td:not(:first-child){font-variant-numeric:tabular-nums}th{background:#f1f3f5}
.missing{color:#6c757d;font-style:italic}.problems{color:#d62828}.chart{margin:8px 0 20px}
"""


def render_html(data: RunData, cfg: ReportConfig | None = None) -> str:
    from plotly.offline import get_plotlyjs

    cfg = cfg or ReportConfig()
    name = (data.manifest or {}).get("name") or data.paths.name
    body = (header_section(data) + pipeline_section(data) + distributions_section(data, cfg) + shards_section(data)
            + training_section(data) + cost_section(data))
    body += experiment_sections(data.paths)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>corpusmill report: {html.escape(str(name))}</title><style>{STYLE}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>{body}</body></html>")


def build_report(run: RunPaths | str | Path, cfg: ReportConfig | None = None, out: Path | None = None) -> Path:
    """Write the run's ``report.html`` (or ``out``), atomically, from whatever the run directory holds; return
    its path. ``run`` is the run directory's layout (a plain path is taken as the run directory)."""
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    if not paths.root.is_dir():
        raise FileNotFoundError(f"{paths}: no such run directory")
    cfg = cfg or ReportConfig()
    out = Path(out) if out is not None else paths.report_html
    write_atomic(out, render_html(load_run(paths, cfg), cfg).encode("utf-8"))
    return out

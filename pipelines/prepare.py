"""`corpusmill prepare`: read → clean → write the run directory, with exact accounting.

The Beam graph reads as its steps; this module also owns the run directory's lifecycle: refuse to mix two
configs in one directory, clear an earlier attempt's outputs, count everything, check that the counts
balance, and write ``manifest.json`` last.
"""
from __future__ import annotations

import json
import platform
import time
from collections import Counter
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable

import apache_beam as beam
import pyarrow.parquet as pq

from beamio.beam_options import make_pipeline
from beamio.read import InputFile, resolve_inputs
from beamio.read_beam import ReadCorpus
from beamio.write import DOCS_SCHEMA, REMOVED_SCHEMA, WriteSorted, doc_row, jsonl_writer, parquet_writer, removed_row
from pipelines.clean_units import clean_in_units, counters_of, phased_clean_applies, plan_units, settings_digest
from pipelines.config import ConfigError, RunConfig
from pipelines.progress import ProgressPrinter
from pipelines.rundir import clear_outputs, count_parquet_rows, read_manifest
from pipelines.runners import dask_scheduler, shuffle_workers
from pipelines.steps import CleanDocuments, StepContext, check_steps, enabled_steps
from runio.files import write_json
from runio.layout import RunPaths
from tokenizer.build import build_shards
from transforms.url_filter import STEP as URL_FILTER, DomainTally

PACKAGES = ("corpusmill", "apache-beam", "datasketch", "presidio-analyzer", "spacy", "fasttext-numpy2",
            "tokenizers", "pyarrow", "torch", "pydantic")


class AccountingError(RuntimeError):
    """Documents were lost or invented between reading and writing: the run must not be trusted."""


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe_inputs(files: list[InputFile]) -> list[dict]:
    """The manifest's ``inputs``: where each file was read, the ``source`` its records carry, its size and
    its sha256 (the key its documents' ids derive from, and what a refresh recognises it by)."""
    return [{"path": f.path, "source": f.name, "bytes": f.bytes, "sha256": f.key} for f in files]


def previously_processed(against: tuple[RunPaths | str, ...]) -> set[str]:
    """Checksums of the inputs that earlier runs already processed (a refresh reads only new ones)."""
    seen: set[str] = set()
    for run in against:
        manifest = read_manifest(run)
        if manifest is None or "clean" not in manifest.get("stages_done", []):
            raise ConfigError(f"--against {run}: not a run whose cleaning stage completed (see its manifest.json)")
        seen.update(i["sha256"] for i in manifest.get("inputs", []))
        seen.update(manifest.get("inputs_seen", []))
    return seen


def build_cleaning_graph(p: beam.Pipeline, cfg: RunConfig, files: list[InputFile], ctx: StepContext) -> None:
    paths = ctx.paths
    target = cfg.output.target_shard_bytes
    # Spreading the documents after reading lets every worker clean a share of a file's documents; with one
    # worker it would only send every document through a shuffle and back (None: a runner of unknown size).
    read = p | "Read" >> ReadCorpus(cfg.input, files, progress_dir=ctx.progress_dir,
                                    spread_documents=ctx.workers is None or ctx.workers > 1)
    cleaned = read["docs"] | "Clean" >> CleanDocuments(cfg, ctx)
    (cleaned["kept"]
     | "DocRows" >> beam.Map(doc_row)
     | "WriteDocs" >> WriteSorted(str(paths.docs), paths.docs.name, ".parquet",
                                  parquet_writer(DOCS_SCHEMA),
                                  lambda r: len(r["text"]) + len(r["annotations"]) + 64, target))
    (cleaned["removed"]
     | "RemovedRows" >> beam.Map(removed_row)
     | "WriteRemoved" >> WriteSorted(str(paths.removed), paths.removed.name, ".parquet",
                                     parquet_writer(REMOVED_SCHEMA),
                                     lambda r: len(r["annotations"]) + 96, target))
    (read["quarantined"]
     | "WriteQuarantine" >> WriteSorted(str(paths.quarantine), paths.quarantine.name, ".jsonl", jsonl_writer,
                                        lambda r: 256, target, sort_key=lambda r: (r["source"], r["position"])))


def near_dedup_consistency(counters: dict[tuple[str, str], int]) -> list[str]:
    """Near-dedup's own cross-checks (its consistency counters, transforms/near_dedup/beam.py): a decision lost
    on its way to its document keeps that document without a trace in the accounting."""
    made = counters.get(("near_dedup", "decisions_made"), 0)
    applied = counters.get(("near_dedup", "decisions_applied"), 0)
    without_sketch = counters.get(("near_dedup", "labels_without_sketch"), 0)
    problems = []
    if made != applied:
        problems.append(f"step near_dedup: {made} decisions were made but {applied} reached their documents "
                        f"(the runner lost part of a stage's data)")
    if without_sketch:
        problems.append(f"step near_dedup: {without_sketch} documents of near-duplicate components arrived without "
                        f"their sketch (the runner lost part of a stage's data)")
    return problems


def collect_stats(run: RunPaths | Path, steps: list[str], counters: dict[tuple[str, str], int],
                  top_domains: int = 20) -> dict:
    """Count the outputs on disk and check them against what the reader counted. With the URL filter among the
    steps, also the per-domain counts (``domains``, the ``top_domains`` largest)."""
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    kept = count_parquet_rows(paths.docs)
    removed_by: dict[str, Counter] = {step: Counter() for step in steps}
    for path in sorted(paths.removed.glob("*.parquet")):
        table = pq.read_table(path, columns=["removed_by", "reason"])
        for step, reason in zip(table.column("removed_by").to_pylist(), table.column("reason").to_pylist()):
            removed_by.setdefault(step, Counter())[reason] += 1
    quarantined: Counter = Counter()
    for path in sorted(paths.quarantine.glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                quarantined[json.loads(line)["kind"]] += 1
    read_docs = counters.get(("read", "documents"), 0)
    read_quarantined = counters.get(("read", "quarantined"), 0)
    read_total = read_docs + read_quarantined
    n_quarantined = sum(quarantined.values())
    n_removed = sum(sum(c.values()) for c in removed_by.values())

    step_rows = []
    flowing = read_docs
    problems = []
    for step in steps:
        removed = sum(removed_by[step].values())
        counted = counters.get((step, "removed"))
        if counted is not None and counted != removed:
            problems.append(f"step {step}: its counter says {counted} removed, removed/ holds {removed}")
        step_rows.append({"step": step, "in": flowing, "kept": flowing - removed, "removed": removed,
                          "removed_by_reason": dict(sorted(removed_by[step].items())),
                          "busy_seconds": round(counters.get((step, "busy_ms"), 0) / 1000, 2),
                          "cpu_seconds": round(counters.get((step, "cpu_ms"), 0) / 1000, 2)})
        flowing -= removed
    unknown = set(removed_by) - set(steps)
    if unknown:
        problems.append(f"removed/ names steps that did not run: {sorted(unknown)}")
    if n_quarantined != read_quarantined:
        problems.append(f"reader quarantined {read_quarantined}, quarantine/ holds {n_quarantined}")
    if flowing != kept:
        problems.append(f"after the last step {flowing} documents should remain, docs/ holds {kept}")
    if read_total != kept + n_removed + n_quarantined:
        problems.append(f"read {read_total} != kept {kept} + removed {n_removed} + quarantined {n_quarantined}")
    records = record_accounting(counters)
    problems += records.pop("problems")
    problems += near_dedup_consistency(counters)
    warnings: list[str] = []  # (none at present: near-dedup's components are exact for any number of rounds)
    stats = {
        "warnings": warnings,
        "counters": {f"{ns}/{name}": value for (ns, name), value in sorted(counters.items())},
        "documents_read": read_total,
        "text_bytes_read": counters.get(("read", "text_bytes"), 0),
        "quarantined": {"total": n_quarantined, "by_kind": dict(sorted(quarantined.items()))},
        "records": records,
        "steps": step_rows,
        "kept": kept,
        "languages": language_mix(paths, steps),
        "accounting": {"read": read_total, "kept": kept, "removed": n_removed, "quarantined": n_quarantined,
                       # raw sources: the records that are no document by design (stats' ``records`` has why)
                       **({"skipped_records": records["skipped"]["total"]} if records["skipped"]["total"] else {}),
                       "balanced": not problems, "problems": problems},
    }
    if URL_FILTER in steps:
        stats["domains"] = domain_counts(paths, top_domains)
    return stats


def domain_counts(run: RunPaths | Path, top: int) -> dict:
    """Per registered domain (the URL filter's ``domain`` annotation), from the documents on disk: documents that
    entered the URL filter, kept at the end, removed (and by which step). The ``top`` largest by documents; the
    others summed; documents without a URL apart (``transforms.url_filter.DomainTally``)."""
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    tally = DomainTally()
    for path in sorted(paths.docs.glob("*.parquet")):
        for raw in pq.read_table(path, columns=["annotations"]).column("annotations").to_pylist():
            tally.add(json.loads(raw) if isinstance(raw, str) else raw)
    for path in sorted(paths.removed.glob("*.parquet")):
        table = pq.read_table(path, columns=["removed_by", "annotations"])
        for step, raw in zip(table.column("removed_by").to_pylist(), table.column("annotations").to_pylist()):
            tally.add(json.loads(raw) if isinstance(raw, str) else raw, removed_by=step)
    return tally.block(top)


def record_accounting(counters: dict[tuple[str, str], int]) -> dict:
    """The reader's records (WARC/ARC records, JSONL lines, Parquet rows, files): records read = documents +
    skipped (per reason: a WARC request record, a non-HTML response, ...) + quarantined, exactly. ``records`` is
    counted from the parsers' record numbering, the others from what they yielded, so a record lost without a
    trace shows as a difference (in ``problems``). JSONL, Parquet and text inputs: records = documents +
    quarantined."""
    read_docs = counters.get(("read", "documents"), 0)
    read_quarantined = counters.get(("read", "quarantined"), 0)
    skipped = counters.get(("read", "skipped"), 0)
    by_reason = {name.split("/", 1)[1]: value for (ns, name), value in sorted(counters.items())
                 if ns == "read" and name.startswith("skipped/")}
    read = counters.get(("read", "records"), 0)
    problems = []
    if sum(by_reason.values()) != skipped:
        problems.append(f"reader skipped {skipped} records, its reasons count {sum(by_reason.values())}")
    if read != read_docs + skipped + read_quarantined:
        problems.append(f"records read {read} != documents {read_docs} + skipped {skipped} + quarantined "
                        f"{read_quarantined}")
    return {"read": read, "documents": read_docs, "skipped": {"total": skipped, "by_reason": by_reason},
            "quarantined": read_quarantined, "problems": problems}


QUALITY_BINS = 10  # score histogram bins per language: [0, 0.1), ..., [0.9, 1.0]


def _language_of(annotations: dict) -> tuple[str, str]:
    """(language, where it came from) of a document: the langid step, else normalize's CJK-share heuristic."""
    lang = (annotations.get("langid") or {}).get("lang")
    if lang:
        return lang, "langid"
    script = (annotations.get("normalize") or {}).get("script")
    if script is not None:
        return f"script:{script}", "normalize.script"
    return "und", "none"


def language_mix(run: RunPaths | Path, steps: list[str]) -> dict:
    """The language mix at every stage of the funnel, from the documents on disk: per language, documents and
    tokens entering each step and kept at the end, and the quality-score distribution of each language.

    The language is ``langid.lang`` (``script:cjk`` / ``script:other`` when the langid step did not run). Tokens
    are the filters step's word units (``filters.n_words``: a CJK character is one, other words are separated by
    spaces), measured once per document; documents removed before the filters step have none (``unmeasured``).
    A document entered every step up to the one that removed it (kept ones: all of them)."""
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    order = {step: i for i, step in enumerate(steps)}
    # per language: [docs entering step i], [tokens entering step i]
    docs_in: dict[str, list[int]] = {}
    tokens_in: dict[str, list[int]] = {}
    unmeasured: Counter = Counter()
    kept_docs: Counter = Counter()
    kept_tokens: Counter = Counter()
    sources: Counter = Counter()
    hist: dict[str, list[int]] = {}
    skipped: dict[str, Counter] = {}
    textness_hist: dict[str, list[int]] = {}
    # per language: "route/policy" (unmodelled/judge, unsure/keep, ...) -> {"kept": n, "removed": n}
    policy: dict[str, dict[str, Counter]] = {}

    def add(annotations: dict, last: int, removed_by: str | None = None) -> str:
        lang, source = _language_of(annotations)
        sources[source] += 1
        n_words = (annotations.get("filters") or {}).get("n_words")
        d = docs_in.setdefault(lang, [0] * len(steps))
        t = tokens_in.setdefault(lang, [0] * len(steps))
        for i in range(min(last + 1, len(steps))):
            d[i] += 1
            t[i] += int(n_words or 0)
        if n_words is None:
            unmeasured[lang] += 1
        quality = annotations.get("quality") or {}
        if quality.get("score") is not None:
            bins = hist.setdefault(lang, [0] * QUALITY_BINS)
            bins[min(int(float(quality["score"]) * QUALITY_BINS), QUALITY_BINS - 1)] += 1
        elif quality.get("skipped"):
            skipped.setdefault(lang, Counter())[quality["skipped"]] += 1
        if quality.get("textness") is not None:
            bins = textness_hist.setdefault(lang, [0] * QUALITY_BINS)
            bins[min(int(float(quality["textness"]) * QUALITY_BINS), QUALITY_BINS - 1)] += 1
        if quality.get("route"):
            outcome = "removed" if removed_by == "quality" else "kept" if removed_by is None else "removed_later"
            policy.setdefault(lang, {}).setdefault(f"{quality['route']}/{quality.get('policy')}",
                                                   Counter())[outcome] += 1
        return lang

    for path in sorted(paths.docs.glob("*.parquet")):
        for raw in pq.read_table(path, columns=["annotations"]).column("annotations").to_pylist():
            ann = json.loads(raw) if isinstance(raw, str) else (raw or {})
            lang = add(ann, len(steps) - 1)
            kept_docs[lang] += 1
            kept_tokens[lang] += int((ann.get("filters") or {}).get("n_words") or 0)
    for path in sorted(paths.removed.glob("*.parquet")):
        table = pq.read_table(path, columns=["removed_by", "annotations"])
        for step, raw in zip(table.column("removed_by").to_pylist(), table.column("annotations").to_pylist()):
            ann = json.loads(raw) if isinstance(raw, str) else (raw or {})
            add(ann, order.get(step, len(steps) - 1), step)
    langs = sorted(docs_in, key=lambda lang: (-docs_in[lang][0], lang))
    by_step = [{"step": step,
                "docs": {lang: docs_in[lang][i] for lang in langs if docs_in[lang][i]},
                "tokens": {lang: tokens_in[lang][i] for lang in langs if docs_in[lang][i]}}
               for i, step in enumerate(steps)]
    return {
        "source": dict(sorted(sources.items())),
        "steps": by_step,
        "kept": {"docs": {lang: kept_docs[lang] for lang in langs if kept_docs[lang]},
                 "tokens": {lang: kept_tokens[lang] for lang in langs if kept_docs[lang]}},
        "unmeasured_docs": {lang: unmeasured[lang] for lang in langs if unmeasured[lang]},
        # per language: documents its model scored (and their histogram), those no model covers (skipped: why),
        # and those the policy for unmodelled / unsure languages decided (policy: "route/policy" -> kept,
        # removed by quality, removed by a later step; textness: the judge's histogram)
        "quality": {lang: {"scored": sum(hist.get(lang, [])), "histogram": hist.get(lang, [0] * QUALITY_BINS),
                           "skipped": dict(sorted(skipped.get(lang, Counter()).items())),
                           **({"policy": {key: dict(sorted(c.items())) for key, c in sorted(policy[lang].items())},
                               "textness_histogram": textness_hist.get(lang, [0] * QUALITY_BINS)}
                              if lang in policy else {})}
                    for lang in langs if lang in hist or lang in skipped or lang in policy},
        "quality_bins": [round(i / QUALITY_BINS, 2) for i in range(QUALITY_BINS + 1)],
    }


def summary_table(stats: dict) -> str:
    lines = [f"{'step':<14}{'in':>9}{'kept':>9}{'removed':>9}{'busy s':>9}  removed by reason",
             f"{'read':<14}{stats['documents_read']:>9}{stats['documents_read'] - stats['quarantined']['total']:>9}"
             f"{stats['quarantined']['total']:>9}"
             + (f"{'':>9}  quarantined: " + ", ".join(f"{k} {v}" for k, v in stats["quarantined"]["by_kind"].items())
                if stats["quarantined"]["by_kind"] else "")]
    for row in stats["steps"]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(row["removed_by_reason"].items(), key=lambda kv: -kv[1]))
        lines.append(f"{row['step']:<14}{row['in']:>9}{row['kept']:>9}{row['removed']:>9}"
                     f"{row['busy_seconds']:>9.1f}  {reasons}")
    mix = stats.get("languages") or {}
    if mix.get("steps"):
        entered, kept = mix["steps"][0]["docs"], mix["kept"]["docs"]
        lines.append("languages (kept of read): " + ", ".join(
            f"{lang} {kept.get(lang, 0)}/{n}" for lang, n in list(entered.items())[:8]))
    rec = stats.get("records") or {}
    if (rec.get("skipped") or {}).get("total"):  # raw sources: the funnel starts at the records
        lines.insert(0, f"records: read {rec['read']} = documents {rec['documents']} + skipped "
                        f"{rec['skipped']['total']} ("
                        + ", ".join(f"{k} {v}" for k, v in rec["skipped"]["by_reason"].items())
                        + f") + quarantined {rec['quarantined']}")
    domains = stats.get("domains")
    if domains and domains.get("rows"):
        lines.append(f"domains (kept of read, {domains['domains']} in all): " + ", ".join(
            f"{row['domain']} {row['kept']}/{row['documents']}" for row in domains["rows"][:8]))
    resume = stats.get("resume")
    if resume and any(resume["reused"].values()):
        lines.append(f"resumed: of {resume['units']} units, reused " + ", ".join(
            f"phase {phase} {n}" for phase, n in resume["reused"].items()) + " (done by an earlier attempt)")
    lines += [f"WARNING {w}" for w in stats.get("warnings", [])]
    acc = stats["accounting"]
    lines.append(f"accounting: read {acc['read']} = kept {acc['kept']} + removed {acc['removed']} + quarantined "
                 f"{acc['quarantined']}: {'balanced' if acc['balanced'] else 'NOT BALANCED'}")
    return "\n".join(lines)


def run_clean(cfg: RunConfig, against: tuple[str, ...] = (), log: Callable[[str], None] = print) -> dict:
    """The cleaning stage: inputs → docs/, removed/, quarantine/, dedup/, stats.json. Returns the stats.

    Beyond one unit of input (``runner.unit_bytes``), in units and phases (``pipelines.clean_units``): memory
    bounded by a unit, and a clean killed part way and run again redoes only the units it had not finished
    (``stats["resume"]`` says how many it reused). Both ways write the same files."""
    started = time.time()
    paths = RunPaths.of(cfg)
    earlier = tuple(RunPaths(run) for run in against)
    # every step's checks before anything is read in full or written: a config that cannot work exits 2 here
    check_steps(cfg, StepContext(paths, earlier))
    files = resolve_inputs(cfg.input.paths, log)
    clear_outputs(paths.cleaning_outputs)
    inputs = describe_inputs(files)
    seen = previously_processed(earlier) if earlier else set()
    new_inputs = [i for i in inputs if i["sha256"] not in seen]
    new_files = [f for f in files if f.key not in seen]
    if against:
        log(f"refresh: {len(inputs) - len(new_inputs)} of {len(inputs)} inputs were processed by earlier runs; "
            f"reading {len(new_inputs)} new")
    for folder in (paths.docs, paths.removed, paths.quarantine, paths.dedup):
        folder.mkdir(parents=True, exist_ok=True)
    clear_outputs((paths.progress,))
    ctx = StepContext(paths, earlier, input_bytes=sum(i["bytes"] for i in new_inputs),
                      workers=shuffle_workers(cfg.runner.name, cfg.runner.workers, cfg.runner.dask_address,
                                              cfg.runner.slurm))
    steps = enabled_steps(cfg, ctx)
    scheduler = dask_scheduler(cfg.runner, str(paths), log)
    resume = None
    if phased_clean_applies(cfg) and len(plan_units(new_files, cfg.runner.unit_bytes, cfg.input.format, log)) > 1:
        counters, resume = clean_in_units(cfg, new_files, ctx, settings_digest(cfg, against, ctx), log,
                                          dask_address=scheduler)
    else:  # one unit (the phases would only add fixed cost: same outputs), or quality's top_fraction (its
        # corpus-wide cut-off has no phase of its own yet): the one-graph clean
        clear_outputs((paths.clean_work,))
        pipeline = make_pipeline(cfg.runner.name, cfg.runner.workers, cfg.runner.options, scheduler,
                                 worker_memory=cfg.runner.worker_memory, input_bytes=ctx.input_bytes)
        build_cleaning_graph(pipeline, cfg, new_files, ctx)
        with ProgressPrinter(paths.progress, steps, log):
            result = pipeline.run()
            result.wait_until_finish()
        counters = counters_of(result)
    clear_outputs((paths.progress,))
    stats = collect_stats(paths, steps, counters, cfg.url_filter.top_domains)
    if resume is not None:
        stats["resume"] = resume
    stats["cleaning_seconds"] = round(time.time() - started, 2)
    stats["inputs"] = new_inputs
    stats["inputs_seen"] = sorted(seen | {i["sha256"] for i in new_inputs})
    write_json(paths.stats, stats)
    if not stats["accounting"]["balanced"]:
        raise AccountingError("accounting does not balance: " + "; ".join(stats["accounting"]["problems"]))
    return stats


def run_shards(cfg: RunConfig, log: Callable[[str], None] = print) -> dict:
    """The shard stage: train or load the tokenizer, then encode, pack and write shards/ from docs/."""
    clear_outputs((RunPaths.of(cfg).shards,))
    pipeline = make_pipeline(cfg.runner.name, cfg.runner.workers, cfg.runner.options,
                             dask_scheduler(cfg.runner, str(RunPaths.of(cfg)), log), worker_memory=cfg.runner.worker_memory)
    return build_shards(str(RunPaths.of(cfg)), cfg.tokenizer, cfg.packing, pipeline)


def base_manifest(cfg: RunConfig) -> dict:
    return {
        "name": cfg.name,
        "config_fingerprint": cfg.fingerprint(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runner": {"name": cfg.runner.name, "workers": cfg.runner.workers},
        "platform": {"python": platform.python_version(), "machine": platform.machine()},
        "packages": {p: _version(p) for p in PACKAGES},
    }

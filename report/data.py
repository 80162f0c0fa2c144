"""Reading a run directory into ``RunData``: what the report shows, every input optional.

A file that is missing means its stage has not run; one that cannot be read is said in ``RunData.problems``
(shown at the top of the report), never an error. Shards are read only through ``tokenizer.shards``.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.report_config import ReportConfig
from runio.files import read_jsonl
from runio.layout import RunPaths
from tokenizer.shards import count_documents, manifest_path
from transforms.base import step_annotations


@dataclass
class DocStats:
    """What the distributions need, gathered from the annotations of kept and removed documents."""

    kept_chars: list[int] = field(default_factory=list)
    kept_words: list[int] = field(default_factory=list)
    removed_words: list[int] = field(default_factory=list)
    quality_kept: list[float] = field(default_factory=list)
    quality_removed: list[float] = field(default_factory=list)
    quality_kept_unscored: Counter = field(default_factory=Counter)  # why -> kept documents without a score
    pii_spans: Counter = field(default_factory=Counter)  # entity type -> spans masked in kept documents
    near_clusters: Counter = field(default_factory=Counter)  # near-dup cluster id -> members seen
    exact_groups: Counter = field(default_factory=Counter)  # kept id -> exact copies removed
    kept_scanned: int = 0
    removed_scanned: int = 0
    truncated: bool = False


@dataclass
class RunData:
    paths: RunPaths
    manifest: dict | None = None
    stats: dict | None = None
    shards: dict | None = None
    metrics: list[dict] = field(default_factory=list)
    relogged_steps: int = 0
    restarts: list[dict] = field(default_factory=list)
    alerts: list[dict] = field(default_factory=list)
    recovery: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)  # train/samples.jsonl: greedy samples at validation time
    cost: dict | None = None  # cost.json (runio.cost)
    docs: DocStats | None = None
    problems: list[str] = field(default_factory=list)  # unreadable inputs, said at the top of the report


def _read_json(path: Path, problems: list[str]) -> dict | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        problems.append(f"{path.name}: unreadable ({error})")
        return None
    if not isinstance(value, dict):
        problems.append(f"{path.name}: expected a JSON object")
        return None
    return value


def _read_log(paths: RunPaths, path: Path, problems: list[str]) -> list[dict]:
    """Records of a JSON-lines log of the run; lines that do not parse (a torn last line after a crash) or are
    not objects are skipped, and said in one problem line."""
    if not path.is_file():
        return []
    where = path.relative_to(paths.root)
    torn: list[str] = []
    try:
        records = read_jsonl(path, torn)
    except (OSError, UnicodeDecodeError) as error:
        problems.append(f"{where}: unreadable ({error})")
        return []
    objects = [record for record in records if isinstance(record, dict)]
    if torn or len(objects) < len(records):
        problems.append(f"{where}: {len(torn) + len(records) - len(objects)} unreadable line(s) skipped")
    return objects


def _annotations(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def scan_documents(paths: RunPaths, limit: int, problems: list[str]) -> DocStats | None:
    """Annotations of kept (docs/) and removed (removed/) documents, up to ``limit`` of each."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    kept_files = sorted(paths.docs.glob("*.parquet"))
    removed_files = sorted(paths.removed.glob("*.parquet"))
    if not kept_files and not removed_files:
        return None
    out = DocStats()
    for path in kept_files:
        if out.kept_scanned >= limit:
            out.truncated = True
            break
        try:
            table = pq.read_table(path, columns=["text", "annotations"])
        except Exception as error:  # a damaged file must not stop the report
            problems.append(f"{path.relative_to(paths.root)}: unreadable ({error})")
            continue
        table = table.slice(0, limit - out.kept_scanned)
        out.kept_scanned += table.num_rows
        out.kept_chars.extend(pc.utf8_length(table.column("text")).to_pylist())
        for raw in table.column("annotations").to_pylist():
            ann = _annotations(raw)  # each step's results under its own name (Contract 1)
            words = _number(step_annotations(ann, "filters").get("n_words"))
            if words is not None:
                out.kept_words.append(int(words))
            quality = step_annotations(ann, "quality")
            score = _number(quality.get("score"))
            if score is not None:
                out.quality_kept.append(score)
            elif quality.get("skipped"):  # a script the model is not trained on: kept unscored
                out.quality_kept_unscored[str(quality["skipped"]).split(":", 1)[0]] += 1
            for entity, count in step_annotations(ann, "pii").items():
                if _number(count):
                    out.pii_spans[str(entity)] += int(count)
            cluster = step_annotations(ann, "near_dedup").get("cluster")
            if cluster is not None:
                out.near_clusters[str(cluster)] += 1
    for path in removed_files:
        if out.removed_scanned >= limit:
            out.truncated = True
            break
        try:
            table = pq.read_table(path, columns=["removed_by", "annotations"])
        except Exception as error:
            problems.append(f"{path.relative_to(paths.root)}: unreadable ({error})")
            continue
        table = table.slice(0, limit - out.removed_scanned)
        out.removed_scanned += table.num_rows
        for raw in table.column("annotations").to_pylist():
            ann = _annotations(raw)
            words = _number(step_annotations(ann, "filters").get("n_words"))
            if words is not None:
                out.removed_words.append(int(words))
            score = _number(step_annotations(ann, "quality").get("score"))
            if score is not None:
                out.quality_removed.append(score)
            cluster = step_annotations(ann, "near_dedup").get("cluster")
            if cluster is not None:
                out.near_clusters[str(cluster)] += 1
            dup_of = step_annotations(ann, "exact_dedup").get("dup_of")
            if dup_of is not None:
                out.exact_groups[str(dup_of)] += 1
    return out


def fill_split_documents(paths: RunPaths, shards: dict, problems: list[str]) -> None:
    """Older or hand-written manifests lack per-split document counts: count distinct ``doc_ids`` in the shards
    (read through the shard reader API, ``tokenizer.shards``)."""
    totals = shards.get("totals")
    if not isinstance(totals, dict):
        return
    for split, entries in (shards.get("splits") or {}).items():
        if split not in totals or "docs" in totals[split]:
            continue
        try:
            totals[split]["docs"] = count_documents(paths.shards, entries)
        except Exception as error:  # a damaged shard or manifest must not stop the report
            problems.append(f"{paths.shards.relative_to(paths.root)}/{split}: documents not countable ({error})")


def dedupe_metrics(records: list[dict]) -> tuple[list[dict], int]:
    """One record per step, the last one written: a resumed run re-logs the steps after its checkpoint."""
    by_step: dict[int, dict] = {}
    unstepped = []
    for record in records:
        step = record.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            by_step[step] = record
        else:
            unstepped.append(record)
    relogged = len(records) - len(unstepped) - len(by_step)
    return [by_step[s] for s in sorted(by_step)], relogged


def find_restarts(records: list[dict]) -> list[dict]:
    """Restarts show in metrics.jsonl as a step that does not follow the one before it (the resumed process
    re-logs from its checkpoint). With record times, the gap from the last step before to the first step after
    bounds the recovery time (failure → first completed step)."""
    restarts = []
    previous = None
    for record in records:
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        if previous is not None and step <= previous["step"]:
            before, after = _number(previous.get("time")), _number(record.get("time"))
            restarts.append({"last step before": previous["step"], "first step after": step,
                             "steps redone": previous["step"] - step + 1,
                             "seconds between them": round(after - before, 2) if before is not None and
                             after is not None else None})
        previous = record
    return restarts


def load_run(run: RunPaths | str | Path, cfg: ReportConfig | None = None) -> RunData:
    """Everything the report shows, read from the run directory (``run``: its layout, or its path)."""
    cfg = cfg or ReportConfig()
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    data = RunData(paths=paths)
    p = data.problems
    data.manifest = _read_json(paths.manifest, p)
    data.stats = _read_json(paths.stats, p)
    data.cost = _read_json(paths.cost_json, p)
    data.shards = _read_json(Path(manifest_path(paths.shards)), p)
    if data.shards is not None:
        fill_split_documents(paths, data.shards, p)
    raw_metrics = _read_log(paths, paths.metrics_jsonl, p)
    data.restarts = find_restarts(raw_metrics)
    data.metrics, data.relogged_steps = dedupe_metrics(raw_metrics)
    data.alerts = _read_log(paths, paths.alerts_jsonl, p)
    data.recovery = _read_log(paths, paths.recovery_jsonl, p)
    data.samples = _read_log(paths, paths.samples_jsonl, p)
    data.docs = scan_documents(paths, cfg.max_docs_scanned, p)
    return data

"""`corpusmill forget RUN --ids-file FILE --reason TEXT`: take documents out of a run, and keep them out.

In this order, so that a forget cut short leaves the documents forgotten (the ledger first) and a re-run finishes it:

1. **Resolve** every line of the ids file to documents: a corpusmill id (as in ``docs/`` and the shards'
   ``doc_ids``) or an input id (``input.id_field``, a text file's name). The run's inputs are read once more for
   the texts as they were read (the takedown step of a later clean sees those, before any text work), and for
   ids the clean removed (a duplicate, a filtered page): they are forgotten too, so they never come back. An id
   that matches nothing refuses the whole command before anything is written (exit 2).
2. **Ledger** (``runio.ledger``): one entry appended (time, reason, input ids, corpusmill ids, the content hashes
   of the texts as read and as cleaned), and a MinHash signature per document (never its text) beside it.
3. **docs/ → removed/**: the forgotten documents leave the ``docs/`` files that held them and join ``removed/`` as
   ``removed_by: takedown``, ``reason: takedown``, with only the takedown annotation (the others may name them:
   a title, a URL). With ``duplicates``, the exact and near duplicates of them still in ``docs/`` (exact dedup's
   key; MinHash at ``near_dedup.threshold``) go the same way and into the same ledger entry.
4. **Shards**: every shard is rebuilt from the remaining ``docs/`` with the run's own tokenizer (not retrained:
   the checkpoints' vocabulary stays valid). Packing is one global plan per split (``tokenizer.build``), so
   removing documents moves rows in every shard: all are rebuilt, and the result is byte for byte what the shard
   stage makes of the same ``docs/`` and tokenizer.
5. **Stats and manifest**: ``stats.json`` counts the forgotten documents under step ``takedown``, reason
   ``takedown`` (the accounting still balances); the manifest's counts and shard totals follow. report.html
   (which shows the old funnel) is removed and its stage record dropped: the next ``run`` or ``corpusmill report``
   rebuilds it.
6. **Checkpoints** trained on the old shards are left as they are: the trainer refuses to resume them on the
   rebuilt shards, naming the ledger and ``--from-scratch`` (``trainer_bridge.checkpoint.store.plan_resume``).
   Their data cards (``lineage.card``) are refreshed right after the ledger entry, while ``docs/`` and the shards
   are still those they were trained on: each names the forgotten documents its checkpoint saw.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pyarrow.parquet as pq

from beamio.beam_options import make_pipeline
from beamio.read import iter_records, reported_id
from beamio.write import DOCS_SCHEMA, REMOVED_SCHEMA, parquet_writer, removed_row
from lineage.card import refresh_data_cards
from pipelines.config import ConfigError, RunConfig, load_config
from pipelines.prepare import collect_stats
from pipelines.rundir import clear_outputs, read_manifest
from pipelines.run import run_lock
from runio.errors import CorpusmillError, ExitCode
from runio.files import read_json, write_json
from runio.layout import RunPaths
from runio.ledger import Forgotten, LedgerEntry, Signature, append_entry, append_signatures, read_ledger, utc_now
from tokenizer.build import build_shards
from transforms.takedown import REASON, STEP, TakedownIndex, content_hash, signature_params, signatures_of

_PART = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.parquet$")


class ForgetRefused(CorpusmillError):
    """What `forget` was given cannot be carried out as asked; nothing was written."""

    exit_code = ExitCode.CONFIG


@dataclass
class ForgetResult:
    """What one `forget` did: the ledger entry, how many documents left docs/ (asked for, and duplicates of
    them), which asked-for ids the clean had already removed, the shard totals rebuilt, and the checkpoints
    that were trained on the forgotten documents' shards (empty when the run never trained)."""

    entry: LedgerEntry
    ledger: Path
    removed_from_docs: int
    duplicates: int
    already_removed: list[int] = field(default_factory=list)
    shards_rebuilt: dict | None = None
    checkpoints: list[str] = field(default_factory=list)
    raw_texts_found: int = 0
    notes: list[str] = field(default_factory=list)


def read_ids_file(path: str | Path) -> list[str]:
    """The ids to forget: one per line; blank lines and ``#`` comments are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ForgetRefused(f"--ids-file: {path}: {err.strerror or err}") from None
    ids = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not ids:
        raise ForgetRefused(f"--ids-file: {path} names no id (one corpusmill id or input id per line)")
    return list(dict.fromkeys(ids))


def _doc_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.parquet"))


def _as_doc(row: dict) -> dict:
    """A docs/ row as the document record (meta and annotations parsed)."""
    return {"id": row["id"], "text": row["text"], "source": row["source"], "meta": json.loads(row["meta"] or "{}"),
            "annotations": json.loads(row["annotations"] or "{}")}


def _matches(doc: dict, wanted: set[str], id_field: str | None) -> set[str]:
    """Which of the ids file's lines name ``doc`` (its corpusmill id, or its input id)."""
    hits = {str(doc["id"])} & wanted
    input_id = reported_id(doc, id_field)
    if input_id is not None and str(input_id) in wanted:
        hits.add(str(input_id))
    return hits


def _read_inputs(cfg: RunConfig, doc_ids: set[int], wanted: set[str],
                 log: Callable[[str], None]) -> tuple[dict[int, dict], set[str], list[str]]:
    """The documents as read (before any step) whose id is in ``doc_ids`` or whom a line of ``wanted`` names;
    the lines that named one; and notes (inputs that could not be read)."""
    found: dict[int, dict] = {}
    named: set[str] = set()
    notes: list[str] = []
    try:
        for _path, _index, item in iter_records(cfg.input):
            if not isinstance(item, dict):
                continue  # a quarantined record: no text, no id to forget
            hits = _matches(item, wanted, cfg.input.id_field)
            if item["id"] in doc_ids or hits:
                found[item["id"]] = item
                named |= hits
    except (ConfigError, OSError) as err:
        notes.append(f"the run's inputs could not be read again ({err}): the ledger holds the content hashes of "
                     f"the cleaned texts only")
        log(f"forget: {notes[-1]}")
    return found, named, notes


def _rewrite_docs(paths: RunPaths, forgotten: set[int]) -> int:
    """Remove the forgotten documents from the docs/ files that hold them (each file rewritten sorted, as the
    clean wrote it; a file left empty is removed). Returns how many rows left."""
    write = parquet_writer(DOCS_SCHEMA)
    removed = 0
    for path in _doc_files(paths.docs):
        ids = pq.read_table(path, columns=["id"]).column("id").to_pylist()
        if not forgotten.intersection(ids):
            continue
        rows = [r for r in pq.read_table(path).to_pylist() if r["id"] not in forgotten]
        removed += len(ids) - len(rows)
        if rows:
            write(str(path), sorted(rows, key=lambda r: r["id"]))
        else:
            path.unlink()
    return removed


def _add_removed(paths: RunPaths, rows: list[dict]) -> None:
    """Add removed/ rows into the part file their id belongs to (``id % parts``, as the clean partitions), each
    part rewritten sorted by id."""
    files = _doc_files(paths.removed)
    match = next((m for m in (_PART.match(p.name) for p in files) if m), None)
    parts = int(match.group("parts")) if match else 1
    by_part: dict[int, list[dict]] = {}
    for row in rows:
        by_part.setdefault(row["id"] % parts, []).append(row)
    write = parquet_writer(REMOVED_SCHEMA)
    for part, new in sorted(by_part.items()):
        target = paths.removed / f"{paths.removed.name}-{part:05d}-of-{parts:05d}.parquet"
        old = pq.read_table(target).to_pylist() if target.is_file() else []
        merged = {r["id"]: r for r in old}
        merged.update({r["id"]: r for r in new})
        target.parent.mkdir(parents=True, exist_ok=True)
        write(str(target), [merged[k] for k in sorted(merged)])


def _update_stats(paths: RunPaths, moved: int, log: Callable[[str], None]) -> dict | None:
    """stats.json recounted from disk, with the takedown step's counter raised by what forget moved."""
    old = read_json(paths.stats)
    if not isinstance(old, dict):
        log("forget: the run has no stats.json: not rewritten")
        return None
    counters: dict[tuple[str, str], int] = {}
    for key, value in (old.get("counters") or {}).items():
        namespace, _, name = key.partition("/")
        counters[(namespace, name)] = int(value)
    counters[(STEP, "removed")] = counters.get((STEP, "removed"), 0) + moved
    steps = [row["step"] for row in old.get("steps", [])]
    if STEP not in steps:
        steps.insert(0, STEP)  # the takedown step runs first in every clean that has a ledger
    top = len((old.get("domains") or {}).get("rows") or []) or 20
    stats = collect_stats(paths, steps, counters, top)
    for key in ("cleaning_seconds", "inputs", "inputs_seen"):
        if key in old:
            stats[key] = old[key]
    write_json(paths.stats, stats)
    if not stats["accounting"]["balanced"]:
        raise CorpusmillError("forget: the accounting does not balance after the takedown: "
                              + "; ".join(stats["accounting"]["problems"]))
    return stats


def _rebuild_shards(cfg: RunConfig, paths: RunPaths) -> dict:
    """Every shard rebuilt from the remaining docs/ with the run's tokenizer (loaded, not retrained)."""
    tokenizer = cfg.tokenizer.model_copy(update={"path": str(paths.tokenizer_json)})
    pipeline = make_pipeline(cfg.runner.name, cfg.runner.workers, cfg.runner.options, cfg.runner.dask_address,
                             worker_memory=cfg.runner.worker_memory)
    return build_shards(paths, tokenizer, cfg.packing, pipeline)


def _update_manifest(paths: RunPaths, stats: dict | None, shards: dict | None, ledger_entries: int) -> None:
    manifest = read_manifest(paths) or {}
    if stats is not None:
        manifest["counts"] = stats["accounting"]
        manifest["steps"] = [row["step"] for row in stats["steps"]]
        manifest["empty"] = stats["accounting"]["kept"] == 0
    if shards is not None and isinstance(manifest.get("shards"), dict):
        manifest["shards"] = {**manifest["shards"], "totals": shards.get("totals", {})}
    manifest["takedown"] = {"ledger": str(paths.takedown_ledger), "entries": ledger_entries}
    # report.html shows the funnel before the takedown: it goes, and with it its stage record
    records = manifest.get("stages")
    if isinstance(records, dict):
        records.pop("report", None)
    manifest["stages_done"] = [s for s in manifest.get("stages_done", []) if s != "report"]
    manifest.pop("report", None)
    write_json(paths.manifest, manifest)


def _checkpoints(paths: RunPaths) -> list[str]:
    if not paths.checkpoints.is_dir():
        return []
    return sorted(p.name for p in paths.checkpoints.iterdir() if p.is_dir())


def forget(run_dir: str | Path, ids: Iterable[str], reason: str, *, duplicates: bool = False,
           log: Callable[[str], None] = print) -> ForgetResult:
    """Forget the documents ``ids`` name in run ``run_dir`` (see the module docstring for what that does)."""
    paths = RunPaths(run_dir)
    reason = reason.strip()
    if not reason:
        raise ForgetRefused("--reason: say why (it is kept in the ledger with the documents' ids)")
    manifest = read_manifest(paths)
    if manifest is None or "clean" not in manifest.get("stages_done", []):
        raise ForgetRefused(f"{paths}: not a run whose cleaning stage completed (see its manifest.json)")
    wanted = set(ids)
    if not wanted:
        raise ForgetRefused("--ids-file names no id")
    cfg = load_config(paths.config_yaml)
    with run_lock(paths):
        # 1. resolve: the documents in docs/ that the lines name, then the inputs for their texts as read
        in_docs: dict[int, dict] = {}
        named: set[str] = set()
        for path in _doc_files(paths.docs):
            for row in pq.read_table(path).to_pylist():
                doc = _as_doc(row)
                hits = _matches(doc, wanted, cfg.input.id_field)
                if hits:
                    in_docs[doc["id"]] = doc
                    named |= hits
        raw, named_in_inputs, notes = _read_inputs(cfg, set(in_docs), wanted, log)
        unknown = sorted(wanted - named - named_in_inputs)
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise ForgetRefused(f"--ids-file: {len(unknown)} of {len(wanted)} ids match no document of {paths} "
                                f"(neither in docs/ nor in its inputs): {shown}; nothing was forgotten")
        forgotten: dict[int, dict] = dict(in_docs)
        already_removed = sorted(set(raw) - set(in_docs))
        for doc_id in already_removed:
            forgotten[doc_id] = raw[doc_id]

        # the duplicates of the forgotten still in docs/, when asked: exact key or MinHash at the threshold
        dup_ids: set[int] = set()
        if duplicates:
            dup_ids = duplicates_in_docs(paths, cfg, forgotten, raw)
            for path in _doc_files(paths.docs):
                for row in pq.read_table(path).to_pylist():
                    if row["id"] in dup_ids:
                        in_docs[row["id"]] = forgotten[row["id"]] = _as_doc(row)

        # 2. the ledger first: from here on, whatever happens, a later clean drops them
        texts = {doc_id: [doc["text"]] + ([raw[doc_id]["text"]] if doc_id in raw else [])
                 for doc_id, doc in forgotten.items()}
        input_ids = sorted({str(i) for i in (reported_id(doc, cfg.input.id_field) for doc in forgotten.values())
                            if i is not None})
        entry = LedgerEntry(time=utc_now(), reason=reason, ids=input_ids, doc_ids=sorted(forgotten),
                            content_hashes=sorted({content_hash(t) for ts in texts.values() for t in ts}))
        append_entry(paths.takedown_ledger, entry)
        sig_texts = [(doc_id, raw[doc_id]["text"] if doc_id in raw else doc["text"])
                     for doc_id, doc in sorted(forgotten.items())]
        params = signature_params(cfg.near_dedup)
        append_signatures(paths.takedown_ledger, [
            Signature(doc_id, entry.time, params, sig)
            for (doc_id, _), sig in zip(sig_texts, signatures_of([t for _, t in sig_texts], cfg.near_dedup))
            if sig is not None])
        log(f"forget: ledger {paths.takedown_ledger}: {len(forgotten)} documents ({len(entry.content_hashes)} "
            f"content hashes), reason {reason!r}")
        # the checkpoints' data cards, while docs/ and the shards are still those they were trained on: each
        # says which forgotten documents its checkpoint saw (after the rebuild, only that part can be updated)
        cards = refresh_data_cards(paths.root)
        if cards:
            log(f"forget: data cards of {len(cards)} checkpoint(s) name the forgotten documents they saw")

        # 3. docs/ → removed/
        moved = _rewrite_docs(paths, set(in_docs))
        _add_removed(paths, [removed_row({
            "id": doc_id, "source": doc["source"], "removed_by": STEP, "reason": REASON,
            "annotations": {STEP: {"matched": "duplicate" if doc_id in dup_ids else "forget", "time": entry.time}}})
            for doc_id, doc in sorted(in_docs.items())])

        # 4. shards, when the run has them
        shards = None
        if paths.shards_manifest.is_file() and paths.tokenizer_json.is_file():
            shards = _rebuild_shards(cfg, paths)
            log(f"forget: shards rebuilt from the remaining documents with the run's tokenizer: "
                + ", ".join(f"{split} {t.get('docs', 0)} docs/{t.get('rows', 0)} rows"
                            for split, t in sorted(shards.get("totals", {}).items())))

        # 5. stats, manifest, report
        stats = _update_stats(paths, moved, log)
        if paths.report_html.is_file():
            clear_outputs((paths.report_html,))
            log("forget: report.html removed (it showed the documents before the takedown); `corpusmill report` "
                "rebuilds it")
        _update_manifest(paths, stats, shards, len(read_ledger(paths.takedown_ledger)))

        # 6. checkpoints trained on them: their data cards were refreshed after the ledger entry (step 2)
        checkpoints = _checkpoints(paths)
    return ForgetResult(entry, paths.takedown_ledger, moved - len(dup_ids), len(dup_ids),
                        already_removed, shards, checkpoints, len(raw), notes)


def duplicates_in_docs(paths: RunPaths, cfg: RunConfig, forgotten: dict[int, dict],
                        raw: dict[int, dict]) -> set[int]:
    """Ids of documents still in docs/ that are exact (content hash) or near (MinHash estimate at
    ``near_dedup.threshold``) duplicates of the forgotten ones."""
    hashes = {content_hash(doc["text"]) for doc in forgotten.values()} | {content_hash(doc["text"])
                                                                          for doc in raw.values()}
    texts = [doc["text"] for doc in forgotten.values()]
    sigs = signatures_of(texts, cfg.near_dedup)
    params = signature_params(cfg.near_dedup)
    signatures = [Signature(doc_id, "", params, sig) for doc_id, sig in zip(forgotten, sigs) if sig is not None]
    index = TakedownIndex(Forgotten(content_hashes={h: "" for h in hashes}), None, signatures, cfg.near_dedup)
    found: set[int] = set()
    for path in _doc_files(paths.docs):
        docs = [_as_doc(r) for r in pq.read_table(path).to_pylist()]
        docs = [d for d in docs if d["id"] not in forgotten]
        for doc, match in zip(docs, index.match(docs)):
            if match is not None:
                found.add(doc["id"])
    return found


"""``corpusmill trace RUN``: for each document asked about, where it came from, what the clean did with it, the
shard rows holding its segments, the training steps whose batches included those rows, and the checkpoints
saved after the first of them.

Cost: the documents are found through the columns the question needs (``lineage.documents``); the shard rows
through the ``doc_ids``/``doc_lens`` columns only (``ShardReader.segments``: the memory-mapped token buffers are
never read); the steps by inverting one permutation per epoch consumed, for the rows found
(``lineage.consumed``). Nothing is decoded or tokenized again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from lineage.card import documents_seen
from lineage.consumed import checkpoint_positions, training_order
from lineage.documents import (Found, Positions, find_by_doc_ids, find_by_input_ids, find_by_text, input_named,
                               quarantined, scan_inputs)
from runio.errors import CorpusmillError, ExitCode
from runio.files import sha256_file
from runio.layout import RunPaths
from tokenizer.shards import ShardFormatError, ShardReader, read_manifest
from beamio.records import doc_id as make_doc_id

VAL_NOTE = "the val split is evaluated, never trained on"


class TraceError(CorpusmillError):
    """A trace that cannot run: no such run directory, a bad query."""

    exit_code = ExitCode.CONFIG


class IncompleteRun(TraceError):
    """A run directory without its manifest: what is on disk cannot be trusted to answer."""

    exit_code = ExitCode.REFUSED


@dataclass
class TraceQuery:
    """What to trace: input ids (``--id``, ``--ids-file``), ``FILE`` or ``FILE:LINE`` (``--source``), a regular
    expression over kept text (``--match``), corpusmill ids (``--doc-id``)."""

    ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    match: str | None = None
    doc_ids: list[int] = field(default_factory=list)
    inputs: bool = False  # also read the input files again, for removed documents' input ids and text

    def empty(self) -> bool:
        return not (self.ids or self.sources or self.match or self.doc_ids)


def read_ids_file(path: str | Path) -> list[str]:
    """One input id per line; blank lines and lines starting with ``#`` are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TraceError(f"--ids-file {path}: {error.strerror or error}") from error
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _not_found(query: str, input_id=None, why: str = "") -> dict:
    return {"id": input_id, "query": query, "fate": "not_found", "reason": why or None, "rows": [], "steps": [],
            "checkpoints": []}


def _by_source(paths: RunPaths, spec: str) -> tuple[list[Found], list[dict]]:
    """``FILE`` (every document of an input file the run read) or ``FILE:LINE`` (the record at that position:
    its id is recomputed from the file's sha256 in the run manifest, Contract 1)."""
    name, _, position = spec.rpartition(":") if spec.rpartition(":")[2].isdigit() else (spec, "", "")
    entry = input_named(paths, name)
    if entry is None:
        return [], [_not_found(f"--source {spec}", why=f"{name} is not an input of this run (run manifest)")]
    if position:
        wanted = make_doc_id(entry["sha256"], int(position))
        found = find_by_doc_ids(paths, {wanted})
        if wanted not in found:
            return [], [_not_found(f"--source {spec}", why=f"no document, removal or quarantine record has the id "
                                                            f"of {entry['source']} position {position} ({wanted})")]
        doc = found[wanted]
        doc.position = int(position)
        return [doc], []
    source = entry.get("source")

    ids = set()
    for directory in (paths.docs, paths.removed):
        for file in sorted(directory.glob("*.parquet")) if directory.is_dir() else []:
            table = pq.read_table(file, columns=["id"], filters=[("source", "=", source)])
            ids.update(int(i) for i in table.column("id").to_pylist())
    ids.update(q.doc_id for q in quarantined(paths) if q.source == source)
    return list(find_by_doc_ids(paths, ids).values()), []


def _removed_from_inputs(paths: RunPaths, input_ids: set[str], match: str | None,
                         known: set[int]) -> tuple[list[Found], list[str]]:
    """Removed and quarantined documents found by reading the inputs again (``scan_inputs``); kept ones are
    already found through ``docs/``."""
    scan = scan_inputs(paths, input_ids, match)
    wanted = set(scan.matches) - known
    found = find_by_doc_ids(paths, wanted) if wanted else {}
    out = []
    for identifier, doc in sorted(found.items()):
        if doc.fate == "kept":
            continue
        doc.input_id, _, doc.position = scan.matches[identifier]
        out.append(doc)
    return out, scan.problems


class ShardIndex:
    """Each split's segments (``doc_ids``/``doc_lens`` only), opened once per trace."""

    def __init__(self, paths: RunPaths):
        self.splits = {}
        if not paths.shards_manifest.is_file():
            return
        for split in read_manifest(str(paths.shards))["splits"]:
            self.splits[split] = ShardReader(str(paths.shards), split=split).segments()

    def rows_of(self, doc_ids: np.ndarray) -> dict[int, list[dict]]:
        """doc id → [{split, shard, row, split_row, tokens: [start, end)}] for every segment of it."""
        out: dict[int, list[dict]] = {}
        for split, seg in self.splits.items():
            hits = np.flatnonzero(np.isin(seg.doc_ids, doc_ids))
            if not len(hits):
                continue
            rows = np.searchsorted(seg.row_offsets, hits, side="right") - 1
            for segment, row in zip(hits.tolist(), rows.tolist()):
                first = int(seg.row_offsets[row])
                start = int(seg.doc_lens[first:segment].sum())
                shard, shard_row = seg.locate(row)
                out.setdefault(int(seg.doc_ids[segment]), []).append(
                    {"split": split, "shard": shard, "row": shard_row, "split_row": row,
                     "tokens": [start, start + int(seg.doc_lens[segment])]})
        return out


def trace(run_dir: str | Path, query: TraceQuery) -> list[dict]:
    """One record per document asked about (see ``docs/compliance.md``): ``id`` (the input's id), ``doc_id``,
    ``fate``, ``reason``, ``source``/``position``, ``rows``, ``steps`` (sorted, as metrics.jsonl numbers them),
    ``uses`` (step, micro-step, position in the global batch), ``checkpoints`` (their step directories),
    ``steps_note`` when steps cannot be derived."""
    paths = RunPaths(run_dir)
    if not paths.root.is_dir():
        raise TraceError(f"{paths}: no such run directory")
    if not paths.manifest.is_file():
        # (every query used to answer 'not found: ... is not an input of this run': a false answer to a takedown
        # request when the run's last clean failed half-way and left docs/ without its manifest)
        raise IncompleteRun(f"{paths}: no manifest.json: the run's last clean did not complete (or it is still "
                            f"running), so what it holds cannot be told; re-run it, then trace")
    if query.empty():
        raise TraceError("nothing to trace: give --id, --ids-file, --source or --match")
    results: list[dict] = []
    docs: list[tuple[str, Found]] = []
    unfound: list[str] = []
    if query.ids:
        by_input = find_by_input_ids(paths, query.ids)
        for input_id in dict.fromkeys(str(i) for i in query.ids):
            if by_input[input_id]:
                docs += [(f"--id {input_id}", d) for d in by_input[input_id]]
            else:
                unfound.append(input_id)
    if query.inputs and (unfound or query.match is not None):
        found_docs, problems = _removed_from_inputs(paths, set(unfound), query.match, {d.doc_id for _, d in docs})
        for doc in found_docs:
            if doc.input_id is not None and str(doc.input_id) in unfound:
                docs.append((f"--id {doc.input_id}", doc))
            else:
                docs.append((f"--match {query.match}", doc))
        unfound = [i for i in unfound if all(str(d.input_id) != i for d in found_docs)]
        why = ("not in the input files either" + (f" ({'; '.join(problems)})" if problems else ""))
    else:
        why = ("no kept document has this input id (removed/ and quarantine/ store no input ids: pass --inputs "
               "to search the input files, or give --source FILE:LINE)")
    results += [_not_found(f"--id {i}", i, why) for i in unfound]
    for spec in query.sources:
        found, missing = _by_source(paths, spec)
        docs += [(f"--source {spec}", d) for d in found]
        results += missing
    if query.match is not None:
        docs += [(f"--match {query.match}", d) for d in find_by_text(paths, query.match)]
    if query.doc_ids:
        found = find_by_doc_ids(paths, set(query.doc_ids))
        for wanted in query.doc_ids:
            if wanted in found:
                docs.append((f"--doc-id {wanted}", found[wanted]))
            else:
                results.append(_not_found(f"--doc-id {wanted}", why="no document, removal or quarantine record"))
    if not docs:
        return results
    try:
        index = ShardIndex(paths)
    except ShardFormatError as error:
        raise TraceError(f"{paths.shards}: {error}") from error
    order = training_order(paths)
    current_shards = sha256_file(paths.shards_manifest) if paths.shards_manifest.is_file() else None
    if not order.problem and order.shards and order.shards != {current_shards}:
        order.problem = ("the shards were rebuilt after training (corpusmill forget): the rows above are today's, "
                         "which no step used; the checkpoints listed are those whose data card saw the document")
        rebuilt = True
    else:
        rebuilt = False
    checkpoints = checkpoint_positions(paths)
    seen_by_checkpoint = []  # after a rebuild: the documents each checkpoint's card saw
    if rebuilt:
        for checkpoint in checkpoints:
            seen = documents_seen(paths, checkpoint.path)
            seen_by_checkpoint.append((checkpoint, set(seen.tolist()) if seen is not None else set()))
    positions = Positions(paths)
    positions.resolve([d for _, d in docs])
    kept_ids = np.array(sorted({d.doc_id for _, d in docs if d.fate == "kept"}), dtype=np.int64)
    rows_by_doc = index.rows_of(kept_ids) if len(kept_ids) else {}
    for query_text, doc in docs:
        rows = rows_by_doc.get(doc.doc_id, [])
        record = {"id": doc.input_id, "doc_id": doc.doc_id, "query": query_text, "fate": doc.fate,
                  "reason": doc.reason, "removed_by": doc.removed_by, "duplicate_of": doc.duplicate_of,
                  "source": doc.source, "position": positions.of(doc),
                  "rows": rows, "steps": [], "uses": [], "checkpoints": [], "steps_note": None}
        train_rows = np.array([r["split_row"] for r in rows if r["split"] == "train"], dtype=np.int64)
        if any(r["split"] != "train" for r in rows):
            record["steps_note"] = VAL_NOTE
        if doc.fate == "kept" and not rows:
            record["steps_note"] = "kept, but in no shard row (the shards were written before it was kept?)"
        if rebuilt:
            record["steps"], record["steps_note"] = None, order.problem
            record["checkpoints"] = [c.path.name for c, seen in seen_by_checkpoint if doc.doc_id in seen]
        elif len(train_rows):
            if order.problem:
                record["steps_note"] = order.problem
                record["steps"] = None
            else:
                samples = order.samples_of_rows(np.unique(train_rows))
                uses = order.steps_of_samples(samples)
                record["uses"] = sorted(uses, key=lambda u: (u["step"], u["sample"]))
                record["steps"] = sorted({u["step"] for u in uses})
                first_sample = int(samples.min()) if len(samples) else None
                first_step = min(record["steps"]) if record["steps"] else None
                record["checkpoints"] = [c.path.name for c in checkpoints if first_sample is not None and (
                    c.samples > first_sample if c.samples is not None else c.step > first_step)]
        results.append(record)
    return results


def describe(record: dict) -> str:
    """A few lines for a person."""
    head = f"{record['query']}: " + (f"input id {record['id']}, " if record.get("id") is not None else "")
    if record["fate"] == "not_found":
        return head + f"not found: {record['reason']}"
    where = f"{record['source']}" + (f" position {record['position']}" if record.get("position") is not None else "")
    lines = [head + f"document {record['doc_id']} from {where}"]
    fate = record["fate"]
    if fate == "kept":
        lines.append("  kept by the clean")
    elif fate == "removed":
        twin = f", duplicate of {record['duplicate_of']}" if record.get("duplicate_of") is not None else ""
        lines.append(f"  removed by {record['removed_by']}: {record['reason']}{twin}")
    else:
        lines.append(f"  quarantined: {record['reason']}")
    for row in record["rows"]:
        lines.append(f"  {row['split']} {row['shard']} row {row['row']} tokens {row['tokens'][0]}..{row['tokens'][1]}")
    if record.get("steps"):
        steps = record["steps"]
        shown = ", ".join(map(str, steps[:20])) + (f" … ({len(steps)} steps)" if len(steps) > 20 else "")
        lines.append(f"  trained at step(s) {shown}")
        lines.append("  in checkpoints: " + (", ".join(record["checkpoints"]) or "none saved after it"))
    elif fate == "kept" and record["rows"] and record.get("steps") == [] and not record.get("steps_note"):
        lines.append("  not trained on yet")
    if record.get("steps_note"):
        lines.append(f"  note: {record['steps_note']}")
    return "\n".join(lines)

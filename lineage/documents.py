"""Finding documents in a run directory: kept (``docs/``), removed (``removed/``), quarantined (``quarantine/``),
by the input's own id, by source file and position, by a regular expression over the text, or by corpusmill id.

Only the columns a question needs are read (``id``, ``source``, ``meta`` for an input id; ``text`` for a
regular expression). ``removed/`` stores no text and no input fields (Contract 2): a removed document is found
by its source position (``--source FILE:LINE``) or its corpusmill id, and the answer says what could not be
searched.
"""
from __future__ import annotations

import json
import re
from hashlib import blake2b
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from beamio.config_base import InputConfig
from beamio.records import InputFile, doc_id
from runio.files import read_json, read_jsonl, sha256_file
from runio.layout import RunPaths

DEFAULT_ID_FIELD = "id"


@dataclass
class Found:
    """One document as the run directory knows it."""

    doc_id: int
    fate: str  # kept | removed | quarantined
    source: str | None
    input_id: object = None
    reason: str | None = None
    removed_by: str | None = None
    duplicate_of: int | None = None
    annotations: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    position: int | None = None


def id_field(paths: RunPaths) -> str:
    """The input field holding each record's own id: ``input.id_field`` of the run's config, else ``id``."""
    if paths.config_yaml.is_file():
        cfg = yaml.safe_load(paths.config_yaml.read_text(encoding="utf-8")) or {}
        configured = (cfg.get("input") or {}).get("id_field")
        if configured:
            return str(configured)
    return DEFAULT_ID_FIELD


def _parquet_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.parquet")) if directory.is_dir() else []


def _duplicate_of(annotations: dict) -> int | None:
    """The document a removed duplicate was a copy of: exact dedup's ``dup_of``, near dedup's cluster centre."""
    exact = (annotations.get("exact_dedup") or {}).get("dup_of")
    if exact is not None:
        return int(exact)
    cluster = (annotations.get("near_dedup") or {}).get("cluster")
    return int(cluster) if cluster is not None else None


def _kept(row: dict, field_name: str) -> Found:
    meta = json.loads(row["meta"]) if row.get("meta") else {}
    annotations = json.loads(row["annotations"]) if row.get("annotations") else {}
    return Found(doc_id=int(row["id"]), fate="kept", source=row.get("source"), input_id=meta.get(field_name),
                 annotations=annotations, meta=meta)


def _removed(row: dict) -> Found:
    annotations = json.loads(row["annotations"]) if row.get("annotations") else {}
    return Found(doc_id=int(row["id"]), fate="removed", source=row.get("source"), reason=row.get("reason"),
                 removed_by=row.get("removed_by"), duplicate_of=_duplicate_of(annotations), annotations=annotations)


def _quarantined(record: dict) -> Found:
    return Found(doc_id=int(record["id"]), fate="quarantined", source=record.get("source"),
                 reason=f"{record.get('kind')}: {record.get('reason')}", position=record.get("position"))


KEPT_COLUMNS = ["id", "source", "meta", "annotations"]


def kept_by_ids(paths: RunPaths, doc_ids: set[int], field_name: str) -> dict[int, Found]:
    found = {}
    wanted = pa.array(sorted(doc_ids), type=pa.int64())
    for file in _parquet_files(paths.docs):
        table = pq.read_table(file, columns=KEPT_COLUMNS, filters=[("id", "in", wanted)])
        for row in table.to_pylist():
            found[int(row["id"])] = _kept(row, field_name)
    return found


def removed_by_ids(paths: RunPaths, doc_ids: set[int]) -> dict[int, Found]:
    found = {}
    wanted = pa.array(sorted(doc_ids), type=pa.int64())
    for file in _parquet_files(paths.removed):
        table = pq.read_table(file, columns=["id", "source", "removed_by", "reason", "annotations"],
                              filters=[("id", "in", wanted)])
        for row in table.to_pylist():
            found[int(row["id"])] = _removed(row)
    return found


def quarantined(paths: RunPaths) -> list[Found]:
    files = sorted(paths.quarantine.glob("*.jsonl")) if paths.quarantine.is_dir() else []
    return [_quarantined(r) for file in files for r in read_jsonl(file) if "id" in r]


def find_by_doc_ids(paths: RunPaths, doc_ids: set[int]) -> dict[int, Found]:
    """Every given corpusmill id that the run knows, kept, removed or quarantined."""
    field_name = id_field(paths)
    found = kept_by_ids(paths, doc_ids, field_name)
    rest = doc_ids - set(found)
    if rest:
        found.update(removed_by_ids(paths, rest))
        rest -= set(found)
    if rest:
        found.update({q.doc_id: q for q in quarantined(paths) if q.doc_id in rest})
    return found


def find_by_input_ids(paths: RunPaths, input_ids: list[str]) -> dict[str, list[Found]]:
    """Kept documents whose input id field equals one of ``input_ids`` (compared as text), each id → its
    documents (an input id may repeat across files). A substring filter on the stored ``meta`` JSON narrows the
    rows before any JSON is parsed."""
    field_name = id_field(paths)
    wanted = {str(i) for i in input_ids}
    out: dict[str, list[Found]] = {i: [] for i in wanted}
    for file in _parquet_files(paths.docs):
        meta = pq.read_table(file, columns=["meta"]).column("meta")
        mask = None
        for value in wanted:
            hit = pc.match_substring(meta, value)
            mask = hit if mask is None else pc.or_(mask, hit)
        candidates = [i for i, hit in enumerate(mask.to_pylist()) if hit] if mask is not None else []
        if not candidates:
            continue
        rows = pq.read_table(file, columns=KEPT_COLUMNS).take(pa.array(candidates)).to_pylist()
        for row in rows:
            doc = _kept(row, field_name)
            if doc.input_id is not None and str(doc.input_id) in wanted:
                out[str(doc.input_id)].append(doc)
    return out


def find_by_text(paths: RunPaths, pattern: str) -> list[Found]:
    """Kept documents whose text matches ``pattern`` (a Python regular expression, searched anywhere)."""
    regex = re.compile(pattern)
    field_name = id_field(paths)
    found = []
    for file in _parquet_files(paths.docs):
        table = pq.read_table(file, columns=["id", "text"])
        hits = [i for i, text in enumerate(table.column("text").to_pylist()) if text and regex.search(text)]
        if hits:
            rows = pq.read_table(file, columns=KEPT_COLUMNS).take(pa.array(hits)).to_pylist()
            found.extend(_kept(row, field_name) for row in rows)
    return found


def inputs(paths: RunPaths) -> list[dict]:
    """The run manifest's inputs: ``source`` (as documents name it), ``path`` and ``sha256`` (the id key)."""
    return list((read_json(paths.manifest, default={}) or {}).get("inputs") or [])


def input_named(paths: RunPaths, name: str) -> dict | None:
    """The input whose ``source`` or ``path`` is ``name`` (or ends with it)."""
    entries = inputs(paths)
    for entry in entries:
        if name in (entry.get("source"), entry.get("path")):
            return entry
    tail = [e for e in entries if str(e.get("path", "")).endswith("/" + name) or
            str(e.get("source", "")).endswith("/" + name)]
    return tail[0] if len(tail) == 1 else None


def records_read(paths: RunPaths) -> int:
    """An upper bound of any input position: every record the clean read (documents, skipped, quarantined)."""
    stats = read_json(paths.stats, default={}) or {}
    records = stats.get("records") or {}
    total = records.get("read") if isinstance(records, dict) else None
    if isinstance(total, int):
        return total
    quarantined_total = (stats.get("quarantined") or {}).get("total", 0)
    return int(stats.get("documents_read", 0)) + int(quarantined_total)


class Positions:
    """Input positions of documents: an id is a hash of (the file's sha256, the position) (``doc_id``), so the
    positions of one file's documents are found by hashing positions 0, 1, ... until every asked id of that file
    is found or every record read is passed (about a million hashes a second)."""

    def __init__(self, paths: RunPaths):
        self.paths = paths
        self.bound = records_read(paths) + 1
        self.found: dict[int, int] = {}

    def resolve(self, docs: list[Found]) -> None:
        """Find the positions of ``docs`` (those without one), one pass over each of their input files' positions."""
        by_source: dict[str, set[int]] = {}
        for doc in docs:
            if doc.position is None and doc.source is not None:
                by_source.setdefault(doc.source, set()).add(doc.doc_id)
        for source, wanted in by_source.items():
            entry = input_named(self.paths, source)
            if entry and entry.get("sha256"):
                self.found.update(_positions_of(entry["sha256"], wanted - set(self.found), self.bound))

    def of(self, found: Found) -> int | None:
        return found.position if found.position is not None else self.found.get(found.doc_id)


def _positions_of(key: str, wanted: set[int], bound: int) -> dict[int, int]:
    """The hash of ``beamio.records.doc_id``, inlined (the key's bytes encoded once): tests/test_trace.py checks
    the positions it gives against the ids of known positions."""
    prefix = f"{key}\x00".encode("utf-8")
    mask = 0x7FFF_FFFF_FFFF_FFFF
    found, remaining = {}, set(wanted)
    for position in range(bound + 1):
        if not remaining:
            break
        value = int.from_bytes(blake2b(prefix + str(position).encode(), digest_size=8).digest(), "big") & mask
        if value in remaining:
            found[value] = position
            remaining.discard(value)
    return found


@dataclass
class InputScan:
    """What a pass over the run's input files found: doc id → (input id, source, position) of the records whose
    input id or text matched, and the inputs that could not be read (missing, or changed since the run)."""

    matches: dict[int, tuple[object, str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def scan_inputs(paths: RunPaths, input_ids: set[str], regex: str | None) -> InputScan:
    """Read the run's input files again (as ``manifest.json`` names them, each checked against its sha256) with
    the pipeline's own reader, for the records whose input id is in ``input_ids`` or whose text matches
    ``regex``: the way to find *removed* documents by input id or text, which ``removed/`` does not store. Costs
    one read of every input; only on request (``corpusmill trace --inputs``)."""
    from beamio.read import read_file_indexed, record_position  # noqa: PLC0415 (imports the raw-format parsers)

    cfg = yaml.safe_load(paths.config_yaml.read_text(encoding="utf-8")) if paths.config_yaml.is_file() else {}
    input_cfg = InputConfig.model_validate({**((cfg or {}).get("input") or {}), "paths": ["(trace)"]})
    field_name = id_field(paths)
    pattern = re.compile(regex) if regex is not None else None
    scan = InputScan()
    for entry in inputs(paths):
        path, key = entry.get("path"), entry.get("sha256")
        if not path or not Path(path).is_file():
            scan.problems.append(f"{entry.get('source')}: input {path} is not here (relative to {Path.cwd()})")
            continue
        if sha256_file(path) != key:
            scan.problems.append(f"{entry.get('source')}: {path} changed since the run (sha256 differs)")
            continue
        source = InputFile(path, entry.get("source") or path, key, Path(path).stat().st_size)
        for index, item in read_file_indexed(path, input_cfg, source):
            if not isinstance(item, dict):
                continue
            input_id = (item.get("meta") or {}).get(field_name)
            if (input_id is not None and str(input_id) in input_ids) or (pattern and pattern.search(item["text"])):
                scan.matches[int(item["id"])] = (input_id, source.name, record_position(path, index, input_cfg))
    return scan

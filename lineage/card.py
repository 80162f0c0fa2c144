"""A data card per checkpoint: what the model had seen up to that step.

``checkpoints/step-N/data_card.json`` (``RunPaths.data_card``): tokens and documents per source, per language
(``annotations.langid.lang``) and per corpus field named in ``lineage.card_fields`` (and ``train.eval.domain_key``),
and how many of those tokens came from documents later withdrawn (``takedown/ledger.jsonl``). A checkpoint saved
at global sample index S (its ``provenance.json``) had consumed samples ``0 .. S - 1`` (Contract 4; a rollback
moves the step back, never the data): each train row's use count follows from the order's permutations, each
segment's tokens from the ``doc_lens`` column, so the card's tokens add up exactly to the trainer's
``tokens_seen`` (padding excluded, skipped bad steps included: their batches were read).

``refresh_data_cards(run_dir)`` (re)writes every checkpoint's card: after training, and after the ledger grows
(``corpusmill forget`` calls it), so that a card names the withdrawn documents its checkpoint saw.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from lineage.consumed import CheckpointPosition, checkpoint_positions, row_use_counts, training_order
from runio.files import atomic_path, sha256_file, write_json
from runio.layout import RunPaths
from runio.ledger import read_ledger
from tokenizer.shards import ShardReader, SplitSegments
from trainer_bridge.checkpoint.names import PROVENANCE_FILE, read_checkpoint_json

CARD_VERSION = 1
UNKNOWN = "(unknown)"  # a shard document missing from docs/ (shards written from other documents)


def card_fields(paths: RunPaths) -> list[str]:
    """The corpus fields the cards break tokens down by: ``lineage.card_fields`` and ``train.eval.domain_key``."""
    if not paths.config_yaml.is_file():
        return []
    cfg = yaml.safe_load(paths.config_yaml.read_text(encoding="utf-8")) or {}
    fields = list((cfg.get("lineage") or {}).get("card_fields") or [])
    domain_key = ((cfg.get("train") or {}).get("eval") or {}).get("domain_key")
    if domain_key and domain_key not in fields:
        fields.append(domain_key)
    return fields


class DocumentAttributes:
    """Per kept document (by id): its source, language and named fields, as integer codes for bincount."""

    def __init__(self, paths: RunPaths, fields: list[str]):
        ids, sources, languages, values = [], [], [], {f: [] for f in fields}
        for file in sorted(paths.docs.glob("*.parquet")) if paths.docs.is_dir() else []:
            table = pq.read_table(file, columns=["id", "source", "meta", "annotations"])
            ids.extend(table.column("id").to_pylist())
            sources.extend(table.column("source").to_pylist())
            for annotations in table.column("annotations").to_pylist():
                lang = (json.loads(annotations or "{}").get("langid") or {}).get("lang")
                languages.append(lang or UNKNOWN)
            if fields:
                for meta in table.column("meta").to_pylist():
                    parsed = json.loads(meta or "{}")
                    for f in fields:
                        value = parsed.get(f)
                        values[f].append(UNKNOWN if value is None else str(value))
        order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")
        self.ids = np.asarray(ids, dtype=np.int64)[order]
        self.columns = {"source": [sources[i] for i in order], "language": [languages[i] for i in order],
                        **{f"field:{f}": [values[f][i] for i in order] for f in fields}}

    def index_of(self, doc_ids: np.ndarray) -> np.ndarray:
        """Position of each id in ``self.ids``; -1 where the id is not a kept document."""
        pos = np.searchsorted(self.ids, doc_ids)
        pos = np.minimum(pos, max(len(self.ids) - 1, 0))
        known = (self.ids[pos] == doc_ids) if len(self.ids) else np.zeros(len(doc_ids), dtype=bool)
        return np.where(known, pos, -1)


def _breakdown(labels: list[str], doc_index: np.ndarray, tokens_per_doc: np.ndarray, seen: np.ndarray) -> dict:
    """label → {tokens, documents} over the documents seen."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"tokens": 0, "documents": 0})
    for position in np.flatnonzero(seen).tolist():
        index = int(doc_index[position])
        label = labels[index] if index >= 0 else UNKNOWN
        out[label]["tokens"] += int(tokens_per_doc[position])
        out[label]["documents"] += 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["tokens"], kv[0])))


def withdrawn_section(doc_ids: np.ndarray, tokens: np.ndarray, withdrawn: set[int], ledger_entries: int) -> dict:
    """Which of the documents a checkpoint saw (``doc_ids`` with their ``tokens``) the ledger lists."""
    mask = np.isin(doc_ids, np.fromiter(withdrawn, dtype=np.int64, count=len(withdrawn)))
    return {"tokens": int(tokens[mask].sum()), "documents": int(mask.sum()),
            "doc_ids": [int(i) for i in doc_ids[mask]], "ledger_entries": ledger_entries}


def compute_card(checkpoint: CheckpointPosition, *, seed: int, segments: SplitSegments,
                 attributes: DocumentAttributes, withdrawn: set[int], ledger_entries: int
                 ) -> tuple[dict, np.ndarray, np.ndarray]:
    """The data card of one checkpoint (``samples`` known), and the documents it saw with their tokens."""
    train_rows = len(segments.row_offsets) - 1
    uses = row_use_counts(train_rows, seed, checkpoint.samples)
    per_segment = np.repeat(uses, np.diff(segments.row_offsets)) * segments.doc_lens
    unique_ids, inverse = np.unique(segments.doc_ids, return_inverse=True)
    tokens_per_doc = np.bincount(inverse, weights=per_segment, minlength=len(unique_ids)).astype(np.int64)
    seen = tokens_per_doc > 0
    doc_index = attributes.index_of(unique_ids)
    breakdowns = {name: _breakdown(labels, doc_index, tokens_per_doc, seen)
                  for name, labels in attributes.columns.items()}
    card = {
        "card_version": CARD_VERSION, "checkpoint": checkpoint.path.name, "step": checkpoint.step,
        "samples": checkpoint.samples, "tokens_seen": checkpoint.tokens_seen,
        "tokens": int(per_segment.sum()), "documents": int(seen.sum()),
        "by_source": breakdowns.pop("source"), "by_language": breakdowns.pop("language"),
        "by_field": {name.split(":", 1)[1]: value for name, value in breakdowns.items()},
        "withdrawn": withdrawn_section(unique_ids[seen], tokens_per_doc[seen], withdrawn, ledger_entries),
        "note": "counts include the batches of steps skipped by the guards and of steps undone by a rollback: "
                "their samples were read (the data position never moves back)",
    }
    return card, unique_ids[seen], tokens_per_doc[seen]


def _unknown(checkpoint: CheckpointPosition, why: str) -> dict:
    return {"card_version": CARD_VERSION, "checkpoint": checkpoint.path.name, "step": checkpoint.step, "unknown": why}


def refresh_data_cards(run_dir: str | Path) -> list[Path]:
    """(Re)write ``data_card.json`` (and its ``data_card_documents.npz``) in every complete checkpoint of the run;
    returns the cards written. A checkpoint trained on the shards the run holds now gets its whole card computed;
    one trained on shards since rebuilt (`corpusmill forget`) keeps its card and has only ``withdrawn`` updated,
    from its documents file and the ledger. A checkpoint without a recorded data position (an older corpusmill)
    gets a card that says what is unknown."""
    paths = RunPaths(run_dir)
    checkpoints = checkpoint_positions(paths)
    if not checkpoints:
        return []
    entries = read_ledger(paths.takedown_ledger)  # strict: a damaged line refuses (LedgerError), never skipped
    withdrawn, ledger_entries = {d for entry in entries for d in entry.doc_ids}, len(entries)
    current_shards = sha256_file(paths.shards_manifest) if paths.shards_manifest.is_file() else None
    order = training_order(paths)
    segments = attributes = None
    written = []
    for checkpoint in checkpoints:
        target = paths.data_card(checkpoint.path)
        trained_on = ((read_checkpoint_json(checkpoint.path, PROVENANCE_FILE) or {}).get("shards") or {}).get(
            "manifest_sha256")
        if trained_on is not None and trained_on != current_shards:
            card = read_data_card(paths, checkpoint.path)
            documents = paths.data_card_documents(checkpoint.path)
            if card is None or "unknown" in card or not documents.is_file():
                card = _unknown(checkpoint, "trained on shards since rebuilt (corpusmill forget), and no card was "
                                            "written while they existed: what it saw cannot be derived")
            else:
                with np.load(documents) as saved:
                    card["withdrawn"] = withdrawn_section(saved["doc_ids"], saved["tokens"], withdrawn, ledger_entries)
                card["shards_rebuilt"] = ("the shards this checkpoint was trained on were rebuilt since; the counts "
                                          "are those computed from them")
        elif order.problem or checkpoint.samples is None:
            card = _unknown(checkpoint, order.problem or "this checkpoint does not record the data position it was "
                                                         "saved at (saved before corpusmill wrote it): what it had "
                                                         "seen cannot be derived")
        else:
            if segments is None:
                segments = ShardReader(str(paths.shards), split="train").segments()
                attributes = DocumentAttributes(paths, card_fields(paths))
            rows = len(segments.row_offsets) - 1
            if order.train_rows != rows:
                card = _unknown(checkpoint, f"the data-order log names {order.train_rows} train rows, the shards "
                                            f"hold {rows}")
            else:
                card, doc_ids, tokens = compute_card(checkpoint, seed=order.seed, segments=segments,
                                                     attributes=attributes, withdrawn=withdrawn,
                                                     ledger_entries=ledger_entries)
                with atomic_path(paths.data_card_documents(checkpoint.path)) as tmp:
                    with open(tmp, "wb") as fh:
                        np.savez_compressed(fh, doc_ids=doc_ids, tokens=tokens)
        write_json(target, card, indent=2)
        written.append(target)
    return written


def documents_seen(paths: RunPaths, checkpoint: Path) -> np.ndarray | None:
    """The ids of the documents a checkpoint saw, from its card's documents file (None without one)."""
    file = paths.data_card_documents(checkpoint)
    if not file.is_file():
        return None
    with np.load(file) as saved:
        return saved["doc_ids"]


def read_data_card(paths: RunPaths, checkpoint: Path) -> dict | None:
    """A checkpoint's card, or None when none was written."""
    file = paths.data_card(checkpoint)
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None

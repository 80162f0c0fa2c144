"""The takedown ledger as the cards read it: the corpusmill ids of withdrawn documents.

``RUN/takedown/ledger.jsonl`` (``RunPaths.takedown_ledger``), append-only, one JSON object per line:
``{"time", "reason", "ids": [input ids], "doc_ids": [corpusmill ids], "content_hashes": [hex]}``. Reading and
appending it in full belongs to ``corpusmill forget``; the cards need only ``doc_ids``.
"""
from __future__ import annotations

from runio.errors import CorpusmillError
from runio.files import read_jsonl
from runio.layout import RunPaths


class LedgerError(CorpusmillError):
    """A ledger line whose ``doc_ids`` is not a list of integers."""


def withdrawn_doc_ids(paths: RunPaths) -> tuple[set[int], int]:
    """(every ``doc_ids`` entry of the ledger, the number of entries); a missing ledger is an empty one. A line
    cut short by a crash is skipped by ``read_jsonl``; a line with malformed ``doc_ids`` is an error naming it."""
    entries = read_jsonl(paths.takedown_ledger)
    withdrawn: set[int] = set()
    for number, entry in enumerate(entries, start=1):
        doc_ids = entry.get("doc_ids", [])
        if not isinstance(doc_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in doc_ids):
            raise LedgerError(f"{paths.takedown_ledger}: entry {number}: doc_ids must be a list of integers")
        withdrawn.update(doc_ids)
    return withdrawn, len(entries)

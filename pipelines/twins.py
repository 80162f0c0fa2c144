"""Text files left out of a reading as byte-identical to an input that is read, and the output lines they get:
``TextTwins``, shared by the analysis commands (`corpusmill dedup`, `pii`, `quality score`) and the dedup
library (``pipelines.dedup``)."""
from __future__ import annotations

from typing import Callable

from beamio.read import is_text_file


def _same_row_renamed(row: dict, name: str) -> dict:
    return {**row, "id": name}


class TextTwins:
    """Text files left out of a command's reading as byte-identical to an input that is read
    (``resolve_inputs(..., on_twin=twins.add)``): each is a copy of that file's one document, so it gets that
    document's output line under its own name (``copy_row(row, name)``; default: the same line), or is
    quarantined as that one is. A row is matched to its file by its ``id``: a text file is reported by its name
    (``beamio.read.reported_id``). Record files (JSONL, Parquet) copied byte for byte hold the same ids as
    their original: stderr says they were read once."""

    def __init__(self, copy_row: Callable[[dict, str], dict] = _same_row_renamed):
        self.of: dict[str, list[str]] = {}  # source name of the file read -> names of its copies
        self.copy_row = copy_row

    def add(self, left_out, read) -> None:
        if is_text_file(left_out.name) and is_text_file(read.name):
            self.of.setdefault(read.name, []).append(left_out.name)

    def rows(self, row: dict) -> list[dict]:
        """The copies' rows for the row of the file they copy."""
        return [self.copy_row(row, name) for name in self.of.get(row["id"], ())]

    def quarantined(self, records: list[dict]) -> list[dict]:
        return [{**r, "source": name, "reason": f"{r['reason']} (a copy of {r['source']})"}
                for r in records for name in self.of.get(r["source"], ())]

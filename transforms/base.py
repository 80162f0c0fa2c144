"""The document record and the one step abstraction every per-document transform implements.

Document record (Contract 1 in DESIGN.md), a plain dict so that Beam can move it cheaply:
    id          int, stable across runs (source URI + position), unique within a corpus
    text        str
    source      str, URI of the input file
    meta        dict, the input's other fields, passed through untouched
    annotations dict, per-step results (scores, counts, measurements)
A removed document additionally carries ``removed_by`` (the step name) and ``reason``.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

Doc = dict[str, Any]


class DocStep(Protocol):
    """A per-document cleaning step: annotate first, then decide from the annotations.

    ``apply`` may rewrite ``doc["text"]`` (normalization, PII masking) and must record every measurement in
    ``doc["annotations"]``; it returns, for each document, the removal reason or ``None`` to keep it.
    Keeping scores apart from decisions means a threshold can be retuned from stored annotations.
    """

    name: str

    def setup(self) -> None:
        """Load heavy resources (models, engines). Called once per worker, never per document."""

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        ...


class ConfiguredStep:
    """Base for steps whose only state is their config: nothing heavy to load in ``setup()``."""

    name: str

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self) -> None:
        pass


def mark_removed(doc: Doc, step: str, reason: str) -> Doc:
    doc["removed_by"] = step
    doc["reason"] = reason
    return doc

"""Exact deduplication: documents whose normalized text hashes alike; the smallest id of each group stays.

The smallest complete global step (see "How to add a step" in docs/DESIGN.md): the grouping is a Beam shuffle
keyed by the hash, so no worker ever holds a global set of hashes; the step annotates and decides
(``ExactDedupDecide``: ``(doc, reason)`` pairs, removed ones with ``annotations["exact_dedup"]["dup_of"]``) and
ends in the shared routing tail.
"""
from __future__ import annotations

import hashlib
import re

import apache_beam as beam
from pydantic import BaseModel, ConfigDict, Field

from transforms.base import Doc, annotate
from transforms.beam_step import Route, timed

_WS_RE = re.compile(r"\s+")
STEP = "exact_dedup"
REASON = "exact_duplicate"


class ExactDedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="remove exact duplicates (the smallest id of each group stays)")
    casefold: bool = Field(True, description="ignore case when comparing texts")


def text_key(text: str, casefold: bool = True) -> str:
    """The dedup key: whitespace-insensitive (and by default case-insensitive) hash of the text."""
    canonical = _WS_RE.sub(" ", text).strip()
    if casefold:
        canonical = canonical.casefold()
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()


def resolve_group(docs: list[Doc]) -> list[tuple[Doc, str | None]]:
    """Keep the smallest id; the others are removed with a pointer to it. Returns ``(doc, reason)`` pairs,
    the kept document first."""
    ordered = sorted(docs, key=lambda d: d["id"])
    kept, dups = ordered[0], ordered[1:]
    for dup in dups:
        annotate(dup, STEP, dup_of=kept["id"])
    return [(kept, None)] + [(dup, REASON) for dup in dups]


def _key_by_text(doc: Doc, casefold: bool):
    yield text_key(doc["text"], casefold), doc


def _resolve(element):
    _, docs = element
    return resolve_group(list(docs))


class ExactDedupDecide(beam.PTransform):
    """Documents → ``(doc, reason)`` pairs: one shuffle by text hash, the smallest id of each group kept."""

    def __init__(self, cfg: ExactDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        return (
            docs
            | "KeyByTextHash" >> timed(STEP, _key_by_text, self.cfg.casefold)
            | "GroupIdenticalTexts" >> beam.GroupByKey()
            | "KeepSmallestId" >> timed(STEP, _resolve)
        )


class ExactDedup(beam.PTransform):
    """The step: ``ExactDedupDecide`` then the routing tail; ``.kept`` / ``.removed``."""

    def __init__(self, cfg: ExactDedupConfig, progress_dir: str | None = None):
        super().__init__()
        self.cfg, self.progress_dir = cfg, progress_dir

    def expand(self, docs):
        return docs | "Decide" >> ExactDedupDecide(self.cfg) | "Tail" >> Route(STEP, self.progress_dir)

"""Exact deduplication: documents whose normalized text hashes alike; the smallest id of each group stays.

The grouping is a Beam shuffle keyed by the hash, so no worker ever holds a global set of hashes.
"""
from __future__ import annotations

import hashlib
import re

import apache_beam as beam
from apache_beam.metrics import Metrics
from pydantic import BaseModel, ConfigDict, Field

from transforms.base import Doc, mark_removed

_WS_RE = re.compile(r"\s+")
STEP = "exact_dedup"


class ExactDedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    casefold: bool = Field(True, description="ignore case when comparing texts")


def text_key(text: str, casefold: bool = True) -> str:
    """The dedup key: whitespace-insensitive (and by default case-insensitive) hash of the text."""
    canonical = _WS_RE.sub(" ", text).strip()
    if casefold:
        canonical = canonical.casefold()
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()


def resolve_group(docs: list[Doc]) -> tuple[Doc, list[Doc]]:
    """Keep the smallest id; the others are removed with a pointer to it."""
    ordered = sorted(docs, key=lambda d: d["id"])
    kept, dups = ordered[0], ordered[1:]
    for dup in dups:
        dup["annotations"]["exact_dup_of"] = kept["id"]
        mark_removed(dup, STEP, "exact_duplicate")
    return kept, dups


class _ResolveGroupFn(beam.DoFn):
    def __init__(self):
        self._kept = Metrics.counter(STEP, "kept")
        self._removed = Metrics.counter(STEP, "removed")

    def process(self, element):
        _, docs = element
        kept, dups = resolve_group(list(docs))
        self._kept.inc()
        yield kept
        for dup in dups:
            self._removed.inc()
            yield beam.pvalue.TaggedOutput("removed", dup)


class ExactDedup(beam.PTransform):
    def __init__(self, cfg: ExactDedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        casefold = self.cfg.casefold
        outputs = (
            docs
            | "KeyByTextHash" >> beam.Map(lambda d: (text_key(d["text"], casefold), d))
            | "GroupIdenticalTexts" >> beam.GroupByKey()
            | "KeepSmallestId" >> beam.ParDo(_ResolveGroupFn()).with_outputs("removed", main="kept")
        )
        return {"kept": outputs.kept, "removed": outputs.removed}

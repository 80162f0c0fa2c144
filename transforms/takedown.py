"""The takedown step: a document that a takedown ledger forgot is dropped when it comes back, before any text work.

`corpusmill forget` writes what it removed to the run's ledger (``runio.ledger``); every later clean into that run
directory, every refresh against it, and every run that names a ledger in ``takedown.ledgers`` (a team shares one)
runs this step first. A document is dropped (reason ``takedown``) when

- its corpusmill id is one a ledger forgot (the same record of the same input file), or its input id
  (``input.id_field``, a text file's name) is;
- the exact-dedup key of its text (``transforms.exact_dedup.text_key``, case-insensitive as exact dedup's
  default) is one a ledger forgot: a copy under another file name and id;
- with ``takedown.near_duplicates``, its MinHash signature (near-dedup's shingles and permutations) estimates a
  similarity of at least ``near_dedup.threshold`` to a forgotten document's signature.

The step annotates the dropped document with how it matched (``annotations["takedown"]``: ``matched``, the
ledger entry's ``time``, the ``similarity`` of a near match); a kept document gets no annotation, so a run
whose ledgers forgot nothing it holds writes what it wrote before.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from beamio.read import reported_id
from runio.ledger import Forgotten, Signature
from transforms.base import ConfiguredStep, Doc, StepConfigError, annotate
from transforms.exact_dedup import text_key
from transforms.near_dedup.core import NearDedupConfig, SketchBuilder

STEP = "takedown"
REASON = "takedown"
# The content hash of the ledger: exact dedup's key with its default (case-insensitive), whatever the run's
# exact_dedup.casefold, so one ledger means the same for every run that reads it.
CASEFOLD = True


class TakedownConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ledgers: list[str] = Field(default_factory=list, description="more takedown ledgers whose documents every clean "
                                                                 "drops (reason takedown): a ledger.jsonl, or a run "
                                                                 "directory (its takedown/ledger.jsonl), so a team "
                                                                 "shares one; the run directory's own ledger and "
                                                                 "those of --against runs are always read")
    near_duplicates: bool = Field(False, description="also drop near-duplicates of forgotten documents: MinHash "
                                                     "signatures with near_dedup's shingles, num_perm and seed, at "
                                                     "near_dedup.threshold (`corpusmill forget` stores a signature "
                                                     "per forgotten document, never its text)")


def content_hash(text: str) -> str:
    """The ledger's content hash of a text (exact dedup's key)."""
    return text_key(text, CASEFOLD)


def signature_params(near: NearDedupConfig) -> dict:
    """What a stored signature must have been made with to be compared with a document's (MinHash always, even
    when near_dedup itself runs SimHash: the ledger keeps one kind)."""
    return {"method": "minhash", "num_perm": near.num_perm, "seed": near.seed, "scheme": near.scheme,
            "word_ngram": near.word_ngram, "cjk_ngram": near.cjk_ngram, "shingle_hash": near.shingle_hash}


def _builder(near: NearDedupConfig) -> SketchBuilder:
    return SketchBuilder(near.model_copy(update={"method": "minhash"}))


def signatures_of(texts: Sequence[str], near: NearDedupConfig) -> list[list[int] | None]:
    """The MinHash signature of each text (None for a text without a single shingle)."""
    builder = _builder(near)
    sets = builder.shingle_sets(list(texts))
    present = [i for i, s in enumerate(sets) if len(s)]
    out: list[list[int] | None] = [None] * len(texts)
    if present:
        for row, i in zip(builder.signatures([sets[i] for i in present]), present):
            out[i] = [int(v) for v in row]
    return out


def check_signatures(signatures: Sequence[Signature], near: NearDedupConfig, where: str) -> None:
    """Stored signatures made with other parameters cannot be compared: a one-line ``StepConfigError``."""
    wanted = signature_params(near)
    for sig in signatures:
        if sig.params != wanted:
            changed = ", ".join(f"{k} {sig.params.get(k)!r} → {v!r}" for k, v in wanted.items()
                                if sig.params.get(k) != v)
            raise StepConfigError(f"takedown.near_duplicates: the signatures of {where} were made with other "
                                  f"near_dedup settings ({changed}); set them back, or turn "
                                  f"takedown.near_duplicates off (ids and content hashes still match)")


class TakedownIndex:
    """The pure core: what the ledgers forgot, and how a document matches it."""

    def __init__(self, forgotten: Forgotten, id_field: str | None = None,
                 signatures: Sequence[Signature] = (), near: NearDedupConfig | None = None):
        self.forgotten, self.id_field, self.near = forgotten, id_field, near
        self._times = [s.time for s in signatures]
        self._matrix = (np.array([s.signature for s in signatures], dtype=np.uint32)
                        if signatures and near is not None else None)
        self._builder = None

    def match(self, docs: Sequence[Doc]) -> list[dict | None]:
        """Per document: how it matches a forgotten one (``matched``, ``time``, and ``similarity`` for a near
        match), or None."""
        out: list[dict | None] = []
        for doc in docs:
            found = None
            if doc["id"] in self.forgotten.doc_ids:
                found = {"matched": "doc_id", "time": self.forgotten.doc_ids[doc["id"]]}
            else:
                input_id = reported_id(doc, self.id_field)
                if input_id is not None and str(input_id) in self.forgotten.ids:
                    found = {"matched": "input_id", "time": self.forgotten.ids[str(input_id)]}
                else:
                    key = content_hash(doc["text"])
                    if key in self.forgotten.content_hashes:
                        found = {"matched": "content_hash", "time": self.forgotten.content_hashes[key]}
            out.append(found)
        if self._matrix is not None:
            rest = [i for i, found in enumerate(out) if found is None]
            if rest:
                if self._builder is None:
                    self._builder = _builder(self.near)
                sets = self._builder.shingle_sets([docs[i]["text"] for i in rest])
                present = [(i, s) for i, s in zip(rest, sets) if len(s)]
                if present:
                    sigs = self._builder.signatures([s for _, s in present])
                    for (i, _), sig in zip(present, sigs):
                        similarity = (self._matrix == np.asarray(sig, dtype=np.uint32)).mean(axis=1)
                        best = int(np.argmax(similarity))
                        if similarity[best] >= self.near.threshold - 1e-12:
                            out[i] = {"matched": "near_duplicate", "time": self._times[best],
                                      "similarity": round(float(similarity[best]), 4)}
        return out


class TakedownStep(ConfiguredStep):
    """The per-document step over a ``TakedownIndex`` (built from the ledgers when the graph is built, so the
    workers get the index, not the files)."""

    name = STEP

    def __init__(self, index: TakedownIndex):
        super().__init__(None)
        self.index = index

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        reasons: list[str | None] = []
        for doc, found in zip(docs, self.index.match(docs)):
            if found is None:
                reasons.append(None)
            else:
                annotate(doc, STEP, **found)
                reasons.append(REASON)
        return reasons

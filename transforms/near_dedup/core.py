"""Near-duplicate removal: MinHash-LSH (or SimHash) candidates, verified edges, star resolution without chaining.

Pure core (no Beam; shared by both execution paths so that they give identical results):

1. ``SketchBuilder.sketch(doc)``: shingles (words, or characters in CJK text) → sorted shingle-hash set and a
   MinHash signature (or a 64-bit SimHash).
2. ``bucket_keys``: LSH band keys (or SimHash permuted-block keys).
3. ``star_edges``: each bucket links its members to its first member in rank order (linear, never all pairs,
   so a hot bucket of thousands of ids costs thousands of edges).
4. ``verify``: an edge is kept only if the similarity (exact shingle Jaccard by default) reaches the threshold.
5. Connected components of the verified edges.
6. ``resolve_component``: in rank order (old runs' documents first, then smallest id or highest quality), a
   document is removed only if it is itself similar enough to an already kept member, otherwise it is kept.
   A removed document therefore always meets the threshold against the document kept for it: no chaining.

Decisions are recorded under ``annotations["near_dedup"]`` (``decide``). The index of an earlier run (sketches and
band keys on disk) is read and written by ``transforms.near_dedup.index``; the Beam wrapper is
``transforms.near_dedup.beam.NearDedup(cfg, index_out_dir, against_dirs)``; see its docstring.
"""
from __future__ import annotations

import functools
import itertools
import logging
import math
from typing import Iterable, Iterator, Literal, NamedTuple, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.near_dedup import minhash, simhash
from transforms.base import Doc, annotate, step_annotations
from transforms.near_dedup.minhash import Sketch

STEP_NAME = "near_dedup"
REASON = "near_duplicate"
INDEX_FORMAT_VERSION = 1
# Before an exact Jaccard, skip kept members whose MinHash estimate is this far below the threshold: with 128
# permutations the estimate's standard deviation near J=0.8 is ~0.035, so 0.15 is over four of them.
_PREFILTER_MARGIN = 0.15
# Components up to this size choose star centres by exact coverage (at most ~2,000 Jaccards); larger ones by
# the MinHash estimate, so that a component of thousands of near-identical pages stays linear in exact work.
_EXACT_COVERAGE_MAX_MEMBERS = 64

log = logging.getLogger(__name__)


class NearDedupConfig(BaseModel):
    """The ``near_dedup`` config section."""
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    method: Literal["minhash", "simhash"] = "minhash"
    threshold: float = Field(0.8, gt=0.0, le=1.0, description="similarity to the kept document needed for removal")
    verify: Literal["exact", "estimated"] = Field(
        "exact", description="exact: Jaccard of the shingle-hash sets; estimated: MinHash agreement "
                             "(simhash: Hamming distance <= simhash_max_distance)")
    word_ngram: int = Field(5, ge=1, le=minhash.MAX_NGRAM)
    cjk_ngram: int = Field(5, ge=1, le=minhash.MAX_NGRAM, description="character n-gram for mostly-CJK documents")
    shingle_hash: Literal["fast", "sha1"] = Field(
        "fast", description="sha1: datasketch's sha1_hash32 of each shingle string (slower, bit-compatible)")
    num_perm: int = Field(128, ge=8, le=1024)
    seed: int = Field(1, ge=0)
    scheme: Literal["affine32", "legacy"] = "affine32"
    lsh_threshold: Optional[float] = Field(
        0.7, gt=0.0, lt=1.0, description="candidate threshold for the optimal bands x rows; below `threshold` "
                                         "for recall, verification restores precision (default 0.7)")
    bands: Optional[int] = Field(None, ge=1)
    rows: Optional[int] = Field(None, ge=1)
    simhash_blocks: int = Field(6, ge=2, le=64)
    simhash_max_distance: int = Field(3, ge=0, le=16)
    keep: Literal["smallest_id", "highest_quality"] = Field(
        "smallest_id", description="rank order: which document wins among equals (and always, with resolution=rank)")
    resolution: Literal["degree", "rank"] = Field(
        "degree", description="star centres: degree = the document covering most unassigned near-duplicates "
                              "(ties by rank; higher recall), rank = strictly in rank order")
    degree_max_component: int = Field(2000, ge=2, description="larger components use rank order in linear memory")
    quality_field: str = Field("quality.score", description="keep=highest_quality: the annotation it ranks by, "
                                                             "as <step>.<key>")
    mode: Literal["auto", "beam", "memory"] = Field(
        "auto", description="memory: one in-memory index; beam: shuffle-based, scales out; auto: memory below "
                            "memory_max_docs documents")
    memory_max_docs: int = Field(100_000, ge=0, description="auto: the in-memory path up to this many documents "
                                                            "(new + earlier runs'), decided at run time")
    memory_max_input_bytes: int = Field(
        200_000_000, ge=0, description="auto, when the caller passes the input size: the in-memory path up to this "
                                       "many input bytes (files as stored, plus earlier runs' index files), decided "
                                       "when the graph is built, which spares the run-time routing")
    cc_max_rounds: int = Field(12, ge=1, le=64, description="large-star/small-star rounds of the Beam path")

    @model_validator(mode="after")
    def _check(self) -> "NearDedupConfig":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("near_dedup.bands and near_dedup.rows must be given together (or neither)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"near_dedup.bands * rows ({self.bands * self.rows}) exceeds num_perm ({self.num_perm})")
        if self.simhash_max_distance >= self.simhash_blocks:
            raise ValueError("near_dedup.simhash_max_distance must be smaller than simhash_blocks")
        step, _, key = self.quality_field.partition(".")
        if not step or not key:
            raise ValueError(f"near_dedup.quality_field: {self.quality_field!r} is not <step>.<key> (every step "
                             f"annotates under its own name, e.g. quality.score)")
        return self

    def band_shape(self) -> tuple[int, int]:
        if self.bands is not None:
            return self.bands, self.rows
        return _cached_lsh_params(self.lsh_threshold or self.threshold, self.num_perm)

    def index_params(self) -> dict:
        """Everything that must match between a run's index and a later refresh."""
        params = {"format": INDEX_FORMAT_VERSION, "method": self.method, "word_ngram": self.word_ngram,
                  "cjk_ngram": self.cjk_ngram, "shingle_hash": self.shingle_hash}
        if self.method == "minhash":
            bands, rows = self.band_shape()
            params.update(num_perm=self.num_perm, seed=self.seed, scheme=self.scheme, bands=bands, rows=rows)
        else:
            params.update(simhash_blocks=self.simhash_blocks, simhash_max_distance=self.simhash_max_distance)
        return params


@functools.cache  # a pure function of its arguments, ~0.1 s to compute
def _cached_lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    return minhash.lsh_params(threshold, num_perm)


class Decision(NamedTuple):
    id: int
    cluster: int  # the kept document's id (own id when kept)
    similarity: float  # to the kept document (1.0 when kept)
    removed: bool
    cluster_size: int = 1  # kept documents: 1 + the number removed for them
    kept_is_old: bool = False  # removed for a document of an earlier run


# ---------------------------------------------------------------- pure core


def doc_rank(doc_id: int, annotations: dict | None, cfg: NearDedupConfig, old: bool = False) -> tuple:
    """Sort key of the resolution order: earlier runs first, then highest quality (if asked), then smallest id."""
    if old:
        return (0, 0.0, doc_id)
    if cfg.keep == "highest_quality":
        step, _, key = cfg.quality_field.partition(".")
        score = step_annotations(annotations, step).get(key)
        if isinstance(score, (int, float)) and math.isfinite(score):
            return (1, -float(score), doc_id)
        return (2, 0.0, doc_id)
    return (1, 0.0, doc_id)


class SketchBuilder:
    """Turns documents into sketches. Holds a per-instance word-hash memo (bounded), nothing global."""

    _WORD_CACHE_LIMIT = 1 << 20

    def __init__(self, cfg: NearDedupConfig):
        self.cfg = cfg
        self.hasher = minhash.MinHasher(cfg.num_perm, cfg.seed, cfg.scheme) if cfg.method == "minhash" else None
        self._word_cache: dict[str, int] = {}

    def shingles(self, text: str) -> np.ndarray:
        tokens, is_characters = minhash.shingle_units(*minhash.tokenize(text))
        ngram = self.cfg.cjk_ngram if is_characters else self.cfg.word_ngram
        if self.cfg.shingle_hash == "sha1":
            return minhash.shingle_hashes_sha1(tokens, ngram)
        if len(self._word_cache) > self._WORD_CACHE_LIMIT:
            self._word_cache.clear()
        return minhash.shingle_hashes(tokens, ngram, self._word_cache)

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        if self.cfg.method == "simhash":
            return np.array([simhash.simhash(shingles)], dtype=np.uint64)
        return self.hasher.signature(minhash.to_hash32(shingles, self.cfg.shingle_hash))

    def sketch(self, doc: Doc) -> Optional[Sketch]:
        """None for a document without a single token (it takes no part in near-dedup and is kept)."""
        doc_id = doc["id"]
        if not isinstance(doc_id, (int, np.integer)) or isinstance(doc_id, bool):
            raise ValueError(f"near_dedup needs integer document ids (Contract 1), got {doc_id!r}")
        shingles = self.shingles(doc.get("text") or "")
        if len(shingles) == 0:
            return None
        return Sketch(int(doc_id), doc_rank(int(doc_id), doc.get("annotations"), self.cfg),
                      self.signature(shingles), shingles)


def bucket_keys(sketch: Sketch, cfg: NearDedupConfig) -> list[bytes]:
    if cfg.method == "simhash":
        return simhash.bucket_keys(int(sketch.signature[0]), cfg.simhash_blocks, cfg.simhash_max_distance)
    bands, rows = cfg.band_shape()
    return minhash.band_keys(sketch.signature, bands, rows)


def star_edges(members: Iterable[tuple[tuple, int, bool]]) -> Iterator[tuple[int, int]]:
    """Edges of one bucket: its first member in rank order → every other member. Linear in the bucket size.

    ``members`` are (rank, id, old). Old documents are never linked to each other (they were deduplicated in
    their own run); when the first member is old, the other old members are linked to the first new one so
    that the whole bucket stays one candidate group.
    """
    members = sorted(set(members))
    if len(members) < 2:
        return
    _, center, center_old = members[0]
    first_new = next((doc_id for _, doc_id, old in members if not old), None)
    if first_new is None:
        return
    for _, doc_id, old in members[1:]:
        if not old:
            yield center, doc_id
        elif center_old:
            yield doc_id, first_new


def similarity(a: Sketch, b: Sketch, cfg: NearDedupConfig) -> float:
    if cfg.verify == "exact":
        return minhash.exact_jaccard(a.shingles, b.shingles)
    if cfg.method == "simhash":
        return simhash.similarity(int(a.signature[0]), int(b.signature[0]))
    return minhash.estimated_jaccard(a.signature, b.signature)


def similarity_floor(cfg: NearDedupConfig) -> float:
    """The smallest similarity value that counts as a near-duplicate."""
    if cfg.verify == "estimated" and cfg.method == "simhash":
        return 1.0 - cfg.simhash_max_distance / simhash.BITS
    return cfg.threshold


def similar_enough(sim: float, cfg: NearDedupConfig) -> bool:
    return sim >= similarity_floor(cfg) - 1e-12


def verify_edge(a: Sketch, b: Sketch, cfg: NearDedupConfig) -> bool:
    return similar_enough(similarity(a, b, cfg), cfg)


class _ComponentSimilarity:
    """Similarities inside one component.

    With MinHash and exact verification, the signatures give every pair's estimate at once (vectorized); exact
    Jaccards are computed only for the pairs a decision needs (centre → candidate) and cached, so a component
    of near-identical documents costs a similarity per removed document, not per pair. Otherwise every pair's
    similarity is computed up front (estimates are cheap).
    """

    def __init__(self, ordered: Sequence[Sketch], cfg: NearDedupConfig):
        self.ordered, self.cfg = ordered, cfg
        self.floor = similarity_floor(cfg) - 1e-12
        n = len(ordered)
        self.lazy = cfg.method == "minhash" and cfg.verify == "exact"
        if self.lazy:
            signatures = np.stack([s.signature for s in ordered])
            estimates = np.stack([(signatures == signatures[i]).mean(axis=1) for i in range(n)])
            self.likely = estimates >= cfg.threshold  # only ranks centres by how much they would cover
            self.candidate = estimates >= cfg.threshold - _PREFILTER_MARGIN
            self._exact: dict[tuple[int, int], float] = {}
        else:
            self.sims = np.zeros((n, n))
            for i, j in itertools.combinations(range(n), 2):
                self.sims[i, j] = self.sims[j, i] = similarity(ordered[i], ordered[j], cfg)
            self.likely = self.candidate = self.sims >= self.floor
        old = np.array([s.old for s in ordered])
        self.candidate = self.candidate & ~(old[:, None] & old[None, :])  # old documents are never compared
        np.fill_diagonal(self.likely, False)
        np.fill_diagonal(self.candidate, False)
        if self.lazy and n <= _EXACT_COVERAGE_MAX_MEMBERS:  # small component: rank centres by exact coverage
            self.likely = np.zeros((n, n), dtype=bool)
            for i, j in zip(*np.nonzero(np.triu(self.candidate))):
                self.likely[i, j] = self.likely[j, i] = self.get(i, j) >= self.floor

    def get(self, i: int, j: int) -> float:
        if not self.lazy:
            return float(self.sims[i, j])
        key = (i, j) if i < j else (j, i)
        if key not in self._exact:
            self._exact[key] = similarity(self.ordered[i], self.ordered[j], self.cfg)
        return self._exact[key]

    def similar(self, i: int, among: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The members of ``among`` (a boolean mask) similar enough to ``i``, and their similarities."""
        candidates = np.flatnonzero(self.candidate[i] & among)
        sims = np.array([self.get(i, j) for j in candidates], dtype=float)
        close = sims >= self.floor
        return candidates[close], sims[close]


def resolve_component(members: Sequence[Sketch], cfg: NearDedupConfig) -> list[Decision]:
    """Star resolution of one connected component: decisions for its new documents.

    Documents of earlier runs are kept first; a new document similar enough to one of them is removed for the
    most similar. Then, repeatedly, a centre is chosen among the unassigned documents and kept, and every
    unassigned document similar enough to it is removed for it. ``resolution="degree"`` chooses the document
    that would cover the most unassigned ones (exactly in small components, by the MinHash estimate in large
    ones; ties: rank order); ``"rank"`` chooses
    the first in rank order (the smallest id, or the highest quality). Either way every removed document meets
    the threshold against the document kept for it (exactly, with ``verify="exact"``). Components above
    ``degree_max_component`` use the linear-memory rank rule.
    """
    ordered = sorted(members, key=lambda s: s.rank)
    if len(ordered) > cfg.degree_max_component:
        return _resolve_incremental(ordered, cfg)
    sims = _ComponentSimilarity(ordered, cfg)
    old = np.array([s.old for s in ordered])
    unassigned = ~old
    decisions: list[Decision] = []
    for j in np.flatnonzero(unassigned):
        near_old, near_sims = sims.similar(j, old)
        if len(near_old):
            best = int(np.argmax(near_sims))
            decisions.append(Decision(ordered[j].id, ordered[near_old[best]].id, round(float(near_sims[best]), 6),
                                      True, 1, True))
            unassigned[j] = False
    while unassigned.any():
        if cfg.resolution == "degree":
            coverage = np.where(unassigned, (sims.likely & unassigned).sum(axis=1), -1)
            centre = int(np.argmax(coverage))  # first maximum = earliest rank on ties
        else:
            centre = int(np.argmax(unassigned))
        unassigned[centre] = False
        covered, covered_sims = sims.similar(centre, unassigned)
        unassigned[covered] = False
        decisions.extend(Decision(ordered[m].id, ordered[centre].id, round(float(sim), 6), True)
                         for m, sim in zip(covered, covered_sims))
        decisions.append(Decision(ordered[centre].id, ordered[centre].id, 1.0, False, 1 + len(covered)))
    return sorted(decisions)


def _resolve_incremental(ordered: Sequence[Sketch], cfg: NearDedupConfig) -> list[Decision]:
    """Rank-order resolution in memory linear in the component: each document, in rank order, is removed for
    its most similar already kept document if that one is similar enough, otherwise kept."""
    kept: list[Sketch] = []
    kept_signatures: list[np.ndarray] = []
    removed_for: dict[int, int] = {}
    decisions: list[Decision] = []
    use_prefilter = cfg.method == "minhash" and cfg.verify == "exact"
    for sketch in ordered:
        if sketch.old:
            kept.append(sketch)
            kept_signatures.append(sketch.signature)
            continue
        best_sim, best = -1.0, None
        if kept:
            candidates = range(len(kept))
            if use_prefilter:
                estimates = (np.stack(kept_signatures) == sketch.signature).mean(axis=1)
                candidates = np.flatnonzero(estimates >= cfg.threshold - _PREFILTER_MARGIN)
            for index in candidates:
                sim = similarity(sketch, kept[index], cfg)
                if sim > best_sim:
                    best_sim, best = sim, kept[index]
        if best is not None and similar_enough(best_sim, cfg):
            removed_for[best.id] = removed_for.get(best.id, 0) + 1
            decisions.append(Decision(sketch.id, best.id, round(best_sim, 6), True, 1, best.old))
        else:
            kept.append(sketch)
            kept_signatures.append(sketch.signature)
    decisions.extend(Decision(s.id, s.id, 1.0, False, 1 + removed_for.get(s.id, 0)) for s in kept if not s.old)
    return sorted(decisions)


def connected_components(edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Union-find; maps every node to the smallest id of its component."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
        parent.setdefault(a, a)
        parent.setdefault(b, b)
    return {node: find(node) for node in parent}


def drop_superseded_old(sketches: Iterable[Sketch]) -> list[Sketch]:
    """A document id present in the new input and in an old index is the same document: the new one stands
    (so a document never removes itself and refreshing against one's own earlier output changes nothing)."""
    sketches = list(sketches)
    new_ids = {s.id for s in sketches if not s.old}
    return [s for s in sketches if not (s.old and s.id in new_ids)]


def dedup_in_memory(sketches: Iterable[Sketch], cfg: NearDedupConfig) -> list[Decision]:
    """The whole algorithm on one machine; the Beam path computes exactly the same decisions."""
    by_id = {s.id: s for s in drop_superseded_old(sketches)}
    buckets: dict[bytes, list[tuple[tuple, int, bool]]] = {}
    for sketch in by_id.values():
        for key in bucket_keys(sketch, cfg):
            buckets.setdefault(key, []).append((sketch.rank, sketch.id, sketch.old))
    edges = {edge for members in buckets.values() for edge in star_edges(members)}
    verified = [(a, b) for a, b in sorted(edges) if verify_edge(by_id[a], by_id[b], cfg)]
    components: dict[int, list[Sketch]] = {}
    for node, label in connected_components(verified).items():
        components.setdefault(label, []).append(by_id[node])
    decisions = []
    for label in sorted(components):
        decisions.extend(resolve_component(components[label], cfg))
    return decisions


def decide(doc: Doc, decision: Optional[Decision]) -> Optional[str]:
    """Record the decision under ``annotations["near_dedup"]``; return the removal reason, or None to keep.

    Removed: ``cluster`` (the kept document's id), ``similarity`` to it, and ``of_earlier_run: true`` when the
    kept one is an ``--against`` run's. Kept documents that absorbed others: ``cluster`` (their own id) and
    ``cluster_size``. Documents in no cluster get nothing."""
    if decision is None:
        return None
    if decision.removed:
        annotate(doc, STEP_NAME, cluster=decision.cluster, similarity=decision.similarity)
        if decision.kept_is_old:
            annotate(doc, STEP_NAME, of_earlier_run=True)
        return REASON
    if decision.cluster_size > 1:
        annotate(doc, STEP_NAME, cluster=decision.cluster, cluster_size=decision.cluster_size)
    return None

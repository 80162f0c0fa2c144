"""Near-duplicate removal: MinHash-LSH (or SimHash) candidates, verified edges, star resolution without chaining.

Pure core (no Beam; shared by both execution paths so that they give identical results):

1. ``SketchBuilder.sketch_batch(docs)``: shingles (words, or characters in Chinese, Japanese or Thai text) →
   sorted 32-bit shingle-hash set and a MinHash signature (one-permutation by default, or datasketch's
   permutations), or a 64-bit SimHash, for a batch of documents at once.
2. ``bucket_keys`` / ``bucket_key_matrix``: LSH band keys (or SimHash permuted-block keys), packed integers.
3. ``star_edges``: each bucket links its members to its first member in rank order (linear, never all pairs,
   so a hot bucket of thousands of ids costs thousands of edges).
4. ``verify``: an edge is kept only if the similarity (exact shingle Jaccard by default) reaches the threshold.
   The MinHash estimate settles the clear cases (far below or far above the threshold, for documents long
   enough for the estimate to be tight); the exact Jaccard is computed only for the ambiguous ones.
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
from typing import Callable, Iterable, Iterator, Literal, NamedTuple, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.near_dedup import minhash, simhash
from transforms.base import Doc, annotate, step_annotations
from transforms.near_dedup.minhash import Sketch

STEP_NAME = "near_dedup"
SKETCH_BATCH = 256  # documents sketched together (one batch of numpy work)
REASON = "near_duplicate"
# 2: 32-bit shingle sets, integer band keys, one-permutation signatures; 3: combining marks inside words, Thai,
# Lao, Myanmar and Khmer shingled by characters (their documents' shingles changed: an older index is refused)
INDEX_FORMAT_VERSION = 3
# The MinHash estimate decides without an exact Jaccard when it is this far from the threshold: with 128
# permutations its standard deviation near J=0.8 is ~0.035, so 0.15 is over four of them.
_PREFILTER_MARGIN = 0.15
# ... and only for documents with at least this many shingles per signature entry: the one-permutation
# signature of a shorter document fills many bins by densification and its estimate is less tight (shorter
# documents are cheap to compare exactly).
_RELIABLE_SHINGLES_PER_BIN = 2
# Components up to this size choose star centres by exact coverage (at most ~2,000 Jaccards); larger ones by
# the MinHash estimate, so that a component of thousands of near-identical pages stays linear in exact work.
_EXACT_COVERAGE_MAX_MEMBERS = 64

log = logging.getLogger(__name__)


class NearDedupConfig(BaseModel):
    """The ``near_dedup`` config section."""
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="run the step")
    method: Literal["minhash", "simhash"] = Field("minhash", description="candidate generation: minhash (LSH bands) "
                                                                         "or simhash (permuted blocks)")
    threshold: float = Field(0.8, gt=0.0, le=1.0, description="similarity to the kept document needed for removal")
    verify: Literal["exact", "estimated"] = Field(
        "exact", description="exact: Jaccard of the shingle-hash sets; estimated: MinHash agreement "
                             "(simhash: Hamming distance <= simhash_max_distance)")
    word_ngram: int = Field(5, ge=1, le=minhash.MAX_NGRAM, description="shingle size in words")
    cjk_ngram: int = Field(5, ge=1, le=minhash.MAX_NGRAM, description="character n-gram for documents mostly in "
                                                                      "scripts without spaces (CJK, Thai, Lao, ...)")
    shingle_hash: Literal["fast", "sha1"] = Field(
        "fast", description="sha1: datasketch's sha1_hash32 of each shingle string (slower, bit-compatible)")
    num_perm: int = Field(128, ge=8, le=1024, description="MinHash signature length (permutations)")
    seed: int = Field(1, ge=0, description="MinHash seed")
    scheme: Literal["oph", "affine32", "legacy"] = Field(
        "oph", description="oph: one-permutation MinHash with optimal densification (one sort per document); "
                           "affine32 / legacy: datasketch's num_perm permutations (>= 2.0 / < 2.0), the same "
                           "signature as datasketch.MinHash for the same seed")
    lsh_threshold: Optional[float] = Field(
        0.5, gt=0.0, lt=1.0, description="candidate threshold for the optimal bands x rows; below `threshold` "
                                         "for recall, verification restores precision (default 0.5: 25 x 5 bands "
                                         "for 128 permutations, a pair at Jaccard 0.8 shares no band with "
                                         "probability 5e-5, where 0.7's 14 x 9 missed 13%)")
    bands: Optional[int] = Field(None, ge=1, description="explicit LSH bands instead of the optimum for lsh_threshold "
                                                         "(with rows)")
    rows: Optional[int] = Field(None, ge=1, description="explicit LSH rows per band instead of the optimum for "
                                                        "lsh_threshold (with bands)")
    simhash_blocks: int = Field(6, ge=2, le=64, description="simhash: blocks of the 64-bit hash; tables choose blocks "
                                                            "- distance of them")
    simhash_max_distance: int = Field(3, ge=0, le=16, description="simhash: largest Hamming distance (bits) of a "
                                                                  "candidate pair")
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
    cc_max_rounds: int = Field(1, ge=0, le=64, description="large-star/small-star rounds of the Beam path; the "
                                                           "few edges still crossing labels afterwards are merged "
                                                           "on one worker (exact components for any value)")
    # Kept, with no effect, so that configs naming it stay valid and run directories cleaned before stay current:
    # the clean stage fingerprints the whole near_dedup section, so dropping the field would make every earlier
    # run's clean look changed (refused without --overwrite).
    cc_one_worker_max_input_bytes: int = Field(
        200_000_000, ge=0, description="no effect (accepted so that older configs stay valid): the Beam path "
                                       "always finds components by cc_max_rounds star rounds and a merge; a small "
                                       "input takes the in-memory path instead (mode auto, memory_max_input_bytes)")

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
    """Turns documents into sketches, a batch at a time (tokens, word and shingle hashes and signatures are
    computed for the whole batch in numpy). Holds no state across batches."""

    def __init__(self, cfg: NearDedupConfig):
        self.cfg = cfg
        self.shingler = minhash.ShingleHasher(cfg.word_ngram, cfg.cjk_ngram)
        self.hasher = minhash.make_hasher(cfg.num_perm, cfg.seed, cfg.scheme) if cfg.method == "minhash" else None

    def shingle_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Sorted unique uint32 shingle hashes of each text."""
        if self.cfg.shingle_hash == "sha1":
            out = []
            for text in texts:
                tokens, is_characters = minhash.shingle_units(*minhash.tokenize(text))
                out.append(minhash.shingle_hashes_sha1(tokens, self.cfg.cjk_ngram if is_characters
                                                       else self.cfg.word_ngram))
            return out
        return self.shingler.shingle_sets(texts)

    def shingles(self, text: str) -> np.ndarray:
        return self.shingle_sets([text])[0]

    def signatures(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        """(documents × num_perm) uint32 MinHash signatures, or (documents × 1) uint64 SimHashes."""
        if self.cfg.method == "simhash":
            return np.array([[simhash.simhash(s)] for s in sets], dtype=np.uint64).reshape(len(sets), 1)
        return self.hasher.signatures(sets)

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        return self.signatures([shingles])[0]

    def sketch_batch(self, docs: Sequence[Doc]) -> list[Optional[Sketch]]:
        """One sketch per document, None for a document without a single token (it takes no part in near-dedup
        and is kept)."""
        for doc in docs:
            doc_id = doc["id"]
            if not isinstance(doc_id, (int, np.integer)) or isinstance(doc_id, bool):
                raise ValueError(f"near_dedup needs integer document ids (Contract 1), got {doc_id!r}")
        sets = self.shingle_sets([doc.get("text") or "" for doc in docs])
        present = [i for i, s in enumerate(sets) if len(s)]
        signatures = self.signatures([sets[i] for i in present])
        out: list[Optional[Sketch]] = [None] * len(docs)
        for row, i in enumerate(present):
            doc_id = int(docs[i]["id"])
            out[i] = Sketch(doc_id, doc_rank(doc_id, docs[i].get("annotations"), self.cfg), signatures[row], sets[i])
        return out

    def sketch(self, doc: Doc) -> Optional[Sketch]:
        return self.sketch_batch([doc])[0]


def bucket_keys(sketch: Sketch, cfg: NearDedupConfig) -> list[int]:
    """The bucket keys of one sketch (packed integers, unique across bands / tables)."""
    return bucket_key_matrix([sketch.signature], cfg)[0].tolist()


def bucket_key_matrix(signatures: Sequence[np.ndarray] | np.ndarray, cfg: NearDedupConfig) -> np.ndarray:
    """(documents × bands) int64 bucket keys of many signatures at once."""
    if cfg.method == "simhash":
        return simhash.bucket_key_matrix(np.asarray(signatures, dtype=np.uint64).reshape(-1), cfg.simhash_blocks,
                                         cfg.simhash_max_distance)
    bands, rows = cfg.band_shape()
    signatures = np.asarray(signatures, dtype=np.uint32).reshape(-1, cfg.num_perm)
    return minhash.band_key_matrix(signatures, bands, rows)


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


def star_edge_arrays(keys: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``star_edges`` of every bucket at once: ``keys`` (documents × bands) are the bucket keys of documents
    already in rank order, ``old`` marks earlier runs' documents. Returns the distinct edges ``(a, b)`` as
    positions in that order (``a < b``)."""
    n, per_row = keys.shape if keys.ndim == 2 else (len(keys), 1)
    return star_edge_positions(keys.reshape(-1), np.repeat(np.arange(n), per_row), old)


def star_edge_positions(keys: np.ndarray, positions: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``star_edges`` of every bucket among band entries: entry i puts the document at rank position
    ``positions[i]`` into bucket ``keys[i]`` (bucket keys are unique across bands); the entries come in
    nondecreasing position order, and ``old`` marks earlier runs' documents by position. A stable sort by key
    puts each bucket's members together in rank order: the first is the centre. Returns the distinct edges
    ``(a, b)`` as positions (``a < b``)."""
    n = len(old)
    none = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if len(keys) < 2:
        return none
    order = np.argsort(keys, kind="stable")
    sorted_keys, members = keys[order], positions[order]
    first = np.empty(len(order), dtype=bool)
    first[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    if first.all():
        return none
    later = ~first
    later[1:] &= members[1:] != members[:-1]  # a document twice in one bucket is one member
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    centre = members[starts][group]
    if not old.any():
        a, b = centre[later], members[later]
    else:
        member_old = old[members]
        first_new = np.minimum.reduceat(np.where(member_old, n, members), starts)[group]
        new_member = later & ~member_old
        old_member = later & member_old & old[centre] & (first_new < n)  # linked to the bucket's first new one
        a = np.concatenate((centre[new_member], members[old_member]))
        b = np.concatenate((members[new_member], first_new[old_member]))
    if not len(a):
        return none
    codes = np.unique(a.astype(np.int64) * n + b)
    return codes // n, codes % n


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


class SimilarityCache:
    """Similarities already computed in this run, by unordered id pair (edge verification and component
    resolution share it, so no pair is compared twice)."""

    def __init__(self, cfg: NearDedupConfig):
        self.cfg = cfg
        self._known: dict[tuple[int, int], float] = {}
        self.computed = 0

    def get(self, a: Sketch, b: Sketch) -> float:
        key = (a.id, b.id) if a.id < b.id else (b.id, a.id)
        value = self._known.get(key)
        if value is None:
            value = self._known[key] = similarity(a, b, self.cfg)
            self.computed += 1
        return value


def _estimates_decide(cfg: NearDedupConfig) -> bool:
    """Whether MinHash estimates may settle clear cases before an exact Jaccard."""
    return cfg.method == "minhash" and cfg.verify == "exact"


def _reliable(sizes_a: np.ndarray, sizes_b: np.ndarray, cfg: NearDedupConfig) -> np.ndarray:
    """Pairs whose MinHash estimate is tight enough to decide by: always with num_perm permutations; with one
    permutation, when both documents have at least ``_RELIABLE_SHINGLES_PER_BIN`` shingles per bin."""
    if cfg.scheme != "oph":
        return np.ones(np.broadcast(sizes_a, sizes_b).shape, dtype=bool)
    return np.minimum(sizes_a, sizes_b) >= _RELIABLE_SHINGLES_PER_BIN * cfg.num_perm


def _agreement(signatures_a: np.ndarray, signatures_b: np.ndarray, a: np.ndarray, b: np.ndarray,
               block: int = 8192) -> np.ndarray:
    """Fraction of equal signature entries of each pair (signatures_a[a[i]], signatures_b[b[i]])."""
    out = np.empty(len(a))
    for start in range(0, len(a), block):
        sl = slice(start, start + block)
        out[sl] = (signatures_a[a[sl]] == signatures_b[b[sl]]).mean(axis=1)
    return out


def link_floor(cfg: NearDedupConfig) -> float:
    """The similarity at which a candidate edge joins its two documents into one component: ``2 * floor - 1``
    (0.6 for the default 0.8), below the removal floor. A bucket links its members to its first member only, so
    two near-duplicates x and y whose bucket's first member h is at the threshold from one of them and just
    below it from the other (h-x 0.80, h-y 0.797, x-y 0.80) would otherwise fall into different components and
    never be compared. Every similarity used here is one minus a distance that obeys the triangle inequality
    (Jaccard distance, the fraction of differing MinHash entries, SimHash's Hamming distance), so
    d(h, y) <= d(h, x) + d(x, y) <= 2 (1 - floor): y is linked whenever x is. The components' resolution still
    removes a document only for a centre it is itself similar enough to, so a lower link floor costs comparisons,
    never precision."""
    return max(0.0, 2.0 * similarity_floor(cfg) - 1.0)


def verify_pairs(signatures_a: np.ndarray, signatures_b: np.ndarray, a: np.ndarray, b: np.ndarray,
                 sizes_a: np.ndarray, sizes_b: np.ndarray, exact: Callable[[int], float],
                 cfg: NearDedupConfig) -> np.ndarray:
    """Which candidate pairs (``signatures_a[a[i]]``, ``signatures_b[b[i]]``; ``sizes_*``: their shingle counts)
    link their documents into one component (similarity >= ``link_floor``): decided by the MinHash estimates,
    computed for all pairs at once, where they are clear (far from the link floor, documents long enough),
    otherwise by ``exact(i)``, the pair's exact similarity (called for those pairs only)."""
    keep = np.zeros(len(a), dtype=bool)
    if not len(a):
        return keep
    floor = link_floor(cfg)
    if cfg.method == "simhash" and cfg.verify == "estimated":
        distance = np.bitwise_count(signatures_a[a, 0] ^ signatures_b[b, 0])
        return 1.0 - distance / simhash.BITS >= floor - 1e-12
    if cfg.method == "minhash":
        estimate = _agreement(signatures_a, signatures_b, a, b)
        if cfg.verify == "estimated":
            return estimate >= floor - 1e-12
        reliable = _reliable(sizes_a, sizes_b, cfg)
        keep = reliable & (estimate >= floor + _PREFILTER_MARGIN)
        ambiguous = ~reliable | (np.abs(estimate - floor) < _PREFILTER_MARGIN)
        ambiguous &= ~keep
    else:
        ambiguous = np.ones(len(a), dtype=bool)
    for i in np.flatnonzero(ambiguous).tolist():
        keep[i] = exact(i) >= floor - 1e-12
    return keep


def verify_edge_arrays(ordered: Sequence[Sketch], signatures: np.ndarray, a: np.ndarray, b: np.ndarray,
                       cfg: NearDedupConfig, cache: SimilarityCache) -> np.ndarray:
    """``verify_pairs`` for edges between positions in ``ordered`` (the cache keeps every exact similarity
    computed, for the components' resolution)."""
    sizes = np.fromiter((len(s.shingles) for s in ordered), dtype=np.int64, count=len(ordered))
    return verify_pairs(signatures, signatures, a, b, sizes[a], sizes[b],
                        lambda i: cache.get(ordered[a[i]], ordered[b[i]]), cfg)


class _ComponentSimilarity:
    """Similarities inside one component.

    With MinHash and exact verification, the signatures give every pair's estimate at once (vectorized); exact
    Jaccards are computed only for the pairs a decision needs (centre → candidate) and cached, so a component
    of near-identical documents costs a similarity per removed document, not per pair. Otherwise every pair's
    similarity is computed up front (estimates are cheap).
    """

    def __init__(self, ordered: Sequence[Sketch], cfg: NearDedupConfig, cache: Optional[SimilarityCache] = None,
                 signatures: Optional[np.ndarray] = None):
        self.ordered, self.cfg = ordered, cfg
        self.cache = cache or SimilarityCache(cfg)
        self.floor = similarity_floor(cfg) - 1e-12
        n = len(ordered)
        self.lazy = _estimates_decide(cfg)
        if self.lazy:
            if signatures is None:
                signatures = np.stack([s.signature for s in ordered])
            if n <= _EXACT_COVERAGE_MAX_MEMBERS:  # all pairs in one comparison (n * n * num_perm booleans)
                estimates = (signatures[:, None, :] == signatures[None, :, :]).mean(axis=2)
            else:
                estimates = np.stack([(signatures == signatures[i]).mean(axis=1) for i in range(n)])
            sizes = np.array([len(s.shingles) for s in ordered])
            reliable = _reliable(sizes[:, None], sizes[None, :], cfg)
            self.likely = estimates >= cfg.threshold  # only ranks centres by how much they would cover
            self.candidate = (estimates >= cfg.threshold - _PREFILTER_MARGIN) | ~reliable
            clear = reliable & (estimates >= cfg.threshold + _PREFILTER_MARGIN)  # as verify_pairs settles them
        else:
            self.sims = np.zeros((n, n))
            for i, j in itertools.combinations(range(n), 2):
                self.sims[i, j] = self.sims[j, i] = self.cache.get(ordered[i], ordered[j])
            self.likely = self.candidate = self.sims >= self.floor
        old = np.array([s.old for s in ordered])
        self.candidate = self.candidate & ~(old[:, None] & old[None, :])  # old documents are never compared
        np.fill_diagonal(self.likely, False)
        np.fill_diagonal(self.candidate, False)
        if self.lazy and n <= _EXACT_COVERAGE_MAX_MEMBERS:
            # small component: rank centres by exact coverage, where the estimate is not clear by itself (the
            # exact Jaccards of the clear pairs are computed only if a decision needs them)
            self.likely = self.candidate & clear
            for i, j in zip(*np.nonzero(np.triu(self.candidate & ~clear))):
                self.likely[i, j] = self.likely[j, i] = self.get(i, j) >= self.floor

    def get(self, i: int, j: int) -> float:
        if not self.lazy:
            return float(self.sims[i, j])
        return self.cache.get(self.ordered[i], self.ordered[j])

    def similar(self, i: int, among: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The members of ``among`` (a boolean mask) similar enough to ``i``, and their similarities."""
        candidates = np.flatnonzero(self.candidate[i] & among)
        sims = np.array([self.get(i, j) for j in candidates], dtype=float)
        close = sims >= self.floor
        return candidates[close], sims[close]


def _resolve_pair(ordered: Sequence[Sketch], cfg: NearDedupConfig, cache: SimilarityCache) -> list[Decision]:
    """``resolve_component`` of two documents, without the matrices (most components are pairs)."""
    first, second = ordered
    if second.old:  # both old: nothing to decide
        return []
    sim = cache.get(first, second)
    if not similar_enough(sim, cfg):
        kept = [second] if first.old else [first, second]
        return sorted(Decision(s.id, s.id, 1.0, False) for s in kept)
    removed = Decision(second.id, first.id, round(float(sim), 6), True, 1, first.old)
    if first.old:
        return [removed]
    return sorted([removed, Decision(first.id, first.id, 1.0, False, 2)])


def resolve_component(members: Sequence[Sketch], cfg: NearDedupConfig, cache: Optional[SimilarityCache] = None,
                      signatures: Optional[np.ndarray] = None) -> list[Decision]:
    """Star resolution of one connected component: decisions for its new documents.

    Documents of earlier runs are kept first; a new document similar enough to one of them is removed for the
    most similar. Then, repeatedly, a centre is chosen among the unassigned documents and kept, and every
    unassigned document similar enough to it is removed for it. ``resolution="degree"`` chooses the document
    that would cover the most unassigned ones (exactly in small components, by the MinHash estimate in large
    ones; ties: rank order); ``"rank"`` chooses
    the first in rank order (the smallest id, or the highest quality). Either way every removed document meets
    the threshold against the document kept for it (exactly, with ``verify="exact"``). Components above
    ``degree_max_component`` use the linear-memory rank rule. ``signatures``: the members' signature rows when
    the members are given in rank order already (spares stacking them again).
    """
    cache = cache or SimilarityCache(cfg)
    ordered = sorted(members, key=lambda s: s.rank)
    if signatures is not None and any(a is not b for a, b in zip(ordered, members)):
        signatures = None
    if len(ordered) == 2:
        return _resolve_pair(ordered, cfg, cache)
    if len(ordered) > cfg.degree_max_component:
        return _resolve_incremental(ordered, cfg, cache)
    sims = _ComponentSimilarity(ordered, cfg, cache, signatures)
    old = np.array([s.old for s in ordered])
    unassigned = ~old
    decisions: list[Decision] = []
    for j in np.flatnonzero(unassigned) if old.any() else ():
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


def _resolve_incremental(ordered: Sequence[Sketch], cfg: NearDedupConfig,
                         cache: Optional[SimilarityCache] = None) -> list[Decision]:
    """Rank-order resolution in memory linear in the component: each document, in rank order, is removed for
    its most similar already kept document if that one is similar enough, otherwise kept."""
    cache = cache or SimilarityCache(cfg)
    kept: list[Sketch] = []
    kept_signatures: list[np.ndarray] = []
    kept_sizes: list[int] = []
    removed_for: dict[int, int] = {}
    decisions: list[Decision] = []
    use_prefilter = _estimates_decide(cfg)
    for sketch in ordered:
        if sketch.old:
            kept.append(sketch)
            kept_signatures.append(sketch.signature)
            kept_sizes.append(len(sketch.shingles))
            continue
        best_sim, best = -1.0, None
        if kept:
            candidates = range(len(kept))
            if use_prefilter:
                estimates = (np.stack(kept_signatures) == sketch.signature).mean(axis=1)
                unreliable = ~_reliable(np.array(kept_sizes), np.array(len(sketch.shingles)), cfg)
                candidates = np.flatnonzero((estimates >= cfg.threshold - _PREFILTER_MARGIN) | unreliable)
            for index in candidates:
                sim = cache.get(sketch, kept[index])
                if sim > best_sim:
                    best_sim, best = sim, kept[index]
        if best is not None and similar_enough(best_sim, cfg):
            removed_for[best.id] = removed_for.get(best.id, 0) + 1
            decisions.append(Decision(sketch.id, best.id, round(best_sim, 6), True, 1, best.old))
        else:
            kept.append(sketch)
            kept_signatures.append(sketch.signature)
            kept_sizes.append(len(sketch.shingles))
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


def component_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of nodes 0..n-1 under edges (a, b): each node's label is the smallest node of its
    component (vectorized hooking of roots onto smaller roots, then pointer jumping, until no edge crosses)."""
    parent = np.arange(n)
    while len(a):
        ra, rb = parent[a], parent[b]
        crossing = ra != rb
        if not crossing.any():
            break
        ra, rb = ra[crossing], rb[crossing]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    return parent


def drop_superseded_old(sketches: Iterable[Sketch]) -> list[Sketch]:
    """A document id present in the new input and in an old index is the same document: the new one stands
    (so a document never removes itself and refreshing against one's own earlier output changes nothing)."""
    sketches = list(sketches)
    new_ids = {s.id for s in sketches if not s.old}
    return [s for s in sketches if not (s.old and s.id in new_ids)]


def chosen_path(cfg: NearDedupConfig, input_bytes: Optional[int], index_bytes: int = 0) -> str:
    """memory | beam | auto (decided at run time from the number of sketches): ``mode``, or for ``auto`` with a
    known input size, memory up to ``memory_max_input_bytes`` (input plus earlier runs' index files)."""
    if cfg.mode != "auto" or input_bytes is None:
        return cfg.mode
    return "memory" if input_bytes + index_bytes <= cfg.memory_max_input_bytes else "beam"


def check_unique_ids(ids: Sequence[int]) -> None:
    """The in-memory path's check that no new document id occurs twice (ValueError naming one that does)."""
    if len(set(ids)) != len(ids):
        seen: set = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))
        raise ValueError(f"near_dedup: document id {duplicate} occurs more than once; ids must be unique")


def dedup_in_memory(sketches: Iterable[Sketch], cfg: NearDedupConfig) -> list[Decision]:
    """The whole algorithm on one machine, vectorized: bucket keys of all signatures at once, star edges by a
    sort per band, estimates of all candidate edges at once, exact Jaccards only where they are ambiguous,
    components by array union-find, then each component's star resolution. The Beam path computes exactly the
    same decisions."""
    ordered = sorted(drop_superseded_old(sketches), key=lambda s: s.rank)
    if len(ordered) < 2:
        return []
    signatures = np.stack([s.signature for s in ordered])
    keys = bucket_key_matrix(signatures, cfg)
    old = np.fromiter((s.old for s in ordered), dtype=bool, count=len(ordered))
    a, b = star_edge_arrays(keys, old)
    cache = SimilarityCache(cfg)
    verified = verify_edge_arrays(ordered, signatures, a, b, cfg, cache)
    a, b = a[verified], b[verified]
    labels = component_labels(len(ordered), a, b)
    nodes = np.unique(np.concatenate((a, b)))
    nodes = nodes[np.argsort(labels[nodes], kind="stable")]
    bounds = np.flatnonzero(np.diff(labels[nodes])) + 1
    decisions: list[Decision] = []
    for component in np.split(nodes, bounds) if len(nodes) else []:
        decisions.extend(resolve_component([ordered[i] for i in component.tolist()], cfg, cache,
                                           signatures[component]))
    return sorted(decisions)


def dedup_documents(docs: Iterable[Doc], cfg: NearDedupConfig) -> dict[int, Decision]:
    """The in-memory path in this process, without Beam: ``docs`` (any iterable, read once) sketched
    ``SKETCH_BATCH`` at a time, only the sketches kept, then ``dedup_in_memory``, the function the Beam in-memory
    step (``beam.DedupInMemory``) runs on the sketches it gathers. Returns the decisions by document id (a
    document in no cluster has none). Refuses (ValueError) a document id that occurs twice."""
    builder = SketchBuilder(cfg)
    ids: list[int] = []
    sketches: list[Sketch] = []
    batch: list[Doc] = []
    for doc in docs:
        ids.append(doc["id"])
        batch.append(doc)
        if len(batch) >= SKETCH_BATCH:
            sketches.extend(s for s in builder.sketch_batch(batch) if s is not None)
            batch.clear()
    if batch:
        sketches.extend(s for s in builder.sketch_batch(batch) if s is not None)
    check_unique_ids(ids)
    return {d.id: d for d in dedup_in_memory(sketches, cfg)}


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

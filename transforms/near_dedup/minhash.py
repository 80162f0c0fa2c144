"""MinHash signatures over word / CJK-character shingles, vectorized with numpy.

Pure core of the near-duplicate step (no Beam here):

* ``tokenize``: NFKC + lower-case, words are ``\\w+`` runs; Han, Hiragana and Katakana characters (scripts
  written without spaces) are one token each, so a word n-gram over the token stream is a character n-gram in
  Chinese/Japanese text and mixed documents need no special case.
* ``shingle_hashes``: the sorted, unique 64-bit hashes of a document's n-gram shingles. Words are hashed once
  (sha1, memoized) and the n-gram hashes are combined in numpy, so there is no Python work per shingle.
  ``shingle_hash="sha1"`` instead hashes every shingle's UTF-8 bytes (``" ".join(words)``) with datasketch's
  ``sha1_hash32``: slower, but byte-for-byte what ``MinHash().update(shingle.encode())`` sees.
* ``MinHasher``: datasketch-compatible permutations (same seed, same scheme → the same signature as
  ``datasketch.MinHash`` fed the same 32-bit hash values), applied to all shingles of a document at once.
* ``exact_jaccard`` on the kept shingle sets, ``lsh_params`` (datasketch's optimal bands × rows) and
  ``band_keys``.
"""
from __future__ import annotations

import hashlib
import re
import struct
import unicodedata
from dataclasses import dataclass
from typing import Literal

import numpy as np

# Scripts written without spaces between words: Han (CJK ideographs, ext. A, compatibility), Hiragana, Katakana.
_CJK_CHARS = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile(f"[{_CJK_CHARS}]")
# One CJK character, or a run of other word characters.
_MIXED_TOKEN_RE = re.compile(f"[{_CJK_CHARS}]|[^\\W{_CJK_CHARS}]+")
_WORD_RE = re.compile(r"\w+")

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
# Per-position multipliers (odd, 64-bit) for combining word hashes into an n-gram hash.
_POSITION_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD,
     0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9, 0x2545F4914F6CDD1D, 0x9FB21C651E98DF25],
    dtype=np.uint64,
)
MAX_NGRAM = len(_POSITION_MULTIPLIERS)


def tokenize(text: str) -> tuple[list[str], int]:
    """Normalized tokens of ``text`` and how many of them are CJK characters."""
    if text.isascii():  # NFKC is the identity on ASCII; skipping it halves the cost on English text
        return _WORD_RE.findall(text.lower()), 0
    text = unicodedata.normalize("NFKC", text).lower()
    if not _CJK_RE.search(text):
        return _WORD_RE.findall(text), 0
    tokens = _MIXED_TOKEN_RE.findall(text)
    n_cjk = sum(1 for t in tokens if len(t) == 1 and _CJK_RE.match(t))
    return tokens, n_cjk


def shingle_units(tokens: list[str], n_cjk: int) -> tuple[list[str], bool]:
    """The units shingles are made of: for a mostly-CJK document every word character (Latin words embedded in
    Chinese text are spelled out too, so an edit costs the same anywhere in the text); otherwise the tokens
    (words, with CJK characters as one-character words). Returns (units, is_character_level)."""
    if n_cjk * 2 > len(tokens):
        return [char for token in tokens for char in token], True
    return tokens, False


def _word_hash64(word: str) -> int:
    return struct.unpack("<Q", hashlib.sha1(word.encode("utf-8")).digest()[:8])[0]


def _splitmix_finalize(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def shingle_hashes(tokens: list[str], ngram: int, word_cache: dict[str, int] | None = None) -> np.ndarray:
    """Sorted unique uint64 hashes of the ``ngram``-token shingles (one shingle if the text is shorter).

    ``word_cache`` memoizes word hashes across documents (the caller owns it and bounds its size).
    """
    if not tokens:
        return np.empty(0, dtype=np.uint64)
    if not 1 <= ngram <= MAX_NGRAM:
        raise ValueError(f"ngram must be in 1..{MAX_NGRAM}, got {ngram}")
    cache = {} if word_cache is None else word_cache
    for word in set(tokens).difference(cache):
        cache[word] = _word_hash64(word)
    words = np.fromiter(map(cache.__getitem__, tokens), dtype=np.uint64, count=len(tokens))
    n = min(ngram, len(tokens))
    count = len(tokens) - n + 1
    combined = np.full(count, np.uint64(n), dtype=np.uint64)  # the length keeps short texts apart from prefixes
    with np.errstate(over="ignore"):
        for position in range(n):
            combined += words[position:position + count] * _POSITION_MULTIPLIERS[position]
        return np.unique(_splitmix_finalize(combined))


def shingle_hashes_sha1(tokens: list[str], ngram: int) -> np.ndarray:
    """datasketch-exact shingle hashes: ``sha1_hash32`` of each ``" ".join(ngram words)`` (uint64, sorted unique)."""
    if not tokens:
        return np.empty(0, dtype=np.uint64)
    n = min(ngram, len(tokens))
    digests = b"".join(
        hashlib.sha1(" ".join(tokens[i:i + n]).encode("utf-8")).digest()[:4] for i in range(len(tokens) - n + 1)
    )
    return np.unique(np.frombuffer(digests, dtype="<u4").astype(np.uint64))


def to_hash32(shingles: np.ndarray, shingle_hash: str) -> np.ndarray:
    """The 32-bit values fed to the permutations (sha1 hashes already are; fast hashes keep their top half)."""
    if shingle_hash == "sha1":
        return shingles.astype(np.uint32)
    return (shingles >> np.uint64(32)).astype(np.uint32)


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


_MERSENNE_PRIME = np.uint64((1 << 61) - 1)
_MAX_HASH32 = np.uint64((1 << 32) - 1)


class MinHasher:
    """datasketch's permutations for ``num_perm`` and ``seed``, applied to whole documents at once.

    ``scheme="affine32"`` is datasketch ≥ 2.0's default (murmur finalizer pre-mix, then ``a*h + b mod 2^32``);
    ``"legacy"`` is the pre-2.0 ``(a*h + b) mod (2^61 - 1)`` truncated to 32 bits. Signatures are uint32.
    """

    def __init__(self, num_perm: int = 128, seed: int = 1, scheme: Literal["affine32", "legacy"] = "affine32",
                 chunk: int = 4096):
        self.num_perm, self.seed, self.scheme, self.chunk = num_perm, seed, scheme, chunk
        gen = np.random.RandomState(seed)
        if scheme == "affine32":
            self._a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
            self._b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        elif scheme == "legacy":
            pairs = [(gen.randint(1, _MERSENNE_PRIME, dtype=np.uint64), gen.randint(0, _MERSENNE_PRIME, dtype=np.uint64))
                     for _ in range(num_perm)]
            self._a = np.array([p[0] for p in pairs], dtype=np.uint64)
            self._b = np.array([p[1] for p in pairs], dtype=np.uint64)
        else:
            raise ValueError(f"scheme must be one of 'affine32', 'legacy', got {scheme!r}")

    def empty(self) -> np.ndarray:
        return np.full(self.num_perm, 0xFFFFFFFF, dtype=np.uint32)

    def signature(self, hashes32: np.ndarray) -> np.ndarray:
        """Min over all shingles of every permutation; chunks bound the (shingles × num_perm) temporary."""
        signature = self.empty()
        with np.errstate(over="ignore"):
            for start in range(0, len(hashes32), self.chunk):
                block = np.asarray(hashes32[start:start + self.chunk], dtype=np.uint32)[:, None]
                if self.scheme == "affine32":
                    permuted = _fmix32(block) * self._a + self._b
                else:
                    permuted = ((block.astype(np.uint64) * self._a + self._b) % _MERSENNE_PRIME) & _MAX_HASH32
                np.minimum(signature, permuted.min(axis=0).astype(np.uint32), out=signature)
        return signature


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def exact_jaccard(shingles_a: np.ndarray, shingles_b: np.ndarray) -> float:
    """Jaccard of two sorted unique hash sets."""
    if len(shingles_a) == 0 or len(shingles_b) == 0:
        return 0.0
    inter = len(np.intersect1d(shingles_a, shingles_b, assume_unique=True))
    return inter / (len(shingles_a) + len(shingles_b) - inter)


def _integrate(f, lo: float, hi: float, steps: int = 200) -> float:
    xs = np.linspace(lo, hi, steps + 1)
    return float(np.trapezoid(f(xs), xs))


def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimizing the weighted false positive / false negative areas (datasketch's rule)."""
    best, best_error = (1, 1), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = _integrate(lambda s: 1 - (1 - s ** rows) ** bands, 0.0, threshold)
            fn = _integrate(lambda s: (1 - s ** rows) ** bands, threshold, 1.0)
            error = fp * fp_weight + fn * fn_weight
            if error < best_error:
                best, best_error = (bands, rows), error
    return best


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One bucket key per band: the band index plus a 16-byte digest of its rows (bands never collide)."""
    raw = np.ascontiguousarray(signature[: bands * rows], dtype="<u4").reshape(bands, rows)
    return [band.to_bytes(2, "little") + hashlib.blake2b(raw[band].tobytes(), digest_size=14).digest()
            for band in range(bands)]


@dataclass
class Sketch:
    """What near-dedup needs of a document: its order key, signature and shingle set (never its text)."""
    id: int
    rank: tuple  # sort key: the first member of a cluster in this order is kept
    signature: np.ndarray  # uint32[num_perm]
    shingles: np.ndarray  # uint64, sorted unique (empty → the document takes no part in near-dedup)
    old: bool = False  # from an earlier run's index: always kept, only a reference for new documents

"""Shingle sets and MinHash signatures, vectorized with numpy over batches of documents.

Pure core of the near-duplicate step (no Beam here):

* Tokens: NFKC + lower-case, words are runs of word characters and combining marks (a vowel sign belongs to its
  word); characters of scripts written without spaces (Han, Hiragana, Katakana, Thai, Lao, Myanmar, Khmer) are
  one token each, so a word n-gram over the token stream is a character n-gram in Chinese, Japanese or Thai
  text and mixed documents need no special case; a document mostly in those scripts is shingled over its
  characters (``cjk_ngram``). ``tokenize``/``shingle_units`` are the readable reference (regular expressions,
  Python strings); ``ShingleHasher`` computes the same token boundaries on code-point arrays, with no Python
  object per token.
* Word hashes: a polynomial hash of each token's code points (from prefix sums over the whole batch, so every
  word costs a few array operations, not a function call), finalized with splitmix64. Shingle (n-gram) hashes
  combine the n word hashes arithmetically (per-position odd multipliers, then splitmix64): no shingle string is
  ever built. A document's shingle set is the sorted, unique top 32 bits of its shingle hashes (``uint32``).
  ``shingle_hash="sha1"`` instead hashes every shingle's UTF-8 bytes (``" ".join(words)``) with datasketch's
  ``sha1_hash32``: slower, but byte-for-byte what ``MinHash().update(shingle.encode())`` sees.
* Signatures: ``OnePermutationHasher`` (``scheme="oph"``, the default): one permutation of the shingle
  hashes split into ``num_perm`` bins, the minimum of each bin, empty bins filled by optimal densification
  (Shrivastava 2017), so that two documents agree on a bin with probability equal to their Jaccard
  similarity, as with ``num_perm`` permutations, at the cost of one sort instead of ``num_perm`` passes.
  ``MinHasher`` (``scheme="affine32"`` / ``"legacy"``): datasketch's own permutations (same seed, same
  scheme → the same signature as ``datasketch.MinHash`` fed the same 32-bit hash values).
* ``exact_jaccard`` on the shingle sets, ``lsh_params`` (datasketch's optimal bands × rows), ``band_keys``
  (one packed integer per band).
"""
from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np

# Scripts written without spaces between words, shingled by characters: Thai, Lao, Myanmar, Khmer, Hiragana,
# Katakana, Han (CJK ideographs, ext. A, compatibility). A word n-gram over their one-character tokens is a
# character n-gram.
_UNSPACED_RANGES = ((0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF),
                    (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))
_UNSPACED_CHARS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _UNSPACED_RANGES)
_UNSPACED_RE = re.compile(f"[{_UNSPACED_CHARS}]")


def _in_unspaced(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _UNSPACED_RANGES)


def _mark_ranges(code_points) -> str:
    """A character class of the combining marks (Unicode categories Mn, Mc, Me) among ``code_points`` that are
    not in an unspaced script."""
    marks = [cp for cp in code_points if unicodedata.category(chr(cp)).startswith("M") and not _in_unspaced(cp)]
    runs: list[tuple[int, int]] = []
    for cp in marks:
        if runs and runs[-1][1] == cp - 1:
            runs[-1] = (runs[-1][0], cp)
        else:
            runs.append((cp, cp))
    return "".join(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in runs)


@functools.cache
def _token_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(words, mixed tokens). A word is a run of word characters and combining marks: a vowel sign or a point
    belongs to the word it sits in (Devanagari, Bengali, Tamil ... vowel signs, Arabic and Hebrew points), where
    ``\\w`` alone would cut "हिन्दी" at every sign. A mixed token is one character of an unspaced script, or a
    run of other word characters and marks. Marks occur in the Basic Multilingual Plane, plane 1 and the
    variation selectors of plane 14; collecting them takes ~25 ms, once per process, when first needed."""
    marks = _mark_ranges(list(range(0x20000)) + list(range(0xE0100, 0xE01F0)))
    return (re.compile(f"[\\w{marks}]+"),
            re.compile(f"[{_UNSPACED_CHARS}]|(?:[^\\W{_UNSPACED_CHARS}]|[{marks}])+"))


_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
# Per-position multipliers (odd, 64-bit) for combining word hashes into an n-gram hash.
_POSITION_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD,
     0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9, 0x2545F4914F6CDD1D, 0x9FB21C651E98DF25],
    dtype=np.uint64,
)
MAX_NGRAM = len(_POSITION_MULTIPLIERS)
# The polynomial word hash: sum of code point * P**offset (mod 2**64), P odd so that it has an inverse.
_P = 0x5851F42D4C957F2D
_P_INV = pow(_P, -1, 1 << 64)
_LENGTH_SALT = _U64(0xD1B54A32D192ED03)
# Batches are cut at about this many characters: it bounds the prefix-power tables and the temporaries.
BATCH_CHARS = 1 << 18


def _splitmix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (a bijection on 64-bit values), on a fresh array."""
    h = h ^ (h >> _U64(30))
    h *= _U64(0xBF58476D1CE4E5B9)
    h ^= h >> _U64(27)
    h *= _U64(0x94D049BB133111EB)
    h ^= h >> _U64(31)
    return h


def _constants(count: int, salt: int) -> np.ndarray:
    """``count`` odd pseudo-random 64-bit constants (splitmix64 of a counter)."""
    with np.errstate(over="ignore"):
        return _splitmix(np.arange(count, dtype=np.uint64) + _U64(salt)) | _U64(1)


# ---------------------------------------------------------------- reference tokenizer (Python strings)


def tokenize(text: str) -> tuple[list[str], int]:
    """Normalized tokens of ``text`` and how many of them are characters of unspaced scripts (Chinese, Japanese
    kana, Thai, Lao, Myanmar, Khmer: one token each), the readable reference of ``ShingleHasher``'s tokenization
    and the tokenizer of ``shingle_hash="sha1"``."""
    if text.isascii():  # NFKC is the identity on ASCII
        return _token_patterns()[0].findall(text.lower()), 0
    text = unicodedata.normalize("NFKC", text).lower()
    words, mixed = _token_patterns()
    if not _UNSPACED_RE.search(text):
        return words.findall(text), 0
    tokens = mixed.findall(text)
    n_unspaced = sum(1 for t in tokens if len(t) == 1 and _UNSPACED_RE.match(t))
    return tokens, n_unspaced


def shingle_units(tokens: list[str], n_unspaced: int) -> tuple[list[str], bool]:
    """The units shingles are made of: for a document mostly in unspaced scripts every word character (Latin
    words embedded in Chinese or Thai text are spelled out too, so an edit costs the same anywhere in the text);
    otherwise the tokens (words, with unspaced characters as one-character words). Returns (units,
    is_character_level)."""
    if n_unspaced * 2 > len(tokens):
        return [char for token in tokens for char in token], True
    return tokens, False


# ---------------------------------------------------------------- code-point classes

_WORD, _UNSPACED = 1, 2
_NOT_SIMPLE = 4
_ASCII_LOWER = np.frombuffer(bytes(ord(chr(i).lower()) for i in range(256)), dtype=np.uint8).copy()
_ASCII_WORD = np.array([i < 128 and (chr(i).isalnum() or chr(i) == "_") for i in range(256)])
_BMP_CLASSES: Optional[np.ndarray] = None
_BMP_LOWER: Optional[np.ndarray] = None
# In the lower-case table: characters whose lower case is not one character of a per-character table (İ → i +
# combining dot; Σ is lower-cased by context, final sigma). A text holding one is lower-cased by Python instead.
_SPECIAL = 0xFFFFFFFF


def _bmp_classes() -> np.ndarray:
    """uint8 class (``_WORD`` | ``_UNSPACED``) of every code point below 0x10000, as the regular expressions define
    them, and the per-character lower-case table (built once per process, a few tens of milliseconds)."""
    global _BMP_CLASSES, _BMP_LOWER
    if _BMP_CLASSES is None:
        table = np.zeros(0x10000, dtype=np.uint8)
        every = "".join(map(chr, range(0x10000)))
        for match in _token_patterns()[0].finditer(every):
            table[match.start():match.end()] |= _WORD
        for lo, hi in _UNSPACED_RANGES:
            table[lo:hi + 1] |= _UNSPACED
        lower = np.arange(0x10000, dtype=np.uint32)
        for start in range(0, 0x10000, 256):  # block by block: str.lower in C; a block that changes length
            block = every[start:start + 256]  # (İ → i + combining dot) is done character by character
            low = block.lower()
            if len(low) == len(block):
                lower[start:start + 256] = _code_points(low)
            else:
                lower[start:start + 256] = [ord(c.lower()) if len(c.lower()) == 1 else _SPECIAL for c in block]
        lower[0x3A3] = _SPECIAL  # Σ: final or not depends on the next character
        _BMP_LOWER, _BMP_CLASSES = lower, table
    return _BMP_CLASSES


def _classes(cp: np.ndarray) -> np.ndarray:
    table = _bmp_classes()
    if not len(cp) or int(cp.max()) < 0x10000:
        return table[cp]
    classes = table[np.minimum(cp, 0xFFFF)]
    for value in np.unique(cp[cp > 0xFFFF]).tolist():  # rare: a per-character regular expression is fine
        classes[cp == value] = _WORD if _token_patterns()[0].fullmatch(chr(value)) else 0
    return classes


class _NfkcTable:
    """NFKC character by character, for texts where that equals NFKC of the whole text: no character that
    combines with its neighbours (a non-zero combining class, the second element of a canonical composition,
    Hangul vowel and trailing jamo) in the text or in any character's NFKC form. ``length[c]`` is the length of
    NFKC(c), 0 for a character that needs the whole-text algorithm; ``flat[start[c]:start[c] + length[c]]`` its
    code points. Built once per process (about 30 ms)."""

    def __init__(self):
        seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
        for cp in range(0x10000):
            decomposition = unicodedata.decomposition(chr(cp))
            if decomposition and not decomposition.startswith("<"):
                parts = decomposition.split()
                if len(parts) == 2:
                    seconds.add(int(parts[1], 16))
        chars = [chr(cp) if not 0xD800 <= cp < 0xE000 else "a" for cp in range(0x10000)]
        # U+10FFFF between characters: a starter nothing composes with, so this is NFKC of each one on its own
        forms = unicodedata.normalize("NFKC", "\U0010FFFF".join(chars)).split("\U0010FFFF")
        assert len(forms) == 0x10000
        interacting = np.zeros(0x110000, dtype=bool)
        interacting[list(seconds)] = True
        interacting[[cp for cp in range(0x10000) if unicodedata.combining(chars[cp])]] = True
        interacting[0x10000:] = True  # a form outside the BMP (some compatibility ideographs): whole-text path
        interacting[0xD800:0xE000] = True
        lengths = np.fromiter(map(len, forms), dtype=np.int64, count=0x10000)
        flat = _code_points("".join(forms)).astype(np.uint32)
        starts = np.cumsum(lengths) - lengths
        bad = interacting[:0x10000] | (lengths == 0)
        bad_parts = interacting[flat]
        bad |= np.add.reduceat(bad_parts, np.minimum(starts, len(flat) - 1)) > 0
        self.length = np.where(bad, 0, lengths).astype(np.int8)
        self.start = starts
        self.flat = flat
        self._composed: Optional[tuple[np.ndarray, np.ndarray]] = None
        self.single = np.where(self.length == 1, self.flat[np.minimum(self.start, len(flat) - 1)],
                               np.arange(0x10000, dtype=np.uint32)).astype(np.uint32)

    def composed(self) -> tuple[np.ndarray, np.ndarray]:
        """For the common case, one gather each: lower(NFKC(c)) and its class, with ``_NOT_SIMPLE`` set where
        NFKC(c) is not one character or lower-casing it needs Python."""
        if self._composed is None:
            classes = _bmp_classes()
            low = _BMP_LOWER[self.single]
            simple = (self.length == 1) & (low != _SPECIAL)
            low = np.where(simple, low, 0).astype(np.uint32)
            self._composed = low, np.where(simple, classes[low], _NOT_SIMPLE).astype(np.uint8)
        return self._composed

    def apply(self, cp: np.ndarray) -> Optional[np.ndarray]:
        """NFKC of a code-point array by the table, or None when a character needs the whole-text algorithm."""
        if not len(cp):
            return cp
        if int(cp.max()) >= 0x10000:
            return None
        lengths = self.length[cp]
        if lengths.min() <= 0:
            return None
        if lengths.max() == 1:
            return self.single[cp]
        lengths = lengths.astype(np.int64)
        offsets = np.cumsum(lengths) - lengths
        inside = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)
        return self.flat[np.repeat(self.start[cp], lengths) + inside]


def _nfkc_table() -> _NfkcTable:
    global _NFKC
    if _NFKC is None:
        _NFKC = _NfkcTable()
    return _NFKC


_NFKC: Optional[_NfkcTable] = None


def _nfkc_code_points(text: str) -> np.ndarray:
    """Code points of NFKC(text): by table when every character allows it, else by ``unicodedata``."""
    cp = _code_points(text)
    normalized = _nfkc_table().apply(cp)
    if normalized is not None:
        return normalized
    if not unicodedata.is_normalized("NFKC", text):
        cp = _code_points(unicodedata.normalize("NFKC", text))
    return cp


def _text_of(cp: np.ndarray) -> str:
    return cp.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique for 1-d integer arrays, by sort (numpy's hash-based unique is slower on small arrays)."""
    values = np.sort(values)
    if len(values) > 1:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values


def _lower_code_points(cp: np.ndarray) -> Optional[np.ndarray]:
    """Per-character lower case of NFKC code points; None when a character needs Python's ``str.lower``."""
    _bmp_classes()
    if not len(cp):
        return cp
    if int(cp.max()) < 0x10000:
        lowered = _BMP_LOWER[cp]
    else:
        lowered = _BMP_LOWER[np.minimum(cp, 0xFFFF)]
        astral = cp > 0xFFFF
        lowered[astral] = cp[astral]
        for value in np.unique(cp[astral]).tolist():  # rare; few astral letters have a lower case
            low = chr(value).lower()
            if low != chr(value):
                if len(low) != 1:
                    return None
                lowered[cp == value] = ord(low)
    if (lowered == _SPECIAL).any():
        return None
    return lowered


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the runs of True in a boolean array."""
    edges = np.flatnonzero(np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    return edges[0::2], edges[1::2]


# ---------------------------------------------------------------- word and shingle hashes


class _Powers:
    """P**i and P**-i (mod 2**64) for i < n, grown on demand up to ``BATCH_CHARS`` (longer texts get their own)."""

    def __init__(self):
        self.pw = self.ipw = np.empty(0, dtype=np.uint64)

    @staticmethod
    def _compute(n: int) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):
            pw = np.full(n, _P, dtype=np.uint64)
            pw[0] = 1
            ipw = np.full(n, _P_INV, dtype=np.uint64)
            ipw[0] = 1
            return np.multiply.accumulate(pw), np.multiply.accumulate(ipw)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n > len(self.pw):
            if n > 2 * BATCH_CHARS:
                return self._compute(n)
            self.pw, self.ipw = self._compute(max(n, min(2 * BATCH_CHARS, 2 * len(self.pw), 1 << 16)))
        return self.pw[:n], self.ipw[:n]


_POWERS = _Powers()


def _span_hashes(cp: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """64-bit hash of each span ``cp[start:end]``: a polynomial over its code points, independent of where the
    span lies (prefix sums, rebased by P**-start), with its length mixed in, then splitmix64."""
    pw, ipw = _POWERS.get(len(cp) + 1)
    with np.errstate(over="ignore"):
        prefix = np.empty(len(cp) + 1, dtype=np.uint64)
        prefix[0] = 0
        np.cumsum(cp * pw[:len(cp)], out=prefix[1:])
        h = (prefix[ends] - prefix[starts]) * ipw[starts]
        h += (ends - starts).astype(np.uint64) * _LENGTH_SALT
        return _splitmix(h)


def word_hashes(tokens: Sequence[str]) -> np.ndarray:
    """64-bit hashes of already normalized tokens (the same values ``ShingleHasher`` gives them in a text)."""
    if not tokens:
        return np.empty(0, dtype=np.uint64)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    return _span_hashes(_code_points("\n".join(tokens)).astype(np.uint64), starts, starts + lengths)


def _combine(words: np.ndarray, n: int, count: int) -> np.ndarray:
    """Finalized n-gram hashes of ``words[j:j+n]`` for j < count (the length n keeps short texts apart)."""
    with np.errstate(over="ignore"):
        combined = np.full(count, np.uint64(n), dtype=np.uint64)
        for position in range(n):
            combined += words[position:position + count] * _POSITION_MULTIPLIERS[position]
        return _splitmix(combined)


def shingle_hashes(tokens: Sequence[str], ngram: int) -> np.ndarray:
    """Sorted unique uint64 hashes of the ``ngram``-token shingles (one shingle if the text is shorter)."""
    if not 1 <= ngram <= MAX_NGRAM:
        raise ValueError(f"ngram must be in 1..{MAX_NGRAM}, got {ngram}")
    if not tokens:
        return np.empty(0, dtype=np.uint64)
    n = min(ngram, len(tokens))
    return _sorted_unique(_combine(word_hashes(tokens), n, len(tokens) - n + 1))


def shingle_set(tokens: Sequence[str], ngram: int) -> np.ndarray:
    """The shingle set a document is compared by: sorted unique top 32 bits of ``shingle_hashes``."""
    return _sorted_unique((shingle_hashes(tokens, ngram) >> _U64(32)).astype(np.uint32))


def shingle_hashes_sha1(tokens: Sequence[str], ngram: int) -> np.ndarray:
    """datasketch-exact shingle hashes: ``sha1_hash32`` of each ``" ".join(ngram words)`` (uint32, sorted unique)."""
    if not tokens:
        return np.empty(0, dtype=np.uint32)
    n = min(ngram, len(tokens))
    digests = b"".join(
        hashlib.sha1(" ".join(tokens[i:i + n]).encode("utf-8")).digest()[:4] for i in range(len(tokens) - n + 1)
    )
    return _sorted_unique(np.frombuffer(digests, dtype="<u4").astype(np.uint32))


def to_hash32(shingles: np.ndarray, shingle_hash: str = "fast") -> np.ndarray:
    """The 32-bit values of ``shingle_hashes`` output (sha1 hashes already are; fast ones keep the top half)."""
    if shingle_hash == "sha1" or shingles.dtype == np.uint32:
        return shingles.astype(np.uint32)
    return (shingles >> _U64(32)).astype(np.uint32)


class ShingleHasher:
    """Text → shingle set (sorted unique uint32), many texts at a time.

    The same result as ``shingle_set(shingle_units(*tokenize(text))[0], n)``, computed on code-point arrays:
    ASCII texts are lower-cased and classified with 256-entry tables; other texts are NFKC-normalized (by a
    per-character table where that is exact, else by ``unicodedata``), lower-cased and classified with tables of
    the Basic Multilingual Plane. The texts of a batch are joined by one separator each; token boundaries are the
    edges of word-character runs (CJK characters one token each; a mostly-CJK text one token per word
    character); word hashes come from prefix sums over the batch; n-grams are combined over the batch at once
    (never across two texts) and one sort by (text, hash) makes every text's set unique.
    """

    def __init__(self, word_ngram: int = 5, cjk_ngram: int = 5):
        for name, value in (("word_ngram", word_ngram), ("cjk_ngram", cjk_ngram)):
            if not 1 <= value <= MAX_NGRAM:
                raise ValueError(f"{name} must be in 1..{MAX_NGRAM}, got {value}")
        self.word_ngram, self.cjk_ngram = word_ngram, cjk_ngram

    def shingle_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        out: list[Optional[np.ndarray]] = [None] * len(texts)
        ascii_idx, other_idx = [], []
        for i, text in enumerate(texts):
            (ascii_idx if text.isascii() else other_idx).append(i)
        for chunk in _chunks(ascii_idx, [len(texts[i]) for i in ascii_idx]):
            raw = np.frombuffer("\n".join(texts[i] for i in chunk).encode("ascii"), dtype=np.uint8)
            word = _ASCII_WORD[raw]
            starts, ends = _runs(word)
            self._spans_batch(chunk, _ASCII_LOWER[raw], starts, ends, [len(texts[i]) for i in chunk], None, out)
        for chunk in _chunks(other_idx, [len(texts[i]) for i in other_idx]):
            cp, lengths, classes = self._lowered_chunk([texts[i] for i in chunk])
            cjk = (classes & _UNSPACED).astype(bool)
            word = (classes & _WORD).astype(bool)
            if not cjk.any():
                starts, ends = _runs(word)
                self._spans_batch(chunk, cp, starts, ends, lengths, None, out)
                continue
            plain = word & ~cjk
            run_starts, run_ends = _runs(plain)
            singles = np.flatnonzero(cjk)
            doc_starts = _doc_starts(lengths)
            n_runs = np.bincount(np.searchsorted(doc_starts, run_starts, side="right") - 1, minlength=len(chunk))
            n_cjk = np.bincount(np.searchsorted(doc_starts, singles, side="right") - 1, minlength=len(chunk))
            by_chars = 2 * n_cjk > n_runs + n_cjk  # mostly CJK: every word character is a unit
            units = np.flatnonzero(plain | cjk)
            unit_by_chars = by_chars[np.searchsorted(doc_starts, units, side="right") - 1]
            run_by_chars = by_chars[np.searchsorted(doc_starts, run_starts, side="right") - 1]
            single_by_chars = by_chars[np.searchsorted(doc_starts, singles, side="right") - 1]
            starts = np.concatenate((run_starts[~run_by_chars], singles[~single_by_chars], units[unit_by_chars]))
            ends = np.concatenate((run_ends[~run_by_chars], singles[~single_by_chars] + 1, units[unit_by_chars] + 1))
            order = np.argsort(starts, kind="stable")
            self._spans_batch(chunk, cp, starts[order], ends[order], lengths, by_chars, out)
        return out  # type: ignore[return-value]

    def shingle_set(self, text: str) -> np.ndarray:
        return self.shingle_sets([text])[0]

    @classmethod
    def _lowered_chunk(cls, texts: list[str]) -> tuple[np.ndarray, list[int], np.ndarray]:
        """NFKC + lower case of texts joined by one separator each, their lengths and character classes: one
        gather per table for all of them; a text holding a character that is not that simple (an NFKC form of
        several characters, a combining mark, a character outside the BMP, final sigma ...) on its own."""
        low, classes_of = _nfkc_table().composed()
        raw = _code_points("\n".join(texts))
        sizes = np.array([len(t) for t in texts], dtype=np.int64)
        astral = bool(len(raw)) and int(raw.max()) > 0xFFFF
        index = np.minimum(raw, 0xFFFF) if astral else raw
        classes = classes_of[index]
        special = classes & _NOT_SIMPLE
        if astral:
            special[raw > 0xFFFF] = _NOT_SIMPLE
        positions = np.flatnonzero(special)
        if not len(positions):
            return low[index], sizes.tolist(), classes
        starts = _doc_starts(sizes)
        special_docs = set((np.searchsorted(starts, positions, side="right") - 1).tolist())
        lowered = low[index]
        separator_cp, separator_class = np.array([10], dtype=np.uint32), np.array([0], dtype=np.uint8)
        cps, class_parts, lengths = [], [], []
        for k, text in enumerate(texts):
            if k in special_docs:
                piece = cls._lowered(text)
                cps.append(piece)
                class_parts.append(_classes(piece))
            else:
                lo, hi = starts[k], starts[k] + sizes[k]
                cps.append(lowered[lo:hi])
                class_parts.append(classes[lo:hi])
            lengths.append(len(cps[-1]))
            cps.append(separator_cp)
            class_parts.append(separator_class)
        return np.concatenate(cps), lengths, np.concatenate(class_parts)

    @staticmethod
    def _lowered(text: str) -> np.ndarray:
        cp = _nfkc_code_points(text)
        lowered = _lower_code_points(cp)
        if lowered is None:  # a character that needs Python's lower-casing (final sigma, İ, astral letters)
            lowered = _lower_code_points(_code_points(_text_of(cp).lower()))
        return lowered

    def _spans_batch(self, chunk: list[int], cp: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     lengths: list[int], by_chars: Optional[np.ndarray], out: list) -> None:
        """Shingle sets of the texts of a batch (joined by one separator each) from their token spans;
        ``by_chars`` marks the texts shingled by characters (``cjk_ngram``), the others use ``word_ngram``."""
        doc_starts = _doc_starts(lengths)
        words = _span_hashes(cp, starts, ends)
        token_doc = np.searchsorted(doc_starts, starts, side="right") - 1
        counts = np.bincount(token_doc, minlength=len(chunk))
        ngram_of_doc = np.full(len(chunk), self.word_ngram)
        if by_chars is not None:
            ngram_of_doc[by_chars] = self.cjk_ngram
        parts_doc, parts_val = [], []
        for n in np.unique(ngram_of_doc).tolist():
            if len(words) < n:
                continue
            combined = _combine(words, n, len(words) - n + 1)
            first_doc = token_doc[:len(combined)]
            valid = (first_doc == token_doc[n - 1:]) & (ngram_of_doc[first_doc] == n)
            parts_doc.append(first_doc[valid])
            parts_val.append(combined[valid] >> _U64(32))
        token_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
        for k in np.flatnonzero((counts > 0) & (counts < ngram_of_doc)).tolist():  # shorter than n: one shingle
            first, count = int(token_start[k]), int(counts[k])
            parts_doc.append(np.array([k]))
            parts_val.append(_combine(words[first:first + count], count, 1) >> _U64(32))
        if not parts_doc:
            for i in chunk:
                out[i] = np.empty(0, dtype=np.uint32)
            return
        keys = _sorted_unique((np.concatenate(parts_doc).astype(np.uint64) << _U64(32)) | np.concatenate(parts_val))
        bounds = np.searchsorted(keys >> _U64(32), np.arange(len(chunk) + 1, dtype=np.uint64))
        values = (keys & _MASK32).astype(np.uint32)
        for k, i in enumerate(chunk):
            out[i] = values[bounds[k]:bounds[k + 1]]


def _doc_starts(lengths: list[int]) -> np.ndarray:
    """Where each text starts in the joined batch (each is followed by one separator)."""
    return np.concatenate(([0], np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)[:-1]))


def _chunks(indices: list[int], sizes: list[int]) -> list[list[int]]:
    """Consecutive groups of ``indices`` of about ``BATCH_CHARS`` characters each."""
    chunks, current, total = [], [], 0
    for index, size in zip(indices, sizes):
        if current and total + size > BATCH_CHARS:
            chunks.append(current)
            current, total = [], 0
        current.append(index)
        total += size + 1
    if current:
        chunks.append(current)
    return chunks


# ---------------------------------------------------------------- signatures


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
                 chunk: int = 2048):
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
        """Min over all shingles of every permutation; blocks of rows bound the (rows × num_perm) temporary."""
        signature = self.empty()
        hashes32 = np.asarray(hashes32, dtype=np.uint32)
        if self.scheme == "affine32":
            hashes32 = _fmix32(hashes32)
        with np.errstate(over="ignore"):
            for start in range(0, len(hashes32), self.chunk):
                block = hashes32[start:start + self.chunk, None]
                if self.scheme == "affine32":
                    permuted = block * self._a
                    permuted += self._b
                else:
                    permuted = ((block.astype(np.uint64) * self._a + self._b) % _MERSENNE_PRIME) & _MAX_HASH32
                np.minimum(signature, permuted.min(axis=0).astype(np.uint32), out=signature)
        return signature

    def signatures(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        out = np.empty((len(sets), self.num_perm), dtype=np.uint32)
        for row, hashes32 in enumerate(sets):
            out[row] = self.signature(hashes32)
        return out


class OnePermutationHasher:
    """One-permutation MinHash with optimal densification, ``num_perm`` bins, for many documents at once.

    Each shingle (a 32-bit value) is mixed with the seed into 64 bits; the top bits choose its bin, the low 32
    bits are its value; a bin's signature entry is the smallest value in it. For two documents, a bin that is
    non-empty in their union agrees exactly when the union's minimum there lies in both, which happens with
    probability J. An empty bin copies the entry of the first non-empty bin along a sequence of bins fixed per
    bin (random probes, then the following bins in turn), the same sequence for every document, which keeps the
    agreement probability at J (Shrivastava, "Optimal densification for fast and accurate minwise hashing",
    ICML 2017). All of a batch's shingles are sorted once by (document, bin, value).
    """

    PROBES = 24

    def __init__(self, num_perm: int = 128, seed: int = 1):
        if not 1 <= num_perm <= 1 << 16:
            raise ValueError(f"num_perm must be in 1..65536, got {num_perm}")
        self.num_perm, self.seed = num_perm, seed
        with np.errstate(over="ignore"):
            self._key = _splitmix(np.array([seed], dtype=np.uint64) + _U64(0x632BE59BD9B4E019))[0]
        self._bin_bits = max(1, (num_perm - 1).bit_length())
        self._probes = np.random.RandomState(seed).randint(0, num_perm, (num_perm, self.PROBES))

    def signature(self, hashes32: np.ndarray) -> np.ndarray:
        return self.signatures([hashes32])[0]

    def signatures(self, sets: Sequence[np.ndarray]) -> np.ndarray:
        k = self.num_perm
        out = np.zeros((len(sets), k), dtype=np.uint32)
        if not len(sets):
            return out
        max_docs = 1 << (32 - self._bin_bits)
        if len(sets) > max_docs:
            return np.concatenate([self.signatures(sets[i:i + max_docs]) for i in range(0, len(sets), max_docs)])
        sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        values = np.concatenate([np.asarray(s, dtype=np.uint32) for s in sets]).astype(np.uint64)
        docs = np.repeat(np.arange(len(sets), dtype=np.uint64), sizes)
        with np.errstate(over="ignore"):
            mixed = _splitmix(values ^ self._key)
            bins = ((mixed >> _U64(32)) * _U64(k)) >> _U64(32)
            keys = (((docs << _U64(self._bin_bits)) | bins) << _U64(32)) | (mixed & _MASK32)
        keys.sort()
        group = keys >> _U64(32)
        first = np.concatenate(([True], group[1:] != group[:-1])) if len(keys) else np.empty(0, dtype=bool)
        cells = group[first]
        rows = (cells >> _U64(self._bin_bits)).astype(np.int64)
        cols = (cells & _U64((1 << self._bin_bits) - 1)).astype(np.int64)
        filled = np.zeros((len(sets), k), dtype=bool)
        filled[rows, cols] = True
        out[rows, cols] = (keys[first] & _MASK32).astype(np.uint32)
        empty_rows, empty_cols = np.nonzero(~filled & (sizes > 0)[:, None])
        for probe in range(self.PROBES):
            if not len(empty_rows):
                break
            source = self._probes[empty_cols, probe]
            hit = filled[empty_rows, source]
            out[empty_rows[hit], empty_cols[hit]] = out[empty_rows[hit], source[hit]]
            empty_rows, empty_cols = empty_rows[~hit], empty_cols[~hit]
        for row in np.unique(empty_rows).tolist():  # then the following non-empty bin, cyclically
            cols_here = empty_cols[empty_rows == row]
            nonempty = np.flatnonzero(filled[row])
            source = nonempty[np.searchsorted(nonempty, cols_here, side="right") % len(nonempty)]
            out[row, cols_here] = out[row, source]
        return out


def make_hasher(num_perm: int, seed: int, scheme: str):
    if scheme == "oph":
        return OnePermutationHasher(num_perm, seed)
    return MinHasher(num_perm, seed, scheme)  # type: ignore[arg-type]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def exact_jaccard(shingles_a: np.ndarray, shingles_b: np.ndarray) -> float:
    """Jaccard of two sorted unique hash sets: the two sorted runs merged by one stable sort (timsort finds the
    runs: linear, ~10x faster than a binary search of one set in the other at 2,000 shingles each); a value
    present in both is the only one that occurs twice."""
    if len(shingles_a) == 0 or len(shingles_b) == 0:
        return 0.0
    merged = np.concatenate((shingles_a, shingles_b))
    merged.sort(kind="stable")
    inter = int(np.count_nonzero(merged[1:] == merged[:-1]))
    return inter / (len(shingles_a) + len(shingles_b) - inter)


def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimizing the weighted false positive / false negative areas (datasketch's rule; the areas
    by the trapezoidal rule on 200 intervals, every (bands, rows) at once)."""
    lo = np.linspace(0.0, threshold, 201)
    hi = np.linspace(threshold, 1.0, 201)
    best, best_error = (1, 1), float("inf")
    bands = np.arange(1, num_perm + 1)[:, None]
    for rows in range(1, num_perm + 1):
        b = bands[: num_perm // rows]
        fp = np.trapezoid(1 - (1 - lo ** rows) ** b, lo, axis=1)
        fn = np.trapezoid((1 - hi ** rows) ** b, hi, axis=1)
        error = fp * fp_weight + fn * fn_weight
        i = int(np.argmin(error))
        # datasketch scans bands outermost and keeps the first strict minimum: prefer fewer bands on ties
        if error[i] < best_error or (error[i] == best_error and i + 1 < best[0]):
            best, best_error = (i + 1, rows), float(error[i])
    return best


# ---------------------------------------------------------------- band keys

_ROW_MULTIPLIERS = _constants(1024, 0x3C6EF372FE94F82B)
_BAND_SALTS = _constants(1 << 10, 0xA54FF53A5F1D36F1)
# A band key is one int64-sized integer: the band index in the top 10 bits, 54 bits of the band's hash below.
BAND_BITS = 10
_HASH_BITS = 64 - BAND_BITS


def band_hash_matrix(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(documents × bands) uint64: a hash of each band's rows (equal rows → equal hash; else ~2^-54)."""
    if bands > 1 << BAND_BITS:
        raise ValueError(f"at most {1 << BAND_BITS} bands, got {bands}")
    sig = np.asarray(signatures, dtype=np.uint32)[:, :bands * rows].reshape(len(signatures), bands, rows)
    with np.errstate(over="ignore"):
        h = (sig.astype(np.uint64) * _ROW_MULTIPLIERS[:rows]).sum(axis=2, dtype=np.uint64)
        h += _BAND_SALTS[:bands]
        return _splitmix(h) >> _U64(BAND_BITS)


def band_key_matrix(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(documents × bands) int64 keys: band index (top bits) | band hash, unique across bands."""
    hashes = band_hash_matrix(signatures, bands, rows)
    return (hashes | (np.arange(bands, dtype=np.uint64) << _U64(_HASH_BITS))).view(np.int64)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[int]:
    """One bucket key per band (Python ints; bands never collide with each other)."""
    return band_key_matrix(np.asarray(signature)[None, :], bands, rows)[0].tolist()


# ---------------------------------------------------------------- sketches


@dataclass
class Sketch:
    """What near-dedup needs of a document: its order key, signature and shingle set (never its text)."""
    id: int
    rank: tuple  # sort key: the first member of a cluster in this order is kept
    signature: np.ndarray  # uint32[num_perm] (SimHash: uint64[1])
    shingles: np.ndarray  # uint32, sorted unique (empty → the document takes no part in near-dedup)
    old: bool = False  # from an earlier run's index: always kept, only a reference for new documents

    def to_wire(self) -> tuple:
        """Plain tuple of ints and bytes: what Beam's coders move fastest (no pickling of objects or arrays)."""
        return self.id, self.rank, self.signature.dtype.char, self.signature.tobytes(), self.shingles.tobytes(), self.old

    @staticmethod
    def from_wire(wire: tuple) -> "Sketch":
        doc_id, rank, sig_type, signature, shingles, old = wire
        return Sketch(doc_id, tuple(rank), np.frombuffer(signature, dtype=sig_type),
                      np.frombuffer(shingles, dtype=np.uint32), old)

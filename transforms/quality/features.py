"""Word-order and cohesion features that catch fluent-looking gibberish, computed cheaply for batches of texts.

fastText classifies a bag of words and word bigrams, so shuffled words ("word salad") and text from an
order-1 word Markov chain ("Markov babble") look like prose to it. Two cheap signals see what it misses:

* A smoothed n-gram language model over *word classes* (frequent words stand for themselves, every other
  word for its shape: capitalisation and two-letter suffix). It is trained on the high-quality training text
  only. What matters is not the perplexity itself (that depends on the topic) but how much each extra order of
  context helps: for real prose the bigram model beats the unigram model clearly and the trigram model beats
  the bigram model; for shuffled words the bigram "gain" vanishes; for a first-order Markov chain the trigram
  gain shrinks, because the third word depends on the second only.
* Lexical cohesion: real passages repeat their topic words, while a Markov chain wanders from topic to topic,
  so the share of repeated content words is low.

Tokens are whitespace-separated units (``str.split``, several times faster than a regex tokenizer, and this
step must score thousands of documents per second per core); punctuation glued to a word becomes part of its
class ("her," -> class "her" with a trailing comma), so the model still sees commas and sentence ends.

Chinese (and Japanese/Korean) text has no spaces between words, so a model for it reads characters instead
(tokenizer ``cjk``): every character is a token (full-width digits and letters read as ASCII), a run of whitespace becomes
one visible token ``␣``, frequent
characters are their own class and the rest fall into script classes (rare ideograph, kana, hangul, letter,
digit, punctuation). Word segmentation (jieba) was measured and rejected for scoring: ~400 documents/s per
core on 512-character heads, an order of magnitude below the step's budget; characters cost a C-level
``list()``. On characters, shuffled words break the character bigrams at every word boundary and a word-bigram
Markov chain breaks the 4- and 5-grams that span three words, so the same "gain of each extra order of context"
features work with a longer context (order 5); two more cohesion features look at character *bigrams* (a
stand-in for words: most Chinese words are two characters): how many repeat earlier ones in the document and
the in-document cache gain over them.

Everything is computed over the first ``max_tokens`` tokens of a document (a sample that bounds the cost of
very long documents) and vectorised over a whole batch with numpy: hashing n-grams into fixed-size count
tables keeps the model a handful of flat arrays (saved with ``np.savez``, no pickle) and lookups O(1).
"""
from __future__ import annotations

import json
import re
import zlib
import string
from collections import Counter
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

# Characters of a document read for the order features: enough for max_tokens tokens of ordinary prose.
_CHARS_PER_TOKEN_BOUND = 16
# Punctuation that may be glued to a word; stripping it leaves the word's core.
PUNCTUATION = "".join(sorted(set(string.punctuation) | set("“”‘’«»„‚—–…·•¿¡")))
SENTENCE_END_MARKS = ".!?:"

BOS = 0  # class id of the padding before a document's first token
_MIX_MULT = np.uint64(0xBF58476D1CE4E5B9)
_ORDER_SALT = np.uint64(0x9E3779B97F4A7C15)
_STEP_MULT = np.uint64(1_000_003)


TOKENIZERS = ("whitespace", "cjk")
SPACE_TOKEN = "\u2423"  # "␣": a run of whitespace in character-tokenized text
_WHITESPACE_RUN_RE = re.compile(r"\s+")


# full-width digits and letters (common in Chinese news: "１９９８年") read as ASCII, as NFKC would, at a fraction
# of its cost
# (digits, letters and the full-width full stop of "２．４"; full-width punctuation "，（）：" is how Chinese is written
# and stays as it is)
_FULLWIDTH_RE = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a][\uff0e\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]*")
_FULLWIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}


def _ascii_forms(match: re.Match) -> str:
    return match.group(0).translate(_FULLWIDTH)


def char_stream(text: str) -> str:
    """``text`` as the character models read it: full-width digits and letters read as ASCII (only texts that have
    any are translated) and every run of whitespace replaced by the single visible token ``␣`` (C-level regex)."""
    if _FULLWIDTH_RE.search(text):  # translate the runs only: str.translate over a whole CJK text is slow
        text = _FULLWIDTH_RE.sub(_ascii_forms, text)
    return _WHITESPACE_RUN_RE.sub(SPACE_TOKEN, text)


def tokenize(text: str, max_tokens: int, tokenizer: str = "whitespace") -> list[str]:
    """Tokens of the head of ``text``: whitespace-separated (case and glued punctuation kept: both are features),
    or, for ``tokenizer="cjk"``, characters with whitespace runs as ``␣``."""
    if tokenizer == "cjk":
        return list(char_stream(text[: max_tokens * 2]))[:max_tokens]
    return text[: max_tokens * _CHARS_PER_TOKEN_BOUND].split()[:max_tokens]


def _core(token: str) -> str:
    return token.strip(PUNCTUATION)


def split_token(token: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation) of a whitespace token: '"Well,' -> ('"', 'Well', ',')."""
    core = token.strip(PUNCTUATION)
    if not core:
        return "", "", token
    lead = len(token) - len(token.lstrip(PUNCTUATION))
    return token[:lead], core, token[lead + len(core):]


class WordClasses:
    """Maps a token to a small class id: frequent words are their own class, other words fall into shape
    classes (capitalised or not, all-caps, digits, punctuation, two-letter suffix), a cheap stand-in for a
    part-of-speech tag that makes n-gram statistics dense enough to learn from a few hundred thousand words.
    Punctuation glued to the word adds its nearest mark on each side: class names are "lead|base|trail"."""

    def __init__(self, frequent_words: Sequence[str], class_names: Sequence[str] = ()):
        self.frequent = {w: i for i, w in enumerate(frequent_words)}
        self.class_ids: dict[str, int] = {name: i + 1 for i, name in enumerate(class_names)}  # 0 is BOS

    @classmethod
    def fit(cls, texts: Iterable[str], num_frequent: int, max_tokens: int) -> "WordClasses":
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(split_token(w)[1].lower() or w for w in tokenize(text, max_tokens))
        return cls([w for w, _ in counts.most_common(num_frequent)])

    def base_name(self, core: str) -> str:
        lower = core.lower()
        cap = "^" if core[:1].isupper() else ""
        if lower in self.frequent:
            return cap + lower
        if core.isdigit():
            return "<digits>"
        if len(core) > 1 and core.isupper():
            return "<CAPS>"
        return f"{cap}<{lower[-2:]}>"

    def class_name(self, token: str) -> str:
        lead, core, trail = split_token(token)
        if not core:  # a token of punctuation only: frequent ones ("--", "*") are their own class
            return f"||{trail if trail in self.frequent else '<punct>'}"
        return f"{lead[-1:]}|{self.base_name(core)}|{trail[:1]}"

    def class_id(self, token: str) -> int:
        """The id of a token's class; a class never seen in training maps to the shared unknown id."""
        return self.class_ids.get(self.class_name(token), self.unknown_id)

    def register(self, token: str) -> int:
        """Training only: the class id of ``token``, creating its class when new."""
        name = self.class_name(token)
        if name not in self.class_ids:
            self.class_ids[name] = len(self.class_ids) + 1
        return self.class_ids[name]

    @property
    def unknown_id(self) -> int:
        return len(self.class_ids) + 1

    @property
    def num_ids(self) -> int:
        return len(self.class_ids) + 2  # BOS, the classes, unknown

    def to_json(self) -> str:
        names = sorted(self.class_ids, key=self.class_ids.__getitem__)
        return json.dumps({"frequent": sorted(self.frequent, key=self.frequent.__getitem__), "classes": names})

    @classmethod
    def from_json(cls, text: str) -> "WordClasses":
        data = json.loads(text)
        return cls(data["frequent"], data["classes"])


def char_category(char: str) -> str:
    """Script class of a rare character: ``<han>``, ``<kana>``, ``<hangul>``, ``<digits>``, ``<alpha>``, ``<punct>``."""
    code = ord(char[:1] or " ")
    if 0x3400 <= code <= 0x9FFF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x3FFFF:
        return "<han>"
    if 0x3040 <= code <= 0x30FF:
        return "<kana>"
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF:
        return "<hangul>"
    if char.isdigit():
        return "<digits>"
    if char.isalpha():
        return "<alpha>"
    return "<punct>"


class CharClasses(WordClasses):
    """Classes of character tokens (tokenizer ``cjk``): the most frequent characters of the training text are
    their own class (name ``|c|``), every other character its script class (``|<han>|``, ...; see
    ``char_category``). Same interface and serialisation as ``WordClasses``."""

    @classmethod
    def fit(cls, texts: Iterable[str], num_frequent: int, max_tokens: int) -> "CharClasses":
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text, max_tokens, "cjk"))
        return cls([c for c, _ in counts.most_common(num_frequent)])

    def class_name(self, token: str) -> str:
        return f"|{token}|" if token in self.frequent else f"|{char_category(token)}|"

    @classmethod
    def from_json(cls, text: str) -> "CharClasses":
        data = json.loads(text)
        return cls(data["frequent"], data["classes"])


def _ngram_buckets(seq: np.ndarray, n: int, bits: int) -> np.ndarray:
    """Hash bucket of the n-gram ending at each position >= n-1 of ``seq`` (vectorised, length len(seq)-n+1)."""
    length = len(seq) - n + 1
    h = np.zeros(length, dtype=np.uint64)
    with np.errstate(over="ignore"):  # wrap-around multiplication is the hash
        for j in range(n):
            h = h * _STEP_MULT + seq[j : j + length]
    return _bucket_of(h, n, bits)


def _bucket_of(h: np.ndarray, n: int, bits: int) -> np.ndarray:
    """The bucket of raw n-gram hashes ``h`` (sum of seq[j] * STEP^(n-1-j), wrapping)."""
    with np.errstate(over="ignore"):
        h = (h ^ (_ORDER_SALT * np.uint64(n))) * _MIX_MULT
    return (h >> np.uint64(64 - bits)).astype(np.int64)


class HashedNgramLM:
    """An interpolated absolute-discounting n-gram model over class ids with hashed count tables.

    p_n(w | h) = (max(c(h w) - D, 0) + D * N1+(h .) * p_{n-1}(w | h')) / c(h)   when c(h) > 0, else p_{n-1}.
    Collisions in the 2**bits buckets only add a little noise to counts; the features built on top are ratios
    of these probabilities, which are robust to that.
    """

    def __init__(self, order: int, bits: int, discount: float, tables: dict[str, np.ndarray] | None = None):
        if order < 2:
            raise ValueError(f"order must be >= 2, got {order}")
        self.order, self.bits, self.discount = order, bits, discount
        self.tables = tables or {}
        self._packed: dict[int, np.ndarray] = {}

    def _concat(self, seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """All sequences, each preceded by order-1 BOS pads, and the mask of real-token positions."""
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        ids = np.fromiter(chain.from_iterable(seqs), dtype=np.uint64, count=int(lengths.sum()))
        return self._padded(ids, lengths)

    def _padded(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat ids of consecutive sequences (``lengths``) with order-1 BOS pads before each, vectorised."""
        pad = self.order - 1
        # position of every real token once pad slots are inserted before each sequence
        doc_index = np.repeat(np.arange(len(lengths)), lengths)
        target = np.arange(len(ids)) + pad * (doc_index + 1)
        flat = np.zeros(len(ids) + pad * len(lengths), dtype=np.uint64)
        real = np.zeros(len(flat), dtype=bool)
        flat[target] = ids
        real[target] = True
        return flat, real

    def _context_table(self, n: int) -> np.ndarray:
        """[buckets, 2] array of (context count, distinct continuations): one memory access per lookup."""
        packed = self._packed.get(n)
        if packed is None:
            packed = np.stack([self.tables[f"context{n}"], self.tables[f"types{n}"]], axis=1)
            self._packed[n] = packed
        return packed

    def fit(self, seqs: Sequence[Sequence[int]], vocab_size: int, groups: Sequence | None = None,
            min_docs: int = 1) -> "HashedNgramLM":
        """Count n-grams of ``seqs`` (ids in [1, vocab_size)); id vocab_size-1 may be an unseen 'unknown'.

        With ``min_docs`` > 1 an n-gram (order >= 2) is counted only when it occurs in at least that many distinct
        ``groups`` (source documents; default: each sequence its own); the uses of the others stay in their
        context's count and go to the lower order (as unseen continuations do). An n-gram of one document only says
        nothing about other documents, but it makes the model predict that document's own text far better than any
        unseen text: a training document scored later (a real corpus holds the same novel) would get n-gram gains no
        out-of-fold document had, which the second stage was never fitted on."""
        flat, real = self._concat(seqs)
        size = 1 << self.bits
        unigram = np.bincount(flat[real].astype(np.int64), minlength=vocab_size).astype(np.float32)
        tables: dict[str, np.ndarray] = {"unigram": unigram}
        if min_docs > 1:
            group_ids = np.unique(np.asarray(list(groups) if groups is not None else range(len(seqs)), dtype=str),
                                  return_inverse=True)[1].astype(np.int64)
            lengths = np.array([len(s) for s in seqs], dtype=np.int64)
            group_at = np.repeat(group_ids, lengths + self.order - 1)  # the group of every slot of ``flat``
        for n in range(2, self.order + 1):
            target = real[n - 1 :]
            grams = _ngram_buckets(flat, n, self.bits)[target]
            contexts = _ngram_buckets(flat, n - 1, self.bits)[:-1][target]
            tables[f"context{n}"] = np.bincount(contexts, minlength=size).astype(np.float32)
            pruned = np.zeros(size)
            if min_docs > 1:  # document frequency of each bucket: distinct (group, bucket) pairs
                pairs = np.unique(group_at[n - 1 :][target] * size + grams)
                docs = np.bincount(pairs % size, minlength=size)
                shared = docs[grams] >= min_docs
                pruned = np.bincount(contexts[~shared], minlength=size)
                grams, contexts = grams[shared], contexts[shared]
            tables[f"count{n}"] = np.bincount(grams, minlength=size).astype(np.float32)
            distinct = np.unique(contexts * size + grams) // size  # N1+(h .): distinct continuations
            # the backoff weight of a context is discount * types / count: the uses of its pruned continuations join
            # it (as types / discount), so that their probability goes to the lower order instead of being lost
            types = np.bincount(distinct, minlength=size) + pruned / self.discount
            tables[f"types{n}"] = types.astype(np.float32)
        self.tables = tables
        self._packed = {}
        return self

    def token_logprobs(self, seqs: Sequence[Sequence[int]] | None = None, *, flat_ids: np.ndarray | None = None,
                       lengths: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """Per order 1..N, the log-probability of every real token, flattened over the batch in input order;
        the sequences come as ``seqs`` or, already flat, as ``flat_ids`` + ``lengths``."""
        if seqs is not None:
            flat, real = self._concat(seqs)
        else:
            flat, real = self._padded(flat_ids.astype(np.uint64), lengths)
        unigram = self.tables["unigram"]
        vocab = len(unigram)
        ids = np.minimum(flat.astype(np.int64), vocab - 1)
        # add-half smoothing so that an unseen class (id >= vocab) keeps a finite probability
        prob = (unigram[ids] + 0.5) / (unigram.sum() + 0.5 * (vocab + 1))
        logprobs = [np.log(prob[real])]
        d = self.discount
        raw = flat.copy()  # raw hashes of the n-grams of the current order, extended one order at a time
        previous = _bucket_of(raw, 1, self.bits)
        for n in range(2, self.order + 1):
            with np.errstate(over="ignore"):  # the same hash as _ngram_buckets(flat, n), in O(1) per order
                raw = raw[:-1] * _STEP_MULT + flat[n - 1:]
            grams = _bucket_of(raw, n, self.bits)
            contexts, previous = previous[:-1], grams  # the context of an n-gram is the (n-1)-gram before it
            count = self.tables[f"count{n}"][grams]
            ctx, types = self._context_table(n)[contexts].T
            lower = prob[n - 1 :]
            mixed = (np.maximum(count - d, 0.0) + d * types * lower) / np.maximum(ctx, 1.0)
            higher = np.where(ctx > 0, mixed, lower)
            prob = np.concatenate([prob[: n - 1], higher])
            logprobs.append(np.log(np.maximum(prob[real], 1e-12)))
        return logprobs, real


# Personal pronouns by grammatical person: a real passage keeps to a few persons (a narrator's "she", a manual's
# "you"), a Markov chain switches between them from one clause to the next.
PRONOUN_PERSON = {
    "i": 1, "me": 1, "my": 1, "mine": 1, "myself": 1, "we": 2, "us": 2, "our": 2, "ours": 2,
    "you": 3, "your": 3, "yours": 3, "yourself": 3, "thou": 3, "thee": 3, "thy": 3,
    "he": 4, "him": 4, "his": 4, "himself": 4, "she": 5, "her": 5, "hers": 5, "herself": 5,
    "they": 6, "them": 6, "their": 6, "theirs": 6, "it": 7, "its": 7, "itself": 7,
}
# The same for character tokens (tokenizer "cjk"): 我 first person, 你/您 second, 他 she 她 it 它 (们 plural is
# a character of its own).
PRONOUN_PERSON_ZH = {"我": 1, "你": 3, "您": 3, "他": 4, "她": 5, "它": 7}
PREFILLED_WORDS = 5_000  # words whose common forms are in the token table from the start (fast model load)
MAX_TABLE_ROWS = 1_000_000  # token table bound (~32 MB of columns plus the dict)
# English version 2's half_overlap: the most frequent words of the training text are function words ("the", "she",
# "said"), not topic
FUNCTION_WORDS = 100
CACHE_WEIGHT = 0.1  # weight of the in-document cache in the cache-mixture unigram model
# English version 4: log2 of the bits of each word n-gram presence table (2**23 bits = 1 MiB; the default training
# text has ~0.5 M distinct word trigrams, so an unseen trigram reads as seen ~6 % of the time, alike for every text)
WORD_NGRAM_BITS = 23
WORD_TRIGRAM_PRIOR_N = 8  # pseudo-trigrams (half of them kept) added to every document's word_trigram_kept


class _RowTable(dict):
    """token -> row of the per-token columns; an unknown token reads as -1 (without being inserted)."""

    def __missing__(self, key: str) -> int:
        return -1


def _half_overlap(doc_of: np.ndarray, keys: np.ndarray, second: np.ndarray, num_docs: int) -> np.ndarray:
    """Per document, the share of its second-half items whose key occurs in its first half (0 when the second
    half has none, like the other bigram features): a passage keeps to its topic, a Markov chain over many
    documents drifts away from it. ``np.isin`` on (document, key) codes: one sort, no per-document loop."""
    mixed = (keys.astype(np.uint64) * _MIX_MULT) >> np.uint64(17)
    combined = (doc_of.astype(np.uint64) << np.uint64(47)) | mixed
    in_first = np.isin(combined[second], combined[~second])
    later = doc_of[second]
    total = np.bincount(later, minlength=num_docs).astype(np.float64)
    hits = np.bincount(later, weights=in_first.astype(np.float64), minlength=num_docs)
    return hits / np.maximum(total, 1)


_LINE_ENDS = tuple("。！？；：…”’」』）.!?;:)")


def line_end_share(head: str) -> float:
    """The share of the non-empty lines of ``head`` that end like a sentence: prose paragraphs do, tables of
    contents, lists and code lines do not (1 for a single unfinished line: a cut head is not a list)."""
    lines = [line for line in map(str.strip, head.split("\n")) if line]
    if len(lines) < 2:
        return 1.0
    return sum(line.endswith(_LINE_ENDS) for line in lines[:-1]) / (len(lines) - 1)


def _earlier_occurrences(doc_of: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each item, in input order: how many earlier items of the same document carry the same key."""
    # one stable sort of a combined key (document in the high bits, 47 bits of the key below) groups equal
    # (document, key) pairs while keeping their positions in order; a 47-bit collision is negligible here
    mixed = (keys.astype(np.uint64) * _MIX_MULT) >> np.uint64(17)
    combined = (doc_of.astype(np.uint64) << np.uint64(47)) | mixed
    order = np.argsort(combined, kind="stable")
    ranked = combined[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = ranked[1:] != ranked[:-1]
    index = np.arange(len(order))
    group_start = np.maximum.accumulate(np.where(new_group, index, 0))
    earlier = np.empty(len(order), dtype=np.int64)
    earlier[order] = index - group_start
    return earlier


_BRACKET_PAIRS = (("（", "）"), ("(", ")"), ("“", "”"), ("《", "》"), ("「", "」"), ("【", "】"), ("‘", "’"))


def bracket_imbalance(text: str, ascii_quotes: bool = False) -> float:
    """Unpaired brackets and quotes per pair used (0 when every one is closed): edited text closes what it opens,
    shuffled words and Markov chains do not. Counted over the head that the order features read. With
    ``ascii_quotes`` the straight quote ``"`` counts too (an odd number of them leaves one unpaired)."""
    head = text[:2048]
    opened = unpaired = 0
    for left, right in _BRACKET_PAIRS:
        a, b = head.count(left), head.count(right)
        opened += max(a, b)
        unpaired += abs(a - b)
    if ascii_quotes:
        straight = head.count('"')
        opened += (straight + 1) // 2
        unpaired += straight % 2
    return unpaired / (opened + 1)


_OPENING_QUOTES = ('"', "\u201c")
_CLOSING_QUOTES = ('"', "\u201d")
_DOUBLE_QUOTES = ('"', "\u201c", "\u201d")
_AFTER_CLOSING = ".,;:!?)"
QUOTE_OPENS, QUOTE_CLOSES, QUOTE_UNPLACED = 1, 2, 4


def quote_role(token: str) -> int:
    """Bits of the roles of the double quote marks of a whitespace token: ``QUOTE_OPENS`` when it starts with one,
    ``QUOTE_CLOSES`` when it ends with one (before trailing punctuation: '."' and '"),' close); ``QUOTE_UNPLACED``
    when it has a mark that does neither: one standing alone (spaced-out typography says nothing about direction)
    or inside the token (``{0}!".format``, ``12"x``)."""
    marks = sum(map(token.count, _DOUBLE_QUOTES))
    if not marks:
        return 0
    if len(token) < 2:
        return QUOTE_UNPLACED
    role = QUOTE_OPENS if token.startswith(_OPENING_QUOTES) else 0
    if token.rstrip(_AFTER_CLOSING).endswith(_CLOSING_QUOTES) and len(token.rstrip(_AFTER_CLOSING)) > (role > 0):
        role |= QUOTE_CLOSES
    placed = (role & QUOTE_OPENS > 0) + (role & QUOTE_CLOSES > 0)
    return role | (QUOTE_UNPLACED if marks > placed else 0)


def _inside_quotes(roles: np.ndarray, doc_of: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per token, whether it is quoted speech: it opens a quote, or the last quote mark before it in its document
    opened one (a closing token is still inside: its word is spoken). Vectorised: forward fill of the last mark."""
    index = np.arange(len(roles))
    has = (roles & (QUOTE_OPENS | QUOTE_CLOSES)) > 0  # an unplaced mark says nothing about the voice
    last = np.maximum.accumulate(np.where(has, index, -1))
    before = np.concatenate([[-1], last[:-1]])  # the last mark strictly before each token
    before[before < starts[doc_of]] = -1  # not across documents
    open_before = (before >= 0) & ((roles[np.maximum(before, 0)] & QUOTE_CLOSES) == 0)
    return ((roles & QUOTE_OPENS) > 0) | open_before


def _quote_alternation(roles: np.ndarray, doc_of: np.ndarray, num_docs: int, reset: bool = True) -> np.ndarray:
    """Per document, quote marks whose role repeats the previous mark's (open after open, close after close) per
    mark used + 1 (0 without quotes). A token that opens and closes ('"Yes."') is an opening then a closing mark.
    With ``reset`` (feature version 3) an unplaced mark (spaced off its word, or inside a token) starts the count
    afresh: it may be the closing mark the next opening one follows, so that opening mark is no repeat."""
    # events in text order, three slots per token: its opening mark, an unplaced one, its closing mark
    opening = np.flatnonzero(roles & QUOTE_OPENS) * 3
    unplaced = np.flatnonzero(roles & QUOTE_UNPLACED) * 3 + 1 if reset else np.zeros(0, dtype=np.int64)
    closing = np.flatnonzero(roles & QUOTE_CLOSES) * 3 + 2
    events = np.sort(np.concatenate([opening, unplaced, closing]))
    kind = events % 3
    doc = doc_of[events // 3]
    marks = np.bincount(doc[kind != 1], minlength=num_docs).astype(np.float64)
    if len(events) < 2:
        return np.zeros(num_docs)
    repeat = (doc[1:] == doc[:-1]) & (kind[1:] == kind[:-1]) & (kind[1:] != 1)
    bad = np.bincount(doc[1:], weights=repeat.astype(np.float64), minlength=num_docs)
    return bad / (marks + 1)


def word_ngram_hashes(keys: np.ndarray, doc_of: np.ndarray, n: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(bucket of each word n-gram that lies inside one document, the index of its first word) of a flat batch of
    stable word keys (``stable_word_key``)."""
    length = len(keys) - n + 1
    if length <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    same = doc_of[: length] == doc_of[n - 1 :]
    h = np.zeros(length, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * _STEP_MULT + keys[j : j + length].astype(np.uint64)
    first = np.flatnonzero(same)
    return _bucket_of(h[first], n, bits), first


def stable_word_key(token: str) -> int:
    """A key of a lower-cased whitespace token (glued punctuation kept) that is the same in every process (Python's
    str hash is not), for the word n-gram tables a model saves: two CRCs, 63 bits."""
    data = token.lower().encode("utf-8", "surrogatepass")
    return (zlib.crc32(data) << 31) ^ zlib.adler32(data)


def _word_ngram_continuation(keys: np.ndarray, doc_of: np.ndarray, num_docs: int, bigrams: np.ndarray,
                             trigrams: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document: (the share of its word trigrams whose two word bigrams both occur in the training prose that
    occur there as a trigram too, the share of its trigram positions whose two bigrams both occur). An order-1 word
    Markov chain over real prose keeps every word pair, so both its bigrams are known far more often than in new
    prose, but it draws the third word from the second alone, so the triple is one the prose has less often. The
    first share is smoothed towards 0.5 (``WORD_TRIGRAM_PRIOR_N``); a document with no such trigram gets 0.5 (no
    evidence either way)."""
    bigram_bucket, bigram_at = word_ngram_hashes(keys, doc_of, 2, bits)
    known_pair = np.zeros(len(keys), dtype=bool)  # whether the bigram starting at each token is known
    known_pair[bigram_at] = _test_bits(bigrams, bigram_bucket)
    trigram_bucket, trigram_at = word_ngram_hashes(keys, doc_of, 3, bits)
    both = known_pair[trigram_at] & known_pair[trigram_at + 1]
    seen = _test_bits(trigrams, trigram_bucket) & both
    docs = doc_of[trigram_at]
    positions = np.bincount(docs, minlength=num_docs).astype(np.float64)
    both_n = np.bincount(docs, weights=both.astype(np.float64), minlength=num_docs)
    seen_n = np.bincount(docs, weights=seen.astype(np.float64), minlength=num_docs)
    # a few trigrams say little: the share is pulled towards 0.5 by WORD_TRIGRAM_PRIOR_N pseudo-trigrams, so that a
    # short text or one of few known word pairs (a Usenet header block) is not read as a chain by chance
    kept = (seen_n + 0.5 * WORD_TRIGRAM_PRIOR_N) / (both_n + WORD_TRIGRAM_PRIOR_N)
    return kept, both_n / np.maximum(positions, 1)


def _set_bits(size_bits: int, buckets: np.ndarray) -> np.ndarray:
    """A packed presence table (uint8, little bit order) with the bits of ``buckets`` set."""
    present = np.zeros(1 << size_bits, dtype=bool)
    present[buckets] = True
    return np.packbits(present, bitorder="little")


def _test_bits(table: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    return ((table[buckets >> 3] >> (buckets & 7).astype(np.uint8)) & 1).astype(bool)


class OrderFeatures:
    """Word classes + class n-gram model + word statistics: text in, a fixed-length float vector out."""

    COHESION = ("log_tokens", "cache_gain", "content_repeat", "name_repeat", "content_share",
                "pronoun_entropy", "odd_quotes")
    # tokenizer "cjk" only: cohesion over character bigrams (see the module docstring)
    BIGRAM_COHESION = ("bigram_repeat", "bigram_cache_gain", "bracket_imbalance")
    # Version of the cjk features. 1: straight-quote parity is its own 0/1 column (odd_quotes), as for English.
    # 2: it is part of bracket_imbalance and odd_quotes is 0. In Chinese text the straight quote is rare (prose
    # quotes with “”), so odd_quotes is 1 for a handful of training documents; the second stage multiplies every
    # feature by every other, and the products with such a rare 0/1 column are fitted on those few documents:
    # they swung Markov babble with one stray '"' to a confident "prose". A share of unpaired marks among all
    # the brackets and quotes used is graded and seen in every document. Models without the field are version 1.
    CJK_FEATURE_VERSION = 2
    # cjk version 2 adds two columns. Topic drift: the share of the second half's letter bigrams (most Chinese
    # words are two characters) that the first half used. A word-bigram Markov chain over many documents keeps
    # each word pair real, so the n-gram gains see little, but it changes topic every few words and its second
    # half shares few words with its first; a passage keeps to its topic (bigram_repeat counts repeats anywhere,
    # mostly near ones: function-word pairs). Line ends: the share of lines that end like a sentence; tables of
    # contents and lists, whose lines repeat words as much as prose does, end their lines with none.
    BIGRAM_COHESION_V2 = ("half_overlap", "line_end_share")
    # Version of the English (whitespace) features. 2 replaces two columns of version 1 and adds one, for Markov
    # babble over dialogue-rich prose (a novel's chains keep every word pair, so fastText and the n-gram gains see
    # little), each measured to hold on real text of every typography:
    # * pronoun_entropy becomes voice_pronoun_entropy: the entropy of pronoun persons counted apart inside quoted
    #   speech and in narration (weighted by their pronouns). Dialogue mixes "I"/"you" in speech with "she" in
    #   narration, which version 1 took for a chain switching persons; a chain mixes them within each voice.
    # * odd_quotes (straight-quote parity, a rare 0/1 column whose pairwise products were fitted on a handful of
    #   documents) becomes quote_alternation: quote marks that repeat the previous mark's role (an opening one after
    #   an opening one, a closing one after a closing one) per mark used. Roles come from the position in the token
    #   (opening: at its start, closing: at its end before trailing punctuation), so straight and curly quotes read
    #   alike; a spaced-out quote has no role. A chain keeps each quoted word but not the alternation.
    # * half_overlap (as for cjk, over words): the share of the second half's content words the first half used.
    # Version 3: quote_alternation starts afresh after a quote mark that is neither a token's opening nor its closing
    # one (spaced off its word: 'do. "'; inside a code token: '{0}!".format'): that mark may be the closing one the
    # next opening mark follows. Version 2 skipped such marks and counted the opening mark after them as a repeat,
    # which removed real Usenet posts and gcloud and Python examples.
    # Version 4 adds two columns from word (not class) n-grams of the training prose, for Markov babble over prose
    # like the training prose (Austen): the class model's trigram gain is as high for it as for real Austen, whose
    # words it shares, and the cohesion features are low for short real passages too. An order-1 word chain keeps
    # every word pair of its source and draws each word from the one before alone:
    # * word_bigram_known: the share of word trigram positions whose two word bigrams both occur in the training
    #   prose (a chain over similar prose: most of them; new prose of any kind: fewer);
    # * word_trigram_kept: among those, the share whose word trigram occurs there too (a chain: few, since the
    #   third word ignores the first).
    # Words are lower-cased whitespace tokens (glued punctuation kept) under a process-independent key, in two
    # hashed presence tables of WORD_NGRAM_BITS bits fitted with the class model.
    ENGLISH_FEATURE_VERSION = 4
    COHESION_EN_V2 = ("log_tokens", "cache_gain", "content_repeat", "name_repeat", "content_share",
                      "voice_pronoun_entropy", "quote_alternation")
    WORD_COHESION_V2 = ("half_overlap",)
    WORD_NGRAMS_V4 = ("word_trigram_kept", "word_bigram_known")
    # the feature versions this code computes, per tokenizer (the last one is what it fits)
    READABLE_FEATURE_VERSIONS = {"whitespace": (1, 2, 3, ENGLISH_FEATURE_VERSION), "cjk": (1, CJK_FEATURE_VERSION)}

    def __init__(self, classes: WordClasses, lm: HashedNgramLM, words: Sequence[str], word_counts: np.ndarray,
                 max_tokens: int, tokenizer: str = "whitespace", feature_version: int = 1,
                 word_ngrams: tuple[np.ndarray, np.ndarray] | None = None):
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
        self.classes, self.lm, self.max_tokens, self.tokenizer = classes, lm, max_tokens, tokenizer
        self.extra = self.BIGRAM_COHESION if tokenizer == "cjk" else ()
        if tokenizer == "cjk" and feature_version >= 2:
            self.extra = self.extra + self.BIGRAM_COHESION_V2
        if feature_version not in self.READABLE_FEATURE_VERSIONS[tokenizer]:
            raise ValueError(f"order features version {feature_version} with tokenizer {tokenizer!r}: this code "
                             f"reads {', '.join(map(str, self.READABLE_FEATURE_VERSIONS[tokenizer]))}")
        self.feature_version = feature_version
        # English version 2: voices, quote alternation and topic drift (see ENGLISH_FEATURE_VERSION)
        self.voices = tokenizer == "whitespace" and feature_version >= 2
        self.cohesion = self.COHESION_EN_V2 if self.voices else self.COHESION
        if self.voices:
            self.extra = self.WORD_COHESION_V2
        # English version 4: packed presence tables of the training prose's word bigrams and trigrams
        self.word_ngrams = word_ngrams if tokenizer == "whitespace" and feature_version >= 4 else None
        if tokenizer == "whitespace" and feature_version >= 4:
            if word_ngrams is None:
                raise ValueError("order features version 4 need the word n-gram tables (word_ngrams)")
            self.extra = self.extra + self.WORD_NGRAMS_V4
        # version 2 (cjk): straight quotes are counted by bracket_imbalance, not by the odd_quotes column
        self.quotes_in_brackets = tokenizer == "cjk" and feature_version >= 2
        self.odd_quotes_column = feature_version == 1
        self.words = list(words)
        self.word_ids = {w: i + 1 for i, w in enumerate(self.words)}  # 0: out of vocabulary
        self.word_counts = np.asarray(word_counts, dtype=np.float64)
        total = self.word_counts.sum()
        # add-half smoothed unigram over lower-cased words (index 0 = any unseen word)
        self.word_logprob = np.log((np.concatenate([[0.0], self.word_counts]) + 0.5) /
                                   (total + 0.5 * (len(self.words) + 1)))
        self.word_person = np.zeros(len(self.words) + 1, dtype=np.int64)
        for w, person in (PRONOUN_PERSON_ZH if tokenizer == "cjk" else PRONOUN_PERSON).items():
            if w in self.word_ids:
                self.word_person[self.word_ids[w]] = person
        parts = [("", "", "")] * classes.num_ids  # (lead, base, trail) per class id; BOS and unknown are empty
        for name, i in classes.class_ids.items():
            parts[i] = tuple(name.split("|", 2))
        self.class_is_content = np.array([b.startswith(("<", "^<")) and b != "<digits>" for _, b, _ in parts])
        self.class_is_name = np.array([b.startswith("^<") or b == "<CAPS>" for _, b, _ in parts])
        self.class_ends_sentence = np.array([(t[:1] in SENTENCE_END_MARKS and t != "") or b == "" for _, b, t in parts])
        # the most frequent words in their common surface forms; other forms are added as they are met
        if tokenizer == "cjk":
            self._build_token_table(self.words[:PREFILLED_WORDS])
        else:
            self._build_token_table(chain.from_iterable((w, w.capitalize(), w + ",", w + ".")
                                                        for w in self.words[:PREFILLED_WORDS]))

    @classmethod
    def fit(cls, texts: Sequence[str], *, num_frequent: int = 1000, order: int = 3, bits: int = 20,
            discount: float = 0.75, max_tokens: int = 256, max_words: int = 50_000,
            tokenizer: str = "whitespace", groups: Sequence | None = None, min_docs: int = 1) -> "OrderFeatures":
        """Fit on ``texts`` (high-quality text); ``groups`` and ``min_docs``: see ``HashedNgramLM.fit``."""
        classes = (CharClasses if tokenizer == "cjk" else WordClasses).fit(texts, num_frequent, max_tokens)
        token_lists = [tokenize(text, max_tokens, tokenizer) for text in texts]
        seqs = [[classes.register(t) for t in toks] for toks in token_lists]
        lm = HashedNgramLM(order, bits, discount).fit(seqs, classes.num_ids, groups, min_docs)
        counts = Counter(core.lower() for toks in token_lists for core in map(_core, toks) if core)
        words = counts.most_common(max_words)
        version = cls.READABLE_FEATURE_VERSIONS[tokenizer][-1]
        word_ngrams = None
        if tokenizer == "whitespace" and version >= 4:
            lengths = np.array([len(toks) for toks in token_lists], dtype=np.int64)
            keys = np.fromiter((stable_word_key(t) for toks in token_lists for t in toks), dtype=np.int64,
                               count=int(lengths.sum()))
            doc_of = np.repeat(np.arange(len(token_lists)), lengths)
            word_ngrams = tuple(_set_bits(WORD_NGRAM_BITS, word_ngram_hashes(keys, doc_of, n, WORD_NGRAM_BITS)[0])
                                for n in (2, 3))
        return cls(classes, lm, [w for w, _ in words], np.array([c for _, c in words], dtype=np.float64), max_tokens,
                   tokenizer, version, word_ngrams)

    @property
    def names(self) -> list[str]:
        names = list(self.cohesion) + list(self.extra)
        names += [f"class_lp{n}" for n in range(1, self.lm.order + 1)]
        for n in range(2, self.lm.order + 1):
            names += [f"class_gain{n}", f"class_drop{n}_0.5", f"class_drop{n}_1"]
        return names

    def _build_token_table(self, tokens: Iterable[str]) -> None:
        """Surface form -> row of per-token columns (class id, word id, identity key, is alphabetic), so that
        scoring costs one C-level dict lookup per token. Known word forms are added up front; new forms are
        appended as they are met, up to MAX_TABLE_ROWS (a long run meets an open vocabulary)."""
        self.token_row: _RowTable = _RowTable()
        self._columns = np.zeros((1024, 6), dtype=np.int64)
        self._rows = 0
        self._add_rows(list(dict.fromkeys(tokens)))

    def _describe(self, token: str) -> tuple[int, int, int, int, int, int]:
        core = _core(token)
        lower = core.lower()
        word = self.word_ids.get(lower, 0)
        # a word outside the vocabulary still needs an identity to detect repeats: a negative hash never
        # equals a word id (Python's str hash is per process, which is all a document needs)
        key = word or -1 - (hash(lower) & 0x3FFF_FFFF_FFFF_FFFF)
        stable = stable_word_key(token) if self.word_ngrams is not None else 0
        return (self.classes.class_id(token), word, key, int(lower.isalpha()), quote_role(token),  # "".isalpha(): False
                stable)

    def _add_rows(self, tokens: Iterable[str]) -> list[tuple[int, int, int, int, int, int]]:
        """Describe new surface forms and append them to the table (while it has room)."""
        described = [self._describe(t) for t in tokens]
        room = min(len(described), MAX_TABLE_ROWS - self._rows)
        if room > 0:
            while self._rows + room > len(self._columns):
                self._columns = np.concatenate([self._columns, np.zeros_like(self._columns)])
            self._columns[self._rows : self._rows + room] = described[:room]
            table = self.token_row
            for offset, token in enumerate(tokens[:room]):
                table[token] = self._rows + offset
            self._rows += room
        return described

    def _token_columns(self, tokens: list[str]) -> tuple[np.ndarray, ...]:
        """(class id, word id [0 = unseen], identity key, is alphabetic, quote role, stable word key [version 4,
        else 0]) for each token."""
        # map() over the bound lookup keeps the per-token loop in C: the hot loop of the whole step
        rows = np.fromiter(map(self.token_row.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        unseen = np.flatnonzero(rows < 0)
        if len(unseen):
            new_forms = list(dict.fromkeys(tokens[i] for i in unseen))
            self._add_rows(new_forms)
            rows[unseen] = [self.token_row[tokens[i]] for i in unseen]
        columns = self._columns[rows] if (rows >= 0).all() else self._columns_with_overflow(tokens, rows)
        return columns[:, 0], columns[:, 1], columns[:, 2], columns[:, 3].astype(bool), columns[:, 4], columns[:, 5]

    def _columns_with_overflow(self, tokens: list[str], rows: np.ndarray) -> np.ndarray:
        """The table is full: describe the forms that did not fit on the fly."""
        columns = self._columns[np.maximum(rows, 0)]
        missing = np.flatnonzero(rows < 0)
        columns[missing] = [self._describe(tokens[i]) for i in missing]
        return columns

    def transform(self, texts: Sequence[str], token_lists: Sequence[list[str]] | None = None) -> np.ndarray:
        """Feature matrix [len(texts), len(self.names)] (float64), vectorised over the batch.

        ``token_lists`` (``tokenize`` of each text's head, or a longer ``str.split``) may be passed in by a caller that
        has tokenised the texts already; only the first ``max_tokens`` of each are used."""
        out = np.zeros((len(texts), len(self.names)), dtype=np.float64)
        if not texts:
            return out
        if token_lists is None:
            token_lists = [tokenize(t, self.max_tokens, self.tokenizer) for t in texts]
        else:
            token_lists = [toks[: self.max_tokens] for toks in token_lists]
        lengths = np.array([len(toks) for toks in token_lists], dtype=np.int64)
        out[:, 0] = np.log1p(lengths)
        if self.odd_quotes_column:
            out[:, 6] = [t.count('"') % 2 for t in texts]
        present = lengths > 0
        if not present.any():
            return out
        docs = np.flatnonzero(present)
        lengths = lengths[docs]
        tokens = list(chain.from_iterable(token_lists[i] for i in docs))
        class_ids, word_ids, word_keys, alpha, roles, stable_keys = self._token_columns(tokens)
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        position = np.arange(len(tokens)) - np.repeat(starts, lengths)
        per_doc = lambda values: np.add.reduceat(values, starts)  # noqa: E731

        # cache model: how much better a word is predicted by its earlier uses in the same document
        earlier = _earlier_occurrences(doc_of, word_keys)
        p_static = np.exp(self.word_logprob[word_ids])
        p_cache = earlier / np.maximum(position, 1)
        cache_gain = np.log((CACHE_WEIGHT * p_cache + (1 - CACHE_WEIGHT) * p_static) / p_static)
        out[docs, 1] = per_doc(cache_gain) / lengths
        content = self.class_is_content[class_ids] & alpha
        n_content = per_doc(content.astype(np.float64))
        first_content = per_doc((content & (earlier == 0)).astype(np.float64))
        out[docs, 2] = np.where(n_content > 0, 1.0 - first_content / np.maximum(n_content, 1), 0.0)
        prev_class = np.concatenate([[0], class_ids[:-1]])
        prev_class[starts] = 0
        is_name = content & self.class_is_name[class_ids] & ~self.class_ends_sentence[prev_class]
        names_n = per_doc(is_name.astype(np.float64))
        names_first = per_doc((is_name & (earlier == 0)).astype(np.float64))
        out[docs, 3] = np.where(names_n > 0, 1.0 - names_first / np.maximum(names_n, 1), 0.5)
        out[docs, 4] = n_content / lengths
        # entropy of the grammatical persons of the pronouns used (version 2: within each voice, speech and narration)
        person = self.word_person[word_ids]
        persons = max(PRONOUN_PERSON.values()) + 1
        used = person > 0
        voices = 2 if self.voices else 1
        group = doc_of * 2 + _inside_quotes(roles, doc_of, starts) if self.voices else doc_of
        counts = np.bincount(group[used] * persons + person[used], minlength=len(docs) * voices * persons)
        counts = counts.reshape(len(docs) * voices, persons).astype(np.float64)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        entropy = -(share * np.log(np.where(share > 0, share, 1.0))).sum(axis=1)
        if not self.voices:
            out[docs, 5] = entropy
        else:  # the voices' entropies weighted by their pronouns
            weights = counts.sum(axis=1).reshape(len(docs), 2)
            out[docs, 5] = (entropy.reshape(len(docs), 2) * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1)
        if self.voices:
            out[docs, 6] = _quote_alternation(roles, doc_of, len(docs), reset=self.feature_version >= 3)
            # topic words: alphabetic, not among the most frequent words of the training text (function words)
            topical = alpha & ((word_ids == 0) | (word_ids > FUNCTION_WORDS))
            second = 2 * position >= lengths[doc_of]
            out[docs, len(self.cohesion)] = _half_overlap(doc_of[topical], word_keys[topical], second[topical],
                                                          len(docs))
        if self.word_ngrams is not None:
            col = len(self.cohesion) + len(self.WORD_COHESION_V2)
            kept, known = _word_ngram_continuation(stable_keys, doc_of, len(docs), *self.word_ngrams, WORD_NGRAM_BITS)
            out[docs, col], out[docs, col + 1] = kept, known

        col = len(self.cohesion)
        if self.extra and self.tokenizer == "cjk":
            out[:, col + 2] = [bracket_imbalance(t, self.quotes_in_brackets) for t in texts]
            if self.feature_version >= 2:
                out[:, col + 4] = [line_end_share(t[: self.max_tokens * 2]) for t in texts]
            self._bigram_cohesion(out[:, col:col + len(self.extra)], docs, doc_of, starts, lengths, word_ids,
                                  word_keys, alpha)
        col += len(self.extra)
        # class n-gram model: gains of each extra order of context, and how often it hurts
        logprobs, _ = self.lm.token_logprobs(flat_ids=class_ids, lengths=lengths)
        for lp in logprobs:
            out[docs, col] = per_doc(lp) / lengths
            col += 1
        for n in range(1, self.lm.order):
            gain = logprobs[n] - logprobs[n - 1]
            out[docs, col] = per_doc(gain) / lengths
            out[docs, col + 1] = per_doc((gain < -0.5).astype(np.float64)) / lengths
            out[docs, col + 2] = per_doc((gain < -1.0).astype(np.float64)) / lengths
            col += 3
        return out

    def _bigram_cohesion(self, out: np.ndarray, docs: np.ndarray, doc_of: np.ndarray, starts: np.ndarray,
                         lengths: np.ndarray, word_ids: np.ndarray, word_keys: np.ndarray, alpha: np.ndarray) -> None:
        """Character-bigram cohesion (tokenizer ``cjk``), into ``out[docs]``: the share of letter bigrams that
        repeat an earlier bigram of the same document, and the mean gain of a cache model over bigrams (how much
        better a bigram is predicted by its earlier uses in the document than by the static character model); from
        feature version 2 on also the share of the second half's letter bigrams that occur in the first half."""
        n = len(word_keys)
        if n < 2:
            return
        # bigram i = tokens (i, i+1) of one document, both letters (ideographs or alphabetic)
        valid = alpha[:-1] & alpha[1:] & (doc_of[:-1] == doc_of[1:])
        with np.errstate(over="ignore"):
            keys = word_keys[:-1].astype(np.uint64) * _STEP_MULT + word_keys[1:].astype(np.uint64)
        idx = np.flatnonzero(valid)
        counted = np.bincount(doc_of[idx], minlength=len(docs)).astype(np.float64)
        if not len(idx):
            return
        earlier = _earlier_occurrences(doc_of[idx], keys[idx].view(np.int64))
        seen = np.bincount(doc_of[idx], weights=(earlier > 0).astype(np.float64), minlength=len(docs))
        # position of each bigram among the document's letter bigrams, for the cache probability
        first = np.searchsorted(idx, starts)
        rank = np.arange(len(idx)) - first[doc_of[idx]]
        p_static = np.exp(self.word_logprob[word_ids[idx]] + self.word_logprob[word_ids[idx + 1]])
        p_cache = earlier / np.maximum(rank, 1)
        gain = np.log((CACHE_WEIGHT * p_cache + (1 - CACHE_WEIGHT) * p_static) / p_static)
        gains = np.bincount(doc_of[idx], weights=gain, minlength=len(docs))
        has = counted > 0
        out[docs[has], 0] = seen[has] / counted[has]
        out[docs[has], 1] = gains[has] / counted[has]
        if out.shape[1] > 3:  # feature version 2: topic drift between the halves of the head
            in_second_half = 2 * (idx - starts[doc_of[idx]]) >= lengths[doc_of[idx]]
            out[docs, 3] = _half_overlap(doc_of[idx], keys[idx], in_second_half, len(docs))

    # Serialisation: flat numpy arrays plus a JSON string stored as bytes, loadable with allow_pickle=False.
    def to_arrays(self, prefix: str = "order_") -> dict[str, np.ndarray]:
        meta = {"order": self.lm.order, "bits": self.lm.bits, "discount": self.lm.discount,
                "max_tokens": self.max_tokens, "classes": self.classes.to_json(), "words": self.words}
        if self.tokenizer != "whitespace":  # absent: whitespace (models written before tokenizers existed)
            meta["tokenizer"] = self.tokenizer
        if self.feature_version != 1:  # absent: 1 (every English model, Chinese ones written before version 2)
            meta["feature_version"] = self.feature_version
        arrays = {prefix + "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
                  prefix + "word_counts": self.word_counts}
        arrays.update({prefix + "lm_" + k: v for k, v in self.lm.tables.items()})
        if self.word_ngrams is not None:
            arrays[prefix + "word_bigrams"], arrays[prefix + "word_trigrams"] = self.word_ngrams
        return arrays

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "order_") -> "OrderFeatures":
        meta = json.loads(bytes(arrays[prefix + "meta"]).decode("utf-8"))
        lm_prefix = prefix + "lm_"
        tables = {k[len(lm_prefix):]: np.asarray(arrays[k]) for k in arrays.keys() if k.startswith(lm_prefix)}
        lm = HashedNgramLM(meta["order"], meta["bits"], meta["discount"], tables)
        tokenizer = meta.get("tokenizer", "whitespace")
        classes = (CharClasses if tokenizer == "cjk" else WordClasses).from_json(meta["classes"])
        word_ngrams = None
        if prefix + "word_trigrams" in arrays:
            word_ngrams = (np.asarray(arrays[prefix + "word_bigrams"]), np.asarray(arrays[prefix + "word_trigrams"]))
        return cls(classes, lm, meta["words"], np.asarray(arrays[prefix + "word_counts"]), meta["max_tokens"],
                   tokenizer, meta.get("feature_version", 1), word_ngrams)

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

Everything is computed over the first ``max_tokens`` tokens of a document (a sample that bounds the cost of
very long documents) and vectorised over a whole batch with numpy: hashing n-grams into fixed-size count
tables keeps the model a handful of flat arrays (saved with ``np.savez``, no pickle) and lookups O(1).
"""
from __future__ import annotations

import json
import re
from collections import Counter
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# Bytes of a document read for the order features: enough for max_tokens tokens of ordinary prose.
_CHARS_PER_TOKEN_BOUND = 12

BOS = 0  # class id of the padding before a document's first token
_MIX_MULT = np.uint64(0xBF58476D1CE4E5B9)
_ORDER_SALT = np.uint64(0x9E3779B97F4A7C15)
_STEP_MULT = np.uint64(1_000_003)


def tokenize(text: str, max_tokens: int) -> list[str]:
    """Words and single punctuation marks of the head of ``text`` (case kept: capitalisation is a feature)."""
    return TOKEN_RE.findall(text[: max_tokens * _CHARS_PER_TOKEN_BOUND])[:max_tokens]


class WordClasses:
    """Maps a token to a small class id: frequent words are their own class, other words fall into shape
    classes (capitalised or not, all-caps, digits, punctuation, two-letter suffix), a cheap stand-in for a
    part-of-speech tag that makes n-gram statistics dense enough to learn from a few hundred thousand words."""

    def __init__(self, frequent_words: Sequence[str], class_names: Sequence[str] = ()):
        self.frequent = {w: i for i, w in enumerate(frequent_words)}
        self.class_ids: dict[str, int] = {name: i + 1 for i, name in enumerate(class_names)}  # 0 is BOS
        self._cache: dict[str, int] = {}

    @classmethod
    def fit(cls, texts: Iterable[str], num_frequent: int, max_tokens: int) -> "WordClasses":
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(w.lower() for w in tokenize(text, max_tokens))
        return cls([w for w, _ in counts.most_common(num_frequent)])

    def class_name(self, token: str) -> str:
        lower = token.lower()
        cap = "^" if token[:1].isupper() else ""
        if lower in self.frequent:
            return cap + lower
        if token.isdigit():
            return "<digits>"
        if len(token) == 1 and not token.isalnum():
            return "<punct>"
        if len(token) > 1 and token.isupper():
            return "<CAPS>"
        return f"{cap}<{lower[-2:]}>"

    def class_id(self, token: str) -> int:
        """The id of a token's class; a class never seen in training maps to the shared unknown id."""
        found = self._cache.get(token)
        if found is None:
            found = self.class_ids.get(self.class_name(token), self.unknown_id)
            if len(self._cache) < 500_000:  # bounded memo: a long run sees an open vocabulary
                self._cache[token] = found
        return found

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


def _ngram_buckets(seq: np.ndarray, n: int, bits: int) -> np.ndarray:
    """Hash bucket of the n-gram ending at each position >= n-1 of ``seq`` (vectorised, length len(seq)-n+1)."""
    length = len(seq) - n + 1
    h = np.zeros(length, dtype=np.uint64)
    with np.errstate(over="ignore"):  # wrap-around multiplication is the hash
        for j in range(n):
            h = h * _STEP_MULT + seq[j : j + length]
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

    def _concat(self, seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """All sequences, each preceded by order-1 BOS pads, and the mask of real-token positions."""
        pad = self.order - 1
        total = sum(len(s) for s in seqs) + pad * len(seqs)
        flat = np.zeros(total, dtype=np.uint64)
        real = np.zeros(total, dtype=bool)
        pos = 0
        for s in seqs:
            pos += pad
            flat[pos : pos + len(s)] = s
            real[pos : pos + len(s)] = True
            pos += len(s)
        return flat, real

    def fit(self, seqs: Sequence[Sequence[int]], vocab_size: int) -> "HashedNgramLM":
        """Count n-grams of ``seqs`` (ids in [1, vocab_size)); id vocab_size-1 may be an unseen 'unknown'."""
        flat, real = self._concat(seqs)
        size = 1 << self.bits
        unigram = np.bincount(flat[real].astype(np.int64), minlength=vocab_size).astype(np.float32)
        tables: dict[str, np.ndarray] = {"unigram": unigram}
        for n in range(2, self.order + 1):
            target = real[n - 1 :]
            grams = _ngram_buckets(flat, n, self.bits)[target]
            contexts = _ngram_buckets(flat, n - 1, self.bits)[:-1][target]
            tables[f"count{n}"] = np.bincount(grams, minlength=size).astype(np.float32)
            tables[f"context{n}"] = np.bincount(contexts, minlength=size).astype(np.float32)
            distinct = np.unique(contexts * size + grams) // size  # N1+(h .): distinct continuations
            tables[f"types{n}"] = np.bincount(distinct, minlength=size).astype(np.float32)
        self.tables = tables
        return self

    def token_logprobs(self, seqs: Sequence[Sequence[int]]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per order 1..N, the log-probability of every real token (flattened over the batch), plus the
        flattened real-token mask's length bookkeeping left to the caller (tokens come in input order)."""
        flat, real = self._concat(seqs)
        unigram = self.tables["unigram"]
        vocab = len(unigram)
        ids = np.minimum(flat.astype(np.int64), vocab - 1)
        # add-half smoothing so that an unseen class (id >= vocab) keeps a finite probability
        prob = (unigram[ids] + 0.5) / (unigram.sum() + 0.5 * (vocab + 1))
        logprobs = [np.log(prob[real])]
        d = self.discount
        for n in range(2, self.order + 1):
            grams = _ngram_buckets(flat, n, self.bits)
            contexts = _ngram_buckets(flat, n - 1, self.bits)[:-1]
            count = self.tables[f"count{n}"][grams]
            ctx = self.tables[f"context{n}"][contexts]
            types = self.tables[f"types{n}"][contexts]
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
_SENTENCE_END = (".", "!", "?", '"', ":")
CACHE_WEIGHT = 0.1  # weight of the in-document cache in the cache-mixture unigram model


def _group_first_flags(keys_major: np.ndarray, keys_minor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items in input order: how many earlier items share (major, minor), and the stable sort order."""
    order = np.lexsort((np.arange(len(keys_minor)), keys_minor, keys_major))
    km, kn = keys_major[order], keys_minor[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (km[1:] != km[:-1]) | (kn[1:] != kn[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))
    earlier = np.empty(len(order), dtype=np.int64)
    earlier[order] = np.arange(len(order)) - group_start
    return earlier, order


class OrderFeatures:
    """Word classes + class n-gram model + word statistics: text in, a fixed-length float vector out."""

    COHESION = ("log_tokens", "cache_gain", "content_repeat", "name_repeat", "content_share",
                "pronoun_entropy", "odd_quotes")

    def __init__(self, classes: WordClasses, lm: HashedNgramLM, words: Sequence[str], word_counts: np.ndarray,
                 max_tokens: int):
        self.classes, self.lm, self.max_tokens = classes, lm, max_tokens
        self.words = list(words)
        self.word_ids = {w: i + 1 for i, w in enumerate(self.words)}  # 0: out of vocabulary
        self.word_counts = np.asarray(word_counts, dtype=np.float64)
        total = self.word_counts.sum()
        # add-half smoothed unigram over lower-cased words (index 0 = any unseen word)
        self.word_logprob = np.log((np.concatenate([[0.0], self.word_counts]) + 0.5) /
                                   (total + 0.5 * (len(self.words) + 1)))
        self.word_person = np.zeros(len(self.words) + 1, dtype=np.int64)
        for w, person in PRONOUN_PERSON.items():
            if w in self.word_ids:
                self.word_person[self.word_ids[w]] = person
        names = [""] * (classes.num_ids)
        for name, i in classes.class_ids.items():
            names[i] = name
        self.class_is_content = np.array([n.startswith(("<", "^<")) and n not in ("<digits>", "<punct>")
                                          for n in names])
        self.class_is_name = np.array([n.startswith("^<") or n == "<CAPS>" for n in names])
        self.class_ends_sentence = np.array([n in _SENTENCE_END or n == "" for n in names])
        # every known word form in its common casings
        self._build_token_table(chain.from_iterable((w, w.capitalize()) for w in self.words))

    @classmethod
    def fit(cls, texts: Sequence[str], *, num_frequent: int = 1000, order: int = 3, bits: int = 20,
            discount: float = 0.75, max_tokens: int = 256, max_words: int = 50_000) -> "OrderFeatures":
        classes = WordClasses.fit(texts, num_frequent, max_tokens)
        token_lists = [tokenize(text, max_tokens) for text in texts]
        seqs = [[classes.register(t) for t in toks] for toks in token_lists]
        lm = HashedNgramLM(order, bits, discount).fit(seqs, classes.num_ids)
        counts = Counter(t.lower() for toks in token_lists for t in toks)
        words = counts.most_common(max_words)
        return cls(classes, lm, [w for w, _ in words], np.array([c for _, c in words], dtype=np.float64), max_tokens)

    @property
    def names(self) -> list[str]:
        names = list(self.COHESION)
        names += [f"class_lp{n}" for n in range(1, self.lm.order + 1)]
        for n in range(2, self.lm.order + 1):
            names += [f"class_gain{n}", f"class_drop{n}_0.5", f"class_drop{n}_1"]
        return names

    def _build_token_table(self, tokens: Iterable[str], max_entries: int = 200_000) -> None:
        """One dict lookup per token at scoring time: surface form -> row of per-token columns."""
        self.token_row: dict[str, int] = {}
        self._unseen_memo: dict[str, tuple[int, int, int, int]] = {}
        class_col, word_col, alpha_col = [], [], []
        for token in tokens:
            if token in self.token_row or len(self.token_row) >= max_entries:
                continue
            self.token_row[token] = len(class_col)
            lower = token.lower()
            class_col.append(self.classes.class_id(token))
            word_col.append(self.word_ids.get(lower, 0))
            alpha_col.append(lower.isalpha())
        self.token_class = np.array(class_col, dtype=np.int64)
        self.token_word = np.array(word_col, dtype=np.int64)
        self.token_alpha = np.array(alpha_col, dtype=bool)

    def _token_columns(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(class id, word id [0 = unseen], identity key, is alphabetic) for each token."""
        rows = np.array([self.token_row.get(t, -1) for t in tokens], dtype=np.int64)
        unseen = np.flatnonzero(rows < 0)
        rows[unseen] = 0
        class_ids, word_ids, alpha = self.token_class[rows], self.token_word[rows], self.token_alpha[rows]
        keys = word_ids.copy()
        if len(unseen):  # a small minority of tokens: rare words, typos, numbers
            memo, describe = self._unseen_memo, self._describe_unseen
            extra = np.array([memo.get(t) or describe(t) for t in (tokens[i] for i in unseen)], dtype=np.int64)
            class_ids[unseen], word_ids[unseen], keys[unseen], alpha[unseen] = extra.T
        return class_ids, word_ids, keys, alpha

    def _describe_unseen(self, token: str) -> tuple[int, int, int, int]:
        lower = token.lower()
        word = self.word_ids.get(lower, 0)
        # an unseen word still needs an identity to detect repeats: a negative hash never equals a word id
        key = word or -1 - (hash(lower) & 0x3FFF_FFFF_FFFF_FFFF)
        found = (self.classes.class_id(token), word, key, int(lower.isalpha()))
        if len(self._unseen_memo) < 200_000:  # bounded: a long run meets an open vocabulary
            self._unseen_memo[token] = found
        return found

    def transform(self, texts: Sequence[str], token_lists: Sequence[list[str]] | None = None) -> np.ndarray:
        """Feature matrix [len(texts), len(self.names)] (float64), vectorised over the batch.

        ``token_lists`` (``TOKEN_RE.findall`` of each text's head, case kept) may be passed in by a caller that
        has tokenised the texts already; only the first ``max_tokens`` of each are used."""
        out = np.zeros((len(texts), len(self.names)), dtype=np.float64)
        if not texts:
            return out
        if token_lists is None:
            token_lists = [tokenize(t, self.max_tokens) for t in texts]
        else:
            token_lists = [toks[: self.max_tokens] for toks in token_lists]
        lengths = np.array([len(toks) for toks in token_lists], dtype=np.int64)
        out[:, 0] = np.log1p(lengths)
        out[:, 6] = [t.count('"') % 2 for t in texts]
        present = lengths > 0
        if not present.any():
            return out
        docs = np.flatnonzero(present)
        lengths = lengths[docs]
        tokens = list(chain.from_iterable(token_lists[i] for i in docs))
        class_ids, word_ids, word_keys, alpha = self._token_columns(tokens)
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        position = np.arange(len(tokens)) - np.repeat(starts, lengths)
        per_doc = lambda values: np.add.reduceat(values, starts)  # noqa: E731

        # cache model: how much better a word is predicted by its earlier uses in the same document
        earlier, _ = _group_first_flags(doc_of, word_keys)
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
        # entropy of the grammatical persons of the pronouns used
        person = self.word_person[word_ids]
        counts = np.zeros((len(docs), max(PRONOUN_PERSON.values()) + 1))
        np.add.at(counts, (doc_of[person > 0], person[person > 0]), 1.0)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        out[docs, 5] = -(share * np.log(np.where(share > 0, share, 1.0))).sum(axis=1)

        # class n-gram model: gains of each extra order of context, and how often it hurts
        seqs = np.split(class_ids, np.cumsum(lengths)[:-1])
        logprobs, _ = self.lm.token_logprobs(seqs)
        col = len(self.COHESION)
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

    # Serialisation: flat numpy arrays plus a JSON string stored as bytes, loadable with allow_pickle=False.
    def to_arrays(self, prefix: str = "order_") -> dict[str, np.ndarray]:
        meta = {"order": self.lm.order, "bits": self.lm.bits, "discount": self.lm.discount,
                "max_tokens": self.max_tokens, "classes": self.classes.to_json(), "words": self.words}
        arrays = {prefix + "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
                  prefix + "word_counts": self.word_counts}
        arrays.update({prefix + "lm_" + k: v for k, v in self.lm.tables.items()})
        return arrays

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "order_") -> "OrderFeatures":
        meta = json.loads(bytes(arrays[prefix + "meta"]).decode("utf-8"))
        lm_prefix = prefix + "lm_"
        tables = {k[len(lm_prefix):]: np.asarray(arrays[k]) for k in arrays.keys() if k.startswith(lm_prefix)}
        lm = HashedNgramLM(meta["order"], meta["bits"], meta["discount"], tables)
        return cls(WordClasses.from_json(meta["classes"]), lm, meta["words"],
                   np.asarray(arrays[prefix + "word_counts"]), meta["max_tokens"])

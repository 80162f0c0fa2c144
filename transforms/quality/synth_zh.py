"""Low-quality Chinese text made from real Chinese text: the negatives of the Chinese quality model's training data.

Each function takes real text and a ``random.Random`` and returns one synthetic low-quality document of the
class it is named after (written from the descriptions of these classes, see ``data/quality/README.md``):

    word_salad      the words of a passage (segmented with jieba) in random order
    markov_babble   an order-1 word Markov chain (word bigrams) over other documents, or over the same one
    keyword_spam    a document's keywords repeated, joined by separators, or stuffed into its sentences
    char_noise      characters drawn at random by their frequency, or a passage with most characters replaced
    mojibake        the UTF-8 bytes of a passage decoded with a legacy codec (GBK, Big5, Latin-1, cp1252, ...)

Segmentation (jieba, MIT, ships its dictionary) is used here only, when training data is built: the quality model
itself reads characters (``transforms.quality.features``), so scoring never needs a segmenter.
"""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from typing import Sequence

from transforms.text_units import CJK_RE

SUBTYPES = ("word_salad", "markov_babble", "keyword_spam", "char_noise", "mojibake")
_LATIN_TOKEN_RE = re.compile(r"[A-Za-z0-9]")
_SPACE_RE = re.compile(r"\s+")
_STOP_WORDS = frozenset("的 了 是 在 和 有 不 这 也 就 都 与 及 或 等 将 对 从 被 把 而 并 但 其 之 为 以 中 上 下 个 我们 "
                        "你 我 他 她 它 您 可以 如果 一个 没有 使用 进行 通过 这个 那么 因为 所以 以及 一些 其他 需要".split())
_SEPARATORS = (" ", " ", "  ", "|", " | ", "，", "、", ",", "\n", " / ", "；")
_PUNCT = "，。、；：？！“”（）《》"
# codecs that turn UTF-8 Chinese into the mojibake of broken crawls, and how undecodable bytes are handled
_MOJIBAKE_CODECS = ("gbk", "gbk", "gb18030", "big5", "latin-1", "cp1252", "shift_jis", "euc-kr")
_MOJIBAKE_ERRORS = ("replace", "ignore")


def segment(text: str) -> list[str]:
    """jieba's words of ``text`` (precise mode), whitespace dropped."""
    import jieba

    jieba.setLogLevel(60)  # no "Building prefix dict" chatter
    return [w for w in jieba.lcut(text) if w.strip()]


def join_words(words: Sequence[str]) -> str:
    """Words back into text: no space between Chinese words, one between two Latin/digit words."""
    out: list[str] = []
    previous = ""
    for word in words:
        if out and _LATIN_TOKEN_RE.search(previous[-1:]) and _LATIN_TOKEN_RE.match(word):
            out.append(" ")
        out.append(word)
        previous = word
    return "".join(out)


def word_salad(text: str, rng: random.Random) -> str:
    """The passage's words (and punctuation tokens) shuffled: over the whole passage, or line by line."""
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > 2 and rng.random() < 0.3:
        shuffled = []
        for line in lines:
            words = segment(line)
            rng.shuffle(words)
            shuffled.append(join_words(words))
        return "\n".join(shuffled)
    words = segment(text)
    rng.shuffle(words)
    return join_words(words)


class BigramChain:
    """An order-1 word Markov chain: the next word is drawn from the words that followed the current one."""

    def __init__(self, texts: Sequence[str]):
        self.following: dict[str, list[str]] = defaultdict(list)
        self.starts: list[str] = []
        for text in texts:
            words = segment(text)
            if not words:
                continue
            self.starts.append(words[0])
            for a, b in zip(words, words[1:]):
                self.following[a].append(b)
        self.vocab = list(self.following)

    def generate(self, n_chars: int, rng: random.Random) -> str:
        if not self.vocab:
            raise ValueError("the chain saw no text")
        word = rng.choice(self.vocab)
        words = [word]
        length = len(word)
        while length < n_chars:
            nexts = self.following.get(word)
            word = rng.choice(nexts) if nexts else rng.choice(self.vocab)  # dead end: jump anywhere
            words.append(word)
            length += len(word)
        return join_words(words)


def markov_babble(pool: Sequence[str], n_chars: int, rng: random.Random) -> str:
    """``n_chars`` of babble from a word-bigram chain over ``pool`` (other documents, or the source itself)."""
    return BigramChain(pool).generate(n_chars, rng)


def keywords(text: str, k: int) -> list[str]:
    """The ``k`` most frequent content words of ``text`` (two characters or more, no stop words)."""
    counts = Counter(w for w in segment(text) if len(w) >= 2 and w not in _STOP_WORDS
                     and (CJK_RE.search(w) or w.isalpha()))
    return [w for w, _ in counts.most_common(k)]


def keyword_spam(text: str, rng: random.Random) -> str:
    """A document's keywords repeated: a separated list (most often), or stuffed after each of its sentences."""
    words = keywords(text, rng.randint(3, 10))
    if not words:
        words = segment(text)[:5] or [text[:4]]
    if rng.random() < 0.25:
        sentences = [s for s in re.split(r"(?<=[。！？])", text) if s.strip()]
        stuffed = []
        for sentence in sentences:
            stuffed.append(sentence)
            stuffed.append(rng.choice(("", " ", "，")).join(rng.choices(words, k=rng.randint(2, 6))))
        return "".join(stuffed)
    separator = rng.choice(_SEPARATORS)
    n = rng.randint(25, 90)
    return separator.join(rng.choices(words, k=n))


def char_noise(text: str, char_pool: Sequence[str], char_weights: Sequence[float], rng: random.Random) -> str:
    """Characters at random. Three kinds: drawn by frequency from ``char_pool`` with spaces, commas and line
    breaks sprinkled in (the length of ``text``); ``text`` with 40-80% of its characters replaced by drawn
    ones; or rare ideographs drawn uniformly from the CJK block."""
    kind = rng.random()
    n = max(len(text), 80)
    if kind < 0.5:
        drawn = rng.choices(char_pool, weights=char_weights, k=n)
        breaks = rng.uniform(0.02, 0.08)
        out = []
        for ch in drawn:
            out.append(ch)
            r = rng.random()
            if r < breaks:
                out.append(rng.choice((" ", "，", "。", "\n", " ")))
        return "".join(out)
    if kind < 0.8:
        share = rng.uniform(0.4, 0.8)
        chars = list(text)
        for i, ch in enumerate(chars):
            if not ch.isspace() and rng.random() < share:
                chars[i] = rng.choices(char_pool, weights=char_weights, k=1)[0]
        return "".join(chars)
    out = []
    for _ in range(n):
        out.append(chr(rng.randint(0x4E00, 0x9FA5)))
        if rng.random() < 0.04:
            out.append(rng.choice(_PUNCT + " \n"))
    return "".join(out)


def mojibake(text: str, rng: random.Random) -> str:
    """UTF-8 bytes of ``text`` read with another codec, as broken crawls do; sometimes only part of it."""
    codec = rng.choice(_MOJIBAKE_CODECS)
    errors = rng.choice(_MOJIBAKE_ERRORS)
    garbled = text.encode("utf-8").decode(codec, errors=errors)
    if rng.random() < 0.15:  # a second round trip, as when broken text is saved and read again
        garbled = garbled.encode("utf-8", errors="ignore").decode(rng.choice(_MOJIBAKE_CODECS), errors=errors)
    return _SPACE_RE.sub(lambda m: m.group(0) if "\n" in m.group(0) else " ", garbled).strip()


def char_distribution(texts: Sequence[str]) -> tuple[list[str], list[float]]:
    """Characters of ``texts`` (whitespace excluded) and their counts, for ``char_noise``."""
    counts = Counter(ch for text in texts for ch in text if not ch.isspace())
    chars = sorted(counts)
    return chars, [float(counts[c]) for c in chars]

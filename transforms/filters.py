"""Heuristic quality filters: Gopher quality and repetition rules, C4 and FineWeb line rules.

Every measurement is stored in ``annotations["filters"]``; the decision compares them with thresholds from
config (dolma's lesson), so a threshold can be retuned from stored annotations without re-measuring. CJK
documents are measured with CJK characters as words and judged against their own thresholds.

Per language: the thresholds and the stop-word list follow the document's language, ``langid.lang`` (the
langid step): ``filters.by_lang.<lang>`` when configured, else ``filters.cjk`` for CJK languages and
``filters.default`` for the others; the stop words are the thresholds' own ``stop_words`` or the built-in list
of the language (en, zh); a language with neither does not use the stop-word rule. Without the langid step, the
CJK-share heuristic (``normalize.script``) chooses between ``cjk`` and ``default`` as before. The thresholds a
document was judged by are recorded as ``annotations["filters"]["rules"]`` (``by_lang.<lang>``, ``cjk``,
``default``).
"""
from __future__ import annotations

import re
from itertools import filterfalse
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.base import ConfiguredStep, Doc, StepConfigError, annotation
from transforms.text_units import CJK_RE, words

_BULLETS = ("•", "●", "○", "▪", "◦", "*", "-", "·", "‣", "⁃")
_ELLIPSES = ("...", "…", "。。。")
# Characters that end a sentence in any script: Unicode's Sentence_Terminal property (the full
# stops, question and exclamation marks of Latin, Arabic and Urdu, Devanagari's danda, Armenian, Ethiopic, Myanmar,
# Khmer, Mongolian, CJK and the rest), and the closing quotes, brackets and ellipsis a sentence may end with.
_SENTENCE_TERMINALS = "!.?։؝؞؟۔܀܁܂߹࠷࠹࠽࠾।॥၊။።፧፨᙮᜵᜶។៕᠃᠉᥄᥅᪨᪩᪪᪫᭎᭏᭚᭛᭞᭟᭽᭾᭿᰻᰼᱾᱿․‼‽⁇⁈⁉⳹⳺⳻⸮⸼⹓⹔⹠⹡。꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫︒︕︖﹒﹖﹗！．？｡\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U000113d4\U000113d5\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016d6e\U00016d6f\U00016e98\U0001bc9f\U0001da88"
_TERMINAL_PUNCT = tuple(_SENTENCE_TERMINALS) + ('"', "'", "”", "’", "»", "…", "」", "』", "）", ")")
_PARA_SPLIT_RE = re.compile(r"\n\s*\n")
_BOILERPLATE_LINE_RE = re.compile(
    r"javascript|terms of use|privacy policy|cookie policy|uses cookies|use of cookies|use cookies", re.IGNORECASE)
_LOREM_RE = re.compile(r"lorem ipsum", re.IGNORECASE)
EN_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
# The most frequent function characters of written Chinese play the role of Gopher's stop words.
ZH_STOP_WORDS = frozenset("的了是在和有不这也就都")
STOP_WORDS = {"en": EN_STOP_WORDS, "zh": ZH_STOP_WORDS}
CJK_LANGS = frozenset({"zh", "ja", "ko", "wuu", "yue"})


class Thresholds(BaseModel):
    """Decision thresholds; ``None`` switches a rule off."""

    model_config = ConfigDict(extra="forbid")
    min_words: int | None = Field(50, description="fewer words than this: removed (CJK: characters count as words)")
    max_words: int | None = Field(100_000, description="more words than this: removed")
    min_mean_word_len: float | None = Field(3.0, description="mean word length below this (characters, "
                                                             "space-delimited words): removed")
    max_mean_word_len: float | None = Field(10.0, description="mean word length above this (characters, "
                                                              "space-delimited words): removed")
    max_symbol_word_ratio: float | None = Field(0.1, description="'#' and ellipsis symbols per word above this: "
                                                                 "removed")
    max_bullet_line_frac: float | None = Field(0.9, description="share of lines starting with a bullet above this: "
                                                                "removed")
    max_ellipsis_line_frac: float | None = Field(0.3, description="share of lines ending in an ellipsis above this: "
                                                                  "removed")
    min_alpha_word_frac: float | None = Field(0.8, description="share of words with a letter below this: removed")
    min_stop_words: int | None = Field(2, description="fewer distinct stop words than this: removed (en: the, be, to, "
                                                      "of, ...)")
    max_dup_line_frac: float | None = Field(0.3, description="share of lines that repeat an earlier line above this: "
                                                             "removed")
    max_dup_para_frac: float | None = Field(0.3, description="share of paragraphs that repeat an earlier one above "
                                                             "this: removed")
    max_dup_line_char_frac: float | None = Field(0.2, description="share of characters in repeated lines above this: "
                                                                  "removed")
    max_dup_para_char_frac: float | None = Field(0.2, description="share of characters in repeated paragraphs above "
                                                                  "this: removed")
    max_top_ngram_char_frac: dict[int, float] = Field(default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16},
                                                      description="n -> largest share of characters the most frequent "
                                                                  "n-gram may cover (CJK: character n-grams)")
    max_dup_ngram_char_frac: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n -> largest share of characters in repeated n-grams (CJK: character n-grams)")
    min_line_punct_ratio: float | None = Field(0.12, description="FineWeb: share of lines ending in punctuation below "
                                                                 "this: removed")
    max_short_line_ratio: float | None = Field(0.67, description="FineWeb: share of short lines "
                                                                 "(filters.short_line_chars) above this: removed")
    max_char_dup_ratio: float | None = Field(0.01, description="FineWeb: share of characters in duplicated lines "
                                                               "above this: removed")
    max_newline_ratio: float | None = Field(0.3, description="FineWeb: newlines per word above this: removed")
    drop_lorem_ipsum: bool = Field(True, description="C4: remove documents containing 'lorem ipsum'")
    drop_curly_brace: bool = Field(False, description="C4: remove documents containing a curly brace (code)")
    stop_words: list[str] | None = Field(None, description="stop words of min_stop_words (null: the built-in list "
                                                           "of the document's language: en, zh)")


def _cjk_defaults() -> Thresholds:
    # A CJK "word" is one character: length rules do not apply, counts scale up, and short n-grams of
    # characters repeat naturally, so the repetition rules look at longer character n-grams.
    return Thresholds(
        min_words=30, min_mean_word_len=None, max_mean_word_len=None, min_alpha_word_frac=0.5,
        min_stop_words=1, max_top_ngram_char_frac={4: 0.20, 6: 0.18, 8: 0.16},
        max_dup_ngram_char_frac={10: 0.20, 12: 0.18, 14: 0.16, 16: 0.15, 18: 0.14, 20: 0.13},
        max_newline_ratio=None, max_short_line_ratio=None, min_line_punct_ratio=None,
    )


class FiltersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="run the heuristic filters")
    drop_boilerplate_lines: bool = Field(True, description="C4: drop lines about javascript, cookies, policies")
    short_line_chars: int = Field(30, gt=0, description="FineWeb: a line this short or shorter is 'short'")
    default: Thresholds = Field(default_factory=Thresholds, description="thresholds for space-delimited text "
                                                                        "(Gopher/FineWeb values)")
    cjk: Thresholds = Field(default_factory=_cjk_defaults, description="thresholds for documents marked script=cjk")
    by_lang: dict[str, Thresholds] = Field(default_factory=dict, description="thresholds by langid language; "
                                                                             "others: cjk or default")


def choose_rules(cfg: FiltersConfig, lang: str | None, script: str | None) -> tuple[str, Thresholds, frozenset]:
    """(name, thresholds, stop words) a document is judged by: its langid language when known, else its script."""
    if lang:
        if lang in cfg.by_lang:
            name, t = f"by_lang.{lang}", cfg.by_lang[lang]
        elif lang in CJK_LANGS:
            name, t = "cjk", cfg.cjk
        else:
            name, t = "default", cfg.default
        builtin = STOP_WORDS.get(lang, frozenset())
    else:
        name, t = ("cjk", cfg.cjk) if script == "cjk" else ("default", cfg.default)
        builtin = ZH_STOP_WORDS if script == "cjk" else EN_STOP_WORDS
    return name, t, frozenset(t.stop_words) if t.stop_words is not None else builtin


# Measurements that are shares of a whole (never above 1): a minimum above 1 lets no document pass.
_SHARE_MINIMA = ("min_alpha_word_frac", "min_line_punct_ratio")


def check(cfg: FiltersConfig) -> None:
    """Thresholds no document can pass (checked when the graph is built): a minimum above its maximum, a share
    minimum above 1, a maximum below 0 (every measurement is >= 0)."""
    parts = [("default", cfg.default), ("cjk", cfg.cjk)] + [(f"by_lang.{k}", v) for k, v in cfg.by_lang.items()]
    for part, t in parts:
        field = f"filters.{part}"
        for low, high in (("min_words", "max_words"), ("min_mean_word_len", "max_mean_word_len")):
            lo, hi = getattr(t, low), getattr(t, high)
            if lo is not None and hi is not None and lo > hi:
                raise StepConfigError(f"{field}.{low} ({lo}) is above {field}.{high} ({hi}): no document can pass")
        for name in _SHARE_MINIMA:
            value = getattr(t, name)
            if value is not None and value > 1:
                raise StepConfigError(f"{field}.{name} ({value}) is above 1, the largest possible share: no "
                                      f"document can pass")
        for name, value in t:
            limits = value.items() if isinstance(value, dict) else [(None, value)]
            for n, limit in limits:
                if name.startswith("max_") and isinstance(limit, (int, float)) and limit < 0:
                    key = f"{field}.{name}" + (f".{n}" if n is not None else "")
                    raise StepConfigError(f"{key} ({limit}) is below 0, the smallest possible measurement: no "
                                          f"document can pass")


def _duplicates(items: list[str]) -> tuple[int, int]:
    """How many items repeat an earlier one, and their characters."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


class _NgramHashes:
    """64-bit polynomial hashes of every n-gram of word ids, for n = 1, 2, ... in turn: the n-gram hash at i is the
    (n-1)-gram hash at i times the base plus the id at i+n-1 (wrapping arithmetic is intended), one pass per n."""

    BASE = np.uint64(1_000_003)

    def __init__(self, ids: np.ndarray):
        self.ids, self.n, self.hashes = ids, 0, np.zeros(len(ids), dtype=np.uint64)

    def of(self, n: int) -> np.ndarray:
        """The hashes of the ``len(ids) - n + 1`` n-grams (n never decreases between calls)."""
        with np.errstate(over="ignore"):
            while self.n < n:
                self.n += 1
                self.hashes = self.hashes[:len(self.ids) - self.n + 1] * self.BASE + self.ids[self.n - 1:]
        return self.hashes


def _repeated(hashes: np.ndarray) -> np.ndarray:
    """A mask: True where the hash occurs more than once."""
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    same_as_next = ordered[1:] == ordered[:-1]
    repeated_in_order = np.zeros(len(hashes), dtype=bool)
    repeated_in_order[1:] |= same_as_next
    repeated_in_order[:-1] |= same_as_next
    repeated = np.empty(len(hashes), dtype=bool)
    repeated[order] = repeated_in_order
    return repeated


def ngram_measures(tokens: list[str], top_ns: Sequence[int], dup_ns: Sequence[int]) -> dict[str, float]:
    """Gopher's top n-gram and duplicate n-gram character fractions, over characters of words."""
    out: dict[str, float] = {}
    if not tokens:
        return out
    # word ids numbered by first occurrence (dict keeps insertion order), mapped at C speed
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens), start=1)}
    ids = np.fromiter(map(vocab.__getitem__, tokens), dtype=np.uint64, count=len(tokens))
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    total_chars = int(lengths.sum())
    cum = np.concatenate(([0], np.cumsum(lengths)))
    hashes = _NgramHashes(ids)
    for n in top_ns:
        if len(tokens) < n:
            out[f"top_{n}gram_char_frac"] = 0.0
            continue
        ngram = hashes.of(n)
        ordered = np.sort(ngram)
        run_starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        counts = np.diff(np.append(run_starts, len(ordered)))
        best = int(np.argmax(counts))  # the first of equally frequent n-grams in hash order
        if counts[best] < 2:
            out[f"top_{n}gram_char_frac"] = 0.0
            continue
        start = int(np.flatnonzero(ngram == ordered[run_starts[best]])[0])
        ngram_chars = int(cum[start + n] - cum[start])
        out[f"top_{n}gram_char_frac"] = round(ngram_chars * int(counts[best]) / total_chars, 4)
    # An n-gram that repeats is made of m-grams (m < n) that repeat at each of its n - m + 1 offsets: only the
    # positions where those did are candidates for the next n, so the larger n look at a handful of positions.
    repeated_before: tuple[int, np.ndarray] | None = None
    for n in dup_ns:
        if len(tokens) < n:
            out[f"dup_{n}gram_char_frac"] = 0.0
            continue
        ngram = hashes.of(n)
        if repeated_before is None:
            candidates = np.arange(len(ngram))
        else:
            m, repeated_m = repeated_before
            possible = np.ones(len(ngram), dtype=bool)
            for shift in range(n - m + 1):
                possible &= repeated_m[shift:shift + len(ngram)]
            candidates = np.flatnonzero(possible)
        repeated = np.zeros(len(ngram), dtype=bool)
        repeated[candidates] = _repeated(ngram[candidates])
        repeated_before = (n, repeated)
        starts = np.flatnonzero(repeated)
        covered = np.cumsum(np.bincount(starts, minlength=len(tokens) + 1)[:len(tokens)]
                            - np.bincount(starts + n, minlength=len(tokens) + 1)[:len(tokens)]) > 0
        out[f"dup_{n}gram_char_frac"] = round(int(lengths[covered].sum()) / total_chars, 4)
    return out


def measure(text: str, script: str, cfg: FiltersConfig, thresholds: Thresholds | None = None,
            stop_words: frozenset | None = None) -> dict[str, float]:
    """Every measurement of ``text``; the n-gram sizes and the stop words come from ``thresholds`` /
    ``stop_words`` (default: those of ``script``). ``stop_words`` is None when the language has no list."""
    if thresholds is None:
        _, thresholds, stop_words = choose_rules(cfg, None, script)
    tokens = words(text)
    n_words = len(tokens)
    lines = [line for line in text.split("\n") if line.strip()]
    n_lines = max(len(lines), 1)
    paragraphs = [p.strip() for p in _PARA_SPLIT_RE.split(text) if p.strip()]
    lowered = list(map(str.lower, tokens))
    # Word length is a property of space-delimited words: CJK characters in mixed text would drag it to 1. A CJK
    # token is one CJK character (``words``) and every CJK character is a token, so they are counted, not listed.
    cjk_tokens = len(CJK_RE.findall(text)) if CJK_RE.search(text) else 0
    spaced_words, spaced_chars = n_words - cjk_tokens, sum(map(len, tokens)) - cjk_tokens
    dup_lines, dup_line_chars = _duplicates(lines)
    dup_paras, dup_para_chars = _duplicates(paragraphs)
    chars = max(len(text), 1)
    m: dict[str, float] = {
        "n_words": n_words,
        "mean_word_len": round(spaced_chars / spaced_words, 3) if spaced_words else 0.0,
        "symbol_word_ratio": round((text.count("#") + sum(text.count(e) for e in _ELLIPSES)) / max(n_words, 1), 4),
        "bullet_line_frac": round(sum(line.lstrip().startswith(_BULLETS) for line in lines) / n_lines, 4),
        "ellipsis_line_frac": round(sum(line.rstrip().endswith(_ELLIPSES) for line in lines) / n_lines, 4),
        # a word with a letter: most are letters only, counted at C speed; only the rest are scanned
        "alpha_word_frac": round((sum(map(str.isalpha, tokens))
                                  + sum(1 for t in filterfalse(str.isalpha, tokens) if any(map(str.isalpha, t))))
                                 / max(n_words, 1), 4),
        "stop_words": len(stop_words.intersection(lowered)) if stop_words else None,
        "dup_line_frac": round(dup_lines / n_lines, 4),
        "dup_para_frac": round(dup_paras / max(len(paragraphs), 1), 4),
        "dup_line_char_frac": round(dup_line_chars / chars, 4),
        "dup_para_char_frac": round(dup_para_chars / chars, 4),
        "line_punct_ratio": round(sum(line.rstrip().endswith(_TERMINAL_PUNCT) for line in lines) / n_lines, 4),
        "short_line_ratio": round(sum(len(line) <= cfg.short_line_chars for line in lines) / n_lines, 4),
        "newline_ratio": round(text.count("\n") / max(n_words, 1), 4),
        "has_lorem_ipsum": bool(_LOREM_RE.search(text)),
        "has_curly_brace": "{" in text,
    }
    m["char_dup_ratio"] = m["dup_line_char_frac"]
    m.update(ngram_measures(lowered, sorted(thresholds.max_top_ngram_char_frac),
                            sorted(thresholds.max_dup_ngram_char_frac)))
    return m


def decide(m: dict, t: Thresholds) -> str | None:
    """The first rule the measurements fail, as a removal reason, or None to keep."""
    checks = [
        ("gopher_min_words", t.min_words, m["n_words"] < (t.min_words or 0)),
        ("gopher_max_words", t.max_words, m["n_words"] > (t.max_words or 0)),
        ("gopher_mean_word_len", t.min_mean_word_len, m["mean_word_len"] < (t.min_mean_word_len or 0)),
        ("gopher_mean_word_len", t.max_mean_word_len, m["mean_word_len"] > (t.max_mean_word_len or 0)),
        ("gopher_symbol_ratio", t.max_symbol_word_ratio, m["symbol_word_ratio"] > (t.max_symbol_word_ratio or 0)),
        ("gopher_bullet_lines", t.max_bullet_line_frac, m["bullet_line_frac"] > (t.max_bullet_line_frac or 0)),
        ("gopher_ellipsis_lines", t.max_ellipsis_line_frac, m["ellipsis_line_frac"] > (t.max_ellipsis_line_frac or 0)),
        ("gopher_alpha_words", t.min_alpha_word_frac, m["alpha_word_frac"] < (t.min_alpha_word_frac or 0)),
        ("gopher_stop_words", t.min_stop_words if m["stop_words"] is not None else None,
         (m["stop_words"] or 0) < (t.min_stop_words or 0)),
        ("gopher_dup_lines", t.max_dup_line_frac, m["dup_line_frac"] > (t.max_dup_line_frac or 0)),
        ("gopher_dup_paragraphs", t.max_dup_para_frac, m["dup_para_frac"] > (t.max_dup_para_frac or 0)),
        ("gopher_dup_line_chars", t.max_dup_line_char_frac, m["dup_line_char_frac"] > (t.max_dup_line_char_frac or 0)),
        ("gopher_dup_paragraph_chars", t.max_dup_para_char_frac,
         m["dup_para_char_frac"] > (t.max_dup_para_char_frac or 0)),
    ]
    for n, limit in sorted(t.max_top_ngram_char_frac.items()):
        checks.append((f"gopher_top_{n}gram", limit, m.get(f"top_{n}gram_char_frac", 0.0) > limit))
    for n, limit in sorted(t.max_dup_ngram_char_frac.items()):
        checks.append((f"gopher_dup_{n}gram", limit, m.get(f"dup_{n}gram_char_frac", 0.0) > limit))
    checks += [
        ("c4_lorem_ipsum", t.drop_lorem_ipsum or None, m["has_lorem_ipsum"]),
        ("c4_curly_brace", t.drop_curly_brace or None, m["has_curly_brace"]),
        ("fineweb_line_punct", t.min_line_punct_ratio, m["line_punct_ratio"] < (t.min_line_punct_ratio or 0)),
        ("fineweb_short_lines", t.max_short_line_ratio, m["short_line_ratio"] > (t.max_short_line_ratio or 0)),
        ("fineweb_char_dup", t.max_char_dup_ratio, m["char_dup_ratio"] > (t.max_char_dup_ratio or 0)),
        ("fineweb_newline_ratio", t.max_newline_ratio, m["newline_ratio"] > (t.max_newline_ratio or 0)),
    ]
    for reason, limit, failed in checks:
        if limit is not None and failed:
            return reason
    return None


def _may_have_boilerplate(text: str) -> bool:
    """False only when no line can match ``_BOILERPLATE_LINE_RE``: each of its phrases holds one of these pieces,
    lower-cased (pieces without i and s, whose case-insensitive matches str.lower() does not map: ı, ſ). A
    lower-cased copy and four substring tests are ~10x faster than the case-insensitive pattern."""
    lowered = text.lower()
    return "java" in lowered or "vacy" in lowered or "cook" in lowered or ("term" in lowered and "of u" in lowered)


def drop_boilerplate_lines(text: str) -> tuple[str, int]:
    if not _may_have_boilerplate(text):  # most documents: no line to drop
        return text.strip(), 0
    lines = text.split("\n")
    kept = [line for line in lines if not _BOILERPLATE_LINE_RE.search(line)]
    return "\n".join(kept).strip(), len(lines) - len(kept)


class HeuristicFilterStep(ConfiguredStep):
    name = "filters"

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        reasons: list[str | None] = []
        for doc in docs:
            dropped = 0
            if self.cfg.drop_boilerplate_lines:
                doc["text"], dropped = drop_boilerplate_lines(doc["text"])
            script = annotation(doc, "normalize.script", "other")
            rules, thresholds, stop_words = choose_rules(self.cfg, annotation(doc, "langid.lang"), script)
            m = measure(doc["text"], script, self.cfg, thresholds, stop_words)
            m["boilerplate_lines_dropped"] = dropped
            m["rules"] = rules
            doc["annotations"][self.name] = m
            if not doc["text"]:
                reasons.append("empty_text")
            else:
                reasons.append(decide(m, thresholds))
        return reasons

"""Token precision / recall / F1 of extracted text against a page's true main text (issue 45, item 5).

Tokens: the text is NFKC-normalized and lowercased; every CJK character is one token, every other ``\\w+`` run
is one token. Overlap is the multiset intersection (a word said three times in the truth and once in the
extraction counts once). Scores are per page; ``macro`` averages them over pages, per group.

    from benchmarks.extract_score import score, macro
    p, r, f = score(extracted, truth)
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Iterable

# CJK ideographs (unified, extension A, compatibility), kana, hangul: one token per character.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(f"[{_CJK}]|(?:(?![{_CJK}])\\w)+")


def tokens(text: str) -> Counter:
    return Counter(_TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower()))


def score(extracted: str, truth: str) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``extracted`` against ``truth``. An empty extraction of an empty truth is
    perfect; an empty extraction of a non-empty truth scores 0."""
    got, want = tokens(extracted), tokens(truth)
    n_got, n_want = sum(got.values()), sum(want.values())
    if n_got == 0 and n_want == 0:
        return 1.0, 1.0, 1.0
    common = sum((got & want).values())
    precision = common / n_got if n_got else 0.0
    recall = common / n_want if n_want else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def macro(rows: Iterable[tuple[float, float, float]]) -> tuple[float, float, float, int]:
    """Mean precision, recall and F1 over pages, and the number of pages."""
    rows = list(rows)
    if not rows:
        return 0.0, 0.0, 0.0, 0
    n = len(rows)
    return (sum(r[0] for r in rows) / n, sum(r[1] for r in rows) / n, sum(r[2] for r in rows) / n, n)

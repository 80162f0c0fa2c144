"""Unicode normalization and whitespace/control-character cleanup.

The smallest complete per-document step (see "How to add a step" in docs/DESIGN.md): a config section, a pure
core (``normalize_text``), and a ``DocStep`` that annotates ``annotations["normalize"]`` and decides.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from transforms.base import ConfiguredStep, Doc, annotate
from transforms.text_units import cjk_ratio

# C0/C1 controls except tab and newline, plus zero-width and bidi marks that only hide text.
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
# Runs of spaces that change when collapsed to one " ": two or more, or one that is not " " itself. Matching every
# single space too (the plain `[...]+`) gives the same text but replaces each word gap: 5x slower on prose.
_SPACES_RE = re.compile(r"[ \t\u00a0\u2000-\u200a\u3000]{2,}|[\t\u00a0\u2000-\u200a\u3000]")


class NormalizeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unicode_form: Literal["NFC", "NFKC", "none"] = Field("NFC", description="Unicode normalization of the text: NFC, "
                                                                            "NFKC or none")
    collapse_spaces: bool = Field(True, description="runs of spaces/tabs inside a line become one space")
    max_blank_lines: int = Field(1, ge=0, description="longer runs of blank lines are shortened to this")
    cjk_threshold: float = Field(0.3, ge=0, le=1, description="share of CJK letters above which a doc is 'cjk'")


def normalize_text(text: str, cfg: NormalizeConfig) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if cfg.unicode_form != "none":
        text = unicodedata.normalize(cfg.unicode_form, text)
    text = _CONTROL_RE.sub("", text)
    if cfg.collapse_spaces:
        text = _SPACES_RE.sub(" ", text)  # one pass over the text: the pattern never spans a newline
    text = "\n".join(map(str.strip if cfg.collapse_spaces else str.rstrip, text.split("\n")))
    keep = cfg.max_blank_lines + 1
    if "\n" * (keep + 1) in text:  # most texts have no run to shorten: no regex pass
        text = re.sub("\n{%d,}" % (keep + 1), "\n" * keep, text)
    return text.strip()


class NormalizeStep(ConfiguredStep):
    """Rewrites the text in normalized form and records the share of CJK letters (``cjk_ratio``, read by the
    langid step's script rule) and the script (``annotations["normalize"]["script"]``: ``cjk`` or ``other``: the
    CJK-share heuristic that chooses the filters' thresholds and the quality model when the langid step is
    off); removes documents left empty."""

    name = "normalize"

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        reasons: list[str | None] = []
        for doc in docs:
            before = len(doc["text"])
            doc["text"] = normalize_text(doc["text"], self.cfg)
            ratio = cjk_ratio(doc["text"])
            annotate(doc, self.name, chars_removed=before - len(doc["text"]), cjk_ratio=round(ratio, 4),
                     script="cjk" if ratio >= self.cfg.cjk_threshold else "other")
            reasons.append("empty_text" if not doc["text"] else None)
        return reasons

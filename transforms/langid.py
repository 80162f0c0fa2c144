"""Language identification: ``annotations["langid"] = {lang, score, script, second, second_share}`` for every document.

fastText's ``lid.176`` (176 languages; the compressed ``.ftz`` shipped in ``data/langid/``, loaded with the pinned
fastText binding) reads the normalized text: lower-cased, newlines as spaces, at most ``max_chars`` characters
taken as ``windows`` evenly spaced pieces of the document (the head alone misjudges documents that open with a
block in another language, e.g. an untranslated paragraph at the top of a translated handbook page).

The script of the letters constrains the answer (a language is written in its script; lid.176 alone calls many
short Chinese poems and reviews Japanese or Korean): the share of CJK letters comes from ``normalize``
(``normalize.cjk_ratio``, over the whole document). A document whose letters are >= ``script_share`` CJK gets a
CJK language (Japanese only with kana, Korean only with hangul); one whose letters are >= ``script_share`` other
scripts gets a non-CJK language (one of a non-Latin alphabet only when >= 30% of the letters are not ASCII); a mixed document gets lid.176's answer on its sample, labelled by that dominant
language, with the other script's language and letter share recorded as ``second`` / ``second_share``.

Decision: with ``keep`` set, a document of another language (or scored below ``min_score``) is removed with reason
``language`` (``language_score``), or, with ``action: tag``, kept with ``passed: false``. The language routes the
later steps: ``filters.by_lang.<lang>`` thresholds and ``quality.models.<lang>`` models.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from transforms.base import Doc, StepConfigError, annotate, annotation
from transforms.text_units import CJK_CHARS, cjk_ratio

STEP_NAME = "langid"
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = "data/langid/lid.176.ftz"
CJK_LANGS = frozenset({"zh", "ja", "ko", "wuu", "yue"})
UNDETERMINED = "und"
_LABEL = "__label__"
_KANA_RE = re.compile("[\u3040-\u30ff]")
_HANGUL_RE = re.compile("[\uac00-\ud7af\u1100-\u11ff]")
_HAN_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_NOT_CJK_RE = re.compile(f"[^{CJK_CHARS}]+")
_CJK_RUN_RE = re.compile(f"[{CJK_CHARS}]+")
# ISO 15924 script of the languages lid.176 knows that are not written in Latin letters
_SCRIPTS = {
    "Cyrl": "ru uk bg sr mk be kk ky tg mn tt ba cv ce os sah av lez krc kv mhr mrj myv rue tyv xal bxr udm",
    "Arab": "ar arz fa ur ps ckb azb mzn pnb sd ug lrc", "Grek": "el", "Hebr": "he yi", "Armn": "hy",
    "Geor": "ka xmf", "Deva": "hi mr ne sa mai new bh gom dty", "Beng": "bn as bpy", "Guru": "pa",
    "Gujr": "gu", "Orya": "or", "Taml": "ta", "Telu": "te", "Knda": "kn", "Mlym": "ml", "Sinh": "si",
    "Thai": "th", "Laoo": "lo", "Khmr": "km", "Mymr": "my", "Tibt": "bo", "Ethi": "am", "Thaa": "dv",
}
LANG_SCRIPT = {lang: script for script, langs in _SCRIPTS.items() for lang in langs.split()}
LANG_SCRIPT.update({"zh": "Hani", "wuu": "Hani", "yue": "Hani", "ja": "Jpan", "ko": "Kore"})


class LangIdConfig(BaseModel):
    """The ``langid`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="run the step (false: quality routes by normalize's CJK-share heuristic)")
    model: str | None = Field(None, description="a fastText language-ID model; null: the shipped lid.176.ftz")
    keep: list[str] | None = Field(None, description="languages kept (lid.176 codes: en, zh, ...); null keeps all")
    min_score: float = Field(0.0, ge=0.0, le=1.0, description="documents identified less surely are not kept")
    action: Literal["remove", "tag"] = Field("remove", description="for documents not kept: remove them (reason "
                                                                   "language / language_score) or keep them "
                                                                   "tagged passed: false")
    max_chars: int = Field(600, ge=50, description="characters read per document")
    windows: int = Field(4, ge=1, le=32, description="evenly spaced pieces of the document those come from")
    script_share: float = Field(0.8, gt=0.5, le=1.0, description="letters of one script (CJK or not) at or "
                                                                 "above this share decide the script")
    mixed_min_share: float = Field(0.05, ge=0.0, le=0.5, description="the other script's share of letters from "
                                                                     "which a second language is recorded")
    kana_min_share: float = Field(0.05, ge=0.0, le=1.0, description="kana among CJK letters needed for ja")
    hangul_min_share: float = Field(0.3, ge=0.0, le=1.0, description="hangul among CJK letters needed for ko")
    top_k: int = Field(5, ge=1, le=20, description="lid.176 answers considered under the script constraint")
    batch_size: int = Field(512, ge=1, le=65536, description="documents per model call")


def resolve_model(path: str | None) -> str:
    """The configured model, or the shipped one (relative paths: the cwd, then the repository)."""
    path = path or DEFAULT_MODEL
    if os.path.exists(path) or os.path.isabs(path) or "://" in path:
        return path
    in_repo = REPO_ROOT / path
    return str(in_repo) if in_repo.exists() else path


def check(cfg: LangIdConfig) -> None:
    """What must hold before a worker starts: the model exists; ``keep`` names languages."""
    path = resolve_model(cfg.model)
    if "://" not in path and not os.path.exists(path):
        raise StepConfigError(f"langid.model: {path} does not exist")
    if cfg.keep is not None and not cfg.keep:
        raise StepConfigError("langid.keep: an empty list keeps no document (null keeps every language)")


def sample_text(text: str, max_chars: int, windows: int) -> str:
    """What lid.176 reads: ``windows`` evenly spaced pieces of ``text`` (all of it when short), lower-cased, one line."""
    if len(text) > max_chars and windows > 1:
        width = max_chars // windows
        step = (len(text) - width) / (windows - 1)
        text = " ".join(text[int(i * step): int(i * step) + width] for i in range(windows))
    else:
        text = text[:max_chars]
    return text.replace("\n", " ").lower()


def _cjk_language(sample: str, cfg: LangIdConfig) -> str:
    """The CJK language the letters' script allows when lid.176 names none: ko with hangul, ja with kana, else zh."""
    han, kana, hangul = (len(r.findall(sample)) for r in (_HAN_RE, _KANA_RE, _HANGUL_RE))
    total = max(han + kana + hangul, 1)
    if hangul / total >= cfg.hangul_min_share:
        return "ko"
    return "ja" if kana / total >= cfg.kana_min_share else "zh"


class LangIdentifier:
    """Loads lid.176 once and identifies batches of texts (the pure core; no Beam)."""

    def __init__(self, cfg: LangIdConfig | None = None):
        self.cfg = cfg or LangIdConfig()
        self.model = None

    def setup(self) -> None:
        if self.model is None:
            import fasttext

            fasttext.FastText.eprint = lambda *args, **kwargs: None
            self.model = fasttext.load_model(_local(resolve_model(self.cfg.model)))

    def _allowed(self, lang: str, sample: str, cjk_side: bool) -> bool:
        if (lang in CJK_LANGS) != cjk_side:
            return False
        if not cjk_side and LANG_SCRIPT.get(lang, "Latn") != "Latn":
            # a language of another alphabet (Cyrillic, Greek, Arabic, ...) needs letters outside Latin
            letters = _LETTER_RE.findall(sample)
            return bool(letters) and sum(not c.isascii() for c in letters) >= 0.3 * len(letters)
        if lang in ("ja", "ko"):
            han, kana, hangul = (len(r.findall(sample)) for r in (_HAN_RE, _KANA_RE, _HANGUL_RE))
            total = max(han + kana + hangul, 1)
            return (kana if lang == "ja" else hangul) / total >= (
                self.cfg.kana_min_share if lang == "ja" else self.cfg.hangul_min_share)
        return True

    def _predict(self, samples: list[str]) -> list[list[tuple[str, float]]]:
        labels, probs = self.model.predict(samples, k=self.cfg.top_k)
        return [[(lab[len(_LABEL):], float(p)) for lab, p in zip(labs, ps)] for labs, ps in zip(labels, probs)]

    def _best(self, answers: list[tuple[str, float]], sample: str, cjk_side: bool) -> tuple[str, float] | None:
        for lang, p in answers:
            if self._allowed(lang, sample, cjk_side):
                return lang, p
        return None

    def identify(self, texts: Sequence[str], cjk_ratios: Sequence[float | None] | None = None) -> list[dict]:
        """One annotation dict per text: ``lang``, ``score`` (lid.176's probability of it), ``script`` (ISO
        15924), ``second`` (the other script's language, or None) and ``second_share`` (its share of letters)."""
        self.setup()
        cfg = self.cfg
        if cjk_ratios is None:
            cjk_ratios = [None] * len(texts)
        ratios = [cjk_ratio(t) if r is None else float(r) for t, r in zip(texts, cjk_ratios)]
        samples = [sample_text(t, cfg.max_chars, cfg.windows) for t in texts]
        answers = self._predict(samples) if samples else []
        results: list[dict] = []
        mixed: list[tuple[int, str, bool, str, float]] = []
        for sample, ratio, ranked in zip(samples, ratios, answers):
            if ratio >= cfg.script_share:
                cjk_side = True  # CJK letters only
            elif 1.0 - ratio >= cfg.script_share:
                cjk_side = False
            else:  # mixed: lid.176 weighs the two parts; the script rules still hold on its side
                cjk_side = ranked[0][0] in CJK_LANGS if ranked else ratio >= 0.5
            best = self._best(ranked, sample, cjk_side)
            if best is None:  # lid.176's top answers are all of the other script: read that script alone
                part = (" ".join(_CJK_RUN_RE.findall(sample)) if cjk_side else _CJK_RUN_RE.sub(" ", sample)).strip()
                best = self._best(self._predict([part])[0], part, cjk_side) if part else None
                if best is None:
                    best = (_cjk_language(sample, cfg), 0.0) if cjk_side else (
                        (ranked[0][0], ranked[0][1]) if ranked and ranked[0][0] not in CJK_LANGS else (UNDETERMINED, 0.0))
            lang, score = best
            other_share = (1.0 - ratio) if cjk_side else ratio
            score = min(max(score, 0.0), 1.0)  # fastText's probabilities can read 1.0001
            results.append({"lang": lang, "score": round(score, 4), "script": LANG_SCRIPT.get(lang, "Latn"),
                            "second": None, "second_share": 0.0})
            if other_share >= max(cfg.mixed_min_share, 1e-9):
                # the other script's part alone, identified in one batch below (a mixed document's own answers
                # rank its second language poorly)
                part = (_CJK_RUN_RE.sub(" ", sample) if cjk_side else " ".join(_CJK_RUN_RE.findall(sample))).strip()
                mixed.append((len(results) - 1, part, not cjk_side, sample, other_share))
        parts = [part for _, part, _, _, _ in mixed]
        part_answers = self._predict(parts) if parts else []
        for (i, part, side, sample, share), ranked in zip(mixed, part_answers):
            found = self._best(ranked, part, side) if part else None
            if found is None and side:
                found = (_cjk_language(sample, cfg), 0.0)
            results[i]["second"] = found[0] if found else UNDETERMINED
            results[i]["second_share"] = round(share, 4)
        return results

    def decide(self, result: dict) -> str | None:
        """The removal reason for an identified document, or None to keep it."""
        cfg = self.cfg
        if cfg.keep is not None and result["lang"] not in cfg.keep:
            return "language"
        if result["score"] < cfg.min_score:
            return "language_score"
        return None


class LangIdStep(LangIdentifier):
    """The per-document step: annotate ``annotations["langid"]``, then decide by ``keep`` / ``min_score``."""

    name = STEP_NAME

    @property
    def batch_size(self) -> int:
        return self.cfg.batch_size

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        texts = [d["text"] if isinstance(d.get("text"), str) else "" for d in docs]
        results = self.identify(texts, [annotation(d, "normalize.cjk_ratio") for d in docs])
        filtering = self.cfg.keep is not None or self.cfg.min_score > 0
        reasons: list[str | None] = []
        for doc, result in zip(docs, results):
            reason = self.decide(result)
            if filtering:
                result["passed"] = reason is None
            annotate(doc, self.name, **result)
            reasons.append(reason if self.cfg.action == "remove" else None)
        return reasons


def _local(path: str) -> str:
    """fastText reads local files only: a FileSystems URI is copied to a temporary file once per worker."""
    if "://" not in path:
        return path
    import shutil
    import tempfile

    from apache_beam.io.filesystems import FileSystems

    local = os.path.join(tempfile.mkdtemp(prefix="corpusmill-langid-"), os.path.basename(path))
    with FileSystems.open(path, compression_type="uncompressed") as fin, open(local, "wb") as fout:
        shutil.copyfileobj(fin, fout, length=1 << 20)
    return local


def document_language(doc: Doc, script_langs: dict[str, str] | None = None, default: str | None = None) -> str | None:
    """The language that routes a document through filters and quality: ``langid.lang`` when the langid step ran;
    else the CJK-share heuristic (``normalize.script`` mapped by ``script_langs``, e.g. ``{"cjk": "zh"}``); else
    ``default``."""
    lang = annotation(doc, "langid.lang")
    if lang:
        return lang
    script = annotation(doc, "normalize.script")
    if script is not None and script_langs and script in script_langs:
        return script_langs[script]
    return default

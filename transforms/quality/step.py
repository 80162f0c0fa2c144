"""Quality scoring: annotate every document with P(high quality), then decide from the annotation.

Score (``transforms.quality.model.QualityModel``): a fastText classifier over words and word bigrams, plus
word-order and cohesion features (class n-gram model gains, in-document cache gain, topic-word repetition,
pronoun consistency) that catch fluent-looking gibberish a bag of n-grams cannot see, joined by a small
logistic second stage. Annotations written on every document, under ``annotations["quality"]``:

    score       P(high quality), the stacked score the decisions use
    logit       its log-odds: confident documents all round to score 1.0, their logits still rank them
                (top_fraction ranks by it)
    fasttext    P(high quality) from fastText alone (for comparison and retuning)
    gibberish   P(low quality | fastText passes it) from word order and cohesion; null when fastText alone
                rejected the document (P(hq) below the gate: the second stage never runs)
    skipped     (instead of the above, with ``score: null``) why a document was kept unscored: its language
                has no model (``quality.models``), or, without langid, its script is in ``skip_scripts``
    cutoff      (top_fraction) the corpus-wide cut-off the document was judged by

Decision (``mode``), applied to ``score``:
    threshold     keep when score >= threshold
    top_fraction  keep the best ``top_fraction`` of the corpus by ``logit`` (cut-off from Beam's approximate
                  quantiles)
    pareto        keep when pareto(alpha) > 1 - score (GPT-3 / NeMo Curator style), with a draw that is a
                  pure function of (seed, document id): the same documents survive on any runner and rerun.

Per language: a document is scored by the model of its language (``langid.lang``; without the langid step the
CJK-share heuristic ``normalize.script`` → ``fallback_langs``): ``quality.model``/``train_data`` for
``model_lang`` (en), ``quality.models.<lang>`` for the others (zh: trained from the shipped Chinese data, over
characters). Each default model is trained once into the cache (``ensure_models``).

The Beam step (``QualityFilter``) reads as its parts: ``Score`` → ``Cutoff`` (top_fraction only) → ``Decide`` →
the shared routing tail; threshold and pareto score and decide in one per-document step (``QualityStep``).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Literal, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.stats import ApproximateQuantiles
from pydantic import BaseModel, ConfigDict, Field

from runio.files import is_uri, sha256_bytes, sha256_file
from transforms.base import Doc, StepConfigError, annotate, annotation, step_annotations
from transforms.beam_step import DecideEach, Route, timed
from transforms.text_units import cjk_ratio
from transforms.normalize import NormalizeConfig
from transforms.quality.features import OrderFeatures
from transforms.quality.model import (QualityModel, QualityTrainConfig, card_languages, load_labeled, sidecar_paths,
                                      train_quality_model, unreadable_reason)
from transforms.quality.textness import TextnessJudge, resolve_judge

STEP_NAME = "quality"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRAIN_DATA = "data/quality/quality_train_subset.jsonl.gz"  # relative: to the cwd, else to the repo
DEFAULT_ZH_TRAIN_DATA = "data/quality/quality_zh_train.jsonl.gz"
DEFAULT_CJK_THRESHOLD = NormalizeConfig().cjk_threshold  # normalize.script of a document that was not normalized
REASONS = {"threshold": "low_quality", "top_fraction": "below_top_fraction", "pareto": "pareto_sampled_out"}
# removal reasons of the policy for documents no model judges surely (quality.unmodelled / quality.unsure)
NOT_TEXT = "not_text"  # the text-ness judge scored it below quality.textness_threshold
POLICY_REASONS = {"unmodelled": "no_quality_model", "unsure": "language_unsure"}


def zh_train_defaults() -> QualityTrainConfig:
    """How the default Chinese model is trained: characters (``tokenizer: cjk``), a 5-gram model over 60 frequent
    characters + script classes on the first 256 characters (fewer, coarser classes generalise across domains;
    256 characters keep the step above 3,000 documents/s: measured in benchmarks/RESULTS.md)."""
    # in_sample_weight 0: the second stage is fitted on out-of-fold documents only, as measured (the English default
    # also fits it on its training prose scored in sample; not measured for characters)
    # l2 1.0: the penalty the Chinese model was measured with (the English default, 2.0, was chosen by
    # cross-validation of the English second stage with its chain guard)
    return QualityTrainConfig(tokenizer="cjk", order=5, frequent_words=60, max_tokens=256, in_sample_weight=0.0,
                              l2=1.0)


class LanguageModelConfig(BaseModel):
    """One language's quality model (``quality.models.<lang>``): a trained model, or the labelled data the
    default one is trained from at run time (cached), and how."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="a model from `corpusmill quality train` (with its .order.npz)")
    train_data: str | None = Field(None, description="labelled JSONL(.gz) to train the default model from")
    train: QualityTrainConfig = Field(default_factory=QualityTrainConfig,
                                      description="how this language's default model is trained (keys of "
                                                  "quality.train)")


def _default_language_models() -> dict[str, LanguageModelConfig]:
    return {"zh": LanguageModelConfig(train_data=DEFAULT_ZH_TRAIN_DATA, train=zh_train_defaults())}


class QualityConfig(BaseModel):
    """The ``quality`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="run the step (false: every document passes untouched)")
    model: str | None = Field(None, description="path of a model from `corpusmill quality train` (.bin or .ftz "
                                                "with its .order.npz next to it); null: train the default model "
                                                "from `train_data` at run time (cached)")
    train_data: str = Field(DEFAULT_TRAIN_DATA, description="labelled JSONL(.gz) for the default model; a relative "
                                                            "path is looked up in the cwd, then in the repository")
    mode: Literal["threshold", "top_fraction", "pareto"] = Field("threshold",
                                                                 description="decision: threshold, top_fraction (by "
                                                                             "logit) or pareto (seeded draw)")
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="mode=threshold: keep when quality.score >= it")
    top_fraction: float = Field(0.8, gt=0.0, le=1.0, description="mode=top_fraction: share of documents kept")
    pareto_alpha: float = Field(9.0, gt=0.0, description="mode=pareto: shape of the Pareto draw (GPT-3 used 9)")
    seed: int = Field(0, description="mode=pareto: seed of the per-document draw")
    skip_scripts: list[Literal["cjk", "other"]] = Field(
        default_factory=lambda: ["cjk"],
        description="without the langid step: documents of these scripts (normalize.script) for whose language "
                    "(fallback_langs) no model is configured are kept unscored instead of being scored by the "
                    "quality.model_lang model, which would reject text it was not trained on")
    batch_size: int = Field(256, ge=1, le=65536, description="documents scored per model call")
    max_chars: int = Field(20_000, ge=100, description="characters of each document fastText reads")
    train: QualityTrainConfig = Field(QualityTrainConfig(), description="how the model_lang model is trained (keys of "
                                                                        "`corpusmill quality train --param`)")
    model_lang: str = Field("en", description="language of quality.model / train_data / train")
    models: dict[str, LanguageModelConfig] = Field(
        default_factory=_default_language_models,
        description="quality models of other languages, by langid language (zh: the shipped Chinese data); "
                    "a document of a language with none is kept unscored, the reason recorded")
    fallback_langs: dict[str, str] = Field(
        default_factory=lambda: {"cjk": "zh"},
        description="without the langid step: the language of a normalize.script (the CJK-share heuristic); "
                    "other scripts are quality.model_lang")
    unmodelled: Literal["judge", "keep", "remove"] = Field(
        "judge", description="a document of a language no quality model covers: judge (kept only when the "
                             "language-independent text-ness judge passes it: quality.textness >= "
                             "textness_threshold), keep (kept unscored) or remove (reason no_quality_model)")
    unsure: Literal["judge", "keep", "remove"] = Field(
        "judge", description="a document whose language langid names with a score below unsure_below: judge "
                             "(its language's model, if any, and the text-ness judge must both pass it), keep "
                             "(as if sure) or remove (reason language_unsure)")
    unsure_below: float = Field(0.5, ge=0.0, le=1.0, description="langid.score below which a document's language "
                                                                 "is unsure (quality.unsure applies)")
    textness_threshold: float = Field(0.5, ge=0.0, le=1.0, description="keep a judged document when its "
                                                                       "quality.textness (P(real text)) >= it")
    textness_judge: str | None = Field(None, description="the text-ness judge's weights (JSON from "
                                                         "benchmarks/bench_textness.py fit); null: the shipped "
                                                         "data/quality/textness_judge.json")

    def language_models(self) -> dict[str, LanguageModelConfig]:
        """Every configured model by language: ``model_lang``'s from the top-level fields, then ``models``."""
        mine = LanguageModelConfig(model=self.model, train_data=self.train_data, train=self.train)
        return {self.model_lang: mine, **self.models}


# --------------------------------------------------------------------------------------------- pure core


def pareto_draw(doc_id: int | str, alpha: float, seed: int) -> float:
    """numpy-style Pareto (Lomax) sample for one document, a pure function of (seed, id)."""
    digest = hashlib.blake2b(f"{seed}\x00{doc_id}".encode("utf-8"), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") >> 11) / 2**53  # uniform in [0, 1)
    return (1.0 - u) ** (-1.0 / alpha) - 1.0


def keep_pareto(score: float, doc_id: int | str, alpha: float, seed: int) -> bool:
    return pareto_draw(doc_id, alpha, seed) > 1.0 - score


def top_fraction_cutoff(scores: Sequence[float], fraction: float) -> float:
    """The smallest score kept when keeping the best ``fraction`` of ``scores`` (exact; ties are all kept)."""
    if not len(scores):
        return 0.0
    ranked = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    keep = max(1, int(np.ceil(fraction * len(ranked))))
    return float(ranked[keep - 1])


def decide(score: float, doc_id, cfg: QualityConfig, cutoff: float | None = None) -> str | None:
    """The removal reason for a document with this score, or None to keep it (top_fraction: ``score`` and
    ``cutoff`` are on the ranking scale, ``logit``)."""
    if cfg.mode == "threshold":
        keep = score >= cfg.threshold
    elif cfg.mode == "pareto":
        keep = keep_pareto(score, doc_id, cfg.pareto_alpha, cfg.seed)
    else:
        if cutoff is None:
            raise ValueError("quality.mode=top_fraction needs the corpus-wide cut-off")
        keep = score >= cutoff
    return None if keep else REASONS[cfg.mode]


def decide_document(mine: dict, doc_id, cfg: QualityConfig, cutoff: float | None = None) -> str | None:
    """The removal reason of a scored document from its ``annotations.quality`` (``mine``), or None to keep it:
    the policy ``remove`` for documents no model judges surely; else the model's score by ``quality.mode``
    (top_fraction: its ``logit`` against ``cutoff``), when there is one; then, for a document the policy sends to
    the judge, its ``textness`` against ``textness_threshold`` (so ``not_text`` counts only what the judge
    removes on top of the model)."""
    policy = mine.get("policy")
    if policy == "remove":
        return POLICY_REASONS[mine.get("route", "unmodelled")]
    if mine.get("score") is not None:
        reason = decide(mine["logit"] if cfg.mode == "top_fraction" else mine["score"], doc_id, cfg, cutoff)
        if reason is not None:
            return reason
    if policy == "judge" and mine.get("textness") is not None and mine["textness"] < cfg.textness_threshold:
        return NOT_TEXT
    return None


def local_model_copy(model_path: str, directory: str | None = None) -> str:
    """A local path for the model: ``model_path`` itself when local, else (gs://, s3://, ... through Beam's
    FileSystems) a copy of the model and its sidecars in a temporary directory, made once per worker: fastText
    reads local files only."""
    if "://" not in model_path:
        return model_path
    import shutil
    import tempfile

    from apache_beam.io.filesystems import FileSystems

    directory = directory or tempfile.mkdtemp(prefix="corpusmill-quality-model-")
    local = os.path.join(directory, os.path.basename(model_path))
    for src, dst in ((model_path, local), *zip(sidecar_paths(model_path), sidecar_paths(local))):
        if src.endswith(".card.json") and not FileSystems.exists(src):
            continue  # the card documents the model; scoring does not need it
        with FileSystems.open(src, compression_type="uncompressed") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, length=1 << 20)
    return local


class QualityScorer:
    """Loads the models once and annotates batches of documents: the core of every path. As a ``DocStep`` it
    only annotates (``apply`` decides nothing: the corpus-wide cut-off decides later).

    ``model_paths`` is one model (every routed document goes to it) or one per language. A document's language
    is ``langid.lang`` (the langid step); without it, the CJK-share heuristic: ``normalize.script`` (judged from
    the text as normalize would when the document was not normalized) mapped by ``fallback_langs``, other scripts
    ``model_lang``. A language without a model: kept unscored with ``skipped`` saying why; without langid, a
    document of a script not in ``skip_scripts`` is then scored by the ``model_lang`` model (one model for all)."""

    name = STEP_NAME

    def __init__(self, model_paths: str | dict[str, str], max_chars: int = 20_000, skip_scripts: Sequence[str] = (),
                 batch_size: int = 256, model_lang: str = "en", fallback_langs: dict[str, str] | None = None,
                 unmodelled: str = "keep", unsure: str = "keep", unsure_below: float = 0.0,
                 textness_judge: str | None = None):
        self.unmodelled, self.unsure, self.unsure_below = unmodelled, unsure, unsure_below
        self.textness_judge = textness_judge
        self.judge: TextnessJudge | None = None
        self.model_paths = {model_lang: model_paths} if isinstance(model_paths, str) else dict(model_paths)
        self.model_path = self.model_paths.get(model_lang)  # the model_lang model (one-model callers)
        self.max_chars = max_chars
        self.skip_scripts = tuple(skip_scripts)
        self.batch_size = batch_size
        self.model_lang = model_lang
        self.fallback_langs = dict(fallback_langs or {})
        self.models: dict[str, QualityModel] = {}
        self._scored = Metrics.counter(STEP_NAME, "scored")

    @property
    def model(self) -> QualityModel | None:
        return self.models.get(self.model_lang)

    def setup(self) -> None:
        for lang, path in self.model_paths.items():
            if lang not in self.models:
                self.models[lang] = QualityModel.load(local_model_copy(path))
        if self.judge is None and "judge" in (self.unmodelled, self.unsure):
            self.judge = TextnessJudge.load(self.textness_judge)

    def route(self, doc: Doc, skip_scripts: Sequence[str]) -> tuple[str | None, str | None]:
        """(language whose model scores ``doc``, None) or (None, why it is kept unscored)."""
        lang = annotation(doc, "langid.lang")
        if lang:
            if lang in self.model_paths:
                return lang, None
            return None, f"language {lang}: no quality model (quality.models.{lang})"
        script = annotation(doc, "normalize.script")
        if script is None and (skip_scripts or self.fallback_langs):  # not normalized (a document scored on
            text = doc.get("text") if isinstance(doc.get("text"), str) else ""  # its own): judge it as normalize
            script = "cjk" if cjk_ratio(text) >= DEFAULT_CJK_THRESHOLD else "other"  # would
        lang = self.fallback_langs.get(script, self.model_lang)
        if lang in self.model_paths:
            return lang, None
        if script in skip_scripts or self.model_lang not in self.model_paths:
            return None, f"script {script}: the model is not trained on it"
        return self.model_lang, None

    def annotate(self, docs: Sequence[Doc], skip_scripts: Sequence[str] | None = None) -> np.ndarray:
        """Write ``annotations["quality"]`` on ``docs``; return their quality scores (NaN for documents kept
        unscored, with ``skipped`` saying why)."""
        self.setup()
        skip_scripts = self.skip_scripts if skip_scripts is None else skip_scripts
        scores = np.full(len(docs), np.nan)
        by_lang: dict[str, list[int]] = {}
        judged: list[int] = []  # documents the text-ness judge scores (the policy says judge)
        policies: dict[int, tuple[str, str]] = {}  # index -> (route: unmodelled | unsure, policy)
        for i, doc in enumerate(docs):
            lang, why = self.route(doc, skip_scripts)
            if lang is None:
                annotate(doc, STEP_NAME, score=None, skipped=why)
                policies[i] = ("unmodelled", self.unmodelled)
            else:
                by_lang.setdefault(lang, []).append(i)
                lang_score = annotation(doc, "langid.score")
                if lang_score is not None and float(lang_score) < self.unsure_below:
                    policies[i] = ("unsure", self.unsure)
            if i in policies and policies[i][1] == "judge":
                judged.append(i)
        for i, (route, policy) in policies.items():
            annotate(docs[i], STEP_NAME, route=route, policy=policy)
        if judged:
            textness = self.judge.score([docs[i].get("text") if isinstance(docs[i].get("text"), str) else ""
                                         for i in judged])
            for i, value in zip(judged, textness):
                annotate(docs[i], STEP_NAME, textness=round(float(value), 6))
        self._scored.inc(len(docs))
        for lang, scored_idx in by_lang.items():
            scored_docs = [docs[i] for i in scored_idx]
            texts = [d.get("text") if isinstance(d.get("text"), str) else "" for d in scored_docs]
            result = self.models[lang].score(texts, max_chars=self.max_chars)
            scores[scored_idx] = result["score"]
            for doc, score, log_odds, fasttext_p, gibberish in zip(
                    scored_docs, result["score"], result["logit"], result["fasttext"], result["gibberish"]):
                # only documents fastText passes reach the second stage; for the rest fastText alone decided
                annotate(doc, STEP_NAME, score=round(float(score), 6), logit=round(float(log_odds), 4),
                         fasttext=round(float(fasttext_p), 6),
                         gibberish=None if np.isnan(gibberish) else round(float(gibberish), 6))
        return scores

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        self.annotate(docs)
        return [None] * len(docs)


def _scorer_args(cfg: QualityConfig) -> dict:
    return {"max_chars": cfg.max_chars, "skip_scripts": cfg.skip_scripts, "batch_size": cfg.batch_size,
            "model_lang": cfg.model_lang, "fallback_langs": cfg.fallback_langs, "unmodelled": cfg.unmodelled,
            "unsure": cfg.unsure, "unsure_below": cfg.unsure_below, "textness_judge": cfg.textness_judge}


class QualityStep(QualityScorer):
    """The per-document step (threshold, pareto): score a batch, then decide each document from its score. In
    the pipeline it runs as ``DecideEach(QualityStep(...))`` followed by the routing tail."""

    def __init__(self, cfg: QualityConfig, model_paths: str | dict[str, str]):
        if cfg.mode == "top_fraction":
            raise ValueError("quality.mode=top_fraction needs a corpus-wide view: use QualityFilter")
        super().__init__(model_paths, **_scorer_args(cfg))
        self.cfg = cfg

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        self.annotate(docs)
        return [decide_document(step_annotations(d["annotations"], STEP_NAME), d.get("id"), self.cfg) for d in docs]


def check_model_language(model_path: str, lang: str, field: str) -> None:
    """A model whose card records the languages it was trained on scores only those: configured for another
    language, it would judge text it never saw (a Chinese model scoring English). Refused naming ``field``."""
    try:
        languages = card_languages(model_path)
    except ValueError as err:
        raise StepConfigError(f"{field}: {err}") from None
    if languages is not None and lang not in languages:
        where = (f"quality.models.{languages[0]}.model" if field != f"quality.models.{languages[0]}.model"
                 else "its own language")
        raise StepConfigError(f"{field}: {model_path} was trained on {'/'.join(languages)} text (its model card), "
                              f"not {lang}; configure it as {where}")


def _exists(path: str) -> bool:
    if not is_uri(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def check(cfg: QualityConfig) -> None:
    """What must hold before a worker loads the models (checked when the graph is built): each configured model
    and its ``.order.npz`` exist, or, without a model, the labelled data to train the default one does; a model
    whose card records the languages it was trained on is configured for one of them; the text-ness judge
    exists when a policy judges."""
    if "judge" in (cfg.unmodelled, cfg.unsure) and not os.path.exists(resolve_judge(cfg.textness_judge)):
        raise StepConfigError(f"quality.textness_judge: {resolve_judge(cfg.textness_judge)} does not exist")
    for lang, entry in cfg.language_models().items():
        field = "quality" if lang == cfg.model_lang else f"quality.models.{lang}"
        if entry.model:
            for path in (entry.model, sidecar_paths(entry.model)[0]):
                if not _exists(path):
                    raise StepConfigError(f"{field}.model: {path} does not exist (train one with `corpusmill "
                                          f"quality train`, which writes the model and its .order.npz)")
            reason = unreadable_reason(entry.model)
            if reason:
                raise StepConfigError(f"{field}.model: {reason}")
            check_model_language(entry.model, lang, f"{field}.model")
            continue
        if not entry.train_data:
            raise StepConfigError(f"{field}: set model or train_data")
        if not os.path.exists(resolve_train_data(entry.train_data)):
            shipped = DEFAULT_TRAIN_DATA if lang == cfg.model_lang else DEFAULT_ZH_TRAIN_DATA
            raise StepConfigError(f"{field}.train_data: {entry.train_data} does not exist (the repository ships "
                                  f"{shipped}; or set {field}.model)")


# ----------------------------------------------------------------------------------------- default model


def resolve_train_data(path: str) -> str:
    """``path`` itself when it exists, else (relative paths) the same path inside the repository."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    in_repo = REPO_ROOT / path
    return str(in_repo) if in_repo.exists() else path


def default_model_path(cache_dir: str | os.PathLike, cfg: QualityConfig | LanguageModelConfig,
                       lang: str | None = None) -> Path:
    """Where the default model for this training data and these parameters lives in ``cache_dir``."""
    # the feature version this code fits is part of the key: a model cached before the features changed is trained
    # again rather than reused (it would still score consistently, with the features it was fitted on)
    features = OrderFeatures.READABLE_FEATURE_VERSIONS[cfg.train.tokenizer][-1]
    key = f"{sha256_file(resolve_train_data(cfg.train_data))}\x00{cfg.train.model_dump_json()}\x00features {features}"
    infix = f"{lang}-" if lang else ""
    return Path(cache_dir) / f"quality-default-{infix}{sha256_bytes(key.encode('utf-8'))[:16]}.bin"


def ensure_default_model(cache_dir: str | os.PathLike, cfg: QualityConfig | None = None,
                         log: Callable[[str], None] = print) -> str:
    """Path of the ``model_lang`` quality model: ``cfg.model`` when set; else the default model trained from the
    shipped labelled data (``cfg.train_data``), trained once into ``cache_dir`` and reused. No network."""
    cfg = cfg or QualityConfig()
    check(cfg)
    return _ensure(cache_dir, LanguageModelConfig(model=cfg.model, train_data=cfg.train_data, train=cfg.train),
                   None, "quality.train_data", log)


def ensure_models(cache_dir: str | os.PathLike, cfg: QualityConfig | None = None,
                  log: Callable[[str], None] = print) -> dict[str, str]:
    """Path of every language's model (``ensure_default_model`` for each of ``cfg.language_models()``)."""
    cfg = cfg or QualityConfig()
    check(cfg)
    paths = {}
    for lang, entry in cfg.language_models().items():
        mine = lang == cfg.model_lang
        paths[lang] = _ensure(cache_dir, entry, None if mine else lang,
                              "quality.train_data" if mine else f"quality.models.{lang}.train_data", log)
    return paths


def _ensure(cache_dir: str | os.PathLike, entry: LanguageModelConfig, lang: str | None, field: str,
            log: Callable[[str], None]) -> str:
    if entry.model:
        return entry.model
    train_data = resolve_train_data(entry.train_data)
    path = default_model_path(cache_dir, entry, lang)
    if _cached(path):
        return str(path)
    what = f"the default {lang} model" if lang else "the default model"
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    # runs sharing a cache (CORPUSMILL_CACHE, parallel jobs, test workers) train each model once: the first
    # takes the lock and trains, the others wait for it and then read its model
    with _training_lock(path, what, log):
        if _cached(path):
            return str(path)
        return _train_default(path, train_data, entry, field, what, log)


def _cached(path: Path) -> bool:
    return path.exists() and Path(sidecar_paths(str(path))[0]).exists()


@contextmanager
def _training_lock(path: Path, what: str, log: Callable[[str], None]) -> Iterator[None]:
    """An exclusive lock beside the model file, held while it is trained (the OS drops it if the process dies)."""
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"quality: another process is training {what} into {path}; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _train_default(path: Path, train_data: str, entry: LanguageModelConfig, field: str, what: str,
                   log: Callable[[str], None]) -> str:
    started = time.time()
    log(f"quality: training {what} from {train_data} into {path}")
    records, problems = load_labeled(train_data, entry.train)
    if problems:
        raise ValueError(f"{field}: {len(problems)} unusable lines, first: {problems[0]}")
    model, card = train_quality_model(records, entry.train, log=log)
    card["data"]["path"] = str(entry.train_data)  # as configured: no machine-specific absolute path
    # write under a private name, then rename: the .bin, checked first by readers, lands last
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.bin")
    try:
        model.save(str(tmp), card)
        for src, dst in zip(sidecar_paths(str(tmp)), sidecar_paths(str(path))):
            os.replace(src, dst)
        os.replace(tmp, path)
    except BaseException:  # interrupted or failed: leave no half-written model behind
        for leftover in (str(tmp), *sidecar_paths(str(tmp))):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise
    metrics = card.get("metrics", {}).get("stacked", {})
    log(f"quality: default model ready in {time.time() - started:.0f}s "
        f"(held-out accuracy {metrics.get('accuracy', float('nan')):.3f})")
    return str(path)


# ------------------------------------------------------------------------------------------------- Beam

QUANTILES = 1000  # cut-off resolution of top_fraction: 0.1% of the corpus


def cutoff_from_quantiles(quantiles: Sequence[float], fraction: float) -> float:
    """Score cut-off keeping ~``fraction`` of documents, from evenly spaced quantiles (min ... max)."""
    if not quantiles:
        return 0.0
    index = int(round((1.0 - fraction) * (len(quantiles) - 1)))
    return float(quantiles[min(max(index, 0), len(quantiles) - 1)])


def _ranks_of(decided) -> list[float]:
    mine = step_annotations(decided[0]["annotations"], STEP_NAME)
    return [] if mine.get("score") is None else [mine["logit"]]


class Cutoff(beam.PTransform):
    """Scored ``(doc, _)`` pairs → the corpus-wide ``logit`` cut-off keeping ``fraction`` of the scored documents
    (a singleton), from Beam's approximate quantiles (no single-machine assumption)."""

    def __init__(self, fraction: float):
        super().__init__()
        self.fraction = fraction

    def expand(self, scored):
        return (
            scored
            | "Ranks" >> beam.FlatMap(_ranks_of)
            | "Quantiles" >> ApproximateQuantiles.Globally(QUANTILES + 1)
            | "FromQuantiles" >> beam.Map(cutoff_from_quantiles, self.fraction)
        )


def _decide_by_cutoff(decided, cfg: QualityConfig, cutoff: float):
    doc, _ = decided
    mine = step_annotations(doc["annotations"], STEP_NAME)
    if mine.get("score") is not None:  # documents no model scores are decided by the policy alone
        mine["cutoff"] = round(cutoff, 6)
    yield doc, decide_document(mine, doc.get("id"), cfg, cutoff)


class QualityFilter(beam.PTransform):
    """The pipeline step: ``docs | QualityFilter(cfg, model_path)`` → ``.kept`` / ``.removed`` (``out["kept"]``).

    Threshold and pareto score and decide per document (``ScoreAndDecide``: ``QualityStep`` in batches of
    ``batch_size``). top_fraction: ``Score`` (annotate only) → ``Cutoff`` (the corpus-wide cut-off) →
    ``Decide`` (with the cut-off as a side input; each document records the ``cutoff`` it was judged by; one
    cut-off over the documents of every language). Both end in the shared routing tail. ``model_path``: one
    model, or one per language (``ensure_models``), routed as ``QualityScorer`` says."""

    def __init__(self, cfg: QualityConfig, model_path: str | dict[str, str], progress_dir: str | None = None):
        super().__init__()
        if not model_path:
            raise ValueError("QualityFilter needs a model path (or one per language): get them from "
                             "ensure_models(cache_dir, cfg)")
        self.cfg, self.model_path, self.progress_dir = cfg, model_path, progress_dir

    def expand(self, docs):
        cfg = self.cfg
        if not cfg.enabled:  # switched off: every document passes untouched
            decided = docs | "NotEnabled" >> beam.Map(lambda doc: (doc, None))
        elif cfg.mode != "top_fraction":
            decided = docs | "ScoreAndDecide" >> DecideEach(QualityStep(cfg, self.model_path))
        else:
            scorer = QualityScorer(self.model_path, **_scorer_args(cfg))
            scored = docs | "Score" >> DecideEach(scorer)
            cutoff = scored | "Cutoff" >> Cutoff(cfg.top_fraction)
            decided = scored | "Decide" >> timed(STEP_NAME, _decide_by_cutoff, cfg, beam.pvalue.AsSingleton(cutoff))
        return decided | "Tail" >> Route(STEP_NAME, self.progress_dir)

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
    skipped     (instead of the above, with ``score: null``) why a document of a ``skip_scripts`` script was
                kept unscored
    cutoff      (top_fraction) the corpus-wide cut-off the document was judged by

Decision (``mode``), applied to ``score``:
    threshold     keep when score >= threshold
    top_fraction  keep the best ``top_fraction`` of the corpus by ``logit`` (cut-off from Beam's approximate
                  quantiles)
    pareto        keep when pareto(alpha) > 1 - score (GPT-3 / NeMo Curator style), with a draw that is a
                  pure function of (seed, document id): the same documents survive on any runner and rerun.

The Beam step (``QualityFilter``) reads as its parts: ``Score`` → ``Cutoff`` (top_fraction only) → ``Decide`` →
the shared routing tail; threshold and pareto score and decide in one per-document step (``QualityStep``).
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Literal, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.stats import ApproximateQuantiles
from pydantic import BaseModel, ConfigDict, Field

from runio.files import is_uri, sha256_bytes, sha256_file
from transforms.base import Doc, StepConfigError, annotate, annotation, step_annotations
from transforms.beam_step import DecideEach, Route, timed
from transforms.quality.model import QualityModel, QualityTrainConfig, load_labeled, sidecar_paths, train_quality_model

STEP_NAME = "quality"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRAIN_DATA = "data/quality/quality_train_subset.jsonl.gz"  # relative: to the cwd, else to the repo
REASONS = {"threshold": "low_quality", "top_fraction": "below_top_fraction", "pareto": "pareto_sampled_out"}


class QualityConfig(BaseModel):
    """The ``quality`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    model: str | None = Field(None, description="path of a model from `corpusmill quality train` (.bin or .ftz "
                                                "with its .order.npz next to it); null: train the default model "
                                                "from `train_data` at run time (cached)")
    train_data: str = Field(DEFAULT_TRAIN_DATA, description="labelled JSONL(.gz) for the default model; a relative "
                                                            "path is looked up in the cwd, then in the repository")
    mode: Literal["threshold", "top_fraction", "pareto"] = "threshold"
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="mode=threshold: keep when quality.score >= it")
    top_fraction: float = Field(0.8, gt=0.0, le=1.0, description="mode=top_fraction: share of documents kept")
    pareto_alpha: float = Field(9.0, gt=0.0, description="mode=pareto: shape of the Pareto draw (GPT-3 used 9)")
    seed: int = Field(0, description="mode=pareto: seed of the per-document draw")
    skip_scripts: list[Literal["cjk", "other"]] = Field(
        default_factory=lambda: ["cjk"],
        description="documents of these scripts (normalize.script, set by normalize) are kept unscored: the "
                    "default model is trained on English text only and would reject all Chinese text")
    batch_size: int = Field(256, ge=1, le=65536, description="documents scored per model call")
    max_chars: int = Field(20_000, ge=100, description="characters of each document fastText reads")
    train: QualityTrainConfig = QualityTrainConfig()


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
    """Loads the model once and annotates batches of documents: the core of every path. As a ``DocStep`` it
    only annotates (``apply`` decides nothing: the corpus-wide cut-off decides later)."""

    name = STEP_NAME

    def __init__(self, model_path: str, max_chars: int = 20_000, skip_scripts: Sequence[str] = (),
                 batch_size: int = 256):
        self.model_path = model_path
        self.max_chars = max_chars
        self.skip_scripts = tuple(skip_scripts)
        self.batch_size = batch_size
        self.model: QualityModel | None = None
        self._scored = Metrics.counter(STEP_NAME, "scored")

    def setup(self) -> None:
        if self.model is None:
            self.model = QualityModel.load(local_model_copy(self.model_path))

    def annotate(self, docs: Sequence[Doc], skip_scripts: Sequence[str] | None = None) -> np.ndarray:
        """Write ``annotations["quality"]`` on ``docs``; return their quality scores (NaN for documents of a
        script in ``skip_scripts``: kept unscored, with ``skipped`` saying why)."""
        self.setup()
        skip_scripts = self.skip_scripts if skip_scripts is None else skip_scripts
        scores = np.full(len(docs), np.nan)
        scored_idx = []
        for i, doc in enumerate(docs):
            script = annotation(doc, "normalize.script")
            if script in skip_scripts:
                annotate(doc, STEP_NAME, score=None, skipped=f"script {script}: the model is not trained on it")
            else:
                scored_idx.append(i)
        self._scored.inc(len(docs))
        if not scored_idx:
            return scores
        scored_docs = [docs[i] for i in scored_idx]
        texts = [d.get("text") if isinstance(d.get("text"), str) else "" for d in scored_docs]
        result = self.model.score(texts, max_chars=self.max_chars)
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


class QualityStep(QualityScorer):
    """The per-document step (threshold, pareto): score a batch, then decide each document from its score. In
    the pipeline it runs as ``DecideEach(QualityStep(...))`` followed by the routing tail."""

    def __init__(self, cfg: QualityConfig, model_path: str):
        if cfg.mode == "top_fraction":
            raise ValueError("quality.mode=top_fraction needs a corpus-wide view: use QualityFilter")
        super().__init__(model_path, cfg.max_chars, cfg.skip_scripts, cfg.batch_size)
        self.cfg = cfg

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        scores = self.annotate(docs)
        return [None if np.isnan(s) else decide(float(s), d.get("id"), self.cfg) for d, s in zip(docs, scores)]


def _exists(path: str) -> bool:
    if not is_uri(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def check(cfg: QualityConfig) -> None:
    """What must hold before a worker loads the model (checked when the graph is built): the configured model
    and its ``.order.npz`` exist, or, without a model, the labelled data to train the default one does."""
    if cfg.model:
        for path in (cfg.model, sidecar_paths(cfg.model)[0]):
            if not _exists(path):
                raise StepConfigError(f"quality.model: {path} does not exist (train one with `corpusmill quality "
                                      f"train`, which writes the model and its .order.npz)")
        return
    if not os.path.exists(resolve_train_data(cfg.train_data)):
        raise StepConfigError(f"quality.train_data: {cfg.train_data} does not exist (the repository ships "
                              f"{DEFAULT_TRAIN_DATA}; or set quality.model)")


# ----------------------------------------------------------------------------------------- default model


def resolve_train_data(path: str) -> str:
    """``path`` itself when it exists, else (relative paths) the same path inside the repository."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    in_repo = REPO_ROOT / path
    return str(in_repo) if in_repo.exists() else path


def default_model_path(cache_dir: str | os.PathLike, cfg: QualityConfig) -> Path:
    """Where the default model for this training data and these parameters lives in ``cache_dir``."""
    key = f"{sha256_file(resolve_train_data(cfg.train_data))}\x00{cfg.train.model_dump_json()}"
    return Path(cache_dir) / f"quality-default-{sha256_bytes(key.encode('utf-8'))[:16]}.bin"


def ensure_default_model(cache_dir: str | os.PathLike, cfg: QualityConfig | None = None,
                         log: Callable[[str], None] = print) -> str:
    """Path of the quality model to use: ``cfg.model`` when set; else the default model trained from the
    shipped labelled data (``cfg.train_data``), trained once into ``cache_dir`` and reused. No network."""
    cfg = cfg or QualityConfig()
    check(cfg)
    if cfg.model:
        return cfg.model
    train_data = resolve_train_data(cfg.train_data)
    path = default_model_path(cache_dir, cfg)
    if path.exists() and Path(sidecar_paths(str(path))[0]).exists():
        return str(path)
    started = time.time()
    log(f"quality: training the default model from {train_data} into {path}")
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    records, problems = load_labeled(train_data, cfg.train)
    if problems:
        raise ValueError(f"quality.train_data: {len(problems)} unusable lines, first: {problems[0]}")
    model, card = train_quality_model(records, cfg.train, log=log)
    card["data"]["path"] = str(cfg.train_data)  # as configured: no machine-specific absolute path
    # write under a private name, then rename: the .bin, checked first by readers, lands last
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.bin")
    model.save(str(tmp), card)
    for src, dst in zip(sidecar_paths(str(tmp)), sidecar_paths(str(path))):
        os.replace(src, dst)
    os.replace(tmp, path)
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
    if mine.get("score") is None:  # a skipped script: kept unscored
        yield doc, None
        return
    mine["cutoff"] = round(cutoff, 6)
    yield doc, decide(mine["logit"], doc.get("id"), cfg, cutoff)


class QualityFilter(beam.PTransform):
    """The pipeline step: ``docs | QualityFilter(cfg, model_path)`` → ``.kept`` / ``.removed`` (``out["kept"]``).

    Threshold and pareto score and decide per document (``ScoreAndDecide``: ``QualityStep`` in batches of
    ``batch_size``). top_fraction: ``Score`` (annotate only) → ``Cutoff`` (the corpus-wide cut-off) →
    ``Decide`` (with the cut-off as a side input; each document records the ``cutoff`` it was judged by).
    Both end in the shared routing tail."""

    def __init__(self, cfg: QualityConfig, model_path: str, progress_dir: str | None = None):
        super().__init__()
        if not model_path:
            raise ValueError("QualityFilter needs a model path: get one from ensure_default_model(cache_dir, cfg)")
        self.cfg, self.model_path, self.progress_dir = cfg, model_path, progress_dir

    def expand(self, docs):
        cfg = self.cfg
        if not cfg.enabled:  # switched off: every document passes untouched
            decided = docs | "NotEnabled" >> beam.Map(lambda doc: (doc, None))
        elif cfg.mode != "top_fraction":
            decided = docs | "ScoreAndDecide" >> DecideEach(QualityStep(cfg, self.model_path))
        else:
            scorer = QualityScorer(self.model_path, cfg.max_chars, cfg.skip_scripts, cfg.batch_size)
            scored = docs | "Score" >> DecideEach(scorer)
            cutoff = scored | "Cutoff" >> Cutoff(cfg.top_fraction)
            decided = scored | "Decide" >> timed(STEP_NAME, _decide_by_cutoff, cfg, beam.pvalue.AsSingleton(cutoff))
        return decided | "Tail" >> Route(STEP_NAME, self.progress_dir)

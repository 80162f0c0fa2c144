"""Quality scoring: annotate every document with P(high quality), then decide from the annotation.

Score (``transforms.quality.model.QualityModel``): a fastText classifier over words and word bigrams, plus
word-order and cohesion features (class n-gram model gains, in-document cache gain, topic-word repetition,
pronoun consistency) that catch fluent-looking gibberish a bag of n-grams cannot see, joined by a small
logistic second stage. Annotations written on every document:

    quality_score       P(high quality), the stacked score the decisions use
    quality_logit       its log-odds: confident documents all round to score 1.0, their logits still rank them
                        (top_fraction ranks by it)
    quality_fasttext    P(high quality) from fastText alone (for comparison and retuning)
    quality_gibberish   P(low quality | fastText passes it) from word order and cohesion; null when fastText
                        alone rejected the document (P(hq) below the gate: the second stage never runs)

Decision (``mode``), applied to ``quality_score``:
    threshold     keep when score >= threshold
    top_fraction  keep the best ``top_fraction`` of the corpus by ``quality_logit`` (cut-off from Beam's
                  approximate quantiles)
    pareto        keep when pareto(alpha) > 1 - score (GPT-3 / NeMo Curator style), with a draw that is a
                  pure function of (seed, document id): the same documents survive on any runner and rerun.
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
from apache_beam.utils.windowed_value import WindowedValue
from pydantic import BaseModel, ConfigDict, Field

from transforms.base import Doc, mark_removed
from transforms.quality.model import QualityModel, QualityTrainConfig, load_labeled, sidecar_paths, train_quality_model

STEP_NAME = "quality"
KEPT, REMOVED = "kept", "removed"
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
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="mode=threshold: keep when quality_score >= it")
    top_fraction: float = Field(0.8, gt=0.0, le=1.0, description="mode=top_fraction: share of documents kept")
    pareto_alpha: float = Field(9.0, gt=0.0, description="mode=pareto: shape of the Pareto draw (GPT-3 used 9)")
    seed: int = Field(0, description="mode=pareto: seed of the per-document draw")
    skip_scripts: list[Literal["cjk", "other"]] = Field(
        default_factory=lambda: ["cjk"],
        description="documents of these scripts (annotations.script, set by normalize) are kept unscored: the "
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
    ``cutoff`` are on the ranking scale, ``quality_logit``)."""
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
    """Loads the model once and annotates batches of documents (no decision): the core of every path."""

    name = STEP_NAME

    def __init__(self, model_path: str, max_chars: int = 20_000):
        self.model_path = model_path
        self.max_chars = max_chars
        self.model: QualityModel | None = None

    def setup(self) -> None:
        if self.model is None:
            self.model = QualityModel.load(local_model_copy(self.model_path))

    def annotate(self, docs: Sequence[Doc], skip_scripts: Sequence[str] = ()) -> np.ndarray:
        """Write the quality annotations on ``docs``; return their quality scores (NaN for documents of a
        script in ``skip_scripts``: kept unscored, with ``quality_skipped`` saying why)."""
        self.setup()
        scores = np.full(len(docs), np.nan)
        scored_idx = []
        for i, doc in enumerate(docs):
            script = doc.get("annotations", {}).get("script")
            if script in skip_scripts:
                doc.setdefault("annotations", {}).update(
                    quality_score=None, quality_skipped=f"script {script}: the model is not trained on it")
            else:
                scored_idx.append(i)
        if not scored_idx:
            return scores
        scored_docs = [docs[i] for i in scored_idx]
        texts = [d.get("text") if isinstance(d.get("text"), str) else "" for d in scored_docs]
        result = self.model.score(texts, max_chars=self.max_chars)
        scores[scored_idx] = result["score"]
        for doc, score, log_odds, fasttext_p, gibberish in zip(
                scored_docs, result["score"], result["logit"], result["fasttext"], result["gibberish"]):
            annotations = doc.setdefault("annotations", {})
            annotations["quality_score"] = round(float(score), 6)
            annotations["quality_logit"] = round(float(log_odds), 4)
            annotations["quality_fasttext"] = round(float(fasttext_p), 6)
            # only documents fastText passes reach the second stage; for the rest fastText alone decided
            annotations["quality_gibberish"] = None if np.isnan(gibberish) else round(float(gibberish), 6)
        return scores


class QualityStep(QualityScorer):
    """``DocStep`` for the per-document decisions (threshold, pareto): score a batch, then decide each doc."""

    def __init__(self, cfg: QualityConfig, model_path: str):
        if cfg.mode == "top_fraction":
            raise ValueError("quality.mode=top_fraction needs a corpus-wide view: use QualityFilter")
        super().__init__(model_path, cfg.max_chars)
        self.cfg = cfg

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        scores = self.annotate(docs, self.cfg.skip_scripts)
        return [None if np.isnan(s) else decide(float(s), d.get("id"), self.cfg) for d, s in zip(docs, scores)]


# ----------------------------------------------------------------------------------------- default model


def resolve_train_data(path: str) -> str:
    """``path`` itself when it exists, else (relative paths) the same path inside the repository."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    in_repo = REPO_ROOT / path
    return str(in_repo) if in_repo.exists() else path


def default_model_path(cache_dir: str | os.PathLike, cfg: QualityConfig) -> Path:
    """Where the default model for this training data and these parameters lives in ``cache_dir``."""
    digest = hashlib.sha256()
    with open(resolve_train_data(cfg.train_data), "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(cfg.train.model_dump_json().encode("utf-8"))
    return Path(cache_dir) / f"quality-default-{digest.hexdigest()[:16]}.bin"


def ensure_default_model(cache_dir: str | os.PathLike, cfg: QualityConfig | None = None,
                         log: Callable[[str], None] = print) -> str:
    """Path of the quality model to use: ``cfg.model`` when set; else the default model trained from the
    shipped labelled data (``cfg.train_data``), trained once into ``cache_dir`` and reused. No network."""
    cfg = cfg or QualityConfig()
    if cfg.model:
        for path in (cfg.model, sidecar_paths(cfg.model)[0]):
            if not os.path.exists(path):
                raise FileNotFoundError(f"quality.model: {path} does not exist")
        return cfg.model
    train_data = resolve_train_data(cfg.train_data)
    if not os.path.exists(train_data):
        raise FileNotFoundError(f"quality.train_data: {cfg.train_data} does not exist (the repository ships "
                                f"{DEFAULT_TRAIN_DATA}; or set quality.model)")
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


class _ScoreFn(beam.DoFn):
    """Scores documents in batches of ``batch_size``; decides per document too unless the decision needs the
    whole corpus. It batches by itself (a buffer flushed when full and at the end of each bundle), which
    costs less per document than a separate BatchElements step; every document keeps its own window and
    timestamp."""

    def __init__(self, cfg: QualityConfig, model_path: str, decide_here: bool):
        self.cfg, self.model_path, self.decide_here = cfg, model_path, decide_here
        self.scorer: QualityScorer | None = None
        self.buffer: list[tuple[Doc, object, object]] = []
        self.kept = Metrics.counter(STEP_NAME, "kept")
        self.removed = Metrics.counter(STEP_NAME, "removed")
        self.scored = Metrics.counter(STEP_NAME, "scored")
        self.busy_ms = Metrics.counter(STEP_NAME, "busy_ms")

    def setup(self):
        self.scorer = QualityScorer(self.model_path, self.cfg.max_chars)
        self.scorer.setup()  # the model is loaded once per worker

    def start_bundle(self):
        self.buffer = []

    def process(self, doc, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
        self.buffer.append((doc, window, timestamp))
        if len(self.buffer) >= self.cfg.batch_size:
            yield from self._flush()

    def finish_bundle(self):
        yield from self._flush()

    def _flush(self):
        batch, self.buffer = self.buffer, []
        if not batch:
            return
        docs = [doc for doc, _, _ in batch]
        started = time.perf_counter()
        scores = self.scorer.annotate(docs, self.cfg.skip_scripts)
        self.busy_ms.inc(int((time.perf_counter() - started) * 1000))
        self.scored.inc(len(docs))
        removed = 0
        for (doc, window, timestamp), score in zip(batch, scores):
            reason = (decide(float(score), doc.get("id"), self.cfg)
                      if self.decide_here and not np.isnan(score) else None)
            if reason is None:
                yield WindowedValue(doc, timestamp, (window,))
            else:
                removed += 1
                yield beam.pvalue.TaggedOutput(
                    REMOVED, WindowedValue(mark_removed(doc, STEP_NAME, reason), timestamp, (window,)))
        if self.decide_here:  # counters once per batch: per document they cost a tenth of the scoring
            self.kept.inc(len(docs) - removed)
            self.removed.inc(removed)


class _DecideByCutoffFn(beam.DoFn):
    def __init__(self, cfg: QualityConfig):
        self.cfg = cfg
        self.kept = Metrics.counter(STEP_NAME, "kept")
        self.removed = Metrics.counter(STEP_NAME, "removed")

    def process(self, doc, quantiles):
        if doc["annotations"].get("quality_score") is None:  # a skipped script: kept unscored
            self.kept.inc()
            yield doc
            return
        cutoff = cutoff_from_quantiles(quantiles, self.cfg.top_fraction)
        doc["annotations"]["quality_cutoff"] = round(cutoff, 6)
        reason = decide(doc["annotations"]["quality_logit"], doc.get("id"), self.cfg, cutoff)
        if reason is None:
            self.kept.inc()
            yield doc
        else:
            self.removed.inc()
            yield beam.pvalue.TaggedOutput(REMOVED, mark_removed(doc, STEP_NAME, reason))


def _ranks_of(doc: Doc) -> list[float]:
    annotations = doc["annotations"]
    return [] if annotations.get("quality_score") is None else [annotations["quality_logit"]]


class QualityFilter(beam.PTransform):
    """The pipeline step: ``docs | QualityFilter(cfg, model_path)`` -> ``{"kept": ..., "removed": ...}``.

    Threshold and pareto decide per document inside the scoring DoFn. top_fraction scores first, computes the
    corpus-wide cut-off with Beam's approximate quantiles (no single-machine assumption), then decides with it
    as a side input; each document also records the ``quality_cutoff`` it was judged by."""

    def __init__(self, cfg: QualityConfig, model_path: str):
        super().__init__()
        if not model_path:
            raise ValueError("QualityFilter needs a model path: get one from ensure_default_model(cache_dir, cfg)")
        self.cfg, self.model_path = cfg, model_path

    def expand(self, docs):
        if not self.cfg.enabled:  # switched off: every document passes untouched
            return {KEPT: docs, REMOVED: docs.pipeline | "NothingRemoved" >> beam.Create([])}
        per_doc = self.cfg.mode != "top_fraction"
        scored = docs | "Score" >> beam.ParDo(_ScoreFn(self.cfg, self.model_path, per_doc)).with_outputs(
            REMOVED, main=KEPT)
        if per_doc:
            return {KEPT: scored[KEPT], REMOVED: scored[REMOVED]}
        quantiles = (
            scored[KEPT]
            | "Ranks" >> beam.FlatMap(_ranks_of)
            | "Quantiles" >> ApproximateQuantiles.Globally(QUANTILES + 1)
        )
        decided = scored[KEPT] | "Decide" >> beam.ParDo(
            _DecideByCutoffFn(self.cfg), beam.pvalue.AsSingleton(quantiles)).with_outputs(REMOVED, main=KEPT)
        return {KEPT: decided[KEPT], REMOVED: decided[REMOVED]}

"""The quality model, a cascade: fastText over words and bigrams; for the documents it passes, a logistic second
stage over fastText's logit and word-order/cohesion features (``transforms.quality.features``).

Files of one model (``MODEL`` is the path given by the user, e.g. ``model.bin`` or ``model.ftz``):
    MODEL                 the fastText supervised classifier (usable on its own with the fastText tools)
    MODEL.order.npz       word classes, hashed class n-gram counts and stacker weights (plain arrays, no pickle)
    MODEL.card.json       model card: data, parameters, held-out metrics

Training (``train_quality_model``): fastText and the n-gram model are cross-fitted over folds of *groups* (source
documents) and the stacker is fitted on those out-of-fold scores, plus (``in_sample_weight``) the high-quality
training texts as the final n-gram model scores them, since real corpora hold the model's training text too; the
final metrics come from a held-out split sharing no group with training.
Only text is used as input; labels are the targets, and any other field (subtype, source) is used only to
break metrics down.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from runio.files import atomic_output, atomic_path, write_json
from transforms.langid import LangIdentifier
from transforms.quality.features import OrderFeatures, char_stream

# a language counts as one of a model's languages when at least this share of its high-quality training
# records is identified as it (a handbook quoting English commands stays a Chinese model)
LANGUAGE_MIN_SHARE = 0.1

# 2: the order features carry a feature version (models from feature version 2 on, Chinese and English, write format
# 2, so that code that reads only format 1 refuses them instead of computing the columns they were not fitted on; code
# that reads format 2 but not the model's feature version refuses it by name); 1 still loads
MODEL_FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
DEFAULT_MAX_CHARS = 20_000  # characters of a document fastText reads
# at most, with character tokens: a bag of character bigrams is saturated long before, and the cost is per character
CJK_FASTTEXT_CHARS = 2_000


class QualityTrainConfig(BaseModel):
    """How ``corpusmill quality train`` builds a model (the ``quality.train`` config section)."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: Literal["whitespace", "cjk"] = Field("whitespace", description="how both stages read text: whitespace (space-delimited "
                                                     "languages) or cjk (characters: Chinese, Japanese, Korean)")
    text_field: str = Field("text", description="record field holding the text")
    label_field: str = Field("label", description="record field holding the label (positive_label or anything else)")
    group_field: str | None = Field("group", description="records sharing it never straddle a split; "
                                                          "missing field -> each record is its own group")
    positive_label: str = Field("hq", description="label value of high-quality text (score = its probability)")
    breakdown_field: str | None = Field("subtype", description="field used only to break metrics down")
    heldout_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="share of groups held out for metrics")
    folds: int = Field(4, ge=2, le=10, description="cross-fitting folds for the stacker's training scores")
    seed: int = Field(0, description="seed of the split, the folds and fastText")
    # fastText supervised hyper-parameters
    epoch: int = Field(10, ge=1, description="fastText training epochs")
    lr: float = Field(0.5, gt=0, description="fastText learning rate (halved and retried if training diverges)")
    dim: int = Field(32, ge=2, description="fastText vector dimension")
    word_ngrams: int = Field(2, ge=1, le=5, description="fastText word n-gram length (2: words + bigrams)")
    min_count: int = Field(1, ge=1, description="fastText: words seen fewer times are ignored")
    bucket: int = Field(200_000, ge=1000, description="hash buckets of word n-grams (model size ~ bucket*dim*4 B)")
    threads: int = Field(1, ge=1, description="fastText training threads (1 is deterministic)")
    quantize: bool = Field(False, description="also write a quantized .ftz next to the model")
    quantize_cutoff: int = Field(100_000, ge=0, description="words + n-gram buckets kept by the .ftz (by norm); "
                                                             "0 keeps all")
    # word-order model
    frequent_words: int = Field(1000, ge=10, description="most frequent words kept as their own class")
    order: int = Field(3, ge=2, le=6, description="n-gram order of the class language model")
    hash_bits: int = Field(20, ge=12, le=26, description="log2 of buckets per n-gram count table")
    max_tokens: int = Field(256, ge=16, description="tokens of each document used by the order features")
    ngram_min_docs: int = Field(1, ge=1, description="the class n-gram model counts an n-gram (order >= 2) only when "
                                "at least this many training groups (source documents) use it, the uses of rarer ones "
                                "going to the lower order: rare n-grams make it predict its own training text far "
                                "better than unseen text (1: count all)")
    l2: float = Field(2.0, ge=0.0, description="L2 penalty of the logistic stacker (on standardised features)")
    in_sample_weight: float = Field(0.5, ge=0.0, description="weight in the second stage's fit of the high-quality "
                                    "training texts scored in sample by the final n-gram model (text the model was "
                                    "trained on, as real corpora hold it); 0: out-of-fold documents only")
    gate: float = Field(0.1, gt=0.0, lt=1.0, description="fastText P(hq) below which a document is low quality "
                                                         "outright; the second stage decides the rest")
    chain_min: float = Field(0.3, ge=0.0, le=1.0, description="English order features version 4: the second "
                             "stage may score a document below the same stage fitted without the word n-gram columns "
                             "only where those columns say Markov chain, word_bigram_known * (1 - word_trigram_kept) "
                             ">= chain_min (0: everywhere, as first shipped); elsewhere the higher of the two")


def fasttext_line(tokens: Sequence[str]) -> str:
    """fastText's input: lower-cased words and punctuation separated by single spaces, on one line."""
    return " ".join(tokens).lower()


def tokenize_head(text: str, max_chars: int) -> list[str]:
    """The tokens both models read: fastText all of them, the order features the first ``max_tokens``."""
    return text[:max_chars].split()


def fasttext_inputs(texts: Sequence[str], max_chars: int, tokenizer: str = "whitespace"
                    ) -> tuple[list[str], list[list[str]] | None]:
    """(fastText input lines, token lists the order features may reuse) of a batch.

    whitespace: the words of each text's head, shared by both stages. cjk: every character a token (whitespace
    runs become ``␣``), joined by spaces for fastText in C (``" ".join``), so its word bigrams are character
    bigrams, over at most ``CJK_FASTTEXT_CHARS`` characters; the order features then read their own short head
    (``None``)."""
    if tokenizer == "cjk":
        limit = min(max_chars, CJK_FASTTEXT_CHARS)
        return [" ".join(char_stream(t[:limit])).lower() for t in texts], None
    token_lists = [tokenize_head(t, max_chars) for t in texts]
    return [fasttext_line(toks) for toks in token_lists], token_lists


class LogisticStacker:
    """L2-regularised logistic regression over standardised features, fitted by Newton's method."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, weights: np.ndarray, bias: float):
        self.mean, self.scale, self.weights, self.bias = mean, scale, weights, float(bias)

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, l2: float, iterations: int = 50,
            sample_weight: np.ndarray | None = None) -> "LogisticStacker":
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale[scale < 1e-9] = 1.0
        z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
        w = np.zeros(z.shape[1])
        sw = np.ones(len(x)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        penalty = np.full(z.shape[1], l2)
        penalty[-1] = 0.0  # no penalty on the bias
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-(z @ w)))
            grad = z.T @ (sw * (p - y)) + penalty * w
            hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        return cls(mean, scale, w[:-1], w[-1])

    def logit(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.scale) @ self.weights + self.bias

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {prefix + "mean": self.mean, prefix + "scale": self.scale, prefix + "weights": self.weights,
                prefix + "bias": np.array([self.bias])}

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> "LogisticStacker":
        return cls(np.asarray(arrays[prefix + "mean"]), np.asarray(arrays[prefix + "scale"]),
                   np.asarray(arrays[prefix + "weights"]), float(arrays[prefix + "bias"][0]))


# Share of the training documents below (and above) the range each input of the second stage is clipped to.
CLIP_TAIL = 0.005


class SecondStage:
    """Logistic regression over the pairwise products of [fastText logit, order features] (z-scored first):
    the products let it learn that e.g. low cohesion only matters in text fastText takes for prose.

    Inputs are clipped to the range the training documents span (``CLIP_TAIL`` of them outside on each side), so a
    document beyond it is scored as the most extreme ones it was fitted on: a quadratic surface extrapolated far
    outside its data swings to any verdict (text the class n-gram model was trained on has trigram gains no
    out-of-fold document has, and scored 0.000). Models saved without the range are not clipped."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, model: LogisticStacker, gate: float,
                 low: np.ndarray | None = None, high: np.ndarray | None = None):
        self.mean, self.scale, self.model, self.gate = mean, scale, model, float(gate)
        self.low, self.high = low, high

    @staticmethod
    def _expand(z: np.ndarray) -> np.ndarray:
        rows, cols = np.triu_indices(z.shape[1])
        return np.hstack([z, z[:, rows] * z[:, cols]])

    @staticmethod
    def _base(p_fasttext: np.ndarray, order_x: np.ndarray) -> np.ndarray:
        return np.hstack([logit(p_fasttext)[:, None], order_x])

    @classmethod
    def fit(cls, p_fasttext, order_x, y, l2: float, gate: float, sample_weight=None) -> "SecondStage":
        base = cls._base(p_fasttext, order_x)
        low, high = np.quantile(base, CLIP_TAIL, axis=0), np.quantile(base, 1 - CLIP_TAIL, axis=0)
        base = np.clip(base, low, high)
        mean, scale = base.mean(axis=0), base.std(axis=0)
        scale[scale < 1e-9] = 1.0
        model = LogisticStacker.fit(cls._expand((base - mean) / scale), y, l2, sample_weight=sample_weight)
        return cls(mean, scale, model, gate, low, high)

    def predict_logit(self, p_fasttext: np.ndarray, order_x: np.ndarray) -> np.ndarray:
        base = self._base(p_fasttext, order_x)
        if self.low is not None:
            base = np.clip(base, self.low, self.high)
        return self.model.logit(self._expand((base - self.mean) / self.scale))

    def predict(self, p_fasttext: np.ndarray, order_x: np.ndarray) -> np.ndarray:
        return sigmoid(self.predict_logit(p_fasttext, order_x))

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        arrays = self.model.to_arrays(prefix + "lr_")
        arrays.update({prefix + "base_mean": self.mean, prefix + "base_scale": self.scale,
                       prefix + "gate": np.array([self.gate])})
        if self.low is not None:
            arrays.update({prefix + "base_low": self.low, prefix + "base_high": self.high})
        return arrays

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> "SecondStage":
        bounds = [np.asarray(arrays[prefix + k]) if prefix + k in arrays else None for k in ("base_low", "base_high")]
        return cls(np.asarray(arrays[prefix + "base_mean"]), np.asarray(arrays[prefix + "base_scale"]),
                   LogisticStacker.from_arrays(arrays, prefix + "lr_"), float(arrays[prefix + "gate"][0]), *bounds)


class ChainGuardedStage:
    """The second stage over all columns, kept from lowering a document below the same stage fitted without the word
    n-gram columns (``OrderFeatures.WORD_NGRAMS_V4``) except where those columns say Markov chain.

    Adding the two columns refits every weight of the quadratic surface, not only theirs: its tail moved where real
    text lies outside the training documents' range (Usenet posts whose head is a header block: class n-gram
    log-probabilities far below prose's, few word pairs the training prose has), and 14 posts version 3 kept fell
    below the threshold for no reason the new columns give. So the columns may only lower a score where they carry
    their signal: many of the document's word trigrams have both word pairs in the training prose but not the
    triple (``word_bigram_known * (1 - word_trigram_kept) >= chain_min``; Markov babble over the training prose about
    0.39, real Austen about 0.17, Usenet posts about 0.07); elsewhere the document gets the higher of the two logits."""

    def __init__(self, full: SecondStage, plain: SecondStage, plain_columns: np.ndarray, known_column: int,
                 kept_column: int, chain_min: float):
        self.full, self.plain, self.chain_min = full, plain, float(chain_min)
        self.plain_columns = np.asarray(plain_columns, dtype=np.int64)
        self.known_column, self.kept_column = int(known_column), int(kept_column)

    @property
    def gate(self) -> float:
        return self.full.gate

    @classmethod
    def fit(cls, p_fasttext, order_x, y, l2: float, gate: float, names: Sequence[str], chain_min: float,
            sample_weight=None) -> "ChainGuardedStage":
        plain_columns = np.array([i for i, n in enumerate(names) if n not in OrderFeatures.WORD_NGRAMS_V4])
        full = SecondStage.fit(p_fasttext, order_x, y, l2, gate, sample_weight)
        plain = SecondStage.fit(p_fasttext, order_x[:, plain_columns], y, l2, gate, sample_weight)
        return cls(full, plain, plain_columns, list(names).index("word_bigram_known"),
                   list(names).index("word_trigram_kept"), chain_min)

    def chain(self, order_x: np.ndarray) -> np.ndarray:
        """The share of word trigram positions whose two word pairs the training prose has but not the triple."""
        return order_x[:, self.known_column] * (1.0 - order_x[:, self.kept_column])

    def predict_logit(self, p_fasttext: np.ndarray, order_x: np.ndarray) -> np.ndarray:
        full = self.full.predict_logit(p_fasttext, order_x)
        plain = self.plain.predict_logit(p_fasttext, order_x[:, self.plain_columns])
        return np.where(self.chain(order_x) >= self.chain_min, full, np.maximum(full, plain))

    def predict(self, p_fasttext: np.ndarray, order_x: np.ndarray) -> np.ndarray:
        return sigmoid(self.predict_logit(p_fasttext, order_x))

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        arrays = self.full.to_arrays(prefix)
        arrays.update(self.plain.to_arrays(prefix + "plain_"))
        arrays.update({prefix + "plain_columns": self.plain_columns,
                       prefix + "chain_columns": np.array([self.known_column, self.kept_column], dtype=np.int64),
                       prefix + "chain_min": np.array([self.chain_min])})
        return arrays

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> "SecondStage | ChainGuardedStage":
        """The stage saved under ``prefix``: guarded when the arrays hold the plain stage, else a plain SecondStage
        (models saved before the guard, and Chinese ones)."""
        full = SecondStage.from_arrays(arrays, prefix)
        if prefix + "chain_min" not in arrays:
            return full
        known, kept = (int(i) for i in np.asarray(arrays[prefix + "chain_columns"]))
        return cls(full, SecondStage.from_arrays(arrays, prefix + "plain_"), np.asarray(arrays[prefix + "plain_columns"]),
                   known, kept, float(arrays[prefix + "chain_min"][0]))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def logit(p: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    p = np.clip(p, eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def _load_fasttext(path: str):
    try:
        import fasttext
    except ImportError as err:  # the step cannot do real work without it: say so
        raise RuntimeError("the quality step needs the fastText binding: pip install fasttext-numpy2==0.10.4") from err
    fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence the load-time deprecation banner
    return fasttext.load_model(path)


def sidecar_paths(model_path: str) -> tuple[str, str]:
    """(order-model arrays, model card) paths that belong to ``model_path``."""
    return model_path + ".order.npz", model_path + ".card.json"


def training_languages(texts: Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """(languages, documents per language) of training texts, as the langid step identifies them: the languages
    of at least ``LANGUAGE_MIN_SHARE`` of the texts, most frequent first."""
    counts: dict[str, int] = {}
    for result in LangIdentifier().identify(list(texts)):
        counts[result["lang"]] = counts.get(result["lang"], 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [lang for lang, n in ranked if n >= LANGUAGE_MIN_SHARE * max(len(texts), 1)], dict(ranked)


def card_languages(model_path: str) -> list[str] | None:
    """The languages a model's card records it was trained on; None when there is no card (a model trained
    before cards recorded them, or a bare fastText file) or it does not say."""
    _, card_path = sidecar_paths(model_path)
    if "://" in model_path or not os.path.exists(card_path):
        return None
    with open(card_path, encoding="utf-8") as fh:
        try:
            card = json.load(fh)
        except json.JSONDecodeError as err:
            raise ValueError(f"{card_path}: not a model card ({err.msg})") from None
    languages = card.get("languages") if isinstance(card, dict) else None
    return [str(lang) for lang in languages] if isinstance(languages, list) and languages else None


def unreadable_reason(model_path: str) -> str | None:
    """Why this code cannot score with the model at ``model_path`` (its model format or order-feature version is
    one it does not compute: a model fitted on other features), or None. Reads only the sidecar's small format and
    meta arrays; remote models (``gs://`` ...) are checked when a worker loads them."""
    order_path, _ = sidecar_paths(model_path)
    if "://" in model_path or not os.path.exists(order_path):
        return None
    try:
        with np.load(order_path, allow_pickle=False) as arrays:
            version = int(arrays["format_version"][0])
            meta = json.loads(bytes(arrays["order_meta"]).decode("utf-8"))
    except (OSError, ValueError, KeyError) as err:
        return f"{order_path}: not a quality model's order arrays ({err})"
    if version not in READABLE_FORMAT_VERSIONS:
        return f"{order_path}: model format {version}, this code reads {', '.join(map(str, READABLE_FORMAT_VERSIONS))}"
    tokenizer = meta.get("tokenizer", "whitespace")
    features = meta.get("feature_version", 1)
    readable = OrderFeatures.READABLE_FEATURE_VERSIONS.get(tokenizer, ())
    if features not in readable:
        return (f"{order_path}: fitted on order features version {features} ({tokenizer}); this code computes "
                f"{', '.join(map(str, readable)) or 'no such tokenizer'}: retrain it with `corpusmill quality train`")
    return None


class QualityModel:
    """Scores texts: P(high quality) from fastText alone, from the order features alone, and stacked."""

    def __init__(self, fasttext_model, order: OrderFeatures, stacker: "SecondStage | ChainGuardedStage | None",
                 positive_label: str):
        self.fasttext = fasttext_model
        self.order = order
        self.stacker = stacker
        self.positive = "__label__" + positive_label

    @property
    def tokenizer(self) -> str:
        """How this model reads text (``whitespace`` or ``cjk``), fixed when it was trained."""
        return self.order.tokenizer

    def fasttext_hq(self, token_lists: Sequence[list[str]]) -> np.ndarray:
        """fastText P(hq) of token lists (``tokenize_head``; whitespace models)."""
        return self.fasttext_hq_lines([fasttext_line(toks) for toks in token_lists])

    def fasttext_hq_lines(self, lines: Sequence[str]) -> np.ndarray:
        """fastText P(hq) of prepared input lines (``fasttext_inputs``)."""
        labels, probs = self.fasttext.predict(list(lines), k=1)
        top = np.array([p[0] if len(p) else 0.5 for p in probs], dtype=np.float64)
        is_positive = np.array([bool(lab) and lab[0] == self.positive for lab in labels])
        return np.clip(np.where(is_positive, top, 1.0 - top), 0.0, 1.0)

    def stack_inputs(self, texts: Sequence[str], max_chars: int = DEFAULT_MAX_CHARS) -> tuple[np.ndarray, np.ndarray]:
        """(fastText P(hq), order feature matrix) for a batch; each text is tokenised once for both."""
        lines, token_lists = fasttext_inputs(texts, max_chars, self.tokenizer)
        return self.fasttext_hq_lines(lines), self.order.transform(texts, token_lists)

    def score(self, texts: Sequence[str], max_chars: int = DEFAULT_MAX_CHARS) -> dict[str, np.ndarray]:
        """Arrays ``score`` (P(hq) of the cascade), ``logit`` (its log-odds, unbounded: confident scores all
        round to 1.0, their logits still rank them), ``fasttext`` (fastText P(hq)) and ``gibberish`` (P(lq)
        from word order and cohesion, among what fastText passes; NaN where fastText alone decided), each of
        length len(texts). The order features are computed only for documents fastText passes (p >= gate): the
        rest are low quality whatever their word order, so the cascade spends nothing more on them."""
        if not texts:
            empty = np.zeros(0)
            return {"score": empty, "logit": empty, "fasttext": empty, "gibberish": empty}
        lines, token_lists = fasttext_inputs(texts, max_chars, self.tokenizer)
        p_fasttext = self.fasttext_hq_lines(lines)
        second = np.flatnonzero(p_fasttext >= self.stacker.gate)
        score = p_fasttext.copy()
        log_odds = logit(p_fasttext, eps=1e-7)
        gibberish = np.full(len(texts), np.nan)
        if len(second):
            order_x = self.order.transform([texts[i] for i in second],
                                           None if token_lists is None else [token_lists[i] for i in second])
            log_odds[second] = self.stacker.predict_logit(p_fasttext[second], order_x)
            score[second] = sigmoid(log_odds[second])
            gibberish[second] = 1.0 - score[second]
        return {"score": score, "logit": log_odds, "fasttext": p_fasttext, "gibberish": gibberish}

    def quantize(self, cutoff: int = 0) -> None:
        """Quantize the fastText part in place (product quantization, keeping the ``cutoff`` rows of largest
        norm when > 0): a much smaller .ftz."""
        self.fasttext.quantize(qnorm=True, retrain=False, cutoff=cutoff)

    @property
    def format_version(self) -> int:
        """The oldest format that describes this model: 1 unless its order features need a newer one (feature
        version 1 models stay readable by code that knows only format 1)."""
        return MODEL_FORMAT_VERSION if self.order.feature_version != 1 else 1

    def save(self, model_path: str, card: dict[str, Any] | None = None) -> None:
        """Write the fastText model to ``model_path`` and the sidecars next to it (each via a temp file)."""
        order_path, card_path = sidecar_paths(model_path)
        with atomic_path(model_path) as tmp:
            self.fasttext.save_model(tmp)
        arrays = self.order.to_arrays()
        arrays.update(self.stacker.to_arrays("stack_"))
        arrays["positive_label"] = np.frombuffer(self.positive.encode("utf-8"), dtype=np.uint8)
        arrays["format_version"] = np.array([self.format_version])
        with atomic_output(order_path) as fh:
            np.savez_compressed(fh, **arrays)
        if card is not None:
            write_json(card_path, card, sort_keys=True)

    @classmethod
    def load(cls, model_path: str) -> "QualityModel":
        order_path, _ = sidecar_paths(model_path)
        for path in (model_path, order_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"quality model file missing: {path} (train one with `corpusmill quality "
                                        f"train`, which writes {model_path} and {order_path})")
        with np.load(order_path, allow_pickle=False) as arrays:
            version = int(arrays["format_version"][0])
            if version not in READABLE_FORMAT_VERSIONS:
                raise ValueError(f"{order_path}: model format {version}, this code reads "
                                 f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
            order = OrderFeatures.from_arrays(arrays)
            stacker = ChainGuardedStage.from_arrays(arrays, "stack_")
            positive = bytes(arrays["positive_label"]).decode("utf-8")
        return cls(_load_fasttext(model_path), order, stacker, positive[len("__label__"):])


# ---------------------------------------------------------------------------------------------- training


def stable_fraction(key: str, seed: int) -> float:
    """A uniform number in [0, 1) from a string: the same split on every machine and Python run."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def binary_metrics(y_true: np.ndarray, score: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Accuracy, precision, recall, F1 of the positive class at ``threshold``, and ROC AUC (rank based)."""
    y_true = y_true.astype(bool)
    pred = score >= threshold
    tp = int((pred & y_true).sum())
    fp = int((pred & ~y_true).sum())
    fn = int((~pred & y_true).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "n": int(len(y_true)),
        "accuracy": float((pred == y_true).mean()) if len(y_true) else float("nan"),
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "auc": roc_auc(y_true, score),
    }


def roc_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    pos, neg = int(y_true.sum()), int((~y_true).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    sorted_scores = score[order]
    # average ranks over ties, so a constant score gets AUC 0.5
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[y_true].sum() - pos * (pos + 1) / 2) / (pos * neg))


# fastText training runs in a fresh interpreter: in a long-lived process this build of fastText sometimes
# stops with a spurious "Encountered NaN" or trains a slightly different model from the same input and seed
# (its result depends on the state of the process's heap); in a fresh process it is reproducible.
_FASTTEXT_TRAINER = """
import json, sys
import fasttext
params = json.loads(sys.argv[1])
try:
    model = fasttext.train_supervised(**params)
except RuntimeError as err:
    print(err, file=sys.stderr)
    sys.exit(3 if "NaN" in str(err) else 1)
model.save_model(sys.argv[2])
"""


def _train_fasttext(texts: Sequence[str], labels: Sequence[str], cfg: QualityTrainConfig, workdir: str):
    import subprocess
    import sys

    path = os.path.join(workdir, "fasttext_train.txt")
    with open(path, "w", encoding="utf-8") as fh:
        lines, _ = fasttext_inputs(texts, DEFAULT_MAX_CHARS, cfg.tokenizer)
        for line, label in zip(lines, labels):
            fh.write(f"__label__{label} {line}\n")
    out = os.path.join(workdir, "fasttext_model.bin")
    params = {"input": path, "epoch": cfg.epoch, "lr": cfg.lr, "dim": cfg.dim, "wordNgrams": cfg.word_ngrams,
              "minCount": cfg.min_count, "bucket": cfg.bucket, "thread": cfg.threads, "seed": cfg.seed,
              "verbose": 0, "loss": "softmax"}
    for attempt in range(6):
        done = subprocess.run([sys.executable, "-c", _FASTTEXT_TRAINER, json.dumps(params), out],
                              capture_output=True, text=True)
        if done.returncode == 0:
            break
        if done.returncode != 3 or attempt == 5:
            raise RuntimeError(f"fastText training failed: {done.stderr.strip()[-500:]}")
        if attempt >= 2:  # diverging again and again: the learning rate is too high for this data
            params["lr"] /= 2
    model = _load_fasttext(out)
    os.remove(path)
    os.remove(out)
    return model


def _fit_order(texts: Sequence[str], cfg: QualityTrainConfig, groups: Sequence[str] | None = None) -> OrderFeatures:
    return OrderFeatures.fit(texts, num_frequent=cfg.frequent_words, order=cfg.order, bits=cfg.hash_bits,
                             max_tokens=cfg.max_tokens, tokenizer=cfg.tokenizer, groups=groups,
                             min_docs=cfg.ngram_min_docs)


def _fit_components(texts, labels, groups, cfg, workdir):
    """fastText on all texts, the order model on the high-quality texts only."""
    fasttext_model = _train_fasttext(texts, labels, cfg, workdir)
    positive = [i for i, lab in enumerate(labels) if lab == cfg.positive_label]
    if not positive:
        raise ValueError(f"no training record has {cfg.label_field}={cfg.positive_label!r}")
    return fasttext_model, _fit_order([texts[i] for i in positive], cfg, [groups[i] for i in positive])


def open_text(path: str):
    """Open a local or Beam-FileSystems text file, decompressing .gz/.zst/.bz2 by suffix."""
    import io

    from apache_beam.io.filesystems import FileSystems

    raw = FileSystems.open(path, compression_type="uncompressed")
    if path.endswith(".gz"):
        import gzip

        raw = gzip.GzipFile(fileobj=raw)
    elif path.endswith(".bz2"):
        import bz2

        raw = bz2.BZ2File(raw)
    elif path.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict")


def load_labeled(path: str, cfg: QualityTrainConfig, max_problems: int = 20) -> tuple[list[dict], list[str]]:
    """Records usable for training, and a description (line number + reason) of each skipped line."""
    records: list[dict] = []
    problems: list[str] = []
    with open_text(path) as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append(f"line {line_no}: not JSON ({err.msg})")
                continue
            if not isinstance(record, dict):
                problems.append(f"line {line_no}: not a JSON object")
            elif not isinstance(record.get(cfg.text_field), str) or not record[cfg.text_field].strip():
                problems.append(f"line {line_no}: field {cfg.text_field!r} missing, empty or not a string")
            elif record.get(cfg.label_field) in (None, ""):
                problems.append(f"line {line_no}: field {cfg.label_field!r} missing or empty")
            else:
                records.append(record)
    return records, problems


def split_records(records: Sequence[dict], cfg: QualityTrainConfig) -> tuple[list[int], list[int]]:
    """(training, held-out) record indices: whole groups go to one side, decided by a hash of the group."""
    u = _group_fractions(records, cfg)
    return [i for i, x in enumerate(u) if x >= cfg.heldout_fraction], [i for i, x in enumerate(u) if x < cfg.heldout_fraction]


def _group_fractions(records: Sequence[dict], cfg: QualityTrainConfig) -> np.ndarray:
    return np.array([stable_fraction(g, cfg.seed) for g in _group_keys(records, cfg)])


def _group_keys(records: Sequence[dict], cfg: QualityTrainConfig) -> list[str]:
    """The group of each record (``group_field``; a record without one is its own group)."""
    return [str(r[cfg.group_field]) if cfg.group_field and cfg.group_field in r else f"#record{i}"
            for i, r in enumerate(records)]


def train_quality_model(records: Sequence[dict], cfg: QualityTrainConfig, log=print) -> tuple[QualityModel, dict]:
    """Train on ``records`` (dicts with the configured text/label/group fields); return the model and its card."""
    started = time.time()
    texts = [r[cfg.text_field] for r in records]
    labels = [str(r[cfg.label_field]) for r in records]
    label_set = sorted(set(labels))
    if len(label_set) != 2 or cfg.positive_label not in label_set:
        raise ValueError(f"{cfg.label_field}: need exactly two labels including {cfg.positive_label!r}, "
                         f"found {label_set}")
    group_u = _group_fractions(records, cfg)
    groups = _group_keys(records, cfg)
    heldout = group_u < cfg.heldout_fraction
    train_idx = np.flatnonzero(~heldout)
    test_idx = np.flatnonzero(heldout)
    # folds over the remaining [heldout_fraction, 1) range of the same per-group number
    fold_of = np.minimum(((group_u - cfg.heldout_fraction) / (1 - cfg.heldout_fraction) * cfg.folds).astype(int),
                         cfg.folds - 1)
    y = np.array([lab == cfg.positive_label for lab in labels], dtype=np.float64)

    with tempfile.TemporaryDirectory(prefix="corpusmill-quality-") as workdir:
        oof_ft = np.zeros(len(records))
        oof_order: np.ndarray | None = None
        for fold in range(cfg.folds):
            fit_idx = train_idx[fold_of[train_idx] != fold]
            out_idx = train_idx[fold_of[train_idx] == fold]
            if len(out_idx) == 0:
                continue
            ft_model, order = _fit_components([texts[i] for i in fit_idx], [labels[i] for i in fit_idx],
                                              [groups[i] for i in fit_idx], cfg, workdir)
            part = QualityModel(ft_model, order, None, cfg.positive_label)
            p_ft, x = part.stack_inputs([texts[i] for i in out_idx])
            if oof_order is None:
                oof_order = np.zeros((len(records), x.shape[1]))
            oof_ft[out_idx] = p_ft
            oof_order[out_idx] = x
            log(f"quality train: fold {fold + 1}/{cfg.folds} fitted on {len(fit_idx)} records "
                f"({time.time() - started:.1f}s)")
        # The second stage learns what fastText misses: it is fitted only on the documents fastText passes.
        passed = train_idx[oof_ft[train_idx] >= cfg.gate]
        ft_model, order = _fit_components([texts[i] for i in train_idx], [labels[i] for i in train_idx],
                                          [groups[i] for i in train_idx], cfg, workdir)
        p_stack, x_stack, y_stack = oof_ft[passed], oof_order[passed], y[passed]
        weights = np.ones(len(passed))
        if cfg.in_sample_weight > 0:
            # The final n-gram model is trained on the high-quality texts, so they are scored again by it (in sample):
            # text the model was trained on turns up in real corpora, and its n-gram gains lie beyond every out-of-fold
            # document's; fastText's part stays out of fold. Only high-quality texts can look like this (the n-gram
            # model never sees the others), so these rows say what such a document is.
            seen = passed[y[passed] == 1]
            p_stack = np.concatenate([p_stack, oof_ft[seen]])
            x_stack = np.vstack([x_stack, order.transform([texts[i] for i in seen])])
            y_stack = np.concatenate([y_stack, y[seen]])
            weights = np.concatenate([weights, np.full(len(seen), cfg.in_sample_weight)])
        if cfg.chain_min > 0 and set(OrderFeatures.WORD_NGRAMS_V4) <= set(order.names):
            stacker = ChainGuardedStage.fit(p_stack, x_stack, y_stack, cfg.l2, cfg.gate, order.names, cfg.chain_min,
                                            weights)
        else:
            stacker = SecondStage.fit(p_stack, x_stack, y_stack, cfg.l2, cfg.gate, weights)
        log(f"quality train: second stage fitted on {len(passed)} documents fastText passes "
            f"({int((y[passed] == 0).sum())} of them low quality)")
    model = QualityModel(ft_model, order, stacker, cfg.positive_label)
    log(f"quality train: final model fitted on {len(train_idx)} records ({time.time() - started:.1f}s)")

    languages, language_counts = training_languages(
        [t for t, lab in zip(texts, labels) if lab == cfg.positive_label])
    log(f"quality train: high-quality text in {', '.join(languages)} (langid: "
        + ", ".join(f"{lang} {n}" for lang, n in list(language_counts.items())[:5]) + ")")
    card = {
        "format_version": model.format_version,
        "languages": languages,
        "kind": "corpusmill quality model: fastText + class n-gram order features + logistic stacker",
        "positive_label": cfg.positive_label,
        "params": cfg.model_dump(),
        "data": {
            "records": len(records),
            "train_records": int(len(train_idx)),
            "heldout_records": int(len(test_idx)),
            "labels": {lab: labels.count(lab) for lab in label_set},
            "languages": language_counts,  # of the high-quality records, by the langid step's identifier
            "split": f"by {cfg.group_field or 'record'}: heldout = groups with hash(seed, group) < "
                     f"{cfg.heldout_fraction}; no group in both",
        },
        "stack_features": ["fasttext_logit"] + order.names,
        "train_seconds": round(time.time() - started, 1),
    }
    if len(test_idx):
        test_texts = [texts[i] for i in test_idx]
        scores = model.score(test_texts)
        y_test = y[test_idx].astype(bool)
        card["metrics"] = {
            "stacked": binary_metrics(y_test, scores["score"]),
            "fasttext_only": binary_metrics(y_test, scores["fasttext"]),
        }
        if cfg.breakdown_field:
            breakdown: dict[str, dict] = {}
            values = [str(records[i].get(cfg.breakdown_field)) for i in test_idx]
            for value in sorted(set(values)):
                mask = np.array([v == value for v in values])
                correct = (scores["score"][mask] >= 0.5) == y_test[mask]
                correct_ft = (scores["fasttext"][mask] >= 0.5) == y_test[mask]
                breakdown[value] = {"n": int(mask.sum()), "accuracy": float(correct.mean()),
                                    "fasttext_only_accuracy": float(correct_ft.mean())}
            card["metrics"]["by_" + cfg.breakdown_field] = breakdown
    return model, card

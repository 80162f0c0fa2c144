"""The document record, the annotation namespace, and the one step abstraction every cleaning step follows.

Document record (Contract 1 in DESIGN.md), a plain dict so that Beam can move it cheaply:
    id          int, stable across runs (source URI + position), unique within a corpus
    text        str
    source      str, URI of the input file
    meta        dict, the input's other fields, passed through untouched
    annotations dict of per-step results, each step writing only under its own name:
                ``annotations["<step>"] = {...}`` (``annotate`` / ``step_annotations``)
A removed document additionally carries ``removed_by`` (the step name) and ``reason``.

The step contract (datatrove's ``BaseFilter`` is the pattern): a step only annotates and decides, returning per
document a removal reason or ``None`` to keep it; the shared routing tail (``transforms.beam_step.Route``)
counts kept/removed, reports progress and routes, and the step's work is timed into its ``busy_ms`` counter.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

Doc = dict[str, Any]


class StepConfigError(ValueError):
    """A step's configuration cannot work (a missing model file, an impossible threshold). The message is one
    line that starts with the field, e.g. ``quality.model: /x/y.bin does not exist``; ``pipelines`` raises it
    as its ``ConfigError`` when the graph is built, before any worker starts."""


class DocStep(Protocol):
    """A per-document cleaning step: annotate first, then decide from the annotations.

    ``apply`` may rewrite ``doc["text"]`` (normalization, PII masking) and must record every measurement in
    ``annotations[name]``; it returns, for each document, the removal reason or ``None`` to keep it.
    Keeping scores apart from decisions means a threshold can be retuned from stored annotations.
    ``batch_size`` (optional, default 256) is how many documents one ``apply`` call gets.
    """

    name: str

    def setup(self) -> None:
        """Load heavy resources (models, engines). Called once per worker, never per document."""

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        ...


class ConfiguredStep:
    """Base for steps whose only state is their config: nothing heavy to load in ``setup()``."""

    name: str

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self) -> None:
        pass


def annotate(doc: Doc, step: str, **values: Any) -> dict:
    """Record ``values`` under ``annotations[step]`` (merged into what the step wrote before); returns that dict."""
    mine = doc.setdefault("annotations", {}).setdefault(step, {})
    mine.update(values)
    return mine


def step_annotations(annotations: dict | None, step: str) -> dict:
    """What ``step`` recorded in a document's ``annotations``; ``{}`` when it recorded nothing. Every reader
    (the next steps, the report, the analysis commands) finds a step's results this one way."""
    value = (annotations or {}).get(step)
    return value if isinstance(value, dict) else {}


def annotation(doc: Doc, dotted: str, default: Any = None) -> Any:
    """One recorded value by ``"<step>.<key>"``, e.g. ``annotation(doc, "normalize.script")``."""
    step, _, key = dotted.partition(".")
    return step_annotations(doc.get("annotations"), step).get(key, default)


def mark_removed(doc: Doc, step: str, reason: str) -> Doc:
    doc["removed_by"] = step
    doc["reason"] = reason
    return doc

"""The extract step: the main text of HTML records replaces their HTML (first step, before normalize).

Which records are HTML:
  * records a reader marks: ``meta["content_type"]`` is ``text/html`` (or ``application/xhtml+xml``, with or
    without parameters); their ``text`` holds the decoded page (the readers' convention, issue 45);
  * with ``extract.html_field`` set, records carrying that field: when it is the input's text field
    (``input.text_field``), the text is the HTML; otherwise ``meta[html_field]`` holds it, and is dropped from
    ``meta`` once its text is taken.
Every other record passes untouched (no annotation), so a run over plain text or JSONL is what it was.

An extracted record gets ``annotations["extract"] = {extractor, title, html_chars, chars, root}``; one without a
usable text is removed with the core's reason: ``no_main_text``, ``too_short_after_extraction``,
``html_too_large``, or ``html_not_a_string`` (an ``html_field`` holding something else than a string).
"""
from __future__ import annotations

from typing import Sequence

from transforms.base import ConfiguredStep, Doc, StepConfigError, annotate
from transforms.extract.config import ExtractConfig

HTML_TYPES = ("text/html", "application/xhtml+xml")
NOT_A_STRING = "html_not_a_string"
UNAVAILABLE = "extractor_unavailable"
_LIBRARY = {"corpusmill": "resiliparse", "resiliparse": "resiliparse", "trafilatura": "trafilatura"}


def is_html_type(content_type) -> bool:
    """A reader's ``meta["content_type"]`` names HTML (parameters such as ``; charset=utf-8`` ignored)."""
    return isinstance(content_type, str) and content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


def library_error(cfg: ExtractConfig) -> str | None:
    """Why the chosen extractor cannot run here (its library, from the 'web' extra, does not import), or None."""
    import importlib

    try:
        importlib.import_module(_LIBRARY[cfg.extractor])
    except ImportError as err:
        return f"{_LIBRARY[cfg.extractor]} cannot be imported ({err}); install corpusmill's 'web' extra"
    return None


def check(cfg: ExtractConfig) -> None:
    """Build-time checks. An extractor whose library is missing is an error when the run surely has HTML to
    extract (``html_field`` set) or names it explicitly (trafilatura); otherwise (the default step, on by
    default in every run) a run without the 'web' extra works, and an HTML record a reader marks is removed
    with reason ``extractor_unavailable``."""
    if not cfg.enabled:
        return
    if cfg.html_field is not None and not cfg.html_field.strip():
        raise StepConfigError("extract.html_field: empty; name the record field holding the HTML, or null")
    if cfg.html_field is not None or cfg.extractor == "trafilatura":
        problem = library_error(cfg)
        if problem:
            raise StepConfigError(f"extract.extractor: {cfg.extractor}: {problem}")


class ExtractStep(ConfiguredStep):
    """Replaces each HTML record's text by its main text (``transforms.extract.core.extract``)."""

    name = "extract"
    batch_size = 64  # pages are large: a smaller batch holds less in memory

    def __init__(self, cfg: ExtractConfig, text_field: str = "text"):
        super().__init__(cfg)
        self.text_field = text_field
        self._extract = None
        self._unavailable: str | None = None

    def setup(self) -> None:
        self._unavailable = library_error(self.cfg)
        if self._unavailable is None:
            from transforms.extract.core import extract  # deferred: Resiliparse (the optional `web` extra)

            self._extract = extract

    def html_of(self, doc: Doc) -> tuple[bool, object]:
        """(is this record HTML, its HTML) — the HTML may be a non-string when the field holds one."""
        meta = doc.get("meta") or {}
        field = self.cfg.html_field
        if field is not None:
            if field == self.text_field:
                return True, doc.get("text")
            if field in meta:
                return True, meta[field]
        if is_html_type(meta.get("content_type")):
            return True, doc.get("text")
        return False, None

    def apply(self, docs: Sequence[Doc]) -> list[str | None]:
        reasons: list[str | None] = []
        for doc in docs:
            is_html, html = self.html_of(doc)
            if not is_html:
                reasons.append(None)
                continue
            field = self.cfg.html_field
            if field is not None and field != self.text_field and field in (doc.get("meta") or {}):
                del doc["meta"][field]  # its text becomes the record's text; the page is not carried on
            if not isinstance(html, str):
                annotate(doc, self.name, extractor=self.cfg.extractor, html_chars=0, chars=0)
                doc["text"] = ""
                reasons.append(NOT_A_STRING)
                continue
            if self._extract is None and self._unavailable is None:
                self.setup()  # (a step used without Beam's setup call: the command, tests)
            if self._extract is None:
                annotate(doc, self.name, extractor=self.cfg.extractor, error=self._unavailable)
                reasons.append(UNAVAILABLE)
                continue
            result = self._extract(html, self.cfg)
            doc["text"] = result.text
            annotate(doc, self.name, extractor=self.cfg.extractor, title=result.title, html_chars=len(html),
                     chars=len(result.text), root=result.root)
            reasons.append(result.reason)
        return reasons

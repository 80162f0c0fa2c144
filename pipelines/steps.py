"""The cleaning steps in the order they run: cheap ones first, so the expensive ones see fewer documents.

Every step is declared the same way (``Step``): when it is enabled, what must hold before a worker starts
(``check``, run when the graph is built; a problem is a ``ConfigError`` naming the field, exit code 2), and how
to build it. Every built step is "annotate and decide" followed by the shared routing tail
(``transforms.beam_step.Route``), so it maps documents to ``.kept`` / ``.removed`` and counts ``kept``,
``removed`` and ``busy_ms`` under its name, and reports progress. See "How to add a step" in docs/DESIGN.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import apache_beam as beam

from beamio.read import detect_format
from pipelines.config import ConfigError, RunConfig
from runio.layout import RunPaths
from transforms.base import StepConfigError
from runio.ledger import forgotten_in, read_signatures
from transforms import filters, langid, url_filter
from transforms.beam_step import ApplyStep
from transforms.exact_dedup import ExactDedup
from transforms.extract import step as extract_step
from transforms.extract.step import ExtractStep
from transforms.filters import HeuristicFilterStep
from transforms.langid import LangIdStep
from transforms.near_dedup.beam import NearDedup
from transforms.near_dedup.index import check_index_params
from transforms.normalize import NormalizeStep
from transforms.pii import PiiStep
from transforms.pii import step as pii_step
from transforms.quality import QualityFilter, ensure_models
from transforms.quality import step as quality_step
from transforms.takedown import TakedownIndex, TakedownStep, check_signatures
from transforms.url_filter import UrlFilterStep


@dataclass(frozen=True)
class StepContext:
    """What a step may need beyond its config section: the run's layout, earlier runs, the input size."""

    paths: RunPaths
    against: tuple[RunPaths, ...] = ()
    input_bytes: int | None = None  # lets a step choose its in-memory or distributed path at build time
    workers: int | None = None  # how many workers share the shuffles, when known (pipelines.runners.shuffle_workers)
    progress: bool = True  # workers count documents done into paths.progress, for the terminal progress line

    @property
    def progress_dir(self) -> str | None:
        return str(self.paths.progress) if self.progress else None


def _no_check(cfg: RunConfig, ctx: StepContext) -> None:
    pass


def _named_ledger(given: str) -> Path:
    return RunPaths(given).takedown_ledger if Path(given).is_dir() else Path(given)


def takedown_ledgers(cfg: RunConfig, ctx: StepContext) -> list[Path]:
    """The ledgers the takedown step reads: ``takedown.ledgers`` (a file, or a run directory's), this run
    directory's own and those of the runs it is cleaned against (the last two when they exist)."""
    named = [_named_ledger(p) for p in cfg.takedown.ledgers]
    found = [p for p in (ctx.paths.takedown_ledger, *(run.takedown_ledger for run in ctx.against)) if p.is_file()]
    return list(dict.fromkeys(named + found))


def _takedown_active(cfg: RunConfig, ctx: StepContext) -> bool:
    """The step runs when there is a ledger to read: a run that never forgot anything has no step more."""
    return bool(takedown_ledgers(cfg, ctx))


def _check_takedown(cfg: RunConfig, ctx: StepContext) -> None:
    for given in cfg.takedown.ledgers:
        if not _named_ledger(given).is_file():
            raise StepConfigError(f"takedown.ledgers: {given} does not exist (a ledger.jsonl written by `corpusmill "
                                  f"forget`, or a run directory holding takedown/ledger.jsonl)")
    forgotten_in(takedown_ledgers(cfg, ctx))  # a damaged ledger is refused here, before any worker starts
    if cfg.takedown.near_duplicates:
        for ledger in takedown_ledgers(cfg, ctx):
            check_signatures(read_signatures(ledger), cfg.near_dedup, str(ledger))


def _takedown(cfg: RunConfig, ctx: StepContext):
    # the ledgers are read here, when the graph is built: workers get what was forgotten, not the files
    ledgers = takedown_ledgers(cfg, ctx)
    signatures = [s for ledger in ledgers for s in read_signatures(ledger)] if cfg.takedown.near_duplicates else []
    index = TakedownIndex(forgotten_in(ledgers), cfg.input.id_field, signatures,
                          cfg.near_dedup if cfg.takedown.near_duplicates else None)
    return ApplyStep(TakedownStep(index), progress_dir=ctx.progress_dir)


def _check_url_filter(cfg: RunConfig, ctx: StepContext) -> None:
    url_filter.check(cfg.url_filter)


def _url_filter(cfg: RunConfig, ctx: StepContext):
    # the lists are read and compiled here, when the graph is built: workers get the rules, not the files
    return ApplyStep(UrlFilterStep(cfg.url_filter, url_filter.build_filter(cfg.url_filter)),
                     progress_dir=ctx.progress_dir)


def _check_extract(cfg: RunConfig, ctx: StepContext) -> None:
    extract_step.check(cfg.extract)


PLAIN_FORMATS = ("jsonl", "parquet", "text")


def _extract_applies(cfg: RunConfig) -> bool:
    """The extract step runs when it can have work: ``extract.html_field`` names the HTML, or an input is not
    JSONL, Parquet or text by its name or ``input.format`` (a folder, a WARC or HTML file: what the readers
    mark ``text/html``). A run over JSONL/Parquet/text files only has no step more: its output, stats and
    report are what they were."""
    if not cfg.extract.enabled:
        return False
    if cfg.extract.html_field is not None:
        return True
    return any(detect_format(path, cfg.input.format) not in PLAIN_FORMATS for path in cfg.input.paths)


def _extract(cfg: RunConfig, ctx: StepContext):
    return ApplyStep(ExtractStep(cfg.extract, text_field=cfg.input.text_field), progress_dir=ctx.progress_dir)


def _normalize(cfg: RunConfig, ctx: StepContext):
    return ApplyStep(NormalizeStep(cfg.normalize), progress_dir=ctx.progress_dir)


def _check_langid(cfg: RunConfig, ctx: StepContext) -> None:
    langid.check(cfg.langid)


def _langid(cfg: RunConfig, ctx: StepContext):
    return ApplyStep(LangIdStep(cfg.langid), progress_dir=ctx.progress_dir)


def _check_filters(cfg: RunConfig, ctx: StepContext) -> None:
    filters.check(cfg.filters)


def _filters(cfg: RunConfig, ctx: StepContext):
    return ApplyStep(HeuristicFilterStep(cfg.filters), progress_dir=ctx.progress_dir)


def _exact_dedup(cfg: RunConfig, ctx: StepContext):
    return ExactDedup(cfg.exact_dedup, progress_dir=ctx.progress_dir)


def _check_near_dedup(cfg: RunConfig, ctx: StepContext) -> None:
    if cfg.near_dedup.keep == "highest_quality" and not _runs_before(cfg, "quality", "near_dedup"):
        raise StepConfigError(f"near_dedup.keep: highest_quality ranks by {cfg.near_dedup.quality_field}, but the "
                              f"quality step runs after near_dedup, so no document has a score yet; use smallest_id")
    for run in ctx.against:
        try:
            check_index_params(str(run.dedup), cfg.near_dedup)
        except (FileNotFoundError, ValueError) as err:  # an --against run without a usable index
            raise StepConfigError(f"near_dedup: {err}") from None


def _near_dedup(cfg: RunConfig, ctx: StepContext):
    return NearDedup(cfg.near_dedup, index_out_dir=str(ctx.paths.dedup),
                     against_dirs=[str(run.dedup) for run in ctx.against], input_bytes=ctx.input_bytes,
                     progress_dir=ctx.progress_dir, workers=ctx.workers)


def _check_quality(cfg: RunConfig, ctx: StepContext) -> None:
    quality_step.check(cfg.quality)


def _quality(cfg: RunConfig, ctx: StepContext):
    models = ensure_models(ctx.paths.cache_for("quality"), cfg.quality)  # one per language, trained once
    return QualityFilter(cfg.quality, models, progress_dir=ctx.progress_dir)


def _check_pii(cfg: RunConfig, ctx: StepContext) -> None:
    pii_step.check(cfg.pii)


def _pii(cfg: RunConfig, ctx: StepContext):
    return ApplyStep(PiiStep(cfg.pii), progress_dir=ctx.progress_dir)


@dataclass(frozen=True)
class Step:
    """One cleaning step: its name (its annotation namespace and counter namespace), when it runs, what it
    checks when the graph is built, and how it is built."""

    name: str
    enabled: Callable[[RunConfig], bool]
    build: Callable[[RunConfig, StepContext], beam.PTransform]
    check: Callable[[RunConfig, StepContext], None] = _no_check
    # when whether it runs depends on the run directory too (its own files, the --against runs): then this decides
    enabled_in: Callable[[RunConfig, StepContext], bool] | None = None

    def is_enabled(self, cfg: RunConfig, ctx: StepContext | None = None) -> bool:
        if self.enabled_in is not None:
            return self.enabled_in(cfg, ctx if ctx is not None else StepContext(RunPaths.of(cfg)))
        return self.enabled(cfg)


STEPS: list[Step] = [
    # first of all: a forgotten document is dropped before any text work reads it (and its ids and hashes are
    # those of the input as read)
    Step("takedown", lambda cfg: _takedown_active(cfg, StepContext(RunPaths.of(cfg))), _takedown, _check_takedown,
         enabled_in=_takedown_active),
    # right after read, before any text work: a blocked page is never extracted, and every document read has its
    # domain counted
    Step("url_filter", lambda cfg: cfg.url_filter.active(), _url_filter, _check_url_filter),
    Step("extract", _extract_applies, _extract, _check_extract),
    Step("normalize", lambda cfg: True, _normalize),
    Step("langid", lambda cfg: cfg.langid.enabled, _langid, _check_langid),
    Step("filters", lambda cfg: cfg.filters.enabled, _filters, _check_filters),
    Step("exact_dedup", lambda cfg: cfg.exact_dedup.enabled, _exact_dedup),
    Step("near_dedup", lambda cfg: cfg.near_dedup.enabled, _near_dedup, _check_near_dedup),
    Step("quality", lambda cfg: cfg.quality.enabled, _quality, _check_quality),
    Step("pii", lambda cfg: cfg.pii.enabled, _pii, _check_pii),
]


def _runs_before(cfg: RunConfig, step: str, later: str) -> bool:
    """Whether ``step`` is enabled and runs before ``later``."""
    order = [s.name for s in STEPS if s.enabled(cfg)]
    return step in order and later in order and order.index(step) < order.index(later)


def enabled_steps(cfg: RunConfig, ctx: StepContext | None = None) -> list[str]:
    """The steps that run, in order (``ctx``: the run directory and the --against runs; default the config's run
    directory alone)."""
    return [step.name for step in STEPS if step.is_enabled(cfg, ctx)]


def check_steps(cfg: RunConfig, ctx: StepContext) -> None:
    """Every enabled step's build-time checks; the first problem is a one-line ``ConfigError`` naming the field."""
    for step in STEPS:
        if step.is_enabled(cfg, ctx):
            try:
                step.check(cfg, ctx)
            except StepConfigError as err:
                raise ConfigError(str(err)) from None


class CleanDocuments(beam.PTransform):
    """Run every enabled step in order; return the survivors and every removed document.

    The steps' checks run first, while the graph is built, so a configuration that cannot work fails before
    any worker starts."""

    def __init__(self, cfg: RunConfig, ctx: StepContext):
        super().__init__()
        self.cfg, self.ctx = cfg, ctx

    def expand(self, docs):
        check_steps(self.cfg, self.ctx)
        removed = []
        for step in STEPS:
            if not step.is_enabled(self.cfg, self.ctx):
                continue
            out = docs | step.name >> step.build(self.cfg, self.ctx)
            docs = out["kept"]
            removed.append(out["removed"])
        all_removed = removed | "AllRemoved" >> beam.Flatten() if removed else None
        return {"kept": docs, "removed": all_removed}

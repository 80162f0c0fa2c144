"""The cleaning steps in the order they run: cheap ones first, so the expensive ones see fewer documents.

Each entry builds a PTransform from the run config that maps documents to {"kept", "removed"}.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import apache_beam as beam

from pipelines.config import RunConfig
from transforms.beam_step import ApplyStep


@dataclass(frozen=True)
class StepContext:
    """What a step may need beyond its config section: where the run keeps its indexes and models."""

    run_dir: str
    against: tuple[str, ...] = ()
    input_bytes: int | None = None  # lets a step choose its in-memory or distributed path at build time
    progress_dir: str | None = None  # where workers count documents done, for the terminal progress line


class _PerDocument(beam.PTransform):
    def __init__(self, step, ctx: StepContext):
        super().__init__()
        self.step, self.ctx = step, ctx

    def expand(self, docs):
        outputs = docs | ApplyStep(self.step, progress_dir=self.ctx.progress_dir)
        return {"kept": outputs.kept, "removed": outputs.removed}


def _normalize(cfg: RunConfig, ctx: StepContext):
    from transforms.normalize import NormalizeStep
    return _PerDocument(NormalizeStep(cfg.normalize), ctx)


def _filters(cfg: RunConfig, ctx: StepContext):
    from transforms.filters import HeuristicFilterStep
    return _PerDocument(HeuristicFilterStep(cfg.filters), ctx)


def _exact_dedup(cfg: RunConfig, ctx: StepContext):
    from transforms.exact_dedup import ExactDedup
    return ExactDedup(cfg.exact_dedup)


def _near_dedup(cfg: RunConfig, ctx: StepContext):
    from pipelines.config import ConfigError
    from transforms.near_dedup import NearDedup

    try:
        return NearDedup(cfg.near_dedup, index_out_dir=f"{ctx.run_dir}/dedup",
                         against_dirs=[f"{run}/dedup" for run in ctx.against], input_bytes=ctx.input_bytes)
    except (FileNotFoundError, ValueError) as err:  # an --against run without a usable index
        raise ConfigError(f"near_dedup: {err}") from None


def _quality(cfg: RunConfig, ctx: StepContext):
    from pathlib import Path

    from transforms.quality import QualityFilter, ensure_default_model

    cache = Path(cfg.output.runs_dir) / ".cache" / "quality"
    cache.mkdir(parents=True, exist_ok=True)
    return QualityFilter(cfg.quality, ensure_default_model(cache, cfg.quality))


def _pii(cfg: RunConfig, ctx: StepContext):
    from transforms.pii import PiiStep
    return _PerDocument(PiiStep(cfg.pii), ctx)


STEPS: list[tuple[str, Callable[[RunConfig], bool], Callable[[RunConfig, StepContext], beam.PTransform]]] = [
    ("normalize", lambda cfg: True, _normalize),
    ("filters", lambda cfg: cfg.filters.enabled, _filters),
    ("exact_dedup", lambda cfg: cfg.exact_dedup.enabled, _exact_dedup),
    ("near_dedup", lambda cfg: cfg.near_dedup.enabled, _near_dedup),
    ("quality", lambda cfg: cfg.quality.enabled, _quality),
    ("pii", lambda cfg: cfg.pii.enabled, _pii),
]


def enabled_steps(cfg: RunConfig) -> list[str]:
    return [name for name, enabled, _ in STEPS if enabled(cfg)]


class CleanDocuments(beam.PTransform):
    """Run every enabled step in order; return the survivors and every removed document."""

    def __init__(self, cfg: RunConfig, ctx: StepContext):
        super().__init__()
        self.cfg, self.ctx = cfg, ctx

    def expand(self, docs):
        removed = []
        for name, enabled, build in STEPS:
            if not enabled(self.cfg):
                continue
            out = docs | name >> build(self.cfg, self.ctx)
            docs = out["kept"]
            removed.append(out["removed"])
        all_removed = removed | "AllRemoved" >> beam.Flatten() if removed else None
        return {"kept": docs, "removed": all_removed}

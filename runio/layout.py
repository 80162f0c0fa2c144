"""The run directory's layout (Contract 2 in DESIGN.md): the one place that spells its path components.

``RunPaths`` is built once from the config (``RunPaths.of(cfg)``) or from a run directory given on the command
line (``RunPaths(run_dir)``), and passed explicitly to the pipelines, the tokenizer stage, the trainer, the
report and monitoring. Nothing else joins these names into a path; nobody guesses the run directory from a
sub-folder's parent.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CACHE_DIR = ".cache"  # under the runs directory: shared by every run there (e.g. the default quality model)
# A cache shared by every runs directory instead (as HF_HOME is for Hugging Face): the default models are then
# trained once per machine, not once per runs directory. The test suite points it at the checkout's `runs/.cache`.
CACHE_ENV = "CORPUSMILL_CACHE"


def shard_set_manifest(shard_dir: str | os.PathLike) -> Path:
    """A shard directory's own manifest (Contract 3), inside a run directory or not (written last: without it,
    the directory holds no shards)."""
    return Path(shard_dir) / "manifest.json"


@dataclass(frozen=True)
class RunPaths:
    """Every path of one run directory, ``runs/<name>/`` (local; a URI run directory is not supported)."""

    root: Path

    def __init__(self, root: str | os.PathLike):
        object.__setattr__(self, "root", Path(root))

    @classmethod
    def of(cls, cfg) -> "RunPaths":
        """The run directory of a ``RunConfig``: ``<output.runs_dir>/<name>``."""
        return cls(Path(cfg.output.runs_dir) / cfg.name)

    def __str__(self) -> str:
        return str(self.root)

    @property
    def name(self) -> str:
        return self.root.name

    # -- files at the top ---------------------------------------------------------------------------------
    @property
    def config_yaml(self) -> Path:
        return self.root / "config.yaml"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def stats(self) -> Path:
        return self.root / "stats.json"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def cost_json(self) -> Path:
        """Per-stage wall and CPU time, energy (with its source), money and CO₂ (``runio.cost``)."""
        return self.root / "cost.json"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def progress(self) -> Path:
        """Worker-side progress counters of the stage running now (removed when it ends)."""
        return self.root / ".progress"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def error_log(self) -> Path:
        return self.logs / "error.log"

    @property
    def cache(self) -> Path:
        """Shared by all runs of the same runs directory, or of every runs directory when ``CORPUSMILL_CACHE``
        names one (never part of one run's outputs)."""
        shared = os.environ.get(CACHE_ENV, "").strip()
        return Path(shared).expanduser().absolute() if shared else self.root.parent / CACHE_DIR

    def cache_for(self, component: str) -> Path:
        return self.cache / component

    # -- cleaning stage -----------------------------------------------------------------------------------
    @property
    def docs(self) -> Path:
        return self.root / "docs"

    @property
    def removed(self) -> Path:
        return self.root / "removed"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def dedup(self) -> Path:
        """The near-dedup index (sketches and band keys) that a later refresh dedups against."""
        return self.root / "dedup"

    # -- takedowns (`corpusmill forget`) -------------------------------------------------------------------
    @property
    def takedown(self) -> Path:
        """What `corpusmill forget` forgot (``runio.ledger``): never cleared by a stage, so it outlives re-runs."""
        return self.root / "takedown"

    @property
    def takedown_ledger(self) -> Path:
        """The append-only takedown ledger (``runio.ledger``), read by every later clean into this directory."""
        return self.takedown / "ledger.jsonl"

    @property
    def clean_work(self) -> Path:
        """The clean's units of work while it runs (``pipelines.clean_units``): each unit's outputs and its
        completion marker, so that a killed clean redoes only unfinished units; removed when the clean is done."""
        return self.root / "work" / "clean"

    # -- shard stage --------------------------------------------------------------------------------------
    @property
    def tokenizer_dir(self) -> Path:
        return self.root / "tokenizer"

    @property
    def tokenizer_json(self) -> Path:
        return self.tokenizer_dir / "tokenizer.json"

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    @property
    def shards_manifest(self) -> Path:
        """The shard set's own manifest (Contract 3); written last by the shard stage."""
        return shard_set_manifest(self.shards)

    # -- training -----------------------------------------------------------------------------------------
    @property
    def train(self) -> Path:
        return self.root / "train"

    @property
    def train_config(self) -> Path:
        return self.train / "train_config.json"

    @property
    def checkpoints(self) -> Path:
        return self.train / "checkpoints"

    @property
    def metrics_jsonl(self) -> Path:
        return self.train / "metrics.jsonl"

    def durable_checkpoints(self, base: str) -> str:
        """This run's checkpoints on a durable tier rooted at ``base`` (a directory or an fsspec URI)."""
        return f"{base.rstrip('/')}/{self.name}/checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.train / "tensorboard"

    @property
    def samples_jsonl(self) -> Path:
        """Greedy sample generations from fixed prompts, written at validation time."""
        return self.train / "samples.jsonl"

    @property
    def alerts_jsonl(self) -> Path:
        return self.train / "alerts.jsonl"

    @property
    def recovery_jsonl(self) -> Path:
        return self.train / "recovery.jsonl"

    @property
    def data_order_jsonl(self) -> Path:
        """One line per stretch of training that consumes consecutive samples (a start, a resume, a rollback)
        and one at the end: with Contract 4's order it maps every step to its samples (``lineage``)."""
        return self.train / "data_order.jsonl"

    def data_card(self, checkpoint: str | os.PathLike) -> Path:
        """What the model had seen up to a checkpoint (``lineage.card``), written beside its files."""
        return Path(checkpoint) / "data_card.json"

    def data_card_documents(self, checkpoint: str | os.PathLike) -> Path:
        """The card's per-document token counts (ids, tokens; numpy ``.npz``): what lets the card say which
        withdrawn documents the checkpoint saw after `corpusmill forget` rebuilt the shards it was trained on."""
        return Path(checkpoint) / "data_card_documents.npz"

    @property
    def resume(self) -> Path:
        """Written by ``corpusmill resume``: its mtime releases every pause that began before it."""
        return self.train / "RESUME"

    @property
    def paused(self) -> Path:
        """Present while training is paused by an alert; says why."""
        return self.train / "PAUSED"

    # -- experiments on this run ---------------------------------------------------------------------------
    @property
    def sweep(self) -> "SweepPaths":
        """``corpusmill sweep``'s study, its trials and the best overlay."""
        return SweepPaths(self)

    @property
    def ablation(self) -> "AblationPaths":
        """``corpusmill ablate``'s variants and results."""
        return AblationPaths(self)

    # -- stage outputs, for clearing and fingerprinting ---------------------------------------------------
    @property
    def cleaning_outputs(self) -> tuple[Path, ...]:
        return (self.docs, self.removed, self.quarantine, self.dedup, self.stats, self.manifest)

    @property
    def all_outputs(self) -> tuple[Path, ...]:
        return (self.docs, self.removed, self.quarantine, self.dedup, self.tokenizer_dir, self.shards, self.train,
                self.stats, self.manifest, self.report_html)


@dataclass(frozen=True)
class SweepPaths:
    """``<run>/sweep/``: the study's storage, the base config, the trials' run directories, the best overlay."""

    run: RunPaths

    @property
    def root(self) -> Path:
        return self.run.root / "sweep"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def journal(self) -> Path:
        return self.root / "study.journal"

    @property
    def sqlite(self) -> Path:
        return self.root / "study.db"

    @property
    def base_config(self) -> Path:
        """The resolved run config every trial starts from (JSON), read by the worker processes."""
        return self.root / "base_config.json"

    @property
    def best_yaml(self) -> Path:
        return self.root / "best.yaml"

    @property
    def best_set(self) -> Path:
        return self.root / "best.set"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def trial(self, number: int) -> RunPaths:
        """Trial ``number``'s own run directory, ``<run>/sweep/trials/NNNN/``."""
        return RunPaths(self.root / "trials" / f"{number:04d}")


class NamedVariant(Protocol):
    """An ablation variant as far as its paths go (``experiments.ablate.Variant``): its folder's name."""

    @property
    def dir_name(self) -> str: ...


@dataclass(frozen=True)
class AblationPaths:
    """``<run>/ablate/``: one run directory per variant, each with the ``eval_view/`` it trains in, and the
    results of all of them."""

    run: RunPaths

    @property
    def root(self) -> Path:
        return self.run.root / "ablate"

    def variant(self, variant: NamedVariant) -> RunPaths:
        return RunPaths(self.root / variant.dir_name)

    def view(self, variant: NamedVariant) -> RunPaths:
        """The run directory the variant trains in: its own shards' train split, the shared validation text."""
        return RunPaths(self.root / variant.dir_name / "eval_view")

    @property
    def results(self) -> Path:
        return self.root / "results.json"

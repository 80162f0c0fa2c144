"""Where a run's Optuna study is kept (``runio.layout.SweepPaths``: a journal file or an SQLite database) and how
it is opened. Apart from ``experiments.sweep`` so that the report can read a study without importing the
sweep's machinery (the run config, the stages and the trainer behind them).
"""
from __future__ import annotations

from pathlib import Path

from pipelines.sweep_config import SweepConfig
from runio.layout import RunPaths, SweepPaths


def storage_for(cfg: SweepConfig, paths: SweepPaths):
    if cfg.storage == "sqlite":
        from optuna.storages import RDBStorage

        return RDBStorage(f"sqlite:///{paths.sqlite.resolve()}", engine_kwargs={"connect_args": {"timeout": 60}})
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(paths.journal.resolve())))


def existing_storage(run_dir: Path):
    """The storage of a run directory's study (either kind), or None when it has none."""
    paths = RunPaths(run_dir).sweep
    if paths.journal.is_file():
        return storage_for(SweepConfig(storage="journal"), paths)
    if paths.sqlite.is_file():
        return storage_for(SweepConfig(storage="sqlite"), paths)
    return None

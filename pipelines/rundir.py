"""The run directory's bookkeeping that only the composing floor does: clearing an earlier run's outputs, removing
the temporaries of writers that were killed, counting rows and reading the manifest. How the cleaning outputs
are written (the row schemas, ``WriteSorted``) is ``beamio.write``; where things are is ``runio.layout.RunPaths``.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterable

import pyarrow.parquet as pq

from runio.files import read_json
from runio.layout import RunPaths


def clear_outputs(outputs: Iterable[Path]) -> None:
    """Remove outputs (files or folders, e.g. ``RunPaths.cleaning_outputs``) of an earlier, possibly
    interrupted run of the same config before re-running."""
    for target in outputs:
        target = Path(target)
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


# Temporary names of runio.files (``<name>.tmp-<pid>-<hex8>[<ext>]``) and of the default quality model
# (``.<model>.<pid>.tmp.bin`` and its sidecars); the pid says whose.
_TEMP_NAME = re.compile(r"\.tmp-(\d+)-[0-9a-f]{8}")
_MODEL_TEMP_NAME = re.compile(r"^\..+\.(\d+)\.tmp\.bin")
# Where the pipeline stages write (train/ belongs to the trainer, which cleans up its own partial checkpoints).
_SWEPT = ("docs", "removed", "quarantine", "dedup", "tokenizer", "shards", "logs", ".progress")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(run: RunPaths) -> list[Path]:
    """Remove temporary files that writers killed before their rename left behind (a writer that fails
    removes its own): in the run directory's pipeline outputs and in the shared model cache, those of
    processes that no longer exist. Returns what was removed."""
    removed: list[Path] = []
    folders = [run.root] + [run.root / name for name in _SWEPT] + [run.cache_for("quality")]
    for folder in folders:
        if not folder.is_dir():
            continue
        candidates = folder.iterdir() if folder in (run.root, run.cache_for("quality")) else folder.rglob("*")
        for path in candidates:
            match = _TEMP_NAME.search(path.name) or _MODEL_TEMP_NAME.match(path.name)
            if match is None or not path.is_file() or _alive(int(match.group(1))):
                continue
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed


def count_parquet_rows(directory: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(Path(directory).glob("*.parquet")))


def read_manifest(run: RunPaths | str | os.PathLike) -> dict | None:
    """The run's ``manifest.json``, or None when it is missing or not valid JSON (an incomplete run)."""
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    manifest = read_json(paths.manifest)
    return manifest if isinstance(manifest, dict) else None

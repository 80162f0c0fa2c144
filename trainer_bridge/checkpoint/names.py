"""What a checkpoint directory is called and the JSON files beside its tensors, without torch: for the readers
of a run directory that never load a model (``lineage``'s trace and data cards)."""
from __future__ import annotations

import json
import re
from pathlib import Path

PROVENANCE_FILE = "provenance.json"
STEP_DIR = re.compile(r"step-\d{8}")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(checkpoint: Path) -> int:
    """The step a ``step-NNNNNNNN`` checkpoint directory was saved after (its completed optimizer steps)."""
    return int(Path(checkpoint).name.split("-", 1)[1])


def complete_checkpoints(root: Path) -> list[Path]:
    """Every ``step-NNNNNNNN`` directory (not a partial save, not one being pruned), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if STEP_DIR.fullmatch(p.name) and p.is_dir())


def read_checkpoint_json(path: Path, name: str) -> dict | None:
    """One of a checkpoint's JSON files (it passed its checksums); None when an older version did not write it."""
    file = Path(path) / name
    if not file.is_file():
        return None
    return json.loads(file.read_text(encoding="utf-8"))

import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEMO_CORPUS = REPO / "data" / "demo" / "corpus.jsonl.gz"

# One cache of default quality models for the whole session (and `make demo`'s, the checkout's `runs/.cache`):
# each test's own runs directory would otherwise train the same English and Chinese models again (~45 s a run).
# Tests of the cache itself set their own (`monkeypatch.delenv`). Subprocesses inherit it.
os.environ["CORPUSMILL_CACHE"] = str(REPO / "runs" / ".cache")


def demo_records() -> list[dict]:
    with gzip.open(DEMO_CORPUS, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="session")
def demo_corpus() -> list[dict]:
    return demo_records()


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED


# `make test` runs the files on pytest-xdist workers, a whole file per worker (`--dist loadfile`, so a module's
# fixtures are built once). Files are handed out in collection order, so the longest start first: otherwise one
# worker would be left alone with a five-minute file at the end. Ordered by each file's summed test time in a full
# `-n 3` run with `--durations=0` on 2026-12-07 (evening; each over 60 s); a file missing from this list only costs
# balance, never a test.
LONGEST_FIRST = (
    "test_train_nothing_silent.py", "test_dask_prepare.py", "test_nothing_silent.py", "test_train_faults.py",
    "test_parallel_tp.py", "test_train_dist.py", "test_dask_runner.py", "test_parallel_cp.py", "test_sweep.py",
    "test_web_demo.py", "test_resume.py", "test_train_elastic.py", "test_moe.py", "test_faults.py",
    "test_quality_model.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: other files keep their order

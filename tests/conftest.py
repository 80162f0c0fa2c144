import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEMO_CORPUS = REPO / "data" / "demo" / "corpus.jsonl.gz"


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

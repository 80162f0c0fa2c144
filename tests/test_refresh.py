"""`refresh`: only new inputs are read; copies of what an earlier run kept are removed; old runs untouched."""
import json
import random
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.config import validate_config
from pipelines.run import run_stages


def _cfg(tmp_path: Path, name: str, paths: list[Path]):
    return validate_config({"name": name, "input": {"paths": [str(p) for p in paths]},
                            "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "direct", "workers": 1},
                            "pii": {"enabled": False}})


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _near_copy(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, len(words) // 100)):
        words[i] = words[i][::-1]
    return " ".join(words)


def _kept(run_dir: Path) -> dict[int, str]:
    rows = [r for p in sorted((run_dir / "docs").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["id"]: r["text"] for r in rows}


def test_refresh_removes_copies_of_earlier_runs_and_leaves_them_untouched(tmp_path, demo_corpus):
    rng = random.Random(7)
    long_docs = [r for r in demo_corpus if r["source"] in ("austen", "lee_news_gensim", "jargon", "kjv_bible")
                 and len(r["text"]) > 1500]
    old, new = long_docs[:30], long_docs[30:50]
    old_file = _write(tmp_path / "old.jsonl", old)
    first = _cfg(tmp_path, "base", [old_file])
    run_stages(first, ("clean",), log=lambda _: None)
    base_files = {p: p.read_bytes() for p in sorted(first.run_dir.rglob("*")) if p.is_file() and p.name != ".lock"}
    base_kept = _kept(first.run_dir)
    assert len(base_kept) >= 25

    copies = [dict(r, url=r["url"] + "?copy") for r in old[:5]]
    near = [dict(r, url=r["url"] + "?edited", text=_near_copy(r["text"], rng)) for r in old[5:10]]
    new_file = _write(tmp_path / "new.jsonl", new + copies + near)
    refresh = _cfg(tmp_path, "refresh", [old_file, new_file])
    logs = []
    run_stages(refresh, ("clean",), against=(str(first.run_dir),), log=logs.append)
    assert any("1 of 2 inputs were processed by earlier runs" in line for line in logs)

    stats = json.loads((refresh.run_dir / "stats.json").read_text())
    assert stats["documents_read"] == len(new) + 10 and stats["accounting"]["balanced"]
    removed = [r for p in sorted((refresh.run_dir / "removed").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    dups = [r for r in removed if r["reason"] == "near_duplicate"]
    copy_texts = {r["text"] for r in copies + near}
    kept_new = _kept(refresh.run_dir)
    assert not copy_texts & set(kept_new.values()), "a copy of an earlier run's document survived"
    assert {json.loads(r["annotations"])["near_dedup"]["cluster"] for r in dups} <= set(base_kept)
    assert len(dups) == 10
    # The earlier run is untouched, byte for byte.
    assert {p: p.read_bytes() for p in base_files} == base_files

    # Idempotent: the same refresh again gives the same kept documents.
    run_stages(refresh, ("clean",), against=(str(first.run_dir),), log=lambda _: None)
    assert _kept(refresh.run_dir) == kept_new

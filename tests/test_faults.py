"""Faults lose nothing: a killed pipeline re-runs to identical outputs; a write error is a clear failure."""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _write_config(tmp_path: Path, demo_corpus, name: str) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    if not corpus.exists():
        english = [r for r in demo_corpus if r["source"] in ("austen", "jargon", "lee_news_gensim", "pydoc_topics",
                                                              "newsgroup_gensim", "debian_handbook_zh")]
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in english), encoding="utf-8")
    cfg = {"name": name, "input": {"paths": [str(corpus)]}, "output": {"runs_dir": str(tmp_path / "runs")},
           "runner": {"name": "direct", "workers": 1}, "pii": {"enabled": False},
           "tokenizer": {"vocab_size": 1024}, "packing": {"seq_len": 256, "rows_per_shard": 64}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _corpusmill(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs)


def _outputs(run_dir: Path) -> dict[str, bytes]:
    files = sorted((run_dir / "docs").glob("*")) + sorted((run_dir / "shards").glob("*.arrow"))
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in files}


def test_sigkill_mid_stage_then_rerun_gives_identical_outputs(tmp_path, demo_corpus):
    reference = _write_config(tmp_path, demo_corpus, "reference")
    done = _corpusmill("prepare", str(reference))
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err[-2000:]
    expected = _outputs(tmp_path / "runs" / "reference")
    assert any(k.startswith("shards/") for k in expected) and any(k.startswith("docs/") for k in expected)

    victim_cfg = _write_config(tmp_path, demo_corpus, "victim")
    victim_dir = tmp_path / "runs" / "victim"
    victim = _corpusmill("prepare", str(victim_cfg))
    deadline = time.time() + 300
    # Kill once the cleaning stage has written its outputs and the shard stage is under way.
    while time.time() < deadline and not (victim_dir / "tokenizer").exists():
        assert victim.poll() is None, victim.communicate()[1][-2000:]
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    manifest = json.loads((victim_dir / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and manifest["stages_done"] == ["clean"]

    rerun = _corpusmill("prepare", str(victim_cfg))
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err[-2000:]
    assert _outputs(victim_dir).keys() == expected.keys()
    assert _outputs(victim_dir) == expected
    stats = json.loads((victim_dir / "stats.json").read_text())
    assert stats["accounting"]["balanced"]
    assert json.loads((victim_dir / "manifest.json").read_text())["status"] == "complete"


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, like ENOSPC
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_write_error_is_a_clear_failure_and_nothing_half_written_looks_complete(tmp_path, demo_corpus):
    cfg = _write_config(tmp_path, demo_corpus, "full")
    proc = _corpusmill("prepare", str(cfg), preexec_fn=_limit_file_size)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 5, (out[-1000:], err[-2000:])
    last = err.strip().splitlines()[-1]
    assert "failed" in last and "File too large" in last and "Traceback" not in err, err[-3000:]
    run_dir = tmp_path / "runs" / "full"
    manifest_path = run_dir / "manifest.json"
    assert not manifest_path.exists() or json.loads(manifest_path.read_text())["status"] != "complete"
    final_files = [p for p in run_dir.rglob("*.parquet") if "beam-temp-" not in str(p) and ".tmp-" not in p.name]
    for path in final_files:
        pq.ParquetFile(path)  # every file under its final name is whole (temporaries may be left behind)

"""The clean in units: a clean killed part way (SIGKILL of its process group) and run again redoes only the
units it had not finished, and writes what an uninterrupted clean writes, byte for byte; stale work is never
reused."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from beamio.read import InputFile
from beamio.sorted_merge import merge_runs, read_run, write_run
from beamio.write import jsonl_writer
from pipelines.clean_units import Markers, Unit, plan_units, settings_digest
from pipelines.config import validate_config
from pipelines.run import run_stages

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("docs", "removed", "quarantine", "dedup")


def _inputs(folder: Path, demo_corpus) -> Path:
    folder.mkdir()
    records = [r for r in demo_corpus if r["source"] in ("austen", "lee_news_gensim", "jargon")][:150]
    records += records[:10]  # exact duplicates across units
    for i in range(3):
        with open(folder / f"part{i}.jsonl", "w", encoding="utf-8") as fh:
            for record in records[i::3]:
                fh.write(json.dumps(record) + "\n")
    (folder / "part1.jsonl").open("a").write('{"text": "unterminated\n')  # one quarantined record
    return folder


def _config_data(tmp_path: Path, inputs: Path, name: str, runner: str, workers: int) -> dict:
    return {"name": name, "input": {"paths": [str(inputs)]}, "output": {"runs_dir": str(tmp_path / "runs")},
            "runner": {"name": runner, "workers": workers, "unit_bytes": 1},  # one unit per file
            "pii": {"enabled": False}, "quality": {"enabled": False}}


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {f"{d}/{p.name}": p.read_bytes() for d in OUTPUTS for p in sorted((run_dir / d).glob("*"))}


def test_a_killed_clean_resumes_and_matches_an_uninterrupted_one(tmp_path, demo_corpus):
    inputs = _inputs(tmp_path / "in", demo_corpus)
    # one unit: the one-graph clean, which the phased one must match byte for byte
    whole = validate_config({**_config_data(tmp_path, inputs, "whole", "inprocess", 1),
                             "runner": {"name": "inprocess", "workers": 1}})
    run_stages(whole, ("clean",), log=lambda _: None)
    assert "resume" not in json.loads((whole.run_dir / "stats.json").read_text())
    expected = _snapshot(whole.run_dir)
    assert any(k.startswith("docs/") for k in expected) and any(k.startswith("quarantine/") for k in expected)

    data = _config_data(tmp_path, inputs, "killed", "direct", 2)
    script = ("import json, sys; from pipelines.config import validate_config; from pipelines.run import run_stages;"
              "run_stages(validate_config(json.loads(sys.argv[1])), ('clean',), log=print)")
    proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(data)], cwd=ROOT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    first_marker = tmp_path / "runs" / "killed" / "work" / "clean" / "A" / "unit-00000.done"
    deadline = time.time() + 120
    while not first_marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers at once, power-cut style
    proc.wait()
    assert first_marker.exists(), "the clean ended or stalled before its first unit was committed"
    assert not (tmp_path / "runs" / "killed" / "stats.json").exists()

    resumed = validate_config({**data, "runner": {"name": "inprocess", "workers": 1, "unit_bytes": 1}})
    lines: list[str] = []
    run_stages(resumed, ("clean",), log=lines.append)
    stats = json.loads((resumed.run_dir / "stats.json").read_text())
    assert _snapshot(resumed.run_dir) == expected
    assert stats["resume"]["units"] == 3 and stats["resume"]["reused"]["A"] >= 1
    assert stats["accounting"]["balanced"]
    whole_stats = json.loads((whole.run_dir / "stats.json").read_text())
    assert stats["steps"] == [{**row, "busy_seconds": mine["busy_seconds"], "cpu_seconds": mine["cpu_seconds"]}
                              for row, mine in zip(whole_stats["steps"], stats["steps"])]
    assert stats["accounting"] == whole_stats["accounting"]
    assert any("reused from an earlier attempt" in line for line in lines)
    assert not (resumed.run_dir / "work").exists()


def test_stale_markers_are_not_reused(tmp_path):
    cfg = validate_config({"name": "s", "input": {"paths": [str(tmp_path)]}, "output": {"runs_dir": str(tmp_path)}})
    digest = settings_digest(cfg)
    assert settings_digest(cfg) == digest
    changed = validate_config({**cfg.model_dump(mode="json"), "filters": {"enabled": False}})
    assert settings_digest(changed) != digest
    faster = validate_config({**cfg.model_dump(mode="json"), "runner": {"workers": 3, "unit_bytes": 5}})
    assert settings_digest(faster) == digest  # how it runs is not what it writes

    unit = Unit(0, (InputFile("a.jsonl", "a.jsonl", "sha-a", 10),))
    markers = Markers(tmp_path / "work", "A", digest)
    markers.start(unit)
    markers.commit(unit, unit.inputs, {("read", "documents"): 3})
    assert markers.valid(unit, unit.inputs)["counters"] == [["read", "documents", 3]]
    assert markers.valid(unit, ["sha-other"]) is None  # the file changed
    assert Markers(tmp_path / "work", "A", settings_digest(changed)).valid(unit, unit.inputs) is None
    markers.start(unit)  # a unit started again loses its marker first
    assert markers.valid(unit, unit.inputs) is None


def test_units_and_the_merge(tmp_path):
    files = [InputFile(f"f{i}", f"f{i}", f"k{i}", size) for i, size in enumerate([5, 5, 20, 1])]
    assert [[f.name for f in u.files] for u in plan_units(files, 10)] == [["f0", "f1"], ["f2"], ["f3"]]
    rng = np.random.default_rng(0)
    ids = rng.permutation(200).tolist()
    runs = []
    for i in range(3):
        rows = sorted(({"id": x, "source": "s", "position": x} for x in ids[i::3]), key=lambda r: r["id"])
        runs.append(str(tmp_path / f"r{i}.run"))
        assert write_run(runs[-1], rows) == len(rows)
    assert [r["id"] for r in read_run(runs[0])] == sorted(ids[0::3])
    names = merge_runs(runs, 3, lambda r: r["id"], str(tmp_path / "out"), "q", ".jsonl", jsonl_writer,
                       str(tmp_path / "scratch"))
    assert names == [f"q-{p:05d}-of-00003.jsonl" for p in range(3)]
    for p, name in enumerate(names):
        got = [json.loads(line)["id"] for line in (tmp_path / "out" / name).read_text().splitlines()]
        assert got == [x for x in range(200) if x % 3 == p]
    assert not (tmp_path / "scratch").exists()


def test_a_run_chunk_holds_a_bounded_amount_of_text(tmp_path):
    """The merge holds one chunk of every unit's run at once: a chunk is bounded in bytes, not only in rows."""
    import pickle

    from beamio.sorted_merge import CHUNK_BYTES

    rows = [{"id": i, "text": "x" * (CHUNK_BYTES // 4)} for i in range(10)]
    path = str(tmp_path / "big.run")
    assert write_run(path, rows) == 10
    chunks = []
    with open(path, "rb") as fh:
        while True:
            try:
                chunks.append(pickle.load(fh))
            except EOFError:
                break
    assert [len(c) for c in chunks] == [4, 4, 2]
    assert list(read_run(path)) == rows


def test_the_clean_in_units_drops_what_the_ledger_forgot(tmp_path, demo_corpus):
    """A run directory's takedown ledger reaches the phased clean too: its units run the takedown step first."""
    from runio.ledger import LedgerEntry, append_entry, utc_now

    with_ids = [{**r, "id": f"rec-{i}"} for i, r in enumerate(demo_corpus)]
    inputs = _inputs(tmp_path / "in", with_ids)
    data = _config_data(tmp_path, inputs, "phased", "inprocess", 1)
    cfg = validate_config({**data, "input": {**data["input"], "id_field": "id"}})
    first = [json.loads(line) for line in (inputs / "part0.jsonl").read_text().splitlines()[:2]]
    (cfg.run_dir / "takedown").mkdir(parents=True)
    append_entry(cfg.run_dir / "takedown" / "ledger.jsonl",
                 LedgerEntry(time=utc_now(), reason="test", ids=[str(r["id"]) for r in first]))
    run_stages(cfg, ("clean",), log=lambda _: None)
    stats = json.loads((cfg.run_dir / "stats.json").read_text())
    assert stats["resume"]["units"] == 3  # the phased clean, not the one-graph one
    takedown = next(row for row in stats["steps"] if row["step"] == "takedown")
    # each of the two forgotten records is in the input twice (``_inputs`` repeats its first ten): all four go
    assert takedown["removed_by_reason"] == {"takedown": 4} and stats["accounting"]["balanced"]

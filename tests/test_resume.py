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


def _one_unit_per_file(inputs: Path) -> int:
    """A unit size that holds the largest input file whole, and no two files (they are about the same size)."""
    return max(p.stat().st_size for p in inputs.iterdir())


def _config_data(tmp_path: Path, inputs: Path, name: str, runner: str, workers: int) -> dict:
    return {"name": name, "input": {"paths": [str(inputs)]}, "output": {"runs_dir": str(tmp_path / "runs")},
            "runner": {"name": runner, "workers": workers, "unit_bytes": _one_unit_per_file(inputs)},
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

    resumed = validate_config({**data, "runner": {**data["runner"], "name": "inprocess", "workers": 1}})
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


def _read_all(path: str, source: InputFile, sources: list[InputFile]) -> list:
    from beamio.config_base import InputConfig
    from beamio.read import read_file_indexed

    cfg = InputConfig(paths=[path])
    return [(index, item if isinstance(item, dict) else item.as_record())
            for part in sources for index, item in read_file_indexed(part.path, cfg, part)]


def test_a_jsonl_file_cut_into_parts_reads_as_the_whole_file(tmp_path):
    """Parts of a plain JSONL file at line boundaries: every record read from the parts is the one the whole file
    gives (id, position, byte offset of a quarantined line), and no part exceeds the limit but by one line."""
    from beamio.read import split_compressed_jsonl, split_jsonl, splittable

    lines = [json.dumps({"text": f"document {i} " * (i % 7 + 1)}) for i in range(60)]
    lines[10], lines[20], lines[30] = "", "{not json", json.dumps({"text": "long " * 200})
    path = tmp_path / "one.jsonl"
    path.write_text("\n".join(lines))  # the last line has no newline
    whole = InputFile.of(str(path))
    expected = _read_all(str(path), whole, [whole])
    assert any(item.get("kind") == "invalid_json" for _, item in expected)
    for limit in (1, 40, 300, 1000):
        parts = split_jsonl(whole, limit)
        assert _read_all(str(path), whole, parts) == expected, limit
        assert parts[0].start == 0 and parts[-1].end == whole.bytes
        assert [p.start for p in parts[1:]] == [p.end for p in parts[:-1]]
        longest_line = max(len(line) + 1 for line in lines)
        assert all(p.bytes <= max(limit, longest_line) for p in parts)
        assert len({p.part_key for p in parts}) == len(parts)  # each part's markers name its byte range
    assert split_jsonl(whole, whole.bytes) == [whole]
    assert len(split_jsonl(whole, 300)) > 5

    # a file whose head holds a NUL byte is quarantined whole (binary_file): it is not cut
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x00" + "\n".join(lines).encode())
    assert split_jsonl(InputFile.of(str(binary)), 100) == [InputFile.of(str(binary))]
    # a compressed stream cannot be entered at an offset: decompressed once into plain part files, read as whole
    import gzip

    gz = tmp_path / "one.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    compressed = InputFile.of(str(gz))
    assert splittable(compressed) == "copy" and splittable(whole) == "range"
    expected = _read_all(str(gz), compressed, [compressed])
    (tmp_path / "parts").mkdir()
    for limit in (40, 300):
        parts = split_compressed_jsonl(compressed, limit, str(tmp_path / "parts"))
        assert len(parts) == len(split_jsonl(whole, limit)) == len(split_compressed_jsonl(compressed, limit, None))
        assert _read_all(str(gz), compressed, parts) == expected, limit
    assert split_compressed_jsonl(compressed, whole.bytes, str(tmp_path / "parts")) == [compressed]
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gz.read_bytes()[:-40])  # the reader quarantines it whole (truncated_file): not cut
    assert split_compressed_jsonl(InputFile.of(str(truncated)), 40, str(tmp_path / "parts")) == \
        [InputFile.of(str(truncated))]
    # another format larger than a unit stays one unit, and the log says so
    text = tmp_path / "one.txt"
    text.write_text("words " * 100)
    said: list[str] = []
    units = plan_units([whole, InputFile.of(str(text))], 300, log=said.append)
    assert len(units) > 5 and units[-1].files == (InputFile.of(str(text)),)
    assert len(said) == 1 and "one.txt" in said[0]


def test_a_large_file_in_units_writes_what_one_unit_writes(tmp_path, demo_corpus):
    """A plain JSONL file and a gzipped one, each cut into several units by a small ``unit_bytes``: the same
    outputs, byte for byte, and the same counts as the one-graph clean of them as one unit."""
    import gzip

    folder = _inputs(tmp_path / "parts", demo_corpus)
    single = tmp_path / "in"
    single.mkdir()
    with open(single / "all.jsonl", "wb") as fh:
        for i in range(3):
            fh.write((folder / f"part{i}.jsonl").read_bytes())
    size = (single / "all.jsonl").stat().st_size
    # another file, gzipped: part 0 again (duplicates of the plain file's documents) after some of part 2
    (single / "more.jsonl.gz").write_bytes(gzip.compress((folder / "part0.jsonl").read_bytes()
                                                         + (folder / "part2.jsonl").read_bytes()[: size // 8]))
    whole = validate_config({**_config_data(tmp_path, single, "whole", "inprocess", 1),
                             "runner": {"name": "inprocess", "workers": 1}})
    run_stages(whole, ("clean",), log=lambda _: None)
    cut = validate_config({**_config_data(tmp_path, single, "cut", "inprocess", 1),
                           "runner": {"name": "inprocess", "workers": 1, "unit_bytes": size // 4}})
    run_stages(cut, ("clean",), log=lambda _: None)
    stats, whole_stats = (json.loads((c.run_dir / "stats.json").read_text()) for c in (cut, whole))
    assert "resume" not in whole_stats and stats["resume"]["units"] >= 6
    assert _snapshot(cut.run_dir) == _snapshot(whole.run_dir)
    assert stats["accounting"] == whole_stats["accounting"] and stats["accounting"]["balanced"]
    assert stats["steps"] == [{**row, "busy_seconds": mine["busy_seconds"], "cpu_seconds": mine["cpu_seconds"]}
                              for row, mine in zip(whole_stats["steps"], stats["steps"])]

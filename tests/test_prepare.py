"""The cleaning backbone end to end on Beam: quarantine, exact accounting, determinism."""
import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.config import ConfigError, load_config, validate_config
from pipelines.run import run_stages
from beamio.read import doc_id
from runio.files import sha256_file


def _config(tmp_path: Path, paths, name="t", workers=1, **sections) -> object:
    data = {"name": name, "input": {"paths": [str(p) for p in paths], "max_doc_bytes": 1_000_000},
            "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "direct", "workers": workers},
            # PII and quality have their own tests; the backbone's are about reading and accounting
            "pii": {"enabled": False}, "quality": {"enabled": False}}
    data.update(sections)
    return validate_config(data)


def run_clean_stage(cfg) -> dict:
    run_stages(cfg, ("clean",), log=lambda _: None)
    return json.loads((cfg.run_dir / "stats.json").read_text())


def _valid_records(demo_corpus, n):
    english = [r for r in demo_corpus if r["source"] in ("austen", "lee_news_gensim", "jargon")]
    return english[:n]


@pytest.fixture
def messy_inputs(tmp_path, demo_corpus):
    folder = tmp_path / "in"
    folder.mkdir()
    valid = _valid_records(demo_corpus, 6)
    lines = [json.dumps(r).encode() for r in valid[:3]]
    lines += [
        b'{"text": "unterminated',                              # not JSON
        b'{"text": "caf\xe9 au lait"}',                         # invalid UTF-8
        b'{"title": "no text here"}',                           # no text field
        b'{"text": 42}',                                        # a number as text
        b'{"text": ""}',                                        # empty text
        b'{"text": "' + b"a" * (50 * 1024 * 1024) + b'"}',      # a 50 MB single-line document
    ]
    lines += [json.dumps(r).encode() for r in valid[3:]]
    (folder / "mixed.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (folder / "image.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    with gzip.open(folder / "more.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(valid[0]) + "\n")  # an exact duplicate of the first valid record
    return folder


def test_bad_input_is_quarantined_and_accounting_is_exact(tmp_path, messy_inputs):
    cfg = _config(tmp_path, [messy_inputs], filters={"enabled": False})
    stats = run_clean_stage(cfg)
    assert stats["documents_read"] == 6 + 6 + 1 + 1
    assert stats["quarantined"]["by_kind"] == {"binary_file": 1, "empty_text": 1, "invalid_json": 1,
                                               "invalid_utf8": 1, "missing_text": 1, "text_not_a_string": 1,
                                               "too_large": 1}
    assert stats["kept"] == 6
    assert [s["removed_by_reason"] for s in stats["steps"] if s["step"] == "exact_dedup"] == [{"exact_duplicate": 1}]
    acc = stats["accounting"]
    assert acc["balanced"] and acc["read"] == acc["kept"] + acc["removed"] + acc["quarantined"] == 14
    run_dir = cfg.run_dir
    quarantine = [json.loads(line) for p in sorted((run_dir / "quarantine").glob("*.jsonl"))
                  for line in p.read_text().splitlines()]
    by_kind = {q["kind"]: q for q in quarantine}
    assert by_kind["too_large"]["position"] == 9 and "exceeds input.max_doc_bytes" in by_kind["too_large"]["reason"]
    assert by_kind["invalid_json"]["source"].endswith("mixed.jsonl") and by_kind["invalid_json"]["position"] == 4
    assert all(q["reason"] for q in quarantine)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stages_done"] == ["clean"] and manifest["counts"]["balanced"]
    removed = pq.read_table(next((run_dir / "removed").glob("*.parquet"))).to_pylist()
    assert removed[0]["removed_by"] == "exact_dedup"
    # ids derive from each file's content address (sha256) and the line number
    assert json.loads(removed[0]["annotations"])["exact_dedup"]["dup_of"] in {
        doc_id(sha256_file(messy_inputs / "mixed.jsonl"), 1), doc_id(sha256_file(messy_inputs / "more.jsonl.gz"), 1)}
    assert {i["source"] for i in manifest["inputs"]} == {"mixed.jsonl", "image.jsonl", "more.jsonl.gz"}
    assert manifest["id_scheme"]["key"].startswith("sha256 of the input file's bytes")


def test_rerun_and_worker_count_give_byte_identical_docs(tmp_path):
    corpus = Path(__file__).resolve().parents[1] / "data" / "demo" / "corpus.jsonl.gz"
    first = _config(tmp_path, [corpus], name="a", workers=2)
    run_clean_stage(first)
    snapshot = {p.name: p.read_bytes() for p in sorted((first.run_dir / "docs").glob("*"))}
    assert snapshot and all(name.endswith(".parquet") for name in snapshot)
    run_clean_stage(first)  # same config, same directory
    assert {p.name: p.read_bytes() for p in sorted((first.run_dir / "docs").glob("*"))} == snapshot
    single = _config(tmp_path, [corpus], name="b", workers=1)
    stats = run_clean_stage(single)
    assert {p.name: p.read_bytes() for p in sorted((single.run_dir / "docs").glob("*"))} == snapshot
    ids = pq.read_table(single.run_dir / "docs" / next(iter(snapshot)), columns=["id"]).column("id").to_pylist()
    assert ids == sorted(ids)
    assert stats["accounting"]["balanced"] and stats["documents_read"] == 1455


def test_a_run_directory_never_mixes_two_configs(tmp_path, demo_corpus):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join(json.dumps(r) for r in _valid_records(demo_corpus, 3)))
    cfg = _config(tmp_path, [folder])
    run_clean_stage(cfg)
    other = cfg.model_copy(update={"filters": cfg.filters.model_copy(update={"enabled": False})})
    with pytest.raises(ConfigError, match="different config"):
        run_clean_stage(other)


def test_config_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ninput: {paths: [a.jsonl], format: xml}\nfilters: {enabeld: true}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    message = str(err.value)
    assert "input.format" in message and "'xml'" in message and "filters.enabeld" in message
    good = tmp_path / "good.yaml"
    good.write_text("name: x\ninput: {paths: a.jsonl}\n")
    cfg = load_config(good, ["filters.default.min_words=10", "runner.workers=2"])
    assert cfg.filters.default.min_words == 10 and cfg.runner.workers == 2 and cfg.input.paths == ["a.jsonl"]
    with pytest.raises(ConfigError, match="no file matches"):
        run_clean_stage(cfg)

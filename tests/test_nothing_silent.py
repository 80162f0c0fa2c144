"""Nothing lost and nothing silent (issue 17, pipeline side): empty results complete, ids do not depend on how
paths are written, a changed config re-runs only the stages it touches, late-stage keys fail before any stage,
interrupts and unwritable run directories end in one line, truncated input is named, and the report and the
commands answer consistently."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli.main import main
from pipelines.config import ConfigError, load_config, validate_config
from beamio.read import Quarantined, read_file, resolve_inputs
from pipelines.run import run_stages

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "demo" / "corpus.jsonl.gz"
PYTHON = sys.executable
CLEAN_FILES = ("docs", "removed", "quarantine", "dedup", "stats.json")


def _records(n: int, sources=("austen", "lee_news_gensim", "jargon", "kjv_bible", "debian_handbook_zh")) -> list[dict]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    return [r for r in records if r["source"] in sources][:n]


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _data(tmp_path: Path, name: str, paths, runner: str = "inprocess", **sections) -> dict:
    data = {"name": name, "input": {"paths": [str(p) for p in paths]},
            "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": runner, "workers": 1},
            "quality": {"enabled": False}, "pii": {"enabled": False},
            "tokenizer": {"vocab_size": 400}, "packing": {"seq_len": 64, "rows_per_shard": 64, "val_fraction": 0.1}}
    data.update(sections)
    return data


def _yaml(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _manifest(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "runs" / name / "manifest.json").read_text(encoding="utf-8"))


def _files(run_dir: Path, *folders: str) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for folder in folders
            for p in sorted((run_dir / folder).rglob("*")) if p.is_file()}


def _snapshot(run_dir: Path, names=CLEAN_FILES) -> dict[str, tuple[int, str]]:
    """mtime (ns) and sha256 of every file of the clean stage."""
    out = {}
    for name in names:
        target = run_dir / name
        for p in ([target] if target.is_file() else sorted(target.rglob("*"))):
            if p.is_file():
                out[str(p.relative_to(run_dir))] = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ----------------------------------------------------------------------------------------- empty results


def test_empty_results_exit_0_with_a_complete_manifest_and_one_summary_line(tmp_path, capsys):
    empty = tmp_path / "in" / "empty.jsonl"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    bad = tmp_path / "in2" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"text": "unterminated\n{"title": "no text"}\n[1, 2]\n', encoding="utf-8")
    base_file = _jsonl(tmp_path / "base" / "old.jsonl", _records(12, ("austen", "lee_news_gensim")))
    copies = _jsonl(tmp_path / "new" / "copies.jsonl",
                    [dict(r, url=r["url"] + "?copy") for r in json.loads("[" + ",".join(
                        base_file.read_text(encoding="utf-8").splitlines()) + "]")])

    def check_empty(name: str, command: str, out: str, read: int, quarantined: int) -> dict:
        manifest = _manifest(tmp_path, name)
        assert manifest["status"] == "complete" and manifest["empty"] is True
        assert manifest["counts"]["kept"] == 0 and manifest["counts"]["read"] == read
        assert manifest["counts"]["quarantined"] == quarantined and manifest["counts"]["balanced"]
        assert "shards" in manifest["skipped"] and "no document survived cleaning" in manifest["skipped"]["shards"]
        assert not (tmp_path / "runs" / name / "shards").exists()
        last = out.strip().splitlines()[-1]
        assert last.startswith(f"corpusmill {command}: done: empty result: no document survived cleaning"), last
        assert sum("done:" in line for line in out.splitlines()) == 1
        return manifest

    # an empty input file, through `run`: shards and training skipped with their reason, the report written
    cfg = _yaml(tmp_path, _data(tmp_path, "empty", [empty]))
    code, out, err = _cli(["run", str(cfg)], capsys)
    assert code == 0, err
    manifest = check_empty("empty", "run", out, read=0, quarantined=0)
    assert "train" in manifest["skipped"] and "[3/4] train: skipped: no document survived cleaning" in out
    assert (tmp_path / "runs" / "empty" / "report.html").is_file()
    code, out, err = _cli(["inspect", str(tmp_path / "runs" / "empty")], capsys)  # what it has instead of shards
    assert code == 1 and "is a run without shards: its shards stage was skipped (no document survived" in err, err
    # input that is all quarantined
    code, out, err = _cli(["prepare", str(_yaml(tmp_path, _data(tmp_path, "quarantined", [bad])))], capsys)
    assert code == 0, err
    check_empty("quarantined", "prepare", out, read=3, quarantined=3)

    # a refresh whose every new document is a copy of an earlier run's, and one whose every input was seen
    code, out, err = _cli(["prepare", str(_yaml(tmp_path, _data(tmp_path, "base", [base_file])))], capsys)
    assert code == 0, err
    base_kept = _manifest(tmp_path, "base")["counts"]["kept"]
    assert base_kept >= 8
    refresh = _yaml(tmp_path, _data(tmp_path, "dups", [base_file, copies]))
    code, out, err = _cli(["refresh", str(refresh), "--against", str(tmp_path / "runs" / "base")], capsys)
    assert code == 0, err
    dups = check_empty("dups", "refresh", out, read=12, quarantined=0)
    assert dups["counts"]["removed"] == 12
    seen = _yaml(tmp_path, _data(tmp_path, "seen", [base_file]))
    code, out, err = _cli(["refresh", str(seen), "--against", str(tmp_path / "runs" / "base")], capsys)
    assert code == 0, err
    check_empty("seen", "refresh", out, read=0, quarantined=0)
    assert "1 of 1 inputs were processed by earlier runs; reading 0 new" in out
    # an empty refresh is a valid --against for the next one
    again = _yaml(tmp_path, _data(tmp_path, "seen-again", [base_file]))
    code, out, err = _cli(["refresh", str(again), "--against", str(tmp_path / "runs" / "seen")], capsys)
    assert code == 0, err
    check_empty("seen-again", "refresh", out, read=0, quarantined=0)


# -------------------------------------------------------------------------- ids independent of spelling


def test_relative_absolute_and_other_cwd_give_byte_identical_docs_and_shards(tmp_path, monkeypatch):
    """A slice of the demo corpus (English and Chinese), named three ways: relative from its folder's parent,
    absolute from another working directory, and as a glob relative to a sibling folder."""
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "slice.jsonl.gz", "wt", encoding="utf-8") as fh:
        for r in _records(120):
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (tmp_path / "elsewhere").mkdir()
    spellings = [("rel", tmp_path, "data/slice.jsonl.gz"),
                 ("abs", Path("/"), str(data / "slice.jsonl.gz")),
                 ("glob", tmp_path / "elsewhere", "../data/*.jsonl.gz")]
    outputs = {}
    for name, cwd, path in spellings:
        monkeypatch.chdir(cwd)
        cfg = validate_config(_data(tmp_path, name, [path], packing={"seq_len": 64, "rows_per_shard": 32,
                                                                     "val_fraction": 0.2}))
        manifest = run_stages(cfg, ("clean", "shards"), log=lambda _: None)
        assert manifest["inputs"][0]["source"] == "slice.jsonl.gz" and manifest["id_scheme"]["key"]
        run_dir = tmp_path / "runs" / name
        outputs[name] = _files(run_dir, "docs", "shards", "tokenizer")
    assert any(k.startswith("shards/val-") for k in outputs["rel"]) and any(k.startswith("docs/") for k in outputs["rel"])
    assert outputs["rel"] == outputs["abs"] == outputs["glob"]


def test_source_names_and_byte_identical_inputs(tmp_path):
    (tmp_path / "a" / "x").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    one = _jsonl(tmp_path / "a" / "x" / "part-0.jsonl", _records(2))
    _jsonl(tmp_path / "b" / "part-0.jsonl", _records(3))
    shutil.copy(one, tmp_path / "a" / "copy.jsonl")
    # the same base name from two entries: every file is named relative to the folder holding them all
    files = resolve_inputs([str(one), str(tmp_path / "b" / "part-0.jsonl")])
    assert [f.name for f in files] == ["a/x/part-0.jsonl", "b/part-0.jsonl"]
    # a folder (names relative to it); a byte-identical copy is read once, and said
    logged: list[str] = []
    files = resolve_inputs([str(tmp_path / "a")], log=logged.append)
    assert [f.name for f in files] == ["copy.jsonl"] and files[0].key == resolve_inputs([str(one)])[0].key
    assert len(logged) == 1 and "byte-identical" in logged[0]
    # `**/` matches no folder as well as many, as a shell's globstar does
    files = resolve_inputs([str(tmp_path / "a" / "**" / "*.jsonl")])
    assert [f.name for f in files] == ["copy.jsonl"]  # a/copy.jsonl (a/x/part-0.jsonl is its byte-identical twin)
    assert [f.name for f in resolve_inputs([str(tmp_path / "**" / "part-0.jsonl")])] == ["a/x/part-0.jsonl",
                                                                                          "b/part-0.jsonl"]


def test_parquet_cells_of_any_type_reach_meta_as_json(tmp_path):
    """Hugging Face Parquet files carry timestamps, dates, decimals, bytes, maps and NaN next to the text: they
    reach ``meta`` as JSON holds them (the docs are written with meta as JSON), instead of failing the run after
    the clean."""
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from beamio.config_base import InputConfig

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({
        "text": ["one document", "another one"],
        "ts": pa.array([datetime.datetime(2024, 1, 1, 12, 30)] * 2),
        "day": pa.array([datetime.date(2024, 1, 2)] * 2),
        "raw": pa.array([b"\x00\xff", b"ab"]),
        "price": pa.array([decimal.Decimal("1.25"), None], type=pa.decimal128(5, 2)),
        "score": [float("nan"), 1.5],
        "tags": pa.array([[("a", 1)], []], type=pa.map_(pa.string(), pa.int64())),
    }), path)
    docs = list(read_file(str(path), InputConfig(paths=[str(path)])))
    assert [d["meta"] for d in docs] == [
        {"ts": "2024-01-01T12:30:00", "day": "2024-01-02", "raw": "AP8=", "price": "1.25", "score": None,
         "tags": [["a", 1]]},
        {"ts": "2024-01-01T12:30:00", "day": "2024-01-02", "raw": "YWI=", "price": None, "score": 1.5, "tags": []}]
    json.dumps([d["meta"] for d in docs], allow_nan=False)


def test_an_empty_folder_is_an_empty_input_and_a_missing_one_an_error(tmp_path, capsys):
    """The folder new files arrive in may hold none yet (or only empty sub-folders): no input file, an empty
    result (exit 0), as a day without new documents is; a folder that does not exist is a config error."""
    (tmp_path / "incoming" / "2024").mkdir(parents=True)
    assert resolve_inputs([str(tmp_path / "incoming")]) == []
    code, out, err = _cli(["dedup", str(tmp_path / "incoming"), "--out", str(tmp_path / "o.jsonl")], capsys)
    assert code == 0 and "0 documents" in err and "Traceback" not in err, (code, out, err)
    with pytest.raises(ConfigError, match=r"input.paths\[0\]: no file matches"):
        resolve_inputs([str(tmp_path / "missing")])


def test_an_input_that_cannot_be_listed_is_an_error_not_an_empty_input(tmp_path, capsys):
    """A path on a filesystem Beam cannot reach (an unknown scheme, gs:// without the gcp extra) is said in one
    line naming the entry and the cause; it used to be read as 'no file matches', and a folder of them as nothing."""
    with pytest.raises(ConfigError, match=r"input.paths\[1\]: 'zzz://bucket/corpus' cannot be listed \(ValueError: "
                                          r"Unable to get filesystem"):
        resolve_inputs([str(tmp_path), "zzz://bucket/corpus"])
    code, out, err = _cli(["dedup", "zzz://bucket/corpus", "--out", str(tmp_path / "o.jsonl")], capsys)
    assert code == 2 and "cannot be listed" in err and "Traceback" not in err, (code, out, err)


def test_hidden_files_and_folders_of_an_input_folder_are_left_out_and_said(tmp_path, capsys):
    """A corpus folder under version control or copied from a Mac holds .git/, .DS_Store, an editor's swap
    file: a folder's hidden entries are left out (as a glob leaves them out) and counted in one line, instead of
    each being read and quarantined as an unsupported file. A hidden file named on its own is read."""
    folder = tmp_path / "corpus"
    (folder / "sub" / ".git").mkdir(parents=True)
    (folder / "a.jsonl").write_text(json.dumps({"id": "a", "text": "one document about the weather"}) + "\n")
    (folder / "sub" / "b.jsonl").write_text(json.dumps({"id": "b", "text": "another, about the sea"}) + "\n")
    (folder / "sub" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (folder / ".a.jsonl.swp").write_bytes(b"b0VIM 9.0")
    logged: list[str] = []
    files = resolve_inputs([str(folder)], log=logged.append)
    assert [f.name for f in files] == ["a.jsonl", "sub/b.jsonl"]
    assert logged == ["3 hidden file(s) or folder(s) in the input folders left out (names starting with '.': "
                      ".DS_Store, .a.jsonl.swp, sub/.git/)"]
    code, out, err = _cli(["dedup", str(folder), "--out", str(tmp_path / "o.jsonl")], capsys)
    assert code == 0 and "2 documents" in err and "0 quarantined" in err and "hidden" in err, (code, err)
    assert [f.name for f in resolve_inputs([str(folder / ".a.jsonl.swp")])] == [".a.jsonl.swp"]


def test_a_parquet_file_without_the_text_column_says_how_many_rows_and_which_columns(tmp_path):
    """One quarantine record for the file (one mistake, not one per row), naming its row count and columns: the
    text is most often under another name (input.text_field)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beamio.config_base import InputConfig

    path = tmp_path / "crawl.parquet"
    pq.write_table(pa.table({"content": ["a page", "another"], "url": ["https://a", "https://b"]}), path)
    items = list(read_file(str(path), InputConfig(paths=[str(path)])))
    assert len(items) == 1 and items[0].kind == "missing_text"
    assert items[0].reason == ("Parquet file has no 'text' column; none of its 2 rows read (its columns: 'content', "
                               "'url')")


def test_byte_order_marks_are_read_not_quarantined(tmp_path):
    """Windows tools save text with a byte order mark: UTF-8 with one (Notepad, PowerShell), or UTF-16/32 (whose
    head is full of NUL bytes, yet it is text). Each is read as the text it holds; a wide file that is not valid
    in its encoding is quarantined whole, and a wide JSONL file is never cut at a newline byte."""
    import codecs

    from beamio.config_base import InputConfig
    from beamio.read import InputFile, split_jsonl

    records = [{"text": "Grüße aus Köln, 你好"}, {"text": "a second line"}]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    files = {"utf8_bom.jsonl": codecs.BOM_UTF8 + body.encode(), "utf16.jsonl": body.encode("utf-16"),
             "utf16_be.jsonl.gz": gzip.compress(codecs.BOM_UTF16_BE + body.encode("utf-16-be")),
             "utf32.jsonl": body.encode("utf-32"), "utf16.txt": "Hello, 你好".encode("utf-16"),
             "utf8_bom.txt": codecs.BOM_UTF8 + "Hello, 你好".encode()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        texts = [d["text"] for d in read_file(str(tmp_path / name), InputConfig(paths=[str(tmp_path)]))]
        assert texts == ([r["text"] for r in records] if ".jsonl" in name else ["Hello, 你好"]), name

    broken = tmp_path / "broken.txt"
    broken.write_bytes(codecs.BOM_UTF16_LE + "ok".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate at the end
    [item] = read_file(str(broken), InputConfig(paths=[str(broken)]))
    assert isinstance(item, Quarantined) and item.kind == "unreadable_file" and "UnicodeDecodeError" in item.reason

    wide = tmp_path / "wide.jsonl"
    wide.write_bytes((body * 50).encode("utf-16"))
    assert split_jsonl(InputFile.of(str(wide)), 256) == [InputFile.of(str(wide))]


# ------------------------------------------------------------------------------------ per-stage fingerprints


def _tiny_run(tmp_path: Path, name: str) -> dict:
    return _data(tmp_path, name, [_jsonl(tmp_path / "in" / "c.jsonl", _records(40, ("austen", "jargon")))],
                 train={"device": "cpu", "model": {"dim": 32, "n_layers": 1, "n_heads": 2},
                        "batch": {"global_batch_size": 2, "micro_batch_size": 1}, "steps": 2,
                        "eval": {"interval": 0}, "checkpoint": {"interval": 1, "keep_last": 1}},
                 packing={"seq_len": 64, "rows_per_shard": 64, "val_fraction": 0.05})


def test_a_tokenizer_change_rebuilds_shards_and_training_but_never_the_clean(tmp_path, capsys):
    """The bar: after a completed `run`, `--set tokenizer.vocab_size=…` re-runs shards and train only, the clean
    stage's files untouched (mtime and sha256). The checkpoints were trained on the old shards, so they are never
    resumed on the new ones: `run` trains anew, saying so, the old checkpoints set aside (`prepare`, which
    would leave the model on shards it never saw, refuses: exit 4, nothing touched, the keys named)."""
    cfg = _yaml(tmp_path, _tiny_run(tmp_path, "fp"))
    run_dir = tmp_path / "runs" / "fp"
    code, out, err = _cli(["run", str(cfg)], capsys)
    assert code == 0, err
    assert _manifest(tmp_path, "fp")["stages_done"] == ["clean", "shards", "train", "report"]
    clean = _snapshot(run_dir)
    everything = _snapshot(run_dir, ("docs", "shards", "tokenizer", "train", "report.html", "stats.json"))
    old_tokenizer = _manifest(tmp_path, "fp")["shards"]["tokenizer_sha256"]
    assert any(p.startswith("docs/") for p in clean)

    # how the trainer checks the shards it reads is no part of any stage's fingerprint
    code, out, err = _cli(["run", str(cfg), "--set", "train.verify_shards=manifest"], capsys)
    assert code == 0, err
    assert out.count("already done with this config, skipped") == 4, out

    # `prepare` would leave the model on shards it was never trained on: refused in one line, nothing touched
    code, out, err = _cli(["prepare", str(cfg), "--set", "tokenizer.vocab_size=300"], capsys)
    assert code == 4 and len(err.strip().splitlines()) == 1 and "use `corpusmill run`" in err, (code, err)
    assert "tokenizer.vocab_size: 400 → 300" in err
    assert _snapshot(run_dir, ("docs", "shards", "tokenizer", "train", "report.html", "stats.json")) == everything

    # `run` rebuilds the shards and trains anew, saying so (never resuming the old model on the new shards); the
    # clean is untouched and the old model is set aside, never deleted
    code, out, err = _cli(["run", str(cfg), "--set", "tokenizer.vocab_size=300"], capsys)
    assert code == 0, err
    assert "[1/4] clean: already done with this config, skipped" in out
    assert "[2/4] shards ..." in out and "[3/4] train ..." in out and "[4/4] report ..." in out
    assert "resumed from" not in out and "training starts over at step 0 on the new shards" in out, out
    assert "tokenizer.vocab_size: 400 → 300" in out
    assert _snapshot(run_dir) == clean  # the clean stage's files: same mtime, same content
    aside = next((run_dir / "train").glob("set-aside-*"))  # the old model, kept
    assert sorted(p.name for p in (aside / "checkpoints").glob("step-*")) == ["step-00000002"]
    manifest = _manifest(tmp_path, "fp")
    assert manifest["shards"]["tokenizer_sha256"] != old_tokenizer
    assert manifest["stages"]["shards"]["settings"]["tokenizer.vocab_size"] == 300
    assert manifest["stages_done"] == ["clean", "shards", "train", "report"]

    # --from-scratch trains anew on the same shards: the model just trained is set aside as well
    code, out, err = _cli(["run", str(cfg), "--set", "tokenizer.vocab_size=300", "--from-scratch"], capsys)
    assert code == 0, err
    assert "[2/4] shards: already done with this config, skipped" in out and "[3/4] train ..." in out
    assert "resumed from" not in out and "--from-scratch: the previous checkpoints" in out
    assert len(list((run_dir / "train").glob("set-aside-*"))) == 2
    assert _snapshot(run_dir) == clean

    # a report-only change re-runs the report alone
    code, out, err = _cli(["run", str(cfg), "--set", "tokenizer.vocab_size=300", "--set", "report.histogram_bins=10"],
                          capsys)
    assert code == 0, err
    assert "report: changed (report.histogram_bins: 40 → 10): it runs again" in out
    assert out.count("already done with this config, skipped") == 3

    # the train stage refused by the trainer (another model on resume): `run` ends with the trainer's code and
    # its reason in one line naming the stage
    code, out, err = _cli(["run", str(cfg), "--set", "tokenizer.vocab_size=300", "--set", "train.model.n_layers=2"],
                          capsys)
    assert code == 4 and len(err.strip().splitlines()) == 1, (code, err)
    assert err.startswith("corpusmill run: train stage failed (exit 4): ") and "n_layers 1 → 2" in err, err
    assert "Traceback" not in out + err

    # the input emptied: an empty result skips training, and the model trained before is moved aside, never deleted
    (tmp_path / "in" / "c.jsonl").write_bytes(b"")
    code, out, err = _cli(["prepare", str(cfg), "--set", "tokenizer.vocab_size=300"], capsys)
    assert code == 0 and "empty result" in out, err
    code, out, err = _cli(["run", str(cfg), "--set", "tokenizer.vocab_size=300"], capsys)
    assert code == 0 and "[3/4] train: skipped: no document survived cleaning" in out, err
    # the models of the first training, of the --from-scratch one and of the last one, each set aside
    assert len(list((run_dir / "train").glob("set-aside-*/checkpoints/step-*"))) == 3
    assert not (run_dir / "train" / "checkpoints").exists()


def test_a_run_knows_what_corpusmill_train_did_in_its_directory(tmp_path, capsys):
    """`corpusmill train` on a run's directory updates the run's record of its train stage: the next `run` with
    the config trained says so and skips it, rebuilding the report of the model before; with another config it
    names what changed and trains again, never calling a training of other settings "already done". A train
    refused before training (no shards: a misspelt name) changes nothing and makes no directory."""
    cfg = _yaml(tmp_path, _tiny_run(tmp_path, "st"))
    code, out, err = _cli(["run", str(cfg)], capsys)
    assert code == 0, err
    code, out, err = _cli(["train", str(cfg), "--from-scratch", "--set", "train.steps=3"], capsys)
    assert code == 0, err
    manifest = _manifest(tmp_path, "st")
    assert manifest["stages"]["train"]["settings"]["train.steps"] == 3 and "report" not in manifest["stages_done"]
    code, out, err = _cli(["run", str(cfg), "--set", "train.steps=3"], capsys)
    assert code == 0, err
    assert "[3/4] train: already done with this config, skipped" in out and "[4/4] report ..." in out, out
    code, out, err = _cli(["run", str(cfg)], capsys)  # the model has 3 steps: not "already done" with 2, refused
    assert "train: its config changed (train.steps: 3 → 2)" in out and "already done" not in out.split("[3/4]")[1], out
    assert code == 4 and "is past train.steps (2): nothing to train" in err, (code, err)
    before = sorted(p.name for p in tmp_path.joinpath("runs").iterdir())
    code, out, err = _cli(["train", str(cfg), "--set", "name=stt"], capsys)
    assert code == 2 and "no shards to train on" in err and "check the config's `name`" in err, (code, err)
    assert sorted(p.name for p in tmp_path.joinpath("runs").iterdir()) == before


@pytest.mark.parametrize("code", [2, 3, 4, 5])
def test_a_failed_train_stage_is_one_line_naming_it_with_the_trainers_exit_code(tmp_path, capsys, monkeypatch, code):
    import cli.prepare as cli_prepare
    import trainer_bridge.launch as launch
    from pipelines.run import StageFailed, _run_stage
    from runio.layout import RunPaths

    reasons = {2: "train.init_from: /x does not exist", 3: "stopped at step 1: guards.on_persistent is 'stop'",
               4: "step-00000002 was trained on other shards", 5: "PermissionError: Permission denied (/r/train)"}
    asked = {}

    def fake_run_training(cfg, rendezvous=None, *, from_scratch=False, outcome=launch.say_outcome):
        asked["from_scratch"] = from_scratch
        outcome(reasons[code])
        return code

    monkeypatch.setattr(launch, "run_training", fake_run_training)  # run.py looks it up when the stage runs
    cfg = validate_config(_tiny_run(tmp_path, "tf"))
    with pytest.raises(StageFailed) as failed:
        _run_stage(cfg, RunPaths.of(cfg), "train", (), lambda _: None, from_scratch=True)
    assert failed.value.code == code and asked["from_scratch"] is True
    assert str(failed.value) == f"train stage failed (exit {code}): {reasons[code]}"

    # `corpusmill run` ends with that code and that line (no error log, no traceback); --from-scratch reaches it
    def fake_run_stages(cfg, stages, **kwargs):
        asked.update(kwargs)
        raise failed.value

    monkeypatch.setattr(cli_prepare, "run_stages", fake_run_stages)
    config = _yaml(tmp_path, _tiny_run(tmp_path, "tf"))
    exit_code, out, err = _cli(["run", str(config), "--from-scratch"], capsys)
    assert exit_code == code and asked["from_scratch"] is True
    assert err.strip() == f"corpusmill run: train stage failed (exit {code}): {reasons[code]}"
    assert not (tmp_path / "runs" / "tf" / "logs").exists()
    if code == 2:  # refresh: --from-scratch with --train is passed on; without it, it is a one-line config error
        asked.clear()
        exit_code, out, err = _cli(["refresh", str(config), "--against", str(tmp_path), "--train", "--from-scratch"],
                                   capsys)
        assert exit_code == code and asked["from_scratch"] is True
        exit_code, out, err = _cli(["refresh", str(config), "--against", str(tmp_path), "--from-scratch"], capsys)
        assert exit_code == 2 and len(err.strip().splitlines()) == 1 and "--train" in err, err


def test_late_stage_keys_fail_before_any_stage(tmp_path, capsys):
    cfg = _yaml(tmp_path, _tiny_run(tmp_path, "late"))
    for override, message in (("tokenizer.path=/nonexistent/tokenizer.json",
                               "tokenizer.path: /nonexistent/tokenizer.json does not exist"),
                              ("train.init_from=/nonexistent/run", "train.init_from: /nonexistent/run does not exist"),
                              ("train.model.max_seq_len=32", "train.model.max_seq_len (32) < packing.seq_len (64)")):
        started = time.perf_counter()
        code, out, err = _cli(["run", str(cfg), "--set", override], capsys)
        seconds = time.perf_counter() - started
        assert code == 2 and err.strip().startswith(f"corpusmill run: {message}") and "[1/4]" not in out, err
        assert len(err.strip().splitlines()) == 1 and seconds < 5, seconds
    bad_model = ["quality.enabled=true", "quality.model=/nonexistent/q.bin"]
    code, out, err = _cli(["run", str(cfg), "--set", bad_model[0], "--set", bad_model[1]], capsys)
    assert code == 2 and err.strip().startswith("corpusmill run: quality.model: /nonexistent/q.bin does not exist")
    assert not (tmp_path / "runs" / "late").exists()  # nothing was written
    bad_tok = tmp_path / "broken.json"
    bad_tok.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^tokenizer.path: .*broken.json is not a valid tokenizer.json"):
        run_stages(load_config(cfg, [f"tokenizer.path={bad_tok}"]), ("clean", "shards"), log=lambda _: None)

    # without a trained model, a changed shards key re-runs the shards (nothing refused), the clean is kept
    code, out, err = _cli(["prepare", str(cfg)], capsys)
    assert code == 0, err
    clean = _snapshot(tmp_path / "runs" / "late")
    code, out, err = _cli(["run", str(cfg), "--set", "packing.seq_len=32"], capsys)
    assert code == 0, err
    assert "[1/4] clean: already done with this config, skipped" in out and _snapshot(tmp_path / "runs" / "late") == clean


# ------------------------------------------------------------------------------------------ clean failures


def _corpusmill(args: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "cli.main", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, **kwargs)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_sigint_to_prepare_is_one_line_exit_130_and_resumable(tmp_path):
    corpus = _jsonl(tmp_path / "in" / "c.jsonl", _records(300))
    cfg = _yaml(tmp_path, {**_data(tmp_path, "sig", [corpus]), "runner": {"name": "direct", "workers": 2}})
    progress = tmp_path / "runs" / "sig" / ".progress"
    proc = _corpusmill(["prepare", str(cfg)], tmp_path)
    deadline = time.time() + 300
    while time.time() < deadline and not (progress.is_dir() and any(progress.iterdir())):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    workers = _children(proc.pid)
    assert len(workers) >= 2  # the local runner's worker processes are running
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out[-2000:], err[-3000:])
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 3 and "interrupted" in lines[-1] and "Traceback" not in err, err
    time.sleep(1.5)
    assert not [p for p in workers if Path(f"/proc/{p}").exists()], "worker processes outlived the launcher"
    assert _manifest_or_none(tmp_path, "sig") is None or "clean" not in _manifest(tmp_path, "sig")["stages_done"]

    rerun = _corpusmill(["prepare", str(cfg)], tmp_path)
    out, err = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, err[-3000:]
    assert _manifest(tmp_path, "sig")["status"] == "complete"
    # Beam's INFO/WARNING lines (harness start, "apitools not found", ...) are off by default
    noisy = [line for line in err.splitlines() if line.startswith(("INFO", "WARNING"))]
    assert not noisy, noisy[:5]
    # -v restores them
    empty = tmp_path / "in" / "empty.jsonl"
    empty.write_bytes(b"")
    loud_cfg = _yaml(tmp_path, {**_data(tmp_path, "loud", [empty]), "runner": {"name": "direct", "workers": 2}})
    loud = _corpusmill(["prepare", str(loud_cfg), "-v"], tmp_path)
    out, err = loud.communicate(timeout=600)
    assert loud.returncode == 0, err[-2000:]
    assert any(line.startswith("INFO") and "apache_beam" in line for line in err.splitlines()), err[-2000:]


def _manifest_or_none(tmp_path: Path, name: str) -> dict | None:
    path = tmp_path / "runs" / name / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def _read_only(run_dir: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``command`` with ``run_dir`` read-only: a private read-only bind mount as root (root ignores file
    modes), the directory's mode otherwise."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare: cannot make a directory read-only")
        script = (f"mount --bind {run_dir} {run_dir} && mount -o remount,bind,ro {run_dir} && "
                  + " ".join(f"'{c}'" for c in command))
        probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --make-rprivate / && true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip("no private mount namespace here")
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount --make-rprivate / && " + script], cwd=cwd,
                              capture_output=True, text=True, env=env, timeout=600)
    run_dir.chmod(0o555)
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    finally:
        run_dir.chmod(0o755)


def test_a_read_only_run_directory_is_one_line_exit_5(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    cfg = _yaml(tmp_path, _data(tmp_path, "ro", [empty]))
    code, out, err = _cli(["prepare", str(cfg)], capsys)
    assert code == 0, err
    run_dir = tmp_path / "runs" / "ro"
    for command in (["report", str(run_dir)], ["prepare", str(cfg)]):
        done = _read_only(run_dir, [PYTHON, "-m", "cli.main", *command], tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 5, (done.stdout[-1000:], done.stderr[-2000:])
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "Read-only file system" in lines[0] or "Permission denied" in lines[0]


def test_truncated_compressed_input_is_quarantined_with_its_position(tmp_path, capsys):
    import zstandard

    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:  # ~0.9 MB of distinct text: several zstd blocks
        records = [json.loads(line)["text"][:1000] for line in fh]
    raw = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(records)).encode()
    def zstd(data: bytes) -> bytes:  # streamed, as the zstd tool writes large files (no single-segment frame)
        compressor = zstandard.ZstdCompressor().compressobj()
        return compressor.compress(data) + compressor.flush()

    for suffix, compress in ((".gz", gzip.compress), (".zst", zstd)):
        whole = compress(raw)
        path = tmp_path / f"cut.jsonl{suffix}"
        path.write_bytes(whole[: len(whole) * 2 // 3])
        from pipelines.config import InputConfig

        items = list(read_file(str(path), InputConfig(paths=[str(path)])))
        cut = [i for i in items if isinstance(i, Quarantined)]
        docs = [i for i in items if not isinstance(i, Quarantined)]
        assert len(cut) == 1 and cut[0].kind == "truncated_file", cut
        assert cut[0].position == len(docs) + 1 and cut[0].byte_offset == sum(
            len(line) + 1 for line in raw.split(b"\n")[: len(docs)])
        assert "record" in cut[0].reason and str(cut[0].position) in cut[0].reason
        assert 0 < len(docs) < len(records)
        # a whole file reads completely; its gzip trailer cut off is still a truncation
        path.write_bytes(whole)
        assert all(not isinstance(i, Quarantined) for i in read_file(str(path), InputConfig(paths=[str(path)])))
    path = tmp_path / "trailer.jsonl.gz"
    path.write_bytes(gzip.compress(raw)[:-4])
    kinds = [i.kind for i in read_file(str(path), InputConfig(paths=[str(path)])) if isinstance(i, Quarantined)]
    assert kinds == ["truncated_file"]
    # `corpusmill pii` on a truncated file: one line for the cut record, no raw EOFError
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(raw)[: len(gzip.compress(raw)) // 2])
    code, out, err = _cli(["pii", str(path), "--out", str(tmp_path / "spans.jsonl"), "--ner", "off"], capsys)
    assert code == 0 and "EOFError" not in err and "Traceback" not in err
    skipped = [line for line in err.splitlines() if "skipped record" in line]
    assert len(skipped) == 1 and "compressed file ends before" in skipped[0]


# --------------------------------------------------------------------------------------- consistent answers


def test_configs_named_in_the_readme_exist_and_load():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    import re

    named = set(re.findall(r"configs/[\w./-]+\.yaml", readme))
    assert "configs/refresh.yaml" in named
    for name in named:
        load_config(REPO / name)
    refresh, demo = load_config(REPO / "configs/refresh.yaml"), load_config(REPO / "configs/demo.yaml")
    for section in ("normalize", "filters", "exact_dedup", "near_dedup", "quality", "pii"):  # --against demo runs
        assert getattr(refresh, section) == getattr(demo, section), section


def test_version(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"corpusmill {metadata.version('corpusmill')}"


def test_quality_score_skips_chinese_like_prepare_and_finds_the_default_model(tmp_path, capsys, monkeypatch):
    """Without --model the command uses the model prepare would (quality.model, else the cached default one,
    trained once into the runs directory's cache); Chinese documents are kept unscored, with the reason."""
    monkeypatch.delenv("CORPUSMILL_CACHE")  # this test is about the runs directory's own cache
    with gzip.open(REPO / "data" / "quality" / "quality_train_subset.jsonl.gz", "rt", encoding="utf-8") as fh:
        labelled = [json.loads(line) for line in fh][:400]
    train_data = _jsonl(tmp_path / "labelled.jsonl", labelled)
    small = {"epoch": 2, "dim": 8, "bucket": 1000, "folds": 2, "heldout_fraction": 0.0, "frequent_words": 50,
             "hash_bits": 12}
    from transforms.quality.step import QualityConfig
    from transforms.text_units import cjk_ratio

    quality = {"train_data": str(train_data), "train": small}
    if "models" in QualityConfig.model_fields:  # no Chinese model configured: Chinese text is kept unscored
        quality["models"] = {}
    config = _yaml(tmp_path, {"name": "q", "input": {"paths": ["x"]}, "output": {"runs_dir": str(tmp_path / "runs")},
                              "quality": quality})
    zh = [r for r in _records(600, ("reviews_zh", "linux_doc_zh")) if cjk_ratio(r["text"]) > 0.5][:3]
    en = _records(3, ("austen",))
    docs = _jsonl(tmp_path / "docs.jsonl", [{"id": f"d{i}", "text": r["text"]} for i, r in enumerate(en + zh)])
    out_path = tmp_path / "scores.jsonl"
    code, out, err = _cli(["quality", "score", str(docs), "--out", str(out_path), "--config", str(config),
                           "--id-field", "id", "--runner", "inprocess"], capsys)
    assert code == 0, err
    assert "training the default model" in err and str(tmp_path / "runs" / ".cache" / "quality") in err
    rows = {r["id"]: r for r in map(json.loads, out_path.read_text(encoding="utf-8").splitlines())}
    for i in range(3, 6):  # Chinese: no model score; the text-ness judge keeps real text, as prepare does
        assert rows[f"d{i}"]["score"] is None and rows[f"d{i}"]["keep"] is True
        assert rows[f"d{i}"]["skipped"] == "language zh: no quality model (quality.models.zh)"
        assert rows[f"d{i}"]["policy"] == "judge" and rows[f"d{i}"]["textness"] >= 0.5
    assert all(isinstance(rows[f"d{i}"]["score"], float) and "skipped" not in rows[f"d{i}"] for i in range(3))
    assert "3 unscored" in out
    # a second time the cached model is used: nothing is trained
    code, out, err = _cli(["quality", "score", str(docs), "--out", str(out_path), "--config", str(config),
                           "--runner", "inprocess"], capsys)
    assert code == 0 and "training the default model" not in err


def test_report_duplicate_bars_quality_legend_and_sankey_labels():
    from collections import Counter

    from report.data import DocStats, RunData
    from report.figures import distribution_figures, node_labels, pipeline_edges, sankey_label_boxes, sankey_layout
    from runio.layout import RunPaths

    docs = DocStats(quality_kept=[0.9] * 274, quality_removed=[0.1] * 88,
                    quality_kept_unscored=Counter({"script cjk": 286}), kept_chars=[100] * 10,
                    near_clusters=Counter({"a": 2, "b": 2, "c": 7}), exact_groups=Counter({str(i): 1 for i in range(14)}))
    figures = dict(distribution_figures(docs, 40)[0])
    for bar in figures["dup_clusters"].data:  # each bar stays inside its own size's bin
        for x in bar.x:
            left, right = x + bar.offset, x + bar.offset + bar.width
            assert x - 0.5 <= left and right <= x + 0.5 and left <= x <= right
    sizes = {bar.name.split(" (")[0]: dict(zip(bar.x, bar.y)) for bar in figures["dup_clusters"].data}
    assert sizes == {"near-duplicate clusters": {2: 2, 7: 1}, "exact-duplicate groups": {2: 14}}
    quality = figures["quality"]
    assert "286" in quality.layout.title.text and "script cjk" in quality.layout.title.text
    assert any("274" in t.name and "286" in t.name for t in quality.data)

    # the demo run's numbers: no two labels of the pipeline graph overlap
    steps = [("normalize", 1455, 1455, {}), ("filters", 1455, 670, {f"rule_{i}_long_name": n for i, n in enumerate(
        [569, 70, 64, 22, 16, 10, 9, 5, 5, 4, 3, 2, 2, 2, 1, 1])}), ("exact_dedup", 670, 656, {"exact_duplicate": 14}),
        ("near_dedup", 656, 648, {"near_duplicate": 8}), ("quality", 648, 560, {"low_quality": 88}),
        ("pii", 560, 560, {})]
    stats = {"documents_read": 1455, "kept": 560, "quarantined": {"total": 0, "by_kind": {}},
             "steps": [{"step": s, "in": i, "kept": k, "removed": i - k, "removed_by_reason": r, "busy_seconds": 1.0}
                       for s, i, k, r in steps]}
    shards = {"totals": {"train": {"docs": 551, "tokens": 372118, "rows": 728, "fill_ratio": 0.998},
                         "val": {"docs": 9, "tokens": 3831, "rows": 8, "fill_ratio": 0.935}}}
    data = RunData(paths=RunPaths("/nonexistent"), manifest={"inputs": [{"bytes": 1_300_000}],
                                                              "timings": {"train_seconds": 157.5}},
                   stats=stats, shards=shards, metrics=[{"step": 59, "tokens_seen": 745512, "step_time_s": 1.0}],
                   docs=DocStats(pii_spans=Counter({"PERSON": 1053, "EMAIL_ADDRESS": 274})))
    edges = [e for e in pipeline_edges(data) if e.documents > 0]
    labels = node_labels(data, edges)
    assert "372k tokens" in labels["train shards"] and "746k tokens" in labels["model"]
    names = list(dict.fromkeys(n for e in edges for n in (e.source, e.target)))
    boxes = list(sankey_label_boxes(names, labels, sankey_layout(names, edges, labels)).items())
    clashes = [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:] if box.overlaps(other)]
    assert not clashes, clashes


def test_small_inputs_report_zero_validation_documents(tmp_path):
    from tokenizer.build import build_shards
    from tokenizer.config import PackingConfig, TokenizerConfig
    from tokenizer.docs import write_docs_parquet

    texts = [r["text"] for r in _records(3, ("austen",))]
    write_docs_parquet(str(tmp_path / "docs" / "docs-00000-of-00001.parquet"),
                       [{"id": 7 * i + 1, "text": t} for i, t in enumerate(texts)])
    manifest = build_shards(tmp_path, TokenizerConfig(vocab_size=300), PackingConfig(seq_len=64, val_fraction=0.0))
    assert manifest["totals"]["val"]["docs"] == 0 and manifest["totals"]["val"]["docs_split"] == 0
    assert manifest["totals"]["train"]["docs"] == 3


def test_temporaries_of_dead_writers_are_removed_and_a_failed_model_save_leaves_none(tmp_path, monkeypatch):
    from pipelines.rundir import remove_stale_temporaries
    from runio.layout import RunPaths
    from transforms.quality import step as quality_step

    monkeypatch.delenv("CORPUSMILL_CACHE")  # the runs directory's own cache, which no other test writes to
    paths = RunPaths(tmp_path / "runs" / "t")
    (paths.shards).mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [paths.shards / f"train-00000.tmp-{dead.pid}-0123abcd.arrow", paths.root / f"stats.json.tmp-{dead.pid}-deadbeef"]
    live = paths.shards / f"train-00001.tmp-{os.getpid()}-0123abcd.arrow"
    cache = paths.cache_for("quality")
    cache.mkdir(parents=True)
    stale.append(cache / f".quality-default-x.bin.{dead.pid}.tmp.bin.order.npz")
    for p in [*stale, live]:
        p.write_bytes(b"x")
    assert sorted(remove_stale_temporaries(paths)) == sorted(stale)
    assert live.exists() and not any(p.exists() for p in stale)

    class Broken:
        def save(self, path, card):
            Path(path).write_bytes(b"half")
            Path(path + ".order.npz").write_bytes(b"half")
            raise KeyboardInterrupt

    monkeypatch.setattr(quality_step, "load_labeled", lambda *a, **k: ([], []))
    monkeypatch.setattr(quality_step, "train_quality_model", lambda *a, **k: (Broken(), {"data": {}}))
    with pytest.raises(KeyboardInterrupt):
        quality_step.ensure_default_model(tmp_path / "cache", quality_step.QualityConfig(), log=lambda _: None)
    # nothing half-written is left (the training lock beside the model is not a model)
    assert not [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]


def test_a_resumed_run_notices_changed_inputs_instead_of_skipping_the_clean(tmp_path, monkeypatch):
    """`run` keeps a clean done before only if its inputs are the same: unchanged (size and mtime as recorded:
    nothing hashed) or touched with the same bytes → skipped; another content → refused in one line naming the
    file, nothing touched; with --overwrite the clean runs again on the new content."""
    import pipelines.run as run_module

    records = _records(60, ("austen", "jargon"))
    corpus = _jsonl(tmp_path / "in" / "c.jsonl", records[:20])
    cfg = validate_config(_data(tmp_path, "inputs", [corpus]))
    stages = ("clean", "shards")
    first = run_stages(cfg, stages, resume=True, log=lambda _: None)
    assert first["inputs_stat"] == {str(corpus): [corpus.stat().st_size, corpus.stat().st_mtime_ns]}
    run_dir = tmp_path / "runs" / "inputs"
    clean = _snapshot(run_dir)

    hashed: list[str] = []
    real_sha256 = run_module.sha256_file
    monkeypatch.setattr(run_module, "sha256_file",  # the inputs hashed (the shard manifest is hashed too)
                        lambda p: (str(p) == str(corpus) and hashed.append(str(p))) or real_sha256(p))
    logged: list[str] = []
    run_stages(cfg, stages, resume=True, log=logged.append)
    assert "[1/2] clean: already done with this config, skipped" in logged and not hashed
    os.utime(corpus, ns=(time.time_ns(), time.time_ns() + 10**9))  # touched, same bytes
    logged.clear()
    run_stages(cfg, stages, resume=True, log=logged.append)
    assert "[1/2] clean: already done with this config, skipped" in logged and hashed == [str(corpus)]

    _jsonl(corpus, records[20:60])  # other documents under the same name
    with pytest.raises(ConfigError, match=r"holds the clean of other inputs \(its input files changed: c\.jsonl "
                                          r"changed\); pass --overwrite"):
        run_stages(cfg, stages, resume=True, log=lambda _: None)
    assert _snapshot(run_dir) == clean
    again = run_stages(cfg, stages, resume=True, overwrite=True, log=lambda _: None)
    assert again["counts"]["read"] == 40 and again["inputs"][0]["sha256"] != first["inputs"][0]["sha256"]
    from pipelines.run import changed_inputs

    added = _jsonl(tmp_path / "in" / "d.jsonl", records[:5])
    two = validate_config(_data(tmp_path, "inputs", [corpus, added]))
    assert changed_inputs(two, again) == "its input files changed: d.jsonl new"
    assert changed_inputs(validate_config(_data(tmp_path, "inputs", [added])), {**again, "inputs_stat": {}}) == \
        "its input files changed: d.jsonl new, c.jsonl gone"
    logged.clear()
    run_stages(cfg, stages, resume=True, log=logged.append)
    assert "[1/2] clean: already done with this config, skipped" in logged


def test_a_whole_run_shaped_like_the_demo_prints_no_library_log_lines(tmp_path):
    """What `make demo` runs (`corpusmill run`: the direct runner with 2 worker processes, torchrun with 2 ranks,
    the report), on a small slice: stdout holds corpusmill's own lines only, stderr nothing, no Beam INFO/WARNING
    line (harness start, "apitools not found", ...) and no torch/glog warning."""
    corpus = _jsonl(tmp_path / "c.jsonl", _records(200))
    data = {**_data(tmp_path, "quiet", [corpus]), "runner": {"name": "direct", "workers": 2}}
    data["train"] = {"device": "cpu", "model": {"dim": 32, "n_layers": 1, "n_heads": 2}, "mesh": {"dp": 2},
                     "batch": {"global_batch_size": 4, "micro_batch_size": 2}, "steps": 2,
                     "eval": {"interval": 2, "max_rows": 4, "domain_key": "source"},  # the ranks read the docs
                     "checkpoint": {"interval": 1, "keep_last": 1}, "monitoring": {"port": 0}}
    done = subprocess.run([PYTHON, "-m", "cli.main", "run", str(_yaml(tmp_path, data))], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=900)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "[3/4] train: done" in done.stdout and "[4/4] report: done" in done.stdout
    import re

    noise = [line for line in (done.stdout + done.stderr).splitlines()
             if re.match(r"(INFO|WARNING|ERROR|DEBUG)\b|[IWE]\d{4} ", line) or "apitools" in line or "harness" in line]
    assert not noise, noise[:5]
    assert not [line for line in done.stderr.splitlines() if line.strip()], done.stderr[-2000:]


# ------------------------------------------------------------------------------------ misspelt options


@pytest.mark.parametrize("stray", [["--sett", "filters.enabled=false"], ["--overwirte"], ["--from-scratch"],
                                   ["second.yaml"]])
def test_a_misspelt_option_is_an_error_not_a_beam_option_dropped(tmp_path, capsys, stray):
    """The commands that pass what their own options leave to Beam refuse what Beam does not know either (Beam
    would drop it with a log line, and the run would go on without the user's change)."""
    cfg = _yaml(tmp_path, _data(tmp_path, "typo", [_jsonl(tmp_path / "in" / "a.jsonl", _records(5, ("austen",)))]))
    with pytest.raises(SystemExit) as exited:
        main(["prepare", str(cfg), *stray])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"unrecognized arguments: {' '.join(stray)}" in err, err
    assert not (tmp_path / "runs" / "typo").exists()


def test_beam_and_dask_pipeline_options_still_pass():
    from pipelines.runners import unrecognized_pipeline_args

    assert unrecognized_pipeline_args(["--dask_partitions=3", "--direct_num_workers", "2", "--experiments=x",
                                       "--flink_master=localhost:8081"]) == []
    assert unrecognized_pipeline_args(["--dask_partitions=3", "--sett", "a=1"]) == ["--sett", "a=1"]


def test_a_run_named_by_its_day_and_a_misspelt_runner(tmp_path, capsys):
    """YAML reads `name: 2024-12-04` as a date: it names the run as written; a number is refused saying how to
    quote it. A runner Beam cannot create is refused before any stage, with corpusmill's runner names."""
    data = _data(tmp_path, "x", [_jsonl(tmp_path / "in" / "a.jsonl", _records(3, ("austen",)))])
    cfg = _yaml(tmp_path, data)
    assert load_config(cfg, ["name=2024-12-04"]).name == "2024-12-04"
    with pytest.raises(ConfigError, match=r"name: was read as a number \(123\); quote it"):
        load_config(cfg, ["name=123"])
    code, out, err = _cli(["prepare", str(cfg), "--set", "runner.name=drect"], capsys)
    assert code == 2 and "runner.name: unknown runner 'drect': expected one of direct, inprocess, dask" in err, err
    assert "[1/2]" not in out and not (tmp_path / "runs" / "x").exists()
    assert load_config(cfg, ["runner.name=PrismRunner"]).runner.name == "PrismRunner"

"""The Beam build of shards on the demo corpus: exact round trip, determinism across workers and batching, CLI."""
from __future__ import annotations

import gzip
import json
import os

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from tokenizers import Tokenizer

from cli.tokenizer import SEGMENT_OPEN, format_row
from runio.layout import RunPaths
from tokenizer.build import SLICE_BATCHES, build_shards, doc_units, scratch_dir
from tokenizer.config import PackingConfig, TokenizerConfig
from tokenizer.docs import in_val_split, write_docs_parquet
from tokenizer.shards import ShardReader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "data", "demo", "corpus.jsonl.gz")
SEQ_LEN = 2048


def demo_docs() -> list[dict]:
    with gzip.open(DEMO, "rt", encoding="utf-8") as f:
        return [{"id": 10 * i + 3, "text": json.loads(line)["text"], "source": DEMO} for i, line in enumerate(f)]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("demo_run")
    docs = demo_docs()
    for k in range(3):  # the cleaning pipeline writes several files, each sorted by id
        write_docs_parquet(str(run / "docs" / f"part-{k:05d}.parquet"), docs[k * 500 : (k + 1) * 500])
    tok_cfg = TokenizerConfig(vocab_size=4000)
    packing = PackingConfig(seq_len=SEQ_LEN, val_fraction=0.02)
    manifest = build_shards(str(run), tok_cfg, packing)
    return run, docs, manifest, packing


def test_round_trip_every_document_token_for_token(demo_run):
    run, docs, manifest, packing = demo_run
    tok = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json"))
    eos = tok.token_to_id("<|eos|>")
    pieces: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    for split in ("train", "val"):
        reader = ShardReader(str(run / "shards"), split, expected_tokenizer_sha256=manifest["tokenizer_sha256"])
        reader.verify()
        for r in range(len(reader)):
            tokens, doc_lens, doc_ids = reader.row(r)
            at = 0
            for n, doc_id in zip(doc_lens.tolist(), doc_ids.tolist()):
                pieces.setdefault(doc_id, []).append((r, at, np.array(tokens[at : at + n])))
                at += n
            assert (tokens[at:] == reader.pad_id).all()
    val = set(np.array([d["id"] for d in docs])[in_val_split([d["id"] for d in docs], 0.02, 0)].tolist())
    assert val and manifest["totals"]["val"]["docs"] == len(val)
    encodings = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    assert set(pieces) == {d["id"] for d in docs}
    for doc, enc in zip(docs, encodings):
        rebuilt = np.concatenate([p[2] for p in pieces[doc["id"]]])  # rows are written in plan order
        assert rebuilt.tolist() == enc.ids + [eos], f"document {doc['id']} differs after the round trip"
        if len(rebuilt) <= SEQ_LEN:
            assert len(pieces[doc["id"]]) == 1
    assert manifest["totals"]["train"]["fill_ratio"] >= 0.995


def test_val_documents_never_in_train(demo_run):
    run, docs, manifest, _ = demo_run
    train_ids = {i for _, _, ids in ShardReader(str(run / "shards"), "train") for i in ids.tolist()}
    val_ids = {i for _, _, ids in ShardReader(str(run / "shards"), "val") for i in ids.tolist()}
    assert val_ids and not train_ids & val_ids
    assert len(train_ids | val_ids) == len(docs)


def test_identical_shards_on_any_workers_and_batching(demo_run, tmp_path):
    run, docs, manifest, packing = demo_run
    subset = docs[:400]
    tok_cfg = TokenizerConfig(path=str(run / "tokenizer" / "tokenizer.json"))
    small = packing.model_copy(update={"seq_len": 256, "rows_per_shard": 64, "window": 128, "max_open_rows": 16})
    layouts = {"one_file": [subset], "four_files": [subset[k::4] for k in range(4)]}
    shas = []
    for (name, parts), batch_docs, workers in zip(layouts.items(), (4096, 13), (1, 2)):
        rundir = tmp_path / name
        for k, part in enumerate(parts):
            write_docs_parquet(str(rundir / "docs" / f"part-{k}.parquet"), part)
        options = PipelineOptions([f"--direct_num_workers={workers}", "--direct_running_mode=multi_threading"])
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
        run = RunPaths(rundir) if name == "four_files" else str(rundir)  # a run's layout, or its directory
        result = build_shards(run, tok_cfg, small.model_copy(update={"encode_batch_docs": batch_docs}), pipeline)
        shas.append([(e["file"], e["sha256"]) for split in ("train", "val") for e in result["splits"][split]])
    assert len(shas[0]) > 4 and shas[0] == shas[1]


def test_row_group_slices_cover_every_row_once(demo_run):
    run, docs, _, _ = demo_run
    files = sorted(str(f) for f in (run / "docs").glob("*.parquet"))
    whole = doc_units(files, slice_bytes=1 << 40)
    assert [(f, rg) for f, rg, _, _ in whole] == [(f, 0) for f in files]  # one slice a row group
    sliced = doc_units(files, slice_bytes=20_000)
    assert len(sliced) > 3 * len(whole)
    for path in files:
        mine = [(first, end) for f, _, first, end in sliced if f == path]
        assert mine[0][0] == 0 and all(a[1] == b[0] for a, b in zip(mine, mine[1:])) and mine[-1][1] == pq.ParquetFile(path).metadata.num_rows


def test_sliced_reading_writes_the_same_shards_and_no_tokens_stay_behind(demo_run, tmp_path):
    """Row groups read in many slices, each encode batch's tokens in a file of their own (issue 44): the same shard
    bytes as one slice a row group; the scratch folder of token files is gone afterwards."""
    run, docs, manifest, packing = demo_run
    tok_cfg = TokenizerConfig(path=str(run / "tokenizer" / "tokenizer.json"))
    write_docs_parquet(str(tmp_path / "docs" / "part-0.parquet"), docs)
    many = packing.model_copy(update={"encode_batch_bytes": 1024})  # slices of ~2 KB of text: hundreds
    assert len(doc_units([str(tmp_path / "docs" / "part-0.parquet")], SLICE_BATCHES * 1024)) > 100
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    result = build_shards(str(tmp_path), tok_cfg, many, beam.Pipeline(runner=FnApiRunner(), options=options))
    digest = lambda m: [(e["file"], e["sha256"]) for split in ("train", "val") for e in m["splits"][split]]  # noqa: E731
    assert digest(result) == digest(manifest)
    assert not os.path.exists(scratch_dir(str(tmp_path / "shards")))
    assert not os.path.exists(scratch_dir(str(run / "shards")))


def test_inspect_marks_document_boundaries(demo_run, capsys):
    from cli.main import main

    run, _, _, _ = demo_run
    reader = ShardReader(str(run / "shards"))
    multi = next(r for r in range(len(reader)) if len(reader.row(r)[1]) > 2)
    assert main(["inspect", str(run / "shards"), "--row", str(multi), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "fill" in out and "verify: all" in out
    check = json.loads((run / "shards" / "manifest.json").read_text())["tokenizer_check"]  # issue 15, item 6
    assert check["by_language"] and all(row["bytes_per_token"] > 1 for row in check["by_language"].values())
    assert "bytes per token by language" in out
    tok = Tokenizer.from_file(str(run / "tokenizer" / "tokenizer.json"))
    text = format_row(reader, tok, multi)
    assert text.count(SEGMENT_OPEN + "doc ") == len(reader.row(multi)[1])
    assert text in out
    assert main(["inspect", str(run)]) == 0  # the run directory names its shards
    assert f"shards: {run / 'shards'}" in capsys.readouterr().out


def test_inspect_takes_a_run_directory_with_its_own_manifest(demo_run, tmp_path, capsys):
    from cli.main import main

    run, _, _, _ = demo_run
    (tmp_path / "manifest.json").write_text(json.dumps({"run": "demo", "stages": {}}))  # a run's manifest
    (tmp_path / "shards").symlink_to(run / "shards")
    assert main(["inspect", str(tmp_path)]) == 0
    assert f"shards: {tmp_path / 'shards'}" in capsys.readouterr().out


def test_inspect_into_a_closed_pipe_stops_quietly(demo_run):
    """`corpusmill inspect ... | head`: the reader leaves early; exit 141 (as for SIGPIPE), no traceback."""
    import subprocess
    import sys

    run, _, _, _ = demo_run
    rows = [arg for r in range(40) for arg in ("--row", str(r))]
    code = f"import sys; from cli.main import main; sys.exit(main(['inspect', {str(run / 'shards')!r}, *{rows!r}]))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.stdout.read(100)
    proc.stdout.close()  # as `head` does once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err


def test_inspect_reports_a_damaged_directory(demo_run, tmp_path, capsys):
    from cli.main import main

    assert main(["inspect", str(tmp_path)]) == 1
    assert "no shard manifest" in capsys.readouterr().err


def test_tokenizer_train_command(tmp_path, capsys):
    from cli.main import main

    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", DEMO, "--out", str(out), "--param", "vocab_size=600",
                 "--param", "sample_bytes=200000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vocab_size"] == 600 and 0 < report["sample_bytes"] <= 200000
    assert Tokenizer.from_file(str(out)).token_to_id("<|eos|>") == 2
    assert main(["tokenizer", "train", DEMO, "--out", str(out), "--param", "model=spm"]) == 2
    assert "tokenizer.model" in capsys.readouterr().err


def test_tokenizer_train_reads_a_folder_of_text_files(tmp_path, capsys):
    """A folder without docs Parquet files is read as the pipeline reads an input folder (.txt, JSONL, ...)."""
    from cli.main import main

    folder = tmp_path / "my texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("The committee met on Tuesday to discuss the budget. " * 40, encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("Rain is expected over the hills tomorrow morning. " * 40, encoding="utf-8")
    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", str(folder), "--out", str(out), "--param", "vocab_size=300"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 2
    assert Tokenizer.from_file(str(out)).get_vocab_size() == 300

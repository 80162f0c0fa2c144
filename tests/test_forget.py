"""`corpusmill forget` and the takedown ledger (issue 46 B): forgotten documents leave docs/, removed/ says why,
every shard is rebuilt without them (byte for byte what a prepare that drops them makes), a checkpoint trained on
them is not resumed, and they stay out when they come back: by id, by content under another id, near copies."""
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cli.main import main
from beamio.write import DOCS_SCHEMA, doc_row, parquet_writer
from experiments.ablate import Variant, variant_config
from lineage.forget import duplicates_in_docs
from pipelines.config import validate_config
from pipelines.run import run_stages
from runio.errors import ExitCode
from runio.layout import RunPaths
from runio.ledger import (Forgotten, LedgerEntry, LedgerError, Signature, append_entry, read_ledger,
                          read_signatures)
from transforms.near_dedup import NearDedupConfig
from transforms.takedown import TakedownIndex, content_hash, signature_params, signatures_of

FORGET = 20
TRAIN = {"device": "cpu", "steps": 2, "seed": 3, "model": {"dim": 32, "n_layers": 1, "n_heads": 2, "multiple_of": 16},
         "mesh": {"dp": 1}, "batch": {"global_batch_size": 2, "micro_batch_size": 2},
         "optimizer": {"lr": 3e-3, "warmup_steps": 1}, "checkpoint": {"interval": 2, "keep_last": 1},
         "eval": {"interval": 0}, "metrics": {"tensorboard": False, "peak_flops": 1e11},
         "monitoring": {"prometheus": False}}


def _config(tmp_path: Path, name: str, paths: list[Path], **extra) -> dict:
    return {"name": name, "input": {"paths": [str(p) for p in paths], "id_field": "key"},
            "output": {"runs_dir": str(tmp_path / "runs")}, "runner": {"name": "inprocess", "workers": 1},
            "quality": {"enabled": False}, "pii": {"enabled": False}, "langid": {"enabled": False},
            "tokenizer": {"vocab_size": 300}, "packing": {"seq_len": 128, "val_fraction": 0.0,
                                                            "rows_per_shard": 16},
            "train": TRAIN, **extra}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _rows(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def _shard_doc_ids(run: RunPaths) -> set[int]:
    ids: set[int] = set()
    for path in run.shards.glob("*.arrow"):
        with pa.memory_map(str(path)) as source:
            for row in pa.ipc.open_file(source).read_all().column("doc_ids").to_pylist():
                ids.update(row)
    return ids


def _shard_bytes(run: RunPaths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.shards.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def forgotten_run(tmp_path_factory, demo_corpus):
    """A run (clean, shards, two training steps), then `forget` of 20 of its documents by input id and
    corpusmill id. Returns what the tests look at."""
    tmp_path = tmp_path_factory.mktemp("forget")
    english = [dict(r, key=f"doc-{i}") for i, r in enumerate(r for r in demo_corpus
                                                           if r["lang"] == "en" and 400 < len(r["text"]) < 3000)]
    docs, spare = english[:60], english[-1]
    source = _write(tmp_path / "corpus.jsonl", docs)
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(_config(tmp_path, "run", [source])))
    cfg = validate_config(yaml.safe_load(config_path.read_text()))
    run_stages(cfg, ("clean", "shards"), log=lambda _: None)
    paths = RunPaths.of(cfg)
    assert main(["train", str(config_path)]) == ExitCode.OK
    kept = {r["id"]: r for r in _rows(paths.docs)}
    removed = _rows(paths.removed)
    # documents some removed duplicate points at stay: forgetting one would let its duplicate back into a fresh
    # clean, and the byte comparison below is about the shards, not about dedup's choices
    pointed = {json.loads(r["annotations"]).get(step, {}).get(key) for r in removed
               for step, key in (("near_dedup", "cluster"), ("exact_dedup", "dup_of"))}
    chosen = [doc_id for doc_id in sorted(kept) if doc_id not in pointed][:FORGET]
    assert len(chosen) == FORGET
    by_key = {json.loads(kept[d]["meta"])["key"]: d for d in chosen}
    ids_file = tmp_path / "ids.txt"
    keys = sorted(by_key)
    # half by input id, half by corpusmill id, with a comment and a blank line
    ids_file.write_text("# request 2026-12-01\n" + "\n".join(keys[:10]) + "\n\n"
                        + "\n".join(str(by_key[k]) for k in keys[10:]) + "\n")
    texts = {d: kept[d]["text"] for d in chosen}
    before = _shard_bytes(paths)
    assert main(["forget", str(paths.root), "--ids-file", str(ids_file), "--reason", "erasure request"]) == 0
    return {"tmp": tmp_path, "cfg": cfg, "config_path": config_path, "paths": paths, "source": source,
            "chosen": set(chosen), "texts": texts, "keys": keys, "spare": spare, "shards_before": before}


def test_forget_removes_them_from_docs_and_every_shard_and_ledgers_them(forgotten_run):
    paths, chosen, texts = forgotten_run["paths"], forgotten_run["chosen"], forgotten_run["texts"]
    kept = _rows(paths.docs)
    assert not chosen & {r["id"] for r in kept}
    assert not set(texts.values()) & {r["text"] for r in kept}
    assert not chosen & _shard_doc_ids(paths)
    assert _shard_doc_ids(paths) == {r["id"] for r in kept}  # every remaining document is still trained on
    assert _shard_bytes(paths) != forgotten_run["shards_before"]

    takedowns = [r for r in _rows(paths.removed) if r["reason"] == "takedown"]
    assert {r["id"] for r in takedowns} == chosen
    assert all(r["removed_by"] == "takedown" and set(json.loads(r["annotations"])) == {"takedown"}
               for r in takedowns)

    [entry] = read_ledger(paths.takedown_ledger)
    assert entry.reason == "erasure request" and set(entry.doc_ids) == chosen
    assert set(entry.ids) == set(forgotten_run["keys"])
    assert {content_hash(t) for t in texts.values()} <= set(entry.content_hashes)
    assert len(read_signatures(paths.takedown_ledger)) == FORGET
    line = json.loads(paths.takedown_ledger.read_text().splitlines()[0])
    assert list(line) == ["time", "reason", "ids", "doc_ids", "content_hashes"] and line["time"].endswith("Z")

    stats = json.loads(paths.stats.read_text())
    assert stats["accounting"]["balanced"], stats["accounting"]["problems"]
    assert stats["steps"][0]["step"] == "takedown"
    assert stats["steps"][0]["removed_by_reason"] == {"takedown": FORGET}
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["counts"]["kept"] == len(kept) and manifest["takedown"]["entries"] == 1
    assert manifest["shards"]["totals"]["train"]["docs"] == len(kept)


def test_the_checkpoint_data_card_and_trace_name_the_forgotten_documents_it_saw(forgotten_run):
    """The card is refreshed by forget while the old shards still exist: it lists exactly the forgotten documents
    among those the 2 steps read (replayed here from Contract 4 on the shards as they were before), and trace
    after the rebuild names that checkpoint for them."""
    import numpy as np

    from lineage.card import read_data_card, refresh_data_cards
    from lineage.trace import TraceQuery, trace

    paths, chosen = forgotten_run["paths"], forgotten_run["chosen"]
    rows = []
    for name, data in sorted(forgotten_run["shards_before"].items()):
        if name.startswith("train-"):
            rows += pa.ipc.open_file(pa.BufferReader(data)).read_all().column("doc_ids").to_pylist()
    order = np.random.Generator(np.random.PCG64([TRAIN["seed"], 0])).permutation(len(rows))
    seen = {d for r in order[:TRAIN["steps"] * TRAIN["batch"]["global_batch_size"]] for d in rows[r]}
    checkpoint = paths.checkpoints / "step-00000002"
    card = read_data_card(paths, checkpoint)
    assert card["withdrawn"]["doc_ids"] == sorted(chosen & seen) and card["withdrawn"]["ledger_entries"] == 1
    assert card["documents"] == len(seen)
    refresh_data_cards(paths.root)  # after the rebuild: the card is kept, only its withdrawn part recomputed
    again = read_data_card(paths, checkpoint)
    assert again["shards_rebuilt"] and {k: v for k, v in again.items() if k != "shards_rebuilt"} == card
    target = sorted(chosen & seen or chosen)[0]
    [record] = trace(paths.root, TraceQuery(doc_ids=[target]))
    assert record["fate"] == "removed" and record["removed_by"] == "takedown"
    assert record["checkpoints"] == (["step-00000002"] if target in seen else [])
    assert record["steps"] is None and "rebuilt" in record["steps_note"]


def test_training_does_not_resume_on_the_rebuilt_shards(forgotten_run, capsys):
    paths = forgotten_run["paths"]
    capsys.readouterr()
    code = main(["train", str(forgotten_run["config_path"]), "--set", "train.steps=4"])
    err = capsys.readouterr()
    assert code == ExitCode.REFUSED
    lines = [line for line in (err.out + err.err).splitlines() if "forgotten" in line]
    assert len(lines) == 1, err
    assert "--from-scratch" in lines[0] and str(paths.takedown_ledger) in lines[0]
    assert (paths.checkpoints / "step-00000002").is_dir()  # nothing was moved or trained


def test_a_later_prepare_into_the_run_drops_them_again_and_rebuilds_the_same_shards(forgotten_run):
    """The forgotten documents are still in the input: a prepare into the same run drops them by id (the takedown
    step), and the shards it builds with the same tokenizer are byte for byte those `forget` rebuilt."""
    paths, tmp = forgotten_run["paths"], forgotten_run["tmp"]
    after_forget = _shard_bytes(paths)
    tokenizer = shutil.copy(paths.tokenizer_json, tmp / "tokenizer.json")  # forget keeps the run's tokenizer
    cfg = validate_config(_config(tmp, "run", [forgotten_run["source"]],
                                  tokenizer={"vocab_size": 300, "path": str(tokenizer)}))
    shutil.rmtree(paths.train)  # prepare refuses to replace shards under a model (that refusal is not tested here)
    run_stages(cfg, ("clean", "shards"), log=lambda _: None)
    assert not forgotten_run["chosen"] & {r["id"] for r in _rows(paths.docs)}
    stats = json.loads(paths.stats.read_text())
    assert stats["steps"][0] == {**stats["steps"][0], "step": "takedown", "removed": FORGET,
                                 "removed_by_reason": {"takedown": FORGET}}
    assert {json.loads(r["annotations"])["takedown"]["matched"] for r in _rows(paths.removed)
            if r["reason"] == "takedown"} == {"doc_id"}
    assert _shard_bytes(paths) == after_forget


def test_refresh_keeps_a_copy_under_another_name_and_id_out(forgotten_run):
    tmp, paths = forgotten_run["tmp"], forgotten_run["paths"]
    copied_id = sorted(forgotten_run["chosen"])[0]
    copy = {"key": "someone-else-7", "url": "corpus://elsewhere/7", "text": forgotten_run["texts"][copied_id]}
    fresh = dict(forgotten_run["spare"], key="new-1")
    new_file = _write(tmp / "later-upload.jsonl", [copy, fresh])
    refresh = validate_config(_config(tmp, "refresh", [forgotten_run["source"], new_file]))
    run_stages(refresh, ("clean",), against=(str(paths.root),), log=lambda _: None)
    out = RunPaths.of(refresh)
    assert [json.loads(r["meta"])["key"] for r in _rows(out.docs)] == ["new-1"]
    [dropped] = [r for r in _rows(out.removed) if r["reason"] == "takedown"]
    assert json.loads(dropped["annotations"])["takedown"]["matched"] == "content_hash"
    stats = json.loads(out.stats.read_text())
    assert stats["steps"][0]["removed_by_reason"] == {"takedown": 1} and stats["accounting"]["balanced"]


def test_an_unknown_id_refuses_and_writes_nothing(forgotten_run, tmp_path, capsys):
    paths = forgotten_run["paths"]
    ledger = paths.takedown_ledger.read_bytes()
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("doc-0\nno-such-document\n")
    assert main(["forget", str(paths.root), "--ids-file", str(ids_file), "--reason", "x"]) == ExitCode.CONFIG
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no-such-document" in err and "nothing was forgotten" in err
    assert paths.takedown_ledger.read_bytes() == ledger


# ------------------------------------------------------------------------------------------- pure cores


def test_ledger_appends_and_refuses_a_damaged_line(tmp_path):
    ledger = tmp_path / "takedown" / "ledger.jsonl"
    append_entry(ledger, LedgerEntry("2026-12-07T01:02:03Z", "licence withdrawn", ["a"], [5], ["ff"]))
    with open(ledger, "a", encoding="utf-8") as fh:
        fh.write('{"time": "2026-12-07T01:02:04Z", "reason": "cut sho')  # a crash mid-append
    append_entry(ledger, LedgerEntry("2026-12-07T01:02:05Z", "r", [], [6], []))
    with pytest.raises(LedgerError, match=r"ledger.jsonl:2: not a JSON line"):
        read_ledger(ledger)
    lines = ledger.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["doc_ids"] == [6]  # the new entry kept its own line


def test_takedown_index_matches_by_id_input_id_content_and_near_copy():
    near = NearDedupConfig()
    text = " ".join(f"word{i} river{i % 7} stone{i % 11}" for i in range(120))
    edited = text.replace("word5 ", "wordfive ", 1)
    [sig] = signatures_of([text], near)
    forgotten = Forgotten(ids={"k1": "t1"}, doc_ids={11: "t0"}, content_hashes={content_hash(text): "t2"})
    index = TakedownIndex(forgotten, "key", [Signature(11, "t3", signature_params(near), sig)], near)
    docs = [{"id": 11, "text": "x", "source": "a.jsonl", "meta": {}},
            {"id": 12, "text": "y", "source": "a.jsonl", "meta": {"key": "k1"}},
            {"id": 13, "text": "  " + text.upper() + "\n", "source": "b.jsonl", "meta": {"key": "other"}},
            {"id": 14, "text": edited, "source": "b.jsonl", "meta": {}},
            {"id": 15, "text": "something else entirely, " * 30, "source": "b.jsonl", "meta": {}}]
    matched = [m and m["matched"] for m in index.match(docs)]
    assert matched == ["doc_id", "input_id", "content_hash", "near_duplicate", None]
    without_near = TakedownIndex(forgotten, "key")
    assert [m and m["matched"] for m in without_near.match(docs)][3:] == [None, None]


def test_duplicates_of_forgotten_documents_are_found_in_docs(tmp_path):
    """``forget --duplicates``: exact (case and spacing aside) and near copies still in docs/, not the others."""
    text = " ".join(f"word{i} river{i % 7} stone{i % 11}" for i in range(120))
    docs = [{"id": 2, "text": text.upper(), "source": "a", "meta": {}, "annotations": {}},
            {"id": 3, "text": text.replace("word9 ", "wordnine ", 1), "source": "a", "meta": {}, "annotations": {}},
            {"id": 4, "text": "an unrelated text about something else, " * 20, "source": "a", "meta": {},
             "annotations": {}}]
    paths = RunPaths(tmp_path / "run")
    paths.docs.mkdir(parents=True)
    parquet_writer(DOCS_SCHEMA)(str(paths.docs / "docs-00000-of-00001.parquet"), [doc_row(d) for d in docs])
    cfg = validate_config(_config(tmp_path, "run", [tmp_path / "x.jsonl"]))
    forgotten = {1: {"id": 1, "text": text, "source": "a", "meta": {}}}
    assert duplicates_in_docs(paths, cfg, forgotten, {}) == {2, 3}


def test_ablation_variants_read_the_runs_ledger(tmp_path):
    """An ablation variant cleans into its own run directory: it names the run's ledger, so even the raw variant
    drops what the run forgot."""
    cfg = validate_config(_config(tmp_path, "run", [tmp_path / "x.jsonl"]))
    run = RunPaths.of(cfg)
    append_entry(run.takedown_ledger, LedgerEntry("2026-12-07T01:02:03Z", "r", [], [1], []))
    variant = variant_config(cfg, Variant("raw"), run.ablation, None)
    assert variant.takedown.ledgers == [str(run.takedown_ledger)]


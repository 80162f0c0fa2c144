"""`corpusmill trace` and the per-checkpoint data cards (issue 46): checked against an independent replay of
Contract 4 written here from the contract (numpy's PCG64 permutation per (seed, epoch); step s of a stretch takes
the next global_batch_size samples), never through the project's sampler or lineage code, and against the rows
the trainer itself reported through ``TrainHooks.on_batch``.

One tiny corpus (60 short documents packed into ~20 rows of 128 tokens) and two trainings on it, 8 steps of 8 rows
(over two epochs): straight through in this process, and 3 steps on two data-parallel ranks (torchrun, FSDP2)
resumed here on one process with another micro-batch layout.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import SampleLog, base_config  # noqa: E402

from beamio.records import doc_id  # noqa: E402
from runio.files import read_jsonl, write_json  # noqa: E402
from runio.layout import RunPaths  # noqa: E402

STEPS, GBS, SEED = 8, 8, 7
FILE_KEYS = {"a.jsonl": "a" * 64, "b.jsonl": "b" * 64}  # stand-ins for the inputs' sha256 (the id key)


def tiny_docs() -> list[dict]:
    from test_hf_export import demo_docs  # noqa: PLC0415 (a test helper module beside this one)

    docs = []
    for i, doc in enumerate(demo_docs(60)):
        source = "a.jsonl" if i % 2 == 0 else "b.jsonl"
        line = i // 2 + 1
        docs.append({"id": doc_id(FILE_KEYS[source], line), "text": doc["text"][:60], "source": source,
                     "meta": {"id": f"rec-{i}", "topic": "even" if i % 2 == 0 else "odd"},
                     "annotations": {"langid": {"lang": "en" if i % 3 else "xx"}}})
    return docs


def train_config(**overrides):
    return base_config({"model": {"dim": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1}, "steps": STEPS,
                        "seed": SEED, "batch": {"global_batch_size": GBS, "micro_batch_size": 4},
                        "checkpoint": {"interval": 2, "keep_last": 10}, "eval": {"interval": 100, "max_rows": 4},
                        **overrides})


class Corpus:
    def __init__(self, root: Path):
        from test_hf_export import build_shards_for  # noqa: PLC0415 (a test helper module beside this one)

        self.base = RunPaths(root / "base")
        self.docs = tiny_docs()
        build_shards_for(self.base, self.docs)
        write_json(self.base.manifest, {"inputs": [{"source": s, "path": f"data/{s}", "sha256": k}
                                                   for s, k in FILE_KEYS.items()]})
        write_json(self.base.stats, {"documents_read": len(self.docs), "quarantined": {"total": 0}})
        self.base.config_yaml.write_text("input: {id_field: id}\nlineage: {card_fields: [topic]}\n")

    def run_dir(self, name: str) -> RunPaths:
        paths = RunPaths(self.base.root.parent / name)
        paths.root.mkdir()
        for item in (self.base.docs, self.base.shards, self.base.tokenizer_dir, self.base.manifest,
                     self.base.stats, self.base.config_yaml):
            target = paths.root / item.name
            (shutil.copytree if item.is_dir() else shutil.copy)(item, target)
        return paths


def train(paths: RunPaths, log: SampleLog, **overrides):
    from trainer_bridge.loop.train import train as run_training  # noqa: PLC0415 (torch, only where trained)

    cfg = train_config(**overrides)
    paths.train.mkdir(parents=True, exist_ok=True)
    paths.train_config.write_text(json.dumps(cfg.model_dump(mode="json")))  # as `corpusmill train` writes it
    return run_training(cfg, paths, hooks=log.hooks())


def train_on_two_ranks(paths: RunPaths, log: SampleLog, **overrides) -> None:
    """Train with torchrun on two data-parallel ranks (FSDP2, gloo); the ranks' rows per step go into ``log``."""
    cfg = train_config(**overrides)
    paths.train.mkdir(parents=True, exist_ok=True)
    paths.train_config.write_text(json.dumps(cfg.model_dump(mode="json")))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(REPO / "tests" / "dist" / "trace_scenario.py"), str(paths.root),
                           str(paths.train_config)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for rank in (0, 1):
        for step, rows in json.loads((paths.root / f"rank{rank}.samples.json").read_text()).items():
            log.sample_ids.setdefault(int(step), []).extend(rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    corpus = Corpus(tmp_path_factory.mktemp("trace"))
    straight, straight_log = corpus.run_dir("straight"), SampleLog()
    train(straight, straight_log)
    resumed, resumed_log = corpus.run_dir("resumed"), SampleLog()
    # dp 2 (micro-batches of 2, 2 accumulation steps) for 3 steps, then resumed here on one process
    train_on_two_ranks(resumed, resumed_log, steps=3, mesh={"dp": 2},
                       batch={"global_batch_size": GBS, "micro_batch_size": 2})
    train(resumed, resumed_log, batch={"global_batch_size": GBS, "micro_batch_size": 8})
    return corpus, {"straight": (straight, straight_log), "resumed": (resumed, resumed_log)}


# -- the independent replay (Contract 4, from the contract's words) -------------------------------------------

def shard_segments(paths: RunPaths) -> list[list[tuple[int, int]]]:
    """Per train row, in manifest order: [(doc id, tokens)] read with pyarrow from the files."""
    manifest = json.loads(paths.shards_manifest.read_text())
    rows = []
    for entry in manifest["splits"]["train"]:
        with pa.memory_map(str(paths.shards / entry["file"])) as source:
            table = pa.ipc.open_file(source).read_all()
        rows += [list(zip(ids, lens)) for ids, lens in zip(table.column("doc_ids").to_pylist(),
                                                           table.column("doc_lens").to_pylist())]
    return rows


def replay(paths: RunPaths, stretches: list[tuple[int, int, int]]) -> dict[int, list[int]]:
    """step → rows, for stretches (first step, first sample, last step): sample g = permutation of epoch
    g // rows, seeded PCG64([seed, epoch]), at g % rows."""
    n_rows = len(shard_segments(paths))
    out = {}
    for first_step, first_sample, last_step in stretches:
        for step in range(first_step, last_step + 1):
            samples = range(first_sample + (step - first_step) * GBS, first_sample + (step - first_step + 1) * GBS)
            out[step] = [int(np.random.Generator(np.random.PCG64([SEED, g // n_rows])).permutation(n_rows)[g % n_rows])
                         for g in samples]
    return out


def expected_steps(paths: RunPaths, steps_rows: dict[int, list[int]], doc: int) -> list[int]:
    segments = shard_segments(paths)
    rows = {r for r, row in enumerate(segments) if any(d == doc for d, _ in row)}
    return sorted(step for step, used in steps_rows.items() if rows & set(used))


# -- the tests ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["straight", "resumed"])
def test_trace_steps_equal_the_replay_of_contract_4(runs, name):
    from lineage.trace import TraceQuery, trace

    corpus, by_name = runs
    paths, log = by_name[name]
    steps_rows = replay(paths, [(0, 0, STEPS - 1)])
    assert {s: sorted(r) for s, r in steps_rows.items()} == {s: sorted(r) for s, r in log.sample_ids.items()}
    assert STEPS * GBS > 2 * len(shard_segments(paths))  # more than two epochs
    kept = [d for d in corpus.docs if any(d["id"] in (i for i, _ in row) for row in shard_segments(paths))]
    chosen = random.Random(46).sample(kept, 50)
    results = trace(paths.root, TraceQuery(ids=[d["meta"]["id"] for d in chosen]))
    by_id = {r["id"]: r for r in results}
    checkpoints = sorted(p.name for p in paths.checkpoints.glob("step-*"))
    for doc in chosen:
        record = by_id[doc["meta"]["id"]]
        assert record["fate"] == "kept" and record["doc_id"] == doc["id"]
        want = expected_steps(paths, steps_rows, doc["id"])
        assert record["steps"] == want, doc["meta"]["id"]
        first = want[0] if want else None
        # step-N holds steps 0 .. N-1: saved after the first such step when N > first
        assert record["checkpoints"] == [c for c in checkpoints if first is not None and int(c[5:]) > first]
        assert record["source"] == doc["source"] and record["position"] == int(doc["meta"]["id"][4:]) // 2 + 1
        assert all(r["split"] == "train" for r in record["rows"]) or record["steps_note"]


def test_run_resumed_from_two_ranks_on_one_logs_two_stretches(runs):
    _, by_name = runs
    paths, _ = by_name["resumed"]
    log = [r for r in read_jsonl(paths.data_order_jsonl)]
    stretches = [r for r in log if r["event"] == "stretch"]
    assert [(r["cause"], r["step"], r["sample"], r["micro_batch_size"], r["dp"], r["world_size"])
            for r in stretches] == [("start", 0, 0, 2, 2, 2), ("resume", 3, 3 * GBS, 8, 1, 1)]
    assert [r["step"] for r in log if r["event"] == "end"] == [3, STEPS]


@pytest.mark.parametrize("name", ["straight", "resumed"])
def test_card_tokens_per_source_sum_to_the_tokens_consumed(runs, name):
    from lineage.card import read_data_card, refresh_data_cards

    _, by_name = runs
    paths, log = by_name[name]
    cards = refresh_data_cards(paths.root)
    assert len(cards) == {"straight": 4, "resumed": 5}[name]  # steps 2, 4, 6, 8; and 3, where the first part stopped
    segments = shard_segments(paths)
    for card_path in cards:
        card = read_data_card(paths, card_path.parent)
        consumed_rows = [r for step in range(card["step"]) for r in log.sample_ids[step]]
        trained_tokens = sum(n for r in consumed_rows for _, n in segments[r])
        assert sum(v["tokens"] for v in card["by_source"].values()) == card["tokens"] == card["tokens_seen"] \
            == trained_tokens
        assert sum(v["tokens"] for v in card["by_language"].values()) == trained_tokens
        assert set(card["by_field"]["topic"]) <= {"even", "odd"}
        assert card["withdrawn"] == {"tokens": 0, "documents": 0, "doc_ids": [], "ledger_entries": 0}


def test_ledger_entry_shows_in_cards_and_the_exported_model_card(runs, tmp_path):
    from lineage.card import read_data_card, refresh_data_cards
    from report.build import data_cards_body
    from trainer_bridge.hf import export_run

    corpus, by_name = runs
    paths, log = by_name["straight"]
    segments = shard_segments(paths)
    first_use = {}
    for step in sorted(log.sample_ids):
        for r in log.sample_ids[step]:
            for d, _ in segments[r]:
                first_use.setdefault(d, step)
    late = next(d for d, s in sorted(first_use.items(), key=lambda kv: kv[1]) if s >= 2)  # first seen at step ≥ 2
    paths.takedown_ledger.parent.mkdir(exist_ok=True)
    entry = {"time": "2026-12-07T01:02:03Z", "reason": "request 17", "ids": ["x"], "doc_ids": [late],
             "content_hashes": ["00"]}
    paths.takedown_ledger.write_text(json.dumps(entry) + "\n")
    try:
        refresh_data_cards(paths.root)
        for checkpoint in sorted(paths.checkpoints.glob("step-*")):
            card = read_data_card(paths, checkpoint)
            saw = card["step"] > first_use[late]
            assert (card["withdrawn"]["doc_ids"] == [late]) is saw, checkpoint.name
            assert (card["withdrawn"]["tokens"] > 0) is saw
        table = data_cards_body(paths)  # the report's "Data seen per checkpoint"
        assert table.count("tokens of 1 documents") == sum(int(c.name[5:]) > first_use[late]
                                                            for c in paths.checkpoints.glob("step-*"))
        export_run(paths.root, tmp_path / "model", say=lambda line: None)
        readme = (tmp_path / "model" / "README.md").read_text()
        assert "**Withdrawn data:**" in readme and "1 document(s) later withdrawn" in readme
    finally:
        paths.takedown_ledger.unlink()
        refresh_data_cards(paths.root)


def test_trace_cli_json_fates_and_sources(runs, capsys):
    from cli.main import main

    corpus, by_name = runs
    paths, _ = by_name["straight"]
    doc = corpus.docs[3]
    assert main(["trace", str(paths.root), "--id", doc["meta"]["id"], "--id", "nobody", "--source", "b.jsonl:2",
                 "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_query = {r["query"]: r for r in lines}
    assert by_query["--id nobody"]["fate"] == "not_found"
    found = by_query[f"--id {doc['meta']['id']}"]
    assert set(found) >= {"id", "fate", "reason", "rows", "steps", "checkpoints"}
    assert all(set(r) >= {"split", "shard", "row"} for r in found["rows"])
    assert by_query["--source b.jsonl:2"]["doc_id"] == doc["id"]  # rec-3 is b.jsonl line 2
    assert main(["trace", str(paths.root), "--match", "zzqq-no-such-text"]) == 0
    assert main(["trace", str(paths.root)]) == 2  # nothing asked: one line, exit 2


def test_a_run_without_the_data_order_log_says_steps_cannot_be_derived(runs, tmp_path):
    from lineage.trace import TraceQuery, trace

    _, by_name = runs
    paths, _ = by_name["straight"]
    copy = RunPaths(tmp_path / "old")
    shutil.copytree(paths.root, copy.root)
    copy.data_order_jsonl.unlink()
    [record] = [r for r in trace(copy.root, TraceQuery(ids=["rec-0"])) if r["rows"]]
    assert record["steps"] is None and "cannot be derived" in record["steps_note"]


def test_rollback_and_crash_stretches_map_steps_to_the_samples_they_used(tmp_path):
    """A hand-written log (the trainer's format): steps 0-5 from sample 0, a rollback after step 5 to step 4 with
    the data moving on (sample 48), a crash after step 6 logged only in metrics.jsonl, a resume at step 6 from
    its checkpoint (sample 64), the end at step 8."""
    from lineage.consumed import training_order
    from trainer_bridge.loop.order import SAMPLE_ORDER

    paths = RunPaths(tmp_path)
    paths.train.mkdir()
    common = {"order": SAMPLE_ORDER, "seed": 1, "train_rows": 10, "global_batch_size": 8, "micro_batch_size": 2,
              "dp": 2}
    log = [{"event": "stretch", "cause": "start", "step": 0, "sample": 0, "time": 1.0, **common},
           {"event": "stretch", "cause": "rollback", "step": 4, "sample": 48, "previous_last_step": 5, "time": 2.0,
            **common},
           {"event": "stretch", "cause": "resume", "step": 6, "sample": 64, "time": 4.0, **common},
           {"event": "end", "step": 8, "sample": 80, "time": 5.0}]
    paths.data_order_jsonl.write_text("".join(json.dumps(r) + "\n" for r in log))
    paths.metrics_jsonl.write_text("".join(json.dumps({"step": s, "time": t}) + "\n"
                                           for s, t in [(4, 2.5), (5, 2.6), (6, 2.7), (7, 3.0)]))
    order = training_order(paths)
    assert [(s.first_step, s.first_sample, s.last_step) for s in order.stretches] == [(0, 0, 5), (4, 48, 7), (6, 64, 7)]
    uses = order.steps_of_samples(np.array([40, 47, 48, 63, 64, 79]))
    assert [(u["sample"], u["step"]) for u in uses] == [(40, 5), (47, 5), (48, 4), (63, 5), (64, 6), (79, 7)]
    assert uses[1]["micro_step"] == 1 and uses[1]["position"] == 7  # 8 per step, 2 × 2 per micro-step
    # the crashed stretch's steps 6-7 (samples 64-79) are the resumed stretch's too: the same rows, both listed
    assert order.samples_consumed == 80 and len(order.samples_of_rows(np.arange(10))) == 80

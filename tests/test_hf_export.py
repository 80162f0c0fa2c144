"""`corpusmill export`: a trained demo checkpoint as a Hugging Face folder that `transformers` loads and that
computes the project model's logits (fp32, 1e-4) on real shard rows, one-document and packed; its tokenizer
encodes every demo document to the shards' tokens; the model card, sharding, --step/--best, damaged checkpoints,
tied/GQA/llama3 models, and the missing-extra message.

``demo_run`` (also used by test_hf_import, test_generate) builds one real run directory per session: 240 demo
documents → a trained 512-token BPE tokenizer → 128-token shards (Beam build) → 12 steps of a 2-layer model
(``train/train_config.json`` is the unresolved config, as ``corpusmill train`` writes it).
"""
from __future__ import annotations

import functools
import gzip
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "dist"))
from scenario_configs import base_config  # noqa: E402

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge import hf  # noqa: E402
from trainer_bridge.checkpoint import run_model  # noqa: E402
from trainer_bridge.checkpoint.store import BEST, LATEST, checkpoint_candidates, step_dir_name  # noqa: E402

SEQ_LEN, VOCAB, N_DOCS, STEPS = 128, 512, 240, 12


@dataclass(frozen=True)
class DemoRun:
    paths: RunPaths
    docs: list[dict]


def demo_docs(n: int = N_DOCS) -> list[dict]:
    with gzip.open(REPO / "data" / "demo" / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        lines = [json.loads(line) for _, line in zip(range(n), fh)]
    return [{"id": 10 * i + 3, "text": r["text"], "source": "demo"} for i, r in enumerate(lines)]


def build_shards_for(run: RunPaths, docs: list[dict], tokenizer_path: str | None = None, add_bos: bool = False) -> dict:
    from tokenizer.build import build_shards
    from tokenizer.config import PackingConfig, TokenizerConfig
    from tokenizer.docs import write_docs_parquet

    write_docs_parquet(str(run.docs / "part-00000.parquet"), docs)
    tok_cfg = TokenizerConfig(vocab_size=VOCAB, path=tokenizer_path)
    return build_shards(str(run.root), tok_cfg, PackingConfig(seq_len=SEQ_LEN, val_fraction=0.1, add_bos=add_bos))


def train_run(run: RunPaths, overrides: dict) -> None:
    """Train in this process; ``train/train_config.json`` is the unresolved config, as ``corpusmill train``
    writes it (vocab_size and max_seq_len null: export resolves them from the shards)."""
    from trainer_bridge.loop.train import train

    cfg = base_config({"model": {"n_layers": 2}, "steps": STEPS, "checkpoint": {"interval": 4, "keep_last": 3},
                       "eval": {"interval": 4, "max_rows": 8}, **overrides})
    run.train.mkdir(parents=True, exist_ok=True)
    run.train_config.write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))
    train(cfg, run)


@functools.cache
def _demo_run(base: str) -> DemoRun:
    paths = RunPaths(Path(base) / "demo")
    docs = demo_docs()
    build_shards_for(paths, docs)
    train_run(paths, {})
    return DemoRun(paths, docs)


def demo_run_at(tmp_path_factory) -> DemoRun:
    """The session's demo run (built once, shared by the HF test modules)."""
    return _demo_run(str(tmp_path_factory.getbasetemp() / "hf_demo"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> DemoRun:
    return demo_run_at(tmp_path_factory)


def run_cli(*argv: str) -> int:
    from cli.hf import main

    return main(list(argv))


@pytest.fixture(scope="module")
def exported(demo, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "model"
    assert run_cli("export", str(demo.paths.root), "--out", str(out)) == 0
    return out


def shard_rows(paths: RunPaths, split: str = "train"):
    from tokenizer.shards import ShardReader

    reader = ShardReader(str(paths.shards), split)
    return [(np.array(t), np.array(l), np.array(i)) for t, l, i in reader]


def project_logits(model, rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training forward pass on collated rows: logits, position ids, segment ids."""
    from trainer_bridge.loop.data import collate

    batch = collate([(t, l) for t, l, _ in rows], list(range(len(rows))), seq_len=SEQ_LEN)
    with torch.no_grad():
        logits = model(batch.input_ids, batch.position_ids, batch.segment_ids)
    return logits, batch.position_ids, batch.segment_ids


def compare_with_transformers(hf_dir: Path, project_model, rows) -> float:
    """Max |logit difference| over real tokens: HF gets position_ids that restart per document, no attention mask
    and no cache (transformers derives the document mask from the positions only then)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    ours, positions, segments = project_logits(project_model, rows)
    tokens = torch.from_numpy(np.stack([t for t, _, _ in rows]).astype(np.int64))
    with torch.no_grad():
        theirs = model(input_ids=tokens, position_ids=positions, use_cache=False).logits
    real = segments >= 0
    return float((ours - theirs).abs()[real].max())


def newest_model(paths: RunPaths):
    checkpoint = run_model.find_checkpoint(paths)
    return run_model.build_model(run_model.checkpoint_model_config(paths, checkpoint), run_model.load_model_state(checkpoint))


# -- the bars ---------------------------------------------------------------------------------------------
def test_exported_logits_equal_the_project_model_on_real_rows(demo, exported):
    rows = shard_rows(demo.paths, "train") + shard_rows(demo.paths, "val")
    single = [r for r in rows if len(r[1]) == 1 and r[1][0] == SEQ_LEN][:4]
    packed = [r for r in rows if len(r[1]) >= 3][:4]
    assert len(single) == 4 and len(packed) == 4, "the demo shards should hold both kinds of rows"
    model = newest_model(demo.paths)
    assert compare_with_transformers(exported, model, single) < 1e-4
    assert compare_with_transformers(exported, model, packed) < 1e-4
    # A packed row is really several documents to both models: the logits of its second document equal those
    # of that document alone at positions 0..n-1.
    tokens, lens, _ = packed[0]
    a, b = int(lens[0]), int(lens[1])
    alone = np.zeros(SEQ_LEN, dtype=tokens.dtype)
    alone[:b] = tokens[a:a + b]
    together, _, _ = project_logits(model, [packed[0]])
    by_itself, _, _ = project_logits(model, [(alone, np.array([b], dtype=np.int32), None)])
    assert torch.allclose(together[0, a:a + b], by_itself[0, :b], atol=1e-5)


def document_tokens(paths: RunPaths) -> dict[int, list[int]]:
    """Every document's tokens rebuilt from the shards (its pieces in row order, Contract 3)."""
    pieces: dict[int, list[np.ndarray]] = {}
    for split in ("train", "val"):
        for tokens, lens, ids in shard_rows(paths, split):
            at = 0
            for n, doc_id in zip(lens.tolist(), ids.tolist()):
                pieces.setdefault(doc_id, []).append(tokens[at:at + n])
                at += n
    return {doc_id: np.concatenate(p).tolist() for doc_id, p in pieces.items()}


def test_exported_tokenizer_encodes_every_document_to_the_shard_tokens(demo, exported):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(exported)
    manifest = json.loads((demo.paths.shards / "manifest.json").read_text())
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (manifest["pad_id"], manifest["bos_id"],
                                                                      manifest["eos_id"])
    docs = document_tokens(demo.paths)
    assert set(docs) == {d["id"] for d in demo.docs}
    encoded = tok([d["text"] for d in demo.docs])["input_ids"]
    for doc, ids in zip(demo.docs, encoded):
        assert ids + [manifest["eos_id"]] == docs[doc["id"]], doc["id"]


def test_config_generation_config_and_model_card(demo, exported):
    config = json.loads((exported / "config.json").read_text())
    manifest = json.loads((demo.paths.shards / "manifest.json").read_text())
    assert config["rms_norm_eps"] == 1e-5 and config["head_dim"] == 16 and config["num_key_value_heads"] == 2
    assert config["vocab_size"] == manifest["vocab_size"] and config["max_position_embeddings"] == SEQ_LEN
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert config["tie_word_embeddings"] is False and config["intermediate_size"] == 176
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 0)
    from transformers import LlamaConfig

    # every field transformers' LlamaConfig has (but bookkeeping ones) is written, none left to its default
    fields = set(LlamaConfig().to_dict()) - {"transformers_version", "architectures", "output_hidden_states",
                                             "return_dict", "chunk_size_feed_forward", "is_encoder_decoder",
                                             "id2label", "label2id", "problem_type", "_name_or_path",
                                             "output_attentions"}
    assert not fields - set(config), fields - set(config)
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["do_sample"] is False
    # The card states the run's figures: tokens trained (from the checkpoint) and the last losses (metrics).
    card = (exported / "README.md").read_text()
    records = [json.loads(line) for line in demo.paths.metrics_jsonl.read_text().splitlines()]
    last = [r for r in records if "loss" in r][-1]
    last_val = [r for r in records if "val_loss" in r][-1]
    assert f"tokens trained: {last['tokens_seen']}" in card
    # steps as metrics.jsonl and the console number them (from 0: "10/10 steps completed (last step 9)")
    assert f"final train loss: {last['loss']:.4f} (step {last['step']})" in card and last["step"] == STEPS - 1
    assert f"final validation loss: {last_val['val_loss']:.4f} (step {last_val['step']})" in card
    assert f"optimizer steps: {STEPS}" in card and manifest["tokenizer_sha256"] in card


def test_sharded_safetensors_load_to_the_same_logits(demo, exported, tmp_path):
    out = tmp_path / "sharded"
    assert run_cli("export", str(demo.paths.root), "--out", str(out), "--max-shard-size", "100KB") == 0
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and not (out / "model.safetensors").exists()
    from transformers import AutoModelForCausalLM

    one = AutoModelForCausalLM.from_pretrained(exported).state_dict()
    many = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert one.keys() == many.keys() and all(torch.equal(one[k], many[k]) for k in one)


def test_step_best_and_damaged_checkpoints(demo, tmp_path, capsys):
    copy = RunPaths(tmp_path / "run")
    shutil.copytree(demo.paths.root, copy.root)
    steps = [run_model.step_of(p) for p in checkpoint_candidates(copy.checkpoints)]
    assert steps == [12, 8, 4]
    assert run_model.find_checkpoint(copy).name == step_dir_name(12)
    assert run_model.find_checkpoint(copy, step=8).name == step_dir_name(8)
    with pytest.raises(FileNotFoundError, match="available"):
        run_model.find_checkpoint(copy, step=5)
    # best: the lowest validation loss among retained checkpoints (metrics.jsonl), or the trainer's pointer
    records = [json.loads(line) for line in copy.metrics_jsonl.read_text().splitlines()]
    val = {r["step"] + 1: r["val_loss"] for r in records if "val_loss" in r}
    want = min((v, -s) for s, v in val.items() if s in steps)
    assert run_model.step_of(run_model.find_checkpoint(copy, best=True)) == -want[1]
    (copy.checkpoints / BEST).write_text(step_dir_name(4) + "\n")
    assert run_model.find_checkpoint(copy, best=True).name == step_dir_name(4)
    # a damaged newest checkpoint is skipped, said in one plain line naming it and the one used (not a Python
    # warning); exporting it by --step is refused
    newest = copy.checkpoints / step_dir_name(12)
    victim = next(p for p in sorted(newest.iterdir()) if p.suffix == ".distcp")
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    said: list[str] = []
    assert run_model.find_checkpoint(copy, say=said.append).name == step_dir_name(8)
    assert said == [f"checkpoint {step_dir_name(12)} is damaged ({victim.name} does not match its checksum); using "
                    f"{step_dir_name(8)}, the newest sound one"]
    capsys.readouterr()
    assert run_cli("export", str(copy.root), "--out", str(tmp_path / "older")) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"corpusmill export: {said[0]}"] and step_dir_name(8) in out
    assert run_cli("export", str(copy.root), "--out", str(tmp_path / "bad"), "--step", "12") == 2
    assert not (tmp_path / "bad").exists()
    # exporting --step 4 gives that checkpoint's weights
    assert run_cli("export", str(copy.root), "--out", str(tmp_path / "s4"), "--step", "4") == 0
    from safetensors.torch import load_file

    state = run_model.load_model_state(copy.checkpoints / step_dir_name(4))
    exported = load_file(str(tmp_path / "s4" / "model.safetensors"))
    assert torch.equal(exported["model.norm.weight"], state["norm.weight"])
    assert (copy.checkpoints / LATEST).read_text().strip() == step_dir_name(12)


def test_tied_gqa_llama3_run_with_bos_exports_exactly(demo, tmp_path):
    """Another model layout on the same data: tied embeddings, one kv head, llama3 rope scaling, bos framing."""
    from transformers import AutoTokenizer

    run = RunPaths(tmp_path / "tied")
    build_shards_for(run, demo.docs[:60], tokenizer_path=str(demo.paths.tokenizer_json), add_bos=True)
    train_run(run, {"model": {"n_layers": 2, "n_kv_heads": 1, "tie_embeddings": True, "rope_scaling": "llama3",
                              "rope_scaling_factor": 4.0, "rope_original_max_len": 32, "rope_theta": 500.0},
                    "steps": 3, "eval": {"interval": 0}, "checkpoint": {"interval": 3}})
    out = tmp_path / "tied_hf"
    assert run_cli("export", str(run.root), "--out", str(out)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["num_key_value_heads"] == 1
    assert config["rope_parameters"]["rope_type"] == "llama3"
    rows = shard_rows(run, "train")
    rows = [r for r in rows if len(r[1]) == 1][:2] + [r for r in rows if len(r[1]) >= 2][:2]
    assert compare_with_transformers(out, newest_model(run), rows) < 1e-4
    tok = AutoTokenizer.from_pretrained(out)
    docs = document_tokens(run)
    texts = {d["id"]: d["text"] for d in demo.docs[:60]}
    for doc_id, tokens in docs.items():  # the shards frame documents with bos, and so does the exported tokenizer
        assert tokens[0] == 1 and tok(texts[doc_id])["input_ids"] + [2] == tokens


def test_refuses_a_model_that_does_not_map_and_a_used_out_dir(demo, tmp_path):
    cfg = run_model.checkpoint_model_config(demo.paths, run_model.find_checkpoint(demo.paths))
    state = dict(run_model.load_model_state(run_model.find_checkpoint(demo.paths)))
    state["layers.0.feed_forward.experts.w1"] = torch.zeros(2, 2)  # an MoE-style parameter
    with pytest.raises(hf.ConversionError, match="no LlamaForCausalLM equivalent.*experts"):
        hf.to_hf_state_dict(state, cfg)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    assert run_cli("export", str(demo.paths.root), "--out", str(used)) == 2


def test_missing_extra_is_one_line_and_exit_2(demo, tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors → ImportError
    assert run_cli("export", str(demo.paths.root), "--out", str(tmp_path / "m")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "extra 'hf'" in err[0] and ".[hf]" in err[0]

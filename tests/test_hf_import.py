"""`corpusmill import-hf`: local `LlamaForCausalLM` folders (random weights, built here; no hub) in four shapes —
MHA/GQA, tied/untied, default/linear/llama3 rope — give the project model transformers' logits within 1e-4;
exporting the import gives back the same tensors bit for bit; what does not map is refused by name; and a
small HF model continues pretraining on demo shards encoded with its own tokenizer, then loads in transformers.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers  # the optional extra 'hf', installed by `make test`

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hf_export import (  # noqa: E402
    SEQ_LEN,
    build_shards_for,
    compare_with_transformers,
    demo_run_at,
    run_cli,
    shard_rows,
)

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge import hf  # noqa: E402
from trainer_bridge.checkpoint import run_model  # noqa: E402


SHAPES = {
    # name: (heads, kv heads, tied, rope parameters)
    "mha-untied-default": (4, 4, False, {"rope_type": "default", "rope_theta": 10000.0}),
    "gqa-tied-llama3": (4, 2, True, {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 16}),
    "gqa-untied-llama3": (8, 2, False, {"rope_type": "llama3", "rope_theta": 500.0, "factor": 4.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8}),
    "mha-tied-linear": (2, 2, True, {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0}),
}
VOCAB, LENGTH = 96, 40


def hf_llama(path: Path, heads: int, kv: int, tied: bool, rope: dict, *, vocab: int = VOCAB, dim: int = 32,
             layers: int = 2, seed: int = 0, dtype=torch.float32, max_pos: int = 64) -> "transformers.LlamaForCausalLM":
    """A LlamaForCausalLM with random weights everywhere (norm gains too), saved with save_pretrained."""
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=dim, intermediate_size=48, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=dim // heads, max_position_embeddings=max_pos, rms_norm_eps=1e-5,
        tie_word_embeddings=tied, rope_parameters=dict(rope), bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3 if p.ndim == 1 else 0.08)
            if p.ndim == 1:
                p.add_(1.0)
    model = model.to(dtype).eval()
    model.save_pretrained(path)
    return model


def write_tokenizer(path: Path, tokenizer_json: Path | None = None) -> None:
    """Give a saved model a tokenizer: a tiny word-level one, or a copy of the demo run's tokenizer.json."""
    if tokenizer_json is not None:
        shutil.copyfile(tokenizer_json, path / "tokenizer.json")
        return
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    tok.save(str(path / "tokenizer.json"))


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two rows: one document (positions 0..T-1) and three packed documents (positions restart)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, VOCAB, (2, LENGTH), generator=g)
    lens = [17, 15, 8]
    positions = torch.stack([torch.arange(LENGTH), torch.cat([torch.arange(n) for n in lens])])
    segments = torch.stack([torch.zeros(LENGTH, dtype=torch.long),
                            torch.cat([torch.full((n,), i) for i, n in enumerate(lens)])])
    return tokens, positions, segments, torch.tensor(lens)


def project_from(source) -> torch.nn.Module:
    loaded = hf.load_for_inference(source)
    return run_model.build_model(loaded.config, loaded.state)


@pytest.fixture(params=sorted(SHAPES))
def imported(request, tmp_path):
    heads, kv, tied, rope = SHAPES[request.param]
    src = tmp_path / "hf"
    model = hf_llama(src, heads, kv, tied, rope)
    write_tokenizer(src)
    out = tmp_path / "init"
    assert run_cli("import-hf", str(src), "--out", str(out)) == 0
    return request.param, src, out, model


def test_imported_model_computes_transformers_logits(imported):
    name, src, out, model = imported
    tokens, positions, segments, _ = inputs()
    ours_model = project_from(out)
    with torch.no_grad():
        ours = ours_model(tokens, positions, segments)
        theirs = model(input_ids=tokens, position_ids=positions, use_cache=False).logits
    assert float((ours - theirs).abs().max()) < 1e-4, name
    # the packed row really is three documents on both sides (positions restart, no attention_mask)
    with torch.no_grad():
        alone = model(input_ids=tokens[1:, 17:32], use_cache=False).logits
    assert float((theirs[1, 17:32] - alone[0]).abs().max()) < 1e-4
    # and the rope scaling matters here: without it the logits differ (the comparison above can fail)
    cfg = ours_model.cfg
    if cfg.rope_scaling != "none":
        plain = run_model.build_model(cfg.model_copy(update={"rope_scaling": "none"}), hf.load_for_inference(out).state)
        with torch.no_grad():
            assert float((plain(tokens, positions, segments) - theirs).abs().max()) > 1e-3


def test_export_of_an_import_round_trips_bit_identically(imported, tmp_path):
    name, src, out, _ = imported
    back = tmp_path / "back"
    assert run_cli("export", str(out), "--out", str(back)) == 0
    from safetensors.torch import load_file

    original, exported = load_file(str(src / "model.safetensors")), load_file(str(back / "model.safetensors"))
    tied = json.loads((src / "config.json").read_text())["tie_word_embeddings"]
    if tied:
        original.pop("lm_head.weight", None)
    assert original.keys() == exported.keys(), name
    for key in original:
        assert original[key].dtype == exported[key].dtype and torch.equal(original[key], exported[key]), key
    a, b = json.loads((src / "config.json").read_text()), json.loads((back / "config.json").read_text())
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "tie_word_embeddings", "rope_parameters",
                "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert a[key] == b[key], key
    # the model card says what the folder holds: weights imported from src, not trained here
    card = (back / "README.md").read_text()
    assert f"imported from the Hugging Face model folder `{src.resolve()}`" in card and card.startswith("# hf\n")
    assert "not trained by corpusmill: 0 optimizer steps" in card
    assert "trained with corpusmill" not in card and "steps 0 to" not in card and "step-00000000" not in card
    # transformers loads the round trip to the same model
    again = transformers.AutoModelForCausalLM.from_pretrained(back).eval()
    tokens, positions, _, _ = inputs(2)
    first = transformers.AutoModelForCausalLM.from_pretrained(src).eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=tokens, position_ids=positions).logits,
                           first(input_ids=tokens, position_ids=positions).logits)


def test_bf16_sharded_source_round_trips_with_dtype(tmp_path):
    src = tmp_path / "bf16"
    model = hf_llama(src, 4, 2, False, SHAPES["mha-untied-default"][3], dtype=torch.bfloat16)
    model.save_pretrained(src, max_shard_size="20KB")  # sharded, with an index
    (src / "model.safetensors").unlink(missing_ok=True)
    assert (src / "model.safetensors.index.json").exists()
    write_tokenizer(src)
    assert run_cli("import-hf", str(src), "--out", str(tmp_path / "init")) == 0
    assert run_cli("export", str(tmp_path / "init"), "--out", str(tmp_path / "back"), "--dtype", "bfloat16") == 0
    from safetensors.torch import load_file

    want = model.state_dict()
    got = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_what_does_not_map_is_refused_by_name(tmp_path, capsys):
    src = tmp_path / "hf"
    hf_llama(src, 4, 4, False, SHAPES["mha-untied-default"][3])
    write_tokenizer(src)
    config = json.loads((src / "config.json").read_text())
    for change, message in (({"attention_bias": True}, "attention_bias"),
                            ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, "yarn"),
                            ({"rope_parameters": {**SHAPES["gqa-tied-llama3"][3], "high_freq_factor": 2.0}},
                             "high_freq_factor"),
                            ({"head_dim": 16}, "head_dim"), ({"model_type": "mistral"}, "mistral")):
        (src / "config.json").write_text(json.dumps({**config, **change}))
        assert run_cli("import-hf", str(src), "--out", str(tmp_path / "x")) == 2
        assert message in capsys.readouterr().err
    (src / "config.json").write_text(json.dumps(config))
    (src / "tokenizer.json").unlink()
    assert run_cli("import-hf", str(src), "--out", str(tmp_path / "y")) == 2
    assert "tokenizer.json" in capsys.readouterr().err


def test_continued_pretraining_of_an_imported_model(tmp_path, tmp_path_factory):
    """Import → shards of the demo corpus with the model's own tokenizer → 20 steps → export → transformers."""
    from tokenizer.shards import read_manifest
    from trainer_bridge.loop.train import Trainer

    demo = demo_run_at(tmp_path_factory)
    vocab = read_manifest(str(demo.paths.shards))["vocab_size"]
    src = tmp_path / "hf"
    hf_llama(src, 4, 2, False, {"rope_type": "default", "rope_theta": 10000.0}, vocab=vocab, dim=64,
             max_pos=SEQ_LEN)
    write_tokenizer(src, demo.paths.tokenizer_json)  # "an open model" whose tokenizer the corpus is encoded with
    init = tmp_path / "run" / "init"
    assert run_cli("import-hf", str(src), "--out", str(init)) == 0
    assert hf.is_weights_only_init(str(init)) and hf.is_weights_only_init("hf:" + str(src))
    assert not hf.is_weights_only_init(str(demo.paths.root))  # a training run: continued with its optimizer
    run = RunPaths(tmp_path / "run")
    manifest = build_shards_for(run, demo.docs, tokenizer_path=str(RunPaths(init).tokenizer_json))

    sys.path.insert(0, str(Path(__file__).resolve().parent / "dist"))
    from scenario_configs import base_config

    imported_cfg = hf.load_for_inference(str(init)).config
    cfg = base_config({"model": imported_cfg.model_dump(), "steps": 20, "eval": {"interval": 0},
                       "optimizer": {"lr": 3e-3, "warmup_steps": 2, "clip_grad_norm": 1.0},
                       "checkpoint": {"interval": 20}, "init_from": str(init)})
    trainer = Trainer(cfg, run)
    # what train.init_from: <init> (or hf:<src>) does before the first step
    loaded = hf.load_initial_weights(str(init), trainer.model.parts, trainer.cfg.model,
                                     shard_vocab_size=manifest["vocab_size"],
                                     shard_tokenizer_sha256=manifest["tokenizer_sha256"])
    assert str(init) in loaded
    source = transformers.AutoModelForCausalLM.from_pretrained(src)
    assert torch.equal(trainer.model.parts[0].layers["1"].feed_forward.w2.weight,
                       source.model.layers[1].mlp.down_proj.weight)
    result = trainer.fit()
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert len(losses) == 20 and np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.2, losses
    (run.train_config).write_text(json.dumps(cfg.model_dump(mode="json")))
    out = tmp_path / "continued"
    assert run_cli("export", str(run.root), "--out", str(out)) == 0
    rows = shard_rows(run, "val")[:4]
    checkpoint = run_model.find_checkpoint(run)
    trained = run_model.build_model(run_model.checkpoint_model_config(run, checkpoint), run_model.load_model_state(checkpoint))
    assert compare_with_transformers(out, trained, rows) < 1e-4
    assert not torch.equal(trained.output.weight, source.lm_head.weight)  # it did train
    card = (out / "README.md").read_text()  # trained here after the import: its own steps, not an import's card
    assert "trained with corpusmill" in card and "optimizer steps: 20 (steps 0 to 19)" in card
    assert f"Its training started from the weights of `{init}` (`train.init_from: {init}`)." in card
    assert f"after initialization from `{init}`" in card and "imported" not in card


def test_initial_weights_check_the_tokenizer_and_the_config(tmp_path, tmp_path_factory):
    demo = demo_run_at(tmp_path_factory)
    src = tmp_path / "hf"
    hf_llama(src, 4, 2, False, {"rope_type": "default", "rope_theta": 10000.0})
    write_tokenizer(src)
    loaded = hf.load_for_inference("hf:" + str(src))
    model = run_model.build_model(loaded.config, loaded.state)
    manifest = json.loads((demo.paths.shards / "manifest.json").read_text())
    with pytest.raises(hf.ConversionError, match="tokenizer sha256"):
        hf.load_initial_weights("hf:" + str(src), [model], loaded.config,
                                shard_tokenizer_sha256=manifest["tokenizer_sha256"])
    with pytest.raises(hf.ConversionError, match="vocabulary"):
        hf.load_initial_weights("hf:" + str(src), [model], loaded.config, shard_vocab_size=VOCAB + 1)
    with pytest.raises(hf.ConversionError, match="n_layers"):
        hf.load_initial_weights("hf:" + str(src), [model], loaded.config.model_copy(update={"n_layers": 3}))
    # a pipeline stage (some layers only) takes its own parameters
    from trainer_bridge.model.transformer import Transformer

    with torch.device("meta"):
        stage = Transformer(loaded.config)
    del stage.layers["1"]
    stage.norm, stage.output = None, None
    stage.to_empty(device="cpu")
    hf.load_initial_weights("hf:" + str(src), [stage], loaded.config)
    assert torch.equal(stage.layers["0"].attention.wv.weight, loaded.state["layers.0.attention.wv.weight"])
    # a whole model wrapped for activation checkpointing, as the trainer builds it
    from trainer_bridge.parallel.parallelize import apply_activation_checkpointing, materialize

    with torch.device("meta"):
        wrapped = Transformer(loaded.config)
    apply_activation_checkpointing(wrapped, "every", 1)
    materialize(wrapped, torch.device("cpu"), seed=0)
    hf.load_initial_weights("hf:" + str(src), [wrapped], loaded.config)
    tokens, positions, segments, _ = inputs()
    with torch.no_grad():
        assert torch.allclose(wrapped(tokens, positions, segments), model(tokens, positions, segments), atol=1e-6)

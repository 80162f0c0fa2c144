"""Generation with a KV cache: the cached path computes the training forward's logits, decodes the same tokens
as full recompute (alone or left-padded in a batch), stops at eos / max_new_tokens / max_seq_len, samples as
transformers' temperature → top-k → top-p warpers do; and `corpusmill generate` greedy output equals
`transformers` greedy `generate()` on the exported demo model (3 prompts × 32 tokens); it says on stderr which
checkpoint it used (and which damaged ones it passed over), and a bad argument is one line, exit 2."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hf_export import demo_run_at, run_cli  # noqa: E402

from trainer_bridge.config import ModelConfig  # noqa: E402
from trainer_bridge.model.generate import SamplingConfig, generate, next_token_scores  # noqa: E402
from trainer_bridge.model.transformer import Transformer  # noqa: E402
from trainer_bridge.parallel.parallelize import materialize  # noqa: E402

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0.0)


def random_model(**overrides) -> Transformer:
    cfg = ModelConfig(**{"vocab_size": 80, "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                         "multiple_of": 16, "max_seq_len": 48, **overrides})
    with torch.device("meta"):
        model = Transformer(cfg)
    materialize(model, torch.device("cpu"), seed=3)
    with torch.no_grad():  # larger weights than the training init: sharper, less tie-prone distributions
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8)
    return model.eval()


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 80, (n,), generator=g).tolist() for n in (5, 11, 1, 8)]


def test_cached_prefill_and_steps_match_the_training_forward():
    model = random_model()
    tokens = torch.tensor([prompts()[1] + prompts()[3]])  # 19 tokens
    positions = torch.arange(tokens.shape[1])[None]
    with torch.no_grad():
        full = model(tokens, positions, torch.zeros_like(tokens))
        cache = model.new_cache(1, 32)
        prefill = model.forward_with_cache(tokens[:, :10], positions[:, :10], cache)
        steps = [model.forward_with_cache(tokens[:, i:i + 1], positions[:, i:i + 1], cache) for i in range(10, 19)]
    assert cache.length == 19
    assert torch.allclose(prefill, full[:, :10], atol=1e-5)
    assert torch.allclose(torch.cat(steps, 1), full[:, 10:], atol=1e-5)


@pytest.mark.parametrize("overrides", [{}, {"n_kv_heads": 1, "tie_embeddings": True},
                                       {"rope_scaling": "llama3", "rope_scaling_factor": 4.0,
                                        "rope_original_max_len": 8}])
def test_cache_decodes_what_full_recompute_decodes_alone_or_batched(overrides):
    model = random_model(**overrides)
    batch = generate(model, prompts(), GREEDY)
    reference = generate(model, prompts(), GREEDY, use_cache=False)
    alone = [generate(model, [p], GREEDY)[0] for p in prompts()]
    assert [g.tokens for g in batch] == [g.tokens for g in reference] == [g.tokens for g in alone]
    assert all(len(g.tokens) == 12 and g.stop == "max_new_tokens" for g in batch)
    assert len({tuple(g.tokens) for g in batch}) == 4  # distinct continuations: the rows do not leak


def test_stops_at_eos_and_at_the_context():
    model = random_model()
    first = generate(model, prompts(), GREEDY)
    eos = first[1].tokens[4]  # make the token greedy emits 5th in row 1 the end token
    stopped = generate(model, prompts(), GREEDY, eos_ids=[eos])
    assert stopped[1].stop == "eos" and stopped[1].tokens == first[1].tokens[:first[1].tokens.index(eos) + 1]
    for a, b in zip(first, stopped):  # other rows run on (or stop at the same token, if they meet it)
        assert b.tokens == (a.tokens[:a.tokens.index(eos) + 1] if eos in a.tokens else a.tokens)
    long_prompt = list(range(3, 3 + 45))  # 45 of 48 positions
    out = generate(model, [long_prompt, prompts()[2]], SamplingConfig(max_new_tokens=10, temperature=0))
    assert out[0].stop == "max_seq_len" and len(out[0].tokens) == 3
    assert out[1].stop == "max_new_tokens" and len(out[1].tokens) == 10
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(model, [list(range(3, 51))], GREEDY)
    with pytest.raises(ValueError, match="empty"):
        generate(model, [[]], GREEDY)


def test_sampling_is_seeded_and_follows_transformers_warpers():
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    model = random_model()
    cfg = SamplingConfig(max_new_tokens=10, temperature=0.9, top_k=20, top_p=0.8, seed=7)
    a, b = generate(model, prompts(), cfg), generate(model, prompts(), cfg)
    assert [g.tokens for g in a] == [g.tokens for g in b]
    other = generate(model, prompts(), SamplingConfig(max_new_tokens=10, temperature=0.9, top_k=20, top_p=0.8, seed=8))
    assert [g.tokens for g in a] != [g.tokens for g in other]
    # top_k = 1 is greedy whatever the temperature
    assert [g.tokens for g in generate(model, prompts(), SamplingConfig(max_new_tokens=10, top_k=1, seed=1))] == \
        [g.tokens for g in generate(model, prompts(), SamplingConfig(max_new_tokens=10, temperature=0))]
    logits = torch.randn(6, 80, generator=torch.Generator().manual_seed(5)) * 3
    for temperature, top_k, top_p in ((0.7, 0, 1.0), (1.3, 10, 1.0), (1.0, 0, 0.6), (0.8, 25, 0.9), (1.0, 3, 0.05)):
        ours = next_token_scores(logits, SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
        theirs = TemperatureLogitsWarper(temperature)(None, logits.clone())
        if top_k:
            theirs = TopKLogitsWarper(top_k)(None, theirs)
        if top_p < 1:
            theirs = TopPLogitsWarper(top_p)(None, theirs)
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        assert torch.allclose(ours[~torch.isinf(ours)], theirs[~torch.isinf(theirs)])
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0)


# -- the bar: `corpusmill generate` = transformers' greedy generate() ----------------------------------------
@pytest.fixture(scope="module")
def demo_export(tmp_path_factory):
    demo = demo_run_at(tmp_path_factory)
    out = tmp_path_factory.mktemp("gen") / "model"
    assert run_cli("export", str(demo.paths.root), "--out", str(out)) == 0
    return demo, out


def cli_json_lines(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    assert run_cli(*argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_cli_greedy_equals_transformers_generate(demo_export, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    demo, exported = demo_export
    # short prompts: some demo documents are CJK, about 2 tokens a character with this 512-token vocabulary
    texts = [" ".join(demo.docs[i]["text"][:24].split()) for i in (0, 7, 21)]
    prompt_file = tmp_path / "prompts.txt"
    prompt_file.write_text("\n".join(texts) + "\n\n")
    common = ("--prompts-file", str(prompt_file), "--temperature", "0", "--max-new-tokens", "32")
    ours = cli_json_lines(capsys, "generate", str(demo.paths.root), *common)
    from_hf_folder = cli_json_lines(capsys, "generate", str(exported), *common, "--batch-size", "1")
    model = AutoModelForCausalLM.from_pretrained(exported).eval()
    tok = AutoTokenizer.from_pretrained(exported)
    assert [r["prompt"] for r in ours] == texts
    for row, other, text in zip(ours, from_hf_folder, texts):
        ids = tok(text, return_tensors="pt")["input_ids"]
        assert row["prompt_tokens"] == ids[0].tolist()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=32, do_sample=False)
        theirs = out[0, ids.shape[1]:].tolist()
        assert row["tokens"] == theirs and other["tokens"] == theirs, text
        assert row["completion"] == tok.decode([t for t in theirs if t != tok.eos_token_id], skip_special_tokens=True)
        assert len(theirs) == 32 or theirs[-1] == tok.eos_token_id
    # --prompt prints the continuation itself
    capsys.readouterr()
    assert run_cli("generate", str(demo.paths.root), "--prompt", texts[0], "--temperature", "0",
                   "--max-new-tokens", "32") == 0
    assert capsys.readouterr().out == ours[0]["completion"] + "\n"


def test_cli_errors_are_one_line_exit_2(demo_export, tmp_path, capsys):
    demo, _ = demo_export
    assert run_cli("generate", str(tmp_path / "nothing"), "--prompt", "x") == 2
    assert run_cli("generate", str(demo.paths.root), "--prompt", "x", "--top-p", "2") == 2
    assert run_cli("generate", str(demo.paths.root), "--prompt", "x " * 400, "--temperature", "0") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "no such run directory" in err[0] and "top_p" in err[1] and "max_seq_len" in err[2]
    # a --prompts-file that is a folder, missing, or not UTF-8 text: one line each, exit 2 (no traceback)
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    for prompts_file, said in ((tmp_path, "cannot be read (Is a directory)"),
                               (tmp_path / "missing.txt", "cannot be read (No such file or directory)"),
                               (tmp_path / "latin1.txt", "not UTF-8 text (byte 3)")):
        assert run_cli("generate", str(demo.paths.root), "--prompts-file", str(prompts_file)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"corpusmill generate: --prompts-file {prompts_file}: {said}" + (
            "; one prompt per line, in UTF-8" if "UTF-8" in said else "")], err
    # a checkpoint choice for a Hugging Face folder (one set of weights) is refused, not ignored
    _, exported = demo_export
    for choice in (["--step", "1"], ["--best"]):
        assert run_cli("generate", str(exported), "--prompt", "x", *choice) == 2
        assert "Hugging Face model folder" in capsys.readouterr().err
    # the weights are as readable as the folder's other files (safetensors alone writes them 0600)
    modes = {f.name: f.stat().st_mode & 0o777 for f in exported.iterdir()}
    assert set(modes.values()) == {modes["config.json"]}, modes
    # export into a path that is a file: one line, not a NotADirectoryError traceback
    (tmp_path / "a-file").write_text("x")
    assert run_cli("export", str(demo.paths.root), "--out", str(tmp_path / "a-file")) == 2
    assert "is a file" in capsys.readouterr().err


def test_cli_says_which_checkpoint_it_used_and_which_it_passed_over(demo_export, tmp_path, capsys):
    import shutil

    from runio.layout import RunPaths
    from trainer_bridge.checkpoint.store import step_dir_name

    demo, _ = demo_export
    copy = RunPaths(tmp_path / "run")
    shutil.copytree(demo.paths.root, copy.root)
    capsys.readouterr()
    assert run_cli("generate", str(copy.root), "--prompt", "The", "--temperature", "0", "--max-new-tokens", "2") == 0
    assert capsys.readouterr().err.splitlines() == [
        f"corpusmill generate: 1 prompt(s) continued by the model of {copy.root} {step_dir_name(12)}"]
    victim = copy.checkpoints / step_dir_name(12) / "__0_0.distcp"
    data = bytearray(victim.read_bytes())
    data[5000] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert run_cli("generate", str(copy.root), "--prompt", "The", "--temperature", "0", "--max-new-tokens", "2") == 0
    assert capsys.readouterr().err.splitlines() == [
        f"corpusmill generate: checkpoint {step_dir_name(12)} is damaged (__0_0.distcp does not match its checksum); "
        f"using {step_dir_name(8)}, the newest sound one",
        f"corpusmill generate: 1 prompt(s) continued by the model of {copy.root} {step_dir_name(8)}"]


def test_cli_greedy_equals_transformers_on_a_sharp_random_llama(tmp_path, capsys):
    """The demo model is barely trained (its greedy continuations repeat a token); a random-weight Llama with
    large weights gives varied continuations, so every step's argmax is compared in earnest."""
    from test_hf_import import SHAPES, hf_llama, write_tokenizer

    src = tmp_path / "hf"
    model = hf_llama(src, 4, 2, False, SHAPES["gqa-untied-llama3"][3], max_pos=64, seed=2)
    write_tokenizer(src)
    texts = ["w5 w17 w33", "w80 w4 w9 w61 w22 w7", "w44"]
    prompt_file = tmp_path / "prompts.txt"
    prompt_file.write_text("\n".join(texts))
    rows = cli_json_lines(capsys, "generate", str(src), "--prompts-file", str(prompt_file), "--temperature", "0",
                          "--max-new-tokens", "32")
    for row in rows:
        ids = torch.tensor([row["prompt_tokens"]])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=32, do_sample=False)
        theirs = out[0, ids.shape[1]:].tolist()
        assert row["tokens"] == theirs
        assert len(set(theirs)) >= 5 or theirs[-1] == 2, theirs  # varied: a real comparison

"""Hugging Face interop: the project's Llama-style model to and from a ``transformers`` ``LlamaForCausalLM`` folder.

The two models compute the same function once three things are respected (checked to ~3e-6 in the logits):
- RoPE layout: the project rotates interleaved pairs (x[2i], x[2i+1]); HF rotates halves (x[i], x[i + D/2]).
  The q and k projections' output rows are permuted between the two (``to_half_rotation``); nothing else is.
- ``rms_norm_eps``, ``head_dim``, kv heads, rope scaling, tying and the special ids are written explicitly
  (HF's defaults differ: ``rms_norm_eps`` is 1e-6 there, 1e-5 here).
- HF builds the per-document mask itself from restarting ``position_ids`` when neither an ``attention_mask``
  nor a cache is given (``use_cache=False``), so packed rows match document by document.

Export (``export_run``): the newest sound, a given, or the best-validation checkpoint of a run, loaded model-only
in one process (DCP metadata through the checkpoint module's allow-list, tensors ``weights_only``), written as
``config.json`` (every field explicit), ``generation_config.json``, ``model.safetensors`` (sharded above
``max_shard_bytes``, with ``model.safetensors.index.json``), ``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json`` with the special-token roles, and a model card ``README.md``.

Import (``import_hf``): a local Llama-family folder (safetensors; MHA/GQA, tied or untied, default/linear/llama3
rope) becomes a run-shaped directory (``RunPaths``): a model-only DCP checkpoint ``train/checkpoints/step-00000000``
with ``model_config.json``, ``special_tokens.json`` and ``provenance.json`` (``imported_from``: the folder) beside
it (all under its checksums), and the model's
``tokenizer/tokenizer.json``. ``load_initial_weights`` puts such weights (or ``hf:PATH`` directly) into the
trainer's model parts for continued pretraining, after checking the run's shards were encoded with that
tokenizer.

Only ``safetensors`` (and, to load models in tests, ``transformers``) come from the optional extra ``hf``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed.checkpoint as dcp

from runio.files import sha256_file, write_atomic
from runio.layout import RunPaths
from tokenizer.shards import read_manifest
from trainer_bridge.checkpoint.run_model import (
    SPECIAL_TOKENS_FILE,
    ConversionError,
    LoadedModel,
    SpecialTokens,
    check_model_state,
    checkpoint_weights,
    ffn_hidden,
    find_checkpoint,
    load_run_model,
    load_train_progress,
    say_on_stderr,
    special_tokens_of_run,
)
from trainer_bridge.checkpoint.store import (
    LATEST,
    MODEL_CONFIG_FILE,
    PARTIAL_SUFFIX,
    PROVENANCE_FILE,
    SafeFileSystemReader,
    checkpoint_candidates,
    checkpoint_problem,
    read_checkpoint_json,
    step_dir_name,
    step_of,
    write_checksums,
)
from trainer_bridge.config import ModelConfig

EXTRA = "hf"
INSTALL_HINT = "pip install -c constraints.txt -e '.[hf]'"
HF_PREFIX = "hf:"
# checkpoints/best (checkpoint.BEST): text file naming the best-validation checkpoint (written by the trainer)
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# llama3 rope scaling: the factors the project's model implements (model.rope_inverse_frequencies)
LLAMA3_LOW_FREQ_FACTOR, LLAMA3_HIGH_FREQ_FACTOR = 1.0, 4.0


class MissingExtra(RuntimeError):
    """A package of the optional extra ``hf`` is not installed."""


def require(module: str):
    """Import ``module`` (from the ``hf`` extra) or raise MissingExtra with the install line."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtra(f"{module} is not installed: it comes with the optional extra '{EXTRA}' "
                           f"({INSTALL_HINT})") from error


# -- special tokens --------------------------------------------------------------------------------------------
# -- weights --------------------------------------------------------------------------------------------------
def to_half_rotation(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """q/k projection rows from interleaved RoPE pairs (this project) to HF's rotate-half layout."""
    dim = w.shape[-1]
    return w.reshape(n_heads, head_dim // 2, 2, dim).transpose(1, 2).reshape(n_heads * head_dim, dim)


def to_interleaved(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Inverse of ``to_half_rotation``."""
    dim = w.shape[-1]
    return w.reshape(n_heads, 2, head_dim // 2, dim).transpose(1, 2).reshape(n_heads * head_dim, dim)


_LAYER_MAP = {  # project name inside layers.{i}. -> HF name inside model.layers.{i}.
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP_MAP = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
_LAYER_RE = re.compile(r"^layers\.(\d+)\.(.+)$")
_HF_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def hf_name(name: str) -> str | None:
    """The HF parameter name of a project parameter, or None when it has none."""
    if name in _TOP_MAP:
        return _TOP_MAP[name]
    match = _LAYER_RE.match(name)
    if match and match.group(2) in _LAYER_MAP:
        return f"model.layers.{match.group(1)}.{_LAYER_MAP[match.group(2)]}"
    return None


def check_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig, where: str) -> None:
    """Names and shapes of ``state`` against the model ``cfg`` describes, and that every name maps to HF's; a
    clear error for what does not map."""
    unmapped = sorted(k for k in state if hf_name(k) is None)
    if unmapped:
        raise ConversionError(f"{where}: parameters with no LlamaForCausalLM equivalent: {unmapped[:8]}"
                              + (f" and {len(unmapped) - 8} more" if len(unmapped) > 8 else "")
                              + " (only the dense Llama layout exports; an MoE or other layout does not map exactly)")
    check_model_state(state, cfg, where)


def to_hf_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Project parameter names/layout to HF's; tied embeddings keep only ``model.embed_tokens.weight``."""
    check_state_dict(state, cfg, "checkpoint")
    head_dim = cfg.dim // cfg.n_heads
    n_kv = cfg.n_kv_heads or cfg.n_heads
    out = {}
    for name, tensor in state.items():
        if cfg.tie_embeddings and name == "output.weight":
            continue
        if name.endswith("attention.wq.weight"):
            tensor = to_half_rotation(tensor, cfg.n_heads, head_dim)
        elif name.endswith("attention.wk.weight"):
            tensor = to_half_rotation(tensor, n_kv, head_dim)
        out[hf_name(name)] = tensor.contiguous()
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig, where: str) -> dict[str, torch.Tensor]:
    """HF names/layout to the project's; ``lm_head`` comes from the embedding when the model ties them."""
    head_dim = cfg.dim // cfg.n_heads
    n_kv = cfg.n_kv_heads or cfg.n_heads
    back = {v: k for k, v in _TOP_MAP.items()}
    layer_back = {v: k for k, v in _LAYER_MAP.items()}
    out, unknown = {}, []
    for name, tensor in state.items():
        if not name.startswith(("model.", "lm_head.")):
            name = "model." + name  # a LlamaModel (no head) saves without the prefix
        if name.endswith("rotary_emb.inv_freq"):
            continue  # a buffer older transformers versions saved; recomputed from the config
        match = _HF_LAYER_RE.match(name)
        if name in back:
            ours = back[name]
        elif match and match.group(2) in layer_back:
            ours = f"layers.{match.group(1)}.{layer_back[match.group(2)]}"
        else:
            unknown.append(name)
            continue
        if ours.endswith("attention.wq.weight"):
            tensor = to_interleaved(tensor, cfg.n_heads, head_dim)
        elif ours.endswith("attention.wk.weight"):
            tensor = to_interleaved(tensor, n_kv, head_dim)
        out[ours] = tensor.contiguous()
    if unknown:
        raise ConversionError(f"{where}: tensors with no equivalent in the project's Llama: {sorted(unknown)[:8]}")
    if cfg.tie_embeddings:
        if "output.weight" in out and not torch.equal(out["output.weight"], out["tok_embeddings.weight"]):
            raise ConversionError(f"{where}: tie_word_embeddings is true but lm_head.weight differs from the embedding")
        out["output.weight"] = out["tok_embeddings.weight"]
    elif "output.weight" not in out:
        raise ConversionError(f"{where}: tie_word_embeddings is false but there is no lm_head.weight")
    check_state_dict(out, cfg, where)
    return out


# -- configs --------------------------------------------------------------------------------------------------
def rope_parameters(cfg: ModelConfig) -> dict:
    if cfg.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling == "linear":
        return {"rope_type": "linear", "rope_theta": cfg.rope_theta, "factor": cfg.rope_scaling_factor}
    return {"rope_type": "llama3", "rope_theta": cfg.rope_theta, "factor": cfg.rope_scaling_factor,
            "low_freq_factor": LLAMA3_LOW_FREQ_FACTOR, "high_freq_factor": LLAMA3_HIGH_FREQ_FACTOR,
            "original_max_position_embeddings": cfg.rope_original_max_len}


def hf_config(cfg: ModelConfig, special: SpecialTokens, dtype: str = "float32") -> dict:
    """``config.json`` of the equivalent LlamaForCausalLM, every field explicit."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": ffn_hidden(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.dim // cfg.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "initializer_range": cfg.init_std,
        "rms_norm_eps": cfg.norm_eps,
        "rope_parameters": rope_parameters(cfg),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": cfg.tie_embeddings,
        "use_cache": True,
        "bos_token_id": special.bos_id,
        "eos_token_id": special.eos_ids if len(special.eos_ids) > 1 else special.eos_id,
        "pad_token_id": special.pad_id,
        "dtype": dtype,
    }


def _rope_from_hf(config: dict, where: str) -> dict:
    """rope_theta / rope_scaling fields of ModelConfig from either HF layout (5.x ``rope_parameters`` or the
    older top-level ``rope_theta`` + ``rope_scaling``)."""
    params = dict(config.get("rope_parameters") or {})
    if not params:
        params = dict(config.get("rope_scaling") or {})
        params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    if "layer_types" in config or any(isinstance(v, dict) for v in params.values()):
        raise ConversionError(f"{where}: per-layer rope parameters do not map to the project's model")
    kind = params.get("rope_type") or params.get("type") or "default"
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ConversionError(f"{where}: partial_rotary_factor {params['partial_rotary_factor']} (partial RoPE) "
                              "does not map to the project's model")
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    if kind == "default":
        return {"rope_theta": theta, "rope_scaling": "none"}
    if kind == "linear":
        return {"rope_theta": theta, "rope_scaling": "linear", "rope_scaling_factor": float(params["factor"])}
    if kind == "llama3":
        low, high = float(params.get("low_freq_factor", 1.0)), float(params.get("high_freq_factor", 4.0))
        if (low, high) != (LLAMA3_LOW_FREQ_FACTOR, LLAMA3_HIGH_FREQ_FACTOR):
            raise ConversionError(f"{where}: llama3 rope scaling with low_freq_factor={low}, high_freq_factor={high}: "
                                  f"the project's model implements {LLAMA3_LOW_FREQ_FACTOR} and "
                                  f"{LLAMA3_HIGH_FREQ_FACTOR} (Llama 3.x)")
        original = params.get("original_max_position_embeddings") or config.get("max_position_embeddings")
        return {"rope_theta": theta, "rope_scaling": "llama3", "rope_scaling_factor": float(params["factor"]),
                "rope_original_max_len": int(original)}
    raise ConversionError(f"{where}: rope_type {kind!r} does not map to the project's model "
                          "(supported: 'default', 'linear', 'llama3')")


def model_config_from_hf(config: dict, where: str = "config.json") -> ModelConfig:
    """The project's ModelConfig for an HF Llama config; a clear error for anything that does not map exactly."""
    model_type = config.get("model_type")
    if model_type != "llama":
        raise ConversionError(f"{where}: model_type {model_type!r}: only 'llama' (LlamaForCausalLM) imports")
    problems = []
    for key, allowed in (("hidden_act", ("silu",)), ("attention_bias", (False, None)), ("mlp_bias", (False, None)),
                         ("pretraining_tp", (1, None))):
        if config.get(key) not in allowed:
            problems.append(f"{key}={config.get(key)!r} (the project's model has {allowed[0]!r})")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    if head_dim * heads != hidden:
        problems.append(f"head_dim={head_dim} × num_attention_heads={heads} != hidden_size={hidden} "
                        "(the project's model derives head_dim = dim / n_heads)")
    if problems:
        raise ConversionError(f"{where}: does not map to the project's model: " + "; ".join(problems))
    try:
        return ModelConfig(
            vocab_size=int(config["vocab_size"]), dim=hidden, n_layers=int(config["num_hidden_layers"]),
            n_heads=heads, n_kv_heads=int(config.get("num_key_value_heads") or heads),
            ffn_hidden=int(config["intermediate_size"]), norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            max_seq_len=int(config.get("max_position_embeddings", 2048)),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            init_std=float(config.get("initializer_range", 0.02)), **_rope_from_hf(config, where))
    except (KeyError, ValueError) as error:
        raise ConversionError(f"{where}: {error}") from error


# -- checkpoints ----------------------------------------------------------------------------------------------
def save_model_checkpoint(root: Path, step: int, state: dict[str, torch.Tensor], cfg: ModelConfig,
                          special: SpecialTokens, provenance: dict) -> Path:
    """A model-only DCP checkpoint (``latest`` updated), self-describing: its resolved config, special ids and
    provenance (where the weights came from: ``imported_from``) are files inside it, covered by its checksums
    like the tensors."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    partial = root / (final.name + PARTIAL_SUFFIX)
    shutil.rmtree(partial, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": dict(state)}, checkpoint_id=str(partial), no_dist=True)
    (partial / MODEL_CONFIG_FILE).write_text(cfg.model_dump_json(indent=2))
    (partial / SPECIAL_TOKENS_FILE).write_text(json.dumps(asdict(special), indent=2))
    (partial / PROVENANCE_FILE).write_text(json.dumps({"step": step, **provenance}, indent=2))
    write_checksums(partial)
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    write_atomic(root / LATEST, (final.name + "\n").encode("utf-8"))
    return final


# -- safetensors ----------------------------------------------------------------------------------------------
def parse_size(text: str | int) -> int:
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 2GB, 500MB, 1048576)")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    scale = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    return int(number * scale)


def write_safetensors(out_dir: Path, tensors: dict[str, torch.Tensor], max_shard_bytes: int) -> list[str]:
    """``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json`` when the
    tensors exceed ``max_shard_bytes``; returns the files written."""
    st = require("safetensors.torch")
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    if len(shards) == 1:
        st.save_file(shards[0], str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        return ["model.safetensors"]
    names = [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))]
    weight_map = {}
    for name, shard in zip(names, shards):
        st.save_file(shard, str(out_dir / name), metadata={"format": "pt"})
        weight_map.update({t: name for t in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return [*names, "model.safetensors.index.json"]


def read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    st = require("safetensors.torch")
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (model_dir / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        found = sorted(p.name for p in model_dir.iterdir()) if model_dir.is_dir() else []
        raise ConversionError(f"{model_dir}: no model.safetensors(.index.json) (only safetensors weights import; "
                              f"found {found[:10]})")
    state = {}
    for name in files:
        state.update(st.load_file(str(model_dir / name)))
    return state


# -- tokenizer files ------------------------------------------------------------------------------------------
def write_tokenizer_files(out_dir: Path, tokenizer_json: Path, special: SpecialTokens, max_seq_len: int) -> None:
    """tokenizer.json (with a bos post-processor when documents were trained with a leading bos, so that
    ``tokenizer(text)`` frames a prompt as training did), tokenizer_config.json and special_tokens_map.json."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer.from_file(str(tokenizer_json))
    if special.add_bos and special.bos_token and tok.post_processor is None:
        tok.post_processor = TemplateProcessing(single=f"{special.bos_token} $A",
                                                pair=f"{special.bos_token} $A {special.bos_token} $B:1",
                                                special_tokens=[(special.bos_token, special.bos_id)])
        (out_dir / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
    else:
        shutil.copyfile(tokenizer_json, out_dir / "tokenizer.json")
    roles = {k: v for k, v in (("bos_token", special.bos_token), ("eos_token", special.eos_token),
                               ("pad_token", special.pad_token)) if v is not None}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **roles, "model_max_length": max_seq_len,
              "add_bos_token": special.add_bos, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (out_dir / "special_tokens_map.json").write_text(json.dumps(roles, indent=2, ensure_ascii=False))


def special_tokens_of_hf(model_dir: Path, config: dict) -> SpecialTokens:
    """Special ids from config.json (generation_config.json for extra end ids), roles and strings from the
    tokenizer files; whether the tokenizer adds a bos by itself from encoding a probe."""
    def ids(value) -> list[int]:
        return [] if value is None else [int(v) for v in (value if isinstance(value, list) else [value])]

    eos = ids(config.get("eos_token_id"))
    generation = model_dir / "generation_config.json"
    if generation.exists():
        eos += [i for i in ids(json.loads(generation.read_text()).get("eos_token_id")) if i not in eos]
    bos = ids(config.get("bos_token_id"))
    pad = ids(config.get("pad_token_id"))
    special = SpecialTokens(pad_id=pad[0] if pad else None, bos_id=bos[0] if bos else None,
                            eos_id=eos[0] if eos else None, eos_ids=eos)
    tokenizer_json = model_dir / "tokenizer.json"
    if tokenizer_json.exists():
        from tokenizers import Tokenizer

        special = special.with_strings(tokenizer_json)
        tok = Tokenizer.from_file(str(tokenizer_json))
        probe = tok.encode("a", add_special_tokens=True).ids
        special.add_bos = special.bos_id is not None and bool(probe) and probe[0] == special.bos_id
    return special


# -- export ---------------------------------------------------------------------------------------------------
@dataclass
class ExportResult:
    out_dir: Path
    checkpoint: Path
    files: list[str]
    config: ModelConfig


def _metrics_summary(paths: RunPaths, step: int) -> dict:
    last_loss = last_val = None
    if paths.metrics_jsonl.exists():
        for line in paths.metrics_jsonl.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record.get("step"), int) or record["step"] >= step:
                continue
            # steps numbered from 0, as metrics.jsonl and the console number them ("10/10 steps completed
            # (last step 9)")
            if isinstance(record.get("loss"), (int, float)):
                last_loss = (record["step"], record["loss"])
            if isinstance(record.get("val_loss"), (int, float)):
                last_val = (record["step"], record["val_loss"])
    return {"train": last_loss, "val": last_val}


def data_card_lines(paths: RunPaths, checkpoint: Path) -> list[str]:
    """The model card's "Data seen" section, from the checkpoint's data card (written by ``lineage.card`` after
    training and after every takedown)."""
    file = paths.data_card(checkpoint)
    if not file.is_file():
        return ["", "## Data seen", "", "No data card beside this checkpoint (written after training and by "
                "`corpusmill forget`): what it had seen is not stated here."]
    card = json.loads(file.read_text(encoding="utf-8"))
    if "unknown" in card:
        return ["", "## Data seen", "", f"Not derivable: {card['unknown']}."]
    withdrawn = card.get("withdrawn") or {}
    lines = ["", "## Data seen", "", f"Up to step {card['step']}: {card['tokens']} tokens of {card['documents']} "
             f"documents (`{file.name}` beside the checkpoint).", ""]
    if withdrawn.get("documents"):
        lines += [f"**Withdrawn data:** {withdrawn['tokens']} of these tokens came from {withdrawn['documents']} "
                  f"document(s) later withdrawn (takedown ledger, {withdrawn.get('ledger_entries', 0)} entries): "
                  "this model's weights were trained on them and are not un-trained by the withdrawal.", ""]
    else:
        lines += [f"Withdrawn data: none of the documents in the takedown ledger "
                  f"({withdrawn.get('ledger_entries', 0)} entries) was seen up to this step.", ""]
    for title, key in (("source", "by_source"), ("language", "by_language")):
        rows = card.get(key) or {}
        if rows:
            lines += [f"| {title} | tokens | documents |", "|---|---:|---:|"]
            lines += [f"| {label} | {v['tokens']} | {v['documents']} |" for label, v in list(rows.items())[:20]]
            lines.append("")
    for field_name, rows in (card.get("by_field") or {}).items():
        lines += [f"| {field_name} | tokens | documents |", "|---|---:|---:|"]
        lines += [f"| {label} | {v['tokens']} | {v['documents']} |" for label, v in list(rows.items())[:20]]
        lines.append("")
    return lines


def model_card(paths: RunPaths, checkpoint: Path, cfg: ModelConfig, config: dict, special: SpecialTokens) -> str:
    """README.md: where the model came from (data funnel, shards, tokens trained, losses; or, for the model-only
    checkpoint of ``import_hf``, the folder its weights were imported from) and its config."""
    step = step_of(checkpoint)
    progress = load_train_progress(checkpoint)
    # A model-only checkpoint (no train state) is an import's: its weights were not trained here.
    imported = progress is None
    provenance = read_checkpoint_json(checkpoint, PROVENANCE_FILE) or {}
    imported_from = provenance.get("imported_from")
    init_from = provenance.get("init_from")  # train.init_from: the weights training started from
    shape = (f"{config['num_hidden_layers']} layers, hidden size {config['hidden_size']}, "
             f"{config['num_attention_heads']} heads ({config['num_key_value_heads']} kv), vocabulary "
             f"{config['vocab_size']}, context {config['max_position_embeddings']}.")
    usage = ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
             "model = AutoModelForCausalLM.from_pretrained(PATH)", "tokenizer = AutoTokenizer.from_pretrained(PATH)",
             "```", ""]
    if imported:
        source = (f"the Hugging Face model folder `{imported_from}`" if imported_from else
                  "a Hugging Face model folder (import-hf did not record which)")
        lines = [f"# {Path(imported_from).name if imported_from else paths.name}", "",
                 f"A Llama-style decoder whose weights were imported from {source} (`corpusmill import-hf`, into "
                 f"`{paths.root}`), not trained by corpusmill: {shape}", "", *usage]
    else:
        lines = [f"# {paths.name}", "",
                 f"A Llama-style decoder trained with corpusmill, exported from checkpoint `{checkpoint.name}` of "
                 f"run `{paths.name}`: {shape}"
                 + (f" Its training started from the weights of `{init_from.removeprefix('hf:')}` "
                    f"(`train.init_from: {init_from}`)." if init_from else ""), "", *usage,
                 "Packed training rows restart `position_ids` at every document; transformers masks attention per "
                 "document by itself when given such `position_ids` with no `attention_mask` and `use_cache=False`."
                 + (" Documents were trained with a leading bos token: the tokenizer adds it." if special.add_bos
                    else "")
                 + (" Every document ended with the eos token." if special.add_eos else ""), ""]
    stats = json.loads(paths.stats.read_text()) if paths.stats.exists() else None
    if stats:
        lines += ["## Data funnel", "", "| step | in | kept | removed |", "|---|---:|---:|---:|",
                  f"| read | {stats.get('documents_read', '')} | "
                  f"{int(stats.get('documents_read', 0)) - int((stats.get('quarantined') or {}).get('total', 0))} | "
                  f"{(stats.get('quarantined') or {}).get('total', 0)} quarantined |"]
        for row in stats.get("steps", []):
            lines.append(f"| {row.get('step')} | {row.get('in', '')} | {row.get('kept', '')} | "
                         f"{row.get('removed', '')} |")
        lines += [f"| **kept documents** | | {stats.get('kept', '')} | |", ""]
    if (paths.shards_manifest).exists():
        m = read_manifest(str(paths.shards))
        lines += ["## Shards", "", f"seq_len {m['seq_len']}, vocabulary {m['vocab_size']}, tokenizer sha256 "
                  f"`{m['tokenizer_sha256']}`.", "", "| split | documents | rows | tokens | fill |",
                  "|---|---:|---:|---:|---:|"]
        for split, t in sorted((m.get("totals") or {}).items()):
            lines.append(f"| {split} | {t.get('docs', '')} | {t.get('rows')} | {t.get('tokens')} | "
                         f"{100 * float(t.get('fill_ratio', 0)):.2f}% |")
        lines.append("")
    lines += ["## Training", ""]
    if imported:
        lines.append("- not trained by corpusmill: 0 optimizer steps here; the weights are the imported model's")
    else:
        summary = _metrics_summary(paths, step)
        lines.append(f"- optimizer steps: {step}" + (f" (steps 0 to {step - 1})" if step > 0 else "")
                     + (f", after initialization from `{init_from.removeprefix('hf:')}`" if init_from else ""))
        lines.append(f"- tokens trained: {progress['tokens_seen']}")
        if summary["train"]:
            lines.append(f"- final train loss: {summary['train'][1]:.4f} (step {summary['train'][0]})")
        if summary["val"]:
            lines.append(f"- final validation loss: {summary['val'][1]:.4f} (step {summary['val'][0]})")
        lines += data_card_lines(paths, checkpoint)
    lines += ["", "## Config", "", "Model (corpusmill `train.model`, resolved):", "", "```json",
              cfg.model_dump_json(indent=2), "```", "", "transformers `config.json`:", "", "```json",
              json.dumps(config, indent=2), "```", ""]
    return "\n".join(lines)


def export_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike, *, step: int | None = None, best: bool = False,
               dtype: str = "float32", max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
               say: Callable[[str], None] = say_on_stderr) -> ExportResult:
    """Write a Hugging Face model folder for a checkpoint of ``run_dir`` (see the module docstring); a damaged
    newer checkpoint passed over is said through ``say`` (``find_checkpoint``)."""
    require("safetensors.torch")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    paths = RunPaths(run_dir)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file: --out names the folder to write the model into")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty: choose another --out or remove it")
    checkpoint = find_checkpoint(paths, step, best, say=say)
    cfg, state = checkpoint_weights(paths, checkpoint)
    if not paths.tokenizer_json.exists():
        raise ConversionError(f"{paths.tokenizer_json} does not exist: the model's tokenizer is needed for the export")
    special = special_tokens_of_run(paths, checkpoint)
    if (paths.shards_manifest).exists():
        want = read_manifest(str(paths.shards))["tokenizer_sha256"]
        have = sha256_file(paths.tokenizer_json)
        if want != have:
            raise ConversionError(f"{paths.tokenizer_json} (sha256 {have}) is not the tokenizer the shards were "
                                  f"encoded with ({want})")
    tensors = {k: v.to(DTYPES[dtype]) for k, v in to_hf_state_dict(state, cfg).items()}
    config = hf_config(cfg, special, dtype)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        files = write_safetensors(tmp, tensors, max_shard_bytes)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        generation = {"bos_token_id": special.bos_id, "eos_token_id": config["eos_token_id"],
                      "pad_token_id": special.pad_id, "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
        write_tokenizer_files(tmp, paths.tokenizer_json, special, cfg.max_seq_len)
        (tmp / "README.md").write_text(model_card(paths, checkpoint, cfg, config, special), encoding="utf-8")
        # safetensors creates its files readable by their owner only: give the weights the mode every other
        # file of the folder has (the user's umask), or a server running as another user cannot load them
        mode = (tmp / "config.json").stat().st_mode & 0o777
        for name in files:
            os.chmod(tmp / name, mode)
        files += ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "README.md"]
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out_dir=out, checkpoint=checkpoint, files=files, config=cfg)


# -- import ---------------------------------------------------------------------------------------------------
@dataclass
class HFModel:
    config: ModelConfig
    state: dict[str, torch.Tensor]  # project names and layout, source dtype
    special: SpecialTokens
    tokenizer_json: Path | None
    source_dtype: str


def read_hf_model(model_dir: str | os.PathLike) -> HFModel:
    """A local HF Llama folder in the project's names, layout and config (nothing downloaded)."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{model_dir}: no config.json (not a Hugging Face model folder)")
    config = json.loads(config_path.read_text())
    cfg = model_config_from_hf(config, str(config_path))
    raw = read_safetensors(model_dir)
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in raw.values()})
    state = from_hf_state_dict(raw, cfg, str(model_dir))
    tokenizer_json = model_dir / "tokenizer.json"
    return HFModel(config=cfg, state=state, special=special_tokens_of_hf(model_dir, config),
                   tokenizer_json=tokenizer_json if tokenizer_json.exists() else None, source_dtype="/".join(dtypes))


@dataclass
class ImportResult:
    out_dir: Path
    checkpoint: Path
    config: ModelConfig
    special: SpecialTokens

    def run_config_snippet(self) -> str:
        """The run-config lines that continue pretraining this model on a corpus."""
        paths = RunPaths(self.out_dir)
        s = self.special
        pad = s.pad_token or s.eos_token
        model = json.dumps(self.config.model_dump(mode="json"))
        return "\n".join([
            "tokenizer:",
            f"  path: {paths.tokenizer_json}",
            f"  pad_token: {json.dumps(pad)}" + ("" if s.pad_token else "   # the model has no pad token: its eos pads "
                                                                       "(padding is never trained on)"),
            f"  bos_token: {json.dumps(s.bos_token)}",
            f"  eos_token: {json.dumps(s.eos_token)}",
            "packing:",
            f"  add_bos: {str(s.add_bos).lower()}",
            "  add_eos: true",
            "train:",
            f"  model: {model}",
            f"  init_from: {paths.root}",
        ])


def import_hf(model_dir: str | os.PathLike, out_dir: str | os.PathLike) -> ImportResult:
    """Convert a local HF Llama folder into ``out_dir`` (a run-shaped directory, see the module docstring)."""
    model = read_hf_model(model_dir)
    if model.tokenizer_json is None:
        raise ConversionError(f"{model_dir}: no tokenizer.json (only fast tokenizers import; continued pretraining "
                              "needs the model's own tokenizer)")
    paths = RunPaths(out_dir)
    if paths.checkpoints.exists() and any(paths.checkpoints.iterdir()):
        raise FileExistsError(f"{paths.checkpoints} already holds checkpoints: import into an empty directory")
    paths.tokenizer_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(paths.tokenizer_json, Path(model.tokenizer_json).read_bytes())
    # fp32 master weights, as the trainer keeps them (bf16/fp16 -> fp32 is exact)
    state = {k: v.to(torch.float32) for k, v in model.state.items()}
    if model.config.tie_embeddings:
        state.pop("output.weight")  # one tensor, not two copies; restored from the embedding on load
    checkpoint = save_model_checkpoint(paths.checkpoints, 0, state, model.config, model.special,
                                       {"imported_from": str(Path(model_dir).resolve())})
    return ImportResult(out_dir=paths.root, checkpoint=checkpoint, config=model.config, special=model.special)


# -- inference and initialization -----------------------------------------------------------------------------
def load_for_inference(source: str | os.PathLike, *, step: int | None = None, best: bool = False,
                       say: Callable[[str], None] = say_on_stderr) -> LoadedModel:
    """Weights, config, special tokens and tokenizer of a run directory (or an import) or of an HF folder; a
    damaged newer checkpoint passed over is said through ``say`` (``find_checkpoint``)."""
    source_path = Path(str(source).removeprefix(HF_PREFIX))
    if (source_path / "config.json").exists() and not RunPaths(source_path).checkpoints.exists():
        if step is not None or best:  # an HF folder holds one set of weights: no steps to choose from
            raise ValueError(f"{source_path} is a Hugging Face model folder (one set of weights): "
                             f"{'--step' if step is not None else '--best'} applies to a run directory")
        model = read_hf_model(source_path)
        if model.tokenizer_json is None:
            raise ConversionError(f"{source_path}: no tokenizer.json")
        return LoadedModel(model.config, model.state, model.special, model.tokenizer_json, f"{source_path} (HF)")
    return load_run_model(RunPaths(source_path), step=step, best=best, say=say)


def is_weights_only_init(spec: str) -> bool:
    """Whether ``train.init_from`` names weights only (``hf:PATH``, or an import's model-only checkpoint), which
    initialize the model and nothing else (fresh optimizer, step 0), rather than a training run to continue."""
    if spec.startswith(HF_PREFIX):
        return True
    paths = RunPaths(spec)
    for path in checkpoint_candidates(paths.checkpoints) if paths.checkpoints.is_dir() else []:
        if checkpoint_problem(path) is None:
            keys = SafeFileSystemReader(path).read_metadata().state_dict_metadata
            return not any(k.startswith("optim.") for k in keys)
    return False


def _model_fields(cfg: ModelConfig) -> dict:
    return {k: v for k, v in cfg.model_dump().items() if k not in ("init_std", "multiple_of")} | {
        "ffn_hidden": ffn_hidden(cfg)}


def load_initial_weights(spec: str, parts, model_cfg: ModelConfig, *, shard_vocab_size: int | None = None,
                         shard_tokenizer_sha256: str | None = None,
                         say: Callable[[str], None] = say_on_stderr) -> str:
    """Load ``hf:PATH`` or an import directory's weights into the model ``parts`` (whole model or pipeline
    stages, plain or FSDP2-sharded: every rank reads the full tensors and keeps its shard). Checks first that
    the run's model config is the init's, and that the shards were encoded with the init's tokenizer (same
    sha256; vocabulary no larger than the model's). Returns a description of what was loaded."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    loaded = load_for_inference(spec, say=say)
    where = f"train.init_from {spec}"
    ours, theirs = _model_fields(model_cfg), _model_fields(loaded.config)
    differ = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    if differ:
        raise ConversionError(f"{where}: train.model differs from the model's config in {differ} (run, model); "
                              f"set train.model to {loaded.config.model_dump_json()}")
    if shard_tokenizer_sha256 is not None:
        have = sha256_file(loaded.tokenizer_json)
        if have != shard_tokenizer_sha256:
            raise ConversionError(f"{where}: the shards were encoded with tokenizer sha256 {shard_tokenizer_sha256}, "
                                  f"the model's tokenizer ({loaded.tokenizer_json}) is {have}: set tokenizer.path to "
                                  "it and rebuild the shards")
    if shard_vocab_size is not None and shard_vocab_size > loaded.config.vocab_size:
        raise ConversionError(f"{where}: the shards' vocabulary ({shard_vocab_size}) is larger than the model's "
                              f"({loaded.config.vocab_size})")
    state = {k: v.to(torch.float32) for k, v in loaded.state.items()}
    for part in parts:
        names = set(get_model_state_dict(part).keys())  # canonical names (wrappers such as checkpointing stripped)
        set_model_state_dict(part, {k: v for k, v in state.items() if k in names},
                             options=StateDictOptions(full_state_dict=True, strict=True))
    return loaded.description

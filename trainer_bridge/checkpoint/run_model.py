"""A run's trained model: which checkpoint (``find_checkpoint``), its config (``checkpoint_model_config``), its
weights (``load_model_state``) and special tokens, and the model built from them for inference
(``build_model``, ``load_run_model``). ``corpusmill generate`` and ``export``, validation's samples and
distillation's teacher all load a run's model here; ``hf`` converts it to and from Hugging Face folders."""
from __future__ import annotations

import json
import math
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed.checkpoint as dcp

from runio.errors import CorpusmillError, ExitCode
from runio.layout import RunPaths
from tokenizer.shards import read_manifest
from trainer_bridge.checkpoint.store import (
    BEST,
    MODEL_CONFIG_FILE,
    SafeFileSystemReader,
    checkpoint_candidates,
    checkpoint_problem,
    step_dir_name,
    step_of,
)
from trainer_bridge.config import ModelConfig
from trainer_bridge.model.transformer import Transformer

SPECIAL_TOKENS_FILE = "special_tokens.json"  # in a checkpoint directory written by import_hf


class ConversionError(CorpusmillError, ValueError):
    """The model, checkpoint or folder cannot be converted exactly; the message names what does not map.
    Training from such weights (``train.init_from: hf:...``) is refused; ``corpusmill export``/``import-hf``
    say it as a bad argument (``cli/hf.py``)."""

    exit_code = ExitCode.REFUSED


def say_on_stderr(line: str) -> None:
    """Where a note (a damaged checkpoint passed over) goes unless the caller takes it: one plain line."""
    print(line, file=sys.stderr, flush=True)


@dataclass
class SpecialTokens:
    """Ids and strings of pad/bos/eos and how documents were framed in training (``add_bos``/``add_eos``)."""

    pad_id: int | None
    bos_id: int | None
    eos_id: int | None
    pad_token: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    add_bos: bool = False
    add_eos: bool = True
    eos_ids: list[int] = field(default_factory=list)  # every id that ends generation (eos_id first)

    def __post_init__(self):
        if self.eos_id is not None and self.eos_id not in self.eos_ids:
            self.eos_ids = [self.eos_id, *self.eos_ids]

    def with_strings(self, tokenizer_json: Path) -> "SpecialTokens":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_json))
        names = {f: (tok.id_to_token(i) if i is not None else None)
                 for f, i in (("pad_token", self.pad_id), ("bos_token", self.bos_id), ("eos_token", self.eos_id))}
        return SpecialTokens(**{**asdict(self), **names})


def special_tokens_of_run(paths: RunPaths, checkpoint: Path | None) -> SpecialTokens:
    """From the run's shard manifest (what the model was trained on), else from an import's special_tokens.json."""
    if (paths.shards_manifest).exists():
        m = read_manifest(str(paths.shards))
        packing = m.get("packing") or {}
        special = SpecialTokens(pad_id=m["pad_id"], bos_id=m["bos_id"], eos_id=m["eos_id"],
                                add_bos=bool(packing.get("add_bos", False)), add_eos=bool(packing.get("add_eos", True)))
    elif checkpoint is not None and (checkpoint / SPECIAL_TOKENS_FILE).exists():
        special = SpecialTokens(**json.loads((checkpoint / SPECIAL_TOKENS_FILE).read_text()))
    else:
        raise ConversionError(f"{paths.root}: no shards/manifest.json and no {SPECIAL_TOKENS_FILE} in the "
                              "checkpoint: the special token ids are unknown")
    return special.with_strings(paths.tokenizer_json) if paths.tokenizer_json.exists() else special


def ffn_hidden(cfg: ModelConfig) -> int:
    return cfg.ffn_hidden or cfg.multiple_of * math.ceil(int(8 * cfg.dim / 3) / cfg.multiple_of)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the project's model for ``cfg`` and its shape (a meta model: no memory)."""
    with torch.device("meta"):
        model = Transformer(cfg)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def _val_losses(paths: RunPaths) -> dict[int, float]:
    """Validation loss by optimizer step count (a record of step s holds the loss after s + 1 steps)."""
    out = {}
    if not paths.metrics_jsonl.exists():
        return out
    for line in paths.metrics_jsonl.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record.get("val_loss"), (int, float)) and "step" in record:
            out[int(record["step"]) + 1] = float(record["val_loss"])
    return out


def find_checkpoint(paths: RunPaths, step: int | None = None, best: bool = False, *,
                    say: Callable[[str], None] = say_on_stderr) -> Path:
    """The newest sound checkpoint, checkpoint ``step``, or the best-validation one (``checkpoints/best`` when the
    trainer recorded it, else the retained checkpoint with the lowest validation loss in ``metrics.jsonl``).
    Newer checkpoints found damaged on the way to the newest sound one are said through ``say``, in one line
    naming them and the one used."""
    root = paths.checkpoints
    if not Path(paths.root).is_dir():
        raise FileNotFoundError(f"{paths.root}: no such run directory")
    if not root.is_dir():
        raise FileNotFoundError(f"{paths.root}: no checkpoints ({root} does not exist); train first")
    candidates = checkpoint_candidates(root)
    if step is not None:
        path = root / step_dir_name(step)
        if not (path / ".metadata").exists():
            raise FileNotFoundError(f"no checkpoint for step {step} in {root}; available: "
                                    f"{[step_of(p) for p in candidates] or 'none'}")
        if (problem := checkpoint_problem(path)) is not None:
            raise ConversionError(f"checkpoint {path} is damaged: {problem}")
        return path
    if best:
        pointer = root / BEST
        if pointer.exists():
            path = root / pointer.read_text().strip()
            if (problem := checkpoint_problem(path)) is not None:
                raise ConversionError(f"the best checkpoint {path} is damaged or gone: {problem}")
            return path
        losses = _val_losses(paths)
        scored = [(losses[step_of(p)], p) for p in candidates if step_of(p) in losses and checkpoint_problem(p) is None]
        if not scored:
            raise FileNotFoundError(f"{paths.root}: no retained checkpoint has a validation loss (eval.interval must "
                                    "be a multiple of checkpoint.interval, or the trainer must keep checkpoints/best)")
        return min(scored, key=lambda sp: (sp[0], -step_of(sp[1])))[1]
    damaged: list[tuple[str, str]] = []  # (name, problem) of each newer checkpoint passed over
    for path in candidates:
        problem = checkpoint_problem(path)
        if problem is None:
            if damaged:
                what = (f"checkpoint {damaged[0][0]} is damaged ({damaged[0][1]})" if len(damaged) == 1 else
                        f"checkpoints {', '.join(f'{name} ({why})' for name, why in damaged)} are damaged")
                say(f"{what}; using {path.name}, the newest sound one")
            return path
        damaged.append((path.name, problem))
    raise FileNotFoundError(f"no sound checkpoint in {root}"
                            + "".join(f"; {name} is damaged ({why})" for name, why in damaged))


def load_model_state(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model's parameters of a DCP checkpoint, full tensors in one process (whatever topology wrote it)."""
    reader = SafeFileSystemReader(checkpoint)
    metadata = reader.read_metadata().state_dict_metadata
    template = {}
    for key, meta in metadata.items():
        if key.startswith("model.") and hasattr(meta, "size"):
            template[key[len("model."):]] = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
    if not template:
        raise ConversionError(f"{checkpoint}: holds no model parameters")
    state = {"model": template}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(checkpoint), storage_reader=SafeFileSystemReader(checkpoint), no_dist=True)
    return state["model"]


def load_train_progress(checkpoint: Path) -> dict | None:
    """Step, samples and tokens seen of a training checkpoint (None for a model-only one)."""
    metadata = SafeFileSystemReader(checkpoint).read_metadata().state_dict_metadata
    meta = metadata.get("train.progress")
    if meta is None:
        return None
    state = {"train": {"progress": torch.empty(tuple(meta.size), dtype=meta.properties.dtype)}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(checkpoint), storage_reader=SafeFileSystemReader(checkpoint), no_dist=True)
    values = state["train"]["progress"].tolist()
    return {"step": values[0], "samples": values[1], "tokens_seen": values[2]}


def checkpoint_model_config(paths: RunPaths, checkpoint: Path) -> ModelConfig:
    """The resolved model config: the checkpoint's own ``model_config.json`` when it has one, else the run's
    ``train/train_config.json`` with vocab_size and max_seq_len filled from the shards' manifest."""
    own = checkpoint / MODEL_CONFIG_FILE
    if own.exists():
        return ModelConfig.model_validate_json(own.read_text())
    if not paths.train_config.exists():
        raise ConversionError(f"{checkpoint}: no {MODEL_CONFIG_FILE} and no {paths.train_config}: the model's "
                              "shape is unknown")
    model = ModelConfig.model_validate(json.loads(paths.train_config.read_text()).get("model", {}))
    if model.vocab_size is None or model.max_seq_len is None:
        manifest = read_manifest(str(paths.shards))
        model = model.model_copy(update={"vocab_size": model.vocab_size or manifest["vocab_size"],
                                         "max_seq_len": model.max_seq_len or manifest["seq_len"]})
    return model


def build_model(cfg: ModelConfig, state: dict[str, torch.Tensor], device: str | torch.device = "cpu") -> Transformer:
    """The project's model with ``state`` loaded (fp32 parameters), in eval mode."""
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device)
    model.init_buffers()
    check_model_state(state, cfg, "weights")
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)
    if cfg.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    return model.eval()


@dataclass
class LoadedModel:
    config: ModelConfig
    state: dict[str, torch.Tensor]
    special: SpecialTokens
    tokenizer_json: Path
    description: str  # what was loaded: "<run dir> step-NNNNNNNN", or "<folder> (HF)"


def check_model_state(state: dict[str, torch.Tensor], cfg: ModelConfig, where: str) -> None:
    """Names and shapes of ``state`` against the model ``cfg`` describes (``ConversionError`` naming the
    differences)."""
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    wrong = sorted(k for k in set(want) & set(state) if tuple(state[k].shape) != want[k])
    if missing or extra or wrong:
        raise ConversionError(f"{where}: does not match the model config: missing {missing[:8]}, unexpected "
                              f"{extra[:8]}, shape differs {[(k, tuple(state[k].shape), want[k]) for k in wrong[:4]]}")


def checkpoint_weights(paths: RunPaths, checkpoint: Path) -> tuple[ModelConfig, dict]:
    """A checkpoint's model config and weights, a tied output projection filled in from the embedding."""
    cfg = checkpoint_model_config(paths, checkpoint)
    state = load_model_state(checkpoint)
    if cfg.tie_embeddings and "output.weight" not in state:
        state["output.weight"] = state["tok_embeddings.weight"]
    return cfg, state


def load_run_model(paths: RunPaths, *, step: int | None = None, best: bool = False,
                   say: Callable[[str], None] = say_on_stderr) -> LoadedModel:
    """Weights, config, special tokens and tokenizer of a run directory (or an import's); a damaged newer
    checkpoint passed over is said through ``say`` (``find_checkpoint``)."""
    checkpoint = find_checkpoint(paths, step, best, say=say)
    cfg, state = checkpoint_weights(paths, checkpoint)
    if not paths.tokenizer_json.exists():
        raise ConversionError(f"{paths.tokenizer_json} does not exist")
    return LoadedModel(cfg, state, special_tokens_of_run(paths, checkpoint), paths.tokenizer_json,
                       f"{paths.root} {checkpoint.name}")

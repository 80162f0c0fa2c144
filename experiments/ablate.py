"""`corpusmill ablate`: does cleaning pay? The same model, seed and token budget on differently cleaned corpora,
all evaluated on the same held-out text.

Variants (each a run directory ``<run>/ablate/<variant>/`` prepared by ``pipelines.run.run_stages``, so a re-run
skips the stages already done, as ``corpusmill run`` does):

* ``cleaned``: the run config as it is (the full configured cleaning);
* ``raw``: no cleaning step at all (filters, exact/near dedup, quality, PII off; normalization reduced to what
  cannot be turned off: line endings and control characters) — only tokenization;
* ``minus:STEP``: the full cleaning without STEP (leave one out).

The evaluation text is the ``val`` split of the ``cleaned`` variant: documents chosen by a stable hash of their
id (``packing.val_fraction``, ``packing.split_seed``). Document ids are a stable hash of the input file and the
position in it, so an evaluation document has the same id in every variant, and the same hash puts it in the
``val`` split of every variant, never in ``train``; ``check_exclusion`` verifies this on every variant's train
shards (by id) and refuses to train otherwise. Every variant uses the ``cleaned`` variant's tokenizer (copied
via ``tokenizer.path``), so the evaluation token ids are the same bytes for all.

Each variant trains in ``<run>/ablate/<variant>/eval_view/``: a run directory whose ``shards/`` holds the
variant's train shard files and the ``cleaned`` variant's val shard files (symbolic links) under one manifest.
These paths are ``runio.layout.AblationPaths`` (``RunPaths.ablation``), beside the rest of the run layout.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from experiments.sweep import train_one
from pipelines.config import ConfigError, RunConfig, validate_config
from pipelines.run import DATA_STAGES, run_stages
from pipelines.steps import STEPS, enabled_steps
from runio.files import write_json
from runio.layout import AblationPaths, RunPaths
from tokenizer.shards import read_manifest

CLEANING_SECTIONS = ("filters", "exact_dedup", "near_dedup", "quality", "pii")


@dataclass(frozen=True)
class Variant:
    name: str        # raw | cleaned | minus:STEP
    step: str | None = None

    @property
    def dir_name(self) -> str:
        return self.name.replace(":", "-")


def parse_variants(text: str, cfg: RunConfig) -> list[Variant]:
    known = enabled_steps(cfg)
    variants = []
    for item in [v.strip() for v in text.split(",") if v.strip()]:
        if item in ("raw", "cleaned"):
            variants.append(Variant(item))
        elif item.startswith("minus:"):
            step = item.split(":", 1)[1]
            if step not in CLEANING_SECTIONS:
                raise ConfigError(f"--variants {item}: a step to leave out is one of {', '.join(CLEANING_SECTIONS)}")
            if step not in known:
                raise ConfigError(f"--variants {item}: {step} is not enabled in this config (enabled: "
                                  f"{', '.join(known)})")
            variants.append(Variant(item, step))
        else:
            raise ConfigError(f"--variants: unknown variant {item!r} (raw, cleaned, minus:STEP)")
    if not variants:
        raise ConfigError("--variants: name at least one variant")
    return variants


def variant_config(cfg: RunConfig, variant: Variant, ablation: AblationPaths, tokenizer: Path | None) -> RunConfig:
    data = cfg.model_dump(mode="json")
    data["name"] = variant.dir_name
    data["output"]["runs_dir"] = str(ablation.root)
    if variant.name == "raw":
        for section in CLEANING_SECTIONS:
            data[section]["enabled"] = False
        data["normalize"].update(unicode_form="none", collapse_spaces=False, max_blank_lines=1_000_000)
    elif variant.step is not None:
        data[variant.step]["enabled"] = False
    if tokenizer is not None:
        data["tokenizer"]["path"] = str(tokenizer)
    if ablation.run.takedown_ledger.is_file():  # every variant, raw included, drops what the run forgot
        data["takedown"]["ledgers"] = [*data["takedown"]["ledgers"], str(ablation.run.takedown_ledger)]
    return validate_config(data)


def split_doc_ids(shard_dir: Path, split: str) -> set[int]:
    """Every document id of a split's rows (from the shards' ``doc_ids`` column)."""
    manifest = read_manifest(str(shard_dir))
    ids: set[int] = set()
    for entry in manifest["splits"].get(split, []):
        with pa.memory_map(str(shard_dir / entry["file"])) as source:
            table = pa.ipc.open_file(source).read_all()
        for row in table.column("doc_ids").to_pylist():
            ids.update(row)
    return ids


def evaluated_tokens(view: RunPaths, cfg: RunConfig) -> np.ndarray:
    """The token ids the trainer's validation reads from a run directory (its ``validation_batches``, one rank),
    with the tokenizer check the trainer makes."""
    from trainer_bridge.loop.data import open_split, validation_batches  # deferred: the trainer's modules import torch
    from trainer_bridge.loop.train import expected_tokenizer_sha256  # deferred: torch, as above

    source = open_split(view.shards, "val", expected_tokenizer_sha256(view))
    batches = validation_batches(source, max_rows=cfg.train.eval.max_rows,
                                 micro_batch_size=cfg.train.batch.micro_batch_size, dp_rank=0, dp_size=1)
    return np.concatenate([b.input_ids.numpy().ravel() for b in batches])


def check_exclusion(variant: Variant, shards: Path, eval_ids: set[int]) -> None:
    leaked = split_doc_ids(shards, "train") & eval_ids
    if leaked:
        raise ConfigError(f"ablate {variant.name}: {len(leaked)} evaluation document(s) are in its train split "
                          f"(e.g. id {min(leaked)}); the variants must share packing.val_fraction and split_seed")


def build_view(variant_paths: RunPaths, cleaned: RunPaths, view: RunPaths) -> None:
    """``view/shards``: the variant's train shards and the cleaned variant's val shards under one manifest."""
    own = read_manifest(str(variant_paths.shards))
    evaluation = read_manifest(str(cleaned.shards))
    if own["tokenizer_sha256"] != evaluation["tokenizer_sha256"]:
        raise ConfigError(f"ablate: {variant_paths.name} was tokenized with another tokenizer than the evaluation "
                          f"text ({own['tokenizer_sha256'][:12]} vs {evaluation['tokenizer_sha256'][:12]})")
    view.shards.mkdir(parents=True, exist_ok=True)
    for link in view.shards.glob("*.arrow"):
        link.unlink()
    for source, entries in ((variant_paths.shards, own["splits"]["train"]),
                            (cleaned.shards, evaluation["splits"]["val"])):
        for entry in entries:
            (view.shards / entry["file"]).symlink_to((source / entry["file"]).resolve())
    manifest = {**own, "splits": {"train": own["splits"]["train"], "val": evaluation["splits"]["val"]},
                "totals": {"train": own["totals"]["train"], "val": evaluation["totals"]["val"]},
                "ablation": {"train_from": str(variant_paths.shards), "val_from": str(cleaned.shards)}}
    if not view.tokenizer_dir.exists():
        view.tokenizer_dir.symlink_to(variant_paths.tokenizer_dir.resolve(), target_is_directory=True)
    write_json(view.shards_manifest, manifest)


def funnel(paths: RunPaths) -> dict:
    stats = json.loads(paths.stats.read_text()) if paths.stats.is_file() else {}
    return {"documents_read": stats.get("documents_read"), "kept": stats.get("kept"),
            "removed_by_step": {row["step"]: row.get("removed") for row in stats.get("steps", [])}}


def run_ablation(cfg: RunConfig, variants: list[Variant], log: Callable[[str], None] = print) -> dict:
    run = RunPaths.of(cfg)
    ablation = run.ablation
    ablation.root.mkdir(parents=True, exist_ok=True)
    ordered = [Variant("cleaned")] + [v for v in variants if v.name != "cleaned"]
    cleaned_paths = ablation.variant(ordered[0])
    results = []
    eval_ids: set[int] = set()
    for variant in ordered:
        tokenizer = None if variant.name == "cleaned" else cleaned_paths.tokenizer_json
        vcfg = variant_config(cfg, variant, ablation, tokenizer)
        log(f"ablate: variant {variant.name} ({', '.join(enabled_steps(vcfg))}) → {ablation.variant(variant)}")
        run_stages(vcfg, DATA_STAGES, resume=True, log=lambda line: log(f"  {line}"))
        vpaths = ablation.variant(variant)
        if variant.name == "cleaned":
            eval_ids = split_doc_ids(cleaned_paths.shards, "val")
            if not eval_ids:
                raise ConfigError("ablate: the cleaned corpus has no held-out 'val' documents (raise "
                                  "packing.val_fraction)")
        check_exclusion(variant, vpaths.shards, eval_ids)
        if variant not in variants:
            continue
        view = ablation.view(variant)
        build_view(vpaths, cleaned_paths, view)
        view_cfg = vcfg.model_copy(update={"name": view.name, "output": vcfg.output.model_copy(
            update={"runs_dir": str(view.root.parent)})})
        done_file = view.train / "ablation_result.json"
        fingerprint = vcfg.fingerprint()
        previous = json.loads(done_file.read_text()) if done_file.is_file() else None
        if previous and previous.get("fingerprint") == fingerprint:
            log(f"ablate: {variant.name}: training already done with this config, skipped")
            row = previous["row"]
        else:
            if view.train.exists():
                import shutil

                shutil.rmtree(view.train)
            losses, tokens = train_one(view_cfg, view)
            if not losses:
                raise ConfigError("ablate: no validation ran (set train.eval.interval > 0 and a step budget "
                                  "that reaches it)")
            manifest = read_manifest(str(vpaths.shards))
            row = {"variant": variant.name, "steps_enabled": enabled_steps(vcfg),
                   "val_losses": {str(k): v for k, v in sorted(losses.items())},
                   "final_val_loss": losses[max(losses)], "tokens_seen": tokens,
                   "train_docs": manifest["totals"]["train"].get("docs"),
                   "train_tokens_available": manifest["totals"]["train"].get("tokens"),
                   "eval_docs": len(eval_ids), "eval_tokens": int(read_manifest(str(view.shards))["totals"]["val"]
                                                                  ["tokens"]),
                   "funnel": funnel(vpaths), "run_dir": str(vpaths.root)}
            write_json(done_file, {"fingerprint": fingerprint, "row": row})
        results.append(row)
    out = {"run": cfg.name, "seed": cfg.train.seed, "steps": cfg.train.steps,
           "global_batch_size": cfg.train.batch.global_batch_size, "seq_len": cfg.packing.seq_len,
           "eval_from": str(cleaned_paths.shards), "variants": results}
    write_json(ablation.results, out)
    return out


__all__ = ["Variant", "parse_variants", "run_ablation", "split_doc_ids", "evaluated_tokens", "STEPS"]

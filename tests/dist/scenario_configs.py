"""The tiny fp32 training setup shared by the single-process reference and the torchrun scenarios, and the
test-side helpers around it (a run directory over shared shards, the sample recorder hook)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from runio.files import sha256_file
from runio.layout import RunPaths
from trainer_bridge.config import TrainConfig
from trainer_bridge.loop.train import TrainHooks

BASE = {
    "model": {"dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 16},
    # 8 rows per step; micro-batches of 2 → accumulation 4 on one rank, 2 on two data-parallel ranks.
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    # Gradient norms are ~1.2 here: clipping at 0.8 is active on every step.
    "optimizer": {"lr": 3e-3, "warmup_steps": 2, "clip_grad_norm": 0.8},
    "checkpoint": {"interval": 5, "keep_last": 3},
    "eval": {"interval": 5, "max_rows": 8},
    "metrics": {"tensorboard": False, "peak_flops": 1e11},
    "steps": 10,
    "device": "cpu",
}


def merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def base_config(overrides: dict | None = None) -> TrainConfig:
    return TrainConfig.model_validate(merge(BASE, overrides or {}))


def run_with_shards(root: Path, shards: Path) -> RunPaths:
    """A run directory at ``root`` whose shards are ``shards`` (linked: tests share one synthetic set)."""
    paths = RunPaths(root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        paths.shards.symlink_to(Path(shards).resolve(), target_is_directory=True)
    except FileExistsError:  # linked before (a resumed run), or by another rank of the same job just now
        pass
    return paths


class SampleLog:
    """A test-side ``TrainHooks.on_batch``: the rows each step trained on on this rank (``sample_ids``: step ->
    rows, the last time the step ran) and every batch in order (``consumed``: a step repeated after a rollback
    appears twice)."""

    def __init__(self):
        self.sample_ids: dict[int, list[int]] = {}
        self.consumed: list[list[int]] = []

    def __call__(self, step: int, sample_ids: list[int]) -> None:
        self.sample_ids[step] = sample_ids
        self.consumed.append(sample_ids)

    def hooks(self, **others) -> TrainHooks:
        return TrainHooks(on_batch=self, **others)


DOMAINS = ("alpha", "beta", "gamma")
# Evaluation during training on make_domain_run's run directory: per-domain loss, samples, best checkpoint.
EVAL = {"model": {"dim": 32, "n_layers": 2, "n_heads": 2, "multiple_of": 16}, "steps": 6,
        "eval": {"interval": 2, "max_rows": 4, "domain_key": "source", "sample_tokens": 6,
                 "sample_prompts": ["alpha document", "the"]},
        "checkpoint": {"interval": 2, "keep_last": 1}}
SEQ_LEN = 48


def make_domain_run(root: Path) -> RunPaths:
    """A run directory with docs/ (domain in meta 'source', file name in the 'source' column), a tiny BPE
    tokenizer, and shards whose rows pack documents of several domains."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from beamio.write import DOCS_SCHEMA, doc_row
    from tokenizer.shards import write_shards

    paths = RunPaths(root)
    texts = [f"{d} document number {i} about the {d} things" for i in range(40) for d in DOMAINS]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "<s>", "</s>",
                                                                                       "<unk>"]))
    paths.tokenizer_dir.mkdir(parents=True)
    tok.save(str(paths.tokenizer_json))
    vocab = tok.get_vocab_size()
    docs, encoded = [], {}
    for i, text in enumerate(texts):
        doc_id = 500 + i
        docs.append(doc_row({"id": doc_id, "text": text, "source": "corpus.jsonl", "annotations": {},
                             "meta": {"source": DOMAINS[i % 3]}}))
        encoded[doc_id] = tok.encode(text).ids + [2]
    paths.docs.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(docs, schema=DOCS_SCHEMA), paths.docs / "docs-00000-of-00001.parquet")
    ids = sorted(encoded)
    for split, chosen in (("train", ids[:96]), ("val", ids[96:])):
        rows, tokens, lens, row_ids = [], [], [], []
        for doc_id in chosen:
            piece = encoded[doc_id][:SEQ_LEN]
            if sum(lens) + len(piece) > SEQ_LEN:
                row = np.zeros(SEQ_LEN, dtype=np.uint16)
                row[:sum(lens)] = tokens
                rows.append((row, lens, row_ids))
                tokens, lens, row_ids = [], [], []
            tokens, lens, row_ids = tokens + piece, lens + [len(piece)], row_ids + [doc_id]
        row = np.zeros(SEQ_LEN, dtype=np.uint16)
        row[:sum(lens)] = tokens
        rows.append((row, lens, row_ids))
        write_shards(str(paths.shards), rows, split=split, seq_len=SEQ_LEN, vocab_size=vocab, pad_id=0, bos_id=1,
                     eos_id=2, tokenizer_sha256=sha256_file(paths.tokenizer_json),
                     packing={"algorithm": "test", "add_bos": False, "add_eos": True}, rows_per_shard=64)
    return paths


def launch_scenarios(script: str, workdir: Path, processes: int, group: str) -> None:
    """One torchrun launch of ``tests/dist/<script>`` running its scenario group on ``processes`` CPU ranks; the
    output is kept in ``<workdir>/<group>.log`` and its tail shown when the launch fails."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               str(repo / "tests" / "dist" / script), str(workdir), group]
    done = subprocess.run(command, env=env, cwd=repo, capture_output=True, text=True, timeout=1200)
    (workdir / f"{group}.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"torchrun {group} failed:\n{(done.stdout + done.stderr)[-6000:]}"

"""RoPE scaling for a longer context: a model trained on windows of L tokens, evaluated on windows of 2L and 4L
with and without scaling (issue 12, item 3's measured example).

Data: the long documents of the shipped demo corpus (data/demo/corpus.jsonl.gz), tokenized by a byte-level BPE
trained here on the same corpus; documents are split into train and held-out by a stable hash of their url, so no
evaluation window comes from a training document. Model: the trainer's own ``trainer_bridge.model.transformer.Transformer``
(no parallelism), AdamW, one process. Training windows are L tokens with positions 0..L-1 (one document each);
evaluation windows of n·L tokens (positions 0..n·L-1) come from held-out documents at least that long.

Reported per evaluation length and RoPE setting: the mean next-token loss over the whole window, and over the
positions beyond the trained length only (where extrapolation happens). ``linear`` and ``llama3`` use the factor
n (``rope_original_max_len`` = L); the scaled variants are also shown after a short fine-tune at the longer length
(``--finetune-steps``), which is how position interpolation is meant to be used.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_rope_scaling.py [--train-len 128] [--steps 600] [--json out.json]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tokenizer.config import TokenizerConfig
from tokenizer.train import train_tokenizer
from trainer_bridge.config import ModelConfig
from trainer_bridge.model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]


def load_documents(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def held_out(doc: dict) -> bool:
    return hashlib.sha256(doc["url"].encode()).digest()[0] < 64  # about a quarter of the documents


def windows(token_docs: list[list[int]], length: int, stride: int | None = None) -> torch.Tensor:
    rows = []
    for ids in token_docs:
        for start in range(0, len(ids) - length + 1, stride or length):
            rows.append(ids[start:start + length])
    return torch.tensor(rows, dtype=torch.long)


def forward_loss(model: Transformer, rows: torch.Tensor, from_position: int = 0) -> torch.Tensor:
    """Mean next-token loss over targets at positions >= from_position (one document per row)."""
    b, s = rows.shape
    positions = torch.arange(s).expand(b, s)
    logits = model(rows[:, :-1], positions[:, :-1], torch.zeros(b, s - 1, dtype=torch.long))
    targets = rows[:, 1:].clone()
    targets[:, :max(0, from_position - 1)] = -100
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def train(model: Transformer, rows: torch.Tensor, steps: int, batch: int, lr: float, seed: int) -> list[float]:
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 20)
    losses = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        picked = rows[torch.randint(len(rows), (batch,), generator=generator)]
        loss = forward_loss(model, picked)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def with_rope(model: Transformer, cfg: ModelConfig, **rope) -> Transformer:
    """The same weights with another RoPE setting (the inverse frequencies are a non-persistent buffer)."""
    other = Transformer(cfg.model_copy(update=rope))
    other.load_state_dict(model.state_dict())
    return other


@torch.no_grad()
def evaluate(model: Transformer, rows: torch.Tensor, train_len: int, batch: int = 8) -> dict:
    model.eval()
    whole, beyond = [], []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        whole.append(float(forward_loss(model, chunk)) * len(chunk))
        if chunk.shape[1] > train_len:
            beyond.append(float(forward_loss(model, chunk, from_position=train_len)) * len(chunk))
    model.train()
    n = len(rows)
    return {"loss": sum(whole) / n, "loss_beyond_trained_length": sum(beyond) / n if beyond else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT / "data/demo/corpus.jsonl.gz"))
    parser.add_argument("--train-len", type=int, default=128)
    parser.add_argument("--multiples", default="2,4")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--finetune-steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--eval-docs", type=int, default=48, help="held-out documents evaluated (the first N)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    started = time.perf_counter()

    docs = load_documents(Path(args.corpus))
    tok_cfg = TokenizerConfig(vocab_size=args.vocab)
    tokenizer = train_tokenizer([d["text"] for d in docs if not held_out(d)], tok_cfg, "/tmp/rope_bench_tokenizer.json")
    multiples = [int(m) for m in args.multiples.split(",")]
    longest = args.train_len * max(multiples)
    encoded = {i: tokenizer.encode(d["text"]).ids for i, d in enumerate(docs)}
    train_docs = [encoded[i] for i, d in enumerate(docs) if not held_out(d)]
    eval_docs = [encoded[i] for i, d in enumerate(docs) if held_out(d) and len(encoded[i]) >= longest + 1]
    eval_docs = eval_docs[:args.eval_docs]
    train_rows = windows(train_docs, args.train_len + 1, stride=args.train_len // 2)
    cfg = ModelConfig(vocab_size=tokenizer.get_vocab_size(), max_seq_len=longest + 1, dim=args.dim,
                      n_layers=args.layers, n_heads=4, n_kv_heads=4)
    model = Transformer(cfg)
    with torch.no_grad():  # the trainer's initialization rule (Transformer.init_std: None = a norm gain, 1.0)
        for fqn, p in model.named_parameters():
            std = model.init_std(fqn)
            p.fill_(1.0) if std is None else p.normal_(0.0, std)
    print(f"{len(train_rows)} training windows of {args.train_len} tokens from {len(train_docs)} documents; "
          f"{len(eval_docs)} held-out documents of >= {longest} tokens")
    losses = train(model, train_rows, args.steps, args.batch, args.lr, args.seed)
    print(f"trained {args.steps} steps in {time.perf_counter() - started:.0f} s, last loss {losses[-1]:.3f}")

    results = {"train_len": args.train_len, "steps": args.steps, "train_windows": len(train_rows),
               "eval_documents": len(eval_docs), "rows": []}
    # One window per held-out document at each length (its start), so every length sees the same documents.
    eval_at = {n: torch.tensor([ids[:args.train_len * n + 1] for ids in eval_docs]) for n in [1, *multiples]}
    base = evaluate(model, eval_at[1], args.train_len)
    results["rows"].append({"eval_len": args.train_len, "rope": "none", "finetuned": False, **base})
    for n in multiples:
        rows = eval_at[n]
        settings = [("none", {}), ("linear", {"rope_scaling": "linear", "rope_scaling_factor": float(n)}),
                    ("llama3", {"rope_scaling": "llama3", "rope_scaling_factor": float(n),
                                "rope_original_max_len": args.train_len})]
        for name, rope in settings:
            scaled = with_rope(model, cfg, **rope)
            results["rows"].append({"eval_len": args.train_len * n, "rope": name, "finetuned": False,
                                    **evaluate(scaled, rows, args.train_len)})
            if args.finetune_steps:
                long_rows = windows(train_docs, args.train_len * n + 1, stride=args.train_len * n // 2)
                train(scaled, long_rows, args.finetune_steps, max(1, args.batch // n), args.lr * 0.3, args.seed + n)
                results["rows"].append({"eval_len": args.train_len * n, "rope": name, "finetuned": True,
                                        **evaluate(scaled, rows, args.train_len)})
    results["seconds"] = round(time.perf_counter() - started, 1)

    print(f"\n| eval length | RoPE | fine-tuned {args.finetune_steps} steps at that length | loss (whole window) "
          f"| loss beyond position {args.train_len} |")
    print("|---|---|---|---|---|")
    for row in results["rows"]:
        beyond = row["loss_beyond_trained_length"]
        print(f"| {row['eval_len']} | {row['rope']} | {'yes' if row['finetuned'] else 'no'} | {row['loss']:.4f} | "
              f"{'' if beyond is None else f'{beyond:.4f}'} |")
    print(f"\n{results['seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

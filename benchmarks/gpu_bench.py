"""One-GPU trainer benchmark: a ~1B-parameter Llama-style model, bf16, packed 2048-token rows; prints tokens/s
and MFU. One command, a few minutes on one H200 (budget: under 8 minutes, compile and shard writing included):

    PYTHONPATH=. python benchmarks/gpu_bench.py              # flex_attention (compiled) document masking
    PYTHONPATH=. python benchmarks/gpu_bench.py --attention sdpa --steps 20
    PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/gpu_bench.py --tp 2      # tensor + sequence parallel
    PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/gpu_bench.py --experts 8 --ep 2   # MoE, expert parallel
    PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/gpu_bench.py --cp 2 --seq-len 16384 --micro-batch 1 \
        --global-batch 2                                                   # context parallel, long rows

``--tp``/``--ep``/``--cp`` need as many processes (GPUs) as their product; ``--ep`` shards the experts over the
dp ranks (dp = ep); ``--cp`` splits every row's sequence over cp ranks (``--cp-mode ring|allgather``; dense
models only, as mesh.cp); tokens/s counts each row's tokens once, not once per cp rank that holds a part of it.

The whole trainer runs (shards through ShardReader, prefetching loader, guards, metrics); checkpoints and
validation are off so that only training steps are timed. Throughput and MFU are the medians over the steps
after --warmup; MFU counts 6·N per real token plus causal within-document attention FLOPs (metrics.py)
against the device's dense bf16 peak (device.py's table; H200: 989 TFLOP/s).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runio.layout import RunPaths  # noqa: E402
from trainer_bridge.config import TrainConfig  # noqa: E402
from trainer_bridge.model.transformer import count_parameters  # noqa: E402
from trainer_bridge.loop.synthetic import write_synthetic_shards  # noqa: E402
from trainer_bridge.loop.train import TrainHooks, train  # noqa: E402

MODEL_1B = {"dim": 2048, "n_layers": 18, "n_heads": 16, "n_kv_heads": 8, "multiple_of": 256,
            "rope_theta": 500000.0}
MODEL_SMOKE = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "multiple_of": 16}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=8, help="steps excluded from the medians (compile, caches)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--attention", choices=["auto", "flex", "sdpa"], default="auto")
    parser.add_argument("--activation-checkpointing", choices=["none", "every", "every_n"], default="none")
    parser.add_argument("--compile", action="store_true", help="torch.compile every block")
    parser.add_argument("--out", type=Path, help="also write the summary JSON here")
    parser.add_argument("--tp", type=int, default=1, help="tensor + sequence parallel degree (mesh.tp)")
    parser.add_argument("--ep", type=int, default=1, help="expert parallel degree over dp ranks (mesh.ep = mesh.dp)")
    parser.add_argument("--cp", type=int, default=1, help="context parallel degree (mesh.cp): rows split over cp ranks")
    parser.add_argument("--cp-mode", choices=["ring", "allgather"], default="ring", help="mesh.cp_mode")
    parser.add_argument("--experts", type=int, default=0, help="MoE: experts per MoE layer (0: dense)")
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--smoke", action="store_true",
                        help="check this script on CPU with a tiny fp32 model (no meaningful figure)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.warmup, args.seq_len, args.micro_batch, args.global_batch = 4, 1, 256, 2, 4
        args.attention = "sdpa"
    elif torch.accelerator.current_accelerator(check_available=True) is None:
        print("gpu_bench: needs a CUDA GPU (this machine has none); the CPU benchmark is bench_trainer.py",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as tmp:
        return measure(args, Path(tmp), started)


def train_config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {**(MODEL_SMOKE if args.smoke else MODEL_1B),
                  **({"n_experts": args.experts, "top_k": args.top_k} if args.experts else {})},
        "mesh": {"tp": args.tp, "dp": args.ep, "ep": args.ep, "cp": args.cp, "cp_mode": args.cp_mode},
        "precision": {"dtype": "fp32" if args.smoke else "bf16"},
        "batch": {"global_batch_size": args.global_batch, "micro_batch_size": args.micro_batch},
        "optimizer": {"lr": 3e-4, "warmup_steps": 10},
        "activation_checkpointing": {"mode": args.activation_checkpointing},
        "checkpoint": {"enabled": False}, "eval": {"interval": 0},
        "metrics": {"tensorboard": False},
        "attention": args.attention, "compile": args.compile, "steps": args.steps,
        "device": "cpu" if args.smoke else "auto",
    })


def measure(args: argparse.Namespace, work: Path, started: float) -> int:
    try:
        cfg = train_config(args)
    except ValidationError as error:  # e.g. --cp with --ep: one line naming the field, no traceback
        print(f"gpu_bench: {error.errors()[0]['msg']}", file=sys.stderr)
        return 2
    rows_needed = args.global_batch * (args.steps + 2)
    # Documents of 64..3000 tokens (cut at seq_len), greedily packed: realistic document structure.
    run = RunPaths(work / "gpu_bench")
    write_synthetic_shards(run.shards, seq_len=args.seq_len, vocab_size=32000,
                           train_docs=rows_needed * 3, val_docs=8, min_doc_len=64, max_doc_len=3000, fill=0.97,
                           rows_per_shard=512)
    params = count_parameters(cfg.model.model_copy(update={"vocab_size": 32000, "max_seq_len": args.seq_len}))
    from trainer_bridge.parallel import device as devices

    accelerator = torch.accelerator.current_accelerator(check_available=True)
    device_name = "cpu (smoke check)" if args.smoke else devices.device_name(accelerator)
    print(f"gpu_bench: {device_name}; model {params['total'] / 1e9:.2f}B parameters "
          f"({params['non_embedding'] / 1e9:.2f}B in matmuls), seq_len {args.seq_len}, "
          f"{args.global_batch} rows/step in micro-batches of {args.micro_batch}, {cfg.precision.dtype}, "
          f"attention {args.attention}",
          flush=True)
    records: list[dict] = []  # every step's metrics record (what metrics.jsonl logs)
    hooks = TrainHooks(on_step=lambda step, record: records.append(dict(record)))
    try:
        result = train(cfg, run, hooks=hooks)
    except Exception as error:  # noqa: BLE001 — flex_attention compilation can fail on some stacks
        if args.attention == "sdpa":
            raise
        print(f"gpu_bench: attention {args.attention} failed ({type(error).__name__}: {error}); "
              "measuring again with --attention sdpa", flush=True)
        args.attention = "sdpa"
        cfg = cfg.model_copy(update={"attention": "sdpa"})
        records.clear()
        result = train(cfg, run, hooks=hooks)
    timed = [r for r in records if r["step"] >= args.warmup]
    summary = {
        "device": device_name,
        "parameters": params["total"],
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "mfu": statistics.median(r["mfu"] for r in timed),
        "step_time_s": statistics.median(r["step_time_s"] for r in timed),
        "data_wait_fraction": sum(r["data_wait_s"] for r in timed) / sum(r["step_time_s"] for r in timed),
        "peak_memory_gib": max(r["peak_memory_bytes"] for r in records) / 2**30,
        "loss_first": records[0]["loss"], "loss_last": records[-1]["loss"],
        "timed_steps": len(timed), "wall_s": time.perf_counter() - started,
        "attention": args.attention, "compile": args.compile, "tp": args.tp, "ep": args.ep,
        "cp": args.cp, "cp_mode": args.cp_mode if args.cp > 1 else None, "experts": args.experts,
    }
    if os.environ.get("RANK", "0") != "0":  # every rank measured the same steps; rank 0 reports them
        return 0
    print("gpu_bench: " + json.dumps(summary))
    print(f"gpu_bench: {summary['tokens_per_s']:,.0f} tokens/s, MFU {summary['mfu'] * 100:.1f}%, "
          f"step {summary['step_time_s'] * 1e3:.0f} ms, data wait {summary['data_wait_fraction'] * 100:.2f}%, "
          f"peak memory {summary['peak_memory_gib']:.1f} GiB, loss {summary['loss_first']:.3f} → "
          f"{summary['loss_last']:.3f}, {summary['wall_s']:.0f} s in all", flush=True)
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))
    del result
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""KV-cache decoding vs full recompute, 256 new tokens, in one run.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_generate.py [--new-tokens 256 --rounds 3]

The same model (random weights; a few million parameters, as a small run trains here) continues the same
prompts greedily with ``trainer_bridge.model.generate.generate``: once with the KV cache (one forward pass over the
new token per step) and once with ``use_cache=False`` (the training forward over the whole sequence for every
new token). Rounds alternate between the two, so machine contention hits both alike; the median wall time and
the median CPU time (this process, all threads: not inflated when other processes compete for the cores) of
each are compared. Both decode the same tokens (checked). Prints one JSON object; exits 1 below --min-ratio.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer_bridge.config import ModelConfig  # noqa: E402
from trainer_bridge.model.generate import SamplingConfig, generate  # noqa: E402
from trainer_bridge.model.transformer import Transformer  # noqa: E402
from trainer_bridge.parallel.parallelize import materialize  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1, help="prompts decoded together")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each mode")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--min-ratio", type=float, default=5.0)
    args = parser.parse_args(argv)

    cfg = ModelConfig(vocab_size=args.vocab, dim=args.dim, n_layers=args.layers, n_heads=8, n_kv_heads=4,
                      max_seq_len=args.prompt_tokens + args.new_tokens)
    with torch.device("meta"):
        model = Transformer(cfg)
    materialize(model, torch.device("cpu"), seed=0)
    model.eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, args.vocab, (args.prompt_tokens,), generator=g).tolist() for _ in range(args.batch)]
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=0.0)

    times: dict[str, dict[str, list[float]]] = {m: {"wall": [], "cpu": []} for m in ("cache", "recompute")}
    outputs = {}
    generate(model, prompts, SamplingConfig(max_new_tokens=4, temperature=0.0))  # warm-up (allocator, kernels)
    for _ in range(args.rounds):
        for mode in ("cache", "recompute"):
            wall, cpu = time.perf_counter(), time.process_time()
            result = generate(model, prompts, sampling, use_cache=mode == "cache")
            times[mode]["wall"].append(time.perf_counter() - wall)
            times[mode]["cpu"].append(time.process_time() - cpu)
            outputs[mode] = [r.tokens for r in result]
    if outputs["cache"] != outputs["recompute"]:
        print("bench_generate: the cached and the recomputed decoding differ", file=sys.stderr)
        return 1
    median = {m: {k: statistics.median(v) for k, v in t.items()} for m, t in times.items()}
    report = {
        "model": {"dim": args.dim, "layers": args.layers, "vocab": args.vocab, "parameters": sum(
            p.numel() for p in model.parameters())},
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "batch": args.batch,
        "rounds": args.rounds, "torch_threads": torch.get_num_threads(),
        "seconds_median": median,
        "cache_tokens_per_s": args.batch * args.new_tokens / median["cache"]["wall"],
        "speedup_wall": median["recompute"]["wall"] / median["cache"]["wall"],
        "speedup_cpu": median["recompute"]["cpu"] / median["cache"]["cpu"],
        "same_tokens": True,
    }
    print(json.dumps(report, indent=2))
    return 0 if min(report["speedup_wall"], report["speedup_cpu"]) >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())

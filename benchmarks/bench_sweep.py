"""Sweep and ablation benchmarks on the demo corpus (see benchmarks/RESULTS.md, "Sweep and ablation").

1. A TPE sweep and a random sweep over train.optimizer.lr (log 1e-4..3e-2) and warmup_steps (0..8), the same
   number of trials, the same per-trial budget and seeds (pruning off, so both samplers get full trials): best
   validation loss and the trials each needed to get within 1% of its own best and of the best of both.
2. `corpusmill ablate` with variants raw, cleaned, minus:near_dedup: final validation loss on the shared held-out
   text, equal budgets and seed.

Usage: .venv/bin/python benchmarks/bench_sweep.py [--trials 12] [--steps 16] [--eval-interval 4] [--skip-ablate]
       [--samplers tpe,random]
Everything is written under --work (default /tmp/bench_sweep); the figures are printed as JSON and Markdown.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def config_data(work: Path, name: str, args) -> dict:
    import yaml

    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["name"] = name
    data["input"]["paths"] = [str(REPO / "data" / "demo" / "corpus.jsonl.gz")]
    data["output"] = {"runs_dir": str(work / "runs")}
    data["train"] = {"device": "cpu", "model": {"dim": 64, "n_layers": 2, "n_heads": 4},
                     "batch": {"global_batch_size": 4, "micro_batch_size": 4},
                     "optimizer": {"lr": 0.002, "warmup_steps": 2}, "checkpoint": {"enabled": False},
                     "eval": {"interval": args.eval_interval, "max_rows": 16}, "metrics": {"tensorboard": False},
                     "steps": args.steps, "seed": 1234}
    data["sweep"] = {"space": {"train.optimizer.lr": {"type": "float", "low": 1.0e-4, "high": 3.0e-2, "log": True},
                               "train.optimizer.warmup_steps": {"type": "int", "low": 0, "high": 8}},
                     "trials": args.trials, "pruner": "none", "seed": 0, "startup_trials": args.startup}
    return data


def trials_to_within(values: list[float], target: float) -> int | None:
    best = float("inf")
    for i, v in enumerate(values, 1):
        best = min(best, v)
        if best <= target * 1.01:
            return i
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--eval-interval", type=int, default=4)
    parser.add_argument("--startup", type=int, default=4, help="TPE random start-up trials")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_sweep"))
    parser.add_argument("--skip-ablate", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--samplers", default="tpe,random",
                        help="comma-separated; a sampler's study resumes, so two processes may run one each and a "
                             "last run with both prints the side-by-side table without training again")
    args = parser.parse_args()

    from experiments.sweep import ensure_shards, run_sweep
    from pipelines.config import validate_config
    from runio.layout import RunPaths

    work = args.work
    out: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    if not args.skip_sweep:
        base_cfg = validate_config(config_data(work, "base", args))
        started = time.time()
        ensure_shards(base_cfg, log=lambda line: print(line, flush=True))  # prepares only when shards are missing
        out["prepare_seconds"] = round(time.time() - started, 1)
        base = RunPaths.of(base_cfg)
        sweeps = {}
        for sampler in args.samplers.split(","):
            data = config_data(work, f"sweep-{sampler}", args)
            data["sweep"]["sampler"] = sampler
            cfg = validate_config(data)
            run = RunPaths.of(cfg)
            run.root.mkdir(parents=True, exist_ok=True)
            for source, link in ((base.shards, run.shards), (base.tokenizer_dir, run.tokenizer_dir)):
                if not link.exists():
                    link.symlink_to(source.resolve(), target_is_directory=True)
            started = time.time()
            summary = run_sweep(cfg, log=lambda line: print(line, flush=True))
            values = [t["value"] for t in sorted(summary["trials"], key=lambda t: t["number"])
                      if t["state"] == "COMPLETE"]
            sweeps[sampler] = {"values": values, "best": min(values), "best_params": summary["best"]["params"],
                               "seconds": round(time.time() - started, 1)}
        overall = min(s["best"] for s in sweeps.values())  # of the samplers run here
        for s in sweeps.values():
            s["trials_to_1pct_own_best"] = trials_to_within(s["values"], s["best"])
            s["trials_to_1pct_overall_best"] = trials_to_within(s["values"], overall)
        out["sweep"] = sweeps
        print("\n| sampler | trials | best val loss | best lr | best warmup | trials to within 1% of own best | "
              "of best of both | seconds |\n|---|---|---|---|---|---|---|---|")
        for name, s in sweeps.items():
            p = s["best_params"]
            print(f"| {name} | {len(s['values'])} | {s['best']:.4f} | {p['train.optimizer.lr']:.3g} | "
                  f"{p['train.optimizer.warmup_steps']} | {s['trials_to_1pct_own_best']} | "
                  f"{s['trials_to_1pct_overall_best']} | {s['seconds']} |")
    if not args.skip_ablate:
        from experiments.ablate import parse_variants, run_ablation

        cfg = validate_config(config_data(work, "ablate", args))
        started = time.time()
        results = run_ablation(cfg, parse_variants("raw,cleaned,minus:near_dedup", cfg),
                               log=lambda line: print(line, flush=True))
        out["ablate"] = {"seconds": round(time.time() - started, 1), "variants": [
            {k: r[k] for k in ("variant", "final_val_loss", "val_losses", "tokens_seen", "train_docs",
                               "train_tokens_available", "eval_docs", "eval_tokens")} for r in results["variants"]]}
        print("\n| variant | final val loss | tokens trained | train docs | train tokens available | eval docs | "
              "eval tokens |\n|---|---|---|---|---|---|---|")
        for r in out["ablate"]["variants"]:
            print(f"| {r['variant']} | {r['final_val_loss']:.4f} | {r['tokens_seen']} | {r['train_docs']} | "
                  f"{r['train_tokens_available']} | {r['eval_docs']} | {r['eval_tokens']} |")
    print(json.dumps(out, indent=1))
    name = "results" + ("-sweep" if args.skip_ablate else "") + ("-ablate" if args.skip_sweep else "") + ".json"
    (work / name).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

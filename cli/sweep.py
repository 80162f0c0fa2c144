"""`corpusmill sweep CONFIG` (Optuna hyper-parameter search) and `corpusmill ablate CONFIG` (does cleaning pay).

Both train through the same code path as `corpusmill train`; see experiments/sweep.py and experiments/ablate.py.
"""
from __future__ import annotations

import argparse

from pipelines.config import load_config
from runio.errors import ExitCode


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML (its `sweep` section is the search space)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value; repeatable")


def register(subparsers) -> None:
    sweep = subparsers.add_parser(
        "sweep", help="Bayesian hyper-parameter search (Optuna) over the run's shards; resumable",
        description="Search the `sweep.space` train.* keys with Optuna; every trial trains in "
                    "runs/<name>/sweep/trials/NNNN/; the study is stored in runs/<name>/sweep/ and a killed sweep "
                    "resumes; the best values are written to runs/<name>/sweep/best.yaml and best.set.")
    _common(sweep)
    sweep.add_argument("--trials", type=int, help="finished trials the study should end with (sweep.trials)")
    sweep.add_argument("--parallel", type=int, help="trials at once, one worker process each (sweep.parallel)")
    sweep.add_argument("--sampler", choices=("tpe", "gp", "random"), help="Optuna sampler (sweep.sampler)")
    sweep.add_argument("--pruner", choices=("median", "hyperband", "none"), help="Optuna pruner (sweep.pruner)")
    sweep.add_argument("--overwrite", action="store_true", help="discard a study of a different search space")
    sweep.set_defaults(handler=_sweep)

    ablate = subparsers.add_parser(
        "ablate", help="train the same model on the raw, cleaned and leave-one-step-out corpora; same eval text",
        description="Prepare and train each variant under runs/<name>/ablate/<variant>/ with the same model, seed "
                    "and token budget; every variant is evaluated on the cleaned corpus's held-out split, which no "
                    "variant trains on. Finished prepares and trainings are reused.")
    _common(ablate)
    ablate.add_argument("--variants", default="raw,cleaned",
                        help="comma-separated: raw, cleaned, minus:STEP (default raw,cleaned)")
    ablate.set_defaults(handler=_ablate)


def _sweep(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    for flag in ("trials", "parallel", "sampler", "pruner"):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"sweep.{flag}={value}")
    cfg = load_config(args.config, overrides)
    from experiments.sweep import run_sweep  # deferred: imports torch and optuna, which registering must not

    summary = run_sweep(cfg, overwrite=args.overwrite, log=lambda line: print(line, flush=True))
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(summary["counts"].items()))
    best = summary.get("best")
    print(f"corpusmill sweep: {counts}" + (f"; best trial {best['number']}: val_loss {best['value']:.4f} "
                                           f"{best['params']}" if best else "; no complete trial"), flush=True)
    return ExitCode.OK if best else ExitCode.NOT_USABLE


def _ablate(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    from experiments.ablate import parse_variants, run_ablation  # deferred: imports torch, as run_sweep

    results = run_ablation(cfg, parse_variants(args.variants, cfg), log=lambda line: print(line, flush=True))
    for row in results["variants"]:
        print(f"corpusmill ablate: {row['variant']:<20} val_loss {row['final_val_loss']:.4f}  "
              f"tokens trained {row['tokens_seen']}  train docs {row['train_docs']}", flush=True)
    return ExitCode.OK

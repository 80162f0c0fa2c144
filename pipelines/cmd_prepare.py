"""`corpusmill prepare` and `corpusmill refresh`."""
from __future__ import annotations

import argparse
import sys


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML (see configs/demo.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value; repeatable")
    parser.add_argument("--runner", help="direct (local, one process per worker), inprocess, flink, spark, "
                                         "dataflow, or a Beam runner class")
    parser.add_argument("--workers", type=int, help="local workers (default: one per core)")


def load_with_cli(args: argparse.Namespace, beam_args: list[str]):
    from pipelines.config import load_config

    overrides = list(args.overrides)
    if args.runner:
        overrides.append(f"runner.name={args.runner}")
    if args.workers:
        overrides.append(f"runner.workers={args.workers}")
    cfg = load_config(args.config, overrides)
    if beam_args:
        cfg = cfg.model_copy(update={"runner": cfg.runner.model_copy(
            update={"options": list(cfg.runner.options) + beam_args})})
    return cfg


def _run(args: argparse.Namespace, against: tuple[str, ...]) -> int:
    from pipelines.prepare import AccountingError, run_prepare, summary_table

    cfg = load_with_cli(args, args.beam_args)
    print(f"corpusmill {args.command}: run {cfg.name} → {cfg.run_dir}", flush=True)
    try:
        stats = run_prepare(cfg, against=against)
    except AccountingError as err:
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return 3
    print(summary_table(stats))
    return 0


def register(subparsers) -> None:
    prepare = subparsers.add_parser("prepare", help="clean a corpus into a run directory",
                                    description="Read, clean and write runs/<name>/; unknown --options are "
                                                "passed to Beam (e.g. --flink_master=host:8081).")
    add_run_options(prepare)
    prepare.set_defaults(handler=lambda a: _run(a, ()), accepts_beam_args=True)

    refresh = subparsers.add_parser("refresh", help="process only new inputs, deduplicated against earlier runs")
    add_run_options(refresh)
    refresh.add_argument("--against", action="append", required=True, metavar="RUN_DIR",
                         help="an earlier run whose kept documents win; repeatable")
    refresh.set_defaults(handler=lambda a: _run(a, tuple(a.against)), accepts_beam_args=True)

"""`corpusmill report RUN_DIR` (rebuild report.html) and `corpusmill resume RUN_DIR` (release a paused trainer)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from report import ReportConfig, build_report
from runio.errors import ExitCode
from runio.layout import RunPaths
from trainer_bridge.observe.alerts import request_resume


def _report(args: argparse.Namespace) -> int:
    paths = RunPaths(args.run_dir)
    if not paths.root.is_dir():
        print(f"corpusmill report: {paths}: no such run directory", file=sys.stderr)
        return ExitCode.CONFIG
    if not any((paths.root / name).exists() for name in RUN_MARKS):
        print(f"corpusmill report: {paths}: not a run directory (none of {', '.join(RUN_MARKS)} in it)",
              file=sys.stderr)
        return ExitCode.CONFIG
    if args.out and Path(args.out).is_dir():
        print(f"corpusmill report: --out {args.out} is a directory: name the file (e.g. "
              f"{Path(args.out) / 'report.html'})", file=sys.stderr)
        return ExitCode.CONFIG
    if args.max_docs is not None and args.max_docs < 1:
        print(f"corpusmill report: --max-docs must be at least 1, got {args.max_docs}", file=sys.stderr)
        return ExitCode.CONFIG
    cfg = ReportConfig(max_docs_scanned=args.max_docs) if args.max_docs else ReportConfig()
    out = build_report(paths, cfg, Path(args.out) if args.out else None)
    print(f"corpusmill report: wrote {out} ({out.stat().st_size / 1e6:.1f} MB, opens offline)")
    return ExitCode.OK


# What every run directory has at least one of, once any stage of `prepare`, `run`, `refresh` or `train` began.
RUN_MARKS = ("config.yaml", "stats.json", "docs", "shards", "train")


def _resume(args: argparse.Namespace) -> int:
    paths = RunPaths(args.run_dir)
    if not paths.root.is_dir():
        print(f"corpusmill resume: {paths}: no such run directory", file=sys.stderr)
        return ExitCode.CONFIG
    signal = request_resume(paths)
    print(f"corpusmill resume: wrote {signal}; a paused trainer continues within its poll interval")
    return ExitCode.OK


def register(subparsers) -> None:
    report = subparsers.add_parser("report", help="rebuild runs/<name>/report.html from the run directory")
    report.add_argument("run_dir", help="a run directory (runs/<name>)")
    report.add_argument("--out", help="write here instead of RUN_DIR/report.html")
    report.add_argument("--max-docs", type=int, help="documents scanned for the distributions (default 200000)")
    report.set_defaults(handler=_report)

    resume = subparsers.add_parser("resume", help="let a trainer paused by an alert continue")
    resume.add_argument("run_dir", help="the paused run's directory")
    resume.set_defaults(handler=_resume)

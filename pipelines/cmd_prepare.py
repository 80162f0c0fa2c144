"""`corpusmill prepare`, `corpusmill refresh` and `corpusmill run`."""
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
    parser.add_argument("--overwrite", action="store_true",
                        help="discard outputs of a different config found in the run directory")


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


def _run(args: argparse.Namespace, stages: tuple[str, ...], against: tuple[str, ...], resume: bool) -> int:
    from pipelines.config import ConfigError
    from pipelines.prepare import AccountingError
    from pipelines.run import StageFailed, run_stages

    cfg = load_with_cli(args, args.beam_args)
    print(f"corpusmill {args.command}: run {cfg.name} → {cfg.run_dir}", flush=True)
    try:
        run_stages(cfg, stages, against=against, resume=resume, overwrite=args.overwrite,
                   log=lambda line: print(line, flush=True))
    except ConfigError:
        raise
    except AccountingError as err:
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return 3
    except StageFailed as err:
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return 4
    except Exception as err:  # noqa: BLE001 — the last line of defence: one clear line, details in a log file
        log_path = _write_error_log(cfg.run_dir, err)
        # Writers abandoned by the failed pipeline fail again when collected at exit; the cause is reported.
        sys.unraisablehook = lambda unraisable: None
        print(f"corpusmill {args.command}: failed: {one_line_reason(err)} (details: {log_path})", file=sys.stderr)
        return 5
    return 0


def one_line_reason(err: BaseException) -> str:
    """The innermost meaningful message: Beam wraps worker exceptions in a long RuntimeError text."""
    text = str(err)
    for marker in ("OSError: ", "PermissionError: ", "FileNotFoundError: ", "MemoryError", "ValueError: "):
        if marker in text:
            tail = text[text.rindex(marker):]
            return tail.split("\n", 1)[0][:300]
    if isinstance(err, OSError):
        return f"{type(err).__name__}: {err.strerror or err} ({err.filename or ''})"
    first = text.strip().split("\n", 1)[0] if text.strip() else type(err).__name__
    return f"{type(err).__name__}: {first[:300]}"


def _write_error_log(run_dir, err: BaseException) -> str:
    import traceback
    from pathlib import Path

    try:
        path = Path(run_dir) / "logs" / "error.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(err)), encoding="utf-8")
        return str(path)
    except OSError:
        return "not written: the run directory is not writable"


def register(subparsers) -> None:
    from pipelines.run import ALL_STAGES, DATA_STAGES

    prepare = subparsers.add_parser("prepare", help="clean a corpus and write tokenized shards into runs/<name>/",
                                    description="Read, clean, tokenize and pack into runs/<name>/; unknown "
                                                "--options are passed to Beam (e.g. --flink_master=host:8081).")
    add_run_options(prepare)
    prepare.set_defaults(handler=lambda a: _run(a, DATA_STAGES, (), resume=False), accepts_beam_args=True)

    refresh = subparsers.add_parser("refresh", help="process only new inputs, deduplicated against earlier runs")
    add_run_options(refresh)
    refresh.add_argument("--against", action="append", required=True, metavar="RUN_DIR",
                         help="an earlier run whose kept documents win; repeatable")
    refresh.add_argument("--train", action="store_true",
                         help="then train and report too (with train.init_from: RUN_DIR, training continues from "
                              "that run's last checkpoint on the new shards)")
    refresh.set_defaults(handler=lambda a: _run(a, ALL_STAGES if a.train else DATA_STAGES, tuple(a.against),
                                                resume=False), accepts_beam_args=True)

    run = subparsers.add_parser("run", help="raw corpus to trained model and report: clean → shards → train → "
                                            "report, resuming after a crash from the last completed stage")
    add_run_options(run)
    run.set_defaults(handler=lambda a: _run(a, ALL_STAGES, (), resume=True), accepts_beam_args=True)

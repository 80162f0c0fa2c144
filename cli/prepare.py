"""`corpusmill prepare`, `corpusmill refresh` and `corpusmill run`.

A failure is classified by the type of the exception that caused it (``failure``), never by its wording:
a ConfigError anywhere in the chain of causes exits 2, an AccountingError 65 (``ExitCode.ACCOUNTING``: no other
failure has it, so the data is known not to be trusted), a StageFailed its code (4, or the train stage's own
exit code 2–5 with the trainer's reason: ``train stage failed (exit N): …``), anything else 5
with one line on stderr and the traceback in the run's ``logs/error.log``. Success (0) includes an empty
result (no document survived: the manifest says ``"empty": true``); Ctrl-C exits 130 (``cli/main.py``).
A successful command ends with one summary line. ``refresh`` started outside every ``train.schedule`` window
waits for the next one, or (``train.schedule.outside: exit``) exits 75 (EX_TEMPFAIL) with one line.
"""
from __future__ import annotations

import argparse
import sys

from cli import positive_int
from pipelines.config import ConfigError, load_config
from pipelines.prepare import AccountingError
from pipelines.run import ALL_STAGES, DATA_STAGES, StageFailed, run_stages, summary_line
from report import build_report
from runio.errors import ExitCode
from runio.files import write_atomic
from runio.layout import RunPaths
from trainer_bridge.loop.schedule import SystemClock, refresh_gate

TRACEBACK_HEADER = "Traceback (most recent call last):"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML (see configs/demo.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value; repeatable")
    parser.add_argument("--runner", help="direct (local, one process per worker), inprocess, dask, flink, spark, "
                                         "dataflow, or a Beam runner class")
    parser.add_argument("--dask-address", help="with --runner dask: the scheduler, tcp://host:8786 (default: a "
                                               "LocalCluster of --workers processes on this machine)")
    parser.add_argument("--workers", type=positive_int, help="local workers (default: one per core)")
    parser.add_argument("--overwrite", action="store_true",
                        help="discard outputs that a changed config makes invalid (a different cleaning config, "
                             "or a model trained on shards the change replaces); other changed stages re-run "
                             "without it")


def load_with_cli(args: argparse.Namespace, beam_args: list[str]):
    overrides = list(args.overrides)
    if args.runner:
        overrides.append(f"runner.name={args.runner}")
    if args.workers:
        overrides.append(f"runner.workers={args.workers}")
    if args.dask_address:
        overrides.append(f"runner.dask_address={args.dask_address}")
    cfg = load_config(args.config, overrides)
    if beam_args:
        cfg = cfg.model_copy(update={"runner": cfg.runner.model_copy(
            update={"options": list(cfg.runner.options) + beam_args})})
    return cfg


def add_from_scratch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-scratch", action="store_true",
                        help="the train stage starts over at step 0 (as `corpusmill train --from-scratch`): the "
                             "run's checkpoints and training logs are moved to train/set-aside-<time>/, nothing is "
                             "deleted; needed when a change (e.g. tokenizer.*) rebuilds the shards a model was "
                             "trained on, or when no checkpoint can be resumed")


def _run(args: argparse.Namespace, stages: tuple[str, ...], against: tuple[str, ...], resume: bool,
         scheduled: bool = False) -> int:
    cfg = load_with_cli(args, args.beam_args)
    if getattr(args, "from_scratch", False) and "train" not in stages:
        raise ConfigError(f"--from-scratch restarts the train stage: corpusmill {args.command} runs it only with "
                          f"--train")
    paths = RunPaths.of(cfg)
    if scheduled:  # refresh honours train.schedule: wait for a window, or exit 75

        code = refresh_gate(cfg.train.schedule, SystemClock(), lambda line: print(
            f"corpusmill {args.command}: {line}", file=sys.stderr if cfg.train.schedule.outside == "exit"
            else sys.stdout, flush=True))
        if code is not None:
            return code
    print(f"corpusmill {args.command}: run {cfg.name} → {paths}", flush=True)
    try:
        manifest = run_stages(cfg, stages, against=against, resume=resume, overwrite=args.overwrite,
                              from_scratch=getattr(args, "from_scratch", False),
                              log=lambda line: print(line, flush=True), build_report=build_report)
    except Exception as err:  # noqa: BLE001 — every failure ends as an exit code and one line
        code, reason = failure(err)
        if not isinstance(reason, str):
            raise reason from None  # the entry point prints configuration errors, the same for every command
        if code == ExitCode.FAILED and not _stage_failed(err):
            log_path = _write_error_log(paths, err)
            # Writers abandoned by the failed pipeline fail again when collected at exit; the cause is reported.
            sys.unraisablehook = lambda unraisable: None
            reason = f"failed: {reason} (details: {log_path})"
        print(f"corpusmill {args.command}: {reason}", file=sys.stderr)
        return code
    print(f"corpusmill {args.command}: done: {summary_line(manifest)}", flush=True)
    return ExitCode.OK


def _causes(err: BaseException, *, implicit: bool = False):
    """``err`` and the exceptions it was raised from (``raise … from``), outermost first; with ``implicit``, also
    those it was raised while handling, as Python's traceback shows them (Beam re-raises a worker's exception,
    with the step's name added, while handling it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        if err.__cause__ is not None or not implicit:
            err = err.__cause__
        else:
            err = None if err.__suppress_context__ else err.__context__


def _stage_failed(err: BaseException) -> bool:
    return any(isinstance(cause, StageFailed) for cause in _causes(err))


def failure(err: BaseException):
    """(exit code, reason) of a failed run: a ConfigError (code 2; the reason is the error itself),
    AccountingError (65) or StageFailed (its code: 4, or the train stage's exit code) anywhere in the chain of
    causes, else code 5 with ``failure_reason``. The reason is a string except for a ConfigError."""
    for cause in _causes(err):
        if isinstance(cause, ConfigError):
            return ExitCode.CONFIG, cause
        if isinstance(cause, AccountingError):
            return ExitCode.ACCOUNTING, str(cause)
        if isinstance(cause, StageFailed):
            return getattr(cause, "code", ExitCode.REFUSED), str(cause)
    return ExitCode.FAILED, failure_reason(err)


def failure_reason(err: BaseException) -> str:
    """One line naming what went wrong: the innermost cause, by its type.

    A worker in another process (the multi-process local runner, a cluster) sends its exception back only as
    the text of its traceback, inside a RuntimeError: then the reason is that traceback's exception line.
    """
    *_, inner = _causes(err, implicit=True)
    if isinstance(inner, OSError) and inner.strerror:
        return f"{type(inner).__name__}: {inner.strerror}" + (f" ({inner.filename})" if inner.filename else "")
    text = str(inner)
    if TRACEBACK_HEADER in text:
        tail = [line for line in text[text.rindex(TRACEBACK_HEADER):].splitlines() if line.strip()]
        if tail and not tail[-1].startswith(" "):
            return _remote_exception_line(tail[-1])[:300]
    first = text.strip().split("\n", 1)[0] if text.strip() else ""
    return f"{type(inner).__name__}: {first[:300]}" if first else type(inner).__name__


def _remote_exception_line(line: str) -> str:
    """A traceback's ``Type: message`` line, without the RuntimeError that Beam wraps a worker's error in
    (``RuntimeError: OSError: … [while running 'Step']``)."""
    wrapper = "RuntimeError: "
    inner = line[len(wrapper):] if line.startswith(wrapper) else line
    name = inner.split(": ", 1)[0]
    return inner if name.replace(".", "").replace("_", "").isalnum() and ": " in inner else line


def _write_error_log(paths, err: BaseException) -> str:
    import traceback

    try:
        write_atomic(paths.error_log, "".join(traceback.format_exception(err)).encode("utf-8"))
        return str(paths.error_log)
    except OSError:
        return "not written: the run directory is not writable"


def register(subparsers) -> None:
    prepare = subparsers.add_parser("prepare", help="clean a corpus and write tokenized shards into runs/<name>/",
                                    description="Read, clean, tokenize and pack into runs/<name>/; unknown "
                                                "--options are passed to Beam (e.g. --flink_master=host:8081).")
    add_run_options(prepare)
    prepare.set_defaults(handler=lambda a: _run(a, DATA_STAGES, (), resume=False), accepts_beam_args=True)

    refresh = subparsers.add_parser("refresh", help="process only new inputs, deduplicated against earlier runs")
    add_run_options(refresh)
    add_from_scratch(refresh)
    refresh.add_argument("--against", action="append", required=True, metavar="RUN_DIR",
                         help="an earlier run whose kept documents win; repeatable")
    refresh.add_argument("--train", action="store_true",
                         help="then train and report too (with train.init_from: RUN_DIR, training continues from "
                              "that run's last checkpoint on the new shards)")
    refresh.set_defaults(handler=lambda a: _run(a, ALL_STAGES if a.train else DATA_STAGES, tuple(a.against),
                                                resume=False, scheduled=True), accepts_beam_args=True)

    run = subparsers.add_parser("run", help="raw corpus to trained model and report: clean → shards → train → "
                                            "report, resuming after a crash from the last completed stage")
    add_run_options(run)
    add_from_scratch(run)
    run.set_defaults(handler=lambda a: _run(a, ALL_STAGES, (), resume=True), accepts_beam_args=True)

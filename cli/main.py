"""`corpusmill`: one entry point; each area registers its subcommands from its own module.

Every command ends in an exit code of ``runio.errors.ExitCode`` and, on failure, one line on stderr: ``main``
is the one handler that maps an error to its code and line (2 a setting that cannot work, named; 5 a file the
command cannot write: read-only run directory, full disk; 130 interrupted, Ctrl-C, a re-run resumes; a
``CorpusmillError`` its own code); ``cli/prepare.py`` classifies a failed run by the chain of its causes. ``-v`` lets Beam's and the libraries' INFO and
WARNING lines through (off by default, so progress and summaries are readable).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import threading
import warnings

from beamio.config_base import ConfigError
from beamio.logs import VERBOSE_ENV, quiet_logging
from runio.errors import CorpusmillError, ExitCode
from transforms.base import StepConfigError

COMMAND_MODULES = (
    "cli.tokenizer",
    "cli.prepare",
    "cli.train",
    "cli.pii",
    "cli.extract",
    "cli.dedup",
    "cli.report",
    "cli.quality",
    "cli.hf",
    "cli.sweep",
    "cli.lineage",
    "cli.forget",
)
# Commands parsed with their own module alone (a light path of theirs then imports neither Beam nor the other
# commands' modules; every other command, and `corpusmill --help`, registers them all).
SINGLE_MODULE_COMMANDS = {"dedup": "cli.dedup", "trace": "cli.lineage"}
VERBOSE_FLAGS = ("-v", "--verbose")
# Errors of the file system a command writes to: said in one line, exit 5 (never a traceback).
WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("corpusmill")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def quiet_libraries(verbose: bool = False) -> None:
    """Keep the terminal for our own progress and summary: libraries speak only when something is wrong
    (``verbose``: Beam's INFO/WARNING lines too, also in the local runner's worker processes)."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"  # inherited by the worker processes
    quiet_logging(verbose or None)
    if not verbose:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)


def build_parser(modules: tuple[str, ...] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="corpusmill", description="Raw text corpora to a trained language "
                                     "model: Beam cleaning, Arrow shards, a PyTorch trainer.")
    parser.add_argument("--version", action="version", version=f"corpusmill {version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show Beam's and the libraries' INFO/WARNING log lines (hidden by default)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _write_error(err: OSError) -> str | None:
    """One line for an error of the file system a command writes to, or None for any other OSError."""
    if err.errno not in WRITE_ERRNOS:
        return None
    where = f" ({err.filename})" if err.filename else ""
    hint = {errno.EACCES: "the run directory (or its parent) is not writable",
            errno.EPERM: "the run directory (or its parent) is not writable",
            errno.EROFS: "the file system is read-only"}.get(err.errno, "the disk is full or a size limit was hit")
    return f"failed: {type(err).__name__}: {err.strerror}{where}: {hint}"


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in VERBOSE_FLAGS for a in raw)
    quiet_libraries(verbose)
    command = next((a for a in raw if not a.startswith("-")), None)
    parser = build_parser((SINGLE_MODULE_COMMANDS[command],) if command in SINGLE_MODULE_COMMANDS else COMMAND_MODULES)
    # -v may stand anywhere (`corpusmill run cfg.yaml -v`), also after a sub-subcommand
    args, unknown = parser.parse_known_args(["-v"] * verbose + [a for a in raw if a not in VERBOSE_FLAGS])
    if unknown and not getattr(args, "accepts_beam_args", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if unknown:  # the rest go to Beam, which would drop what it does not know with a log line
        # deferred: it imports Beam, which a command without Beam arguments (and --help) never needs
        from pipelines.runners import unrecognized_pipeline_args

        stray = unrecognized_pipeline_args(unknown)
        if stray:
            parser.error(f"unrecognized arguments: {' '.join(stray)} (neither an option of `corpusmill "
                         f"{args.command}` nor a Beam pipeline option)")
    args.beam_args = unknown
    try:
        return int(args.handler(args) or 0)
    except (ConfigError, StepConfigError) as err:  # a setting that cannot work, named: exit 2, one message
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return ExitCode.CONFIG
    except CorpusmillError as err:  # an expected failure that carries its code: one line
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # the reader of stdout left (`corpusmill inspect ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what is still buffered must not fail again at exit
        return ExitCode.BROKEN_PIPE
    except OSError as err:
        line = _write_error(err)
        if line is None:
            raise
        print(f"corpusmill {args.command}: {line}", file=sys.stderr)
        return ExitCode.FAILED
    except KeyboardInterrupt as err:
        code = getattr(err, "code", None)  # the trainer's TrainInterrupted: its line was said already
        if not isinstance(code, int):
            code = ExitCode.INTERRUPTED
            print(f"corpusmill {args.command}: interrupted; run the same command again to resume (completed "
                  f"stages and checkpoints are kept)", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        if threading.active_count() > 1:
            # Threads of an interrupted pipeline or trainer (gRPC servers, data loaders) may block the
            # interpreter's exit or print from their teardown: leave now, as the user asked.
            os._exit(code)
        return code


if __name__ == "__main__":
    sys.exit(main())

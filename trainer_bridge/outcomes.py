"""How a training run ends: the exit codes of ``corpusmill train`` (``runio.errors.ExitCode``) and the one line
that says why.

    0    done (or nothing left to train)
    2    a setting that cannot work (the field named)
    3    stopped by the guards: persistent bad steps and no rollback left
    4    refused: what is on disk cannot be trusted or does not fit the config — every checkpoint damaged, a
         checkpoint trained with another model or on other shards or past ``train.steps``, checkpoints where
         ``checkpoint.resume: false`` would train anew, a damaged shard. Nothing was trained.
    5    failed: the run directory cannot be written (read-only, permissions, disk full)
    130  interrupted (SIGINT); 143 terminated (SIGTERM). The last complete checkpoint is kept: re-run to resume.

``outcome_of(error)`` maps the errors a run can expect to (code, one line); anything else is a bug and keeps its
traceback. Under torchrun a rank that meets such an error writes it to the launcher's outcome directory
(``OUTCOME_DIR_ENV``) before it exits: the launcher prints that one line, once, instead of every rank's
traceback and torchrun's failure report.
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from runio.errors import CorpusmillError, ExitCode
from tokenizer.shards import ShardFormatError

# The codes an expected failure of training ends with (``outcome_of``): ``corpusmill run`` ends its train stage
# with the same code and the trainer's line.
TRAIN_FAILURE_CODES = (ExitCode.CONFIG, ExitCode.STOPPED, ExitCode.REFUSED, ExitCode.FAILED)

OUTCOME_DIR_ENV = "CORPUSMILL_TRAIN_OUTCOME_DIR"
OUTCOME_FILE = "outcome.json"

# Errors of the file system that are the environment's, not the program's: said in one line.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


class Terminated(KeyboardInterrupt):
    """SIGTERM to a training that runs in the calling process (one rank, no torchrun): raised where the signal
    lands, as a Ctrl-C raises ``KeyboardInterrupt``, so that it ends the same way (a save in progress finishes
    first, one line names the checkpoint kept) with exit code 143."""


def raise_terminated(_signum, _frame) -> None:
    """SIGTERM's handler while training alone (``launch.sigterm_raises``)."""
    raise Terminated()


class TrainRefused(CorpusmillError, RuntimeError):
    """Training will not start (or continue) on what is on disk; the message says what and what to do."""

    exit_code = ExitCode.REFUSED


class TrainConfigError(CorpusmillError, ValueError):
    """The train config cannot work with these shards (e.g. a vocabulary smaller than the shards')."""

    exit_code = ExitCode.CONFIG


class TrainingStopped(CorpusmillError, RuntimeError):
    """Training cannot go on (persistent bad steps and no rollback possible or allowed)."""

    exit_code = ExitCode.STOPPED


def outcome_of(error: BaseException) -> tuple[int, str] | None:
    """(exit code, one line) for an expected failure; None for anything else (a bug: keep the traceback).
    A ``CorpusmillError`` (``TrainRefused``, ``TrainConfigError``, ``TrainingStopped``, ``run_model.ConversionError``)
    carries its own code."""
    if isinstance(error, CorpusmillError):
        return error.exit_code, str(error)
    if isinstance(error, ShardFormatError):
        return ExitCode.REFUSED, f"shards not usable: {error}"
    if isinstance(error, OSError) and error.errno in _ENVIRONMENT_ERRNOS:
        where = f" ({error.filename})" if error.filename else ""
        return ExitCode.FAILED, f"cannot write the run directory: {error.strerror}{where}"
    return None


def report_outcome(code: int, message: str) -> bool:
    """Under the launcher: record this rank's outcome (the first rank's wins) and return True; else False."""
    directory = os.environ.get(OUTCOME_DIR_ENV)
    if not directory:
        return False
    path = Path(directory) / OUTCOME_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return True
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"code": code, "message": message}, fh)
    return True


def read_outcome(directory: str | os.PathLike) -> tuple[int, str] | None:
    try:
        record = json.loads((Path(directory) / OUTCOME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent, or being written right now (read again later)
    return int(record["code"]), str(record["message"])

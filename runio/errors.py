"""Every exit code of ``corpusmill`` and the base of the errors that carry one.

The ground floor, so that every package may raise an error that ends a command with its code: the CLI's one
handler (``cli.main``) maps an error to its code and one line. Each number means one thing whatever command
returns it; ``corpusmill run`` ends with the code of the stage that failed (the train stage's as
``corpusmill train`` would), so a code never changes meaning on its way up.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes of every command (the table is in docs/cli.md)."""

    OK = 0  # done (an empty result included; training with nothing left to train)
    NOT_USABLE = 1  # what the command was given holds nothing it can use: every record quarantined (dedup, pii,
    #                 quality score), shards unreadable or failing verification, a row or tokenizer that is not
    #                 there (inspect); a sweep without one complete trial
    CONFIG = 2  # a setting or argument that cannot work, named; a missing optional extra
    STOPPED = 3  # training stopped by its guards: persistent bad steps and no rollback left
    REFUSED = 4  # refused: what is on disk cannot be trusted or does not fit the config; a stage ended without
    #              its result. Nothing was trained.
    FAILED = 5  # failed: the run directory cannot be written, or an unexpected error (traceback in logs/error.log)
    ACCOUNTING = 65  # the documents' accounting does not add up: do not trust the data (EX_DATAERR)
    OUTSIDE_WINDOW = 75  # started outside every train.schedule window (EX_TEMPFAIL: cron/systemd may retry)
    INTERRUPTED = 130  # Ctrl-C (SIGINT): completed stages and the last checkpoint are kept; re-run to resume
    BROKEN_PIPE = 141  # the reader of stdout left (`| head`): as a shell reports a process killed by SIGPIPE
    TERMINATED = 143  # SIGTERM: as INTERRUPTED


class CorpusmillError(Exception):
    """An expected failure: its message is the one line said, ``exit_code`` the code the command ends with."""

    exit_code: ExitCode = ExitCode.FAILED

"""What corpusmill's processes log: our own warnings and every library's errors; Beam's INFO/WARNING lines only
with ``-v`` (``VERBOSE_ENV``, inherited by the local runner's workers and the trainer's ranks). No Beam is
imported here, so a command or a trainer rank can set its logging up before (or without) importing Beam.
"""
from __future__ import annotations

import logging
import os

VERBOSE_ENV = "CORPUSMILL_VERBOSE"  # "1": Beam's INFO lines too, in this process and in every worker


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


QUIET_LOGGERS = ("apache_beam", "presidio-analyzer", "presidio-anonymizer", "tldextract", "urllib3")


def quiet_logging(loud: bool | None = None) -> None:
    """This process's logging as corpusmill wants it: our own warnings and every library's errors are shown;
    Beam's INFO/WARNING lines (and those of the few chatty libraries in ``QUIET_LOGGERS``) only with
    ``loud`` (default: ``verbose()``). Beam reports a worker's failure to the launcher, which says it in one
    line, so Beam's own error lines are not repeated either unless ``loud``."""
    loud = verbose() if loud is None else loud
    level = logging.INFO if loud else logging.WARNING
    root = logging.getLogger()
    if not root.handlers:  # (under a test runner, its capturing handlers stay as they are)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.setLevel(level)  # the Beam harness lowers the root logger's level to INFO in workers
        root.addHandler(handler)
        root.setLevel(level)
    for handler in root.handlers:
        if not any(getattr(f, "_corpusmill", False) for f in handler.filters):
            def drop(record: logging.LogRecord) -> bool:
                # Beam warns at import that optional GCP clients are missing; irrelevant unless gs:// is used.
                return not str(record.msg).startswith("apitools not found")

            drop._corpusmill = True  # type: ignore[attr-defined]
            handler.addFilter(drop)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if loud else logging.CRITICAL)

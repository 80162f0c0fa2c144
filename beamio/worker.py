"""A local Beam worker process, as the local runner starts it (``beamio.beam_options.worker_command``:
``python -m beamio.worker``): it behaves like part of one command. Ctrl-C (SIGINT to the whole process group)
is left to the launching process (it stops the run and says so in one line; workers never print a
KeyboardInterrupt traceback each), a worker whose launcher is gone exits at once, and Beam's own INFO/WARNING
lines stay out of the terminal unless the command runs with ``-v`` (``beamio.logs``). Errors are always shown.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from beamio.logs import quiet_logging
from runio.heap import numpy_friendly_heap


def main() -> None:
    """A local Beam worker: Beam's SDK harness, quiet, ignoring SIGINT, and gone when its launcher is."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_logging()
    numpy_friendly_heap()
    parent = os.getppid()

    def leave_with_parent() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:  # the launcher died or was interrupted: nobody waits for our results
                os._exit(0)

    threading.Thread(target=leave_with_parent, name="corpusmill-parent-watch", daemon=True).start()
    # Beam is imported only now, after quiet_logging: it logs a warning as it is imported (apitools not found)
    from apache_beam.runners.worker import sdk_worker_main

    # The harness sets the root logger's level from the pipeline options (INFO when none reach it, as with the
    # local runner); the levels of the loggers above stay as set here.
    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()

"""``python -m trainer_bridge.torchrun ARGS``: torchrun (``torch.distributed.run``, same arguments) that ends
with the process that started it.

``corpusmill train`` starts torchrun in a session of its own, so that a Ctrl-C in the terminal reaches only the
launcher, which stops the job once and quietly (trainer_bridge.launch). Outside the terminal's process group,
torchrun would outlive a launcher killed with SIGKILL; the kernel's parent-death signal (Linux ``prctl``) sends
it SIGTERM instead, and torchrun stops its workers as for any SIGTERM.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent ends (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the request took effect
        os.kill(os.getpid(), sig)


if __name__ == "__main__":
    die_with_parent()
    from torch.distributed.run import main

    sys.exit(main())

"""Ending processes: a torchrun child leaving without the interpreter's teardown, a child group killed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """Flush logs and the standard streams, then ``os._exit(code)``.

    Call it once everything is written and the process groups are destroyed. During the
    interpreter's own teardown gloo's C++ worker threads can still hold tensors and abort the process
    ("terminate called without an active exception", SIGABRT after the last line of work; seen under
    load on CPU/gloo), which torchrun then reports as a failed rank.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


KILL_GRACE_S = 5.0


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc``'s whole process group (started with ``start_new_session``), SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue

"""Leaving a torchrun child without the interpreter's teardown."""

from __future__ import annotations

import logging
import os
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

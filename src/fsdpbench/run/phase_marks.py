"""Marks at the phase boundaries of a training step, read after the step (worker side; see docs/phases.md).

On an accelerator each mark is a timing event recorded on the current (compute) stream through
``torch.get_device_module(device).Event``, so recording adds no host synchronisation: the events are
read with ``elapsed_time`` after the step's closing ``synchronize``. On CPU, where the ops run
synchronously on the host, each mark is a host clock reading.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fsdpbench.results.phases import MARKED_PHASES

N_MARKS = len(MARKED_PHASES) + 1
"""start, end of forward, end of backward, end of the optimizer step."""


class PhaseMarks:
    """``mark(i)`` at boundary i (0 = start, then the end of each of ``MARKED_PHASES``); ``read()`` after the
    step's closing device sync gives ``{phase: ms}``. The events (or clock slots) are made once and reused."""

    def __init__(self, device_type: str, host_clock: Callable[[], float] = time.perf_counter) -> None:
        self.device_type = device_type
        self.clock_kind = "host_clock" if device_type == "cpu" else "device_events"
        self._host_clock = host_clock
        self._times = [0.0] * N_MARKS
        self._events: list[Any] | None = None
        if device_type != "cpu":
            import torch

            module = torch.get_device_module(device_type)
            self._events = [module.Event(enable_timing=True) for _ in range(N_MARKS)]

    def mark(self, boundary: int) -> None:
        """Record boundary ``boundary`` (an event on the current stream, or the host clock on CPU)."""
        if self._events is not None:
            self._events[boundary].record()
        else:
            self._times[boundary] = self._host_clock()

    def read(self) -> dict[str, float]:
        """Milliseconds per marked phase; call only after the step's closing synchronize."""
        if self._events is not None:
            ev = self._events
            spans = [float(ev[i].elapsed_time(ev[i + 1])) for i in range(N_MARKS - 1)]
        else:
            t = self._times
            spans = [(t[i + 1] - t[i]) * 1e3 for i in range(N_MARKS - 1)]
        return dict(zip(MARKED_PHASES, spans, strict=True))

"""The ``delay=RANK/UNIT/PHASE/MS`` arm option on the worker side: a host sleep at the start of a unit's
forward or backward, on one rank, in every timed and profiled step of the arm (docs/arms.md).

Only the delayed units of this rank get hooks, placed like the profiled step's ranges
(``profile_marks.ProfileMarks``): a forward pre-hook and a full backward pre-hook, both prepended, so the
sleep comes before the implementation's own pre-forward (its all-gather) and pre-backward. In the
profiled step fsdpbench's range hooks are prepended later, so they open the unit's range first and the
sleep lands inside it. The root's backward has no module hook (``ProfileMarks.backward``): its sleep runs
at the start of the backend's ``backward`` call, inside the root's backward range.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from fsdpbench.config.arms import ROOT_UNIT, Delay
from fsdpbench.errors import ConfigError


class UnitDelays:
    """The sleeps of one rank: ``install(model, layers)`` hooks the delayed units, ``root_backward()`` is
    called by the step at the start of the backward call, ``remove()`` takes the hooks off."""

    def __init__(self, delays: list[Delay], rank: int, sleep: Callable[[float], None] = time.sleep) -> None:
        self.delays = [d for d in delays if d.rank == rank]
        self.rank = rank
        self._sleep = sleep
        self._handles: list[Any] = []
        self.slept: list[tuple[str, str]] = []
        """(unit, phase) of every sleep so far, in order (for tests and logs)."""

    def __bool__(self) -> bool:
        return bool(self.delays)

    def install(self, model: torch.nn.Module, layers: list[tuple[str, torch.nn.Module]]) -> None:
        """Hook each delayed unit of this rank (``layers``: ``profile_marks.decoder_units(model)``); a
        ``ConfigError`` naming the rank and unit when the model has no such unit."""
        units = dict(layers)
        for d in self.delays:
            if d.unit == ROOT_UNIT:
                module = model
            elif d.unit in units:
                module = units[d.unit]
            else:
                raise ConfigError(
                    f"delay={d.spec()} on rank {self.rank}: the model has no unit {d.unit} "
                    f"(units: {', '.join([*units, ROOT_UNIT])})"
                )
            seconds = d.ms / 1000.0
            if d.phase == "forward":
                hook = functools.partial(self._forward, d.unit, seconds)
                self._handles.append(module.register_forward_pre_hook(hook, prepend=True))
            elif d.unit != ROOT_UNIT:
                hook = functools.partial(self._backward, d.unit, seconds)
                self._handles.append(module.register_full_backward_pre_hook(hook, prepend=True))

    def remove(self) -> None:
        """Take every hook off."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def root_backward(self) -> None:
        """Sleep for a ``root/backward`` delay of this rank (at the start of the backward call)."""
        for d in self.delays:
            if d.unit == ROOT_UNIT and d.phase == "backward":
                self._sleep_at(d.unit, "backward", d.ms / 1000.0)

    def _sleep_at(self, unit: str, phase: str, seconds: float) -> None:
        self.slept.append((unit, phase))
        self._sleep(seconds)

    def _forward(self, unit: str, seconds: float, module: Any, args: Any) -> None:
        self._sleep_at(unit, "forward", seconds)

    def _backward(self, unit: str, seconds: float, module: Any, grad_output: Any) -> None:
        self._sleep_at(unit, "backward", seconds)

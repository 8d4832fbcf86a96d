"""Allocated memory of one step on CPU, from the profiler's ``[memory]`` events.

The CPU has no allocator statistics, and torch's profiler with ``profile_memory=True`` records
only allocations made after it started: a tensor allocated before is invisible and its free is
dropped, and "Total Reserved" is 0. So the allocated memory at an instant of the step is

    bytes of the tensors live when recording started (parameters, gradients, optimizer states,
    counted once per storage) + the running sum of the ``[memory]`` events' ``Bytes`` up to then,

which is exact when no tensor live at the start is freed inside the window (free the gradients
before it starts: ``zero_grad(set_to_none=True)``). Recording memory changes the recorded step's
timing, so it is measured in a step of its own, never in the step the attribution reads.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

CPU_DEVICE_TYPE = 0
"""``args["Device Type"]`` of a CPU ``[memory]`` event (c10's DeviceType enum)."""


def storage_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a DTensor counts its local shard; None is skipped)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        storage = local.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def model_state_tensors(model: Any, optimizer: Any = None) -> list[Any]:
    """Parameters, their gradients and the optimizer's state tensors."""
    out: list[Any] = []
    for p in model.parameters():
        out += [p, p.grad]
    if optimizer is not None:
        for state in optimizer.state.values():
            out += [v for v in state.values() if hasattr(v, "untyped_storage") and v.dim() > 0]
    return out


def cpu_memory_events(trace_events: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps in µs, signed bytes) of the CPU ``[memory]`` events of a Chrome trace, in time order."""
    mem = [
        e
        for e in trace_events
        if e.get("name") == "[memory]" and (e.get("args") or {}).get("Device Type") == CPU_DEVICE_TYPE
    ]
    ts = np.array([float(e["ts"]) for e in mem], dtype=np.float64)
    nbytes = np.array([int(e["args"]["Bytes"]) for e in mem], dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    return ts[order], nbytes[order]


@dataclasses.dataclass(frozen=True, slots=True)
class StepMemory:
    """Allocated memory of one recorded step (bytes)."""

    live_at_start: int
    """Bytes of the tensors live when recording started (parameters, optimizer states, …)."""
    peak_rise: int
    """The largest running sum of the step's ``[memory]`` events (0 if it never rose)."""
    end_rise: int
    """The running sum at the step's end (what the step left allocated)."""
    n_events: int

    @property
    def peak_allocated(self) -> int:
        """Peak allocated bytes over the step: ``live_at_start + peak_rise``."""
        return self.live_at_start + self.peak_rise


def step_memory(trace_events: list[dict[str, Any]], live_at_start: int) -> StepMemory:
    """``StepMemory`` of a recorded window from its Chrome-trace events and the bytes live at its start."""
    _, nbytes = cpu_memory_events(trace_events)
    running = np.cumsum(nbytes)
    peak = int(max(running.max(), 0)) if running.size else 0
    return StepMemory(
        live_at_start=live_at_start,
        peak_rise=peak,
        end_rise=int(running[-1]) if running.size else 0,
        n_events=int(nbytes.size),
    )


def record_step_memory(
    step: Callable[[], Any], live_at_start: int
) -> tuple[StepMemory, list[dict[str, Any]]]:
    """Run ``step`` once under ``torch.profiler`` with ``profile_memory=True`` (CPU activity only);
    returns its ``StepMemory`` and the raw trace events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        prof.export_chrome_trace(tmp.name)
        with open(tmp.name) as f:
            events = json.load(f)["traceEvents"]
    return step_memory(events, live_at_start), events

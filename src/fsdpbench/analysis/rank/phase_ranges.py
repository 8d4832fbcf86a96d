"""Phases without units: forward, backward and optimizer windows from what every PyTorch trace records,
for traces with no source of units (no fsdpbench ranges: a DDP run, any profile from elsewhere;
docs/attribution.md "Phases from the autograd and optimizer ranges").

torch-free: numpy on the :class:`~fsdpbench.trace.table.EventTable` columns. The windows, on the host
lanes where the work is launched:

* **optimizer**: each ``Optimizer.step#…`` and ``Optimizer.zero_grad#…`` range (PyTorch's optimizer
  records both, named after the optimizer class; :data:`OPTIMIZER`, the one rule the FSDP2 source
  shares);
* **backward**: per host lane and profiler step, from the first to the last end of the autograd engine's
  ``autograd::engine::evaluate_function: …`` ranges (on CUDA the autograd thread's, on CPU the main
  thread's): everything the autograd engine launches, gradient hooks (DDP's all-reduces) included;
* **forward**: per profiler step, on the step's own lane (``ProfilerStep#N``), from the step's start to
  the first backward range of the step.

An optimizer range inside a forward window (``zero_grad`` at the step's start) is the innermost range
there, so its work is the optimizer's. Every window's unit is ``(all)``: the trace names no unit.

Only host ranges count: the CUDA profiler's device-side copies of them (``gpu_user_annotation`` events
on a stream: ``ProfilerStep#N``, ``Optimizer.step#…``) are labels, never windows (DESIGN.md); a copy of
``ProfilerStep#N`` taken as a step of its own would take the step's backward ranges from the host step,
whose forward window would then run to the step's end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy only where windows are made: SOURCE is read on cached analyses too
    import numpy as np

    from fsdpbench.trace.table import EventTable

SOURCE = "autograd/optimizer ranges"
"""The name of this source of (unit, phase) windows in the output."""
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")
"""The optimizer phase's ranges, for every source that reads the trace's own ranges (this one and FSDP2's):
``optimizer.step()`` and ``optimizer.zero_grad()`` as ``torch.optim.Optimizer`` records them
(``Optimizer.step#<class>.step``, ``Optimizer.zero_grad#<class>.zero_grad``): both are the optimizer's
work, and ``zero_grad(set_to_none=False)`` launches a memset per gradient."""
_BACKWARD = "autograd::engine::evaluate_function: "
_STEP = "ProfilerStep#"


def _rows(t: EventTable, prefixes: tuple[str, ...]) -> np.ndarray:
    """Host rows whose name starts with one of ``prefixes``, by start; not the device-side copies of host
    ranges (:func:`~fsdpbench.analysis.rank.windows.host_rows`)."""
    import numpy as np

    from fsdpbench.analysis.rank.windows import host_rows

    rows = host_rows(t, [i for i, c in enumerate(t.name.categories) if str(c).startswith(prefixes)])
    return rows[np.argsort(t.start_ns[rows], kind="stable")]


def phase_windows(t: EventTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(lane codes, starts, ends, phases) of the forward, backward and optimizer windows of ``t``
    (module docstring); empty arrays when ``t`` has no autograd engine range and no optimizer range."""
    import numpy as np

    opt, bwd, steps = _rows(t, OPTIMIZER), _rows(t, (_BACKWARD,)), _rows(t, (_STEP,))
    lane: list[int] = []
    start: list[int] = []
    end: list[int] = []
    phase: list[str] = []
    if not opt.size and not bwd.size:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), []
    # each backward range belongs to the profiler step it starts in (-1: outside every step)
    step_of = np.full(bwd.size, -1, dtype=np.int64)
    for k, s in enumerate(steps.tolist()):
        inside = (t.start_ns[bwd] >= t.start_ns[s]) & (t.start_ns[bwd] < t.end_ns[s])
        step_of[inside] = k
    bwd_lane = t.lane.codes[bwd].astype(np.int64)
    for key in sorted(set(zip(bwd_lane.tolist(), step_of.tolist(), strict=True))):
        sel = bwd[(bwd_lane == key[0]) & (step_of == key[1])]
        lane.append(key[0])
        start.append(int(t.start_ns[sel].min()))
        end.append(int(t.end_ns[sel].max()))
        phase.append("backward")
    for k, s in enumerate(steps.tolist()):
        mine = bwd[step_of == k]
        first = int(t.start_ns[mine].min()) if mine.size else int(t.end_ns[s])
        if first > int(t.start_ns[s]):
            lane.append(int(t.lane.codes[s]))
            start.append(int(t.start_ns[s]))
            end.append(first)
            phase.append("forward")
    for r in opt.tolist():
        lane.append(int(t.lane.codes[r]))
        start.append(int(t.start_ns[r]))
        end.append(int(t.end_ns[r]))
        phase.append("optimizer")
    return np.asarray(lane, np.int64), np.asarray(start, np.int64), np.asarray(end, np.int64), phase

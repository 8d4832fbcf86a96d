"""Where each FSDP unit's forward and backward, and the optimizer step, run in a trace: the (unit,
phase) windows that attribution assigns device events to, and the source that gave them
(docs/attribution.md "Sources of units").

torch-free: numpy on the :class:`~fsdpbench.trace.table.EventTable` columns. The sources, in order of
preference (the first that has any window in the trace is used, alone):

* ``fsdpbench ranges``: fsdpbench's own ``fsdpbench::forward::<unit>``, ``fsdpbench::backward::<unit>``
  and ``fsdpbench::optimizer`` host ranges (:mod:`fsdpbench.run.profile_marks`), each a window as is;
* ``FSDP2 ranges``: PyTorch FSDP2's own hook ranges (torch 2.3 and later, and torch_npu's
  ``fully_shard``, which keeps them), cut into windows by :mod:`fsdpbench.analysis.rank.fsdp2_windows`: a
  unit's forward from its ``FSDP::pre_forward (<fqn>)`` to its ``FSDP::post_forward (<fqn>)``, its
  backward from its ``FSDP::pre_backward (<fqn>)`` to its last ``FSDP::post_backward_*``; each root's
  forward from ``FSDP::root_pre_forward`` to the last forward range before the next root or the
  backward, its backward to the end of ``FSDP::root_post_backward_callback``; several roots of a pass
  told apart (``root#2/…``), unnamed units (torch 2.3/2.4, per-block roots) numbered, torch_npu's skipped
  ``post_forward`` closed at the next unit's; the optimizer from ``Optimizer.step#…`` and ``Optimizer.zero_grad#…``
  (``phase_ranges.OPTIMIZER``, the same rule as the phases-only source); named ``replicate() ranges``
  when :func:`is_replicate` (DDP on FSDP2's code writes the same labels);
* ``FSDP1 ranges (units by nesting)``: FSDP1's units numbered by the nesting of its
  ``FullyShardedDataParallel.forward`` ranges (:mod:`fsdpbench.analysis.rank.fsdp1_units`);
* ``autograd/optimizer ranges``: phases alone, unit ``(all)``, from the autograd engine's and the
  optimizer's ranges that every PyTorch trace records (:mod:`fsdpbench.analysis.rank.phase_ranges`);
* none: no window (every event is ``(outside)``).

DeepSpeed ZeRO-3 and hyper_parallel record no range that names or nests a unit, so they give phases only
(docs/attribution.md says what each records).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from fsdpbench.analysis.rank import phase_ranges
from fsdpbench.analysis.rank.windows import ALL_UNITS, Ranges, host_rows
from fsdpbench.analysis.rank.windows import ROOT as ROOT  # re-exported: the name callers know
from fsdpbench.analysis.rank.windows import SOURCE_NONE as SOURCE_NONE
from fsdpbench.analysis.rank.windows import empty as _empty
from fsdpbench.trace.table import EventTable

PREFIX = "fsdpbench::"
SOURCE_OWN = "fsdpbench ranges"
SOURCE_FSDP2 = "FSDP2 ranges"
SOURCE_PHASES = phase_ranges.SOURCE
SOURCE_REPLICATE = "replicate() ranges"
"""FSDP2's hook ranges written by ``replicate()`` (DDP on FSDP2's code, torch ≥ 2.9): the same windows."""

_FSDP2_NAME = re.compile(
    r"(?:FSDP|FullyShardedDataParallel|Replicate)::"
    r"(pre_forward|post_forward|pre_backward|post_backward_accumulate|post_backward_reshard"
    r"|post_backward_rs_wait|post_backward_reduce|root_pre_forward|root_post_backward_callback"
    r"|finalize_backward)"
    r"(?: \((.*)\))?(?: \[pg=[^\]]*\])?"
)
"""An FSDP2 hook range: kind, then the group's module FQN (``_with_fqn``: absent for the root's group,
whose FQN is ""; ``post_backward_rs_wait`` writes ``()`` for it), then `` [pg=…]`` with several
parameter groups per module. A group of several modules (``fully_shard([a, b])``) joins their FQNs
with ", ": that whole string is the unit. ``finalize_backward`` (torch 2.15 ``_fsdp_state.py:466``,
``f"{self._state_name}::finalize_backward"``: ``Replicate::`` under ``replicate()``) is a state's, named by
no FQN: the root's backward, closing like ``root_post_backward_callback``."""
FSDP2_PREFIXES = ("FSDP::", "FullyShardedDataParallel::", "Replicate::")
"""What every FSDP2 range name starts with (a cheap test before the patterns, over every name)."""
PREFETCH_NAME = re.compile(r"(?:FSDP|FullyShardedDataParallel)::(forward|backward)_prefetch(?: for (.*))?")
"""FSDP2's prefetch range: the pass, then the FQN of the group it unshards ('' for the root's; torch
2.3/2.4 write ``FSDP::backward_prefetch`` with no target: None)."""
_MODULE = "nn.Module: "
"""The profiler's range around a module's forward (``with_stack``/``with_modules``): ``nn.Module: <type>_<n>``."""


def _parse_own(name: str) -> tuple[str, str] | None:
    """(unit, phase) of an fsdpbench unit/phase range name, None for any other name."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    if rest == "optimizer":
        return ALL_UNITS, "optimizer"
    for phase in ("forward", "backward"):
        if rest.startswith(phase + "::"):
            return rest[len(phase) + 2 :], phase
    return None  # c10d ranges and anything else


def own_ranges(t: EventTable) -> Ranges:
    """fsdpbench's own unit/phase ranges of ``t`` (its c10d ranges are not unit/phase ranges)."""
    parsed = {i: p for i, c in enumerate(t.name.categories) if (p := _parse_own(str(c))) is not None}
    rows = host_rows(t, list(parsed))
    if not rows.size:
        return _empty()
    codes = t.name.codes[rows]
    return Ranges(
        lane=t.lane.codes[rows].astype(np.int64),
        start_ns=t.start_ns[rows],
        end_ns=t.end_ns[rows],
        unit=[parsed[int(c)][0] for c in codes],
        phase=[parsed[int(c)][1] for c in codes],
        source=SOURCE_OWN,
    )


def fsdp2_ranges(t: EventTable) -> Ranges:
    """FSDP2's (unit, phase) windows of ``t`` from its hook ranges (:mod:`fsdpbench.analysis.rank.fsdp2_windows`:
    sessions of each root, named or numbered units, the root's windows from what the trace has, several
    roots told apart, torch_npu's skipped ``post_forward``), and the optimizer windows from
    ``Optimizer.step#…`` and ``Optimizer.zero_grad#…``; empty when ``t`` holds no FSDP2 hook range."""
    from fsdpbench.analysis.rank import fsdp2_windows as fw

    kinds: dict[int, tuple[str, str | None]] = {}  # name code → (kind, FQN of the label)
    optimizer: list[int] = []
    modules: dict[int, str] = {}  # name code → module type of an ``nn.Module: <type>_<n>`` range
    for i, c in enumerate(t.name.categories):
        name = str(c)
        if name.startswith(phase_ranges.OPTIMIZER):
            optimizer.append(i)
        elif name.startswith(FSDP2_PREFIXES) and (m := _FSDP2_NAME.fullmatch(name)) is not None:
            kinds[i] = (m.group(1), m.group(2))
        elif name.startswith(_MODULE):
            modules[i] = _module_type(name)
    rows = host_rows(t, list(kinds))
    if not rows.size:
        return _empty()
    names = t.name.categories
    hooks = [
        fw.Hook(*kinds[code], lane, start, end, str(names[code]))
        for code, lane, start, end in zip(
            t.name.codes[rows].tolist(),
            t.lane.codes[rows].tolist(),
            t.start_ns[rows].tolist(),
            t.end_ns[rows].tolist(),
            strict=True,
        )
    ]
    opt = host_rows(t, optimizer)
    module_types: dict[int, list[tuple[int, int, str]]] = {}
    mod_rows = host_rows(t, list(modules))
    for code, lane, start, end in zip(
        t.name.codes[mod_rows].tolist(),
        t.lane.codes[mod_rows].tolist(),
        t.start_ns[mod_rows].tolist(),
        t.end_ns[mod_rows].tolist(),
        strict=True,
    ):
        module_types.setdefault(lane, []).append((start, end, modules[code]))
    built = fw.windows(hooks, t.start_ns[opt].tolist(), module_types)
    ws = built.windows
    opt_names = [str(names[c]) for c in t.name.codes[opt].tolist()]
    return Ranges(
        lane=np.concatenate([np.asarray([w.lane for w in ws], np.int64), t.lane.codes[opt].astype(np.int64)]),
        start_ns=np.concatenate([np.asarray([w.start for w in ws], np.int64), t.start_ns[opt]]),
        end_ns=np.concatenate([np.asarray([w.end for w in ws], np.int64), t.end_ns[opt]]),
        unit=[*(w.unit for w in ws), *[ALL_UNITS] * opt.size],
        phase=[*(w.phase for w in ws), *["optimizer"] * opt.size],
        source=SOURCE_FSDP2,
        opened_by=[*(w.opened_by for w in ws), *opt_names],
        closed_by=[*(w.closed_by for w in ws), *opt_names],
        notes=tuple(built.notes),
    )


def _module_type(name: str) -> str:
    """``Block`` of ``nn.Module: Block_3`` (the profiler numbers each module instance)."""
    rest = name[len(_MODULE) :]
    head, _, tail = rest.rpartition("_")
    return head if head and tail.isdigit() else rest


def is_replicate(t: EventTable) -> bool:
    """Whether ``t``'s FSDP2 hook ranges were written by ``replicate()`` (torch ≥ 2.9,
    ``_composable/replicate_with_fsdp.py``: FSDP2's param groups on a replicate-only mesh, which write the
    same ``FSDP::`` labels): a ``Replicate::`` range (2.15's ``Replicate::finalize_backward``), or
    ``FSDP::post_backward_reduce`` ranges with no ``FSDP::all_gather`` range (a replicate group never
    all-gathers: ``unshard`` takes its world-size-1 path, 2.13 ``_fsdp_param_group.py:388-405``) and
    all-reduces but no all-gather or reduce-scatter among the trace's collectives (its gradients are
    all-reduced, ``:662-666``; FSDP2 on one rank all-reduces nothing)."""
    names = [str(c) for c in t.name.categories]
    if any(n.startswith("Replicate::") for n in names):
        return True
    reduce = any(n.startswith("FSDP::post_backward_reduce") for n in names)
    if not reduce or any(n == "FSDP::all_gather" or n.startswith("FSDP::all_gather ") for n in names):
        return False
    kinds = set(t.collective[t.device & t.category.mask("comm")].strings("other").tolist())
    return "all_reduce" in kinds and not kinds & {"all_gather", "reduce_scatter"}


def find_ranges(t: EventTable) -> Ranges:
    """The (unit, phase) windows of ``t`` from its best source: fsdpbench's own ranges, else FSDP2's
    (source ``replicate() ranges`` when :func:`is_replicate`), else FSDP1's (:mod:`fsdp1_units`), else the
    autograd/optimizer ranges' phases (module docstring); an empty :class:`Ranges` with source ``none``
    when none is there."""
    for source in (own_ranges, fsdp2_ranges):
        found = source(t)
        if len(found):
            if found.source == SOURCE_FSDP2 and is_replicate(t):
                found = replace(found, source=SOURCE_REPLICATE)
            return found
    from fsdpbench.analysis.rank import fsdp1_units  # here: it imports this module

    found = fsdp1_units.fsdp1_ranges(t)
    if len(found):
        return found
    lane, start, end, phase = phase_ranges.phase_windows(t)
    if phase:
        return Ranges(lane, start, end, [ALL_UNITS] * len(phase), phase, SOURCE_PHASES)
    return _empty()

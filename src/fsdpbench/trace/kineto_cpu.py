"""The CPU/gloo lane rules of the Kineto reader: what is compute and what is communication in a
CPU-only (gloo) trace, where the lanes are threads (see :mod:`fsdpbench.trace.kineto`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from fsdpbench.trace.table import CATEGORY_CODE, Coded, collective_codes

_LAUNCH_RE = re.compile(r"^(c10d::|record_param_comms$|nccl:|c10d_functional::|_c10d_functional::)")
# namespaces of wrappers (autograd nodes, FSDP hooks, profiler, collectives): they can contain a
# blocking wait, so they are never compute themselves; the operators inside them are
_WRAPPER_PREFIXES = (
    "autograd::",
    "torch::autograd::",
    "FSDP::",
    "c10d::",
    "_c10d_functional::",
    "c10d_functional::",
    "profiler::",
    "torch::jit::",
)
_OP_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]")


def _is_operator(name: str) -> bool:
    """True for a namespaced operator (``aten::mm``, ``fsdp::chunk_cat``) that is not a wrapper."""
    return bool(_OP_NAME.match(name)) and not name.startswith(_WRAPPER_PREFIXES)


def outermost(
    idx: np.ndarray, start: np.ndarray, end: np.ndarray, lane: np.ndarray | None = None
) -> np.ndarray:
    """The spans among ``idx`` not nested in another of them (on the same lane when ``lane`` is
    given), in (lane, start) order. A span is nested when it starts before the furthest end reached
    by the spans that start before it (ties: the longer span is the outer one)."""
    if idx.size == 0:
        return idx
    keys = (-end[idx], start[idx]) if lane is None else (-end[idx], start[idx], lane[idx])
    idx = idx[np.lexsort(keys)]
    ends = end[idx]
    if lane is None:
        reach = np.maximum.accumulate(ends)
    else:  # the furthest end so far within each lane (the lanes are contiguous after the sort)
        reach = np.empty_like(ends)
        cuts = [0, *(np.flatnonzero(lane[idx][1:] != lane[idx][:-1]) + 1).tolist(), idx.size]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            reach[a:b] = np.maximum.accumulate(ends[a:b])
    outer = np.ones(idx.size, dtype=bool)
    outer[1:] = start[idx[1:]] >= reach[:-1]
    if lane is not None:
        outer[1:] |= lane[idx[1:]] != lane[idx[:-1]]  # the first span of each lane
    return idx[outer]


def classify_cpu(
    names: Coded,
    cat_lower: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    lane_codes: np.ndarray,
    is_step: np.ndarray,
    is_annot: np.ndarray,
    sizes: dict[int, float],
    category: np.ndarray,
    device: np.ndarray,
    collective: np.ndarray,
    nbytes: np.ndarray,
    warnings: list[str],
    path: Path,
    device_job: bool = False,
) -> None:
    """Fill category/device/collective/bytes in place for a CPU-only trace (see the Kineto module
    docstring); ``category`` and ``collective`` are codes into ``table.CATEGORIES`` and
    ``table.COLLECTIVE_LABELS``, ``sizes`` maps event index → message bytes. Device-side annotations (``is_annot``)
    are labels: never a collective, a launch or compute. ``device_job``: a CPU-only profile of a GPU/NPU
    job (its collectives ran on the device, unrecorded): no host span is counted as a collective."""
    is_cpu_op = cat_lower == "cpu_op"
    # the training thread holds the ProfilerStep spans, else the most cpu_ops
    if is_step.any():
        main = np.bincount(lane_codes[is_step]).argmax()
    elif is_cpu_op.any():
        main = np.bincount(lane_codes[is_cpu_op]).argmax()
    else:
        main = np.bincount(lane_codes).argmax()
    on_main = lane_codes == main
    is_gloo = (
        np.array([c.lower().startswith("gloo:") for c in names.categories] + [False])[names.codes] & ~is_annot
    )
    is_launch = (
        ~is_annot
        & on_main
        & np.array([bool(_LAUNCH_RE.match(c)) for c in names.categories] + [False])[names.codes]
    )
    is_launch &= ~is_gloo

    # outermost launch ops, and everything nested inside them on the training thread
    launches = outermost(np.flatnonzero(is_launch), start, end)
    inside = np.zeros(len(start), dtype=bool)
    if launches.size:
        ls, le = start[launches], end[launches]
        m = np.flatnonzero(on_main)
        k = np.searchsorted(ls, start[m], side="right") - 1
        ok = k >= 0
        inside[m[ok]] = end[m[ok]] <= le[k[ok]]

    # operators of the training thread: namespaced ops (aten::, fsdp::, custom ns) that are not
    # wrappers; the outermost of them, outside collective launches, are the compute
    op_name = np.array([_is_operator(c) for c in names.categories] + [False])[names.codes]
    compute = outermost(np.flatnonzero(on_main & is_cpu_op & op_name & ~inside), start, end)
    category[compute] = CATEGORY_CODE["compute"]
    device[compute] = True

    # gloo worker spans: the top-level gloo:* events on each thread
    gi = outermost(np.flatnonzero(is_gloo), start, end, lane_codes)
    if gi.size:
        gi = gi[np.argsort(start[gi], kind="stable")]
        category[gi] = CATEGORY_CODE["comm"]
        device[gi] = True
        types = collective_codes(names)
        span_type = types[gi]
        launch_order = launches[np.argsort(start[launches], kind="stable")] if launches.size else launches
        launch_type = types[launch_order]
        launch_bytes = np.array([sizes.get(int(i), np.nan) for i in launch_order])
        if launch_order.size == gi.size:
            collective[gi] = launch_type
            nbytes[gi] = launch_bytes
        else:
            collective[gi] = span_type
            if launch_order.size:
                warnings.append(
                    f"{path.name}: {launch_order.size} collective launches but {gi.size} gloo worker spans; "
                    "types taken from the worker spans and sizes unknown"
                )
        collective[launch_order] = launch_type
        nbytes[launch_order] = launch_bytes
    elif launches.size and not device_job:
        category[launches] = CATEGORY_CODE["comm"]
        device[launches] = True
        collective[launches] = collective_codes(names)[launches]
        nbytes[launches] = [sizes.get(int(i), np.nan) for i in launches]
        warnings.append(
            f"{path.name}: no gloo worker-thread spans; the collective launch ops on the training thread are "
            "counted as communication (they block it, so overlap is zero by construction)"
        )

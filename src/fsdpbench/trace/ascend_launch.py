"""Where each device task of a torch_npu profile was launched from: the host operator on the thread
that ran it (the Python thread, with its ``record_function`` ranges open), not the CANN call that
submitted it (with torch_npu's task queue on, that call runs on the dequeue thread).

The profiler records the link itself (docs/attribution.md "Ascend exports"):

* text export, ``trace_view.json``: the ``async_npu`` flow (``torch_to_npu``, ``ph`` ``s`` at the
  host operator's start on its thread, ``f`` at the device task's start on its stream or HCCL lane);
* db export: ``TASK.connectionId`` / ``COMMUNICATION_OP.connectionId`` among the connection ids
  ``CONNECTION_IDS`` lists for a ``PYTORCH_API`` operator (``id`` = that row's ``connectionId``).

Where a linked host point lies inside a ``Dequeue@…`` range (the queue thread), it is moved to the
``Enqueue`` range of the same correlation (text: ``args.correlation_id``; db: the shared connection
id): the op's enqueue on the thread that issued it.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pandas as pd

NO_LANE = ""
"""Launch lane of a device task with no linked host point (it keeps its own lane and start)."""


def through_queue(
    lane: np.ndarray,
    time_ns: np.ndarray,
    dequeue: pd.DataFrame,
    enqueue: dict[Hashable, tuple[str, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """Move each host point (``lane``, ``time_ns``) that lies in a dequeue range (``dequeue``: ``lane,
    start_ns, end_ns, key``) to the start and lane of the enqueue of that key (``enqueue``: key →
    (lane, start)); other points are returned as they are."""
    lane, time_ns = lane.copy(), time_ns.copy()
    if not len(dequeue) or not enqueue:
        return lane, time_ns
    for q_lane, ranges in dequeue.groupby("lane", sort=False):
        ranges = ranges.sort_values("start_ns", kind="stable")
        starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
        keys = ranges["key"].to_numpy(object)
        at = np.flatnonzero(lane == q_lane)
        k = np.searchsorted(starts, time_ns[at], side="right") - 1
        inside = (k >= 0) & (time_ns[at] < ends[np.maximum(k, 0)])
        for i, j in zip(at[inside].tolist(), k[inside].tolist(), strict=True):
            found = enqueue.get(keys[j])
            if found is not None:
                lane[i], time_ns[i] = found
    return lane, time_ns


def link_rows(
    category: np.ndarray, start_ns: np.ndarray, links: dict[tuple[str, int], tuple[str, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per device row (its ``category`` and start) the linked host point from ``links`` ((category,
    device start) → (host lane, host start)): lane :data:`NO_LANE` and the row's own start where none.
    A start 1 ns off matches too: kernel_details.csv and trace_view.json round the same start apart
    (``…241.563`` and ``…241.564`` for one HCCL op in the real Level1 export)."""
    lane = np.full(len(start_ns), NO_LANE, dtype=object)
    time = np.asarray(start_ns, dtype=np.int64).copy()
    for i, (c, s) in enumerate(zip(category.tolist(), time.tolist(), strict=True)):
        found = links.get((c, s)) or links.get((c, s + 1)) or links.get((c, s - 1))
        if found is not None:
            lane[i], time[i] = found
    return lane, time

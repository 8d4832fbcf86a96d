"""The Python API: ranks read in parallel processes give the same result as in-process, and the
event table of a rank read in a worker is read again on first use."""

from __future__ import annotations

import pandas as pd

from fsdpbench.analysis import analyze
from fsdpbench.trace.synthetic import make_trace, write_trace


def test_parallel_and_in_process_analyses_agree_and_events_reload(tmp_path):
    for rank in range(2):
        write_trace(
            tmp_path / f"rank{rank}.json.gz", make_trace(rank=rank, world_size=2, device_events=500, seed=4)
        )
    serial = analyze([tmp_path], workers=1)
    parallel = analyze([tmp_path], workers=2)
    assert serial.record().to_dict() == parallel.record().to_dict()
    r = parallel.ranks[1]
    assert r._events is None  # not shipped back from the worker
    pd.testing.assert_frame_equal(r.events, serial.ranks[1].events)
    pd.testing.assert_frame_equal(r.collective_events, serial.ranks[1].collective_events)
    assert list(r.collective_events.columns) == [
        *("type", "bytes", "start_ns", "end_ns"),
        *("group", "seq", "dtype", "in_bytes", "out_bytes"),
        *("mark_group", "mark_index", "unit", "phase", "transfer_ns"),
    ]
    assert {"name", "category", "start_ns", "end_ns", "lane"} <= set(r.events.columns)

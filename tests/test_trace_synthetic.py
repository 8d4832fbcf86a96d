"""trace/synthetic.py's ``host_ops``: the host side of a real trace around the launches, read back in plain
Python from the generated events (counts per category against tests/fixtures/hta_ddp_step's, which this test
counts itself; nesting; every launch inside an operator, before its kernel, inside its step)."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import orjson
import pytest

from fsdpbench.trace.synthetic import device_events_for, make_trace

FIXTURE = Path(__file__).parent / "fixtures" / "hta_ddp_step" / "rank1_step4.json.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _ns(us: float) -> int:
    return round(us * 1000)


def test_the_fixtures_host_events_per_device_event_are_the_ones_written():
    events = orjson.loads(gzip.decompress(FIXTURE.read_bytes()))["traceEvents"]
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    device = sum(cats[c] for c in DEVICE)
    trace = make_trace(device_events=5000, seed=2, host_ops=True)
    mine = Counter(e.get("cat") for e in trace["traceEvents"] if e.get("ph") == "X")
    my_device = sum(mine[c] for c in DEVICE)
    for cat in ("cpu_op", "cuda_runtime"):
        assert mine[cat] / my_device == pytest.approx(cats[cat] / device, rel=0.03), cat


def test_host_ops_nest_without_overlap_and_enclose_every_launch():
    trace = make_trace(device_events=3000, steps=3, seed=4, host_ops=True)
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    host = sorted(
        (e for e in evs if e["tid"] == 1 and e["cat"] != "user_annotation"),
        key=lambda e: (_ns(e["ts"]), -_ns(e["dur"])),
    )
    steps = [(_ns(e["ts"]), _ns(e["ts"] + e["dur"])) for e in evs if e["cat"] == "user_annotation"]
    kernel_at = {e["args"]["correlation"]: _ns(e["ts"]) for e in evs if e["cat"] in DEVICE}
    stack: list[tuple[int, str]] = []
    enclosed = 0
    for e in host:
        a, b = _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])
        assert b > a
        assert any(s0 <= a for s0, _ in steps)
        while stack and stack[-1][0] <= a:
            stack.pop()
        assert not stack or b <= stack[-1][0], f"{e['name']} at {a} overlaps its neighbour"
        if e["name"] == "cudaLaunchKernel":
            enclosed += bool(stack) and stack[-1][1].startswith("aten::")
            assert a < kernel_at[e["args"]["correlation"]]
            step0 = max(s0 for s0, _ in steps if s0 <= kernel_at[e["args"]["correlation"]])
            assert a >= step0  # in its kernel's step
        stack.append((b, e["name"]))
    assert (
        enclosed
        == sum(e["name"] == "cudaLaunchKernel" for e in host)
        == 3000 - 3000 // 20 - 3000 // 50 + 3000 // 20 + 3000 // 50
    )


def test_the_default_trace_has_no_host_operators_and_events_count_all_events():
    plain = make_trace(device_events=400, seed=1)
    assert not any(e.get("cat") == "cpu_op" for e in plain["traceEvents"])
    real = make_trace(device_events=device_events_for(6000), seed=1, host_ops=True)
    assert sum(e.get("ph") == "X" for e in real["traceEvents"]) == pytest.approx(6000, rel=0.02)

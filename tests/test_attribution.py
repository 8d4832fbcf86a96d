"""Units × phases (analysis/rank/attribution.py): a hand-built CPU/gloo trace with hand-computed interval
unions per bucket, the share rule against a brute-force sweep, and the exact partition of the step's
totals on real profiled runs (totals recomputed by the test from the raw trace JSON)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpbench.analysis import analyze, rank_metrics
from fsdpbench.analysis.rank import attribution
from fsdpbench.trace.kineto import read_kineto
from helpers import raw_cpu_totals, run_profiled_ab

HAVE_HYPER = importlib.util.find_spec("hyper_parallel") is not None

MAIN, WORKER, WORKER2 = 100, 200, 201


def _x(name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "cpu_op", **args) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def _range(name: str, ts: float, dur: float) -> dict:
    return _x(name, ts, dur, cat="user_annotation")


DIMS = {"Input Dims": [[16], [8]], "Input type": ["float", "float"]}


def hand_trace(path: Path) -> Path:
    """Times in µs. Main thread: forward of layers.0 [0, 40) with FSDP2's all-gather range holding the
    copy-in op and the all-gather launch, then a matmul; a matmul in the gap [45, 48); the root's backward [50, 98) with
    layers.0's backward [55, 80) nested (matmul, reduce-scatter launch inside FSDP::post_backward_reduce),
    then the root's all-reduce launch and a matmul. Two gloo worker threads: the three gloo spans."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": WORKER, "args": {"name": "pt_gloo_runloop"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": WORKER2, "args": {"name": "pt_gloo_runloop"}},
        _range("ProfilerStep#3", 0.0, 100.0),
        _range("fsdpbench::forward::layers.0", 0.0, 40.0),
        _range("FSDP::all_gather (layers.0)", 0.4, 4.1),
        _x("fsdp::all_gather_copy_in", 0.5, 1.0),
        _x("c10d::_allgather_base_", 2.0, 2.0, **DIMS),
        _x("aten::mm", 5.0, 15.0),
        _x("aten::mm", 45.0, 3.0),
        _range("fsdpbench::backward::root", 50.0, 48.0),
        _range("fsdpbench::backward::layers.0", 55.0, 25.0),
        _x("aten::mm", 56.0, 14.0),
        _range("FSDP::post_backward_reduce (layers.0)", 71.0, 3.0),
        _x("c10d::_reduce_scatter_base_", 72.0, 1.0, **DIMS),
        _x("c10d::allreduce_", 82.0, 1.0, **DIMS),
        _x("aten::mm", 84.0, 12.0),
        _x("gloo:all_gather", 10.0, 20.0, tid=WORKER, cat="user_annotation"),
        _x("gloo:all_reduce", 74.0, 16.0, tid=WORKER, cat="user_annotation"),
        _x("gloo:all_reduce", 85.0, 14.0, tid=WORKER2, cat="user_annotation"),
    ]
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def test_hand_built_trace_gives_the_hand_computed_unions_per_bucket(tmp_path):
    trace = read_kineto(hand_trace(tmp_path / "t.json"))
    rows = {(r["unit"], r["phase"]): r for r in attribution.unit_phase_rows(trace.table, trace.mode)}
    # by hand, in µs. compute: copy-in [0.5,1.5) + mm [5,20) | mm [45,48) | mm [56,70) | mm [84,96).
    # comm shares (first-started owns): [10,30) | [74,90) | [90,99) (the root's span starts at 85, under
    # the layer's). overlapped = share ∩ ∪compute: [10,20) | [84,90) | [90,96).
    want = {
        ("layers.0", "forward"): (16.0, 20.0, 10.0, 10.0, {"all_gather": 1}),
        ("(outside)", "(outside)"): (3.0, 0.0, 0.0, 0.0, {}),
        ("layers.0", "backward"): (14.0, 16.0, 6.0, 10.0, {"reduce_scatter": 1}),
        ("root", "backward"): (12.0, 9.0, 6.0, 3.0, {"all_reduce": 1}),
    }
    assert set(rows) == set(want)
    bytes_of = dict(zip(trace.events["start_ns"], trace.events["bytes"], strict=True))
    for key, (comp, comm, over, exp, colls) in want.items():
        r = rows[key]
        got = (r["compute_us"], r["comm_us"], r["overlapped_us"], r["exposed_us"])
        assert got == pytest.approx((comp, comm, over, exp), abs=1e-9), key
        assert {t: c["count"] for t, c in r["collectives"].items()} == colls
    # bytes: those of the gloo span placed there (given to it from its launch's Input Dims)
    assert rows[("layers.0", "forward")]["collectives"]["all_gather"]["bytes"] == bytes_of[10_000]
    # FSDP2's own ranges: host time of the span, device time of what was launched inside it
    fwd = rows[("layers.0", "forward")]["fsdp_internals"]
    assert fwd["copy_in"] == {"host_us": pytest.approx(1.0), "device_us": pytest.approx(1.0)}
    assert fwd["all_gather"] == {"host_us": pytest.approx(4.1), "device_us": pytest.approx(20.0)}
    assert fwd["copy_out"] is None  # the trace holds no FSDP::all_gather_copy_out: not in this trace, not 0
    bwd = rows[("layers.0", "backward")]["fsdp_internals"]
    assert bwd["reduce"] == {"host_us": pytest.approx(3.0), "device_us": pytest.approx(16.0)}
    assert rows[("root", "backward")]["fsdp_internals"]["reduce"] == {"host_us": 0.0, "device_us": 0.0}
    # the step totals (hand): ∪compute 45, ∪comm [10,30)+[74,99) = 45, overlapped [10,20)+[84,96) = 22
    m = rank_metrics(trace)
    assert (m.compute_us, m.comm_us, m.overlapped_us) == pytest.approx((45.0, 45.0, 22.0))


def test_a_trace_without_fsdp2_ranges_has_null_internals(tmp_path):
    events = [e for e in orjson.loads(hand_trace(tmp_path / "t.json").read_bytes())["traceEvents"]]
    events = [e for e in events if not e["name"].lower().startswith("fsdp::")]
    (tmp_path / "u.json").write_bytes(orjson.dumps({"traceEvents": events}))
    trace = read_kineto(tmp_path / "u.json")
    rows = attribution.unit_phase_rows(trace.table, trace.mode)
    assert rows and all(r["fsdp_internals"] is None for r in rows)


def test_collective_places_name_each_collective_unit_and_phase(tmp_path):
    trace = read_kineto(hand_trace(tmp_path / "t.json"))
    p = attribution.collective_places(trace.table, trace.mode)
    assert p["start_ns"].tolist() == [10_000, 74_000, 85_000]
    assert list(zip(p["unit"], p["phase"], strict=True)) == [
        ("layers.0", "forward"),
        ("layers.0", "backward"),
        ("root", "backward"),
    ]


def _brute_owner_lengths(start: list[int], end: list[int]) -> list[int]:
    """Per interval the integer points t it owns: covered by it, and it is the first in (start, index)
    order among the intervals covering t."""
    order = sorted(range(len(start)), key=lambda i: (start[i], i))
    own = [0] * len(start)
    for t in range(min(start, default=0), max(end, default=0)):
        for i in order:
            if start[i] <= t < end[i]:
                own[i] += 1
                break
    return own


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_shares_are_the_first_started_owner_of_each_instant(spans):
    start = np.array([s for s, _ in spans], dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    s0 = attribution.shares(start, end)
    assert np.maximum(end - s0, 0).tolist() == _brute_owner_lengths(start.tolist(), end.tolist())


# ------------------------------------------------------------------ real profiled runs


def _check_partition(path: Path) -> list[dict]:
    trace = read_kineto(path)
    rows = attribution.unit_phase_rows(trace.table, trace.mode)
    totals = {k: sum(round(r[f"{k}_us"] * 1000) for r in rows) for k in ("compute", "comm", "overlapped")}
    raw = raw_cpu_totals(path)
    assert totals == {k: raw[k] for k in totals}, path
    exposed = sum(round(r["exposed_us"] * 1000) for r in rows)
    assert exposed == raw["comm"] - raw["overlapped"]
    assert sum(c["count"] for r in rows for c in r["collectives"].values()) == raw["collectives"]
    m = rank_metrics(trace)
    for ty, c in m.collectives.items():
        per = [r["collectives"][ty] for r in rows if ty in r["collectives"]]
        assert sum(p["count"] for p in per) == c["count"]
        assert sum(p["bytes"] or 0 for p in per) == (c["bytes"] or 0)
    return rows


ALL_ARMS = os.environ.get("FSDPBENCH_TEST_ALL_ARMS") == "1"
"""Also deepspeed and hyper (where installed): a deepspeed launch takes 2–4 min on 2 cores (measured
139 s and 243 s), far over this issue's CI share, so CI launches fsdp1 only (~14 s)."""


def other_arms() -> set[str]:
    return (
        {"fsdp1"} | ({"deepspeed"} if ALL_ARMS else set()) | ({"hyper"} if ALL_ARMS and HAVE_HYPER else set())
    )


@pytest.fixture(scope="module")
def other_arms_run(tmp_path_factory) -> Path:
    """The other arms' profiled step (torch's is the shared ``profiled_ab_run``, whose arm pair other
    tests rely on): fsdp1; with FSDPBENCH_TEST_ALL_ARMS=1 also deepspeed and hyper."""
    arms = ",".join(sorted(other_arms()))
    return run_profiled_ab(tmp_path_factory.mktemp("other_arms"), arms, "arms", 900)


@pytest.mark.distributed
def test_unit_phase_rows_partition_the_step_exactly_for_every_arm(other_arms_run):
    """fsdp1, deepspeed and hyper emit no FSDP2 ranges: the rows come from fsdpbench's own ranges alone."""
    traces = [t for t in sorted((other_arms_run / "profiles").rglob("*.json*")) if not t.name.startswith(".")]
    arms = {t.parts[-3] for t in traces}
    assert arms == other_arms()
    assert len(traces) == 2 * len(arms)
    for path in traces:
        rows = _check_partition(path)
        assert all(r["fsdp_internals"] is None for r in rows), path
        for unit in ("layers.0", "layers.3", "root"):
            for phase in ("forward", "backward"):
                row = next(r for r in rows if (r["unit"], r["phase"]) == (unit, phase))
                assert row["collectives"], (path, unit, phase)  # each unit gathers in each pass


@pytest.mark.distributed
def test_fsdp1_units_by_nesting_match_fsdpbenchs_own_ranges(other_arms_run):
    """The fsdp1 arm's real profiles: FSDP1's ``FullyShardedDataParallel.forward`` ranges nest (a plain
    reading of the raw JSON: one outermost per forward, the 4 layers' directly inside it, in order), and
    every collective lands in the same place by FSDP1's ranges alone (analysis/rank/fsdp1_units.py, ``#k``) as
    by fsdpbench's own (``layers.k``)."""
    from fsdpbench.analysis.rank import fsdp1_units, unit_ranges
    from helpers import raw_ns, raw_x_events

    traces = sorted((other_arms_run / "profiles" / "fsdp1").rglob("*.json*"))
    traces = [t for t in traces if not t.name.startswith(".")]
    assert len(traces) == 2
    for path in traces:
        fwd = sorted(raw_ns(e) for e in raw_x_events(path) if e["name"] == "FullyShardedDataParallel.forward")
        outer = [s for s in fwd if not any(o[0] <= s[0] and s[1] <= o[1] and o != s for o in fwd)]
        assert len(outer) == 1 and len(fwd) == 5, fwd  # the root's, holding the 4 layers'
        trace = read_kineto(path)
        own = unit_ranges.find_ranges(trace.table)
        nested = fsdp1_units.fsdp1_ranges(trace.table)
        assert own.source == "fsdpbench ranges" and nested.source == "FSDP1 ranges (units by nesting)"
        by_own = attribution.collective_places(trace.table, trace.mode, None, own)
        by_nesting = attribution.collective_places(trace.table, trace.mode, None, nested)
        renamed = [u.replace("layers.", "#") for u in by_own["unit"].tolist()]
        assert renamed == by_nesting["unit"].tolist(), path
        assert by_own["phase"].tolist() == by_nesting["phase"].tolist(), path
        assert {"#0", "#3", "root"} <= set(renamed)


@pytest.mark.distributed
def test_unit_phase_rows_partition_the_step_exactly_on_real_runs(profiled_ab_run):
    traces = sorted((profiled_ab_run / "profiles").rglob("*.json*"))
    traces = [t for t in traces if not t.name.startswith(".")]
    assert len(traces) >= 4  # 2 arms × 2 ranks
    for path in traces:
        rows = _check_partition(path)
        units = {r["unit"] for r in rows}
        phases = {(r["unit"], r["phase"]) for r in rows}
        assert {"layers.0", "layers.1", "root", "(all)"} <= units, path
        assert ("(all)", "optimizer") in phases and ("root", "backward") in phases
        # FSDP2 (torch) names its own internals: every layer's forward all-gather is seen
        fwd = next(r for r in rows if r["unit"] == "layers.1" and r["phase"] == "forward")
        assert fwd["fsdp_internals"] is not None and fwd["fsdp_internals"]["all_gather"]["host_us"] > 0
        # collectives are launched inside the units: nothing but compute glue outside
        outside = [r for r in rows if r["unit"] == "(outside)"]
        assert all(not r["collectives"] for r in outside), outside


@pytest.mark.distributed
def test_analysis_result_carries_the_rows_and_caches_them(profiled_ab_run, monkeypatch):
    arm = profiled_ab_run / "profiles" / "torch"
    res = analyze([arm], workers=1)
    d = res.record().to_dict()
    for r in d["ranks"]:
        rows = r["units"]
        assert rows and {"unit", "phase", "compute_us", "comm_us", "overlapped_us", "exposed_us"} <= set(
            rows[0]
        )
        assert sum(x["comm_us"] for x in rows) == pytest.approx(r["comm_us"], abs=1e-6)
    monkeypatch.delenv("FSDPBENCH_NO_CACHE")
    first = analyze([arm], workers=1).record().to_dict()
    again = analyze([arm], workers=1).record().to_dict()  # from the result cache
    assert [r["units"] for r in again["ranks"]] == [r["units"] for r in first["ranks"]]


@pytest.mark.distributed
def test_analyze_units_prints_the_unit_phase_table(profiled_ab_run):
    from helpers import run_cli

    arm = profiled_ab_run / "profiles" / "torch"
    proc = run_cli("analyze", str(arm), "--units", "--top", "1", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    title = "Units × phases (rank {}; from fsdpbench ranges)"
    assert title.format(0) in out and title.format(1) in out
    units_table = out[out.index(title.format(0)) :]
    cells = [[c.strip() for c in ln.split("│")[1:3]] for ln in units_table.splitlines()]
    lines = [
        ln for ln, c in zip(units_table.splitlines(), cells, strict=True) if c == ["layers.2", "backward"]
    ]
    assert lines and "reduce_scatter×1" in lines[0]


def test_analyze_units_says_which_ranks_have_no_rows(tmp_path):
    """A trace with neither fsdpbench's nor FSDP2's ranges (the hand trace without them) has no rows: said,
    not a table."""
    from helpers import run_cli

    events = orjson.loads(hand_trace(tmp_path / "t.json").read_bytes())["traceEvents"]
    events = [e for e in events if not e["name"].startswith(("fsdpbench::", "FSDP::"))]
    (tmp_path / "rank0.json").write_bytes(orjson.dumps({"traceEvents": events}))
    proc = run_cli("analyze", str(tmp_path / "rank0.json"), "--units", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "Units × phases" not in proc.stdout
    assert "no unit × phase rows for rank(s) 0" in proc.stdout


def _kernel(name: str, ts: float, dur: float, stream: int, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "correlation": corr},
    }


def _launch(ts: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": MAIN,
        "ts": ts,
        "dur": 0.5,
        "args": {"correlation": corr},
    }


def test_device_kernels_are_placed_by_their_launching_runtime_call(tmp_path):
    """A CUDA-style trace: kernels run after (and past the end of) the range that launched them; each
    counts where its cudaLaunchKernel (joined by correlation id) was called."""
    events = [
        _range("ProfilerStep#3", 0.0, 100.0),
        _range("fsdpbench::forward::layers.0", 0.0, 30.0),
        _range("fsdpbench::backward::root", 40.0, 50.0),
        _range("fsdpbench::backward::layers.0", 45.0, 25.0),
        _launch(2.0, 1),
        _launch(5.0, 2),
        _launch(35.0, 6),  # in the gap between ranges
        _launch(50.0, 3),
        _launch(60.0, 4),
        _launch(85.0, 5),  # the root's backward, after the layer's closed
        _kernel("ncclDevKernel_AllGather_RING_LL", 10.0, 30.0, 20, 1),
        _kernel("gemm", 12.0, 13.0, 7, 2),
        _kernel("gemm", 36.0, 2.0, 7, 6),
        _kernel("gemm", 55.0, 25.0, 7, 3),
        _kernel("ncclDevKernel_ReduceScatter_RING_LL", 62.0, 33.0, 20, 4),
        _kernel("gemm", 88.0, 11.0, 7, 5),
    ]
    (tmp_path / "t.json").write_bytes(orjson.dumps({"traceEvents": events}))
    trace = read_kineto(tmp_path / "t.json")
    assert trace.mode == "device"
    rows = {(r["unit"], r["phase"]): r for r in attribution.unit_phase_rows(trace.table, trace.mode)}
    # by hand: compute [12,25) | [36,38) | [55,80) | [88,99); comm [10,40) | [62,95);
    # overlapped: [10,40) ∩ C = [12,25)+[36,38) = 15; [62,95) ∩ C = [62,80)+[88,95) = 25
    want = {
        ("layers.0", "forward"): (13.0, 30.0, 15.0, 15.0, {"all_gather": 1}),
        ("(outside)", "(outside)"): (2.0, 0.0, 0.0, 0.0, {}),
        ("layers.0", "backward"): (25.0, 33.0, 25.0, 8.0, {"reduce_scatter": 1}),
        ("root", "backward"): (11.0, 0.0, 0.0, 0.0, {}),
    }
    assert set(rows) == set(want)
    for key, (comp, comm, over, exp, colls) in want.items():
        r = rows[key]
        got = (r["compute_us"], r["comm_us"], r["overlapped_us"], r["exposed_us"])
        assert got == pytest.approx((comp, comm, over, exp), abs=1e-9), key
        assert {t: c["count"] for t, c in r["collectives"].items()} == colls
        assert r["fsdp_internals"] is None
    m = rank_metrics(trace)
    assert (m.compute_us, m.comm_us, m.overlapped_us) == pytest.approx((51.0, 63.0, 40.0))
    assert m.units is not None and len(m.units) == 4


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 15), st.booleans(), st.integers(0, 2)), max_size=14)
)
def test_partition_matches_a_point_by_point_count(events):
    """Per bucket, by brute force over integer instants: compute/comm = instants whose first-started
    event of that category is in the bucket; overlapped = its comm instants where any compute runs."""
    start = np.array([e[0] for e in events], dtype=np.int64)
    end = start + np.array([e[1] for e in events], dtype=np.int64)
    is_comm = np.array([e[2] for e in events], dtype=bool)
    bucket = np.array([e[3] for e in events], dtype=np.int64)
    got = attribution.partition(start, end, is_comm, bucket, 3)
    want = {k: [0, 0, 0] for k in ("compute_ns", "comm_ns", "overlapped_ns")}
    order = sorted(range(len(events)), key=lambda i: (start[i], i))
    for t in range(0, 70):
        comp_owner = next((i for i in order if not is_comm[i] and start[i] <= t < end[i]), None)
        comm_owner = next((i for i in order if is_comm[i] and start[i] <= t < end[i]), None)
        if comp_owner is not None:
            want["compute_ns"][bucket[comp_owner]] += 1
        if comm_owner is not None:
            want["comm_ns"][bucket[comm_owner]] += 1
            if comp_owner is not None:
                want["overlapped_ns"][bucket[comm_owner]] += 1
    for k, v in want.items():
        assert got[k].tolist() == v, k
    assert (got["exposed_ns"] == got["comm_ns"] - got["overlapped_ns"]).all()

"""The memory timeline of the memory-recording step: peak, its (phase, unit) and what makes it up."""

from __future__ import annotations

import gzip

import orjson
import pytest

from fsdpbench.analysis.rank.memory_timeline import step_timeline, where
from fsdpbench.errors import InputError
from fsdpbench.results import run_folder


def _range(name: str, start: float, end: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": start, "dur": end - start}


def _mem(ts: float, nbytes: int, addr: int) -> dict:
    return {
        "ph": "i",
        "name": "[memory]",
        "ts": ts,
        "args": {"Device Type": 0, "Bytes": nbytes, "Addr": addr},
    }


HAND_TRACE = [
    _range("fsdpbench::forward::root", 5, 40),
    _range("fsdpbench::forward::layers.0", 10, 20),
    _range("fsdpbench::c10d::all_gather_into_tensor::group=0::index=0", 12, 14),
    _range("fsdpbench::backward::root", 50, 100),
    _range("fsdpbench::backward::layers.0", 60, 80),
    _range("fsdpbench::optimizer", 110, 120),
    _range("aten::mm", 61, 70),  # not fsdpbench's: ignored
    _mem(6, 100, 1),  # forward of root
    _mem(13, 50, 2),  # inside the all-gather: a communication buffer, freed after the peak
    _mem(15, 200, 3),  # forward of layers.0
    _mem(30, 300, 4),  # forward of root
    _mem(65, 400, 5),  # backward of layers.0: the peak
    _mem(70, -300, 4),
    _mem(90, -50, 2),
    _mem(115, 10, 6),  # optimizer
    {"ph": "i", "name": "[memory]", "ts": 66, "args": {"Device Type": 1, "Bytes": 10**9, "Addr": 9}},
]
LIVE = {"parameters": 1000, "gradients": 0, "optimizer_states": 2000, "batch": 8}


def test_hand_built_trace_peak_phase_unit_and_categories():
    tl = step_timeline(HAND_TRACE, LIVE)
    peak = tl["peak"]
    # by hand: 3008 live + 100 + 50 + 200 + 300 + 400 at t = 65 µs, 60 µs after the first range opens
    assert peak["bytes"] == 3008 + 1050
    assert peak["t_us"] == 60
    assert (peak["phase"], peak["unit"], peak["collective"]) == ("backward", "layers.0", None)
    assert where(peak) == "backward of layers.0"
    assert peak["live_at_start_bytes"] == 3008 and peak["in_step_bytes"] == 1050
    assert peak["in_step_by_category"] == {
        "forward_allocations": 600,
        "backward_allocations": 400,
        "optimizer_allocations": 0,
        "communication_buffers": 50,
        "outside_ranges": 0,
    }
    assert {(r["phase"], r["unit"]): r["bytes"] for r in peak["in_step_by_range"]} == {
        ("forward", "root"): 400,
        ("forward", "layers.0"): 250,
        ("backward", "layers.0"): 400,
    }
    assert tl["end_bytes"] == 3008 + 1050 - 350 + 10
    assert tl["allocated_bytes"] == [3108, 3158, 3358, 3658, 4058, 3758, 3708, 3718]
    assert [r["start_us"] for r in tl["ranges"]] == [0, 5, 45, 55, 105]


def test_peak_inside_a_collective_and_no_events():
    trace = [*HAND_TRACE[:3], _mem(13, 5000, 7)]
    peak = step_timeline(trace, {"parameters": 1})["peak"]
    assert (peak["phase"], peak["unit"]) == ("forward", "layers.0")
    assert peak["collective"].startswith("fsdpbench::c10d::all_gather_into_tensor")
    assert peak["in_step_by_category"]["communication_buffers"] == 5000
    with pytest.raises(InputError, match="profile_memory=True"):
        step_timeline(HAND_TRACE[:6], LIVE)


def test_an_address_reused_before_its_free_is_listed():
    """Two threads at one µs: block B takes address 1 before the free of block A at 1 is listed."""
    trace = [
        HAND_TRACE[1],
        _mem(11, 100, 1),  # A
        _mem(12, 70, 1),  # B, same address, listed before A's free
        _mem(12, -100, 1),  # A's free
        _mem(13, 200, 2),  # the peak: 3008 + 270
    ]
    peak = step_timeline(trace, LIVE)["peak"]
    # by hand: B (70) and the 200 bytes are live at the peak, all made in the forward of layers.0
    assert peak["in_step_bytes"] == 270
    assert peak["in_step_by_category"]["forward_allocations"] == 270
    assert peak["unmatched_free_bytes"] == 0


@pytest.mark.distributed
def test_profiled_run_records_the_memory_step_with_its_ranges(profiled_ab_run):
    summary = orjson.loads((profiled_ab_run / run_folder.SUMMARY).read_bytes())
    manifest = orjson.loads((profiled_ab_run / run_folder.MANIFEST).read_bytes())
    cfg, world = manifest["config"], manifest["environment"]["world_size"]
    for arm, stats in summary["arms"].items():
        tl = stats["memory_timeline"]
        trace, live = run_folder.memory_step_files(profiled_ab_run, arm, 0)
        events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        live_bytes = sum(orjson.loads(live.read_bytes())["live_at_start_bytes"].values())
        # independent: the raw CPU [memory] events summed here, and the profiler's ranges read here
        mem = sorted(
            (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
            key=lambda e: e["ts"],
        )
        running, best, best_ts = 0, 0, None
        for e in mem:
            running += e["args"]["Bytes"]
            if running > best:
                best, best_ts = running, e["ts"]
        assert tl["peak"]["bytes"] == live_bytes + best
        names = {e["name"] for e in events if e.get("ph") == "X"}
        assert {
            "fsdpbench::forward::layers.0",
            "fsdpbench::backward::layers.0",
            "fsdpbench::optimizer",
        } <= names
        holding = [
            e
            for e in events
            if e.get("ph") == "X"
            and e["name"].startswith(("fsdpbench::forward", "fsdpbench::backward", "fsdpbench::optimizer"))
            and e["ts"] <= best_ts <= e["ts"] + e["dur"]
        ]
        inner = min(holding, key=lambda e: e["dur"])["name"].split("::")
        assert (tl["peak"]["phase"], tl["peak"]["unit"] or None) == (
            inner[1],
            inner[2] if len(inner) > 2 else None,
        )
        # the sharded parameters and the prepared batch are live at the start; the rank's batch is a view of
        # the step's global batch (int64 ids, world x batch_size x seq_len), whose storage stays live
        cats = tl["live_at_start_bytes"]
        assert cats["parameters"] > 0
        assert cats["batch"] == 8 * cfg["batch_size"] * cfg["seq_len"] * world
        assert (
            tl["peak"]["in_step_bytes"]
            == sum(tl["peak"]["in_step_by_category"].values()) - (tl["peak"]["unmatched_free_bytes"])
        )


def test_diff_and_finding_name_where_the_peaks_differ():
    """Two hand-built timelines: the test arm's backward of layers.0 holds 1000 bytes more at the peak."""
    from fsdpbench.analysis.compare.diff import diff_analyses
    from fsdpbench.report.diff_md import diff_markdown, memory_lines
    from helpers import analysis

    base = step_timeline(HAND_TRACE, LIVE)
    test_trace = [*HAND_TRACE[:11], _mem(65, 1400, 5), *HAND_TRACE[12:]]
    test = step_timeline(test_trace, LIVE)
    assert test["peak"]["bytes"] - base["peak"]["bytes"] == 1000  # by hand: 1400 − 400
    context = {
        "peak_memory": {"a": [base["peak"]["bytes"], "m"], "b": [test["peak"]["bytes"], "m"]},
        "memory_timeline": {"a": base, "b": test},
    }
    result = diff_analyses(analysis(), analysis(), base_label="a", test_label="b", context=context)
    d = result.to_dict()["memory_timeline"]["difference"]
    assert d["delta_bytes"] == 1000 and d["same_place"]
    assert d["range"] == {"phase": "backward", "unit": "layers.0"} and d["range_delta_bytes"] == 1000
    assert d["category"] == "backward_allocations" and d["category_delta_bytes"] == 1000
    f = result.finding("peak_memory")  # 5058 / 4058: beyond 5%
    assert f is not None and "both peak in backward of layers.0" in f.cause
    assert "what backward of layers.0 allocated" in f.cause
    lines = memory_lines(result)
    assert lines[1].startswith("  a: peak 3.96 KiB in backward of layers.0")
    assert "Δ peak +1000 B" in lines[3]
    assert "both peak in backward of layers.0" in diff_markdown(result)
    # without timelines the finding says so
    del context["memory_timeline"]
    f = diff_analyses(analysis(), analysis(), base_label="a", test_label="b", context=context).finding(
        "peak_memory"
    )
    assert "no memory timeline" in f.cause


def test_report_draws_one_memory_figure_per_arm(tmp_path):
    from fsdpbench.report.blocks import Figure
    from fsdpbench.report.load import RunData
    from fsdpbench.report.profile import _memory_timeline
    from fsdpbench.results.summary import Summary

    tl = step_timeline(HAND_TRACE, LIVE)
    summary = Summary.from_dict({"arms": {"a": {"memory_timeline": tl}, "b": {"memory_timeline": None}}})
    data = RunData(tmp_path, summary=summary)
    figs = [b for b in _memory_timeline(data, ["a", "b"]) if isinstance(b, Figure)]
    assert len(figs) == 1
    assert "backward of layers.0" in figs[0].svg and "a — memory step, rank 0" in figs[0].svg
    assert "Peak 3.96 KiB in backward of layers.0" in figs[0].caption

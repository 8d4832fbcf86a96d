"""Units × phases on profiles fsdpbench did not write (issue 30): windows from FSDP2's own ranges.

Hand-built traces check the window rules (pairing, root, ``[pg=…]``, grouped FQNs, threads,
microbatches); a plain FSDP2 script's real profiles (``plain_fsdp2_profiles``, one 2-rank launch) check
the per-unit rows against a plain-Python reading of the same raw JSON, and the diff of two of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis.rank import unit_ranges
from fsdpbench.trace.kineto import read_kineto
from helpers import (
    raw_cpu_totals,
    raw_ns,
    raw_outermost,
    raw_training_ops,
    raw_x_events,
    run_cli,
    run_profiled_ab,
)

MAIN, AUTOGRAD = 100, 300
BLOCKS = ("blocks.0", "blocks.1", "blocks.2")


def _x(name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _windows(path: Path) -> set[tuple[str, str, float, float]]:
    t = read_kineto(path).table
    r = unit_ranges.find_ranges(t)
    assert r.source == unit_ranges.SOURCE_FSDP2
    lanes = [str(c) for c in t.lane.categories]
    return {
        (u, p, s / 1000.0, e / 1000.0, lanes[lane])
        for u, p, s, e, lane in zip(
            r.unit, r.phase, r.start_ns.tolist(), r.end_ns.tolist(), r.lane.tolist(), strict=True
        )
    }


def test_fsdp2_windows_follow_the_hook_ranges(tmp_path):
    """Forward: root_pre_forward … root's post_forward; a grouped unit ("a, b") with two parameter
    groups ([pg=…]) is one window; backward on another thread, from pre_backward to the last
    post_backward_* (the root's rs_wait writes "()"); a second microbatch opens a second window."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": AUTOGRAD, "args": {"name": "autograd"}},
        _x("FSDP::root_pre_forward", 0.0, 1.0),
        _x("FSDP::pre_forward", 1.0, 2.0),
        _x("FSDP::pre_forward (a, b) [pg=2]", 4.0, 1.0),
        _x("FSDP::pre_forward (a, b) [pg=4]", 5.0, 1.0),
        _x("FSDP::post_forward (a, b) [pg=2]", 10.0, 1.0),
        _x("FSDP::post_forward (a, b) [pg=4]", 11.0, 2.0),
        _x("FSDP::post_forward", 14.0, 1.0),
        _x("FSDP::pre_backward", 20.0, 1.0, tid=AUTOGRAD),
        _x("FSDP::backward_prefetch for a, b", 20.2, 0.5, tid=AUTOGRAD),
        _x("FSDP::pre_backward (a, b) [pg=2]", 22.0, 1.0, tid=AUTOGRAD),
        _x("FSDP::post_backward_accumulate (a, b) [pg=2]", 30.0, 1.0, tid=AUTOGRAD),
        _x("FSDP::post_backward_reduce (a, b) [pg=2]", 31.0, 3.0, tid=AUTOGRAD),
        _x("FSDP::root_post_backward_callback", 40.0, 5.0, tid=AUTOGRAD),
        _x("FSDP::post_backward_rs_wait ()", 41.0, 1.0, tid=AUTOGRAD),
        _x("FSDP::post_backward_reduce", 42.0, 2.5, tid=AUTOGRAD),
        _x("Optimizer.step#AdamW.step", 50.0, 5.0),
        # a second microbatch of the grouped unit's forward: its own window
        _x("FSDP::pre_forward (a, b) [pg=2]", 60.0, 1.0),
        _x("FSDP::post_forward (a, b) [pg=2]", 63.0, 1.0),
        _x("aten::mm", 6.0, 3.0, cat="cpu_op"),
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    assert _windows(path) == {
        ("root", "forward", 0.0, 15.0, "python"),
        ("a, b", "forward", 4.0, 13.0, "python"),
        ("a, b", "forward", 60.0, 64.0, "python"),
        ("root", "backward", 20.0, 45.0, "autograd"),
        ("a, b", "backward", 22.0, 34.0, "autograd"),
        ("(all)", "optimizer", 50.0, 55.0, "python"),
    }


def test_fsdpbench_ranges_win_over_fsdp2s(tmp_path):
    events = [
        _x("fsdpbench::forward::layers.0", 0.0, 10.0),
        _x("FSDP::pre_forward (model.layers.0)", 1.0, 1.0),
        _x("FSDP::post_forward (model.layers.0)", 8.0, 1.0),
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    r = unit_ranges.find_ranges(read_kineto(path).table)
    assert (r.source, r.unit, r.phase) == (unit_ranges.SOURCE_OWN, ["layers.0"], ["forward"])


# ---------------------------------------------------------------- the plain FSDP2 script's profiles


def _raw_window(evs: list[dict], fqn: str, phase: str) -> tuple[int, int]:
    """[start, end) ns of FSDP2's window of module ``fqn`` in ``phase``, by the test's own reading of the
    raw events (one step, one microbatch): forward [pre_forward start, post_forward end), backward
    [pre_backward start, last post_backward_* end)."""

    def first(hook: str) -> tuple[int, int]:
        return next(raw_ns(e) for e in evs if e["name"] == f"FSDP::{hook} ({fqn})")

    if phase == "forward":
        return first("pre_forward")[0], first("post_forward")[1]
    post = [
        raw_ns(e)[1]
        for e in evs
        if e["name"].startswith("FSDP::post_backward_") and e["name"].endswith(f"({fqn})")
    ]
    return first("pre_backward")[0], max(post)


def _raw_fsdp2(evs: list[dict]) -> tuple[dict[tuple[str, str], tuple[int, int]], list[tuple[str, str, str]]]:
    """From the raw JSON's events: each block's forward and backward window (``_raw_window``) and the
    backward prefetch edges (issuing block or root, pass, target)."""
    win = {(b, p): _raw_window(evs, b, p) for b in BLOCKS for p in ("forward", "backward")}
    edges = []
    for e in sorted(
        (e for e in evs if e["name"].startswith("FSDP::backward_prefetch for ")), key=lambda e: e["ts"]
    ):
        s = raw_ns(e)[0]
        issuer = next((b for (b, p), (a, z) in win.items() if p == "backward" and a <= s < z), "root")
        edges.append((issuer, "backward", e["name"].rsplit(" ", 1)[1]))
    return win, edges


@pytest.mark.distributed
@pytest.mark.parametrize("arm", ["raf_true", "raf_false"])
def test_a_plain_fsdp2_script_profile_gives_rows_for_every_block_on_every_rank(plain_fsdp2_profiles, arm):
    """issue 30 "Done when": per-unit rows naming each block, forward and backward, on every rank, the
    source named, compute summing to the rank's compute (within 1 %; here to the ns); each block's
    compute equal to the raw trace's operators inside its FSDP2 window, an all-gather in a block's
    backward exactly where the raw trace has an ``FSDP::all_gather`` range inside that window (with
    resharding after forward only), and the prefetch chain."""
    folder = plain_fsdp2_profiles / arm
    proc = run_cli("analyze", str(folder), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(proc.stdout)["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        path = folder / f"rank{r['rank']}.pt.trace.json"
        assert r["units_source"] == "FSDP2 ranges"
        rows = {(u["unit"], u["phase"]): u for u in r["units"]}
        evs = raw_x_events(path)
        windows, edges = _raw_fsdp2(evs)
        gathers = [raw_ns(e)[0] for e in evs if e["name"].startswith("FSDP::all_gather (")]
        for (block, phase), window in windows.items():
            assert (block, phase) in rows, (path, block, phase)
            expected = _ops_in(evs, window)
            assert round(rows[(block, phase)]["compute_us"] * 1000) == expected, (path, block, phase)
            if phase == "backward":
                gathered = any(window[0] <= s < window[1] for s in gathers)
                assert ("all_gather" in rows[(block, phase)]["collectives"]) == gathered, (path, block)
        if arm == "raf_true":
            assert "all_gather" in rows[("blocks.1", "backward")]["collectives"]  # re-gathered
        assert {("root", "forward"), ("root", "backward"), ("(all)", "optimizer")} <= set(rows)
        total = sum(u["compute_us"] for u in r["units"])
        assert total == pytest.approx(r["compute_us"], rel=0.01)
        assert round(total * 1000) == raw_cpu_totals(path)["compute"]
        assert [(e["unit"], e["pass"], e["target"]) for e in r["prefetch"]] == edges
        assert len(edges) == 3  # root → blocks.2 → blocks.1 → blocks.0


@pytest.mark.distributed
def test_analyze_units_names_the_source_and_the_prefetch_chain(plain_fsdp2_profiles):
    proc = run_cli("analyze", str(plain_fsdp2_profiles / "raf_false"), "--units", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "Units × phases (rank 1; from FSDP2 ranges)" in proc.stdout
    assert (
        "prefetch chain (rank 0): forward: none; backward: root→blocks.2, blocks.2→blocks.1, blocks.1→blocks.0"
        in proc.stdout
    )


@pytest.mark.distributed
def test_diff_of_two_plain_fsdp2_profiles_names_places(plain_fsdp2_profiles, tmp_path):
    """reshard_after_forward True vs False: both sides have units from FSDP2's ranges, so the diff
    compares every block's forward and backward, and diff.md lists the places."""
    base, test = plain_fsdp2_profiles / "raf_true", plain_fsdp2_profiles / "raf_false"
    out = tmp_path / "diff.json"
    proc = run_cli("diff", str(base), str(test), "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    places = {(p["unit"], p["phase"]): p for p in orjson.loads(out.read_bytes())["places"]}
    for block in BLOCKS:
        for phase in ("forward", "backward"):
            p = places[(block, phase)]
            assert p["base"] is not None and p["test"] is not None, (block, phase)
            assert p["delta"]["exposed_us"] is not None
    md = tmp_path / "diff.md"
    proc = run_cli("diff", str(base), str(test), "--md", str(md), "--quiet")
    assert proc.returncode == 0, proc.stderr
    where = md.read_text().split("### Where: units × phases", 1)[1].split("###", 1)[0]
    assert any(line.startswith("- blocks.") for line in where.splitlines()), where


# ---------------------------------------------------------------- the two sources agree (issue 30 point 5)


def _ops_in(evs: list[dict], window: tuple[int, int]) -> int:
    """ns of the training thread's outermost operators (raw_cpu_totals' rules) starting in ``window``."""
    return sum(e - s for s, e in raw_outermost(raw_training_ops(evs)) if window[0] <= s < window[1])


def _profiles(run: Path, arm: str) -> list[Path]:
    return sorted(p for p in (run / "profiles" / arm).rglob("*.json*") if not p.name.startswith("."))


@pytest.mark.distributed
def test_fsdp2_and_own_ranges_agree_within_their_edges(profiled_ab_run):
    """On one trace of a normal profiled run (both sources in it), per decoder layer and pass: the same
    collectives, and the compute differs by exactly the operators that start between the two windows'
    edges (fsdpbench's range opens before FSDP2's hook and closes after it), read from the raw JSON."""
    from fsdpbench.analysis.rank import attribution

    for path in _profiles(profiled_ab_run, "torch"):
        evs = raw_x_events(path)
        trace = read_kineto(path)
        own = {(r["unit"], r["phase"]): r for r in attribution.unit_phase_rows(trace.table, trace.mode)}
        ranges = unit_ranges.fsdp2_ranges(trace.table)
        assert ranges.source == unit_ranges.SOURCE_FSDP2
        lib = {
            (r["unit"], r["phase"]): r
            for r in attribution.unit_phase_rows(trace.table, trace.mode, None, ranges)
        }
        # the prefetch edges name both ends in the source's names: fsdpbench's ("layers.2") or FSDP2's FQNs
        own_edges = attribution.prefetches(trace.table, unit_ranges.find_ranges(trace.table))
        lib_edges = attribution.prefetches(trace.table, ranges)
        assert own_edges and {e["unit"] for e in own_edges} | {e["target"] for e in own_edges} <= {
            u for u, _ in own
        }
        assert [e["target"] for e in lib_edges] == [
            next(u for u, _ in lib if u.endswith("." + e["target"])) if e["target"] != "root" else "root"
            for e in own_edges
        ]
        layers = sorted({u for u, _ in own if u.startswith("layers.")})
        assert len(layers) >= 2, own.keys()
        for layer in layers:
            fqn = next(u for u, _ in lib if u.endswith("." + layer))
            for phase in ("forward", "backward"):
                a, b = own[(layer, phase)], lib[(fqn, phase)]
                counts = {k: v["count"] for k, v in a["collectives"].items()}
                assert counts == {k: v["count"] for k, v in b["collectives"].items()}, (path, layer, phase)
                mine = next(raw_ns(e) for e in evs if e["name"] == f"fsdpbench::{phase}::{layer}")
                theirs = _raw_window(evs, fqn, phase)
                assert mine[0] <= theirs[0] and theirs[1] <= mine[1], (
                    path,
                    layer,
                    phase,
                )  # own ranges hold FSDP2's
                edges = _ops_in(evs, (mine[0], theirs[0])) + _ops_in(evs, (theirs[1], mine[1]))
                diff = round(a["compute_us"] * 1000) - round(b["compute_us"] * 1000)
                assert diff == edges, (path, layer, phase)


@pytest.fixture(scope="module")
def no_ranges_run(tmp_path_factory) -> Path:
    """A profiled run of the torch arm (FSDP2) with ``--no-ranges`` (one launch of ~20 s)."""
    return run_profiled_ab(tmp_path_factory.mktemp("no_ranges"), "torch", "noranges", 400, "--no-ranges")


@pytest.mark.distributed
def test_no_ranges_leaves_fsdpbenchs_ranges_out_and_fsdp2s_give_the_same_units(
    no_ranges_run, profiled_ab_run
):
    """``--no-ranges``: the profiled step holds no ``fsdpbench::`` range (raw JSON); its units come from
    FSDP2's ranges, one per decoder layer and the root (FSDP2's FQNs end in fsdpbench's unit names), with
    per place the same collectives as the own-range attribution of a normal run of the same arm."""
    from fsdpbench.analysis import analyze

    paths = _profiles(no_ranges_run, "torch")
    assert len(paths) == 2
    for path in paths:
        assert not any(e["name"].startswith("fsdpbench::") for e in raw_x_events(path)), path
    foreign = analyze([no_ranges_run / "profiles" / "torch"], workers=1).record().to_dict()["ranks"]
    normal = analyze([profiled_ab_run / "profiles" / "torch"], workers=1).record().to_dict()["ranks"]
    for a, b in zip(normal, foreign, strict=True):
        assert (a["units_source"], b["units_source"]) == ("fsdpbench ranges", "FSDP2 ranges")

        def counts(rows: list[dict]) -> dict[tuple[str, str], dict[str, int]]:
            out = {}
            for r in rows:
                unit = r["unit"].rsplit("model.", 1)[-1]  # FSDP2's FQN "model.layers.0" ↔ "layers.0"
                out[(unit, r["phase"])] = {k: v["count"] for k, v in r["collectives"].items()}
            return {k: v for k, v in out.items() if v}

        assert counts(a["units"]) == counts(b["units"])
        assert {r["unit"] for r in b["units"]} >= {"root", "model.layers.0", "(all)"}


# ---------------------------------------------------------------- diff when the unit names differ (point 4)


def _analysis(units: dict[tuple[str, str], float]) -> dict:
    rows = [
        {"unit": u, "phase": p, "compute_us": 10.0, "comm_us": e, "overlapped_us": 0.0, "exposed_us": e}
        for (u, p), e in units.items()
    ]
    return {"ranks": [{"rank": 0, "units": rows}]}


def test_places_match_the_units_both_arms_name_and_list_the_rest():
    """Base wraps blocks.0/blocks.1, test names blocks.1 and a grouped "blocks.0, blocks.2": blocks.1 and the
    root are compared (hand deltas), the rest has no delta and is listed; a place of a shared unit that
    one arm lacks counts as 0 there; the JSON round trip keeps it so."""
    from fsdpbench.analysis.findings import places as plc

    base = _analysis({("blocks.0", "forward"): 5.0, ("blocks.1", "forward"): 7.0, ("root", "backward"): 3.0})
    test = _analysis(
        {("blocks.0, blocks.2", "forward"): 4.0, ("blocks.1", "forward"): 2.0, ("blocks.1", "backward"): 1.0}
        | {("root", "backward"): 9.0}
    )
    rows = plc.compare_places(base, test)
    delta = {(r.unit, r.phase): r.delta("exposed_us") for r in rows}
    assert delta == {
        ("blocks.0, blocks.2", "forward"): None,
        ("blocks.1", "forward"): -5.0,
        ("blocks.1", "backward"): 1.0,  # base ran blocks.1, nothing in its backward: 0 there
        ("root", "backward"): 6.0,
        ("blocks.0", "forward"): None,
    }
    assert plc.unmatched_units(rows) == (["blocks.0"], ["blocks.0, blocks.2"])
    again = plc.mark_compared([plc.PlaceRow.from_dict(r.to_dict()) for r in rows])  # as diff.json reads them
    assert {(r.unit, r.phase): r.delta("exposed_us") for r in again} == delta
    assert [r.unit for r in plc.by_exposed_delta(rows)] == ["root", "blocks.1", "blocks.1"]


def test_the_report_names_the_source_of_units_and_the_prefetch_chain():
    from fsdpbench.report.blocks import Para
    from fsdpbench.report.places import places_section

    data = _analysis({("blocks.0", "forward"): 5.0, ("blocks.1", "forward"): 7.0})
    data["ranks"][0]["units_source"] = "FSDP2 ranges"
    data["ranks"][0]["prefetch"] = [
        {"pass": "forward", "unit": "blocks.0", "target": "blocks.1", "start_us": 1.0},
        {"pass": "backward", "unit": "root", "target": "blocks.1", "start_us": 9.0},
    ]
    paras = [b.text for b in places_section({"x": data}, ["x"]) if isinstance(b, Para)]
    assert (
        "Units from FSDP2 ranges; prefetch chain (rank 0): forward: blocks.0→blocks.1; backward: root→blocks.1."
        in paras
    )


def test_device_side_projections_of_fsdp2_ranges_are_not_windows(tmp_path):
    """A CUDA-style trace: FSDP2's ranges on the host thread, and their gpu_user_annotation projections on
    the stream (labels, never windows): one window, one prefetch edge, the kernels in layers.0's forward."""
    from fsdpbench.analysis.rank import attribution

    def launch(ts: float, corr: int) -> dict:
        return {**_x("cudaLaunchKernel", ts, 0.5, cat="cuda_runtime"), "args": {"correlation": corr}}

    def kernel(name: str, ts: float, stream: int, corr: int) -> dict:
        return {**_x(name, ts, 5.0, tid=stream, cat="kernel"), "pid": 0, "args": {"correlation": corr}}

    def projection(name: str, ts: float) -> dict:
        return {**_x(name, ts, 5.0, tid=7, cat="gpu_user_annotation"), "pid": 0}

    events = [
        _x("ProfilerStep#1", 0.0, 100.0),
        _x("FSDP::pre_forward (layers.0)", 1.0, 5.0),
        _x("FSDP::forward_prefetch for layers.1", 2.0, 2.0),
        launch(2.5, 1),
        launch(8.0, 2),
        _x("FSDP::post_forward (layers.0)", 10.0, 2.0),
        kernel("ncclDevKernel_AllGather_RING_LL(x)", 20.0, 7, 1),
        kernel("gemm", 30.0, 8, 2),
        projection("FSDP::pre_forward (layers.0)", 20.0),
        projection("FSDP::forward_prefetch for layers.1", 20.0),
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    t = read_kineto(path).table
    r = unit_ranges.find_ranges(t)
    assert (r.unit, r.start_ns.tolist(), r.end_ns.tolist()) == (["layers.0"], [1000], [12000])
    assert [(e["unit"], e["target"]) for e in attribution.prefetches(t, r)] == [("layers.0", "layers.1")]
    rows = attribution.unit_phase_rows(t, "device", None, r)
    assert [(x["unit"], x["compute_us"], x["comm_us"]) for x in rows] == [("layers.0", 5.0, 5.0)]

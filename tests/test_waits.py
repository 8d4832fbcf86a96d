"""Waiting vs transferring (analysis/crossrank/waits.py) against hand-computed references."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.crossrank.waits import wait_transfer

OFFSET_NS = 100_000  # rank 1's clock runs this far ahead


def _cols(rows: list[tuple[str, float, int, int, int]], offset: int = 0) -> dict[str, Any]:
    """(type, bytes, seq, start, end) rows as collective_events columns, group "0"."""
    return {
        "type": [r[0] for r in rows],
        "bytes": [r[1] for r in rows],
        "seq": [r[2] for r in rows],
        "group": ["0"] * len(rows),
        "start_ns": [r[3] + offset for r in rows],
        "end_ns": [r[4] + offset for r in rows],
    }


def test_hand_computed_wait_transfer_offsets_exposure_and_bus_bandwidth():
    # rank 0 reaches the all-gather 2000 ns and the reduce-scatter 500 ns before rank 1
    r0 = _cols([("all_gather", 4000.0, 0, 1000, 5000), ("reduce_scatter", 3000.0, 1, 6000, 8000)])
    r1 = _cols([("all_gather", 4000.0, 0, 3000, 5000), ("reduce_scatter", 3000.0, 1, 6500, 8000)], OFFSET_NS)
    # rank 0 computes during [1000, 2000) and [7000, 8000): exposed = [2000, 5000) ∪ [6000, 7000)
    exposed0 = (np.array([2000, 6000]), np.array([5000, 7000]))
    exposed1 = (np.array([3000, 6500]) + OFFSET_NS, np.array([5000, 8000]) + OFFSET_NS)
    out, warnings = wait_transfer([0, 1], [r0, r1], [exposed0, exposed1])
    assert warnings == []
    assert out["match"] == "group_seq" and out["instances"] == 2
    rank0, rank1 = out["ranks"]
    assert rank0["clock_offset_us"] == 0.0 and rank1["clock_offset_us"] == OFFSET_NS / 1000
    # rank 0: waits 2000 + 500 ns, transfers 2000 + 1500 ns
    assert rank0["wait_us"] == pytest.approx(2.5) and rank0["transfer_us"] == pytest.approx(3.5)
    # exposed wait: [1000, 3000) ∪ [6000, 6500) ∩ exposed = 1000 + 500; transfer [3000, 5000) ∪ [6500, 8000)
    assert rank0["exposed_wait_us"] == pytest.approx(1.5) and rank0["exposed_transfer_us"] == pytest.approx(
        2.5
    )
    assert rank1["wait_us"] == 0.0 and rank1["transfer_us"] == pytest.approx(3.5)
    assert rank1["exposed_wait_us"] == 0.0 and rank1["exposed_transfer_us"] == pytest.approx(3.5)
    # nccl-tests: all_gather busbw = algbw (n-1)/n; 4000 B over 2000 ns = 2 GB/s
    bw = out["bandwidth"]
    assert bw["all_gather"]["algbw_gbps"] == pytest.approx(2.0) and bw["all_gather"][
        "busbw_gbps"
    ] == pytest.approx(1.0)
    assert bw["reduce_scatter"]["algbw_gbps"] == pytest.approx(2.0)
    top = out["top"][0]
    assert top["type"] == "all_gather" and top["wait_us"] == pytest.approx(2.0) and top["last_rank"] == 1
    skews = {r["rank"]: r["skew_us"] for r in top["per_rank"]}
    assert skews == {0: 0.0, 1: pytest.approx(2.0)}


def test_an_all_reduce_bus_bandwidth_is_twice_n_minus_one_over_n():
    r = [_cols([("all_reduce", 8000.0, 0, 0, 1000)], k * 10) for k in range(4)]
    out, _ = wait_transfer([0, 1, 2, 3], r)
    bw = out["bandwidth"]["all_reduce"]
    assert bw["algbw_gbps"] == pytest.approx(8.0) and bw["busbw_gbps"] == pytest.approx(8.0 * 2 * 3 / 4)


def test_without_identity_collectives_are_matched_by_order_and_it_says_so():
    r0 = {
        "type": ["all_gather", "all_gather"],
        "bytes": [1.0, 1.0],
        "start_ns": [0, 100],
        "end_ns": [50, 150],
    }
    r1 = {
        "type": ["all_gather", "all_gather"],
        "bytes": [1.0, 1.0],
        "start_ns": [30, 100],
        "end_ns": [50, 150],
    }
    out, _ = wait_transfer([0, 1], [r0, r1])
    assert out["match"] == "order" and "order" in out["match_text"]
    assert out["ranks"][0]["wait_us"] == pytest.approx(0.03)


# --------------------------------------------------------------------- a hand-built 2-rank gloo trace
def _gloo_rank(rank: int, shift_us: float, late_us: float, compute: tuple[float, float]) -> dict[str, Any]:
    """A gloo profiled step with fsdpbench's ranges: layers.0 forward holds an all-gather (index 0) that
    this rank reaches ``late_us`` after 1010 µs and that ends at 1051 µs on both ranks; layers.0 backward a
    reduce-scatter (index 1) both reach at 1111 µs. Every timestamp moved by ``shift_us``."""

    def x(name: str, ts: float, dur: float, tid: int = 100, cat: str = "user_annotation", **args: Any):
        ev = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts + shift_us, "dur": dur}
        return {**ev, "args": args} if args else ev

    ag = 1010.0 + late_us
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 200, "args": {"name": "thread 200 (pt_gloo)"}},
        x("ProfilerStep#3", 1000.0, 200.0),
        x("fsdpbench::forward::layers.0", 1000.0, 100.0),
        x("aten::mm", compute[0], compute[1], cat="cpu_op"),
        x("fsdpbench::c10d::all_gather::group=0::index=0", ag, 3.0),
        x("c10d::_allgather_base_", ag, 2.0, cat="cpu_op", **{"Input Dims": [[16], [8]], "Input type": ["float", "float"]}),
        x("gloo:all_gather", ag + 1, 1051.0 - ag - 1, tid=200),
        x("fsdpbench::backward::layers.0", 1100.0, 100.0),
        x("fsdpbench::c10d::reduce_scatter::group=0::index=1", 1110.0, 3.0),
        x("c10d::reduce_scatter_tensor", 1110.0, 2.0, cat="cpu_op", **{"Input Dims": [[8], [16]], "Input type": ["float", "float"]}),
        x("gloo:reduce_scatter", 1111.0, 10.0, tid=200),
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_a_hand_built_gloo_trace_matches_by_fsdpbench_ranges_and_puts_the_wait_in_its_unit(tmp_path):
    docs = [
        _gloo_rank(0, 0.0, 0.0, (1020.0, 10.0)),  # computes during part of its wait
        _gloo_rank(1, 50_000.0, 30.0, (1000.0, 35.0)),  # arrives 30 µs late; clock 50 ms ahead
    ]
    paths = []
    for r, doc in enumerate(docs):
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    res = analyze(paths, workers=1)
    w = res.record().to_dict()["waits"]
    assert w["match"] == "c10d_ranges"
    r0, r1 = w["ranks"]
    assert r1["clock_offset_us"] == pytest.approx(50_000.0)
    # rank 0: all-gather 1011–1051 waits until rank 1 arrives at 1041 (30 µs), moves 10; reduce-scatter 10
    assert r0["wait_us"] == pytest.approx(30.0) and r0["transfer_us"] == pytest.approx(20.0)
    # its compute [1020, 1030) hides 10 µs of the wait
    assert r0["exposed_wait_us"] == pytest.approx(20.0) and r0["exposed_transfer_us"] == pytest.approx(20.0)
    assert r1["wait_us"] == pytest.approx(0.0) and r1["transfer_us"] == pytest.approx(20.0)
    units = {(u["unit"], u["phase"]): u["ranks"] for u in w["units"]}
    assert units[("layers.0", "forward")]["0"]["wait_us"] == pytest.approx(30.0)
    assert units[("layers.0", "backward")]["0"]["wait_us"] == pytest.approx(0.0)
    assert units[("layers.0", "backward")]["0"]["transfer_us"] == pytest.approx(10.0)
    # each collective's transfer time for the α–β fits: rank 0's all-gather 40 µs long, 30 of it waiting
    assert res.ranks[0].collective_events["transfer_ns"].tolist() == [10_000, 10_000]
    assert res.ranks[1].collective_events["transfer_ns"].tolist() == [10_000, 10_000]


def _cuda_rank(rank: int, ag_start: float, rs_start: float) -> dict[str, Any]:
    """A CUDA-style profiled step (µs) with fsdpbench's ranges and no c10d marks or sequence numbers:
    layers.0's forward [0, 30) launches an all-gather at 2 (its kernel runs from ``ag_start`` to 40),
    layers.0's backward [45, 70) a reduce-scatter at 60 whose kernel starts at ``rs_start``, after the
    range has closed, inside the root's backward [40, 100), and ends at 95."""

    def launch(ts: float, corr: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 100, "ts": ts,
                "dur": 0.5, "args": {"correlation": corr}}  # fmt: skip

    def kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": ts, "dur": dur,
                "args": {"stream": 20, "correlation": corr}}  # fmt: skip

    def rng(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 100, "ts": ts, "dur": dur}

    ev = [
        rng("ProfilerStep#3", 0.0, 100.0),
        rng("fsdpbench::forward::layers.0", 0.0, 30.0),
        rng("fsdpbench::backward::root", 40.0, 60.0),
        rng("fsdpbench::backward::layers.0", 45.0, 25.0),
        launch(2.0, 1),
        launch(60.0, 2),
        kernel("ncclDevKernel_AllGather_RING_LL", ag_start, 40.0 - ag_start, 1),
        kernel("ncclDevKernel_ReduceScatter_RING_LL", rs_start, 95.0 - rs_start, 2),
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": ev}  # fmt: skip


def test_a_cuda_trace_gets_unit_and_phase_of_each_collective_from_its_launching_runtime_call(tmp_path):
    paths = []
    for r, (ag, rs) in enumerate([(10.0, 72.0), (25.0, 80.0)]):  # rank 1 arrives 15 and 8 µs later
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(_cuda_rank(r, ag, rs)))
        paths.append(p)
    res = analyze(paths, workers=1)
    w = res.record().to_dict()["waits"]
    assert w["match"] == "order"
    units = {(u["unit"], u["phase"]): u["ranks"] for u in w["units"]}
    # by hand: the reduce-scatter kernel starts (72, 80) after layers.0's backward closed at 70, but its
    # cudaLaunchKernel at 60 lies in it: the wait belongs to layers.0 backward, not to the root
    assert set(units) == {("layers.0", "forward"), ("layers.0", "backward")}
    fwd, bwd = units[("layers.0", "forward")], units[("layers.0", "backward")]
    assert fwd["0"]["wait_us"] == pytest.approx(15.0) and fwd["0"]["transfer_us"] == pytest.approx(15.0)
    assert fwd["1"]["wait_us"] == pytest.approx(0.0) and fwd["1"]["transfer_us"] == pytest.approx(15.0)
    assert bwd["0"]["wait_us"] == pytest.approx(8.0) and bwd["0"]["transfer_us"] == pytest.approx(15.0)
    assert bwd["1"]["exposed_transfer_us"] == pytest.approx(15.0)  # no compute: all of it exposed
    (top,) = [t for t in w["top"] if t["type"] == "reduce_scatter"]
    assert (top["unit"], top["phase"], top["last_rank"]) == ("layers.0", "backward", 1)
    # the rank's collectives carry their transfer time per type (the aggregate fits use it)
    assert res.record().to_dict()["ranks"][0]["collectives"]["all_gather"]["transfer_us"] == pytest.approx(
        15.0
    )


def test_the_alpha_beta_fit_uses_transfer_time_not_wait_plus_transfer():
    import pandas as pd

    from fsdpbench.analysis.estimate import whatif

    alpha_us, beta_us_per_byte = 20.0, 0.001
    sizes = np.array([1e4, 5e4, 1e5, 5e5, 1e6, 2e6])
    transfer_ns = np.round((alpha_us + beta_us_per_byte * sizes) * 1000).astype(np.int64)
    wait_ns = np.array([0, 900_000, 5_000, 0, 2_000_000, 40_000])  # waits unrelated to size
    start = np.arange(sizes.size, dtype=np.int64) * 10_000_000
    events = pd.DataFrame(
        {
            "type": ["all_gather"] * sizes.size,
            "bytes": sizes,
            "start_ns": start,
            "end_ns": start + wait_ns + transfer_ns,
            "transfer_ns": transfer_ns,
        }
    )
    fit = whatif.fit_events(events)["all_gather"]
    assert fit.alpha_us == pytest.approx(alpha_us, rel=1e-6)
    assert fit.beta_us_per_byte == pytest.approx(beta_us_per_byte, rel=1e-6)
    without = whatif.fit_events(events.drop(columns="transfer_ns"))["all_gather"]
    assert without.alpha_us != pytest.approx(alpha_us, rel=0.1)  # wait + transfer: a different line


# --------------------------------------------------------------------- the deliberate delay
DELAY_MS = 1000.0  # well above the scheduling noise of a loaded 2-core machine (tens of ms)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_delayed_rank_shows_up_as_wait_on_the_other_rank_in_that_unit_and_phase_only(tmp_path):
    """FSDPBENCH_FAULT=delay: rank 1 sleeps at the start of layers.1's forward in the profiled step; rank 0
    then waits for it at that unit's all-gather: within 10% of the delay there, under 10% anywhere else."""
    from fsdpbench.results.run_folder import PROFILED_ROUND
    from helpers import free_port, run_cli

    fault = f"delay:torch:{PROFILED_ROUND}:1:layers.1:forward:{DELAY_MS:g}"
    proc = run_cli(
        *("run", "--arms", "torch", "--rounds", "1", "--warmup", "1", "--steps", "1", "--profile"),
        *("--nproc", "2", "--layers", "2", "--seq-len", "32", "--no-report", "--name", "delay"),
        *("--out", str(tmp_path), "--master-port", str(free_port())),
        env={"FSDPBENCH_FAULT": fault},
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = tmp_path.glob("delay_*")
    w = analyze([run / "profiles" / "torch"], workers=1).record().to_dict()["waits"]
    assert w["match"] == "c10d_ranges"
    waits = {
        (u["unit"], u["phase"], int(r)): v["wait_us"] / 1000
        for u in w["units"]
        for r, v in u["ranks"].items()
    }
    assert waits[("layers.1", "forward", 0)] == pytest.approx(DELAY_MS, rel=0.10)
    others = {k: v for k, v in waits.items() if k != ("layers.1", "forward", 0)}
    assert max(others.values()) < 0.10 * DELAY_MS, others


# --------------------------------------------------------------------- the Ascend profiler's own split
def _raw_text_ops(rank_dir: Path) -> list[tuple[str, dict[str, float]]]:
    doc = json.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    out = []
    for kinds in doc.values():
        for entries in kinds.values():
            for name, entry in entries.items():
                if name != "Total Op Info":
                    out.append((name.split("@")[0], entry["Communication Time Info"]))
    return sorted(out, key=lambda x: x[1]["Start Timestamp(us)"])


def _raw_db_ops(rank_dir: Path) -> list[tuple]:
    import sqlite3

    con = sqlite3.connect(rank_dir / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    rows = con.execute(
        "SELECT hccl_op_name, elapse_time, transit_time, wait_time, synchronization_time, idle_time "
        "FROM CommAnalyzerTime ORDER BY start_timestamp"
    ).fetchall()
    con.close()
    return rows


@pytest.mark.parametrize("export", ["msinsight_pt_text_level1", "msinsight_pt_db_level2"])
def test_the_ascend_profilers_own_split_is_read_per_op_and_rank_beside_fsdpbenchs(shared_fixtures, export):
    folder = shared_fixtures / "fixtures" / "ascend" / export
    res = analyze([folder], workers=1)
    w = res.record().to_dict()["waits"]
    ops = w["profiler_ops"]
    for rank in (0, 1):
        mine = [o for o in ops if o["rank"] == rank]
        rank_dir = folder / f"rank{rank}_ascend_pt"
        if export.startswith("msinsight_pt_text"):
            raw = [
                (n, i["Elapse Time(ms)"], i["Transit Time(ms)"], i["Wait Time(ms)"],
                 i["Synchronization Time(ms)"], i["Idle Time(ms)"]) for n, i in _raw_text_ops(rank_dir)
            ]  # fmt: skip
        else:
            raw = _raw_db_ops(rank_dir)
        assert [o["op"] for o in mine] == [r[0] for r in raw]
        for o, r in zip(mine, raw, strict=True):
            got = (o["elapse_us"], o["transit_us"], o["wait_us"], o["synchronization_us"], o["idle_us"])
            assert got == pytest.approx(tuple(1000.0 * v for v in r[1:]), rel=1e-12)
            # the profiler's elapse is the op's span in the trace: fsdpbench's wait + transfer of the same op
            assert o["fsdpbench_wait_us"] + o["fsdpbench_transfer_us"] == pytest.approx(
                o["elapse_us"], abs=1.0
            )
        total = next(t for t in w["profiler"] if t["rank"] == rank)
        assert total["wait_us"] == pytest.approx(1000.0 * sum(r[3] for r in raw))
    # fsdpbench matched the ranks' ops by order: the profiler names the paired ops alike on both ranks
    assert [o["op"] for o in ops if o["rank"] == 0] == [o["op"] for o in ops if o["rank"] == 1]


def test_the_late_ranks_wait_agrees_with_the_profilers_synchronization_on_the_text_export(shared_fixtures):
    """Rank 1 reaches the first all-reduce 5.6 ms after rank 0: the profiler's Synchronization Time of
    rank 0 (5.61569221875 ms in communication.json) is fsdpbench's cross-rank wait within 1 µs."""
    folder = shared_fixtures / "fixtures" / "ascend" / "msinsight_pt_text_level1"
    (name, info) = _raw_text_ops(folder / "rank0_ascend_pt")[0]
    op = analyze([folder], workers=1).waits["profiler_ops"][0]
    assert op["op"] == name and op["rank"] == 0
    assert op["fsdpbench_wait_us"] == pytest.approx(1000.0 * info["Synchronization Time(ms)"], abs=1.0)


def test_the_plain_python_interval_helpers_agree_with_a_brute_force_count():
    from fsdpbench.analysis.crossrank import waits

    rng = np.random.default_rng(7)
    for _ in range(200):
        a = rng.integers(0, 60, size=(rng.integers(0, 6), 2)).tolist()
        b = rng.integers(0, 60, size=(rng.integers(0, 6), 2)).tolist()
        set_a = {t for s, e in a for t in range(s, e)}
        set_b = {t for s, e in b for t in range(s, e)}
        ua = waits._union([s for s, _ in a], [e for _, e in a])
        ub = waits._union([s for s, _ in b], [e for _, e in b])
        assert waits._length(ua) == len(set_a)
        assert waits._intersection_length(ua, ub) == len(set_a & set_b)
        diff = waits._difference(ua, ub)
        assert {t for s, e in diff for t in range(s, e)} == set_a - set_b


def test_the_exposed_overlap_by_running_length_agrees_with_a_brute_force_count():
    from fsdpbench.analysis.crossrank import waits

    rng = np.random.default_rng(11)
    for _ in range(200):
        e = rng.integers(0, 80, size=(rng.integers(0, 8), 2)).tolist()
        u = rng.integers(0, 80, size=(rng.integers(0, 8), 2)).tolist()
        ue = waits._union([s for s, _ in e], [x for _, x in e])
        uu = waits._union([s for s, _ in u], [x for _, x in u])
        exp = waits._Exposed(([s for s, _ in ue], [x for _, x in ue]))
        brute = {t for s, x in ue for t in range(s, x)} & {t for s, x in uu for t in range(s, x)}
        assert exp.overlap(uu) == len(brute)
        # the numpy version (a fresh analysis) on the same intervals
        arrays = waits._ExposedArrays(([s for s, _ in ue], [x for _, x in ue]))
        assert arrays.overlap(
            (np.array([s for s, _ in uu], np.int64), np.array([x for _, x in uu], np.int64))
        ) == len(brute)


def test_the_numpy_split_equals_the_plain_python_one_and_a_brute_force_count():
    from fsdpbench.analysis.crossrank import waits

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(0, 8))
        starts = rng.integers(0, 80, size=n)
        wait_end = starts + rng.integers(0, 10, size=n)
        ends = wait_end + rng.integers(0, 10, size=n)
        e = rng.integers(0, 90, size=(rng.integers(0, 8), 2)).tolist()
        ue = waits._union([s for s, _ in e], [x for _, x in e])
        exposed = ([s for s, _ in ue], [x for _, x in ue])
        args = (starts.tolist(), wait_end.tolist(), ends.tolist())
        fresh = waits._split_arrays(*args, waits._ExposedArrays(exposed))
        assert fresh == waits._split(*args, waits._Exposed(exposed))
        span = {t for s, x in ue for t in range(s, x)}
        transfer = {t for w, x in zip(*args[1:], strict=True) for t in range(w, x)}
        wait = {t for s, w in zip(*args[:2], strict=True) for t in range(s, w)} - transfer
        assert round(fresh["transfer_us"] * 1000) == len(transfer) and round(fresh["wait_us"] * 1000) == len(
            wait
        )
        assert round(fresh["exposed_wait_us"] * 1000) == len(wait & span)
        assert round(fresh["exposed_transfer_us"] * 1000) == len(transfer & span)


@pytest.mark.parametrize(
    "fault",
    [
        "delay:torch:-1:1:layers.1:sideways:200",
        "delay:torch:-1:1:layers.1:forward",
        "delay:torch:x:1:l:forward:5",
    ],
)
def test_a_malformed_delay_is_one_clear_error_naming_the_variable(monkeypatch, fault):
    from fsdpbench.errors import ConfigError
    from fsdpbench.run.worker import FAULT_ENV, profile_delay

    monkeypatch.setenv(FAULT_ENV, fault)
    with pytest.raises(ConfigError, match="FSDPBENCH_FAULT"):
        profile_delay({"arm": "torch", "round": -1}, 1)


def test_a_delay_applies_to_its_arm_round_and_rank_only(monkeypatch):
    from fsdpbench.run.worker import FAULT_ENV, profile_delay

    monkeypatch.setenv(FAULT_ENV, "delay:torch:-1:1:layers.0:backward:250")
    assert profile_delay({"arm": "torch", "round": -1}, 1) == ("layers.0", "backward", 0.25)
    assert profile_delay({"arm": "torch", "round": -1}, 0) is None
    assert profile_delay({"arm": "hyper", "round": -1}, 1) is None
    assert profile_delay({"arm": "torch", "round": 0}, 1) is None


def test_analyze_prints_the_split_per_rank_and_the_slowest_collectives(tmp_path):
    from rich.console import Console

    from fsdpbench.report.terminal.analyze import render_analysis

    paths = []
    for r, doc in enumerate(
        [_gloo_rank(0, 0.0, 0.0, (1020.0, 10.0)), _gloo_rank(1, 50_000.0, 30.0, (1000.0, 35.0))]
    ):
        paths.append(tmp_path / f"rank{r}.json")
        paths[-1].write_text(json.dumps(doc))
    con = Console(record=True, width=130)
    render_analysis(analyze(paths, workers=1), console=con)
    text = con.export_text()
    assert "Waiting vs transferring (2 collectives matched by c10d_ranges)" in text
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    assert ["0", "0.030", "0.020", "0.020", "0.020", "0.0"] in rows  # rank: wait, transfer, exposed, offset
    assert ["1", "0.000", "0.020", "0.000", "0.020", "50000.0"] in rows
    top = next(line for line in text.splitlines() if "layers.0" in line and "forward" in line)
    assert "0.030" in top and "all_gather" in top


def test_the_clock_offset_is_clipped_to_what_causality_allows():
    """Rank 1 ends 500 ns before rank 0 in two of three collectives (scheduling noise on one host: the
    median says −500 ns), but rank 0 arrives 100 ns before rank 1 ends the first one and rank 1 arrives
    100 ns before rank 0 ends the second: no rank ends before the other arrived only for offsets in
    [−100, 100] ns, so −100 ns is used."""
    r0 = _cols(
        [
            ("all_gather", 1.0, 0, 900, 1500),
            ("all_gather", 1.0, 1, 2000, 3000),
            ("all_gather", 1.0, 2, 5000, 6000),
        ]
    )
    r1 = _cols(
        [
            ("all_gather", 1.0, 0, 0, 1000),
            ("all_gather", 1.0, 1, 2900, 3050),
            ("all_gather", 1.0, 2, 4000, 5500),
        ]
    )
    out, warnings = wait_transfer([0, 1], [r0, r1])
    assert warnings == []
    assert out["ranks"][1]["clock_offset_us"] == pytest.approx(-0.1)


def _random_ranks(
    rng: np.random.Generator, how: str
) -> tuple[list[dict[str, Any]], list[tuple[list[int], list[int]]]]:
    """Random collectives of 2–4 ranks: repeated keys (coalesced kernels), keys on one rank only, clock
    offsets, unknown sizes, units and phases; and each rank's exposed intervals."""
    from fsdpbench.analysis.crossrank import waits

    events, exposed = [], []
    for r in range(int(rng.integers(2, 5))):
        n = int(rng.integers(0, 30))
        start = rng.integers(0, 2000, size=n) + int(rng.integers(-300, 300))
        ce: dict[str, Any] = {
            "type": rng.choice(
                ["all_gather", "reduce_scatter", "all_reduce", "broadcast", "odd"], size=n
            ).tolist(),
            "bytes": [None if rng.random() < 0.2 else float(rng.integers(1, 1 << 20)) for _ in range(n)],
            "start_ns": start.tolist(),
            "end_ns": (start + rng.integers(0, 80, size=n)).tolist(),
            "group": rng.choice(["0", "1"], size=n).tolist() if how != "order" else [None] * n,
            "seq": rng.integers(0, 12, size=n).tolist()
            if how == "seq" or (how == "mixed" and r != 1)
            else [-1] * n,
            "unit": rng.choice(["layers.0", "layers.1", None], size=n).tolist(),
            "phase": rng.choice(["forward", "backward", None], size=n).tolist(),
        }
        if how in ("marks", "mixed"):
            ce["mark_group"] = rng.choice(["0", "1"], size=n).tolist()
            ce["mark_index"] = rng.integers(0, 12, size=n).tolist()
        events.append(ce)
        e = rng.integers(-300, 2400, size=(int(rng.integers(0, 20)), 2)).tolist()
        u = waits._union([a for a, _ in e], [b for _, b in e])
        exposed.append(([a for a, _ in u], [b for _, b in u]))
    return events, exposed


@pytest.mark.parametrize("how", ["seq", "marks", "order", "mixed"])
def test_the_numpy_cross_rank_path_equals_the_plain_python_one(monkeypatch, how):
    """A fresh analysis (numpy loaded) and one from result caches (plain Python) must give the same
    numbers: random rank sets through both paths of wait_transfer, compared whole (row split included)."""
    from fsdpbench.analysis.crossrank import waits

    rng = np.random.default_rng(17)
    seen = set()
    for _ in range(40):
        events, exposed = _random_ranks(rng, how)
        ranks = list(range(len(events)))
        fresh = waits.wait_transfer(ranks, events, exposed, top=4)
        monkeypatch.setattr(waits, "_numpy_loaded", lambda: False)
        plain = waits.wait_transfer(ranks, events, exposed, top=4)
        monkeypatch.setattr(waits, "_numpy_loaded", lambda: True)
        assert fresh == plain
        seen.add(fresh[0]["match"])
        if fresh[0]["instances"] and fresh[0]["match"] != "order":  # (order drops the units)
            assert any(u["unit"] for u in fresh[0]["units"]) and fresh[0]["top"]
    # (a rank without collectives makes it match by order)
    assert {"seq": "group_seq", "order": "order"}.get(how, "c10d_ranges") in seen

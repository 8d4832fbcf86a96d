"""Communication per process group (HSDP's shard and replicate groups apart) on hand-built NCCL-style traces:
per group comm, exposed, count, bytes and bandwidth against figures computed by hand from the events
written below, the groups' kinds from the ranks the traces name, the analyze table, and the report's
all-ranks timeline on the common clock. (The gloo run: test_runner_fsdp.py's HSDP test, process_group_checks.py.)
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from fsdpbench.analysis import analyze
from helpers import run_cli

# One 2×2 HSDP step per rank, times in µs from the rank's step start (written by hand):
#   compute kernels (stream 7):  [100, 300) and [500, 700)
#   shard all-gather (stream 20):      [50, 250)   1000 → 2000 floats
#   shard reduce-scatter (stream 20):  [650, 750)  2000 → 1000 floats
#   replicate all-reduce (stream 21):  [600, 900)  1000 → 1000 floats
COMPUTE = [(100.0, 200.0), (500.0, 200.0)]
SHARD = {1: "[0, 1]", 2: "[2, 3]"}  # group name → its ranks (rows of the 2×2 mesh)
REPLICATE = {3: "[0, 2]", 4: "[1, 3]"}  # (columns)
# By hand: shard comm = 200 + 100 = 300 µs; under compute [100, 250) + [650, 700) = 200 → exposed 100;
# bytes 2000·4 + 2000·4 = 16000; algbw = 16000 B / 300 µs = 0.05333 GB/s.
# Replicate comm = 300 µs; under compute [600, 700) = 100 → exposed 200; bytes 4000; 4000 B / 300 µs.
WANT_SHARD = {"comm_us": 300.0, "exposed_us": 100.0, "count": 2, "bytes": 16000, "algbw_gbps": 16000 / 300e3}
WANT_REPLICATE = {
    "comm_us": 300.0,
    "exposed_us": 200.0,
    "count": 1,
    "bytes": 4000,
    "algbw_gbps": 4000 / 300e3,
}
CLOCK_SKEW_US = 10.0  # rank r's clock starts r·10 µs later (one host: comparable clocks)


def _groups_of(rank: int) -> tuple[tuple[int, str], tuple[int, str]]:
    shard = 1 if rank < 2 else 2
    replicate = 3 if rank % 2 == 0 else 4
    return (shard, SHARD[shard]), (replicate, REPLICATE[replicate])


def _comm_args(coll: str, nin: int, nout: int, group: tuple[int, str], seq: int) -> dict[str, Any]:
    """Kernel args as torch 2.13's Kineto writes them on an NCCL kernel (test_collective_identity.py)."""
    return {
        "Collective name": coll,
        "In msg nelems": nin,
        "Out msg nelems": nout,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": str(group[0]),
        "Process Group Description": "undefined",
        "Process Group Ranks": group[1],
        "Seq": seq,
    }


def _rank_trace(rank: int) -> dict[str, Any]:
    t0 = 1_000_000.0 + CLOCK_SKEW_US * rank
    shard, replicate = _groups_of(rank)
    kernels = [
        ("sm90_gemm_a", 7, *COMPUTE[0], {}),
        ("sm90_gemm_b", 7, *COMPUTE[1], {}),
        ("ncclDevKernel_AllGather_RING_LL", 20, 50.0, 200.0, _comm_args("_allgather_base", 1000, 2000, shard, 0)),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 20, 650.0, 100.0,
         _comm_args("_reduce_scatter_base", 2000, 1000, shard, 1)),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 21, 600.0, 300.0,
         _comm_args("allreduce", 1000, 1000, replicate, 0)),
    ]  # fmt: skip
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": t0,
         "dur": 1000.0},
    ]  # fmt: skip
    for k, (name, stream, ts, dur, args) in enumerate(kernels):
        corr = 100 + k
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t0 + 1.0 + k, "dur": 0.5, "args": {"correlation": corr}})  # fmt: skip
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": t0 + ts, "dur": dur,
                   "args": {**args, "stream": stream, "correlation": corr}})  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4},
        "traceEvents": ev,
    }


@pytest.fixture
def hsdp_traces(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles" / "hsdp"
    for rank in range(4):
        (folder / f"rank{rank}").mkdir(parents=True)
        doc = _rank_trace(rank)
        (folder / f"rank{rank}" / f"rank{rank}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(doc).encode())
        )
    return folder


def _close(got: dict[str, Any], want: dict[str, Any]) -> None:
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9), key


def test_per_group_comm_exposed_bytes_and_bandwidth_match_the_hand_computation(hsdp_traces):
    res = analyze([hsdp_traces], workers=1)
    for r in res.ranks:
        (shard, _), (replicate, _) = _groups_of(r.rank)
        assert set(r.by_group) == {str(shard), str(replicate)}
        _close(r.by_group[str(shard)], WANT_SHARD)
        _close(r.by_group[str(replicate)], WANT_REPLICATE)
        assert r.by_group[str(shard)]["collectives"] == {"all_gather": 1, "reduce_scatter": 1}
        assert r.by_group[str(replicate)]["collectives"] == {"all_reduce": 1}
        # the groups overlap each other in time: the rank's comm is their union, [50, 250) ∪ [600, 900)
        assert r.comm_us == pytest.approx(500.0)
    kinds = {g: (v["kind"], v["ranks"], v["rule"]) for g, v in res.process_groups.items()}
    assert kinds == {
        "1": ("shard", [0, 1], "trace ranks"),
        "2": ("shard", [2, 3], "trace ranks"),
        "3": ("replicate", [0, 2], "trace ranks"),
        "4": ("replicate", [1, 3], "trace ranks"),
    }


def test_one_rank_alone_still_tells_shard_from_replicate_by_the_ranks_its_trace_names(hsdp_traces):
    res = analyze([hsdp_traces / "rank3"], workers=1)
    assert {g: v["kind"] for g, v in res.process_groups.items()} == {"2": "shard", "4": "replicate"}


def test_analyze_json_and_table_show_the_groups(hsdp_traces):
    proc = run_cli("analyze", str(hsdp_traces), "--json", "-", timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert doc["process_groups"]["3"]["kind"] == "replicate"
    _close(doc["ranks"][0]["by_group"]["1"], WANT_SHARD)
    proc = run_cli("analyze", str(hsdp_traces), timeout=120, env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("Communication per process group") :]
    rows = [line for line in table.splitlines() if "shard" in line or "replicate" in line][:4]
    # group, kind, ranks, count, comm ms, exposed ms: means over the group's two ranks
    assert [row.replace("│", " ").split()[:6] for row in rows] == [
        ["1", "shard", "0,1", "2", "0.300", "0.100"],
        ["2", "shard", "2,3", "2", "0.300", "0.100"],
        ["3", "replicate", "0,2", "1", "0.300", "0.200"],
        ["4", "replicate", "1,3", "1", "0.300", "0.200"],
    ]


def test_rank_timeline_puts_every_rank_on_the_common_clock_with_its_groups(hsdp_traces):
    from fsdpbench.report import figures, rank_timeline

    t = rank_timeline.build("hsdp", hsdp_traces)
    assert t.aligned and t.step == 1 and [r.rank for r in t.rows] == [0, 1, 2, 3]
    for r in t.rows:
        skew_ns = int(CLOCK_SKEW_US * 1000) * r.rank  # from rank 0's step start, the earliest
        assert r.compute[0].tolist() == [100_000 + skew_ns, 500_000 + skew_ns]
        (shard, _), (replicate, _) = _groups_of(r.rank)
        assert r.comm[str(shard)][0].tolist() == [50_000 + skew_ns, 650_000 + skew_ns]
        assert r.comm[str(replicate)][1].tolist() == [900_000 + skew_ns]
    assert t.kinds == {"1": "shard", "2": "shard", "3": "replicate", "4": "replicate"}
    svg = figures.rank_timeline([t])
    assert "group 1 (shard)" in svg and "group 4 (replicate)" in svg and "rank 3" in svg


def test_a_cached_analysis_keeps_the_groups_without_measuring_again(hsdp_traces, monkeypatch):
    from fsdpbench.analysis import pipeline
    from fsdpbench.trace import cache as table_cache

    monkeypatch.delenv(table_cache.NO_CACHE_ENV, raising=False)
    first = analyze([hsdp_traces], workers=1)  # writes the result caches

    def no_measure(*args, **kwargs):
        raise AssertionError("rank_metrics was called although every rank's result is cached")

    monkeypatch.setattr(pipeline, "rank_metrics", no_measure)
    second = analyze([hsdp_traces], workers=1)
    assert [r.by_group for r in second.ranks] == [r.by_group for r in first.ranks]
    assert second.process_groups == first.process_groups
    _close(second.ranks[0].by_group["1"], WANT_SHARD)


def _gloo_trace(extra_span: bool = False) -> list[dict[str, Any]]:
    """A gloo step by hand (µs): on the training thread (tid 1) two fsdpbench c10d ranges, each around
    its c10d launch, and compute [5, 15), [30, 40); gloo's worker threads run the all-gather on tid 10,
    [1, 12), and the all-reduce on tid 11, [21, 35)."""

    def x(name: str, tid: int, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = [
        x("ProfilerStep#1", 1, 0.0, 100.0, "user_annotation"),
        x("fsdpbench::c10d::all_gather::group=3::index=0", 1, 0.0, 2.0, "user_annotation"),
        x(
            "c10d::_allgather_base_",
            1,
            0.2,
            1.3,
            **{"Input Dims": [[8], [4]], "Input type": ["float", "float"]},
        ),
        x("aten::mm", 1, 5.0, 10.0),
        x("fsdpbench::c10d::all_reduce::group=1::index=0", 1, 20.0, 2.0, "user_annotation"),
        x("c10d::allreduce_", 1, 20.2, 1.3, **{"Input Dims": [[[16]]], "Input type": ["float"]}),
        x("aten::mm", 1, 30.0, 10.0),
        x("gloo:all_gather", 10, 1.0, 11.0, "user_annotation"),
        x("gloo:all_reduce", 11, 21.0, 14.0, "user_annotation"),
    ]
    if extra_span:  # a worker span no launch or range accounts for
        ev.append(x("gloo:all_reduce", 11, 50.0, 5.0, "user_annotation"))
    return ev


def test_gloo_spans_take_the_group_of_the_fsdpbench_range_around_their_launch(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": _gloo_trace()}))
    r = analyze([path], workers=1).ranks[0]
    # by hand: group 3 = [1, 12): 11 µs, under compute [5, 12) → exposed 4, 8 floats = 32 B;
    # group 1 = [21, 35): 14 µs, under compute [30, 35) → exposed 9, 16 floats = 64 B
    _close(
        r.by_group["3"],
        {"comm_us": 11.0, "exposed_us": 4.0, "count": 1, "bytes": 32, "algbw_gbps": 32 / 11e3},
    )
    _close(
        r.by_group["1"],
        {"comm_us": 14.0, "exposed_us": 9.0, "count": 1, "bytes": 64, "algbw_gbps": 64 / 14e3},
    )
    assert set(r.by_group) == {"3", "1"}


def test_gloo_spans_that_do_not_pair_with_launches_are_named_unknown_with_a_warning(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": _gloo_trace(extra_span=True)}))
    res = analyze([path], workers=1)
    assert list(res.ranks[0].by_group) == ["?"] and res.ranks[0].by_group["?"]["count"] == 3
    assert res.process_groups == {"?": {"kind": "unknown", "ranks": None, "rule": None, "size": None}}
    assert any("3 collectives without a process group" in w for w in res.warnings), res.warnings


def test_rank_timeline_with_more_groups_than_shades_colours_them_by_kind():
    import numpy as np

    from fsdpbench.report import figures
    from fsdpbench.report.rank_timeline import RankRow, RankTimeline

    span = (np.array([0, 500_000]), np.array([100_000, 600_000]))
    rows = [RankRow(r, span, {str(10 + r // 2): span, str(20 + r % 2): span}) for r in range(10)]
    kinds = {**{str(10 + i): "shard" for i in range(5)}, "20": "replicate", "21": "replicate"}
    svg = figures.rank_timeline([RankTimeline("hsdp 2x5", 1, rows, kinds)])
    assert "5 shard groups" in svg and "group 20 (replicate)" in svg and "group 10 (shard)" not in svg

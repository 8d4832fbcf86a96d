"""Bad input: one clear message naming the file, a non-zero exit when nothing could be analysed, no
traceback; warnings (not errors) for what still allows an analysis."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench import cli
from fsdpbench.analysis import NO_COLLECTIVES, analyze
from fsdpbench.errors import InputError
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import ASCEND_FIXTURES

GLOO_MIN = Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["analyze", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def good_trace(tmp_path: Path, rank: int = 0, **kw) -> Path:
    return write_trace(
        tmp_path / f"rank{rank}.json", make_trace(rank=rank, world_size=2, device_events=300, **kw)
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("rank0.json", b'{"traceEvents": [{"ph": "X", "ts": 1', "not valid JSON"),
        ("rank0.json", b"", "the file is empty"),
        ("rank0.json.gz", gzip.compress(b'{"traceEvents": []}')[:-9], "corrupt or truncated gzip"),
        ("rank0.json.gz", b"\x1f\x8bnot gzip at all", "corrupt or truncated gzip"),
        ("rank0.json", b'{"foo": 1}', "no 'traceEvents' list"),
        ("rank0.json", b'{"traceEvents": [{"ph": "M"}]}', "no timed"),
    ],
)
def test_broken_trace_files_exit_2_with_one_line_naming_the_file(tmp_path, capsys, name, content, message):
    (tmp_path / name).write_bytes(content)
    rc, out, err = run(capsys, str(tmp_path / name))
    assert rc == 2
    assert message in err and name in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_path_and_empty_folder_are_errors(tmp_path, capsys):
    rc, _, err = run(capsys, str(tmp_path / "nope"))
    assert rc == 2 and "no such file or folder" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run(capsys, str(tmp_path / "empty"))
    assert rc == 2 and "no profiles found" in err


def test_mixed_kineto_and_ascend_inputs_are_rejected(tmp_path, shared_fixtures):
    good_trace(tmp_path)
    shutil.copytree(
        ASCEND_FIXTURES / "msinsight_pt_text_level1" / "rank0_ascend_pt",
        tmp_path / "r0_ascend_pt",
        ignore=shutil.ignore_patterns("operator_*"),
    )
    with pytest.raises(InputError, match="mixed formats"):
        analyze([tmp_path], workers=1)


def test_one_corrupt_rank_is_skipped_with_a_warning_naming_it(tmp_path):
    good_trace(tmp_path, 0)
    (tmp_path / "rank1.json").write_bytes(b"{")
    res = analyze([tmp_path], workers=1)
    assert [r.rank for r in res.ranks] == [0]
    assert any("rank1.json" in w and w.startswith("skipped") for w in res.warnings)


def test_a_one_rank_world_says_why_it_has_no_collectives_instead_of_asking(tmp_path):
    """distributedInfo world_size 1 (one GPU, seen on an H200): FSDP issues no collectives at all."""
    doc = {
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 0, "dur": 5}],
    }
    (tmp_path / "rank0.json").write_bytes(orjson.dumps(doc))
    res = analyze([tmp_path / "rank0.json"], workers=1)
    one_rank = "rank0.json: a world of one rank (distributedInfo world_size 1) and no collectives"
    assert any(w.startswith(one_rank) for w in res.warnings)
    assert not [w for w in res.warnings if NO_COLLECTIVES in w]
    assert res.ranks[0].overlap_ratio is None
    # one rank that does run a collective kernel: nothing to explain
    doc["traceEvents"].append(
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 10, "dur": 5}
    )  # fmt: skip
    (tmp_path / "rank0.json").write_bytes(orjson.dumps(doc))
    res = analyze([tmp_path / "rank0.json"], workers=1)
    assert not [w for w in res.warnings if "a world of one rank" in w or NO_COLLECTIVES in w]


def test_trace_without_collectives_warns_and_reports_overlap_null(tmp_path, capsys):
    doc = {
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 0, "dur": 5}]
    }
    (tmp_path / "rank0.json").write_bytes(orjson.dumps(doc))
    res = analyze([tmp_path / "rank0.json"], workers=1)
    assert res.ranks[0].overlap_ratio is None
    assert res.record().to_dict()["ranks"][0]["overlap_ratio"] is None
    assert f"rank 0: {NO_COLLECTIVES}" in res.warnings
    rc, out, _ = run(capsys, str(tmp_path / "rank0.json"))
    assert rc == 0 and "no collectives found" in out and "—" in out  # overlap: the missing glyph, never 0%


def test_ranks_with_different_steps_warn(tmp_path):
    a = orjson.loads(GLOO_MIN.read_bytes())
    b = orjson.loads(GLOO_MIN.read_bytes())
    b["distributedInfo"]["rank"] = 0
    b["traceEvents"][2]["name"] = "ProfilerStep#6"
    (tmp_path / "a.json").write_bytes(orjson.dumps(a))
    (tmp_path / "b.json").write_bytes(orjson.dumps(b))
    res = analyze([tmp_path / "a.json", tmp_path / "b.json"], workers=1)
    assert any("ranks profiled different steps" in w for w in res.warnings)


def test_clock_offset_between_ranks_warns_and_skips_skew(tmp_path):
    good_trace(tmp_path, 0)
    good_trace(tmp_path, 1, skew_ns=3_600 * 10**9)  # an hour apart: a different host clock
    res = analyze([tmp_path], workers=1)
    assert any("clocks are offset" in w for w in res.warnings)
    assert res.stragglers == [] and res.collective_skew_us == {}


def test_a_late_rank_is_reported_as_straggler(tmp_path):
    """Rank 1 arrives late at every collective and finishes it with rank 0 (the last arrival releases
    both): its lateness is the arrival gap on the aligned clocks (offset 0: the ends agree)."""
    import statistics

    good_trace(tmp_path, 0, seed=3)
    late = make_trace(rank=0, world_size=2, device_events=300, seed=3)  # the same work
    late["distributedInfo"]["rank"] = 1
    gaps = []
    for e in late["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            gap = round(e["dur"] * 0.6, 3)  # µs; arrives this much later, ends at the same time
            e["ts"], e["dur"] = e["ts"] + gap, round(e["dur"] - gap, 3)
            gaps.append(gap)
    write_trace(tmp_path / "rank1.json", late)
    res = analyze([tmp_path], workers=1)
    assert statistics.median(gaps) > 10  # µs: a straggler by the rule (over 10 µs, twice the others')
    assert [s["rank"] for s in res.stragglers] == [1]
    assert res.stragglers[0]["skew_us"] == pytest.approx(statistics.median(gaps), abs=0.002)
    assert res.waits["ranks"][1]["clock_offset_us"] == pytest.approx(0.0, abs=0.002)


def test_duplicate_ranks_are_an_error(tmp_path):
    shutil.copy(GLOO_MIN, tmp_path / "a.json")
    shutil.copy(GLOO_MIN, tmp_path / "b.json")
    with pytest.raises(InputError, match="two inputs claim rank 1"):
        analyze([tmp_path / "a.json", tmp_path / "b.json"], workers=1)


def test_unknown_step_is_an_error_naming_the_steps(tmp_path, capsys):
    rc, _, err = run(capsys, str(GLOO_MIN), "--step", "9")
    assert rc == 2 and "step 9 was not profiled" in err and "[5]" in err


def test_json_output_matches_the_data_contract(tmp_path, capsys):
    out = tmp_path / "a.json"
    rc, _, _ = run(capsys, str(GLOO_MIN), "--json", str(out))
    d = orjson.loads(out.read_bytes())
    assert rc == 0
    assert set(d) >= {"schema_version", "sources", "format", "warnings", "ranks", "mean", "across_ranks"}
    r = d["ranks"][0]
    for key in (
        "rank",
        "step",
        "step_time_us",
        "overlap_ratio",
        "compute_us",
        "comm_us",
        "overlapped_us",
        "exposed_comm_us",
        "free_us",
        "kernel_time_us",
        "collectives",
        "ops",
        "sync",
        "steps",
    ):
        assert key in r
    assert r["collectives"]["all_gather"] == {
        "count": 1,
        "bytes": 64,
        "time_us": 14.0,
        "median_bytes": 64.0,
        "bandwidth_gbps": 64 / 14_000,
    }
    assert set(d["across_ranks"]) >= {"min", "max", "slowest_rank", "stragglers"}

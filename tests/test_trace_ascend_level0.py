"""A real torch_npu Level0 text export (tests/fixtures/ascend_level0, see its PROVENANCE.md) against
the profiler's own outputs: op types equal the Level1 op_statistic.csv of the same model and step,
compute/communication equal Level0's step_trace_time.csv; and the header-only kernel_details.csv case."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from fsdpbench.analysis import analyze
from helpers import ASCEND_FIXTURES

LEVEL0 = Path(__file__).parent / "fixtures" / "ascend_level0"
LEVEL1 = ASCEND_FIXTURES / "msinsight_pt_text_level1"


@pytest.fixture(scope="module")
def level0(shared_fixtures):
    return analyze([LEVEL0], workers=1)


@pytest.mark.parametrize("rank", [0, 1])
def test_level0_op_types_and_counts_equal_level1_op_statistic(level0, rank, shared_fixtures):
    """Level0 writes N/A types and instance names (Conv2D1…Conv2D4, ReduceSum7); Level1 of the same
    model and step names the types: the derived types, and each type's count, must equal them."""
    kd = pd.read_csv(
        LEVEL0 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv",
        dtype=str,
        keep_default_na=False,
    )
    assert {"Conv2D1", "Conv2D4", "ReduceSum7"} <= set(kd["Name"]) and set(kd["Type"]) == {"N/A"}
    ref = pd.read_csv(LEVEL1 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
    ref = ref.groupby("OP Type")["Count"].sum()
    ours = level0.ranks[rank].op_stats.set_index("op_type")["count"]
    assert len(ref) == 33
    assert ours.sort_index().to_dict() == ref.sort_index().to_dict()


@pytest.mark.parametrize("rank", [0, 1])
def test_sync_counts_are_not_recorded_without_trace_view(level0, rank):
    """This export has no trace_view.json (where syncs, launches and BARRIER tasks are read from):
    every count is null ("not recorded"), never a false 0."""
    assert not (LEVEL0 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").exists()
    sync = level0.ranks[rank].sync
    assert sync and all(v is None for v in sync.values())


@pytest.mark.parametrize("rank", [0, 1])
def test_level0_compute_and_comm_equal_its_step_trace_time(level0, rank):
    ref = pd.read_csv(
        LEVEL0 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    ).iloc[0]
    r = level0.ranks[rank]
    assert r.step == 50 and r.collectives["all_reduce"]["count"] == 4
    assert abs(r.compute_us - ref["Computing"]) < 1.0
    assert abs(r.comm_us - ref["Communication"]) < 1.0
    assert abs(r.exposed_comm_us - ref["Communication(Not Overlapped)"]) < 1.0


def test_a_header_only_kernel_details_warns_clearly_and_no_clock_offset(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(LEVEL0, dst, ignore=shutil.ignore_patterns("PROVENANCE.md"))
    kd = dst / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kd.write_text(kd.read_text().splitlines()[0] + "\n")
    (kd.parent / "step_trace_time.csv").unlink()
    res = analyze([dst], workers=1)
    assert [r.rank for r in res.ranks] == [0, 1]
    assert any(
        "kernel_details.csv has a header but no rows" in w and "no device activity" in w for w in res.warnings
    )
    # the empty rank is not compared with the others (no clock, steps or collectives to compare)
    assert not any(
        "clocks are offset" in w or "different steps" in w or "different numbers" in w for w in res.warnings
    )
    assert "rank 0: no collectives found — is this a distributed trace?" in res.warnings
    assert res.ranks[1].collectives["all_reduce"]["count"] == 4


def test_a_diff_across_profiler_levels_shows_no_phantom_added_or_removed_ops(level0, shared_fixtures):
    """Level1 and Level0 of the same model and step run the same ops: the diff may change their
    times, but must not list Conv2D1… as added and Conv2D as deleted."""
    from fsdpbench.analysis.compare.diff import diff_analyses

    d = diff_analyses(analyze([LEVEL1], workers=1), level0, base_label="level1", test_label="level0")
    assert len(d.ops) == 33
    assert not [r.op_type for r in d.ops if r.change in ("added", "deleted")]

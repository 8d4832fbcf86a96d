"""Ascend op types from kernel names: the version digits CANN's operator list gives a type are kept,
only the Level0 instance counter is removed; CANN's deprecated aliases (``ReduceSumD`` for ``ReduceSum``)
are one operator in a diff. Every entry of both tables is tested (the tables cite their source)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.trace.ascend_ops import DIGIT_OP_TYPES, OP_ALIASES, canonical_op_type, op_type_from_name


@pytest.mark.parametrize("op_type", sorted(DIGIT_OP_TYPES))
def test_a_type_ending_in_a_digit_keeps_it_with_and_without_an_instance_counter(op_type):
    assert op_type[-1].isdigit()
    assert op_type_from_name(op_type) == op_type  # no counter
    assert op_type_from_name(f"{op_type}7") == op_type  # Level0: type + instance counter
    assert op_type_from_name(f"{op_type}123") == op_type
    assert op_type_from_name(f"aclnnX_{op_type}AiCore_{op_type}") == op_type  # aclnn kernel name


def test_names_from_real_level0_exports():
    """Names copied from the Level0 exports of Ascend/msinsight (text and db, 2024 and 2025) with the
    op type the Level1 export of the same run gives them."""
    level1_type = {
        "Conv2D1": "Conv2D",
        "ReduceSum7": "ReduceSum",
        "MaxPoolWithArgmaxV114": "MaxPoolWithArgmaxV1",
        "LogSoftmaxV237": "LogSoftmaxV2",
        "AxpyV2102": "AxpyV2",
        "TopKV241": "TopKV2",
        "Relu13": "Relu",
        "aclnnMm_MatMulCommon_MatMulV2": "MatMulV2",
        "aclnnTopk_TopkV2_TopKV2": "TopKV2",
        "atomic_memset-1_271": "MemSet",
        "atomic_memset-1_394_0": "MemSet",
        "Conv2DBackpropFilter10_MemSet": "MemSet",
        "trans_TransData_12": "TransData",
        "AdaptiveAvgPool2d24LeftBatchMatMulV2": "BatchMatMulV2",
        "AdaptiveAvgPool2d24RightBatchMatMulV2AdaptiveAvgPool2d24Mul": "BatchMatMulV2",
        "AdaptiveAvgPool2dGrad71LeftBatchMatmul": "BatchMatMul",
        "AdaptiveAvgPool2dGrad71Mul": "Mul",
        "AdaptiveAvgPool3d12": "AdaptiveAvgPool3d",
    }
    assert {n: op_type_from_name(n) for n in level1_type} == level1_type


def test_a_versioned_type_missing_from_the_list_keeps_one_version_digit():
    assert op_type_from_name("MatMulV3") == "MatMulV3"
    assert op_type_from_name("MatMulV31") == "MatMulV3"


def _analysis(ops: dict[str, tuple[float, int]]) -> dict:
    rank = {
        "rank": 0,
        "step_time_us": 100.0,
        "compute_us": 50.0,
        "comm_us": 0.0,
        "overlapped_us": 0.0,
        "exposed_comm_us": 0.0,
        "free_us": 50.0,
        "overlap_ratio": None,
        "collectives": {},
        "ops": [{"op_type": k, "total_us": us, "count": n, "mean_us": us / n} for k, (us, n) in ops.items()],
        "sync": {},
    }
    return {"ranks": [rank], "world_size": 1}


@pytest.mark.parametrize("alias", sorted(OP_ALIASES))
def test_a_level1_alias_and_the_level0_name_are_one_operator_in_a_diff(alias):
    op, header = OP_ALIASES[alias]
    assert header.endswith(".h") and alias != op
    d = diff_analyses(
        _analysis({alias: (30.0, 3), "Add": (5.0, 1)}), _analysis({op: (20.0, 3), "Add": (5.0, 1)})
    )
    row = next(r for r in d.ops if r.op_type == op)
    assert len(d.ops) == 2 and not [r for r in d.ops if r.change in ("added", "deleted")]
    assert (row.base.us, row.test.us, row.base.count, row.test.count) == (30.0, 20.0, 3, 3)
    assert row.change == "decreased" and row.same_as == (alias,)
    assert row.to_dict()["same_as"] == [alias] and row.label == f"{op} (= {alias})"
    assert "same_as" not in next(r for r in d.ops if r.op_type == "Add").to_dict()


NAMES_2024 = Path(__file__).parent / "fixtures" / "ascend_names_2024"


def test_every_level1_kernel_name_gives_the_profilers_own_op_type():
    """The 2024 Level1 db export types every kernel itself: the type derived from each name (as for
    Level0, which writes N/A) must be that type, or the operator CANN says it stands for."""
    ref = pd.read_csv(NAMES_2024 / "level1_rank0_names.csv", keep_default_na=False)
    assert len(ref) == 295 and "N/A" not in set(ref["op_type"])
    wrong = [
        (n, t, op_type_from_name(n))
        for n, t in zip(ref["name"], ref["op_type"], strict=True)
        if op_type_from_name(n) != canonical_op_type(t)
    ]
    assert not wrong


def test_level0_and_level1_of_one_run_give_the_same_op_types_and_counts():
    """Same model and step at both levels: the Level0 types derived from the names, counted, equal
    Level1's own types (CANN aliases as one operator), type by type."""
    l0 = pd.read_csv(NAMES_2024 / "level0_rank0_names.csv", keep_default_na=False)
    l1 = pd.read_csv(NAMES_2024 / "level1_rank0_names.csv", keep_default_na=False)
    assert set(l0["op_type"]) == {"N/A"}
    ours = l0.assign(t=l0["name"].map(op_type_from_name)).groupby("t")["count"].sum()
    theirs = l1.assign(t=l1["op_type"].map(canonical_op_type)).groupby("t")["count"].sum()
    assert len(theirs) == 31 and ours.to_dict() == theirs.to_dict()


def test_the_diff_reports_print_the_merged_names():
    import io

    from rich.console import Console

    from fsdpbench.report.diff_md import diff_markdown
    from fsdpbench.report.terminal import render_diff

    d = diff_analyses(_analysis({"TopKD": (30.0, 1)}), _analysis({"TopKV2": (20.0, 1)}))
    assert "| TopKV2 (= TopKD) |" in diff_markdown(d)
    console = Console(width=120, record=True, file=io.StringIO(), color_system=None)
    render_diff(d, console)
    assert "TopKV2 (= TopKD)" in console.export_text()

"""Ascend op types from kernel names: the version digits CANN's operator list gives a type are kept,
only the Level0 instance counter is removed; CANN's deprecated aliases (``ReduceSumD`` for ``ReduceSum``)
are one operator in a diff. Every entry of both tables is tested (the tables cite their source)."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.diff import compare
from fsdpbench.trace.ascend import op_type_from_name
from fsdpbench.trace.ascend_ops import DIGIT_OP_TYPES, OP_ALIASES


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
    d = compare(_analysis({alias: (30.0, 3), "Add": (5.0, 1)}), _analysis({op: (20.0, 3), "Add": (5.0, 1)}))
    row = next(r for r in d.ops if r.op_type == op)
    assert len(d.ops) == 2 and not [r for r in d.ops if r.change in ("added", "deleted")]
    assert (row.base.us, row.test.us, row.base.count, row.test.count) == (30.0, 20.0, 3, 3)
    assert row.change == "decreased" and row.same_as == (alias,)
    assert row.to_dict()["same_as"] == [alias] and row.label == f"{op} (= {alias})"
    assert "same_as" not in next(r for r in d.ops if r.op_type == "Add").to_dict()

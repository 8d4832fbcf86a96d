"""The report's configuration shows what each arm actually ran with (manifest.json ``arm_runtime``):
checked against the manifest as the test reads it itself, on a hand-written NPU-like manifest and on the
shared real profiled run."""

from __future__ import annotations

import orjson
import pytest

from fsdpbench.report import load_run, write_report
from fsdpbench.report.blocks import Table, blocks_html, blocks_markdown
from fsdpbench.report.build import RUNTIME_HEADER, _configuration
from helpers import make_run


def _runtime_table(blocks: list) -> Table:
    (table,) = [b for b in blocks if isinstance(b, Table) and b.headers == RUNTIME_HEADER]
    return table


def _rows(table: Table) -> dict[str, dict[str, str]]:
    return {row[0]: dict(zip(table.headers, row, strict=True)) for row in table.rows}


def test_runtime_table_shows_each_arms_dtype_optimizer_experts_and_environment():
    manifest = {
        "arms": [{"label": "torch"}, {"label": "hyper"}],
        "arm_runtime": {
            "torch": {
                "param_dtype": "bfloat16",
                "param_dtype_source": "device default",
                "optimizer_foreach": True,
                "optimizer_ran": ["foreach"],
                "float32_matmul_precision": "high",
                "experts_impl": "npu",
                "npu_k_grouped_matmul": False,
                "npu_k_grouped_probe_dtype": "bfloat16",
                "deltanet_impl": "chunked PyTorch, float32",
                "npu_matmul_allow_hf32": False,
                "prefetch_verified_after_steps": True,
                "environment": {"ACL_OP_INIT_MODE": "1", "MULTI_STREAM_MEMORY_REUSE": "2"},
            },
            "hyper": {  # a manifest from before npu_k_grouped_matmul; a launch that died before its steps
                "param_dtype": "float32",
                "param_dtype_source": "arm",
                "optimizer_foreach": None,
                "optimizer_ran": None,
                "float32_matmul_precision": "highest",
                "experts_impl": "loop",
                "environment": {},
            },
        },
    }
    data = type("D", (), {"manifest": manifest, "statuses": []})()
    rows = _rows(_runtime_table(_configuration(data)))
    assert rows["torch"] == {
        "arm": "torch",
        "param dtype": "bfloat16 (device default)",
        "optimizer": "foreach=True, ran foreach",
        "experts": "npu",
        "K-grouped mm": "no (per-expert fallback) (checked in bfloat16)",
        "gated deltanet": "chunked PyTorch, float32",
        "fp32 matmul": "high, HF32 off",
        "prefetch lists": "as set (checked after the steps)",
        "environment": "ACL_OP_INIT_MODE=1 MULTI_STREAM_MEMORY_REUSE=2",
    }
    assert rows["hyper"] == {
        "arm": "hyper",
        "param dtype": "float32 (arm)",
        "optimizer": "foreach=unset, ran —",
        "experts": "loop",
        "K-grouped mm": "—",
        "gated deltanet": "—",
        "fp32 matmul": "highest",
        "prefetch lists": "—",
        "environment": "—",
    }
    # the arms table shows the dtype each arm ran with where the device default replaced its option (seen in
    # a CUDA run: param_dtype float32 in the arm, bfloat16 in the launch)
    manifest["arms"] = [
        {"label": "torch", "param_dtype": "float32"},
        {"label": "hyper", "param_dtype": "float32"},
    ]
    (arms_table,) = [
        b for b in _configuration(data) if isinstance(b, Table) and b.headers == ["arm", "param_dtype"]
    ]
    assert arms_table.rows == [
        ["torch", "bfloat16 (device default; option float32)"],
        ["hyper", "float32"],
    ]
    # a manifest without arm_runtime (runs before issue 22) has no such table
    del manifest["arm_runtime"]
    assert not [b for b in _configuration(data) if isinstance(b, Table) and b.headers == RUNTIME_HEADER]


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_runtime_table_of_a_real_profiled_run_matches_its_manifest(profiled_ab_run):
    """The shared ``torch,torch:prefetch=1`` run: one row per arm, each cell the worker's own record."""
    manifest = orjson.loads((profiled_ab_run / "manifest.json").read_bytes())
    runtime = manifest["arm_runtime"]
    assert set(runtime) == {a["label"] for a in manifest["arms"]}
    blocks = _configuration(load_run(profiled_ab_run))  # read-only: the fixture is shared
    table = _runtime_table(blocks)
    rows = _rows(table)
    assert list(rows) == list(runtime)
    for label, facts in runtime.items():
        row = rows[label]
        assert row["param dtype"] == f"{facts['param_dtype']} ({facts['param_dtype_source']})"
        assert (
            row["optimizer"]
            == f"foreach={facts['optimizer_foreach']}, ran {', '.join(facts['optimizer_ran'])}"
        )
        assert row["experts"] == facts["experts_impl"]
        assert row["fp32 matmul"] == facts["float32_matmul_precision"]  # CPU: no HF32 switch
        assert facts["npu_matmul_allow_hf32"] is None and facts["npu_k_grouped_probe_dtype"] is None
        assert row["gated deltanet"] == facts["deltanet_impl"] == "chunked PyTorch, float32"  # no fla on CPU
        assert (
            facts["prefetch_verified_after_steps"] is True
        )  # torch arms: FSDP2's lists read after the steps
        assert row["prefetch lists"] == "as set (checked after the steps)"
        assert facts["npu_k_grouped_matmul"] is None and row["K-grouped mm"] == "—"  # CPU: no NPU check
        for name, value in facts["environment"].items():
            assert f"{name}={value}" in row["environment"]
    # both renderers carry the table, right after the per-arm sharding/prefetch table
    assert (
        blocks.index(table)
        == next(i for i, b in enumerate(blocks) if isinstance(b, Table) and "sharding call" in b.headers) + 1
    )
    markdown, page = blocks_markdown("r", blocks), blocks_html("r", blocks)
    assert "| " + " | ".join(RUNTIME_HEADER) + " |" in markdown
    first = next(iter(runtime))
    assert f"<td>{rows[first]['optimizer']}</td>" in page


def test_a_schema_1_manifest_reads_its_prefetch_check_under_the_schema_2_name(tmp_path):
    """Schema 1 named the check made after all the steps ``prefetch_verified_after_warmup``; it reads as
    ``prefetch_verified_after_steps``, and the report shows it."""
    run = make_run(tmp_path, profiled=False)
    manifest = orjson.loads((run / "manifest.json").read_bytes())
    assert manifest["schema_version"] == 1
    manifest["arm_runtime"] = {
        "torch": {"param_dtype": "float32", "prefetch_verified_after_warmup": True},
        "hyper": {"param_dtype": "float32", "prefetch_verified_after_warmup": None},
    }
    (run / "manifest.json").write_bytes(orjson.dumps(manifest))
    runtime = load_run(run).manifest["arm_runtime"]
    assert runtime == {
        "torch": {"param_dtype": "float32", "prefetch_verified_after_steps": True},
        "hyper": {"param_dtype": "float32", "prefetch_verified_after_steps": None},
    }
    write_report(run)
    md = (run / "report.md").read_text()
    assert "as set (checked after the steps)" in md and "| not checked |" in md

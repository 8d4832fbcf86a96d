"""``fsdpbench model``: the reported figures and its handling of bad input."""

from __future__ import annotations

import orjson
import pytest

from fsdpbench import cli
from fsdpbench.config import preset_full
from fsdpbench.model import flops_per_token
from helpers import run_cli


def _json(capsys, *args: str) -> dict:
    assert cli.main(["model", "--json", *args]) == 0
    return orjson.loads(capsys.readouterr().out)


def test_full_config_reports_34_660_610_688_parameters_and_the_documented_keys(capsys):
    report = _json(capsys, "--layers", "40", "--seq-len", "4096")
    assert report["total_params"] == 34_660_610_688
    for key in ("params_per_layer", "flops_per_token", "bytes_per_layer", "per_rank_memory_bytes"):
        assert key in report
    assert report["flops_per_token"] == flops_per_token(preset_full(), 4096)
    # bf16: 2 bytes per parameter (reference/qwen35_arch.md §4: 1,685,401,984 bytes per GDN layer)
    assert report["bytes_per_layer"]["linear_attention"] == 1_685_401_984


def test_per_rank_memory_is_sharded_state_plus_unsharded_layer(capsys):
    report = _json(capsys, "--mesh", "8", "--prefetch", "1")
    mem, n = report["per_rank_memory_bytes"], report["total_params"]
    shard = -(-n // 8)
    assert mem["params"] == mem["grads"] == 4 * shard  # fp32 master copy, sharded
    assert mem["optimizer_states"] == 2 * 4 * shard  # AdamW exp_avg + exp_avg_sq
    assert mem["total"] == sum(v for k, v in mem.items() if k != "total")
    hsdp = _json(capsys, "--mesh", "2x4")
    assert hsdp["per_rank_memory_bytes"]["params"] == 4 * -(-n // 4)
    layer = hsdp["comm_bytes_per_layer"]["linear_attention"]
    assert layer["all_reduce_bytes"] == layer["reduce_scatter_bytes"] / 4


def test_layers_and_set_override_fields(capsys):
    report = _json(
        capsys,
        "--preset",
        "full",
        "--layers",
        "8",
        "--set",
        "num_experts=64",
        "--set",
        "num_experts_per_tok=4",
    )
    assert report["config"]["num_hidden_layers"] == 8
    assert report["layer_counts"] == {"linear_attention": 6, "full_attention": 2}
    assert report["config"]["num_experts"] == 64


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0"], "num_hidden_layers must be an integer >= 1"),
        (["--set", "num_experts_per_tok=300"], "num_experts_per_tok (300) must be <= model.num_experts"),
        (
            ["--set", "num_attention_heads=6", "--set", "num_key_value_heads=2"],
            "hidden_size (2048) must be divisible",
        ),
        (["--seq-len", "0"], "seq_len must be an integer >= 1"),
        (["--set", "num_expert=4"], "did you mean num_experts"),
        (["--set", "num_experts=many"], "--set num_experts expects int"),
    ],
)
def test_bad_input_is_one_error_line_naming_the_field(capsys, args, message):
    assert cli.main(["model", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_bad_input_from_the_command_line_prints_no_traceback():
    proc = run_cli("model", "--layers", "0", timeout=60)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "fsdpbench model: error: model.num_hidden_layers must be an integer >= 1, got 0"
    )

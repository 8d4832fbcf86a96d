"""Multi-rank gloo launches of the torch arm: exactness against single-process training, collective
counts per step and HSDP 2x2 (two "nodes" on loopback: test_multinode.py). Each launch serves several
assertions."""

from __future__ import annotations

import orjson
import pytest

from fsdpbench.config import preset_tiny
from helpers import assert_matches_reference, free_port, run_cli
from process_group_checks import check_hsdp_groups
from reference import LR, SEQ, STEPS

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def _run(tmp_path, *extra: str, nproc: int = 2, timeout: float = 240):
    proc = run_cli(
        "run",
        "--nproc",
        str(nproc),
        "--warmup",
        "0",
        "--steps",
        str(STEPS),
        "--seq-len",
        str(SEQ),
        "--lr",
        str(LR),
        "--count-collectives",
        "--dump-params",
        "--no-report",
        "--out",
        str(tmp_path),
        "--master-port",
        str(free_port()),
        *extra,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = tmp_path.glob("run_*")
    steps = [orjson.loads(line) for line in (run_dir / "steps.jsonl").read_bytes().splitlines()]
    return run_dir, steps


def test_torch_arm_equals_single_process_training_and_issues_2n_plus_1_all_gathers(tmp_path):
    run_dir, steps = _run(tmp_path, "--arm", "torch")
    layers = preset_tiny().num_hidden_layers
    for s in steps:  # N layers + root: N forward + N backward re-gathers + 1 root; N + 1 reduce-scatters
        assert s["collectives"] == {"all_gather": 2 * layers + 1, "reduce_scatter": layers + 1}, s
    assert_matches_reference(run_dir, steps, "torch", rows=2)
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["environment"]["process_group_backend"] == "gloo"
    assert manifest["order"] == [{"round": 0, "arm": "torch"}]
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert (
        summary["arms"]["torch"]["status"] == "ok"
        and summary["arms"]["torch"]["rounds"][0]["n_steps"] == STEPS
    )


def test_hsdp_2x2_on_4_ranks_adds_one_all_reduce_per_unit_and_matches_reference(tmp_path):
    # the profiled launch serves the per-process-group analysis (shard vs replicate: process_group_checks.py)
    run_dir, steps = _run(tmp_path, "--arm", "torch:mesh=2x2", "--profile", nproc=4, timeout=280)
    steps = [s for s in steps if s["kind"] == "timed"]
    layers = preset_tiny().num_hidden_layers
    check_hsdp_groups(run_dir / "profiles" / "torch-mesh2x2", layers)
    for s in steps:
        assert s["collectives"] == {
            "all_gather": 2 * layers + 1,
            "reduce_scatter": layers + 1,
            "all_reduce": layers + 1,
        }, s
    assert_matches_reference(run_dir, steps, "torch-mesh2x2", rows=4)

"""The hyper arm (hyper_parallel ``fully_shard``): exact parity with the torch arm and with unsharded
training, per-parameter collective counts derived from the model's parameter list, and clear errors
(hyper_parallel missing, comm_fusion unavailable, shapes hyper cannot shard).

Tests that launch hyper_parallel skip when it is not installed (CI has no hyper_parallel); hyper is
never imported in the pytest process itself (its import patches torch's module hooks process-wide).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import orjson
import pytest
import torch

from fsdpbench.backends.hyper import HyperBackend, hyper_parallel_info, hyper_shard_dims
from fsdpbench.config import parse_arms, preset_full, preset_tiny
from fsdpbench.errors import ConfigError, LaunchError
from fsdpbench.model import build_model
from helpers import REPO, ab_run, free_port
from phase_checks import assert_phase_split
from reference import STEPS, reference_training

HAVE_HYPER = importlib.util.find_spec("hyper_parallel") is not None
needs_hyper = pytest.mark.skipif(
    not HAVE_HYPER, reason="hyper_parallel is not installed (optional dependency)"
)


# ------------------------------------------------------------------------------ no hyper needed


def test_setup_without_hyper_parallel_raises_launch_error_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "hyper_parallel", None)  # makes `import hyper_parallel` fail
    monkeypatch.delenv("HYPER_PARALLEL_PLATFORM", raising=False)
    with pytest.raises(LaunchError, match=r"hyper_parallel.*pip install --no-deps -e"):
        HyperBackend().setup("cpu")


def test_setup_without_pyyaml_names_the_missing_dependency(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)
    monkeypatch.delenv("HYPER_PARALLEL_PLATFORM", raising=False)
    with pytest.raises(LaunchError, match="pip install pyyaml"):
        HyperBackend().setup("cpu")


def test_cli_refuses_a_hyper_arm_when_hyper_parallel_is_hidden(tmp_path):
    code = (
        "import sys; sys.modules['hyper_parallel'] = None\n"
        "from fsdpbench.cli import main\n"
        f"sys.exit(main(['run', '--arm', 'hyper', '--out', {str(tmp_path)!r}, '--no-report']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "hyper_parallel" in lines[0] and "install" in lines[0], proc.stderr


def test_shard_dims_move_only_the_one_row_shared_expert_gate_to_dim_1():
    for cfg in (preset_tiny(), preset_full().replace(num_hidden_layers=4)):
        model = build_model(cfg, device="meta")
        for shard_size in (2, 4, 8):
            dims = hyper_shard_dims(((n, tuple(p.shape)) for n, p in model.named_parameters()), shard_size)
            moved = {n for n, d in dims.items() if d != 0}
            gates = {n for n, p in model.named_parameters() if tuple(p.shape) == (1, cfg.hidden_size)}
            assert moved == gates and all(n.endswith("shared_expert_gate.weight") for n in moved)
            assert all(dims[n] == 1 for n in moved)


def test_shard_dims_refuse_shapes_hyper_would_gather_wrongly_or_unevenly():
    with pytest.raises(ConfigError, match=r"x \[3, 4\].*dims before it are 1"):
        hyper_shard_dims([("x", (3, 4))], 2)  # dim 1 after a dim of 3: flat dim-0 gather would be wrong
    with pytest.raises(ConfigError, match=r"y \[3\].*uneven"):
        hyper_shard_dims([("y", (3,))], 2)
    assert hyper_shard_dims([("z", (3,))], 1) == {"z": 0}  # one shard: nothing to split


def test_hyper_parallel_info_is_none_when_not_installed(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    assert hyper_parallel_info() is None


# ------------------------------------------------------------------------------ real hyper_parallel


def expected_hyper_counts(hsdp: bool) -> dict[str, int]:
    """hyper issues one collective per parameter (fsdp_backends.md §3): with layers resharded after
    forward and the root kept, AG = 2·ΣP_layer + R, RS = ΣP_layer + R (and AR = RS for HSDP)."""
    model = build_model(preset_tiny(), device="meta")
    per_layer = sum(len(list(layer.parameters())) for layer in model.model.layers)
    root = len(list(model.parameters())) - per_layer
    counts = {"all_gather": 2 * per_layer + root, "reduce_scatter": per_layer + root}
    if hsdp:
        counts["all_reduce"] = per_layer + root
    return counts


def _final_params(run_dir, arm: str) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "launches" / arm / "round0" / "final_params.pt")


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[n] - b[n]).abs().max().item() for n in a)


@needs_hyper
@pytest.mark.distributed
@pytest.mark.hyper
@pytest.mark.timeout(300)
def test_hyper_arm_matches_torch_arm_exactly_on_2_ranks_with_per_parameter_collectives(tmp_path):
    """raf=True (exercises the gloo all-gather fix) and prefetch 1, both arms."""
    arms = "torch:prefetch=1,hyper:prefetch=1"
    torch_arm, hyper_arm = (a.label for a in parse_arms(arms))
    run_dir, by_arm = ab_run(tmp_path, arms, nproc=2, timeout=280)
    assert len(by_arm[hyper_arm]) == len(by_arm[torch_arm]) == STEPS
    hyper_losses = [s["loss"] for s in by_arm[hyper_arm]]
    ref_losses, ref_params = reference_training(rows=2)
    assert hyper_losses == pytest.approx([s["loss"] for s in by_arm[torch_arm]], abs=1e-6)
    assert hyper_losses == pytest.approx(ref_losses, abs=1e-6)
    assert _max_diff(_final_params(run_dir, hyper_arm), _final_params(run_dir, torch_arm)) <= 1e-6
    assert _max_diff(_final_params(run_dir, hyper_arm), ref_params) <= 1e-6

    layers = preset_tiny().num_hidden_layers
    for s in by_arm[torch_arm]:
        assert s["collectives"] == {"all_gather": 2 * layers + 1, "reduce_scatter": layers + 1}
    for s in by_arm[hyper_arm]:
        assert s["collectives"] == expected_hyper_counts(hsdp=False)
    for arm in (torch_arm, hyper_arm):
        assert_phase_split(by_arm[arm], world=2)

    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["parity"]["valid"] is True
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["environment"]["hyper_parallel"]["commit"] == hyper_parallel_info()["commit"]
    # the same optimizer implementation for both: hyper's DTensor would take the per-parameter path
    # by default (not in torch.optim.optimizer._foreach_supported_types); foreach is passed explicitly
    for arm in (torch_arm, hyper_arm):
        ran = manifest["arm_runtime"][arm]
        assert ran["optimizer_foreach"] is True and ran["optimizer_ran"] == ["foreach"]


@needs_hyper
@pytest.mark.distributed
@pytest.mark.hyper
@pytest.mark.timeout(300)
def test_hyper_hsdp_2x2_on_4_ranks_matches_unsharded_training_and_all_reduces_per_parameter(tmp_path):
    run_dir, by_arm = ab_run(tmp_path, "hyper:mesh=2x2", nproc=4, timeout=280, command="run")
    steps = by_arm["hyper-mesh2x2"]
    ref_losses, ref_params = reference_training(rows=4)
    assert [s["loss"] for s in steps] == pytest.approx(ref_losses, abs=1e-6)
    assert _max_diff(_final_params(run_dir, "hyper-mesh2x2"), ref_params) <= 1e-6
    for s in steps:
        assert s["collectives"] == expected_hyper_counts(hsdp=True)


@needs_hyper
@pytest.mark.timeout(120)
def test_comm_fusion_on_a_hyper_parallel_without_it_is_a_config_error_naming_the_option(tmp_path):
    """One gloo rank in a fresh interpreter (hyper patches torch process-wide)."""
    code = """
import os, sys, torch.distributed as dist
from fsdpbench.backends.hyper import HyperBackend
from fsdpbench.config import Arm, preset_tiny
from fsdpbench.errors import ConfigError
from fsdpbench.model import build_model
backend = HyperBackend(); backend.setup("cpu")
import inspect
from hyper_parallel.core.fully_shard import fully_shard
if "comm_fusion" in inspect.signature(fully_shard).parameters:
    sys.exit(4)
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = backend.init_mesh("cpu", (1,))
try:
    backend.apply(build_model(preset_tiny(), device="meta"), mesh, Arm(backend="hyper", comm_fusion=True))
except ConfigError as exc:
    print(exc)
    from fsdpbench.run.process_exit import exit_without_teardown
    exit_without_teardown(3)  # gloo's threads can abort the interpreter's own teardown
"""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=110, env=env, cwd=REPO
    )
    if proc.returncode == 4:
        pytest.skip("the installed hyper_parallel's fully_shard has comm_fusion")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "comm_fusion" in proc.stdout and "no comm fusion in fully_shard" in proc.stdout

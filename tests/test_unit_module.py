"""The ``unit=module`` arm option: every parameter-holding module its own shard unit.

Checked on 2 gloo ranks against collective counts derived here from the model's module tree (forward
pre-hooks on an unsharded single-process model, not from fsdpbench's plan), in the per-step counts and in
the profiled step's analysis, and against the independent single-process reference (fp32 SGD, 1e-6).
"""

from __future__ import annotations

import importlib.util

import pytest

from fsdpbench.analysis import analyze
from fsdpbench.backends.plan import module_units
from fsdpbench.config import Arm, parse_arms, preset_tiny
from fsdpbench.errors import ConfigError
from fsdpbench.model import build_model
from helpers import ab_run, assert_matches_reference, called_parameter_owners, run_cli
from reference import STEPS


def _called_param_modules() -> tuple[int, int]:
    """(modules with parameters whose forward runs inside the decoder layers, the same outside them),
    from forward pre-hooks on one unsharded forward of the tiny model."""
    model, ran = called_parameter_owners()
    in_layers = {id(m) for layer in model.model.layers for m in layer.modules()}
    return sum(1 for m in ran if id(m) in in_layers), sum(1 for m in ran if id(m) not in in_layers)


def test_module_units_hold_every_parameter_exactly_once_and_only_modules_that_run():
    model = build_model(preset_tiny())
    units = module_units(model)
    seen: list[int] = []
    for _, unit in units:  # what a unit owns: its parameters not held by a unit inside it
        inner = {
            id(p)
            for _, u in units
            if u is not unit and any(u is m for m in unit.modules())
            for p in u.parameters()
        }
        seen += [id(p) for p in unit.parameters() if id(p) not in inner]
    assert sorted(seen) == sorted(id(p) for p in model.parameters())
    in_layer, outside = _called_param_modules()
    assert len(units) == in_layer + outside  # the GDN conv1d (never called) travels with its parent


def test_unit_option_in_label_and_refused_for_deepspeed():
    assert [a.label for a in parse_arms("torch:unit=module,fsdp1:unit=module,torch:unit=layer")] == [
        "torch-unitmodule",
        "fsdp1-unitmodule",
        "torch",
    ]
    with pytest.raises(ConfigError, match="unit=module.*DeepSpeed ZeRO-3 has no wrapping knob"):
        Arm(backend="deepspeed", unit="module")
    with pytest.raises(ConfigError, match="unit='block'; choose one of: layer, module"):
        Arm(backend="torch", unit="block")  # type: ignore[arg-type]


def test_deepspeed_unit_module_is_one_line_before_anything_launches(tmp_path):
    proc = run_cli("ab", "--arms", "torch,deepspeed:unit=module", "--out", str(tmp_path), timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "unit=module" in lines[0], proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_unit_module_gives_derived_counts_and_matches_single_process_training(tmp_path):
    arms = "torch:unit=module,fsdp1:unit=module,torch:unit=module:prefetch=1"
    run_dir, steps = ab_run(tmp_path, arms, "--profile", timeout=600)
    u, r = _called_param_modules()  # units inside the layers (resharded after forward), the root's own
    want = {"all_gather": 2 * u + r, "reduce_scatter": u + r}  # tiny: u = 59, r = 3
    for arm in ("torch-unitmodule", "fsdp1-unitmodule", "torch-prefetch1-unitmodule"):
        timed = [s for s in steps[arm] if s["kind"] == "timed"]
        assert [s["collectives"] for s in timed] == [want] * STEPS, arm
        assert_matches_reference(run_dir, timed, arm, rows=2)
        res = analyze([run_dir / "profiles" / arm])
        for rank in res.ranks:
            got = {t: c["count"] for t, c in rank.collectives.items() if c["count"]}
            assert got == want, (arm, rank.rank, got)


@pytest.mark.skipif(
    importlib.util.find_spec("hyper_parallel") is None, reason="hyper_parallel is not installed (optional)"
)
@pytest.mark.distributed
@pytest.mark.hyper
@pytest.mark.timeout(400)
def test_hyper_unit_module_nests_like_fsdp2_and_matches_single_process_training(tmp_path):
    """hyper's fully_shard nests like FSDP2 (a unit owns what no inner unit holds); it already issues one
    collective per parameter, so module units do not change its counts: 2·ΣP_i + R and ΣP_i + R."""
    run_dir, steps = ab_run(tmp_path, "hyper:unit=module", timeout=400)
    model = build_model(preset_tiny())
    in_layers = sum(1 for layer in model.model.layers for _ in layer.parameters())
    root = sum(1 for _ in model.parameters()) - in_layers
    want = {"all_gather": 2 * in_layers + root, "reduce_scatter": in_layers + root}
    assert [s["collectives"] for s in steps["hyper-unitmodule"]] == [want] * STEPS
    assert_matches_reference(run_dir, steps["hyper-unitmodule"], "hyper-unitmodule", rows=2)

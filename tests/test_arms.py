"""The fsdp1 and deepspeed arms and arms in another Python environment.

Each new backend is checked against the independent single-process reference (fp32 SGD, 1e-6) on 2
gloo ranks with reshard on and off and with prefetch, against collective counts derived from the model's
module and parameter lists, and for every refused option combination (one line, nothing launched).
A ``python=`` arm runs in a second environment the test creates, and its facts land in the manifest.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import torch

from conftest import REPO, free_port, run_cli
from fsdpbench.config import Arm, RunConfig, parse_arms, preset_tiny
from fsdpbench.errors import ConfigError, LaunchError
from fsdpbench.model import build_model
from phase_checks import assert_phase_split
from reference import LR, SEQ, STEPS, reference_grad_norms, reference_training

HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(not HAVE_DEEPSPEED, reason="deepspeed is not installed (optional extra)")
# DeepSpeed JIT-compiles a communication op on first use (1.5-2.5 min): keep one cache for the session.
DS_ENV = {
    "TORCH_EXTENSIONS_DIR": os.environ.get(
        "TORCH_EXTENSIONS_DIR", str(REPO / ".ci-cache" / "torch_extensions")
    )
}


def _ab(tmp_path: Path, arms: str, *extra: str, nproc: int = 2, timeout: float = 400, env=None):
    """One ``ab`` run of ``arms`` (1 round of STEPS steps each); returns (run dir, steps by arm)."""
    proc = run_cli(
        "ab",
        "--arms",
        arms,
        "--nproc",
        str(nproc),
        "--rounds",
        "1",
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
        "--no-profile",
        "--out",
        str(tmp_path),
        "--master-port",
        str(free_port()),
        *extra,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = tmp_path.glob("ab_*")
    by_arm: dict[str, list[dict]] = {}
    for line in (run_dir / "steps.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        by_arm.setdefault(rec["arm"], []).append(rec)
    return run_dir, by_arm


def _assert_matches_reference(run_dir: Path, steps: list[dict], arm: str, rows: int) -> None:
    ref_losses, ref_params = reference_training(rows)
    assert [s["loss"] for s in steps] == pytest.approx(ref_losses, abs=1e-6), arm
    params = torch.load(run_dir / "launches" / arm / "round0" / "final_params.pt")
    assert params.keys() == ref_params.keys(), arm
    worst = max((params[n] - ref_params[n]).abs().max().item() for n in params)
    assert worst <= 1e-6, f"{arm}: max |p - p_ref| = {worst}"


def _called_parameter_owners() -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    """(the tiny model, its modules that own parameters and whose forward runs), found with
    forward-pre-hooks on one unsharded single-process forward."""
    from fsdpbench.data import global_batch
    from fsdpbench.model import init_full_tensor

    cfg = preset_tiny()
    model = build_model(cfg, device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_full_tensor(name, tuple(p.shape), 0))
    called: set[int] = set()
    for module in model.modules():
        module.register_forward_pre_hook(lambda m, args: called.add(id(m)))
    ids = global_batch(0, 0, 1, SEQ, cfg.vocab_size)
    model(ids, labels=ids)
    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    return model, [m for m in owners if id(m) in called]


def _called_modules_with_parameters() -> int:
    """M: modules that own parameters and whose forward runs, counted with forward-pre-hooks on an
    unsharded single-process forward. DeepSpeed gathers per module call; a module never called (the
    GDN's ``conv1d``, whose weight its parent uses directly) is gathered with its caller."""
    return len(_called_parameter_owners()[1])


# ------------------------------------------------------------------------------------------ fsdp1


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_fsdp1_equals_single_process_training_with_reshard_on_off_and_prefetch(tmp_path):
    run_dir, steps = _ab(tmp_path, "fsdp1,fsdp1:reshard_after_forward=false,fsdp1:prefetch=1")
    n = preset_tiny().num_hidden_layers
    expected = {  # units = N layers + root; the root is never freed after forward (like FSDP2's plan)
        "fsdp1": {"all_gather": 2 * n + 1, "reduce_scatter": n + 1},
        "fsdp1-raf0": {"all_gather": n + 1, "reduce_scatter": n + 1},  # SHARD_GRAD_OP: no re-gather
        "fsdp1-prefetch1": {"all_gather": 2 * n + 1, "reduce_scatter": n + 1},  # earlier, not more
    }
    assert set(steps) == set(expected)
    for arm, want in expected.items():
        assert [s["collectives"] for s in steps[arm]] == [want] * STEPS, arm
        _assert_matches_reference(run_dir, steps[arm], arm, rows=2)
        assert_phase_split(steps[arm], world=2)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["parity"]["valid"], summary["parity"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_fsdp1_hsdp_2x2_adds_one_all_reduce_per_unit_and_matches_reference(tmp_path):
    run_dir, steps = _ab(tmp_path, "fsdp1:mesh=2x2", nproc=4)
    n = preset_tiny().num_hidden_layers
    want = {"all_gather": 2 * n + 1, "reduce_scatter": n + 1, "all_reduce": n + 1}
    assert [s["collectives"] for s in steps["fsdp1-mesh2x2"]] == [want] * STEPS
    _assert_matches_reference(run_dir, steps["fsdp1-mesh2x2"], "fsdp1-mesh2x2", rows=4)


# -------------------------------------------------------------------------------------- deepspeed


@needs_deepspeed
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_deepspeed_equals_single_process_training_with_reshard_on_off_and_prefetch(tmp_path):
    run_dir, steps = _ab(
        tmp_path,
        "deepspeed,deepspeed:reshard_after_forward=false,deepspeed:prefetch=1",
        timeout=800,
        env=DS_ENV,
    )
    m = _called_modules_with_parameters()
    assert m == 62  # tiny: 65 modules own parameters; the 3 GDN conv1d modules are never called
    # ZeRO-3 records its module trace in steps 0-1; from step 2 on: one all-gather per module in
    # forward (+ one more in backward when resharding), one reduce-scatter bucket, one norm all-reduce
    assert steps["deepspeed"][2]["collectives"] == {"all_gather": 2 * m, "reduce_scatter": 1, "all_reduce": 1}
    assert steps["deepspeed-raf0"][2]["collectives"] == {
        "all_gather": m,
        "reduce_scatter": 1,
        "all_reduce": 1,
    }
    # prefetch coalesces a bucket's parameters into one all-gather: fewer calls, same parameters
    assert steps["deepspeed-prefetch1"][2]["collectives"]["all_gather"] < m
    for arm in steps:
        _assert_matches_reference(run_dir, steps[arm], arm, rows=2)
        assert_phase_split(steps[arm], world=2)  # marks around engine.backward and engine.step
    ref_norms = reference_grad_norms(rows=2)  # DeepSpeed's own global norm, reported as the grad norm
    for arm in steps:
        assert [s["grad_norm"] for s in steps[arm]] == pytest.approx(ref_norms, rel=1e-5), arm
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    ds = manifest["backends"]["deepspeed"]  # each arm's own backend facts
    assert ds["library"] == "deepspeed" and ds["config"]["gradient_clipping"] == 0.0
    assert ds["config"]["zero_optimization"]["stage3_param_persistence_threshold"] == 0
    assert manifest["environment_variables"]["TORCH_EXTENSIONS_DIR"] == DS_ENV["TORCH_EXTENSIONS_DIR"]
    for arm in steps:  # DeepSpeed wraps the run's optimizer: the foreach path it ran is still seen
        ran = manifest["arm_runtime"][arm]
        assert ran["optimizer_class"] == "torch.optim.sgd.SGD" and ran["optimizer_ran"] == ["foreach"]


def test_deepspeed_config_is_fair_and_maps_the_shared_options():
    from fsdpbench.backends.deepspeed_zero3 import deepspeed_config

    base = deepspeed_config(Arm(backend="deepspeed"), largest_layer_numel=1000)
    zero = base["zero_optimization"]
    assert (
        base["gradient_clipping"] == 0.0
        and zero["stage"] == 3
        and zero["stage3_param_persistence_threshold"] == 0
    )
    assert zero["stage3_max_reuse_distance"] == 0 and zero["stage3_prefetch_bucket_size"] == 0
    assert not zero["overlap_comm"] and "bf16" not in base
    pre = deepspeed_config(
        parse_arms("deepspeed:prefetch=2:reduce_bucket_size=5e6")[0], largest_layer_numel=1000
    )
    assert (
        pre["zero_optimization"]["stage3_prefetch_bucket_size"] == 2000
        and pre["zero_optimization"]["overlap_comm"]
    )
    assert pre["zero_optimization"]["reduce_bucket_size"] == 5_000_000  # the arm's own knob, as given
    keep = deepspeed_config(Arm(backend="deepspeed", reshard_after_forward=False), 1000)["zero_optimization"]
    assert keep["stage3_max_reuse_distance"] >= 10**12 and keep["stage3_max_live_parameters"] >= 10**12
    bf16 = deepspeed_config(Arm(backend="deepspeed", param_dtype="bfloat16"), 1000)
    assert bf16["bf16"] == {"enabled": True} and bf16["communication_data_type"] == "fp32"


def test_deepspeed_knobs_are_allow_listed_and_recorded_with_the_arm():
    arm = parse_arms("deepspeed:overlap_comm=true:stage3_max_live_parameters=1e8")[0]
    assert arm.backend_options == {"overlap_comm": True, "stage3_max_live_parameters": 100_000_000}
    assert RunConfig.from_dict(RunConfig(arms=[arm]).to_dict()).arms[0].backend_options == arm.backend_options
    with pytest.raises(ConfigError, match="unknown option 'reduce_bucket_size'"):
        parse_arms("torch:reduce_bucket_size=1")


def test_deepspeed_setup_without_deepspeed_says_how_to_install(monkeypatch):
    from fsdpbench.backends.deepspeed_zero3 import DeepSpeedZero3Backend

    monkeypatch.setitem(sys.modules, "deepspeed", None)
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    with pytest.raises(LaunchError, match=r"pip install deepspeed"):
        DeepSpeedZero3Backend().setup("cpu")


def test_extension_cache_defaults_under_out_and_respects_the_variable(tmp_path, monkeypatch):
    from fsdpbench.launcher import worker_environment

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    cfg = RunConfig(arms=parse_arms("torch,deepspeed"), out=str(tmp_path))
    assert worker_environment(cfg)["TORCH_EXTENSIONS_DIR"] == str(tmp_path / ".cache" / "torch_extensions")
    assert "TORCH_EXTENSIONS_DIR" not in worker_environment(
        RunConfig(arms=parse_arms("torch"), out=str(tmp_path))
    )
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/somewhere")
    assert worker_environment(cfg)["TORCH_EXTENSIONS_DIR"] == "/somewhere"


# ------------------------------------------------------------------------------- refused options


@pytest.mark.parametrize(
    "arms, needle",
    [
        ("fsdp1:prefetch=2", "FSDP1 prefetches at most one unit ahead"),
        ("fsdp1:mesh=2x1", "shard size 1; FSDP1's HYBRID_SHARD then silently becomes NO_SHARD"),
        ("deepspeed:mesh=1x2", "asks for HSDP, which DeepSpeed ZeRO-3 has no equivalent of"),
        ("deepspeed:param_dtype=float16", "float16 needs DeepSpeed's loss scaling"),
        ("deepspeed:reduce_dtype=bfloat16", "reduce_dtype=bfloat16 with float32 parameters"),
        ("deepspeed:reduce_bucket_size=1.5", "reduce_bucket_size expects int"),
        ("fsdp1:stage3_max_live_parameters=1", "unknown option 'stage3_max_live_parameters'"),
    ],
)
def test_refused_combination_is_one_line_before_anything_launches(tmp_path, arms, needle):
    proc = run_cli("ab", "--arms", f"torch,{arms}", "--out", str(tmp_path), timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    assert not list(tmp_path.iterdir()), "something was created for a refused arm"


def test_missing_deepspeed_is_one_line_with_the_install_command(tmp_path):
    code = (
        "import sys; sys.modules['deepspeed'] = None\nfrom fsdpbench.cli import main\n"
        f"sys.exit(main(['ab', '--arms', 'torch,deepspeed', '--out', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "pip install deepspeed" in lines[0], proc.stderr


# ------------------------------------------------------------------------- another environment


def _venv(where: Path, *, with_packages: bool) -> Path:
    """A venv without pip; with_packages: this environment's site-packages and this checkout's src on
    its path (a .pth file), so it has torch and fsdpbench without installing anything."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    if with_packages:
        target = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        paths = [str(REPO / "src"), *site.getsitepackages()]
        Path(target, "parent_env.pth").write_text("\n".join(paths) + "\n")
    return python


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_python_arm_runs_in_a_second_environment_and_the_manifest_records_it(tmp_path):
    other = _venv(tmp_path / "envB", with_packages=True)
    run_dir, steps = _ab(tmp_path / "out", f"torch,torch:python={other}")
    assert set(steps) == {"torch", "torch-envB"}
    for arm in steps:
        _assert_matches_reference(run_dir, steps[arm], arm, rows=2)
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    interp = manifest["interpreters"]
    assert interp["torch"]["interpreter"] == sys.executable
    assert interp["torch-envB"]["interpreter"] == str(other)
    assert Path(interp["torch-envB"]["executable"]).parent == other.parent
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    for facts in interp.values():
        assert facts["libraries"]["torch"]["version"] == torch.__version__
        assert facts["libraries"]["fsdpbench"]["commit"] == head
    assert manifest["arms"][1]["python"] == str(other)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["parity"]["valid"] and summary["parity"]["steps_compared"] == STEPS
    from fsdpbench.report import write_report

    write_report(run_dir)
    text = (run_dir / "report.md").read_text()
    assert str(other) in text and sys.executable in text  # the configuration table, side by side


def test_interpreter_without_torch_or_fsdpbench_is_refused_before_launch(tmp_path):
    bare = _venv(tmp_path / "bare", with_packages=False)
    proc = run_cli("ab", "--arms", f"torch,torch:python={bare}", "--out", str(tmp_path / "out"), timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"interpreter {bare} has no torch or fsdpbench" in lines[0]
    assert not (tmp_path / "out").exists()
    proc = run_cli(
        "ab", "--arms", "torch:python=/nonexistent/bin/python", "--out", str(tmp_path / "out"), timeout=60
    )
    assert proc.returncode == 2 and "no such interpreter" in proc.stderr and not (tmp_path / "out").exists()

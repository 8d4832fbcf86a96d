"""Issue 22 point 5, fair defaults on devices, tested on CPU against independent references: torch's own
optimizer dispatch, hand sums, the documented behaviour of torch_npu/op-plugin/fla (fakes with the real
signatures, sources cited per test), and the raw files of a run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from fsdpbench.config import RunConfig
from helpers import REPO

HAVE_HYPER = __import__("importlib").util.find_spec("hyper_parallel") is not None


# --------------------------------------------------------------------------------------------
# the optimizer: foreach passed explicitly, and the path that ran
# --------------------------------------------------------------------------------------------


class _OwnTensor(torch.Tensor):
    """A parameter type outside ``torch.optim.optimizer._foreach_supported_types`` (as hyper's DTensor)."""


def _params_and_grads(kind: type) -> list[torch.nn.Parameter]:
    params = []
    for n in (3, 5):
        p = torch.nn.Parameter(torch.ones(n).as_subclass(kind) if kind is not torch.Tensor else torch.ones(n))
        p.grad = torch.full((n,), 0.5)
        params.append(p)
    return params


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_every_parameter_type_gets_the_same_optimizer_path_once_foreach_is_explicit(monkeypatch, optimizer):
    """On CUDA/NPU torch defaults plain tensors to foreach and other parameter types to the per-parameter
    loop (torch/optim/optimizer.py ``_default_to_fused_or_foreach``). Making "cpu" a foreach device here
    reproduces that split; ``make_optimizer`` then runs the same path for both types."""
    import torch.optim.optimizer as topt

    from fsdpbench.run.worker import make_optimizer, optimizer_path

    monkeypatch.setattr(topt, "_get_foreach_kernels_supported_devices", lambda: ["cpu"])

    def ran(opt: torch.optim.Optimizer) -> list[str]:
        with optimizer_path(set()) as seen:
            opt.step()
        return sorted(seen)

    cls = torch.optim.SGD if optimizer == "sgd" else torch.optim.AdamW
    # torch's own choice when foreach is left unset: the two parameter types differ
    assert ran(cls(_params_and_grads(torch.Tensor), lr=0.1)) == ["foreach"]
    assert ran(cls(_params_and_grads(_OwnTensor), lr=0.1)) == ["per-parameter"]
    for impl in ("foreach", "per-parameter"):
        cfg = RunConfig.from_sources(
            env={}, overrides={"arms": "torch", "optimizer": optimizer, "optimizer_impl": impl}
        )
        for kind in (torch.Tensor, _OwnTensor):
            opt = make_optimizer(cfg, _params_and_grads(kind))
            assert opt.defaults["foreach"] is (impl == "foreach")
            assert ran(opt) == [impl]


def test_optimizer_path_restores_torchs_functions():
    import torch.optim.adam as adam
    import torch.optim.sgd as sgd

    from fsdpbench.run.worker import optimizer_path

    before = (sgd._multi_tensor_sgd, sgd._single_tensor_sgd, adam._multi_tensor_adam)
    with optimizer_path(set()):
        assert sgd._multi_tensor_sgd is not before[0]
    assert (sgd._multi_tensor_sgd, sgd._single_tensor_sgd, adam._multi_tensor_adam) == before


def test_optimizer_impl_is_a_checked_run_option():
    from fsdpbench.errors import ConfigError

    assert RunConfig.from_sources(env={}, overrides={"arms": "torch"}).optimizer_impl == "foreach"
    with pytest.raises(ConfigError, match=r"--optimizer-impl 'fused'; choose one of: foreach, per-parameter"):
        RunConfig.from_sources(env={}, overrides={"arms": "torch", "optimizer_impl": "fused"})


# --------------------------------------------------------------------------------------------
# bfloat16 parameters by default on NPU/GPU
# --------------------------------------------------------------------------------------------


def test_param_dtype_defaults_to_bf16_on_accelerators_and_an_arms_own_setting_wins(tmp_path):
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch,deepspeed:param_dtype=float32,fsdp1:param-dtype=float16"}
    )
    by_device = {d: [cfg.param_dtype_for(a, d) for a in cfg.arms] for d in ("cpu", "cuda", "npu")}
    assert by_device == {
        "cpu": ["float32", "float32", "float16"],
        "cuda": ["bfloat16", "float32", "float16"],
        "npu": ["bfloat16", "float32", "float16"],
    }
    shared = RunConfig.from_sources(env={}, overrides={"arms": "torch,fsdp1", "param_dtype": "float32"})
    assert [shared.param_dtype_for(a, "cuda") for a in shared.arms] == ["float32", "float32"]  # --param-dtype
    toml = tmp_path / "c.toml"
    toml.write_text('arms = ["torch", "fsdp1"]\nparam_dtype = "float32"\n')
    assert [RunConfig.from_sources(str(toml), env={}).param_dtype_for(a, "npu") for a in shared.arms] == [
        "float32",
        "float32",
    ]
    fp32 = RunConfig.from_sources(env={}, overrides={"arms": "torch", "device_param_dtype": "float32"})
    assert fp32.param_dtype_for(fp32.arms[0], "cuda") == "float32"
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))  # --resume reads the manifest
    assert [again.param_dtype_for(a, "cuda") for a in again.arms] == by_device["cuda"]


# --------------------------------------------------------------------------------------------
# fla only with bf16/fp16 inputs; the looped experts warn on an accelerator
# --------------------------------------------------------------------------------------------


def _fla_0_3_kernel(
    q,
    k,
    v,
    g=None,
    beta=None,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    cu_seqlens=None,
    head_first=False,
):
    """fla 0.2–0.3's entry check (fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py,
    ``chunk_gated_delta_rule``): ``assert q.dtype != torch.float32``."""
    assert q.dtype == k.dtype == v.dtype
    assert q.dtype != torch.float32, (
        "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16."
    )
    return "fla", None


def test_fla_is_used_for_bf16_and_fp16_cuda_inputs_only_with_one_notice(monkeypatch, caplog):
    from fsdpbench.model import deltanet

    monkeypatch.setattr(deltanet, "_fla_chunk_gated_delta_rule", lambda: (_fla_0_3_kernel, False))
    deltanet._warn_fla_dtype.cache_clear()
    for dtype in (torch.bfloat16, torch.float16):
        assert deltanet.fla_kernel_for(types.SimpleNamespace(is_cuda=True, dtype=dtype))[0] is _fla_0_3_kernel
    assert deltanet.fla_kernel_for(torch.ones(1)) is None  # CPU: the pure-PyTorch path
    with caplog.at_level("WARNING", logger="fsdpbench.model.deltanet"):
        fp32 = types.SimpleNamespace(is_cuda=True, dtype=torch.float32)
        assert deltanet.fla_kernel_for(fp32) is None and deltanet.fla_kernel_for(fp32) is None
    assert caplog.text.count("bf16/fp16 inputs only") == 1
    with pytest.raises(AssertionError, match="does not support float32"):  # what fp32 would have met
        _fla_0_3_kernel(*(torch.ones(1),) * 3)


def test_the_looped_experts_warn_once_off_cpu_and_stay_silent_on_cpu(caplog):
    from fsdpbench.model import moe

    moe._warn_loop.cache_clear()
    counts = torch.tensor([2, 0, 1])
    with caplog.at_level("WARNING", logger="fsdpbench.model.moe"):
        moe.grouped_linear(torch.ones(3, 4), torch.ones(3, 5, 4), counts, "loop")
        assert "one matmul per expert" not in caplog.text
        for _ in range(2):  # a device other than the CPU (meta runs the same ops without data)
            out = moe.grouped_linear(
                torch.ones(3, 4, device="meta"), torch.ones(3, 5, 4, device="meta"), counts, "loop"
            )
    assert out.shape == (3, 5) and caplog.text.count("one matmul per expert on meta (float32") == 1
    # and the auto choice on CUDA for fp32 activations is that loop (torch's grouped GEMM takes bf16 only)
    assert moe.resolve_experts_impl("auto", torch.device("cuda"), torch.float32) == "loop"


# --------------------------------------------------------------------------------------------
# K-grouped npu_grouped_matmul: version gate, a checked call, and the per-expert fallback
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "has"),
    [
        ("2.5.1", False),
        ("2.6.0", False),
        ("2.6.0.post2", False),
        ("2.6.0.post3", True),
        ("2.7.0", False),
        ("2.7.1", True),
        ("2.7.1rc1", False),
        ("2.8.0", True),
        ("2.9.0+git1a2b", True),
        (None, False),
    ],
)
def test_k_grouped_minimum_torch_npu_versions(version, has):
    """op-plugin 7.2's K-grouped group_type=2 ships in torch_npu 2.6.0.post3 and 2.7.1 (issue 22)."""
    from fsdpbench.model.moe import torch_npu_version_has_k_grouped

    assert torch_npu_version_has_k_grouped(version) is has


@pytest.mark.parametrize(("version", "k_grouped"), [("2.6.0", True), ("2.7.1", False), ("2.7.1", True)])
def test_expert_weight_gradient_is_right_with_or_without_k_grouping(monkeypatch, caplog, version, k_grouped):
    """The K-grouped call is used only when the version allows it and one checked call agrees with the
    loop; otherwise the weight gradient runs per expert. Either way the gradients equal F.linear's."""
    from fsdpbench.model import moe
    from helpers import fake_npu_grouped_matmul

    calls: list[dict] = []
    fake = fake_npu_grouped_matmul(calls, k_grouped=k_grouped)
    monkeypatch.setitem(
        sys.modules, "torch_npu", types.SimpleNamespace(npu_grouped_matmul=fake, __version__=version)
    )
    moe.npu_k_grouped_supported.cache_clear()
    counts = torch.tensor([3, 0, 5, 2])
    gen = torch.Generator().manual_seed(1)
    x, w, dy = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((10, 6), (4, 5, 6), (10, 5)))
    grads = []
    with caplog.at_level("WARNING", logger="fsdpbench.model.moe"):
        for impl in ("npu", "loop"):
            xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
            moe.grouped_linear(xi, wi, counts, impl).backward(dy)
            grads.append((xi.grad, wi.grad))
    for got, ref in zip(*grads, strict=True):
        torch.testing.assert_close(got, ref)
    used = version == "2.7.1" and k_grouped
    assert moe.npu_k_grouped_supported("cpu", torch.float64) is used
    k_calls = [c for c in calls if c["group_type"] == 2]
    assert len(k_calls) == (2 if used else 0)  # the checked call and the real one; a refusal records none
    assert ("K-grouped" in caplog.text) is not used
    moe.npu_k_grouped_supported.cache_clear()


@pytest.mark.parametrize("param_dtype", ["bfloat16", "float16", "float32"])
def test_k_grouped_probe_runs_in_the_arms_dtype_on_aligned_shapes_and_is_recorded(monkeypatch, param_dtype):
    """The probe calls the op in the dtype the arm runs (its parameter dtype), with K=N=128 and an empty
    group, once per (device, dtype); the arm's runtime record names that dtype and the answer."""
    from fsdpbench.config import parse_arms
    from fsdpbench.model import moe
    from fsdpbench.run.environment import k_grouped_probe
    from helpers import fake_npu_grouped_matmul

    calls: list[dict] = []
    fake = fake_npu_grouped_matmul(calls)
    monkeypatch.setitem(
        sys.modules, "torch_npu", types.SimpleNamespace(npu_grouped_matmul=fake, __version__="2.9.0")
    )
    moe.npu_k_grouped_supported.cache_clear()
    arm = parse_arms(f"torch:param_dtype={param_dtype}")[0]
    dtype = getattr(torch, arm.param_dtype)
    record = k_grouped_probe("npu", torch.device("cpu"), dtype)
    assert record == {"npu_k_grouped_matmul": True, "npu_k_grouped_probe_dtype": param_dtype}
    (call,) = calls
    assert call["x_dtype"] == dtype and call["group_type"] == 2
    # x is passed transposed [K, S], dy [S, N]: K = N = 128; groups of 64, 0 and 128 rows (cumulative)
    assert call["x_shape"] == (128, 192) and call["weight_shape"] == (192, 128)
    assert call["group_list"] == [64, 64, 192]
    k_grouped_probe("npu", torch.device("cpu"), dtype)  # cached per (device, dtype): no second call
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    k_grouped_probe("npu", torch.device("cpu"), other)  # another dtype is probed on its own
    assert [c["x_dtype"] for c in calls] == [dtype, other]
    assert k_grouped_probe("grouped_mm", torch.device("cpu"), dtype) == {
        "npu_k_grouped_matmul": None,
        "npu_k_grouped_probe_dtype": None,
    }
    moe.npu_k_grouped_supported.cache_clear()


def test_k_grouped_probe_says_no_when_the_op_is_wrong_in_that_dtype(monkeypatch):
    """A K-grouped op that is right in float32 but wrong in bfloat16 (here: it drops the last group) is
    refused for bfloat16 arms only."""
    from fsdpbench.model import moe
    from helpers import fake_npu_grouped_matmul

    calls: list[dict] = []
    right = fake_npu_grouped_matmul(calls)

    def wrong_in_bf16(x, weight, **kwargs):
        out = right(x, weight, **kwargs)
        if x[0].dtype == torch.bfloat16 and kwargs.get("group_type") == 2:
            out[0][-1].zero_()
        return out

    monkeypatch.setitem(
        sys.modules, "torch_npu", types.SimpleNamespace(npu_grouped_matmul=wrong_in_bf16, __version__="2.9.0")
    )
    moe.npu_k_grouped_supported.cache_clear()
    assert moe.npu_k_grouped_supported("cpu", torch.float32) is True
    assert moe.npu_k_grouped_supported("cpu", torch.bfloat16) is False
    moe.npu_k_grouped_supported.cache_clear()


# --------------------------------------------------------------------------------------------
# the bookkeeping: float32 losses gathered and summed in float64; the ranks aligned at its end
# --------------------------------------------------------------------------------------------


class _FakeDist:
    """``torch.distributed`` as ``StepRunner.record`` uses it, for rank 0 of 2: records the call order,
    and the all-gather returns the other rank's float32 loss and grad share."""

    ReduceOp = types.SimpleNamespace(MAX="max")

    def __init__(self, other: tuple[float, float], log: list[str]) -> None:
        self.other, self.log = other, log

    def all_reduce(self, tensor, op=None):
        self.log.append("all_reduce")

    def all_gather_single(self, out, mine):
        assert mine.dtype == torch.float32 and out.dtype == torch.float32
        out.copy_(torch.cat([mine, torch.tensor(self.other, dtype=torch.float32)]))
        self.log.append("all_gather")

    def barrier(self):
        self.log.append("barrier")


def test_record_sums_float32_losses_in_float64_and_aligns_ranks_last(tmp_path, monkeypatch):
    from fsdpbench.results import run_folder
    from fsdpbench.run import worker

    log: list[str] = []
    mine_loss, other_loss = np.float32(11.7), np.float32(12.300001)
    monkeypatch.setattr(worker, "dist", _FakeDist((float(other_loss), 4.0), log))
    real_append = run_folder.append_step
    monkeypatch.setattr(run_folder, "append_step", lambda p, r: (log.append("write"), real_append(p, r)))
    cfg = RunConfig.from_sources(env={}, overrides={"arms": "torch", "layers": 1, "seq_len": 16, "warmup": 0})
    backend = types.SimpleNamespace(local_grad_sq=lambda params: torch.tensor(9.0))
    runner = worker.StepRunner(
        cfg=cfg,
        arm=cfg.arms[0],
        backend=backend,
        model=torch.nn.Linear(1, 1),
        optimizer=None,
        device_type="cpu",
        device=torch.device("cpu"),
        rank=0,
        world=2,
        replicas=1,
        round_=0,
        steps_path=tmp_path / "steps.jsonl",
    )
    real_batch = runner.batch
    monkeypatch.setattr(runner, "batch", lambda step: (log.append("batch"), real_batch(step))[1])
    outcome = worker.StepOutcome(elapsed_ms=5.0, loss=torch.tensor(float(mine_loss)), collectives=None)
    record = runner.record(0, outcome)
    assert record["loss"] == (float(mine_loss) + float(other_loss)) / 2  # float64 sum of the fp32 values
    assert record["loss"] != float(np.float32(mine_loss + other_loss)) / 2  # what a float32 sum gives
    assert record["grad_norm"] == math.sqrt(13.0)
    assert json.loads((tmp_path / "steps.jsonl").read_text())["loss"] == record["loss"]
    # the barrier ends the bookkeeping: after rank 0's write and the next batch, before the next clock
    assert log == ["all_reduce", "all_gather", "batch", "write", "barrier"]


def test_run_steps_keeps_the_alignment_barrier_out_of_the_profiled_step(monkeypatch):
    """The barrier is the last thing of ``record``; ``prof.step()`` opens the recorded step after it."""
    from fsdpbench.run import worker

    events: list[str] = []
    runner = types.SimpleNamespace(
        train=lambda i: events.append(f"train{i}"),
        record=lambda i, o: events.extend([f"record{i}", "barrier"]),
        profile_marks=None,  # no fsdpbench ranges: this test is about the barrier's place
    )
    prof = types.SimpleNamespace(step=lambda: events.append("prof.step"))
    worker.run_steps(runner, 3, prof, profile_step=2)
    recorded = events[
        events.index("prof.step", events.index("record1")) + 1 : events.index(
            "prof.step", events.index("train2")
        )
    ]
    assert recorded == ["train2"]  # ProfilerStep#2 holds train(2) only: no barrier


# --------------------------------------------------------------------------------------------
# hyper's gloo fix: CPU only, and --count-collectives sees through it
# --------------------------------------------------------------------------------------------


@pytest.fixture
def gloo_of_one(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_collectives_through_hypers_gloo_fix_are_counted_when_all_gather_forwards_nowhere(
    gloo_of_one, monkeypatch
):
    """On torch 2.6 ``all_gather_into_tensor`` implements itself (no ``all_gather_single`` to count
    through): the fix installed before the counter must call c10d's function as it is at call time."""
    import torch.distributed.distributed_c10d as c10d

    from fsdpbench.backends import hyper
    from fsdpbench.run import worker

    dist = gloo_of_one
    monkeypatch.setattr(dist, "all_gather_into_tensor", dist.all_gather_into_tensor)  # restored after
    monkeypatch.setattr(hyper, "_GLOO_FIX_INSTALLED", False)
    monkeypatch.setattr(worker, "COLLECTIVES", {"all_gather_into_tensor": "all_gather"})  # torch 2.6's set
    hyper._install_gloo_all_gather_fix()
    assert dist.all_gather_into_tensor is not c10d.all_gather_into_tensor  # the fix sits on dist
    counter = worker.CollectiveCounter()
    counter.install()
    try:
        out = torch.zeros(2)
        dist.all_gather_into_tensor(out, torch.ones(2))  # as hyper calls it (param.py: dist.all_gather_...)
        dist.all_gather_into_tensor(out, torch.ones(2), async_op=True).wait()
        assert counter.take() == {"all_gather": 2}
    finally:
        counter.uninstall()


@pytest.mark.skipif(not HAVE_HYPER, reason="hyper_parallel is not installed (optional dependency)")
@pytest.mark.timeout(120)
def test_hypers_gloo_fix_is_installed_on_cpu_only():
    """In a fresh interpreter (hyper's import patches torch): setup on cuda leaves dist alone."""
    code = (
        "import torch.distributed as dist\n"
        "from fsdpbench.backends.hyper import HyperBackend\n"
        "orig = dist.all_gather_into_tensor\n"
        "HyperBackend().setup('cuda'); a = dist.all_gather_into_tensor is orig\n"
        "HyperBackend().setup('cpu'); b = dist.all_gather_into_tensor is orig\n"
        "print(a, b)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["True", "False"]


# --------------------------------------------------------------------------------------------
# environment variables that change NPU/GPU behaviour are recorded
# --------------------------------------------------------------------------------------------


def test_device_behaviour_variables_reach_the_manifest_and_others_do_not(monkeypatch):
    """Names from torch_npu's environment-variable list (Ascend/pytorch docs) and PyTorch's CUDA notes."""
    from fsdpbench.run.launcher import recorded_environment

    wanted = {
        "MULTI_STREAM_MEMORY_REUSE": "2",
        "STREAMS_PER_DEVICE": "32",
        "ACL_DEVICE_SYNC_TIMEOUT": "1800",
        "ACL_OP_COMPILER_CACHE_MODE": "enable",
        "NPU_ASD_ENABLE": "1",
        "INF_NAN_MODE_ENABLE": "1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "NVIDIA_TF32_OVERRIDE": "0",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    }
    for name, value in {**wanted, "UNRELATED_SETTING": "x"}.items():
        monkeypatch.setenv(name, value)
    recorded = recorded_environment()
    assert {k: recorded.get(k) for k in wanted} == wanted
    assert "UNRELATED_SETTING" not in recorded


# --------------------------------------------------------------------------------------------
# the Ascend parse: after torchrun exits, with the arm's interpreter, outside --timeout
# --------------------------------------------------------------------------------------------

_FAKE_ANALYSE = """
import os, pathlib, time
def analyse(profiler_path, max_process_number=os.cpu_count() // 2):  # torch_npu.profiler.profiler.analyse
    run = pathlib.Path(profiler_path).parents[2]
    pid = (run / "torchrun_pid").read_text()
    assert not pathlib.Path("/proc", pid).exists(), "parsed while the launch was still running"
    time.sleep(float(os.environ.get("FAKE_PARSE_S", "0")))
    out = pathlib.Path(profiler_path) / "r_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    for name in ("kernel_details.csv", "trace_view.json"):
        (out / name).write_text("")
    (out / "interpreter").write_text(os.environ.get("ARM_INTERPRETER", "launcher's"))
"""


_PID = "\nimport os\n(run_dir / 'torchrun_pid').write_text(str(os.getpid()))\n"


def test_the_ascend_parse_runs_after_torchrun_with_the_arms_interpreter_outside_the_timeout(
    tmp_path, monkeypatch
):
    from fsdpbench.results import run_folder
    from fsdpbench.run import launcher
    from helpers import FAKE_LAUNCH

    fake = tmp_path / "fake"
    (fake / "torch_npu" / "profiler").mkdir(parents=True)
    (fake / "torch_npu" / "__init__.py").write_text("")
    (fake / "torch_npu" / "profiler" / "__init__.py").write_text("")
    (fake / "torch_npu" / "profiler" / "profiler.py").write_text(_FAKE_ANALYSE)
    python = tmp_path / "venvB" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\nexport ARM_INTERPRETER=venvB PYTHONPATH={REPO / "src"}:{fake}\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": f"torch:python={python}", "nproc": 2, "profile": True, "timeout": 1.0}
    )
    files = {"{ldir}/environment.json": '{"device_type": "npu"}'}
    files.update({f"profiles/{cfg.arms[0].label}/rank{r}/raw.txt": "" for r in (0, 1)})
    monkeypatch.setattr(
        launcher,
        "torchrun_command",
        lambda c, spec, logs, i, python=None: [
            sys.executable,
            "-c",
            FAKE_LAUNCH + _PID,
            str(spec),
            json.dumps(files),
        ],
    )
    monkeypatch.setenv("FAKE_PARSE_S", "1.5")  # longer than --timeout 1.0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = launcher.Run(cfg, run_dir, {"launches": [], "profiles": {}, "environment": None, "order": []}, None)
    label = cfg.arms[0].label
    run.launch(label, run_folder.PROFILE_ROUND, None)
    for r in (0, 1):
        (out,) = (run_dir / "profiles" / label / f"rank{r}").glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT")
        assert (out / "interpreter").read_text() == "venvB"
    assert run_folder.launch_ok(run_dir, label, run_folder.PROFILE_ROUND)


_FAKE_PARSE = """
import os, pathlib, subprocess, sys, time
folder = pathlib.Path(sys.argv[-1])  # torch_npu's analyse(folder) stand-in: the times it ran, its output
(folder / "started").write_text(repr(time.time()))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as msprof below it
(folder / "child_pid").write_text(str(child.pid))
time.sleep(120 if folder.name in os.environ["FAKE_HANG"].split(",") and "memory" not in str(folder) else 1.5)
out = folder / "r_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
out.mkdir(parents=True)
for name in ("kernel_details.csv", "trace_view.json"):
    (out / name).write_text("")
child.kill()
(folder / "ended").write_text(repr(time.time()))
print("parsed", folder)
"""


def test_the_ascend_parse_runs_rank_folders_in_parallel_and_kills_one_past_its_limit(tmp_path, monkeypatch):
    """Four rank folders (profiled step and memory step, 2 ranks), at most 3 at a time (the core bound,
    set to 3 here): the fake parses' own clocks show 3 overlapping, never 4; the one that hangs is
    killed with its child process after the limit, the launch's error names its folder, the others keep
    their output."""
    from fsdpbench.run import ascend_parse

    script = tmp_path / "fake_parse.py"
    script.write_text(_FAKE_PARSE)
    python = tmp_path / "python"  # the arm's interpreter: runs the fake instead of the worker's parse
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    python.chmod(0o755)
    profile, memory = tmp_path / "profiles" / "torch", tmp_path / "memory_step" / "torch"
    for parent in (profile, memory):
        for r in (0, 1):
            (parent / f"rank{r}").mkdir(parents=True)
    ldir = tmp_path / "launch"
    ldir.mkdir()
    monkeypatch.setattr(ascend_parse.os, "cpu_count", lambda: 3)
    env = {**os.environ, "FAKE_HANG": "rank1"}
    t0 = time.time()
    error = ascend_parse.parse_launch_profiles(str(python), profile, memory, range(2), env, ldir, 2.5)
    t1 = time.time()
    hung = profile / "rank1"
    assert error is not None and "\n" not in error
    assert f"the Ascend parse of {hung} was killed after 2.5 s (--ascend-parse-timeout)" in error
    assert 2.5 <= t1 - t0 < 2.5 + 1.5 + 3.0  # serial: 1.5 + 2.5 + 1.5 + 1.5 s of fake work at least
    stat = Path(f"/proc/{(hung / 'child_pid').read_text()}/stat")  # msprof's stand-in went with its parse
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # gone, or a zombie
    assert not list(hung.glob("*_ascend_pt")) and not (hung / "ended").exists()
    finished = [profile / "rank0", memory / "rank0", memory / "rank1"]
    for folder in finished:
        assert (folder / "r_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").exists()
    spans = [(float((f / "started").read_text()), float((f / "ended").read_text())) for f in finished]
    spans.append((float((hung / "started").read_text()), t1))
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = [sum(d for _, d in edges[: i + 1]) for i in range(len(edges))]
    assert max(running) == 3  # three at once, never four
    log = (ldir / "ascend_parse.log").read_text()
    assert f"== {hung}: killed after 2.5 s" in log and f"== {profile / 'rank0'}: rc 0" in log
    assert f"parsed {memory / 'rank1'}" in (ldir / "ascend_memory_parse.log").read_text()


# --------------------------------------------------------------------------------------------
# what the shared profiled run (tests/conftest.py, no launch of its own) records
# --------------------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(420)
def test_the_manifest_records_what_each_arm_ran_and_the_profiled_step_holds_no_barrier(profiled_ab_run):
    import gzip

    import orjson

    manifest = orjson.loads((profiled_ab_run / "manifest.json").read_bytes())
    assert "arm_runtime" not in manifest["environment"]
    for arm in ("torch", "torch-prefetch1"):
        ran = manifest["arm_runtime"][arm]
        assert (ran["param_dtype"], ran["param_dtype_source"], ran["reduce_dtype"]) == (
            "float32",
            "default",
            "float32",
        )
        assert ran["optimizer_impl"] == "foreach" and ran["optimizer_foreach"] is True
        assert ran["optimizer_ran"] == ["foreach"]  # on CPU torch alone would have run per-parameter
        assert ran["float32_matmul_precision"] == "highest" and isinstance(ran["environment"], dict)
        grouped = hasattr(torch.nn.functional, "grouped_mm") or hasattr(torch, "_grouped_mm")
        assert ran["experts_impl"] == ("grouped_mm" if grouped else "loop")
        assert ran["npu_k_grouped_matmul"] is None
        for rank in (0, 1):
            (trace,) = (profiled_ab_run / "profiles" / arm / f"rank{rank}").glob("*.json.gz")
            events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
            names = {e["name"] for e in events if e.get("cat") in ("cpu_op", "user_annotation")}
            assert any(n.startswith("ProfilerStep#") for n in names)
            assert not [n for n in names if "barrier" in n], (arm, rank)  # the alignment stays outside
    summary = orjson.loads((profiled_ab_run / "summary.json").read_bytes())
    assert summary["parity"]["mode"] == "exact" and summary["parity"]["tolerance"] == 1e-6  # CPU


def test_run_steps_records_k_consecutive_steps_each_with_its_own_bookkeeping_but_the_last():
    """``--profile-steps 3`` from step 2: ProfilerStep#2 and #3 each hold their train and its bookkeeping
    (the spans are contiguous: record(2) must fall in one), #4 train(4) only, as the one-step default; the
    ranges are installed around every profiled train and no other."""
    from fsdpbench.run import worker

    events: list[str] = []

    class Marks:
        delay = None

        def install(self, _collectives):
            events.append("ranges on")

        def uninstall(self):
            events.append("ranges off")

    runner = types.SimpleNamespace(
        train=lambda i, ranges=None: events.append(f"train{i}"),
        record=lambda i, o: events.extend([f"record{i}", "barrier"]),
        profile_marks=Marks(),
        spec=None,
        rank=0,
    )
    prof = types.SimpleNamespace(step=lambda: events.append("prof.step"))
    worker.run_steps(runner, 6, prof, profile_step=2, profile_steps=3)
    windows, cur = [], None
    for e in events:  # the spans between consecutive prof.step() calls
        if e == "prof.step":
            if cur is not None:
                windows.append(cur)
            cur = []
        elif cur is not None:
            cur.append(e)
    # the schedule (wait 1, warmup 1, active 3) records the spans of steps 2, 3 and 4: windows[1:4]
    assert windows[1:4] == [
        ["ranges on", "train2", "ranges off", "record2", "barrier"],
        ["ranges on", "train3", "ranges off", "record3", "barrier"],
        ["ranges on", "train4", "ranges off"],
    ]
    assert events.count("ranges on") == 3 and "train5" in events


def test_profiler_schedule_records_exactly_the_k_steps_asked_for():
    """torch.profiler's own schedule, built from ``profiler_schedule_args``, records steps 3, 4 and 5 (0-based
    ``prof.step()`` count) for ``--profile-steps 3`` from step 3, and saves at the last; 1 step is as before."""
    from torch.profiler import ProfilerAction, schedule

    from fsdpbench.run.profiling import profiler_schedule_args

    recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    sched = schedule(**profiler_schedule_args(3, 3))
    assert [s for s in range(10) if sched(s) in recording] == [3, 4, 5]
    assert sched(5) == ProfilerAction.RECORD_AND_SAVE
    one = schedule(**profiler_schedule_args(3))
    assert [s for s in range(10) if one(s) in recording] == [3]
    assert profiler_schedule_args(3) == {"wait": 2, "warmup": 1, "active": 1, "repeat": 1}

"""Issue 10: what would fail or mislead on the first NPU/CUDA run, pinned on CPU.

Each test checks one fix against an independent reference: the raw profiler trace, ``torch.bincount``,
a hand-computed argument list, the installed torch's own c10d functions. A fake stands in for a
device library (torch_npu, fla) only where nothing else can.
"""

from __future__ import annotations

import gzip

import orjson
import pytest

from helpers import FAKE_LAUNCH, fake_npu_grouped_matmul


def _raw_events(trace_path) -> list[dict]:
    return orjson.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]


# --------------------------------------------------------------------------------------------
# item 3: fsdpbench's bookkeeping stays out of the profiled step
# --------------------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(420)
def test_profiled_fsdp2_step_holds_no_all_reduce(profiled_ab_run):
    """FSDP2 on 1D meshes issues all-gathers and reduce-scatters only; the two metric all-reduces
    (MAX, SUM) belong to the bookkeeping after the profiled step (before the fix: 2 per rank)."""
    for arm in ("torch", "torch-prefetch1"):
        for rank in (0, 1):
            (trace,) = (profiled_ab_run / "profiles" / arm / f"rank{rank}").glob("*.json.gz")
            ops = [e["name"] for e in _raw_events(trace) if e.get("cat") == "cpu_op"]
            assert "c10d::_reduce_scatter_base_" in ops  # the trace holds the step's collectives
            assert not [n for n in ops if "allreduce" in n or "all_reduce" in n], (arm, rank)


# --------------------------------------------------------------------------------------------
# item 2: tokens per expert without a host sync
# --------------------------------------------------------------------------------------------


def _cpu_ops(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()]


def test_tokens_per_expert_equals_bincount_and_reads_nothing_back_to_the_host():
    import torch

    from fsdpbench.model.moe import tokens_per_expert

    gen = torch.Generator().manual_seed(0)
    for num_experts, rows in ((8, 64), (256, 4096), (16, 3)):  # the last leaves most experts empty
        idx = torch.randint(0, num_experts, (rows,), generator=gen)
        counts = tokens_per_expert(idx, num_experts)
        assert counts.dtype == torch.int64
        assert torch.equal(counts, torch.bincount(idx, minlength=num_experts))
    # bincount reduces its input to min/max, whose values CUDA and NPU read back to size the output ...
    host_reads = {"aten::min", "aten::max", "aten::item", "aten::_local_scalar_dense"}
    assert host_reads & set(_cpu_ops(lambda: torch.bincount(idx, minlength=16)))
    # ... the scatter-add sizes its output from E alone: no reduction and no read-back
    ops = _cpu_ops(lambda: tokens_per_expert(idx, 16))
    assert "aten::scatter_add_" in ops
    assert not (host_reads | {"aten::bincount"}) & set(ops)


@pytest.mark.distributed
@pytest.mark.timeout(420)
def test_profiled_step_runs_no_bincount(profiled_ab_run):
    (trace,) = (profiled_ab_run / "profiles" / "torch" / "rank0").glob("*.json.gz")
    ops = {e["name"] for e in _raw_events(trace) if e.get("cat") == "cpu_op"}
    assert "aten::scatter_add_" in ops and "aten::bincount" not in ops  # before the fix: 4 bincounts


# --------------------------------------------------------------------------------------------
# item 7: npu_grouped_matmul arguments (a fake torch_npu computes what the op's documentation says)
# --------------------------------------------------------------------------------------------


def test_npu_grouped_linear_passes_cumulative_group_lists_to_all_three_calls(monkeypatch):
    import sys
    import types

    import torch

    from fsdpbench.model.moe import grouped_linear, npu_k_grouped_supported

    calls: list[dict] = []
    monkeypatch.setitem(
        sys.modules,
        "torch_npu",
        types.SimpleNamespace(npu_grouped_matmul=fake_npu_grouped_matmul(calls), __version__="2.7.1"),
    )
    npu_k_grouped_supported.cache_clear()
    assert npu_k_grouped_supported("cpu", torch.float64)  # the one-time probe call (K-grouped) happens here
    calls.clear()
    counts = torch.tensor([3, 0, 5, 2])  # an empty expert too
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(10, 6, generator=gen, dtype=torch.float64)
    w = torch.randn(4, 5, 6, generator=gen, dtype=torch.float64)  # [E, N, K], nn.Linear layout
    dy = torch.randn(10, 5, generator=gen, dtype=torch.float64)

    grads = []
    for impl in ("npu", "loop"):  # the per-expert F.linear loop is the reference
        xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = grouped_linear(xi, wi, counts, impl)
        y.backward(dy)
        grads.append((y.detach(), xi.grad, wi.grad))
    for got, ref in zip(*grads, strict=True):
        torch.testing.assert_close(got, ref)

    cumulative = [3, 3, 8, 10]
    assert [(c["split_item"], c["group_type"]) for c in calls] == [
        (2, 0),
        (2, 0),
        (3, 2),
    ]  # fwd, dgrad, wgrad
    assert all(c["group_list"] == cumulative and c["group_list_type"] == 0 for c in calls)
    assert all(c["dtype"] == torch.int64 for c in calls)


# --------------------------------------------------------------------------------------------
# item 1: fla before 0.5.0 has no grouped values
# --------------------------------------------------------------------------------------------


def _fake_fla_0_4_kernel(q, k, v, *, g, beta, use_qk_l2norm_in_kernel):
    """What fla 0.4.x does with fewer q/k heads than v heads: H comes from q, the rest of ``o`` stays
    uninitialised (NaN here). The recurrence itself is fsdpbench's per-token reference."""
    import torch

    from fsdpbench.model.deltanet import recurrent_gated_delta_rule

    H = q.shape[2]
    o = torch.full_like(v, float("nan"))
    o[:, :, :H] = recurrent_gated_delta_rule(
        q, k, v[:, :, :H], g[..., :H], beta[..., :H], use_qk_l2norm=use_qk_l2norm_in_kernel
    )
    return o, None


def test_fla_version_check_pins_grouped_values_to_0_5_0():
    from fsdpbench.model.deltanet import fla_supports_grouped_values

    assert not fla_supports_grouped_values("0.4.2")
    assert not fla_supports_grouped_values("0.5.0rc1")  # a pre-release may predate the change
    assert not fla_supports_grouped_values("not-a-version")
    assert fla_supports_grouped_values("0.5.0") and fla_supports_grouped_values("0.10.1")


@pytest.mark.parametrize("version, grouped", [("0.4.2", False), ("0.5.0", True)])
def test_installed_fla_version_decides_the_head_repeat_with_one_notice(monkeypatch, caplog, version, grouped):
    import sys
    import types

    from fsdpbench.model import deltanet

    kernel = object()
    ops = types.ModuleType("fla.ops.gated_delta_rule")
    ops.chunk_gated_delta_rule = kernel
    monkeypatch.setitem(sys.modules, "fla", types.SimpleNamespace(__version__=version))
    monkeypatch.setitem(sys.modules, "fla.ops", types.ModuleType("fla.ops"))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", ops)
    deltanet._fla_chunk_gated_delta_rule.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="fsdpbench.model.deltanet"):
            assert deltanet._fla_chunk_gated_delta_rule() == (kernel, grouped)
            deltanet._fla_chunk_gated_delta_rule()  # cached: checked and noticed once
    finally:
        deltanet._fla_chunk_gated_delta_rule.cache_clear()
    notices = [r.getMessage() for r in caplog.records if "grouped values" in r.getMessage()]
    assert len(notices) == (0 if grouped else 1)
    assert grouped or f"fla {version}" in notices[0]


def test_old_fla_gets_repeated_qk_heads_and_matches_the_reference():
    import torch

    from fsdpbench.model.deltanet import fla_gated_delta_rule, recurrent_gated_delta_rule

    gen = torch.Generator().manual_seed(0)
    B, T, Hk, Hv, D = 1, 7, 2, 4, 8  # the model's layout: 2 value heads per q/k head
    q, k = (torch.randn(B, T, Hk, D, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, T, Hv, D, generator=gen, dtype=torch.float64)
    g = -torch.rand(B, T, Hv, generator=gen, dtype=torch.float64)
    beta = torch.rand(B, T, Hv, generator=gen, dtype=torch.float64)
    reference = recurrent_gated_delta_rule(
        q.repeat_interleave(2, dim=2), k.repeat_interleave(2, dim=2), v, g, beta
    )

    out = fla_gated_delta_rule(_fake_fla_0_4_kernel, False, q, k, v, g, beta)
    torch.testing.assert_close(out, reference)
    # what the unpatched call did: half of o never written
    unpatched = fla_gated_delta_rule(_fake_fla_0_4_kernel, True, q, k, v, g, beta)
    assert unpatched[:, :, Hk:].isnan().all()


# --------------------------------------------------------------------------------------------
# item 10: --profile-step 0 would profile the step that creates the communicators
# --------------------------------------------------------------------------------------------


def test_profile_step_0_is_refused_on_the_command_line_in_one_line(tmp_path):
    from helpers import run_cli

    proc = run_cli(
        "ab", "--arms", "torch", "--profile", "--profile-step", "0", "--out", str(tmp_path), timeout=120
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--profile-step must be an integer >= 1" in line and "communicators" in line
    assert not list(tmp_path.iterdir())  # nothing launched, no results folder


# --------------------------------------------------------------------------------------------
# item 8: the CANN version lives in torch.version.cann (set by torch_npu's import)
# --------------------------------------------------------------------------------------------


def test_manifest_reads_the_cann_version_from_torch_version(monkeypatch):
    import sys
    import types

    import torch

    from fsdpbench.run import environment

    # torch_npu as it is: a __version__, no version.cann; its import sets torch.version.cann
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(__version__="2.6.0.post3"))
    monkeypatch.setattr(torch.version, "cann", "8.2.RC1", raising=False)
    assert environment._npu_versions() == {"torch_npu": "2.6.0.post3", "cann": "8.2.RC1"}


# --------------------------------------------------------------------------------------------
# item 11: --count-collectives sees every spelling of the installed torch, each call once
# --------------------------------------------------------------------------------------------


@pytest.fixture
def gloo_world_of_one():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def _spellings(dist) -> list[tuple[str, object]]:
    """(name, one call of it) for every wrapped c10d function the installed torch has."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    from fsdpbench.run.worker import COLLECTIVES

    x, out = torch.ones(4), torch.zeros(4)
    calls = {
        "all_gather_single": lambda f: f(out, x),
        "all_gather_into_tensor": lambda f: f(out, x),
        "_all_gather_base": lambda f: f(out, x),
        "all_gather": lambda f: f([out], x),
        "all_gather_coalesced": lambda f: f([[out]], [x]),
        "reduce_scatter_single": lambda f: f(out, x),
        "reduce_scatter_tensor": lambda f: f(out, x),
        "_reduce_scatter_base": lambda f: f(out, x),
        "reduce_scatter": lambda f: f(out, [x]),
        "all_reduce": lambda f: f(x),
        "all_reduce_coalesced": lambda f: f([x]),
        "reduce": lambda f: f(x, dst=0),
        "broadcast": lambda f: f(x, src=0),
        "all_to_all_single": lambda f: f(out, x),
        "all_to_all": lambda f: f([out], [x]),
        "gather": lambda f: f(x, [out], dst=0),
        "scatter": lambda f: f(out, [x], src=0),
        "barrier": lambda f: f(),
    }
    assert set(calls) == set(COLLECTIVES)
    return [
        (name, lambda name=name, call=call: call(getattr(dist, name, None) or getattr(c10d, name)))
        for name, call in calls.items()
        if hasattr(c10d, name)
    ]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_collective_counter_counts_every_installed_spelling_once(gloo_world_of_one):
    """Each call counts once under its type, whichever spelling forwards to which (on torch 2.13
    ``_all_gather_base`` → ``all_gather_single`` and ``all_gather_into_tensor`` → ``all_gather_single``)."""
    import torch.distributed.distributed_c10d as c10d

    from fsdpbench.run.worker import COLLECTIVES, CollectiveCounter

    dist = gloo_world_of_one
    originals = {name: getattr(c10d, name) for name in COLLECTIVES if hasattr(c10d, name)}
    counter = CollectiveCounter()
    counter.install()
    try:
        assert {name for _module, name, _orig in counter._saved} == set(originals)
        assert {"all_gather_into_tensor", "reduce_scatter_tensor"} <= set(
            originals
        )  # FSDP2's, torch 2.6 and 2.13
        counted = {}
        for name, call in _spellings(dist):
            counter.take()
            call()
            counted[name] = counter.take()
    finally:
        counter.uninstall()
    assert all(getattr(c10d, name) is fn for name, fn in originals.items())  # uninstall restores
    assert counted == {name: {COLLECTIVES[name]: 1} for name in originals}


# --------------------------------------------------------------------------------------------
# items 5 and 9: the launcher's profile bookkeeping, with a stand-in for torchrun
# --------------------------------------------------------------------------------------------


def _profile_launch(tmp_path, monkeypatch, files: dict[str, str], nproc: int = 2):
    """One profile launch of arm ``torch`` through ``launcher.Run.launch``; torchrun replaced by a
    script that writes ``files`` (paths relative to the run folder) and the step records."""
    import json
    import sys

    from fsdpbench.config import RunConfig
    from fsdpbench.results import run_folder
    from fsdpbench.run import launcher

    cfg = RunConfig.from_sources(env={}, overrides={"arms": "torch", "nproc": nproc, "profile": True})
    monkeypatch.setattr(
        launcher,
        "torchrun_command",
        lambda cfg, spec, logs, i, python=None: [
            sys.executable,
            "-c",
            FAKE_LAUNCH,
            str(spec),
            json.dumps(files),
        ],
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"launches": [], "profiles": {}, "environment": None, "order": []}
    run = launcher.Run(cfg, run_dir, manifest, console=None)
    return run, lambda: run.launch("torch", run_folder.PROFILE_ROUND, None)


def test_a_profile_launch_sets_the_arms_old_traces_aside(tmp_path, monkeypatch):
    from fsdpbench.results import run_folder

    old = tmp_path / "run" / "profiles" / "torch" / "rank0" / "old.pt.trace.json.gz"
    old.parent.mkdir(parents=True)
    old.write_text("from a failed profile launch")
    (tmp_path / "run" / "profiles" / "other" / "rank0").mkdir(parents=True)  # another arm's: left alone
    run, launch = _profile_launch(tmp_path, monkeypatch, {"profiles/torch/rank0/new.pt.trace.json.gz": "new"})
    launch()
    run_dir = tmp_path / "run"
    assert [p.name for p in (run_dir / "profiles" / "torch").rglob("*.gz")] == ["new.pt.trace.json.gz"]
    kept = run_dir / "launches" / "torch" / "profile" / "discarded_profiles" / "rank0" / old.name
    assert kept.read_text() == "from a failed profile launch"
    assert (run_dir / "profiles" / "other" / "rank0").is_dir()
    assert run.manifest["profiles"] == {"torch": "profiles/torch"} and run_folder.launch_ok(
        run_dir, "torch", run_folder.PROFILE_ROUND
    )


_PT = "profiles/torch/rank{r}/rank{r}_123_20261203_ascend_pt/ASCEND_PROFILER_OUTPUT/"
_NPU_ENV = {"{ldir}/environment.json": '{"device_type": "npu"}'}


def test_an_unparsed_ascend_profile_fails_the_launch_naming_rank_file_and_msprof(tmp_path, monkeypatch):
    from fsdpbench.errors import LaunchError
    from fsdpbench.results import run_folder

    files = {
        **_NPU_ENV,
        _PT.format(r=0) + "trace_view.json": "{}",
        _PT.format(r=0) + "kernel_details.csv": "",
        _PT.format(r=1) + "trace_view.json": "{}",
    }  # rank 1's parse failed: no kernel_details.csv
    run, launch = _profile_launch(tmp_path, monkeypatch, files)
    with pytest.raises(LaunchError) as err:
        launch()
    msg = str(err.value)
    assert "\n" not in msg
    assert "rank 1: kernel_details.csv" in msg and "rank 0" not in msg.split("missing")[0]
    assert "msprof" in msg and "set_env.sh" in msg and "analyse(" in msg
    assert not run_folder.launch_ok(
        tmp_path / "run", "torch", run_folder.PROFILE_ROUND
    )  # --resume profiles it again
    assert "torch" not in run.manifest["profiles"]


def test_a_parsed_ascend_profile_passes_and_cpu_profiles_are_not_checked(tmp_path, monkeypatch):
    from fsdpbench.results import run_folder

    parsed = {
        _PT.format(r=r) + name: "" for r in (0, 1) for name in ("trace_view.json", "kernel_details.csv")
    }
    _run, launch = _profile_launch(tmp_path / "npu", monkeypatch, {**_NPU_ENV, **parsed})
    launch()
    assert run_folder.launch_ok(tmp_path / "npu" / "run", "torch", run_folder.PROFILE_ROUND)
    cpu = {"{ldir}/environment.json": '{"device_type": "cpu"}', "profiles/torch/rank0/t.json.gz": ""}
    _run, launch = _profile_launch(tmp_path / "cpu", monkeypatch, cpu)
    launch()
    assert run_folder.launch_ok(tmp_path / "cpu" / "run", "torch", run_folder.PROFILE_ROUND)


# --------------------------------------------------------------------------------------------
# item 4: torch_npu exports raw data in the step and parses after the process group is gone
# --------------------------------------------------------------------------------------------


def test_npu_trace_handler_turns_the_in_step_parse_off(tmp_path, caplog):
    import types

    from fsdpbench.run.profiling import npu_trace_handler

    calls = []

    def handler(
        dir_name=None, worker_name=None, analyse_flag=True, async_mode=False
    ):  # torch_npu ≥ 2.1 signature
        calls.append({"dir_name": dir_name, "worker_name": worker_name, "analyse_flag": analyse_flag})
        return "handler"

    assert (
        npu_trace_handler(types.SimpleNamespace(tensorboard_trace_handler=handler), tmp_path, 3) == "handler"
    )
    assert calls == [{"dir_name": str(tmp_path), "worker_name": "rank3", "analyse_flag": False}]

    def old_handler(dir_name=None, worker_name=None, use_gzip=False):  # early torch_npu: no analyse_flag
        calls.append({"dir_name": dir_name, "worker_name": worker_name})
        return "old"

    with caplog.at_level("WARNING", logger="fsdpbench.run.worker"):
        assert (
            npu_trace_handler(types.SimpleNamespace(tensorboard_trace_handler=old_handler), tmp_path, 0)
            == "old"
        )
    assert calls[-1] == {"dir_name": str(tmp_path), "worker_name": "rank0"}
    assert "no analyse_flag" in caplog.text


def test_parse_npu_profile_calls_torch_npus_offline_analyse_on_the_rank_folder(tmp_path, monkeypatch):
    import sys
    import types

    from fsdpbench.run.profiling import parse_npu_profile

    paths = []
    offline = types.ModuleType("torch_npu.profiler.profiler")
    offline.analyse = lambda profiler_path, max_process_number=1: paths.append(
        profiler_path
    )  # documented signature
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setitem(sys.modules, "torch_npu.profiler", types.ModuleType("torch_npu.profiler"))
    monkeypatch.setitem(sys.modules, "torch_npu.profiler.profiler", offline)
    parse_npu_profile(tmp_path / "rank1")
    assert paths == [str(tmp_path / "rank1")]

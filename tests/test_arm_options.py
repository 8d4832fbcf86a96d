"""Issue 22 points 1-3: torch_npu's FSDP2 vs upstream, prefetch per direction, ``kw.``/``env.`` arm options.

References, each independent of fsdpbench's own output:

* prefetch: the sharded modules' own state as the installed torch keeps it (FSDP2's
  ``_states_to_{forward,backward}_prefetch``, read by ``FSDPState._pre_backward``:
  ``default_prefetch = len(self._states_to_backward_prefetch) == 0``; FSDP1's ``forward_prefetch`` and
  ``backward_prefetch`` attributes), on a real one-rank gloo group in this process;
* torch_npu: a stand-in package written by the test with the structure and behaviour of torch_npu's
  source (github.com/Ascend/pytorch at tag v2.9.0-26.1.0, commit 323a8176b6fadd58adfe265524a1865a862a7a44:
  ``torch_npu/distributed/fsdp/__init__.py`` exports ``fully_shard`` with ``__module__`` set to the
  package; ``_add_fsdp_patch.py``: ``fully_shard(*args, **kwargs)`` calls ``_apply_fsdp_enhance_patch()``
  (sets ``_FSDP_ENHANCE_PATCH_APPLIED``, patches FSDP2's classes) and then torch's ``fully_shard``;
  ``torch_npu/_init/patches/api_patches.py`` calls ``_apply_fsdp_patch()`` on ``import torch_npu``, which
  replaces ``FSDPParamGroup.finalize_backward``), run in a subprocess because it patches torch;
* ``kw.``: ``inspect.signature`` of the installed functions, read by the test itself.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys

import pytest
import torch

from fsdpbench.config import Arm, RunConfig, parse_arms, preset_tiny
from fsdpbench.errors import ConfigError
from fsdpbench.model import build_model
from helpers import REPO, run_cli

# ------------------------------------------------------------------------------------ point 2: prefetch


@pytest.mark.parametrize(
    "spec, forward, backward, label",
    [
        ("torch", "default", "default", "torch"),  # prefetch=0: no explicit prefetch, as before
        ("torch:prefetch=0", "default", "default", "torch"),
        ("torch:prefetch=2", 2, 2, "torch-prefetch2"),
        ("torch:prefetch=none", "none", "none", "torch-prefetchnone"),
        ("torch:prefetch=default", "default", "default", "torch-prefetchdefault"),
        ("torch:prefetch=1:bwd_prefetch=none", 1, "none", "torch-prefetch1-bwdnone"),
        pytest.param(
            "hyper:fwd_prefetch=2:bwd_prefetch=1",
            2,
            1,
            "hyper-fwd2-bwd1",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("hyper_parallel") is None,
                reason="a hyper arm needs hyper_parallel installed (optional dependency)",
            ),
        ),
        ("fsdp1", "none", "none", "fsdp1"),  # prefetch=0 turned FSDP1's default off, as before
        ("fsdp1:prefetch=default", "default", "default", "fsdp1-prefetchdefault"),
        ("deepspeed:prefetch=none", "none", "none", "deepspeed-prefetchnone"),
    ],
)
def test_prefetch_spellings_resolve_per_direction(spec, forward, backward, label):
    arm = parse_arms(spec)[0]
    assert arm.prefetch_directions() == (forward, backward) and arm.label == label
    again = RunConfig.from_dict(RunConfig(arms=[arm]).to_dict()).arms[0]
    assert again.prefetch_directions() == (forward, backward) and again.label == label


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("torch:bwd_prefetch=0", "bwd_prefetch=0 is ambiguous; write none"),
        ("torch:fwd_prefetch=soon", "fwd_prefetch='soon'; use default, none or a depth N >= 1"),
        ("fsdp1:bwd_prefetch=2", "FSDP1 prefetches at most one unit ahead per direction"),
        ("deepspeed:fwd_prefetch=1", "DeepSpeed ZeRO-3 has one prefetch bucket for both directions"),
    ],
)
def test_prefetch_a_backend_cannot_express_is_refused_in_one_line(tmp_path, spec, needle):
    with pytest.raises(ConfigError, match=None) as err:
        parse_arms(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def gloo_world_of_one():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def _meta_model() -> torch.nn.Module:
    with torch.device("meta"):
        return build_model(preset_tiny())


def _fsdp2_units(spec: str):
    from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend

    arm = parse_arms(spec)[0]
    backend = TorchFSDP2Backend()
    model = backend.apply(_meta_model(), backend.init_mesh("cpu", (1,)), arm)
    layers = list(model.model.layers)
    return model, layers, backend.describe()


def _targets(unit, direction: str) -> list[object]:
    return [s for s in getattr(unit._get_fsdp_state(), f"_states_to_{direction}_prefetch")]


def test_a_prefetch_list_changed_after_sharding_fails_the_check_naming_the_unit(gloo_world_of_one):
    """What torch_npu's ``move_attr`` (``_add_fsdp_patch.py`` line 272) does to a unit's forward list, done by
    hand: the check after the steps refuses it in one line; the lists as set pass."""
    from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend
    from fsdpbench.errors import LaunchError

    backend = TorchFSDP2Backend()
    model = backend.apply(_meta_model(), backend.init_mesh("cpu", (1,)), parse_arms("torch:prefetch=1")[0])
    assert backend.verify_prefetch() is True
    state = model.model.layers[0]._get_fsdp_state()
    state._states_to_forward_prefetch = []
    with pytest.raises(LaunchError) as err:
        backend.verify_prefetch()
    message = str(err.value)
    assert (
        "unit model.layers.0's forward prefetch list is empty, but the plan set ['model.layers.1']" in message
    )
    assert "\n" not in message
    state._states_to_forward_prefetch = [model.model.layers[2]._get_fsdp_state()]  # another target
    with pytest.raises(
        LaunchError, match=r"list is \['model.layers.2'\], but the plan set \['model.layers.1'\]"
    ):
        backend.verify_prefetch()


def test_fsdp2_default_none_and_depth_set_the_prefetch_lists_torch_reads(gloo_world_of_one):
    state = lambda m: m._get_fsdp_state()  # noqa: E731
    # default (prefetch=0): no list anywhere, so torch's implicit one-unit backward prefetch runs
    model, layers, ran = _fsdp2_units("torch")
    assert all(not _targets(u, d) for u in [*layers, model] for d in ("forward", "backward"))
    assert ran["prefetch"]["backward"] == "implicit 1 unit (FSDP2 default)"
    assert (
        ran["fully_shard"] == "torch.distributed.fsdp.fully_shard" and ran["torch_npu_import_patch"] is None
    )
    # none: every unit (root included) prefetches only itself, which turns the implicit one off
    model, layers, ran = _fsdp2_units("torch:bwd_prefetch=none")
    assert all(_targets(u, "backward") == [state(u)] for u in [*layers, model])
    assert all(not _targets(u, "forward") for u in [*layers, model])
    assert ran["prefetch"] == {
        "forward": "none (FSDP2 default: no forward prefetch)",
        "backward": ("none (each unit prefetches only itself)"),
    }
    # depth per direction: layer i prefetches i+1..i+2 forward and i-1 backward
    model, layers, ran = _fsdp2_units("torch:fwd_prefetch=2:bwd_prefetch=1")
    n = len(layers)
    for i, layer in enumerate(layers):
        assert _targets(layer, "forward") == [state(layers[j]) for j in range(i + 1, min(n, i + 3))]
        assert _targets(layer, "backward") == ([state(layers[i - 1])] if i else [])
    assert ran["prefetch"]["forward"] == "explicit 2 layer(s) ahead"


@pytest.mark.parametrize(
    "spec, ahead",
    [("torch", [1]), ("torch:prefetch=none", []), ("torch:bwd_prefetch=2", [1, 2])],
)
def test_fsdp2_backward_prefetch_gathers_what_the_setting_says(gloo_world_of_one, spec, ahead):
    """When layer i's backward starts, the earlier layers FSDP2 has begun to gather (its own param-group
    state: a pending all-gather result or unsharded) are exactly i-1..i-d: d=1 for the implicit default,
    none for ``prefetch=none``, 2 for ``bwd_prefetch=2``."""
    from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend
    from fsdpbench.model import InitialValues
    from fsdpbench.run.tokens import global_batch

    cfg = preset_tiny()
    backend = TorchFSDP2Backend()
    model = backend.apply(_meta_model(), backend.init_mesh("cpu", (1,)), parse_arms(spec)[0])
    backend.materialize(model, "cpu")
    backend.load_params(model, InitialValues({n: p.shape for n, p in model.named_parameters()}, 0))
    layers = list(model.model.layers)
    gathering: dict[int, list[int]] = {}

    def started(j: int) -> bool:
        group = layers[j]._get_fsdp_state()._fsdp_param_group
        return group._all_gather_result is not None or group.is_unsharded

    for i, layer in enumerate(layers):  # fires after FSDP's pre-backward of layer i (its output's hook)
        layer.mlp.register_full_backward_pre_hook(
            lambda m, g, i=i: gathering.__setitem__(i, [i - j for j in range(i) if started(j)])
        )
    ids = global_batch(0, 0, 1, 16, cfg.vocab_size)
    model(ids, labels=ids).loss.backward()
    assert sorted(gathering) == list(range(len(layers)))
    for i, back in gathering.items():
        assert sorted(back) == [d for d in ahead if i - d >= 0], (spec, i, back)


def test_fsdp2_without_backward_prefetch_trains_like_the_unsharded_model(gloo_world_of_one):
    from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend
    from fsdpbench.model import InitialValues, init_full_tensor
    from fsdpbench.run.tokens import global_batch

    cfg = preset_tiny()
    ids = global_batch(0, 0, 1, 16, cfg.vocab_size)
    full = build_model(cfg, device="cpu")
    with torch.no_grad():
        for name, p in full.named_parameters():
            p.copy_(init_full_tensor(name, tuple(p.shape), 0))
    full(ids, labels=ids).loss.backward()
    backend = TorchFSDP2Backend()
    model = backend.apply(_meta_model(), backend.init_mesh("cpu", (1,)), parse_arms("torch:prefetch=none")[0])
    backend.materialize(model, "cpu")
    backend.load_params(model, InitialValues({n: p.shape for n, p in full.named_parameters()}, 0))
    model(ids, labels=ids).loss.backward()
    want = dict(full.named_parameters())
    worst = max((p.grad.full_tensor() - want[n].grad).abs().max().item() for n, p in model.named_parameters())
    assert worst <= 1e-6


def test_fsdp1_default_none_and_one_set_its_own_knobs(gloo_world_of_one):
    from torch.distributed.fsdp import BackwardPrefetch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    from fsdpbench.backends.fsdp1 import FSDP1Backend

    def knobs(spec: str) -> set[tuple[bool, object]]:
        backend = FSDP1Backend()
        root = backend.apply(_meta_model(), backend.init_mesh("cpu", (1,)), parse_arms(spec)[0])
        return {(u.forward_prefetch, u.backward_prefetch) for u in FSDP.fsdp_modules(root)}

    assert knobs("fsdp1") == {(False, None)}  # prefetch=0: both off, as before
    assert knobs("fsdp1:prefetch=none") == {(False, None)}
    # default: the keywords left out, so FSDP1's own defaults (no forward, BACKWARD_PRE)
    defaults = inspect.signature(FSDP.__init__).parameters
    assert defaults["forward_prefetch"].default is False
    assert knobs("fsdp1:prefetch=default") == {(False, defaults["backward_prefetch"].default)}
    assert knobs("fsdp1:fwd_prefetch=1:bwd_prefetch=none") == {(True, None)}
    assert knobs("fsdp1:prefetch=1") == {(True, BackwardPrefetch.BACKWARD_PRE)}


class _Recorder:
    """A module stand-in that records the prefetch calls made on it (hyper has no implicit prefetch)."""

    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def modules(self):
        return [self]

    def set_modules_to_forward_prefetch(self, modules):
        self.calls.append((self.name, "forward", [m.name for m in modules]))

    def set_modules_to_backward_prefetch(self, modules):
        self.calls.append((self.name, "backward", [m.name for m in modules]))


def test_plan_without_implicit_prefetch_sets_nothing_for_none_or_default():
    from types import SimpleNamespace

    from fsdpbench.backends.plan import apply_plan

    calls: list = []
    layers = [_Recorder(calls, f"l{i}") for i in range(3)]
    model = _Recorder(calls, "root")
    model.model = SimpleNamespace(layers=layers)
    for fwd, bwd in (("none", "none"), ("default", "default")):
        apply_plan(
            model,
            lambda m, **kw: None,
            reshard_after_forward=True,
            forward=fwd,
            backward=bwd,
            implicit_backward=False,
        )
    assert calls == []
    apply_plan(
        model,
        lambda m, **kw: None,
        reshard_after_forward=True,
        forward="none",
        backward=2,
        implicit_backward=False,
    )
    assert calls == [("l1", "backward", ["l0"]), ("l2", "backward", ["l1", "l0"])]


def test_deepspeed_prefetch_default_leaves_its_own_bucket():
    from fsdpbench.backends.deepspeed_zero3 import deepspeed_config

    zero = lambda spec: deepspeed_config(parse_arms(spec)[0], 1000)["zero_optimization"]  # noqa: E731
    assert "stage3_prefetch_bucket_size" not in zero("deepspeed:prefetch=default")
    assert "overlap_comm" not in zero("deepspeed:prefetch=default")
    assert zero("deepspeed:prefetch=none")["stage3_prefetch_bucket_size"] == 0
    assert zero("deepspeed")["overlap_comm"] is False  # prefetch=0, as before
    assert zero("deepspeed:prefetch=2")["stage3_prefetch_bucket_size"] == 2000


# ------------------------------------------------------------------------- point 1: torch_npu's FSDP2

NPU_SCRIPT = """
import json, sys
import torch, torch.distributed as dist
from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend, select_fully_shard
from fsdpbench.config import parse_arms, preset_tiny
from fsdpbench.errors import LaunchError
from fsdpbench.model import build_model

out = {"before_import": select_fully_shard("auto", "npu")[1]}
import torch_npu  # the stand-in: its import patch goes on now
out["auto_on_npu"] = select_fully_shard("auto", "npu")[1]
out["auto_on_cpu"] = select_fully_shard("auto", "cpu")[1]
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

def ran(spec):
    backend = TorchFSDP2Backend()
    with torch.device("meta"):
        model = build_model(preset_tiny())
    try:
        backend.apply(model, backend.init_mesh("cpu", (1,)), parse_arms(spec)[0])
    except LaunchError as exc:
        return str(exc)
    facts = backend.describe()
    # torch's own state as the stand-in's replay of torch_npu's FSDPParamGroup.__init__ left it
    groups = [g for m in model.modules() if hasattr(m, "_get_fsdp_state")
              for g in m._get_fsdp_state()._fsdp_param_groups]
    facts["comm_mem_cache"] = sorted({getattr(g._all_gather_comm, "_use_mem_cache", None) for g in groups}
                                     | {getattr(g._reduce_scatter_comm, "_use_mem_cache", None) for g in groups},
                                     key=str)
    facts["skip_flag_on"] = sorted(n or "root" for n, m in model.named_modules()
                                   if hasattr(m, "skip_custom_post_forward"))
    return facts

out["memcache_upstream"] = ran("torch:mem_cache=on")  # fsdp=auto on cpu: upstream, so refused
out["upstream"] = ran("torch:fsdp=upstream")
out["npu"] = ran("torch:fsdp=npu")
out["npu_memcache_prefetch1"] = ran("torch:fsdp=npu:mem_cache=on:prefetch=1")
out["upstream_after_npu"] = ran("torch:fsdp=upstream")
dist.destroy_process_group()
print(json.dumps(out))
from fsdpbench.run.process_exit import exit_without_teardown
exit_without_teardown(0)  # gloo's threads can abort the interpreter's own teardown
"""


def test_torch_arm_picks_torch_npus_fully_shard_and_records_its_patches(tmp_path):
    from helpers import write_npu_stand_in

    write_npu_stand_in(tmp_path)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO / 'src'}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", NPU_SCRIPT], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    upstream, npu = "torch.distributed.fsdp.fully_shard", "torch_npu.distributed.fsdp.fully_shard"
    # the stand-in is importable, so auto on NPU imports and takes it
    assert out["before_import"] == npu and out["auto_on_npu"] == npu and out["auto_on_cpu"] == upstream
    # upstream on NPU: torch_npu's import patch is on (it cannot be kept off), its fully_shard patch is not
    assert out["upstream"]["fully_shard"] == upstream
    assert out["upstream"]["torch_npu_import_patch"] is True
    assert out["upstream"]["torch_npu_enhance_patch"] is False
    assert out["npu"]["fully_shard"] == npu and out["npu"]["torch_npu_enhance_patch"] is True
    # once torch_npu's fully_shard ran, the process's FSDP2 is patched: upstream is refused, not mislabelled
    assert "torch_npu's FSDP2 enhancement patch is already applied" in out["upstream_after_npu"]
    # mem_cache: off leaves torch_npu's default (False on every comm), on reaches every unit's comms;
    # where upstream runs it is refused in one line
    assert out["npu"]["comm_mem_cache"] == [False] and out["npu"]["mem_cache"] == "off"
    assert out["npu_memcache_prefetch1"]["comm_mem_cache"] == [True]
    assert (
        "mem_cache=on is torch_npu's buffer cache, but this arm runs " + upstream in out["memcache_upstream"]
    )
    # the opt-out goes on the units with a forward chain: the tiny preset's layers but the last
    layers = preset_tiny().num_hidden_layers
    chained = [f"model.layers.{i}" for i in range(layers - 1)]
    assert out["npu"]["skip_flag_on"] == [] and out["npu_memcache_prefetch1"]["skip_flag_on"] == chained


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_torch_npus_forward_prefetch_survives_every_step(tmp_path):
    """torch_npu's post-forward patch (replayed by the stand-in) empties a unit's forward prefetch list on
    its first post-forward and restores it only in a recompute; fsdpbench's opt-out keeps the chain. The
    reference: FSDP2's own prefetch calls, logged per rank by the stand-in, and the unsharded training."""
    from helpers import ab_run, assert_matches_reference, write_npu_stand_in
    from reference import STEPS

    stand_in, log = write_npu_stand_in(tmp_path / "standin"), tmp_path / "prefetch_log"
    log.mkdir()
    env = {"PYTHONPATH": f"{stand_in}:{REPO / 'src'}", "STANDIN_PREFETCH_LOG": str(log)}
    run_dir, steps = ab_run(tmp_path / "out", "torch:fsdp=npu:prefetch=1", "--device", "cpu", env=env)
    arm = "torch-prefetch1-npu"
    assert_matches_reference(run_dir, steps[arm], arm, rows=2)
    layers = preset_tiny().num_hidden_layers
    for rank in (0, 1):
        lines = (log / f"rank{rank}.txt").read_text().splitlines()
        forward = [line.split()[1] for line in lines if line.startswith("forward ")]
        # layer i prefetches layer i+1 in every step's forward: (layers - 1) per step
        assert forward == [f"model.layers.{i}" for i in range(1, layers)] * STEPS, (rank, forward)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["arm_runtime"][arm]["prefetch_verified_after_steps"] is True
    assert manifest["backends"][arm]["torch_npu_skip_custom_post_forward"] == [
        f"model.layers.{i}" for i in range(layers - 1)
    ]


def test_fsdp_npu_without_torch_npu_is_one_line(monkeypatch):
    from fsdpbench.backends.torch_fsdp2 import select_fully_shard
    from fsdpbench.errors import LaunchError

    monkeypatch.setitem(sys.modules, "torch_npu", None)  # not importable
    with pytest.raises(LaunchError, match="fsdp=npu, but torch_npu.distributed.fsdp.fully_shard is not"):
        select_fully_shard("npu", "cpu")
    assert select_fully_shard("auto", "npu")[1] == "torch.distributed.fsdp.fully_shard"  # older torch_npu
    assert select_fully_shard("upstream", "npu")[1] == "torch.distributed.fsdp.fully_shard"


def test_fsdp_option_is_for_the_torch_arm_and_labels_it():
    assert parse_arms("torch:fsdp=upstream")[0].label == "torch-upstream"
    assert parse_arms("torch:fsdp=npu")[0].label == "torch-npu"
    with pytest.raises(ConfigError, match="fsdp=npu applies to the torch backend only"):
        parse_arms("hyper:fsdp=npu")


# -------------------------------------------------------------------------------- point 3: kw. and env.


def _signature_here(target_backend: str, monkeypatch, capsys) -> dict:
    """The interpreter probe's script run in this process (the subprocess form is checked once below)."""
    from fsdpbench.config.arms import SHARDING_CALLS
    from fsdpbench.run.interpreters import _SIGNATURE_PROBE

    monkeypatch.setenv("HYPER_PARALLEL_PLATFORM", "torch")
    exec(_SIGNATURE_PROBE, {"TARGET": SHARDING_CALLS[target_backend]})  # noqa: S102
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_kw_is_typed_from_the_signature_read_in_the_arms_interpreter(monkeypatch, capsys):
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    from fsdpbench.run.interpreters import sharding_signature, type_keywords

    def keywords(function) -> dict:
        params = inspect.signature(function).parameters
        return {
            n: p
            for n, p in params.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }

    env = {"PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    sig = sharding_signature(sys.executable, "fsdp1", env)  # in a subprocess of the arm's interpreter
    own = keywords(FullyShardedDataParallel.__init__)
    assert set(sig["params"]) == set(own)
    assert (
        own["sync_module_states"].default is False and sig["params"]["sync_module_states"]["kind"] == "bool"
    )
    arm = parse_arms("fsdp1:kw.sync_module_states=true:kw.ignored_states=abc")[0]
    record = type_keywords(arm, sig)
    assert arm.kw == {"sync_module_states": True, "ignored_states": "abc"}
    assert own["ignored_states"].default is None
    assert record["ignored_states"]["typed_as"] == "the text as given (the default is None)"
    with pytest.raises(ConfigError, match="kw.sync_module_states expects bool"):
        type_keywords(parse_arms("fsdp1:kw.sync_module_states=maybe")[0], sig)
    # torch's fully_shard: offload_policy defaults to an object; a name it lacks is refused with its list
    sig = _signature_here("torch", monkeypatch, capsys)
    assert set(sig["params"]) == set(keywords(fully_shard))
    assert type(keywords(fully_shard)["offload_policy"].default).__name__ == "OffloadPolicy"
    with pytest.raises(ConfigError, match=r"kw.offload_policy: .*defaults to a OffloadPolicy object"):
        type_keywords(parse_arms("torch:kw.offload_policy=cpu")[0], sig)
    with pytest.raises(ConfigError, match=r"has no keyword bogus; its keywords: .*offload_policy"):
        type_keywords(parse_arms("torch:kw.bogus=1")[0], sig)


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("torch:kw.mesh=x", "kw.mesh is set by fsdpbench's sharding plan"),
        ("torch:kw.mp_policy=x", "kw.mp_policy is set by fsdpbench's sharding plan"),
        ("fsdp1:kw.backward_prefetch=x", "kw.backward_prefetch is set by fsdpbench's sharding plan"),
        ("deepspeed:kw.x=1", "the deepspeed arm has no sharding call to pass keywords to"),
        ("hyper:env.HYPER_PARALLEL_PLATFORM=mindspore", "always runs with HYPER_PARALLEL_PLATFORM=torch"),
        ("torch:env.1A=1", "env.1A is not an environment variable name"),
        ("hyper:mem_cache=on", "mem_cache=on is torch_npu's FSDP2 buffer cache"),
        ("torch:fsdp=upstream:mem_cache=on", "with fsdp=auto (on NPU) or fsdp=npu only"),
        ("torch:mem_cache=maybe", "option mem_cache 'maybe'; choose one of: off, on"),
    ],
)
def test_kw_and_env_refusals_are_one_line(spec, needle):
    with pytest.raises(ConfigError, match=None) as err:
        parse_arms(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_kw_is_refused_before_anything_launches(tmp_path):
    proc = run_cli("ab", "--arms", "torch,fsdp1:kw.bogus=1", "--out", str(tmp_path), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "kw.bogus: torch.distributed.fsdp.FullyShardedDataParallel" in lines[0], lines[0]
    assert not list(tmp_path.iterdir()), "something was created for a refused arm"


def test_env_is_per_arm_and_wins_over_the_launchers_defaults(tmp_path, monkeypatch):
    from fsdpbench.run.interpreters import interpreter_environment
    from fsdpbench.run.launcher import worker_environment

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = RunConfig(
        arms=parse_arms("torch:env.OMP_NUM_THREADS=4:env.NPU_ASD_ENABLE=0,fsdp1"), out=str(tmp_path)
    )
    base = worker_environment(cfg)
    assert base["OMP_NUM_THREADS"] == "1"  # the launcher's default
    torch_env, fsdp1_env = (interpreter_environment(a, base) for a in cfg.arms)
    assert torch_env["OMP_NUM_THREADS"] == "4" and torch_env["NPU_ASD_ENABLE"] == "0"
    assert fsdp1_env["OMP_NUM_THREADS"] == "1" and "NPU_ASD_ENABLE" not in fsdp1_env
    assert [a.label for a in cfg.arms] == ["torch", "fsdp1"]  # kw./env. stay out of the label


def test_report_configuration_shows_kw_env_and_what_ran():
    from fsdpbench.report.build import _configuration

    arm = Arm(backend="torch", bwd_prefetch="none", env={"NPU_ASD_ENABLE": "0"})
    manifest = {
        "arms": [arm.options()],
        "backends": {
            "torch": {
                "library": "torch",
                "fully_shard": "torch_npu.distributed.fsdp.fully_shard",
                "torch_npu_import_patch": True,
                "torch_npu_enhance_patch": True,
                "prefetch": {"forward": "none", "backward": "none (each unit prefetches only itself)"},
                "kw": {"x": 1},
            }
        },
    }
    data = type("D", (), {"manifest": manifest, "statuses": []})()
    text = repr(_configuration(data))
    for needle in (
        "NPU_ASD_ENABLE=0",
        "torch_npu.distributed.fsdp.fully_shard",
        "import, fully_shard",
        "none (each unit prefetches only itself)",
        "x=1",
    ):
        assert needle in text, needle


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_ab_records_prefetch_kw_and_env_as_run(tmp_path):
    """One 2-rank launch: the arm still trains like the unsharded reference, and the manifest records
    each setting as the worker ran it."""
    from helpers import ab_run, assert_matches_reference

    arm = "fsdp1-prefetchdefault"
    run_dir, steps = ab_run(
        tmp_path, "fsdp1:prefetch=default:kw.sync_module_states=false:env.NPU_ASD_ENABLE=0"
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert_matches_reference(run_dir, steps[arm], arm, rows=2)
    (entry,) = manifest["arms"]
    assert entry["label"] == arm and entry["env"] == {"NPU_ASD_ENABLE": "0"}
    assert entry["kw"] == {"sync_module_states": False}  # typed from the signature, not "false"
    call = manifest["interpreters"][arm]["sharding_call"]
    assert call["function"] == "torch.distributed.fsdp.FullyShardedDataParallel"
    ran = manifest["backends"][arm]
    assert ran["prefetch"]["backward"] == "1 unit (BACKWARD_PRE, FSDP1 default)"
    assert ran["kw"] == {"sync_module_states": False}

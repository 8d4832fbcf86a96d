"""hyper_parallel's ``fully_shard`` (Torch backend) behind the ``Backend`` interface.

hyper_parallel (https://github.com/mindspore-ai/hyper-parallel) is optional and imported only inside
``HyperBackend`` methods: its import replaces torch's module backward hooks process-wide, so only the
worker of a hyper arm may import it. Importing this module costs nothing (no torch, no hyper_parallel),
so the torch-free launcher can call ``hyper_parallel_info()`` for the manifest.

Everything hyper_parallel needs from its caller (reference/fsdp_backends.md §2 and §4) lives here:

* ``HYPER_PARALLEL_PLATFORM=torch`` before the import, and the process group initialised by the worker
  before hyper's own mesh (which would otherwise create an ``hccl`` group);
* hyper's own ``DeviceMesh``, ``MixedPrecisionPolicy`` and ``Shard`` classes (torch's are not accepted);
* explicit ``reshard_after_forward`` bools (hyper reads ``None`` as "never reshard", FSDP2 as "reshard
  non-root modules");
* no CPU offload (hyper cannot synchronise after offload on a CPU device);
* ``optimizer.step()`` under ``SkipDTensorDispatch`` (hyper's DTensor has no layout rule for ``mul_``);
* a gloo-only fix for ``all_gather_into_tensor``, installed on CPU only (``_install_gloo_all_gather_fix``);
* the shared plan's shard-dim rule: hyper's ``fully_shard`` takes ``shard_placement_fn`` but, at the
  commits studied, ``TorchHSDPStateV2._init_hsdp_params`` does not pass it on, so every parameter would be
  sharded on dim 0 and the ``[1, H]`` shared-expert gate refused. ``apply`` passes it on for the duration
  of the wrap (``_forward_shard_placement_fn``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import json
import logging
import math
import os
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdpbench.backends.base import Backend
from fsdpbench.backends.plan import apply_plan, shard_dim
from fsdpbench.errors import ConfigError, LaunchError

if TYPE_CHECKING:
    import torch

    from fsdpbench.config import Arm
    from fsdpbench.model.init import InitialValues

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "install it beside fsdpbench from its repository: `git clone https://github.com/mindspore-ai/hyper-parallel "
    "&& pip install --no-deps -e hyper-parallel pyyaml` (see docs/arms.md, 'The hyper arm')"
)


def hyper_shard_dims(shapes: Iterable[tuple[str, tuple[int, ...]]], shard_size: int) -> dict[str, int]:
    """The tensor dim each parameter is sharded on by the hyper arm; raise where hyper cannot shard it.

    The dim is the shared plan's (``plan.shard_dim``). hyper_parallel gathers every shard into one flat
    buffer and views it in the parameter's contiguous shape, and reduce-scatters the flattened gradient;
    that is only right for dim ``d`` when all dims before ``d`` have size 1 (e.g. ``[1, H]`` on dim 1).

    Args:
        shapes: ``(name, shape)`` per parameter, in any order.
        shard_size: ranks along the mesh's shard axis.
    Returns:
        ``{name: dim}``.
    Raises:
        ConfigError: a parameter no dim of which divides by ``shard_size``, or whose dim cannot be
            gathered correctly by hyper_parallel; the message names the parameter and shape.
    """
    dims: dict[str, int] = {}
    for name, shape in shapes:
        shape = tuple(shape)
        dim = shard_dim(shape, shard_size)
        if shard_size > 1 and (not shape or shape[dim] % shard_size):
            raise ConfigError(
                f"hyper arm: parameter {name} {list(shape)} has no dim divisible by the shard size "
                f"{shard_size}, and hyper_parallel refuses uneven shards; use a mesh whose shard size "
                f"divides it, or a model shape where it does"
            )
        if math.prod(shape[:dim]) != 1:
            raise ConfigError(
                f"hyper arm: parameter {name} {list(shape)} would be sharded on dim {dim}, but hyper_parallel "
                f"gathers shards as flat dim-0 blocks, which is only correct when the dims before it are 1; "
                f"use a shard size that divides {shape[0]}"
            )
        dims[name] = dim
    return dims


def hyper_parallel_info() -> dict[str, Any] | None:
    """Version and git commit of the installed hyper_parallel, without importing it (None if absent).

    The commit comes from pip's ``direct_url.json`` (``pip install git+URL``) or, for a local (editable)
    install, from ``git rev-parse HEAD`` in the source folder.
    """
    try:
        dist = importlib.metadata.distribution("hyper_parallel")
    except importlib.metadata.PackageNotFoundError:
        return None
    info: dict[str, Any] = {"version": dist.version, "commit": None, "source": None}
    raw = dist.read_text("direct_url.json")
    if raw:
        direct = json.loads(raw)
        info["source"] = direct.get("url")
        info["commit"] = direct.get("vcs_info", {}).get("commit_id")
        url = direct.get("url", "")
        if info["commit"] is None and url.startswith("file://"):
            info["commit"] = _git_head(Path(url[len("file://") :]))
    return info


def _git_head(folder: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


class HyperBackend(Backend):
    """hyper_parallel ``fully_shard`` with its Torch platform, on the shared sharding plan."""

    name = "hyper"

    def __init__(self) -> None:
        self._device: torch.device | None = None
        self._owners: dict[int, Any] = {}  # id(sharded param) → hyper's TorchHSDPParamV2
        self._wrapped: list[Any] = []  # the modules given to fully_shard

    # ---------------------------------------------------------------------------------------- setup
    def setup(self, device_type: str) -> None:
        """Select hyper's Torch platform, import it, and (on CPU, where the group is gloo) install the
        gloo all-gather fix: on NCCL/HCCL it would only add a Python call per all-gather.

        Raises:
            LaunchError: hyper_parallel (or its undeclared dependency pyyaml) is not importable, or it
                was already imported for another platform.
        """
        previous = os.environ.get("HYPER_PARALLEL_PLATFORM")
        if previous not in (None, "torch"):
            log.warning("HYPER_PARALLEL_PLATFORM=%s replaced by torch for the hyper arm", previous)
        os.environ["HYPER_PARALLEL_PLATFORM"] = "torch"
        try:
            import yaml  # noqa: F401  (hyper_parallel imports it when it creates its first DTensor)
        except ImportError:
            raise LaunchError(
                "the hyper arm needs pyyaml, which hyper_parallel does not declare: pip install pyyaml"
            ) from None
        try:
            import hyper_parallel  # noqa: F401
            from hyper_parallel.core.fully_shard import fully_shard  # noqa: F401
            from hyper_parallel.platform import get_platform
        except ImportError as exc:
            raise LaunchError(
                f"the hyper arm needs hyper_parallel, which is not importable ({exc}); {INSTALL_HINT}"
            ) from None
        platform = get_platform()
        if "torch" not in type(platform).__module__:
            raise LaunchError(
                f"hyper_parallel was already loaded for another platform ({type(platform).__module__}); "
                "unset HYPER_PARALLEL_PLATFORM or set it to torch"
            )
        if device_type == "cpu":
            _install_gloo_all_gather_fix()

    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        """hyper's own ``DeviceMesh``: ``("shard",)`` or ``("replicate", "shard")``."""
        import torch
        from hyper_parallel import init_device_mesh

        if device_type == "cpu":
            self._device = torch.device("cpu")
        else:
            self._device = torch.device(device_type, torch.get_device_module(device_type).current_device())
        names = ("shard",) if len(mesh_shape) == 1 else ("replicate", "shard")
        return init_device_mesh(device_type=device_type, mesh_shape=tuple(mesh_shape), mesh_dim_names=names)

    # ---------------------------------------------------------------------------------------- apply
    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Wrap each decoder layer, then the root, with hyper's ``fully_shard``; set layer prefetch.

        Raises:
            ConfigError: ``comm_fusion`` asked of a hyper_parallel whose ``fully_shard`` has no such
                option, or a parameter hyper cannot shard (see ``hyper_shard_dims``).
        """
        import torch
        from hyper_parallel.core.fully_shard import fully_shard
        from hyper_parallel.core.placement_types import Shard
        from hyper_parallel.platform.torch.fully_shard.utils import MixedPrecisionPolicy

        extra: dict[str, Any] = {}
        if arm.comm_fusion:
            if "comm_fusion" not in inspect.signature(fully_shard).parameters:
                info = hyper_parallel_info() or {}
                raise ConfigError(
                    f"arm {arm.label!r}: comm_fusion=true, but the installed hyper_parallel "
                    f"(commit {info.get('commit') or 'unknown'}) has no comm fusion in fully_shard (only its "
                    "legacy hsdp() API has one); drop comm_fusion or install a hyper_parallel that has it"
                )
            extra["comm_fusion"] = True
        shard_size = _shard_size(mesh)
        dims = hyper_shard_dims(((n, tuple(p.shape)) for n, p in model.named_parameters()), shard_size)
        by_shape = {}  # the placement fn sees only the tensor: the rule depends on shape alone
        for name, p in model.named_parameters():
            by_shape[tuple(p.shape)] = dims[name]

        def placement(param: torch.nn.Parameter) -> Any:
            return Shard(by_shape.get(tuple(param.shape), 0))

        mp = MixedPrecisionPolicy(
            param_dtype=getattr(torch, arm.param_dtype), reduce_dtype=getattr(torch, arm.reduce_dtype)
        )
        common = dict(mesh=mesh, shard_placement_fn=placement, mp_policy=mp, device=self._device, **extra)
        forward, backward = arm.prefetch_directions()
        with _forward_shard_placement_fn(placement):
            units = apply_plan(
                model,
                fully_shard,
                reshard_after_forward=arm.reshard_after_forward,
                forward=forward,
                backward=backward,
                implicit_backward=False,  # hyper_parallel prefetches only what it is given
                unit=arm.unit,
                **common,
                **arm.kw,
            )
        from fsdpbench.config.arms import prefetch_statement

        self._ran = {"prefetch": prefetch_statement("hyper", forward, backward), "kw": dict(arm.kw)}
        model.register_forward_hook(_expose_dataclass_output, prepend=True)
        self._wrapped, self._owners = units, {}
        return model

    def materialize(self, model: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
        """Give every sharded parameter and every meta buffer uninitialised storage on ``device``
        (hyper's counterpart of ``model.to_empty``, which cannot copy hyper's DTensor parameters: no
        layout rule for ``_has_compatible_shallow_copy_type``; values come from ``load_param``)."""
        import torch
        from hyper_parallel.core.dtensor import DTensor

        owners = list(_hsdp_params(self._wrapped))
        sharded = {id(o.sharded_param) for o in owners}
        stray = [n for n, p in model.named_parameters() if id(p) not in sharded]
        if stray:
            raise LaunchError(f"hyper arm: parameters outside every fully_shard unit: {', '.join(stray[:5])}")
        with torch.no_grad():
            for owner in owners:
                old = owner.sharded_param
                local = torch.empty(owner.sharded_size, dtype=old.dtype, device=device)
                new = torch.nn.Parameter(DTensor.from_local(local, owner._spmd_mesh, owner._spmd_placements))
                new.requires_grad_(old.requires_grad)
                new._hsdp_param_initialized = True
                owner.sharded_param = new
                owner._sharded_param_data = local.view(-1)
                owner._setattr_on_modules(new)
            for module in model.modules():
                for name, buf in module._buffers.items():
                    if buf is not None and buf.is_meta:
                        module._buffers[name] = torch.empty_like(buf, device=device)
        self._owners = {}
        return model

    # ---------------------------------------------------------------------------------- parameters
    def load_param(self, name: str, param: torch.nn.Parameter, values: InitialValues) -> None:
        """Compute this rank's chunk (``torch.chunk`` along hyper's shard dim) into ``param``'s local tensor."""
        owner = self._owner(param)
        info = owner.mesh_info
        shape = values.shape(name)
        dim = owner.hsdp_placement.dim
        chunk = -(-shape[dim] // info.shard_mesh_size)
        start = min(info.shard_mesh_rank * chunk, shape[dim])
        index = tuple(
            slice(start, min(start + chunk, shape[dim])) if d == dim else slice(None)
            for d in range(len(shape))
        )
        values.block(name, index, out=param._local_tensor)

    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The whole parameter on every rank (hyper's DTensor ``full_tensor``, a collective)."""
        return param.full_tensor()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()`` on the local shards: hyper's DTensor cannot dispatch optimizer ops."""
        from hyper_parallel import SkipDTensorDispatch

        with SkipDTensorDispatch():
            optimizer.step()

    def describe(self) -> dict[str, Any]:
        """``{"library", "version", "commit", "source"}`` of the installed hyper_parallel, for the manifest."""
        return {"library": "hyper_parallel", **(hyper_parallel_info() or {}), **getattr(self, "_ran", {})}

    def _owner(self, param: torch.nn.Parameter) -> Any:
        owner = self._owners.get(id(param))
        if owner is None:
            # by module and name: to_empty may have put new Parameter objects on the modules
            self._owners = {
                id(getattr(o._module_info.module, o._module_info.param_name)): o
                for o in _hsdp_params(self._wrapped)
            }
            owner = self._owners.get(id(param))
        if owner is None:
            raise LaunchError("hyper arm: load_param got a parameter that hyper's fully_shard did not shard")
        return owner


def _expose_dataclass_output(module: Any, args: Any, output: Any) -> None:
    """Register a dataclass output type (e.g. the model's ``CausalLMOutput``) as a pytree node.

    hyper_parallel finds a module's output tensors with torch's pytree and hooks them to start the
    root's backward (which reduce-scatters the root's gradients and reshards it). A dataclass that pytree
    does not know is opaque: the root's hooks never fire, its parameters are never updated and stay
    unsharded. Runs before hyper's own forward hook (``prepend=True``).
    """
    import dataclasses

    from torch.utils import _pytree

    kind = type(output)
    if dataclasses.is_dataclass(output) and kind not in _pytree.SUPPORTED_NODES:
        _pytree.register_dataclass(kind)


def _shard_size(mesh: Any) -> int:
    shape = tuple(mesh.mesh_shape) if hasattr(mesh, "mesh_shape") else tuple(mesh.shape)
    return int(shape[-1])


def _hsdp_params(modules: Iterable[Any]) -> Iterator[Any]:
    for module in modules:
        yield from module.hsdp_scheduler.hsdp_state.hsdp_params


@contextlib.contextmanager
def _forward_shard_placement_fn(placement: Any) -> Iterator[None]:
    """Make hyper's per-module state pass ``placement`` to each parameter it shards.

    ``TorchHSDPStateV2._init_hsdp_params`` builds ``TorchHSDPParamV2`` without the
    ``shard_placement_fn`` that ``fully_shard`` was given (so every parameter lands on dim 0). The
    subclass fills it in unless hyper passes one itself (a later hyper_parallel that forwards it).
    """
    from hyper_parallel.platform.torch.fully_shard import state

    original = state.TorchHSDPParamV2

    class _Placed(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if len(args) < 5:
                kwargs.setdefault("shard_placement_fn", placement)
            super().__init__(*args, **kwargs)

    state.TorchHSDPParamV2 = _Placed
    try:
        yield
    finally:
        state.TorchHSDPParamV2 = original


_GLOO_FIX_INSTALLED = False


def _install_gloo_all_gather_fix() -> None:
    """Hide gloo's version-counter bumps on all-gather outputs from autograd (gloo groups only).

    gloo's all-gather into a tensor ``copy_()``s each rank's chunk into the output, which bumps its
    autograd version by the world size. hyper's unsharded parameters are views of that output, so the
    re-gather in backward (``reshard_after_forward=True``) invalidates the tensors autograd saved in
    forward: "modified by an inplace operation". NCCL/HCCL write through raw pointers and do not bump
    it; FSDP2 hides its own copy-out the same way (``_unsafe_preserve_version_counter``). The version is
    restored when the collective has finished (at ``wait()`` for async calls): same buffers, same
    collective count, no extra copy. Other backends go straight to torch.

    The shim calls c10d's ``all_gather_into_tensor`` as it is at call time (not a reference taken at
    install), so that ``--count-collectives``, which wraps c10d's functions later, counts hyper's
    all-gathers on every torch (on torch 2.6 the function does not forward to a wrapped spelling).
    """
    global _GLOO_FIX_INSTALLED
    if _GLOO_FIX_INSTALLED:
        return
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def original(*args: Any, **kwargs: Any) -> Any:
        return c10d.all_gather_into_tensor(*args, **kwargs)

    class _Work:
        def __init__(self, work: Any, guard: Any) -> None:
            self._work, self._guard = work, guard

        def wait(self, *args: Any, **kwargs: Any) -> bool:
            if self._work is not None:
                self._work.wait(*args, **kwargs)
                self._guard.__exit__(None, None, None)
                self._work = None
            return True

        def is_completed(self) -> bool:
            return self._work is None or self._work.is_completed()

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):  # noqa: ANN001, ANN202
        if dist.get_backend(group) != "gloo":
            return original(output_tensor, input_tensor, group=group, async_op=async_op)
        guard = torch.autograd._unsafe_preserve_version_counter(output_tensor)
        work = original(output_tensor, input_tensor, group=group, async_op=async_op)
        if async_op:
            return _Work(work, guard)
        guard.__exit__(None, None, None)
        return work

    dist.all_gather_into_tensor = all_gather_into_tensor
    _GLOO_FIX_INSTALLED = True

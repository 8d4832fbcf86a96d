"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) behind the common plan (backends/plan.py).

On NPU the arm shards with torch_npu's ``fully_shard`` (``torch_npu.distributed.fsdp.fully_shard``,
torch_npu 26.x releases) unless ``fsdp=upstream``. Facts from torch_npu's source
(github.com/Ascend/pytorch, ``torch_npu/distributed/fsdp/_add_fsdp_patch.py`` at v2.9.0-26.1.0,
commit 323a8176b6fadd58adfe265524a1865a862a7a44):

* ``import torch_npu`` applies ``_apply_fsdp_patch`` process-wide ("essential patch to run on NPU":
  ``FSDPParamGroup.finalize_backward`` waits on the NPU stream, its own all-gather copy-in); every FSDP2
  arm on NPU runs with it, upstream included, and ``describe`` records it;
* torch_npu's ``fully_shard(*args, **kwargs)`` applies ``_apply_fsdp_enhance_patch`` on its first call
  (``_FSDP_ENHANCE_PATCH_APPLIED``, lines 286-314): a memory cache for all-gather/reduce-scatter buffers
  (lines 20-65, 162-221; used only by units whose module has ``_use_mem_cache = True`` when ``fully_shard``
  runs: the ``mem_cache`` arm option), a forward-prefetch backup (lines 254-274) and no repeated
  post-forward when a layer is recomputed in backward (lines 224-241). It patches FSDP2's classes, so it
  would reach an upstream call made later in the same process: ``fsdp=upstream`` never calls torch_npu's
  function and refuses to run if the patch is on anyway. Then it calls torch's ``fully_shard``.
* The forward-prefetch backup moves ``_states_to_forward_prefetch`` into ``_backup_forward_fetch`` on each
  first post-forward (line 272) and moves it back only when post-forward runs again in a recompute or in
  PRE_BACKWARD (lines 265-268). fsdpbench's activation checkpointing wraps ``layer.forward``, so FSDP's
  hooks never run in a recompute and the chain would be gone from step 1 on. fsdpbench therefore sets
  torch_npu's own opt-out, the module attribute ``skip_custom_post_forward`` (line 261), on every unit that
  has a forward chain (``keep_forward_chains``), and checks the lists after the steps
  (``TorchFSDP2Backend.verify_prefetch``; docs/arms.md says why this and not re-setting the chains).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fsdpbench.backends.base import Backend
from fsdpbench.backends.plan import apply_plan, shard_dim
from fsdpbench.errors import LaunchError

if TYPE_CHECKING:
    from fsdpbench.config import Arm
    from fsdpbench.model.init import InitialValues

log = logging.getLogger(__name__)

UPSTREAM = "torch.distributed.fsdp.fully_shard"
NPU = "torch_npu.distributed.fsdp.fully_shard"
NPU_PATCH_MODULE = "torch_npu.distributed.fsdp._add_fsdp_patch"
NPU_SKIP_POST_FORWARD = "skip_custom_post_forward"
"""torch_npu's opt-out of its forward-prefetch backup: ``hasattr(module, ...)`` (any value) skips it."""
NPU_MEM_CACHE = "_use_mem_cache"
"""Read by torch_npu from a unit's first module when ``fully_shard`` builds its parameter group."""


def npu_fully_shard() -> Callable[..., Any] | None:
    """torch_npu's ``fully_shard``, or None where torch_npu or its function is absent."""
    try:
        from torch_npu.distributed.fsdp import fully_shard
    except ImportError:
        return None
    return fully_shard


def select_fully_shard(choice: str, device_type: str) -> tuple[Callable[..., Any], str]:
    """(the ``fully_shard`` to call, its import path) for the arm option ``fsdp`` on ``device_type``.

    Raises:
        LaunchError: ``fsdp=npu`` where torch_npu has no ``fully_shard`` (one line: what to do).
    """
    if choice != "upstream" and (choice == "npu" or device_type == "npu"):
        function = npu_fully_shard()
        if function is not None:
            return function, NPU
        if choice == "npu":
            raise LaunchError(
                f"torch arm: fsdp=npu, but {NPU} is not importable here (torch_npu absent, or older than its "
                "26.x releases); install a torch_npu that has it or use fsdp=upstream"
            )
    from torch.distributed.fsdp import fully_shard

    return fully_shard, UPSTREAM


def npu_patch_state() -> dict[str, Any]:
    """Which of torch_npu's FSDP2 patches are on in this process (None: torch_npu not imported)."""
    import sys

    if "torch_npu" not in sys.modules:
        return {"torch_npu_import_patch": None, "torch_npu_enhance_patch": None}
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    patch = sys.modules.get(NPU_PATCH_MODULE)
    finalize = getattr(FSDPParamGroup.finalize_backward, "__module__", "") or ""
    return {
        "torch_npu_import_patch": finalize.startswith("torch_npu"),
        "torch_npu_enhance_patch": bool(getattr(patch, "_FSDP_ENHANCE_PATCH_APPLIED", False)),
    }


def mesh_dim_names(ndim: int) -> tuple[str, ...]:
    """``("shard",)`` for FSDP, ``("replicate", "shard")`` for HSDP."""
    return ("shard",) if ndim == 1 else ("replicate", "shard")


def with_mem_cache(fully_shard: Callable[..., Any]) -> Callable[..., Any]:
    """``fully_shard`` that first sets torch_npu's ``_use_mem_cache = True`` on the module(s) it shards
    (torch_npu reads it while the call builds the unit's parameter group, so it must be set before)."""

    def shard(module: Any, **kwargs: Any) -> Any:
        for m in module if isinstance(module, list | tuple) else (module,):
            setattr(m, NPU_MEM_CACHE, True)
        return fully_shard(module, **kwargs)

    return shard


def keep_forward_chains(units: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """Set torch_npu's opt-out ``skip_custom_post_forward`` on every unit with a forward prefetch chain, so
    its post-forward patch leaves the chain in place; returns those units."""
    chained = [u for u in units if u._get_fsdp_state()._states_to_forward_prefetch]
    for unit_module in chained:
        setattr(unit_module, NPU_SKIP_POST_FORWARD, True)
    return chained


def prefetch_lists(units: list[torch.nn.Module], names: dict[int, str]) -> dict[str, tuple[list, list]]:
    """``{unit name: (forward prefetch unit names, backward prefetch unit names)}`` as FSDP2 holds them
    now (``FSDPState._states_to_forward_prefetch`` / ``_states_to_backward_prefetch``)."""
    by_state = {id(u._get_fsdp_state()): names[id(u)] for u in units}

    def named(states: list[Any]) -> list[str]:
        return [by_state.get(id(s), "?") for s in states or []]

    out = {}
    for u in units:
        state = u._get_fsdp_state()
        out[names[id(u)]] = (
            named(state._states_to_forward_prefetch),
            named(state._states_to_backward_prefetch),
        )
    return out


class TorchFSDP2Backend(Backend):
    """FSDP2: one all-gather and one reduce-scatter (plus one all-reduce for HSDP) per shard unit."""

    name = "torch"

    def __init__(self) -> None:
        self._ran: dict[str, Any] = {}
        self._units: list[torch.nn.Module] = []
        self._names: dict[int, str] = {}
        self._planned: dict[str, tuple[list, list]] = {}

    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(
            device_type, tuple(mesh_shape), mesh_dim_names=mesh_dim_names(len(mesh_shape))
        )

    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Shard each decoder layer, then the root (embed_tokens, norm, lm_head); set prefetch chains.

        Raises:
            LaunchError: ``fsdp=npu`` without torch_npu's function, or ``fsdp=upstream`` in a process
                where torch_npu's enhancement patch is already on.
        """
        from torch.distributed.fsdp import MixedPrecisionPolicy
        from torch.distributed.tensor import Shard

        from fsdpbench.config.arms import prefetch_statement

        fully_shard, path = select_fully_shard(arm.fsdp, mesh.device_type)
        if path == UPSTREAM and npu_patch_state()["torch_npu_enhance_patch"]:
            raise LaunchError(
                f"arm {arm.label!r}: upstream FSDP2 asked for, but torch_npu's FSDP2 enhancement patch is "
                "already applied in this process; upstream FSDP2 cannot be measured here"
            )
        if arm.mem_cache == "on" and path != NPU:
            raise LaunchError(
                f"arm {arm.label!r}: mem_cache=on is torch_npu's buffer cache, but this arm runs {path}; "
                "use fsdp=npu (or fsdp=auto on an NPU with torch_npu), or drop mem_cache"
            )
        if arm.mem_cache == "on":
            fully_shard = with_mem_cache(fully_shard)
        forward, backward = arm.prefetch_directions()

        shard_size = mesh.size(mesh.ndim - 1)
        common = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=getattr(torch, arm.param_dtype), reduce_dtype=getattr(torch, arm.reduce_dtype)
            ),
            "shard_placement_fn": lambda p: Shard(shard_dim(p.shape, shard_size)),
        }
        units = apply_plan(
            model,
            fully_shard,
            reshard_after_forward=arm.reshard_after_forward,
            forward=forward,
            backward=backward,
            implicit_backward=True,
            unit=arm.unit,
            **common,
            **arm.kw,
        )
        self._units = units
        unit_ids = {id(u) for u in units}
        self._names = {id(m): name or "root" for name, m in model.named_modules() if id(m) in unit_ids}
        kept = keep_forward_chains(units) if path == NPU else []
        self._planned = prefetch_lists(units, self._names)
        self._ran = {
            "fully_shard": path,
            "fsdp": arm.fsdp,
            **npu_patch_state(),
            "mem_cache": arm.mem_cache,
            "torch_npu_skip_custom_post_forward": [self._names[id(u)] for u in kept],
            "prefetch": prefetch_statement("torch", forward, backward),
            "kw": dict(arm.kw),
        }
        return model

    def verify_prefetch(self) -> bool:
        """Check that every unit's forward and backward prefetch lists are still the ones the plan set.

        Raises:
            LaunchError: a unit's list changed (one line: which unit, what it holds, what was set).
        """
        now = prefetch_lists(self._units, self._names)
        for name, (forward, backward) in self._planned.items():
            for direction, planned, held in (
                ("forward", forward, now[name][0]),
                ("backward", backward, now[name][1]),
            ):
                if held != planned:
                    raise LaunchError(
                        f"after the steps, unit {name}'s {direction} prefetch list is {held or 'empty'}, but the "
                        f"plan set {planned or 'none'}: a patch of FSDP2 ({self._ran.get('fully_shard')}) "
                        "changed it, so the steps did not run the arm's prefetch (see docs/arms.md)"
                    )
        return True

    def load_param(self, name: str, param: torch.nn.Parameter, values: InitialValues) -> None:
        """Compute this rank's block of the DTensor (Shard rows, HSDP's replicas alike) and copy it in."""
        from fsdpbench.model.init import dtensor_local_index

        index = dtensor_local_index(values.shape(name), param.device_mesh, param.placements)
        values.block(name, index, out=param.to_local())

    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        return param.full_tensor()

    def describe(self) -> dict[str, Any]:
        """torch's version, which ``fully_shard`` ran, torch_npu's patches, prefetch and ``kw.`` as run."""
        return {"library": "torch", "version": torch.__version__, **self._ran}

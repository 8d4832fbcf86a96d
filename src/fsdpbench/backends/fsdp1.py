"""PyTorch FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``) behind the common plan.

The plan of ``backends/plan.py`` with FSDP1's own knobs (facts checked on CPU/gloo, torch 2.13):

* one ``FullyShardedDataParallel`` per decoder layer, then the root; ``use_orig_params=True`` (the
  optimizer sees the model's parameters), built on meta and materialised per module by
  ``param_init_fn`` (FSDP1 would otherwise call a ``reset_parameters`` the model's modules do not have);
* ``reshard_after_forward`` true/false = ``FULL_SHARD`` / ``SHARD_GRAD_OP`` (HSDP: ``HYBRID_SHARD`` /
  ``_HYBRID_SHARD_ZERO2`` on a 2-D ``(replicate, shard)`` mesh). FSDP1 never frees the root after
  forward, like the plan's ``reshard_after_forward=False`` for the root;
* prefetch per direction: forward 1 = ``forward_prefetch=True``, backward 1 = ``BackwardPrefetch.BACKWARD_PRE``,
  ``none`` turns a direction off (``False`` / ``None``), ``default`` leaves the keyword out (FSDP1's own:
  no forward, ``BACKWARD_PRE`` backward); ``prefetch=0`` turns both off, as before; FSDP1 has no deeper
  prefetch (``config.Arm`` refuses N > 1). FSDP1 prefetches the next
  *unit* in its recorded execution order, so with ``unit=module`` prefetch 1 is one module unit ahead
  (FSDP2's plan prefetches a whole layer of module units);
* ``unit=module``: one ``FullyShardedDataParallel`` per module of ``plan.module_units`` (innermost first,
  each replacing the module in its parent; the root's own modules with ``SHARD_GRAD_OP``, as the root is
  never freed after forward), then the layers and the root, which own no parameters then;
* mixed precision = ``MixedPrecision(param_dtype, reduce_dtype)``;
* FSDP1 flattens each unit's parameters into one ``FlatParameter`` and renames the modules
  (``_fsdp_wrapped_module.``): weights go into each rank's flat shard piece by piece (the element ranges
  of ``_shard_param_infos``) and come out through a ``FULL_STATE_DICT``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fsdpbench.backends.base import Backend
from fsdpbench.backends.plan import module_units

if TYPE_CHECKING:
    from fsdpbench.config import Arm
    from fsdpbench.model.init import InitialValues

WRAPPED_PREFIX = "_fsdp_wrapped_module."
"""FSDP1's infix in parameter and module names (``torch.distributed.fsdp._common_utils.FSDP_WRAPPED_MODULE``)."""


def clean_name(name: str) -> str:
    """A parameter or module name without FSDP1's wrapper infix."""
    return name.replace(WRAPPED_PREFIX, "")


class FSDP1Backend(Backend):
    """FSDP1: one ``FlatParameter`` per unit; one all-gather and one reduce-scatter per unit like FSDP2."""

    name = "fsdp1"

    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        """A ``DeviceMesh`` for HSDP (``("replicate", "shard")``); ``None`` for 1-D FSDP (the world)."""
        if len(mesh_shape) == 1:
            self._device_type = device_type
            return None
        from torch.distributed.device_mesh import init_device_mesh

        self._device_type = device_type
        return init_device_mesh(device_type, tuple(mesh_shape), mesh_dim_names=("replicate", "shard"))

    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Wrap each decoder layer, then the root; returns the root ``FullyShardedDataParallel``.

        prefetch > 1 and an HSDP shard size of 1 never get here: ``config.Arm`` refuses them."""
        from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        from fsdpbench.config.arms import prefetch_statement

        hybrid = mesh is not None
        keep = ShardingStrategy._HYBRID_SHARD_ZERO2 if hybrid else ShardingStrategy.SHARD_GRAD_OP
        if arm.reshard_after_forward:
            strategy = ShardingStrategy.HYBRID_SHARD if hybrid else ShardingStrategy.FULL_SHARD
        else:
            strategy = keep
        device = self._device()
        common: dict[str, Any] = dict(
            sharding_strategy=strategy,
            mixed_precision=MixedPrecision(
                param_dtype=getattr(torch, arm.param_dtype), reduce_dtype=getattr(torch, arm.reduce_dtype)
            ),
            device_id=device,
            param_init_fn=lambda m: m.to_empty(device=device, recurse=False),
            use_orig_params=True,
            limit_all_gathers=True,
            **arm.kw,
        )
        forward, backward = arm.prefetch_directions()
        if forward != "default":
            common["forward_prefetch"] = forward == 1
        if backward != "default":
            common["backward_prefetch"] = BackwardPrefetch.BACKWARD_PRE if backward == 1 else None
        self._ran = {"prefetch": prefetch_statement("fsdp1", forward, backward), "kw": dict(arm.kw)}
        if hybrid:
            common["device_mesh"] = mesh
        if arm.unit == "module":
            in_layers = {id(m) for layer in model.model.layers for m in layer.modules()}
            for name, module in module_units(model):  # children first: each parent sees wrapped children
                parent_name, _, attr = name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                # the root's own modules (embeddings, norm, lm_head) are never freed after forward
                own = common if id(module) in in_layers else {**common, "sharding_strategy": keep}
                setattr(parent, attr, FSDP(module, **own))
        layers = model.model.layers
        for i, layer in enumerate(layers):
            layers[i] = FSDP(layer, **common)
        return FSDP(model, **common)

    def materialize(self, model: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
        """Nothing left to do: ``param_init_fn`` gave every module storage while FSDP1 wrapped it."""
        return model

    def load_param(self, name: str, param: torch.nn.Parameter, values: InitialValues) -> None:
        raise NotImplementedError("FSDP1 fills whole flat parameters: use load_params")

    def load_params(self, model: torch.nn.Module, values: InitialValues) -> None:
        """Fill each unit's local ``FlatParameter`` shard piece by piece: FSDP1's own metadata
        (``_fqns``, ``_shard_param_infos``) says which element range of which parameter each piece of
        this rank's shard holds; only those ranges are computed (padding stays as FSDP1 left it)."""
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        unit_names = {id(m): clean_name(n) for n, m in model.named_modules()}
        for unit in FSDP.fsdp_modules(model):
            handle = unit._handle
            if handle is None:  # a unit that owns no parameters (its children's units own them)
                continue
            prefix = unit_names[id(unit)]
            flat = handle.flat_param
            local = flat.data  # this rank's shard while sharded (the original parameters view it)
            with torch.no_grad():
                for fqn, piece in zip(flat._fqns, flat._shard_param_infos, strict=True):
                    if not piece.in_shard:
                        continue
                    name = clean_name(f"{prefix}.{fqn}" if prefix else fqn)
                    start, stop = piece.intra_param_start_idx, piece.intra_param_end_idx + 1  # end inclusive
                    at = piece.offset_in_shard
                    values.flat(name, start, stop, out=local[at : at + piece.numel_in_shard])

    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        raise NotImplementedError("FSDP1 reads whole units: use full_state_dict")

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """FSDP1's ``FULL_STATE_DICT`` on every rank (``offload_to_cpu`` stays off: on a CPU device it
        crashed the process in torch 2.13)."""
        from torch.distributed.fsdp import FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.state_dict_type(
            model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)
        ):
            state = model.state_dict()
        return {clean_name(k): v.detach().cpu().clone() for k, v in state.items()}

    def describe(self) -> dict[str, Any]:
        """torch's version; prefetch and ``kw.`` as run."""
        return {
            "library": "torch",
            "api": "FullyShardedDataParallel",
            "version": torch.__version__,
            **getattr(self, "_ran", {}),
        }

    def _device(self) -> torch.device:
        kind = getattr(self, "_device_type", "cpu")
        if kind == "cpu":
            return torch.device("cpu")
        return torch.device(kind, torch.get_device_module(kind).current_device())

"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) behind the common plan (backends/plan.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fsdpbench.backends.base import Backend
from fsdpbench.backends.plan import apply_plan, shard_dim

if TYPE_CHECKING:
    from fsdpbench.config import Arm


def mesh_dim_names(ndim: int) -> tuple[str, ...]:
    """``("shard",)`` for FSDP, ``("replicate", "shard")`` for HSDP."""
    return ("shard",) if ndim == 1 else ("replicate", "shard")


class TorchFSDP2Backend(Backend):
    """FSDP2: one all-gather and one reduce-scatter (plus one all-reduce for HSDP) per shard unit."""

    name = "torch"

    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(
            device_type, tuple(mesh_shape), mesh_dim_names=mesh_dim_names(len(mesh_shape))
        )

    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Shard each decoder layer, then the root (embed_tokens, norm, lm_head); set prefetch chains."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.tensor import Shard

        shard_size = mesh.size(mesh.ndim - 1)
        common = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=getattr(torch, arm.param_dtype), reduce_dtype=getattr(torch, arm.reduce_dtype)
            ),
            "shard_placement_fn": lambda p: Shard(shard_dim(p.shape, shard_size)),
        }
        apply_plan(
            model,
            fully_shard,
            reshard_after_forward=arm.reshard_after_forward,
            prefetch=arm.prefetch,
            unit=arm.unit,
            **common,
        )
        return model

    def load_full_param(self, param: torch.nn.Parameter, full: torch.Tensor) -> None:
        """Copy this rank's shard of ``full``: every rank holds ``full``, so no communication."""
        from torch.distributed.tensor import distribute_tensor

        local = distribute_tensor(
            full.to(device=param.device, dtype=param.dtype),
            param.device_mesh,
            param.placements,
            src_data_rank=None,
        ).to_local()
        with torch.no_grad():
            param.to_local().copy_(local)

    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        return param.full_tensor()

    def describe(self) -> dict[str, Any]:
        return {"library": "torch", "version": torch.__version__}

"""The one small interface every FSDP implementation sits behind.

A backend module (``backends/torch_fsdp2.py``, ``backends/hyper.py``) defines one subclass of
``Backend``. The worker calls, in this order::

    backend.setup(device_type)                       # env vars, lazy imports, shims (rank-local)
    mesh = backend.init_mesh(device_type, arm.mesh)  # after dist.init_process_group
    backend.apply(model, mesh, arm)                  # model on meta; wraps layers → root, sets prefetch
    backend.materialize(model, device); backend.load_full_param(p, full) for each parameter
    ... loss.backward(); backend.optimizer_step(optimizer) ...

No backend reaches into another's internals; hyper_parallel is imported only inside ``hyper.py``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch stays out of the torch-free import path (CLI, launcher)
    import torch

    from fsdpbench.config import Arm


class Backend(abc.ABC):
    """One FSDP implementation."""

    name: str = ""

    def setup(self, device_type: str) -> None:  # noqa: B027 - optional hook
        """Process-wide preparation before the process group exists (env vars, imports, shims)."""

    @abc.abstractmethod
    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        """The device mesh: 1D ``(S,)`` for FSDP, ``(R, S)`` = (replicate, shard) for HSDP."""

    @abc.abstractmethod
    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Shard ``model`` (still on meta) with the common plan: each decoder layer, then the root."""

    def materialize(self, model: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
        """Give the sharded model's meta parameters uninitialised storage on ``device``."""
        return model.to_empty(device=device)

    @abc.abstractmethod
    def load_full_param(self, param: torch.nn.Parameter, full: torch.Tensor) -> None:
        """Copy this rank's part of the full tensor ``full`` into the (sharded) parameter."""

    @abc.abstractmethod
    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The whole (unsharded) value of a parameter, on every rank (collective)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Run ``optimizer.step()`` the way this backend needs it."""
        optimizer.step()

    def describe(self) -> dict[str, Any]:
        """Version and source facts for the manifest (e.g. hyper_parallel's git commit)."""
        return {}

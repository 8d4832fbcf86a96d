"""The one small interface every FSDP implementation sits behind.

A backend module (``backends/torch_fsdp2.py``, ``fsdp1.py``, ``hyper.py``, ``deepspeed_zero3.py``)
defines one subclass of ``Backend``. The worker calls, in this order::

    backend.setup(device_type)                       # env vars, lazy imports, shims (rank-local)
    backend.init_process_group(device_type, timeout) # default: dist.init_process_group
    mesh = backend.init_mesh(device_type, shape)     # after the process group exists
    backend.apply(model, mesh, arm)                  # model on meta; wraps layers → root, sets prefetch
    backend.materialize(model, device)
    backend.load_params(model, values)               # each rank computes and fills only its shard's values
    model, optimizer = backend.make_training(model, make_optimizer)
    ... loss = model(...).loss; backend.backward(loss); backend.optimizer_step(optimizer) ...
    backend.local_grad_sq(params)                    # this rank's share of the squared gradient norm
    backend.verify_prefetch()                        # after the steps: the plan's prefetch lists still hold
    backend.full_state_dict(model)                   # --dump-params (collective)
    backend.close()                                  # on every path

Every hook but ``init_mesh``/``apply``/``load_param``/``full_tensor`` has today's FSDP2 behaviour
as its default. No backend reaches into another's internals; each optional library (hyper_parallel,
deepspeed) is imported only inside its own backend's methods, i.e. only in that arm's worker processes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch stays out of the torch-free import path (CLI, launcher)
    import torch

    from fsdpbench.config import Arm
    from fsdpbench.model.init import InitialValues


def grad_sq_sum(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """Sum of squares of the local gradient (or gradient shard) of ``params`` (float32 scalar)."""
    import torch

    total = None
    for p in params:
        if p.grad is None:
            continue
        g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        sq = g.detach().float().pow(2).sum()
        total = sq if total is None else total + sq
    return total if total is not None else torch.zeros(())


class Backend(abc.ABC):
    """One FSDP implementation."""

    name: str = ""

    def setup(self, device_type: str) -> None:  # noqa: B027 - optional hook
        """Process-wide preparation before the process group exists (env vars, imports, shims)."""

    def init_process_group(self, device_type: str, timeout: timedelta) -> None:
        """Create the default process group (gloo / nccl / hccl for cpu / cuda / npu)."""
        import torch.distributed as dist

        import fsdpbench.device as dev

        dist.init_process_group(dev.process_group_backend(device_type), timeout=timeout)

    @abc.abstractmethod
    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        """The device mesh: 1D ``(S,)`` for FSDP, ``(R, S)`` = (replicate, shard) for HSDP."""

    @abc.abstractmethod
    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Shard ``model`` (still on meta) with the common plan: each decoder layer, then the root.

        Returns the model to train (the same object, or a wrapper such as FSDP1's root unit)."""

    def materialize(self, model: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
        """Give the sharded model's meta parameters uninitialised storage on ``device``."""
        return model.to_empty(device=device)

    @abc.abstractmethod
    def load_param(self, name: str, param: torch.nn.Parameter, values: InitialValues) -> None:
        """Fill this rank's part of parameter ``name`` with its initial values, computing only that part
        (``values.block(name, index)`` / ``values.flat(name, start, stop)``, never the full tensor)."""

    def load_params(self, model: torch.nn.Module, values: InitialValues) -> None:
        """Fill every parameter's local shard with its initial values (names: the unwrapped model's)."""
        for name, param in model.named_parameters():
            self.load_param(name, param, values)

    def make_training(
        self,
        model: torch.nn.Module,
        make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """(the module to call, the optimizer); ``make_optimizer(params)`` builds the run's optimizer."""
        return model, make_optimizer(list(model.parameters()))

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss`` (gradients reduced as the backend does it)."""
        loss.backward()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Run ``optimizer.step()`` the way this backend needs it."""
        optimizer.step()

    def local_grad_sq(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        """This rank's share of the squared global gradient norm (summed over ranks by the caller)."""
        return grad_sq_sum(params)

    @abc.abstractmethod
    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The whole (unsharded) value of a parameter, on every rank (collective)."""

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """``{name: full parameter on CPU}`` with the unwrapped model's names, on every rank (collective)."""
        return {name: self.full_tensor(p).detach().cpu() for name, p in model.named_parameters()}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds (called on every path, before the process group goes)."""

    def describe(self) -> dict[str, Any]:
        """Version and source facts for the manifest (e.g. hyper_parallel's git commit)."""
        return {}

    def verify_prefetch(self) -> bool | None:
        """After the steps: True when every unit still holds the prefetch lists the plan set (raises
        ``LaunchError`` otherwise); None where the backend keeps no lists fsdpbench can read."""
        return None

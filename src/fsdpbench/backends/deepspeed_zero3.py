"""DeepSpeed ZeRO stage 3 behind the common interface (the ``deepspeed`` arm).

deepspeed is optional (``pip install 'fsdpbench[deepspeed]'``) and imported only inside this backend's
methods, i.e. only in a deepspeed arm's worker processes. What it needs from its caller (checked on
CPU/gloo with deepspeed 0.19.8 and torch 2.13):

* ``DS_ACCELERATOR=cpu`` on CPU, and ``deepspeed.init_distributed`` instead of
  ``dist.init_process_group``. On CPU its first use JIT-compiles a shared-memory communication op with
  g++ (1.5–2.5 min) into ``TORCH_EXTENSIONS_DIR``, which the launcher points at
  ``<out>/.cache/torch_extensions`` unless it is set (never the user's home, never git);
* the optimizer at ``deepspeed.initialize``, and its own ``engine.backward(loss)`` / ``engine.step()``
  (the engine cannot find the loss inside the model's dataclass output; a plain ``loss.backward()``
  then fails in ``engine.step``);
* a fair configuration: ``gradient_clipping`` 0 (its default 1.0 clips, which no other arm does) and
  ``stage3_param_persistence_threshold`` 0 (its default keeps every parameter under 1e5 elements whole
  on every rank, so they would never be gathered or reduce-scattered like the other arms' parameters);
* ``engine.destroy()`` before the process group goes (without it a rank aborted at exit).

The shared arm options map onto ZeRO-3 knobs where an equivalent exists (``deepspeed_config``); the
arm's own knobs (``Arm.backend_options``, allow-listed in ``config.DEEPSPEED_KNOBS``) override them.
The model is materialised whole (uninitialised) on every rank and partitioned by
``deepspeed.zero.Init(module=...)`` in ``load_params``, the call ``deepspeed.initialize`` would make; each
rank then computes only its partitions' values. The initial peak memory per rank is still the full
model, unlike the other arms.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fsdpbench.backends.base import Backend
from fsdpbench.errors import LaunchError

if TYPE_CHECKING:
    import torch

    from fsdpbench.config import Arm
    from fsdpbench.model.init import InitialValues

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install deepspeed (or pip install 'fsdpbench[deepspeed]')"
DS_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}


def deepspeed_config(arm: Arm, largest_layer_numel: int) -> dict[str, Any]:
    """The DeepSpeed configuration of ``arm`` (ZeRO-3, fair defaults, shared options mapped).

    Mapping of the shared options (approximations are marked in docs/arms.md):

    * ``reshard_after_forward`` true: ``stage3_max_reuse_distance`` 0 (release every gathered
      parameter after use); false: reuse distance and ``stage3_max_live_parameters`` of 1e12 elements
      (keep what forward gathered for backward);
    * ``prefetch`` d >= 1: ``overlap_comm`` on and ``stage3_prefetch_bucket_size`` = d × the largest
      decoder layer's parameter count (``largest_layer_numel``); 0 or ``none``: no prefetch bucket, no
      overlap; ``default``: neither key set (DeepSpeed's own). One bucket serves both directions, so
      ``config.Arm`` refuses different forward and backward settings;
    * ``param_dtype`` bfloat16: ``bf16.enabled`` with ``communication_data_type`` = ``reduce_dtype``
      (float16 and bf16 reduction of fp32 parameters are refused in ``config.Arm``).

    Args:
        arm: the arm (its ``backend_options`` override the mapped values).
        largest_layer_numel: elements in the largest decoder layer.
    Returns:
        The dict given to ``deepspeed.initialize(config=...)``.
    """
    keep = 10**12
    zero: dict[str, Any] = {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "stage3_max_reuse_distance": 0 if arm.reshard_after_forward else keep,
        "stage3_max_live_parameters": 10**9 if arm.reshard_after_forward else keep,
    }
    depth = arm.prefetch_directions()[0]  # == backward (one bucket)
    if depth != "default":
        depth = depth if isinstance(depth, int) else 0
        zero["stage3_prefetch_bucket_size"] = depth * largest_layer_numel
        zero["overlap_comm"] = depth >= 1
    zero.update(arm.backend_options)
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,
        "zero_allow_untested_optimizer": True,  # the run's own torch optimizer (SGD / AdamW)
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
        "zero_optimization": zero,
    }
    if arm.param_dtype == "bfloat16":
        config["bf16"] = {"enabled": True}
        config["communication_data_type"] = DS_DTYPE[arm.reduce_dtype]
    return config


class DeepSpeedZero3Backend(Backend):
    """DeepSpeed ZeRO-3: one all-gather per module with parameters, bucketed reduce-scatters."""

    name = "deepspeed"

    def __init__(self) -> None:
        self.engine: Any = None
        self.config: dict[str, Any] = {}
        self._arm: Arm | None = None
        self._world = 1

    def setup(self, device_type: str) -> None:
        """Select DeepSpeed's accelerator (``cpu`` on CPU) and import it.

        Raises:
            LaunchError: deepspeed is not importable (one line: how to install it).
        """
        if device_type == "cpu":
            if os.environ.get("DS_ACCELERATOR", "cpu") != "cpu":
                log.warning("DS_ACCELERATOR=%s replaced by cpu on a CPU run", os.environ["DS_ACCELERATOR"])
            os.environ["DS_ACCELERATOR"] = "cpu"
        try:
            import deepspeed  # noqa: F401
        except ImportError as exc:
            raise LaunchError(
                f"the deepspeed arm needs deepspeed, which is not importable ({exc}); {INSTALL_HINT}"
            ) from None

    def init_process_group(self, device_type: str, timeout: timedelta) -> None:
        """``deepspeed.init_distributed`` with the device's process-group backend (gloo on CPU)."""
        import deepspeed
        import torch.distributed as dist

        import fsdpbench.device as dev

        deepspeed.init_distributed(dist_backend=dev.process_group_backend(device_type), timeout=timeout)
        self._world = dist.get_world_size()

    def init_mesh(self, device_type: str, mesh_shape: tuple[int, ...]) -> Any:
        """No mesh: ZeRO-3 shards over the whole world (HSDP is refused by ``config.Arm``)."""
        return None

    def apply(self, model: torch.nn.Module, mesh: Any, arm: Arm) -> torch.nn.Module:
        """Resolve the ZeRO-3 configuration; ZeRO-3 partitions in ``load_params``."""
        self._arm = arm
        layers = list(model.model.layers)
        largest = max((sum(p.numel() for p in layer.parameters()) for layer in layers), default=0)
        self.config = deepspeed_config(arm, largest)
        return model

    def load_param(self, name: str, param: torch.nn.Parameter, values: InitialValues) -> None:
        raise NotImplementedError("ZeRO-3 partitions the whole model at once: use load_params")

    def load_params(self, model: torch.nn.Module, values: InitialValues) -> None:
        """Partition the (uninitialised) model with ``deepspeed.zero.Init(module=...)``, as
        ``deepspeed.initialize`` would, then fill each parameter's partition ``ds_tensor`` with its element
        range: rank r of W holds elements ``[r·p, min((r+1)·p, ds_numel))``, p = ``ds_tensor.ds_numel``
        (DeepSpeed's own partition size, ⌈numel / W⌉). The partition's padding stays as DeepSpeed left it.

        The model is cast to the engine's parameter dtype first: ``initialize`` checks it on a model
        that is already partitioned (and then neither casts nor broadcasts it)."""
        import deepspeed
        import torch
        import torch.distributed as dist

        dtype = torch.bfloat16 if self.config.get("bf16", {}).get("enabled") else torch.float32
        model.to(dtype)
        with torch.no_grad():
            deepspeed.zero.Init(module=model, dtype=dtype, config_dict_or_path=self.config)
            rank = dist.get_rank()
            for name, param in model.named_parameters():
                size = param.ds_tensor.ds_numel
                start = min(rank * size, param.ds_numel)
                stop = min(start + size, param.ds_numel)
                values.flat(name, start, stop, out=param.ds_tensor[: stop - start])

    def make_training(self, model: torch.nn.Module, make_optimizer: Any) -> tuple[Any, Any]:
        """``deepspeed.initialize`` with the run's optimizer; returns (engine, ZeRO-3 optimizer)."""
        import deepspeed

        assert self._arm is not None, "apply() comes first"
        optimizer = make_optimizer(list(model.parameters()))
        self.engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=self.config
        )
        return self.engine, ds_optimizer

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss)

    def optimizer_step(self, optimizer: Any) -> None:
        self.engine.step()

    def local_grad_sq(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        """ZeRO-3 frees its gradient partitions in ``engine.step``; its own global norm of that step
        (``get_global_grad_norm``, unclipped) is split evenly so that the ranks' sum is its square."""
        import torch

        norm = self.engine.get_global_grad_norm()
        norm = float(norm.item() if hasattr(norm, "item") else (norm or 0.0))
        return torch.tensor(norm * norm / self._world)

    def full_tensor(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The whole parameter on every rank (``zero.GatheredParameters``, a collective)."""
        import deepspeed

        with deepspeed.zero.GatheredParameters([param]):
            return param.detach().clone()

    def full_state_dict(self, model: Any) -> dict[str, torch.Tensor]:
        module = model.module if hasattr(model, "module") else model
        return {name: self.full_tensor(p).cpu() for name, p in module.named_parameters()}

    def close(self) -> None:
        """``engine.destroy()`` (without it a rank aborted in DeepSpeed's exit handlers)."""
        if self.engine is not None:
            self.engine.destroy()
            self.engine = None

    def describe(self) -> dict[str, Any]:
        """deepspeed's version and the resolved configuration given to ``deepspeed.initialize``."""
        import importlib.metadata

        try:
            version = importlib.metadata.version("deepspeed")
        except importlib.metadata.PackageNotFoundError:
            version = None
        from fsdpbench.config.arms import prefetch_statement

        facts: dict[str, Any] = {"library": "deepspeed", "version": version, "config": self.config}
        if self._arm is not None:
            facts["prefetch"] = prefetch_statement("deepspeed", *self._arm.prefetch_directions())
        return facts

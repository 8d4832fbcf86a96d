"""What a rank records about where it ran: the device, library versions and the backend's facts
(``environment.json``), and what each arm actually ran with (``arm_runtime``: dtypes, kernels, probes)."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import torch

import fsdpbench.device as dev
from fsdpbench.backends import Backend
from fsdpbench.config import Arm, RunConfig
from fsdpbench.results import run_folder


def environment_facts(device_type: str, backend: Backend, world: int) -> dict[str, Any]:
    """Versions, host and devices for the manifest."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_npu": None,
        "cann": None,
        "hyper_parallel": None,
        "host": socket.gethostname(),
        "device_type": device_type,
        **dev.device_facts(device_type),
        "world_size": world,
        "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", 1)),
        "nproc_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", world)),
        "process_group_backend": dev.process_group_backend(device_type),
        "backend": backend.describe(),
    }
    if device_type == "npu":
        facts.update(_npu_versions())
    if backend.name == "hyper":
        facts["hyper_parallel"] = backend.describe()
    return facts


def arm_runtime(
    cfg: RunConfig, arm: Arm, device_type: str, optimizer: Any, device: torch.device | None = None
) -> dict[str, Any]:
    """What this arm actually runs with, for the manifest (``arm_runtime``): the parameter and reduce
    dtypes after the device default, the optimizer's ``foreach`` setting (``optimizer_ran``, the path its
    first step took, and ``prefetch_verified_after_steps`` are added after the steps), the float32 matmul
    precision (and torch_npu's HF32 switch), the experts' and the gated deltanet's kernels with the K-grouped
    probe's answer and dtype, and the NPU/GPU environment variables that change numerics or scheduling
    (``device.behaviour_environment``)."""
    from fsdpbench.model.deltanet import deltanet_path
    from fsdpbench.model.moe import resolve_experts_impl

    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed wraps the run's optimizer
    defaults = getattr(inner, "defaults", {}) or {}
    device = device if device is not None else torch.device(device_type)
    experts = resolve_experts_impl("auto", device, getattr(torch, arm.param_dtype))
    return {
        "param_dtype": arm.param_dtype,
        "param_dtype_source": (
            "arm"
            if arm.label in cfg.param_dtype_set
            else ("device default" if device_type != "cpu" else "default")
        ),
        "reduce_dtype": arm.reduce_dtype,
        "optimizer": cfg.optimizer,
        "optimizer_impl": cfg.optimizer_impl,
        "optimizer_foreach": defaults.get("foreach"),
        "optimizer_class": f"{type(inner).__module__}.{type(inner).__qualname__}",
        "optimizer_ran": None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "npu_matmul_allow_hf32": dev.npu_allow_hf32() if device_type == "npu" else None,
        "experts_impl": experts,
        **k_grouped_probe(experts, device, getattr(torch, arm.param_dtype)),
        "deltanet_impl": deltanet_path(device_type, getattr(torch, arm.param_dtype)),
        run_folder.PREFETCH_VERIFIED: None,
        "environment": dev.behaviour_environment(),
    }


def k_grouped_probe(experts: str, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """The arm's K-grouped ``npu_grouped_matmul`` probe: its answer and the dtype it ran in (None: not an
    NPU experts path)."""
    from fsdpbench.model.moe import npu_k_grouped_supported

    if experts != "npu":
        return {"npu_k_grouped_matmul": None, "npu_k_grouped_probe_dtype": None}
    return {
        "npu_k_grouped_matmul": npu_k_grouped_supported(str(device), dtype),
        "npu_k_grouped_probe_dtype": str(dtype).removeprefix("torch."),
    }


def _npu_versions() -> dict[str, Any]:
    import torch_npu  # sets torch.version.cann on import (torch_npu has no version.cann of its own)

    return {
        "torch_npu": getattr(torch_npu, "__version__", None),
        "cann": getattr(torch.version, "cann", None),
    }

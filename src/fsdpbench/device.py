"""Devices: cpu / cuda / npu — the process-group backend, sync, memory statistics and peak FLOP/s.

cuda and npu share one path through ``torch.accelerator`` and ``torch.get_device_module``; the only
NPU-specific step is importing ``torch_npu`` (in ``_import_torch_npu``). torch is imported inside the
functions, so the launcher and the analysis side can use the peak-FLOP/s table without it.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from fsdpbench.errors import ConfigError

log = logging.getLogger(__name__)

PROCESS_GROUP_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}

# Dense peak FLOP/s per device and compute dtype, most specific name first (matched as a substring of
# the device name torch reports: "NVIDIA H200 NVL" must not take the SXM "NVIDIA H200" row). Sources:
# NVIDIA's H100/H200/A100 datasheets (dense, i.e. half the "with sparsity" figures); torchtitan
# tools/utils.py get_peak_flops; torchtitan-npu for Ascend 910B1–B4 (reference/harness_anchors.md §7,
# bf16 only). float32 is the non-tensor-core FP32 peak (PyTorch's default float32 matmul precision
# "highest" does not use TF32); tf32 applies when torch.get_float32_matmul_precision() is not "highest".
# A device or dtype not in the table gets no MFU rather than a guessed peak.
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200 NVL", {"bfloat16": 835e12, "float16": 835e12, "tf32": 417.5e12, "float32": 60e12}),
    ("H200", {"bfloat16": 989e12, "float16": 989e12, "tf32": 494.5e12, "float32": 67e12}),
    ("H100 PCIe", {"bfloat16": 756e12, "float16": 756e12, "tf32": 378e12, "float32": 51e12}),
    ("H100 NVL", {"bfloat16": 835e12, "float16": 835e12, "tf32": 417.5e12, "float32": 60e12}),
    ("H100", {"bfloat16": 989e12, "float16": 989e12, "tf32": 494.5e12, "float32": 67e12}),
    ("A100", {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12, "float32": 19.5e12}),
    ("910B1", {"bfloat16": 373.88e12}),
    ("910B2", {"bfloat16": 353.89e12}),
    ("910B3", {"bfloat16": 294.91e12}),
    ("910B4", {"bfloat16": 245.76e12}),
)


def peak_flops(
    device_name: str | None, dtype: str = "bfloat16", matmul_precision: str = "highest"
) -> float | None:
    """Dense peak FLOP/s of ``device_name`` for matmuls in ``dtype`` (an arm's param_dtype), or ``None``
    when the device or that dtype is not in ``PEAK_FLOPS``. float32 with a ``matmul_precision`` other
    than ``highest`` (TF32 allowed) takes the tf32 peak."""
    if not device_name:
        return None
    key = "tf32" if dtype == "float32" and matmul_precision != "highest" else dtype
    for name, peaks in PEAK_FLOPS:
        if name.lower() in device_name.lower():
            return peaks.get(key)
    return None


def peak_bf16_flops(device_name: str | None) -> float | None:
    """Peak dense bf16 FLOP/s of ``device_name`` per device, or ``None`` when it is not in the table."""
    return peak_flops(device_name, "bfloat16")


BEHAVIOUR_ENV_NAMES = (
    "MULTI_STREAM_MEMORY_REUSE",
    "STREAMS_PER_DEVICE",
    "PER_STREAM_QUEUE",
    "TASK_QUEUE_ENABLE",
    "COMBINED_ENABLE",
    "INF_NAN_MODE_ENABLE",
    "INF_NAN_MODE_FORCE_DISABLE",
    "P2P_HCCL_BUFFSIZE",
    "CPU_AFFINITY_CONF",
    "RANK_TABLE_FILE",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_VISIBLE_DEVICES",
)
BEHAVIOUR_ENV_PREFIXES = (
    "ACL_",
    "ACLNN_",
    "NPU_ASD_",
    "ASCEND_",
    "HCCL_",
    "TORCH_NPU_",
    "TORCH_HCCL_",
    "PYTORCH_NPU_",
    "PYTORCH_NO_NPU_",
    "NCCL_",
    "TORCH_NCCL_",
    "PYTORCH_CUDA_",
    "PYTORCH_NO_CUDA_",
    "CUBLAS",
    "CUDNN_",
    "TORCH_ALLOW_TF32",
)
"""Environment variables that change NPU/GPU numerics, memory or scheduling, recorded per launch by
``behaviour_environment``. NPU: torch_npu's environment-variable list (Ascend/pytorch docs "Environment
Variable List": memory reuse across streams, the stream pool size, the task queue, INF_NAN mode,
ACL_* compilation caches and sync timeouts, NPU_ASD_* feature detection, HCCL_*); GPU: cuBLAS's
workspace (determinism), TF32 override, connection count, the caching allocator, NCCL."""


def behaviour_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``BEHAVIOUR_ENV_NAMES``/``BEHAVIOUR_ENV_PREFIXES`` set in ``environ`` (the process's)."""
    import os

    env = os.environ if environ is None else environ
    return {
        k: v
        for k, v in sorted(env.items())
        if k in BEHAVIOUR_ENV_NAMES or k.startswith(BEHAVIOUR_ENV_PREFIXES)
    }


def npu_allow_hf32() -> bool | None:
    """torch_npu's ``torch.npu.matmul.allow_hf32`` (float32 matmuls in HF32; torch_npu/npu/npu_config.py
    ``_allowHF32Matmul``), or None where this torch_npu has no such flag."""
    import torch

    try:
        return bool(torch.npu.matmul.allow_hf32)
    except (AttributeError, RuntimeError):
        return None


def _import_torch_npu() -> Any:
    try:
        import torch_npu  # noqa: F401  (registers torch.npu and the hccl backend)
    except ImportError as exc:
        raise ConfigError(
            f"--device npu needs torch_npu, which cannot be imported ({exc}); install torch_npu"
        ) from None
    return torch_npu


def npu_installed() -> bool:
    """Whether torch_npu is importable (found without importing it)."""
    return importlib.util.find_spec("torch_npu") is not None


def resolve_device_type(requested: str) -> str:
    """``auto`` → npu if torch_npu has a device, else cuda if available, else cpu; others are checked."""
    import torch

    if requested == "npu" or (requested == "auto" and npu_installed()):
        try:
            _import_torch_npu()
        except ConfigError:
            if requested == "npu":
                raise
        else:
            if torch.npu.is_available():
                return "npu"
            if requested == "npu":
                raise ConfigError("--device npu: torch_npu is installed but sees no NPU")
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return "cuda"
    if requested == "cuda":
        raise ConfigError("--device cuda: torch.cuda.is_available() is False; use --device cpu")
    return "cpu"


def process_group_backend(device_type: str) -> str:
    """gloo / nccl / hccl for cpu / cuda / npu."""
    return PROCESS_GROUP_BACKENDS[device_type]


def set_device(device_type: str, local_rank: int) -> Any:
    """Bind this process to its local device; return the ``torch.device``."""
    import torch

    if device_type == "cpu":
        return torch.device("cpu")
    torch.get_device_module(device_type).set_device(local_rank)
    return torch.device(device_type, local_rank)


def synchronize(device_type: str) -> None:
    """Wait for all queued device work (a no-op on cpu, where work is synchronous)."""
    if device_type != "cpu":
        import torch

        torch.get_device_module(device_type).synchronize()


def reset_peak_memory(device_type: str) -> None:
    """Start a new peak-memory window: the device allocator's peaks and the process's peak resident set."""
    reset_peak_rss()
    if device_type != "cpu":
        import torch

        torch.get_device_module(device_type).reset_peak_memory_stats()


PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"


def reset_peak_rss() -> bool:
    """Reset the process's peak resident set (Linux ``VmHWM``) to its current resident set by writing
    ``5`` to ``/proc/self/clear_refs``; False where that cannot be done (not Linux, no permission):
    ``VmHWM`` is then the peak since the process started."""
    global _rss_reset_ok
    try:
        with open(PROC_CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError:
        _rss_reset_ok = False
    else:
        _rss_reset_ok = True
    return _rss_reset_ok


_rss_reset_ok: bool | None = None


def peak_rss_since() -> str:
    """What ``peak_rss_bytes`` spans: ``"reset"`` (since the last successful ``reset_peak_rss``) or
    ``"process start"`` (never reset, or the reset failed)."""
    return "reset" if _rss_reset_ok else "process start"


def peak_rss_bytes() -> int | None:
    """The process's peak resident set (``VmHWM`` of ``/proc/self/status``) in bytes; None off Linux."""
    try:
        with open(PROC_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_memory(device_type: str) -> tuple[int | None, int | None]:
    """(peak allocated, peak reserved) bytes since the last reset; ``(None, None)`` on cpu."""
    if device_type == "cpu":
        return None, None
    import torch

    mod = torch.get_device_module(device_type)
    return int(mod.max_memory_allocated()), int(mod.max_memory_reserved())


def device_facts(device_type: str) -> dict[str, Any]:
    """Name and count of the local devices, for the manifest."""
    if device_type == "cpu":
        import os

        return {"device_name": "cpu", "device_count": os.cpu_count()}
    import torch

    mod = torch.get_device_module(device_type)
    return {"device_name": str(mod.get_device_name()), "device_count": int(mod.device_count())}


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a device (or host) out-of-memory error."""
    import torch

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "memory allocation failed" in text

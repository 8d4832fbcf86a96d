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

# Dense bf16 peak FLOP/s per device, most specific name first (matched as a substring of the device
# name). Sources: torchtitan tools/utils.py get_peak_flops; torchtitan-npu for Ascend 910B1–B4
# (reference/harness_anchors.md §7). Unknown devices get no MFU rather than a guessed peak.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("910B1", 373.88e12),
    ("910B2", 353.89e12),
    ("910B3", 294.91e12),
    ("910B4", 245.76e12),
)


def peak_bf16_flops(device_name: str | None) -> float | None:
    """Peak dense bf16 FLOP/s of ``device_name`` per device, or ``None`` when it is not in the table."""
    if not device_name:
        return None
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
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

"""The backends by name, each imported only when asked for (hyper_parallel patches torch when imported)."""

from __future__ import annotations

import importlib

from fsdpbench.backends.base import Backend
from fsdpbench.errors import ConfigError, LaunchError

# name → (module, class)
BACKEND_CLASSES: dict[str, tuple[str, str]] = {
    "torch": ("fsdpbench.backends.torch_fsdp2", "TorchFSDP2Backend"),
    "fsdp1": ("fsdpbench.backends.fsdp1", "FSDP1Backend"),
    "deepspeed": ("fsdpbench.backends.deepspeed_zero3", "DeepSpeedZero3Backend"),
    "hyper": ("fsdpbench.backends.hyper", "HyperBackend"),
}


def get_backend(name: str) -> Backend:
    """A fresh instance of the backend called ``name`` (a key of ``BACKEND_CLASSES``)."""
    try:
        module_name, class_name = BACKEND_CLASSES[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; choose one of: {', '.join(BACKEND_CLASSES)}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "hyper_parallel":
            raise LaunchError(
                "hyper_parallel is not installed; install it from its repository "
                "(pip install --no-deps -e <hyper-parallel checkout>; pip install pyyaml) or drop the hyper arm"
            ) from None
        raise
    return getattr(module, class_name)()

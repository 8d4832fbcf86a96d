"""FSDP backends by name, imported lazily (hyper_parallel patches torch when imported): see
:mod:`fsdpbench.backends.registry`."""

from fsdpbench.backends.base import Backend
from fsdpbench.backends.registry import BACKEND_CLASSES, get_backend

__all__ = ["Backend", "get_backend", "BACKEND_CLASSES"]

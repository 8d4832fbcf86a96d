"""A sweep cell's settings as text, from its resolved config (``RunConfig.to_dict``, as sweep.json keeps it):
what the sweep's dry-run table and its index (report/index.py) show for each cell."""

from __future__ import annotations

from typing import Any

from fsdpbench.fmt import MISSING


def _one_or_each(labels: list[str], values: list[str]) -> str:
    """The value when every arm has it, else ``"torch 0 / hyper 1"``."""
    if len(set(values)) <= 1:
        return values[0] if values else MISSING
    return " / ".join(f"{label} {value}" for label, value in zip(labels, values, strict=True))


def mesh_text(mesh: str | int | None, world_size: int | None) -> str:
    """``"FSDP ×8"`` for a 1-D mesh (none given: all ranks), ``"HSDP 2×4"`` for replicas × shards."""
    if mesh in (None, ""):
        return f"FSDP ×{world_size}" if world_size else "FSDP"
    shape = str(mesh).lower().split("x")
    return f"FSDP ×{shape[0]}" if len(shape) == 1 else f"HSDP {'×'.join(shape)}"


def prefetch_text(value: Any) -> str:
    """An arm's ``prefetch`` as the overview shows it; 0 is the library's default (docs/arms.md)."""
    return "0 (default)" if value in (0, "0") else MISSING if value is None else str(value)


def cell_settings(config: dict[str, Any]) -> dict[str, str]:
    """What a cell runs, as text: mesh, seq_len, layers, prefetch, rounds (``auto`` for ``--rounds auto``), profiled.

    Args:
        config: the cell's resolved config as ``RunConfig.to_dict`` gives it (also what sweep.json keeps).
    """
    arms = [a for a in config.get("arms") or [] if isinstance(a, dict)]
    labels = [str(a.get("label")) for a in arms]
    world = None
    if isinstance(config.get("nproc"), int) and isinstance(config.get("nnodes", 1), int):
        world = config["nproc"] * config.get("nnodes", 1)
    layers = (config.get("model") or {}).get("num_hidden_layers")
    return {
        "mesh": _one_or_each(labels, [mesh_text(a.get("mesh"), world) for a in arms]),
        "seq_len": str(config.get("seq_len", MISSING)),
        "layers": str(layers if layers is not None else MISSING),
        "prefetch": _one_or_each(labels, [prefetch_text(a.get("prefetch")) for a in arms]),
        "rounds": "auto" if config.get("rounds_auto") else str(config.get("rounds", MISSING)),
        "profiled": {True: "yes", False: "no"}.get(config.get("profile"), MISSING),
    }

"""Seeded, per-parameter initialisation that does not depend on device, mesh or backend.

Every parameter's full initial value is a pure function of ``(seed, name, shape)``: a CPU
``torch.Generator`` seeded from the seed and a stable hash of the name draws it in fp32, then it is
cast and moved. A runner builds the model on ``meta``, shards it, calls ``to_empty()`` and copies
each rank's shard of ``init_full_tensor(name, ...)`` — one parameter at a time, so a 35B model never
needs its full size on one rank.

| parameter (name ends with)                    | initial value                              |
|-----------------------------------------------|--------------------------------------------|
| ``layernorm.weight``, ``q_norm``/``k_norm``, ``model.norm`` | 0 (the norm multiplies by 1 + w)  |
| ``linear_attn.norm.weight`` (gated norm)      | 1                                          |
| ``dt_bias``                                   | 1                                          |
| ``A_log``                                     | log(U(1, 16)) (transformers: U(0.01, 16))  |
| everything else (matrices, conv, experts, router, embeddings) | N(0, initializer_range²)   |
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import nn

DEFAULT_STD = 0.02


def _stream_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def init_full_tensor(
    name: str,
    shape: Sequence[int],
    seed: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    std: float = DEFAULT_STD,
) -> torch.Tensor:
    """The full initial value of parameter ``name`` (see the module table), deterministic in (seed, name).

    Args:
        name: the parameter's qualified name, e.g. ``model.layers.3.mlp.experts.down_proj``.
        shape: its full (unsharded) shape.
        seed: the run's seed.
        dtype, device: of the returned tensor (always drawn in fp32 on CPU first).
        std: standard deviation of the normal draws (``ModelConfig.initializer_range``).
    """
    shape = tuple(int(s) for s in shape)
    if name.endswith("linear_attn.norm.weight") or name.endswith("dt_bias"):
        full = torch.ones(shape)
    elif name.endswith("norm.weight"):
        full = torch.zeros(shape)
    else:
        gen = torch.Generator(device="cpu").manual_seed(_stream_seed(seed, name))
        if name.endswith("A_log"):
            full = torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log_()
        else:
            full = torch.empty(shape).normal_(0.0, std, generator=gen)
    return full.to(device=device, dtype=dtype)


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, std: float | None = None) -> None:
    """Fill every parameter of a materialised (non-meta) model with ``init_full_tensor(name, ...)``.

    DTensor parameters (e.g. after FSDP2 ``fully_shard``) receive their local shard of the full value.
    """
    if std is None:
        std = getattr(getattr(model, "config", None), "initializer_range", DEFAULT_STD)
    for name, param in model.named_parameters():
        full = init_full_tensor(name, param.shape, seed, dtype=param.dtype, std=std)
        if hasattr(param, "device_mesh") and hasattr(param, "placements"):
            _copy_local_shard(param, full)
        else:
            param.copy_(full)


def _copy_local_shard(param, full: torch.Tensor) -> None:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = param.to_local()
    shape, offset = compute_local_shape_and_global_offset(full.shape, param.device_mesh, param.placements)
    index = tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))
    local.copy_(full[index])

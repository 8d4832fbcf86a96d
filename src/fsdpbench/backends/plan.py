"""The sharding plan shared by every backend, so that trace differences come from the backend and
not from how the model was wrapped.

Plan (identical for every arm, documented in the README):
1. every decoder layer (``model.model.layers[i]``) is its own shard unit, in order;
2. the root (the whole model) is the last unit and holds what is left: ``embed_tokens``, the final
   ``norm`` and ``lm_head``. hyper_parallel's ``fully_shard`` takes one module, so torchtitan's
   separate ``[norm, lm_head]`` unit is not used for either arm;
3. ``reshard_after_forward`` = the arm's bool for layers, ``False`` for the root (both libraries
   are given explicit bools);
4. prefetch depth d: layer i prefetches layers i+1..i+d in forward and i-1..i-d in backward;
5. each parameter is sharded on dim 0, unless dim 0 does not divide by the shard size (hyper_parallel
   refuses uneven shards, e.g. the ``[1, H]`` shared_expert_gate), then on the first dim that does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def shard_dim(shape: Sequence[int], shard_size: int) -> int:
    """The tensor dim to shard a parameter of ``shape`` on across ``shard_size`` ranks (see rule 5)."""
    for dim, size in enumerate(shape):
        if size % shard_size == 0:
            return dim
    return 0  # nothing divides: dim 0, padded by backends that can (FSDP2); others raise their own error


def prefetch_targets(num_layers: int, index: int, depth: int) -> tuple[list[int], list[int]]:
    """(forward, backward) prefetch layer indices of layer ``index`` for prefetch ``depth``."""
    if depth <= 0:
        return [], []
    forward = [j for j in range(index + 1, index + 1 + depth) if j < num_layers]
    backward = [j for j in range(index - 1, index - 1 - depth, -1) if j >= 0]
    return forward, backward


def apply_plan(
    model: Any, fully_shard: Callable[..., Any], *, reshard_after_forward: bool, prefetch: int, **kwargs: Any
) -> list[Any]:
    """Wrap ``model`` with a backend's ``fully_shard`` in plan order (rules 1–4): each decoder layer with
    the arm's ``reshard_after_forward``, then the root with ``False``; then the explicit prefetch chains.

    ``kwargs`` (mesh, mixed precision, placement, ...) go to every ``fully_shard`` call. Returns the shard
    units in order (layers, then the root).
    """
    layers = list(model.model.layers)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=bool(reshard_after_forward), **kwargs)
    fully_shard(model, reshard_after_forward=False, **kwargs)
    for i, layer in enumerate(layers):
        forward, backward = prefetch_targets(len(layers), i, prefetch)
        if forward:
            layer.set_modules_to_forward_prefetch([layers[j] for j in forward])
        if backward:
            layer.set_modules_to_backward_prefetch([layers[j] for j in backward])
    return [*layers, model]

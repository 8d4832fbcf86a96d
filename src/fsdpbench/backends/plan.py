"""The sharding plan shared by every backend, so that trace differences come from the backend and
not from how the model was wrapped.

Plan (identical for every arm, documented in docs/arms.md):
1. every decoder layer (``model.model.layers[i]``) is its own shard unit, in order;
2. the root (the whole model) is the last unit and holds what is left: ``embed_tokens``, the final
   ``norm`` and ``lm_head``. hyper_parallel's ``fully_shard`` takes one module, so torchtitan's
   separate ``[norm, lm_head]`` unit is not used for either arm;
3. ``reshard_after_forward`` = the arm's bool for layers, ``False`` for the root (both libraries
   are given explicit bools);
4. prefetch depth d: layer i prefetches layers i+1..i+d in forward and i-1..i-d in backward (each
   direction its own depth, ``fwd_prefetch``/``bwd_prefetch``); ``default`` leaves the library's own
   behaviour, ``none`` turns off an implicit one (FSDP2's backward; see ``apply_plan``);
5. each parameter is sharded on dim 0, unless dim 0 does not divide by the shard size (hyper_parallel
   refuses uneven shards, e.g. the ``[1, H]`` shared_expert_gate), then on the first dim that does.

``unit="module"`` (the arm option) adds, before rule 1, one unit per module that directly holds
parameters (attention/DeltaNet projections, norms, router, experts, shared expert; embeddings, final norm
and lm_head), children before their parents (post-order). A parent that holds parameters and children
(the DeltaNet's ``dt_bias``/``A_log``) then owns only its direct parameters. The decoder layers and the
root are still wrapped (rules 1-3) but own no parameters: every parameter is in exactly one unit. The
root's own modules (embeddings, final norm, lm_head) keep rule 3's ``reshard_after_forward=False``.
Exceptions stay with a larger unit: a child whose forward never runs because its parent reads its weight
(``CALLED_BY_PARENT``) goes with the parent, and a module sharing a parameter with another (tied
embeddings) stays in the root. Prefetch depth d keeps its meaning in layers: layer i's forward pre-hook
prefetches every unit of layers i+1..i+d (backward: i-1..i-d); inside a layer FSDP2's own implicit
prefetch applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

CALLED_BY_PARENT: dict[str, tuple[str, ...]] = {"GatedDeltaNet": ("conv1d",)}
"""Children (by parent class name) whose parameters the parent reads directly, so the child's forward
never runs: a unit of their own would never be gathered. ``tests/test_unit_module.py`` checks that every
other parameter-holding module of the model runs its forward."""


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


def depth_of(setting: int | str) -> int:
    """The explicit chain depth of one direction's prefetch setting (``default``/``none``: 0)."""
    return setting if isinstance(setting, int) else 0


def _post_order(module: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    for child_name, child in module.named_children():
        if child_name in CALLED_BY_PARENT.get(type(module).__name__, ()):
            continue  # travels with its parent
        yield from _post_order(child, f"{name}.{child_name}" if name else child_name)
    yield name, module


def module_units(model: Any) -> list[tuple[str, Any]]:
    """``(name, module)`` of the extra units of ``unit="module"``: every module that directly holds
    parameters, children before parents, except the root itself, children in ``CALLED_BY_PARENT`` (their
    parameters go with the parent, which then counts as holding parameters) and modules that share a
    parameter with another module (they stay in the root)."""
    owners: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    units = []
    for name, module in _post_order(model):
        if module is model:
            continue
        own = list(module.parameters(recurse=False))
        own += [
            p
            for child in CALLED_BY_PARENT.get(type(module).__name__, ())
            if hasattr(module, child)
            for p in getattr(module, child).parameters()
        ]
        if own and all(owners[id(p)] == 1 for p in own):
            units.append((name, module))
    return units


def apply_plan(
    model: Any,
    fully_shard: Callable[..., Any],
    *,
    reshard_after_forward: bool,
    forward: int | str,
    backward: int | str,
    implicit_backward: bool,
    unit: Literal["layer", "module"] = "layer",
    **kwargs: Any,
) -> list[Any]:
    """Wrap ``model`` with a backend's ``fully_shard`` in plan order (rules 1–4): with ``unit="module"``
    first every parameter-holding module (``module_units``), then each decoder layer with the arm's
    ``reshard_after_forward``, then the root with ``False``; then the explicit prefetch chains.

    ``forward``/``backward`` are the arm's prefetch settings (``Arm.prefetch_directions``): a depth N
    sets layer chains; ``default`` sets nothing (the library's own behaviour); ``none`` sets nothing
    too, except where the library prefetches implicitly (``implicit_backward``: FSDP2, whose units
    prefetch the previous unit in backward unless given a non-empty list, so every unit is given a list
    of only itself; an empty list would keep the implicit prefetch).

    ``kwargs`` (mesh, mixed precision, placement, ...) go to every ``fully_shard`` call. Returns the shard
    units in order (module units, layers, then the root).
    """
    if unit not in ("layer", "module"):
        raise ValueError(f"unit must be 'layer' or 'module', got {unit!r}")
    layers = list(model.model.layers)
    inner = [m for _, m in module_units(model)] if unit == "module" else []
    in_layers = {id(m) for layer in layers for m in layer.modules()}
    for module in inner:  # the root's own modules (embeddings, norm, lm_head) keep rule 3's False
        reshard = bool(reshard_after_forward) and id(module) in in_layers
        fully_shard(module, reshard_after_forward=reshard, **kwargs)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=bool(reshard_after_forward), **kwargs)
    fully_shard(model, reshard_after_forward=False, **kwargs)
    # the units that carry layer i's parameters: the layer itself, or its module units
    in_layer: list[list[Any]] = [[layer] for layer in layers]
    if inner:
        ids = {id(m) for m in inner}
        in_layer = [[m for m in layer.modules() if id(m) in ids] for layer in layers]
    units = [*inner, *layers, model]
    if backward == "none" and implicit_backward:
        for unit_module in units:
            unit_module.set_modules_to_backward_prefetch([unit_module])
    for i, layer in enumerate(layers):
        ahead = prefetch_targets(len(layers), i, depth_of(forward))[0]
        back = prefetch_targets(len(layers), i, depth_of(backward))[1]
        if ahead:
            layer.set_modules_to_forward_prefetch([m for j in ahead for m in in_layer[j]])
        if back:
            layer.set_modules_to_backward_prefetch([m for j in back for m in in_layer[j]])
    return units

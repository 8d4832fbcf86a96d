"""Named ranges in the profiled step: each FSDP unit's forward and backward, the root's, the optimizer step,
and every c10d collective with its group and per-group index (docs/DATA.md "Ranges in the profiled step").

The same for every arm: the ranges come from module hooks, a hook on the loss's ``grad_fn`` and wrappers
of the c10d functions, never from an implementation's own annotations. Installed for the profiled step
only (``worker.run_steps``), so timed steps carry no hooks.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

PREFIX = "fsdpbench"
"""Every range name starts with ``fsdpbench::``."""
ROOT = "root"


def forward_range(unit: str) -> str:
    """``fsdpbench::forward::<unit>``: from the unit's forward pre-hook to its forward hook."""
    return f"{PREFIX}::forward::{unit}"


def backward_range(unit: str) -> str:
    """``fsdpbench::backward::<unit>``: a layer's from its backward pre-hook to its input's gradient; the
    root's around the whole backward call."""
    return f"{PREFIX}::backward::{unit}"


OPTIMIZER_RANGE = f"{PREFIX}::optimizer"


def collective_range(kind: str, group: str, index: int) -> str:
    """``fsdpbench::c10d::<kind>::group=<group name>::index=<k>``: k counts from 0 per group in the step."""
    return f"{PREFIX}::c10d::{kind}::group={group}::index={index}"


class _Range:
    """A record_function range opened in one hook and closed in another (on the same thread)."""

    def __init__(self, name: str) -> None:
        self._rf = torch.autograd.profiler.record_function(name)
        self._rf.__enter__()

    def close(self) -> None:
        self._rf.__exit__(None, None, None)


class ProfileMarks:
    """Hooks on the units (decoder layers, then the root model) and wrappers of the c10d collectives.

    Placement (so each unit's own all-gather, reduce-scatter and the prefetch it launches land in it):
    forward pre-hooks are prepended (they run before an implementation's own pre-forward, which gathers)
    and forward hooks appended with ``always_call`` (after its post-forward, which reshards). A layer's
    backward opens at its full backward pre-hook (which fires before FSDP's pre-backward, so the
    all-gather and the backward prefetch it launches land in it) and closes when the gradient of the
    layer's input is ready: a tensor hook on the input as the layer received it (the forward pre-hook
    sees it before the implementation wraps it), which fires after the implementation's post-backward
    (FSDP2's ``post_backward_reduce``), so the layer's reduce-scatter lands in it too; the next layer's
    pre-hook closes one still open. The root's backward is a range around the whole ``backend.backward``
    call (the model returns a dataclass, so module backward hooks on the root do not fire, and FSDP2's
    hook on the loss runs before any hook fsdpbench could add there): it holds the root's pre-backward
    (the last layer's prefetch), the root's own backward and the engine's final callbacks (FSDP2's root
    reduce-scatter). A collective's range wraps the c10d call that launched it: it nests in the innermost
    range open when it was launched.
    """

    def __init__(self, model: torch.nn.Module, layers: list[tuple[str, torch.nn.Module]]) -> None:
        self.units = [*layers, (ROOT, model)]
        self._handles: list[Any] = []
        self._saved: list[tuple[Any, str, Any]] = []
        self._forward: dict[str, _Range] = {}
        self._backward: _Range | None = None
        self._backward_unit = ""
        self._index: Counter[str] = Counter()
        self._local = threading.local()
        self.collectives: list[str] = []
        """The collective range names in launch order (for tests and logs)."""
        self.delay: tuple[str, str, float] | None = None
        """(unit, phase, seconds): sleep at the start of that unit's phase range (the debug delay fault)."""

    # ---------------------------------------------------------------- install / remove
    def install(self, collective_kinds: dict[str, str]) -> None:
        """Register the hooks and wrap ``collective_kinds`` ({c10d function: kind}) in c10d and dist."""
        for name, module in self.units:
            pre = functools.partial(self._fwd_pre, name)
            post = functools.partial(self._fwd_post, name)
            self._handles.append(module.register_forward_pre_hook(pre, prepend=True))
            self._handles.append(module.register_forward_hook(post, always_call=True))
            if name != ROOT:
                bwd = functools.partial(self._bwd_pre, name)
                self._handles.append(module.register_full_backward_pre_hook(bwd, prepend=True))
        self._saved += wrap_collectives(collective_kinds, self._wrap)

    def uninstall(self) -> None:
        """Remove every hook and wrapper (and close a range left open by a failed step)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        restore_collectives(self._saved)
        for rng in [*self._forward.values(), self._backward]:
            if rng is not None:
                with contextlib.suppress(RuntimeError):
                    rng.close()
        self._forward.clear()
        self._backward = None

    # ---------------------------------------------------------------- the step's calls
    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        """The root's backward range, around the backend's whole ``backward`` call."""
        with torch.autograd.profiler.record_function(backward_range(ROOT)):
            yield
            if self._backward is not None:  # a layer whose input gradient never came
                self._backward.close()
                self._backward = None

    @contextlib.contextmanager
    def optimizer(self) -> Iterator[None]:
        """The optimizer step's range."""
        with torch.autograd.profiler.record_function(OPTIMIZER_RANGE):
            yield

    # ---------------------------------------------------------------- hooks
    def _fwd_pre(self, name: str, module: Any, args: Any) -> None:
        self._forward[name] = _Range(forward_range(name))
        self._maybe_delay(name, "forward")
        first = args[0] if args else None
        if name != ROOT and isinstance(first, torch.Tensor) and first.requires_grad:
            first.register_hook(functools.partial(self._input_grad, name))

    def _fwd_post(self, name: str, module: Any, args: Any, output: Any) -> None:
        rng = self._forward.pop(name, None)
        if rng is not None:
            rng.close()

    def _bwd_pre(self, name: str, module: Any, grad_output: Any) -> None:
        if self._backward is not None:
            self._backward.close()
        self._backward = _Range(backward_range(name))
        self._backward_unit = name
        self._maybe_delay(name, "backward")

    def _maybe_delay(self, name: str, phase: str) -> None:
        if self.delay is not None and self.delay[:2] == (name, phase):
            time.sleep(self.delay[2])

    def _input_grad(self, name: str, grad: torch.Tensor) -> None:
        if self._backward is not None and self._backward_unit == name:
            self._backward.close()
            self._backward = None

    def _wrap(self, orig: Any, kind: str) -> Any:
        local, marks = self._local, self
        signature = inspect.signature(orig)

        @functools.wraps(orig)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):  # one spelling forwarding to another: name it once
                return orig(*args, **kwargs)
            try:
                group = signature.bind_partial(*args, **kwargs).arguments.get("group")
            except TypeError:
                group = None
            name = _group_name(group)
            index = marks._index[name]
            marks._index[name] += 1
            label = collective_range(kind, name, index)
            marks.collectives.append(label)
            local.inside = True
            try:
                with torch.autograd.profiler.record_function(label):
                    return orig(*args, **kwargs)
            finally:
                local.inside = False

        return wrapped


def _group_name(group: Any) -> str:
    """The process group's c10d name (``"0"`` for the default group); ``"?"`` when it cannot be told."""
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return str(dist.distributed_c10d._get_process_group_name(pg))
    except Exception:  # noqa: BLE001 - a name is a label, never a reason to fail the step
        return "?"


def decoder_units(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``("layers.<i>", module)`` of the plan's layer units (``backends/plan.py`` rule 1), found as the
    ``layers`` ModuleList under ``model`` whatever wraps it (FSDP1's wrappers, DeepSpeed's engine)."""
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList):
            return [(f"layers.{i}", layer) for i, layer in enumerate(layers)]
    return []


def wrap_collectives(
    collective_kinds: dict[str, str], wrap: Callable[[Any, str], Any]
) -> list[tuple[Any, str, Any]]:
    """Replace each c10d collective named in ``collective_kinds`` (function name → kind) by
    ``wrap(original, kind)``, in ``distributed_c10d`` and wherever ``torch.distributed`` re-exports the
    same function; returns what was replaced, for ``restore_collectives``."""
    import torch.distributed.distributed_c10d as c10d

    saved: list[tuple[Any, str, Any]] = []
    for fn_name, kind in collective_kinds.items():
        orig = getattr(c10d, fn_name, None)
        if orig is None:
            continue
        wrapped = wrap(orig, kind)
        for module in (c10d, dist):
            if getattr(module, fn_name, None) is orig:
                saved.append((module, fn_name, orig))
                setattr(module, fn_name, wrapped)
    return saved


def restore_collectives(saved: list[tuple[Any, str, Any]]) -> None:
    """Undo ``wrap_collectives`` (in reverse order) and empty ``saved``."""
    for module, fn_name, orig in reversed(saved):
        setattr(module, fn_name, orig)
    saved.clear()

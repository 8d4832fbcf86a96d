"""Seeded initialisation in which every value is a pure function of (seed, parameter name, element index).

A rank computes only its own shard's elements: the value of element ``i`` (row-major index into the
full, unsharded parameter) does not depend on which other elements are computed, so every arm, mesh
(FSDP ×8, HSDP 2×4, one process) and world size sees the same weights, and a rank's initialisation
costs its shard, not the model. A runner builds the model on ``meta``, shards it, materialises the
shards and fills them from ``InitialValues.block`` / ``InitialValues.flat`` (``backends/base.py``).

How a value is made (fixed draws per value, so an offset lands exactly):

* the stream: numpy's counter-based Philox4x64 keyed by 128 bits of ``sha256(f"{seed}:{name}")``; the
  64-bit word ``j`` of the stream is counter ``j // 4``, lane ``j % 4``. Its low and high 32 bits give
  two uniforms ``u1, u2 = (k + 0.5) / 2**24`` (24 bits of each) in (0, 1);
* word ``64 g + w`` (w < 64) serves elements ``128 g + w`` (from ``u1``, or the cosine) and
  ``128 g + 64 + w`` (``u2``, or the sine): one word per two values, contiguous runs of 64 for speed;
* normal: Box-Muller on the pair, ``std · sqrt(-2 ln u1) · (cos, sin)(2π u2)`` (|value| < 5.9 std);
* ``A_log``: ``log(1 + 15 u)`` for each uniform, i.e. log(U(1, 16));
* words are computed from and to multiples of ``ALIGN_WORDS`` in batches of at most ``CHUNK_WORDS``,
  on one thread, so every value goes through the same floating-point code path (vector, never a scalar
  remainder loop) whichever range asked for it; a range costs its length plus at most 254
  values (``values_drawn`` counts them).

Values are bit-identical for the same torch and numpy builds on the same CPU family; another build may
differ in the last bit (torch's vectorised ``log``/``sin``/``cos``), which no timing or parity check
notices. Values changed with this generator (torch's ``normal_`` stream before): results from before it
compare only to themselves.

| parameter (name ends with)                    | initial value                              |
|-----------------------------------------------|--------------------------------------------|
| ``layernorm.weight``, ``q_norm``/``k_norm``, ``model.norm`` | 0 (the norm multiplies by 1 + w)  |
| ``linear_attn.norm.weight`` (gated norm)      | 1                                          |
| ``dt_bias``                                   | 1                                          |
| ``A_log``                                     | log(U(1, 16)) (transformers: U(0.01, 16))  |
| everything else (matrices, conv, experts, router, embeddings) | N(0, initializer_range²)   |
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

DEFAULT_STD = 0.02
ALIGN_WORDS = 64
"""Words are computed from and to multiples of 64 (128 values): every op's length is a multiple of any
SIMD width, so no value falls in a scalar remainder loop (a different last bit)."""
CHUNK_WORDS = 16384
"""Words per batch of ops (each op on 16,384 values, run on one thread: ``_one_thread``)."""
_LANES = 4  # Philox4x64: four 64-bit words per counter value
_MASK24 = np.uint64(0xFFFFFF)
_SHIFT32 = np.uint64(32)
_LN_2_POW_24 = 24 * math.log(2.0)
_TWO_PI_OVER_2_24 = 2 * math.pi / 2**24

Index = tuple[slice, ...]


def distribution(name: str) -> str:
    """``zeros``, ``ones``, ``log_uniform_1_16`` or ``normal``: the initial value rule for ``name``."""
    if name.endswith("linear_attn.norm.weight") or name.endswith("dt_bias"):
        return "ones"
    if name.endswith("norm.weight"):
        return "zeros"
    if name.endswith("A_log"):
        return "log_uniform_1_16"
    return "normal"


def _philox_key(seed: int, name: str) -> list[int]:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return [int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")]


def _fill(key: list[int], first_word: int, words: int, kind: str, std: float, out: torch.Tensor) -> None:
    """Write the ``2 · words`` fp32 values of words ``[first_word, first_word + words)`` into ``out``
    (``first_word`` and ``words`` multiples of ``ALIGN_WORDS``)."""
    raw = np.random.Philox(key=key, counter=first_word // _LANES).random_raw(words)
    # k + 0.5 with k < 2**24 is exact in fp32: uniforms (k + 0.5) / 2**24 in (0, 1), never 0
    low = (raw & _MASK24).astype(np.float32) + np.float32(0.5)
    high = ((raw >> _SHIFT32) & _MASK24).astype(np.float32) + np.float32(0.5)
    groups = out.view(words // ALIGN_WORDS, 2, ALIGN_WORDS)  # [group, low/high half, word in group]
    low_t = torch.from_numpy(low).view(-1, ALIGN_WORDS)
    high_t = torch.from_numpy(high).view(-1, ALIGN_WORDS)
    if kind == "log_uniform_1_16":
        torch.log1p(low_t.mul_(15.0 / 2**24), out=groups[:, 0])
        torch.log1p(high_t.mul_(15.0 / 2**24), out=groups[:, 1])
        return
    # Box-Muller: radius² = -2 std² ln u1, with ln u1 = ln(k1 + 0.5) - 24 ln 2; angle = 2π u2
    var = std * std
    radius = low_t.log_().mul_(-2.0 * var).add_(2.0 * _LN_2_POW_24 * var).sqrt_()
    angle = high_t.mul_(_TWO_PI_OVER_2_24)
    torch.mul(torch.cos(angle), radius, out=groups[:, 0])
    torch.mul(torch.sin(angle), radius, out=groups[:, 1])


class InitialValues:
    """The initial values of one model's parameters, any element range of any parameter on demand.

    ``values_drawn`` counts the values computed so far (random values including the alignment at a
    range's ends, < 128 each; constants count their elements), for the launch-cost benchmark and the tests.
    """

    def __init__(self, shapes: Mapping[str, Sequence[int]], seed: int, std: float = DEFAULT_STD) -> None:
        """``shapes``: full (unsharded) shape of each parameter, by the unwrapped model's names."""
        self.shapes = {name: tuple(int(s) for s in shape) for name, shape in shapes.items()}
        self.seed = seed
        self.std = std
        self.values_drawn = 0

    def shape(self, name: str) -> tuple[int, ...]:
        """The full shape of parameter ``name`` (a clear error for a name the model does not have)."""
        try:
            return self.shapes[name]
        except KeyError:
            raise KeyError(f"initial values: no parameter called {name!r} in the model") from None

    @torch.no_grad()
    def flat(self, name: str, start: int, stop: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """fp32 values of elements ``[start, stop)`` of ``name`` in row-major order (1-D, on CPU).

        ``out``: a tensor of ``stop - start`` elements to write them into (any dtype or device; an fp32
        contiguous CPU tensor is written in place, chunk by chunk, with no temporary of its size)."""
        numel = math.prod(self.shape(name))
        if not 0 <= start <= stop <= numel:
            raise ValueError(f"initial values: range [{start}, {stop}) outside {name!r} of {numel} elements")
        direct = _fills_in_place(out)
        dest = out.view(-1) if direct else torch.empty(stop - start)
        if dest.numel() != stop - start:
            raise ValueError(
                f"initial values: {name!r} [{start}, {stop}) into a tensor of {dest.numel()} elements"
            )
        kind = distribution(name)
        if kind in ("zeros", "ones"):
            self.values_drawn += stop - start
            dest.fill_(1.0 if kind == "ones" else 0.0)
        elif start < stop:
            key = _philox_key(self.seed, name)
            group = 2 * ALIGN_WORDS  # values per aligned group of words
            first, end = start // group * ALIGN_WORDS, -(-stop // group) * ALIGN_WORDS
            scratch = torch.empty(2 * min(CHUNK_WORDS, end - first))
            with _one_thread():
                for word in range(first, end, CHUNK_WORDS):
                    words = min(CHUNK_WORDS, end - word)
                    _fill(key, word, words, kind, self.std, scratch[: 2 * words])
                    lo, hi = max(start, 2 * word), min(stop, 2 * (word + words))
                    dest[lo - start : hi - start] = scratch[lo - 2 * word : hi - 2 * word]
            self.values_drawn += 2 * (end - first)
        if out is None or direct:
            return dest if out is None else out
        return out.copy_(dest.view(out.shape))

    @torch.no_grad()
    def block(self, name: str, index: Index, out: torch.Tensor | None = None) -> torch.Tensor:
        """fp32 values of ``full[index]`` (one slice per dim, step 1), computed one contiguous run at a time.

        ``out``: a tensor of the block's shape to write them into, as in ``flat``."""
        shape = self.shape(name)
        bounds = [s.indices(n) for s, n in zip(index, shape, strict=True)]
        sizes = tuple(max(0, stop - start) for start, stop, _ in bounds)
        if out is not None and tuple(out.shape) != sizes:
            raise ValueError(
                f"initial values: block {sizes} of {name!r} into a tensor of shape {tuple(out.shape)}"
            )
        direct = _fills_in_place(out)
        dest = out if direct else torch.empty(sizes)
        if dest.numel():
            at = 0
            flat_dest = dest.view(-1)
            for start, stop in _runs(shape, [(start, stop) for start, stop, _ in bounds]):
                self.flat(name, start, stop, out=flat_dest[at : at + stop - start])
                at += stop - start
        if out is None or direct:
            return dest
        return out.copy_(dest)

    def full(self, name: str) -> torch.Tensor:
        """The whole fp32 value of ``name`` (the unsharded reference, and small parameters)."""
        shape = self.shape(name)
        return self.flat(name, 0, math.prod(shape)).view(shape)


def _fills_in_place(out: torch.Tensor | None) -> bool:
    """Whether ``out`` takes the values directly (an fp32 contiguous CPU tensor), with no temporary between."""
    return out is not None and out.dtype == torch.float32 and out.device.type == "cpu" and out.is_contiguous()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch's intra-op threads set to 1 for the duration: its log/sqrt/sin/cos split even 16k-element
    ops across threads (grain 2,048), which costs more than it gains on such small ops and, on a loaded
    machine, waits for descheduled threads (measured: 20 M values 0.78 s on 1 thread, 19.6 s on 2 at load 8)."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _runs(shape: Sequence[int], bounds: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The contiguous flat ``[start, stop)`` runs of the block ``bounds`` of a row-major ``shape``."""
    if not shape:
        yield 0, 1
        return
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    inner = len(shape) - 1  # the outermost dim from which on the block takes whole trailing dims
    while inner > 0 and bounds[inner] == (0, shape[inner]):
        inner -= 1
    run = (bounds[inner][1] - bounds[inner][0]) * strides[inner]

    def walk(d: int, base: int) -> Iterator[tuple[int, int]]:
        if d == inner:
            start = base + bounds[d][0] * strides[d]
            yield start, start + run
            return
        for i in range(*bounds[d]):
            yield from walk(d + 1, base + i * strides[d])

    yield from walk(0, 0)


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
        dtype, device: of the returned tensor (always computed in fp32 on CPU first).
        std: standard deviation of the normal values (``ModelConfig.initializer_range``).
    """
    values = InitialValues({name: shape}, seed, std)
    return values.full(name).to(device=device, dtype=dtype)


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, std: float | None = None) -> None:
    """Fill every parameter of a materialised (non-meta) model with its initial values.

    DTensor parameters (e.g. after FSDP2 ``fully_shard``) receive only their local shard's values.
    """
    if std is None:
        std = getattr(getattr(model, "config", None), "initializer_range", DEFAULT_STD)
    values = InitialValues({name: p.shape for name, p in model.named_parameters()}, seed, std)
    for name, param in model.named_parameters():
        if hasattr(param, "device_mesh") and hasattr(param, "placements"):
            index = dtensor_local_index(param.shape, param.device_mesh, param.placements)
            values.block(name, index, out=param.to_local())
        else:
            values.block(name, tuple(slice(None) for _ in param.shape), out=param)


def dtensor_local_index(shape: Sequence[int], mesh: object, placements: Sequence[object]) -> Index:
    """This rank's block of a DTensor of global ``shape`` on ``mesh`` with ``placements`` (torch's own
    ``compute_local_shape_and_global_offset``, so uneven shards match what ``fully_shard`` keeps)."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local, offset = compute_local_shape_and_global_offset(tuple(shape), mesh, placements)
    return tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))

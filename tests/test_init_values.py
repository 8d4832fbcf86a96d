"""Initial values as a pure function of (seed, parameter name, element index) (``model/init.py``).

The references: a plain reading of numpy's Philox stream with ``math``'s Box-Muller in float64 (the
documented transform, computed here by hand), slices of the single-process full tensor, and one 4-rank
gloo launch that shards the tiny model with every layout and gathers it back (init_values_ranks.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fsdpbench.config import preset_tiny
from fsdpbench.model import InitialValues, build_model, init_full_tensor
from helpers import torchrun_command

HERE = Path(__file__).parent


def _by_hand(seed: int, name: str, index: int, std: float) -> float:
    """Element ``index`` of a normal parameter, read straight off the stream: word 64 g + w of Philox4x64
    keyed by sha256(f"{seed}:{name}") serves elements 128 g + w (cosine) and 128 g + 64 + w (sine), its
    low/high 24-bit halves as uniforms (k + 0.5) / 2**24."""
    group, within = divmod(index, 128)
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    key = [int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")]
    word = int(np.random.Philox(key=key, counter=0).random_raw(64 * group + within % 64 + 1)[-1])
    u1 = ((word & 0xFFFFFF) + 0.5) / 2**24
    u2 = (((word >> 32) & 0xFFFFFF) + 0.5) / 2**24
    radius = std * math.sqrt(-2.0 * math.log(u1))
    return radius * (math.cos if within < 64 else math.sin)(2 * math.pi * u2)


@pytest.mark.parametrize("index", [0, 1, 63, 64, 127, 128, 200, 32767, 32768, 40001, 99999])
def test_a_normal_value_is_box_muller_on_its_own_philox_word(index):
    name = "model.layers.0.mlp.gate.weight"
    value = InitialValues({name: (100, 1000)}, 5).flat(name, index, index + 1).item()
    # fp32 angle and radius: |error| ≤ a few ulp of 2π times the radius (≈ 1e-8 at std 0.02)
    assert value == pytest.approx(_by_hand(5, name, index, 0.02), rel=2e-6, abs=1e-7)


def test_any_range_or_block_is_bitwise_the_slice_of_the_full_tensor():
    shapes = {"a.weight": (37, 5, 1000), "x.linear_attn.A_log": (40000,)}
    full = {n: InitialValues(shapes, 3).full(n) for n in shapes}
    flat = full["a.weight"].view(-1)
    for start, stop in [
        (0, 1),
        (1, 2),
        (32767, 32769),
        (5, 185000),
        (184999, 185000),
        (100, 100),
        (1, 32768),
    ]:
        values = InitialValues(shapes, 3)
        assert torch.equal(values.flat("a.weight", start, stop), flat[start:stop]), (start, stop)
    blocks = [
        (slice(3, 9), slice(None), slice(None)),  # Shard(0): contiguous rows
        (slice(None), slice(1, 3), slice(None)),  # Shard(1): one run per row of dim 0
        (slice(2, 30), slice(0, 5), slice(10, 990)),
        (slice(36, 37), slice(4, 5), slice(999, 1000)),
    ]
    for index in blocks:
        assert torch.equal(InitialValues(shapes, 3).block("a.weight", index), full["a.weight"][index]), index
    a_log = full["x.linear_attn.A_log"]
    assert torch.equal(InitialValues(shapes, 3).flat("x.linear_attn.A_log", 33, 20000), a_log[33:20000])
    assert 0.0 < a_log.min().item() and a_log.max().item() < math.log(16.0)  # log(U(1, 16))


def test_writing_into_a_tensor_gives_the_same_values_in_its_dtype():
    """``out=``: fp32 CPU tensors are written in place, others (bf16 here, or a device tensor) through a copy."""
    shape = (64, 300)
    full = init_full_tensor("w", shape, 4)
    rows = (slice(16, 48), slice(None))
    in_place = torch.full((32, 300), float("nan"))
    assert InitialValues({"w": shape}, 4).block("w", rows, out=in_place) is in_place
    assert torch.equal(in_place, full[rows])
    half = torch.empty(32, 300, dtype=torch.bfloat16)
    InitialValues({"w": shape}, 4).block("w", rows, out=half)
    assert torch.equal(half, full[rows].bfloat16())
    piece = torch.empty(1000)
    InitialValues({"w": shape}, 4).flat("w", 777, 1777, out=piece)
    assert torch.equal(piece, full.view(-1)[777:1777])
    with pytest.raises(ValueError, match=r"block \(32, 300\) of 'w' into a tensor of shape \(3, 300\)"):
        InitialValues({"w": shape}, 4).block("w", rows, out=torch.empty(3, 300))


def test_values_do_not_depend_on_the_thread_count():
    shape = (300, 1000)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = init_full_tensor("w", shape, 2)
        torch.set_num_threads(2)
        two = init_full_tensor("w", shape, 2)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)


def test_constants_and_distribution_by_name():
    values = InitialValues(
        {"model.norm.weight": (8,), "l.linear_attn.norm.weight": (8,), "l.dt_bias": (4,)}, 0
    )
    assert torch.equal(values.full("model.norm.weight"), torch.zeros(8))
    assert torch.equal(values.full("l.linear_attn.norm.weight"), torch.ones(8))
    assert torch.equal(values.full("l.dt_bias"), torch.ones(4))
    big = init_full_tensor("w", (1000, 1000), 9, std=0.05)
    assert abs(big.mean().item()) < 0.05 * 5 / 1000  # 5 standard errors of the mean
    assert big.std().item() == pytest.approx(0.05, rel=0.005)
    assert not torch.equal(init_full_tensor("v", (1000, 1000), 9, std=0.05), big)
    assert not torch.equal(init_full_tensor("w", (1000, 1000), 8, std=0.05), big)


def test_a_shard_costs_its_own_elements_not_the_parameter():
    """An eighth of a 4096×4096 matrix draws at most 1.2× an eighth (today's path drew all of it)."""
    shape = (4096, 4096)
    numel = math.prod(shape)
    for rank in range(8):
        values = InitialValues({"w": shape}, 0)
        rows = slice(rank * 512, (rank + 1) * 512)
        values.block("w", (rows, slice(None)))
        assert numel / 8 <= values.values_drawn <= 1.2 * numel / 8, rank


def test_unknown_name_or_range_is_a_clear_error():
    values = InitialValues({"w": (4, 4)}, 0)
    with pytest.raises(KeyError, match="no parameter called 'v'"):
        values.flat("v", 0, 1)
    with pytest.raises(ValueError, match=r"range \[3, 17\) outside 'w' of 16 elements"):
        values.flat("w", 3, 17)


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_every_backend_and_mesh_gathers_the_single_process_values(tmp_path):
    """FSDP2 ×4, ×2 and HSDP 2×2, FSDP1 ×4 and HSDP 2×2, hyper ×4: each rank computes its shard only,
    and the gathered tensors are bitwise the single-process full draw."""
    out = tmp_path / "digests.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    cmd = [*torchrun_command(4), str(HERE / "init_values_ranks.py"), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    model = build_model(preset_tiny(), device="meta")
    reference = {
        n: hashlib.sha256(init_full_tensor(n, p.shape, 11).numpy().tobytes()).hexdigest()
        for n, p in sorted(model.named_parameters())
    }
    total = sum(p.numel() for p in model.parameters())
    if "skipped" in results["hyper_x4"]:
        pytest.importorskip("hyper_parallel")  # only a missing optional library may skip it
        raise AssertionError(results["hyper_x4"]["skipped"])
    shards = {
        "fsdp2_x4": 4,
        "fsdp2_x2": 2,
        "fsdp2_hsdp_2x2": 2,
        "fsdp1_x4": 4,
        "fsdp1_hsdp_2x2": 2,
        "hyper_x4": 4,
    }
    assert sorted(results) == sorted(shards)
    for name, got in results.items():
        assert got["digests"] == reference, name
        for drawn, held in got["drawn_held"]:
            # each rank holds 1/shards of the model and computes it, plus ≤ 254 values per range it fills
            assert held == total // shards[name], (name, held)
            assert held <= drawn <= 1.02 * held, (name, drawn, held)

"""What initialising one rank's shard costs: rank R of a W-way FSDP2 model on CPU, without launching.

The model is built on ``meta``; each parameter's shard is the plan's (``backends.plan.shard_dim``, then
``torch.chunk`` along it, as ``fully_shard``'s ``Shard(dim)`` keeps it). ``--mode shard`` (the default) is
today's path: allocate the shard, compute only its values (``model.InitialValues.block``) and copy them in.
``--mode before`` is the path before initialisation became proportional to the shard: draw each
parameter's full value with torch's ``normal_`` (the old ``init_full_tensor``) and copy out the shard.
One parameter at a time in both, so memory stays at one full parameter (before) or one shard (shard).

Usage::

    python benchmarks/launch_cost.py --preset full --layers 8 --world 8 --rank 3 --json out.json
    python benchmarks/launch_cost.py --preset full --layers 1 --world 8 --rank 3 --compare 2

``--threads`` (default 1) is torch's intra-op thread count: torchrun sets ``OMP_NUM_THREADS=1`` in every
rank. ``--compare N`` times both modes N times each, interleaved (shard, before, before, shard, ...), and
prints the ratio of medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import torch

from fsdpbench.backends.plan import shard_dim
from fsdpbench.config import model_preset
from fsdpbench.model import InitialValues, build_model


def shard_index(shape: tuple[int, ...], world: int, rank: int) -> tuple[slice, ...]:
    """Rank ``rank``'s block of a parameter of ``shape``: the plan's shard dim, ``torch.chunk`` sizes."""
    if not shape:
        return ()
    dim = shard_dim(shape, world)
    chunk = -(-shape[dim] // world)
    start = min(rank * chunk, shape[dim])
    stop = min(start + chunk, shape[dim])
    return tuple(slice(start, stop) if d == dim else slice(None) for d in range(len(shape)))


def _before_full(name: str, shape: tuple[int, ...], seed: int, std: float) -> torch.Tensor:
    """The full value as the old ``model.init.init_full_tensor`` drew it (torch ``normal_`` stream)."""
    if name.endswith("linear_attn.norm.weight") or name.endswith("dt_bias"):
        return torch.ones(shape)
    if name.endswith("norm.weight"):
        return torch.zeros(shape)
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    gen = torch.Generator(device="cpu").manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log_()
    return torch.empty(shape).normal_(0.0, std, generator=gen)


def initialise(shapes: dict[str, tuple[int, ...]], world: int, rank: int, mode: str, seed: int, std: float):
    """Fill rank ``rank``'s shard of every parameter once; returns the measurement record."""
    values = InitialValues(shapes, seed, std)
    drawn = shard_values = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for name, shape in shapes.items():
        index = shard_index(shape, world, rank)
        local = torch.empty([len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True)])
        if mode == "shard":
            values.block(name, index, out=local)
        else:
            full = _before_full(name, shape, seed, std)
            local.copy_(full[index])
            drawn += full.numel()
            del full
        shard_values += local.numel()
        del local
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "mode": mode,
        "init_s": round(elapsed, 3),
        "init_cpu_s": round(cpu, 3),
        "values_drawn": values.values_drawn if mode == "shard" else drawn,
        "shard_values": shard_values,
        "total_values": sum(math.prod(s) for s in shapes.values()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="full", help="model preset (default full)")
    p.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    p.add_argument("--world", type=int, default=8, help="FSDP shard count (default 8)")
    p.add_argument("--rank", type=int, default=3, help="the rank whose shard is initialised (default 3)")
    p.add_argument("--mode", choices=("shard", "before"), default="shard", help="see the module docstring")
    p.add_argument("--compare", type=int, metavar="N", help="time both modes N times each, interleaved")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as torchrun)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write the record(s) as JSON to OUT")
    args = p.parse_args()
    if not 0 <= args.rank < args.world:
        sys.exit(f"launch_cost: --rank {args.rank} is outside --world {args.world} (0..{args.world - 1})")
    torch.set_num_threads(args.threads)
    cfg = model_preset(args.preset)
    if args.layers is not None:
        cfg = cfg.replace(num_hidden_layers=args.layers)
    model = build_model(cfg, device="meta")
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    context: dict[str, Any] = {
        "preset": args.preset,
        "layers": cfg.num_hidden_layers,
        "world": args.world,
        "rank": args.rank,
        "threads": args.threads,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.compare:
        order = [("shard", "before") if i % 2 == 0 else ("before", "shard") for i in range(args.compare)]
        records = [
            initialise(shapes, args.world, args.rank, m, args.seed, cfg.initializer_range)
            for pair in order
            for m in pair
        ]
        for r in records:
            print(json.dumps({**context, **r}))
        median = {
            key: {
                m: statistics.median(r[key] for r in records if r["mode"] == m) for m in ("shard", "before")
            }
            for key in ("init_s", "init_cpu_s")
        }
        ratio = {key: round(m["before"] / m["shard"], 3) for key, m in median.items()}
        for key, m in median.items():
            print(
                f"median {key}: shard {m['shard']:.2f} s, before {m['before']:.2f} s: before/shard {ratio[key]:.2f}x"
            )
        out: Any = {**context, "runs": records, "median": median, "before_over_shard": ratio}
    else:
        out = {
            **context,
            **initialise(shapes, args.world, args.rank, args.mode, args.seed, cfg.initializer_range),
        }
    out["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    if not args.compare:
        print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""How much does fsdpbench's harness change the step time it measures?

The same model, the same ``fully_shard`` plan (FSDP2, every decoder layer then the root), the same
data and optimizer, timed two ways in one run, interleaved round by round (fresh torchrun each):

* **fsdpbench**: ``fsdpbench run --arm torch`` (per-step device sync, all_reduce MAX of the step time,
  steps.jsonl appended per step);
* **bare**: this file under torchrun — a plain loop that times each step with ``perf_counter`` and only
  gathers the times at the end.

Target: the ratio of medians (fsdpbench / bare) within 1%. Usage::

    python benchmarks/harness_overhead.py --rounds 5 --nproc 2 --seq-len 256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson


def bare_worker(args: argparse.Namespace) -> None:
    """Under torchrun: build and shard like the worker does, then a bare timed loop."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    from fsdpbench.backends.plan import shard_dim
    from fsdpbench.config import model_preset
    from fsdpbench.data import rank_batch
    from fsdpbench.model import build_model, init_full_tensor

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    cfg = model_preset(args.preset)
    if args.layers:
        cfg = cfg.replace(num_hidden_layers=args.layers)
    mesh = init_device_mesh("cpu", (world,))
    model = build_model(cfg, device="meta")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}

    def placement(p):
        return Shard(shard_dim(p.shape, world))

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True, shard_placement_fn=placement)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, shard_placement_fn=placement)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = init_full_tensor(name, shapes[name], args.seed)
            p.to_local().copy_(distribute_tensor(full, mesh, p.placements, src_data_rank=None).to_local())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for step in range(args.warmup + args.steps):
        ids = rank_batch(args.seed, step, rank=rank, world_size=world, batch_size=1, seq_len=args.seq_len,
                         vocab_size=cfg.vocab_size)  # fmt: skip
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        model(ids, labels=ids).loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    gathered = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        per_step_max = [max(col) for col in zip(*gathered, strict=True)]
        Path(args.bare_out).write_text(json.dumps(per_step_max[args.warmup :]))
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bare(args: argparse.Namespace, out: Path) -> list[float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", __file__, "--bare-worker",
           "--bare-out", str(out), "--seq-len", str(args.seq_len), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--preset", args.preset, "--seed", str(args.seed)]  # fmt: skip
    if args.layers:
        cmd += ["--layers", str(args.layers)]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    return json.loads(out.read_text())


def run_fsdpbench(args: argparse.Namespace, out: Path) -> list[float]:
    cmd = [sys.executable, "-m", "fsdpbench", "run", "--arm", "torch", "--rounds", "1", "--nproc", str(args.nproc),
           "--seq-len", str(args.seq_len), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--preset", args.preset, "--seed", str(args.seed), "--out", str(out), "--no-report"]  # fmt: skip
    if args.layers:
        cmd += ["--layers", str(args.layers)]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    (run_dir,) = out.glob("run_*")
    steps = [orjson.loads(x) for x in (run_dir / "steps.jsonl").read_bytes().splitlines()]
    return [s["time_ms"] for s in steps if s["kind"] == "timed"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the result here")
    p.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bare-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare_worker:
        bare_worker(args)
        return

    from fsdpbench import stats

    medians: dict[str, list[float]] = {"fsdpbench": [], "bare": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("fsdpbench", "bare") if r % 2 == 0 else ("bare", "fsdpbench")
            for who in order:
                where = Path(tmp) / f"{who}{r}"
                where.mkdir()
                times = run_fsdpbench(args, where) if who == "fsdpbench" else run_bare(args, where / "t.json")
                medians[who].append(statistics.median(times))
                print(f"round {r} {who:9s}: median {medians[who][-1]:8.2f} ms over {len(times)} steps", flush=True)
    comp = stats.compare("bare", "fsdpbench", medians["bare"], medians["fsdpbench"])
    ci = f"{comp.ci95[0]:.4f}..{comp.ci95[1]:.4f}" if comp.ci95 else "—"
    print(f"median of round medians: fsdpbench {stats.median(medians['fsdpbench']):.2f} ms, "
          f"bare {stats.median(medians['bare']):.2f} ms")  # fmt: skip
    print(f"ratio fsdpbench/bare = {comp.ratio:.4f} ({(comp.ratio - 1) * 100:+.2f}%), 95% CI {ci}; "
          f"target |difference| <= 1%: {'met' if abs(comp.ratio - 1) <= 0.01 else 'NOT met'}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"round_medians_ms": medians, **comp.to_dict()}, indent=2))


if __name__ == "__main__":
    main()

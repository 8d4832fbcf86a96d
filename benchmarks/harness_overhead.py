"""How much does fsdpbench's harness change the step time it measures?

The same model, the same ``fully_shard`` plan (FSDP2, every decoder layer then the root), the same
data and optimizer, timed two ways in one run, interleaved round by round (fresh torchrun each):

* **fsdpbench**: ``fsdpbench run --arm torch`` (per-step device sync, all_reduce MAX of the step time,
  steps.jsonl appended per step);
* **bare**: this file under torchrun — a plain loop that times each step with ``perf_counter`` and only
  gathers the times at the end.

Two designs, both printed:

* ``launches``: fsdpbench launches and bare launches interleaved round by round (A B, B A, ...); the
  ratio of the medians of per-round medians. Honest but sensitive to load drift between launches.
* ``paired``: one launch, one sharded model; steps alternate between fsdpbench's step
  (``worker.StepRunner.step``: syncs, peak-memory reset, metric all-reduces, steps.jsonl) and the bare
  step, so background load hits both alike; the ratio of the medians over steps.

Target: the ratio of medians (fsdpbench / bare) within 1%.

A third design measures the cost of the phase times alone (docs/phases.md):

* ``phases``: one launch, one sharded model; steps alternate between fsdpbench's step with the phase
  marks (``StepRunner(phase_times=True)``, the default) and without them, the order swapped every pair;
  the ratio of the medians over steps (with / without) and its bootstrap CI. Target: within 1%.

Usage::

    python benchmarks/harness_overhead.py --rounds 5 --nproc 2 --seq-len 256
    python benchmarks/harness_overhead.py --mode phases --paired-steps 200 --nproc 2 --seq-len 256
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
    from fsdpbench.model import build_model, init_full_tensor
    from fsdpbench.run.tokens import rank_batch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(
        args.device, int(os.environ.get("LOCAL_RANK", 0)) if args.device == "cuda" else None
    )
    if args.device == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    cfg = model_preset(args.preset)
    if args.layers:
        cfg = cfg.replace(num_hidden_layers=args.layers)
    mesh = init_device_mesh(args.device, (world,))
    model = build_model(cfg, device="meta")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}

    def placement(p):
        return Shard(shard_dim(p.shape, world))

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True, shard_placement_fn=placement)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, shard_placement_fn=placement)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = init_full_tensor(name, shapes[name], args.seed).to(device)
            p.to_local().copy_(distribute_tensor(full, mesh, p.placements, src_data_rank=None).to_local())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize(device)

    def bare_step(ids: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        model(ids, labels=ids).loss.backward()
        opt.step()
        sync()
        return (time.perf_counter() - t0) * 1e3

    def batch(step: int) -> torch.Tensor:
        return rank_batch(
            args.seed,
            step,
            rank=rank,
            world_size=world,
            batch_size=1,
            seq_len=args.seq_len,
            vocab_size=cfg.vocab_size,
        ).to(device)

    n = args.warmup + args.steps
    if not args.paired:
        times = [bare_step(batch(step)) for step in range(n)]
        harness: list[float] = []
    else:
        import dataclasses

        from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend
        from fsdpbench.config import RunConfig
        from fsdpbench.run.worker import StepRunner

        run_cfg = RunConfig.from_sources(
            env={},
            overrides={
                "arms": "torch",
                "preset": args.preset,
                "seq_len": args.seq_len,
                "layers": args.layers or None,
                "warmup": args.warmup,
                "steps": args.steps,
                "nproc": world,
                "device": args.device,
            },
        )
        runner = StepRunner(
            cfg=run_cfg,
            arm=run_cfg.arms[0],
            backend=TorchFSDP2Backend(),
            model=model,
            optimizer=opt,
            device_type=args.device,
            device=device,
            rank=rank,
            world=world,
            replicas=1,
            round_=0,
            steps_path=Path(args.bare_out).with_suffix(".steps.jsonl"),
        )
        times, harness = [], []
        if args.phases:  # the same runner without the phase marks; "bare" holds the steps without them
            without = dataclasses.replace(runner, phase_times=False)
            without.optimizer_ran = runner.optimizer_ran = []  # neither traces the optimizer path
            for step in range(n):
                order = (runner, without) if step % 2 == 0 else (without, runner)
                for who in order:
                    record = who.step(step)
                    if rank == 0:
                        (harness if who is runner else times).append(record["time_ms"])
            if rank == 0:
                Path(args.bare_out).write_text(
                    json.dumps({"bare": times[args.warmup :], "fsdpbench": harness[args.warmup :]})
                )
            dist.destroy_process_group()
            return
        for step in range(n):  # alternate which goes first, so neither always follows the other
            first_bare = step % 2 == 1
            if first_bare:
                times.append(bare_step(batch(step)))
            record = runner.step(step)
            if rank == 0:
                harness.append(record["time_ms"])
            if not first_bare:
                times.append(bare_step(batch(step)))
    gathered = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        per_step_max = [max(col) for col in zip(*gathered, strict=True)]
        Path(args.bare_out).write_text(
            json.dumps({"bare": per_step_max[args.warmup :], "fsdpbench": harness[args.warmup :]})
        )
    dist.destroy_process_group()


def _check_run(cmd: list[str]) -> None:
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bare(
    args: argparse.Namespace, out: Path, paired: bool = False, phases: bool = False
) -> dict[str, list[float]]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={args.nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={_free_port()}",
        __file__,
        "--bare-worker",
        "--bare-out",
        str(out),
        "--seq-len",
        str(args.seq_len),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--preset",
        args.preset,
        "--seed",
        str(args.seed),
        "--device",
        args.device,
    ]
    if args.layers:
        cmd += ["--layers", str(args.layers)]
    if paired:
        cmd.append("--paired")
    if phases:
        cmd += ["--paired", "--phases"]
    _check_run(cmd)
    return json.loads(out.read_text())


def run_fsdpbench(args: argparse.Namespace, out: Path) -> list[float]:
    cmd = [
        sys.executable,
        "-m",
        "fsdpbench",
        "run",
        "--arm",
        "torch",
        "--rounds",
        "1",
        "--nproc",
        str(args.nproc),
        "--seq-len",
        str(args.seq_len),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--preset",
        args.preset,
        "--seed",
        str(args.seed),
        "--out",
        str(out),
        "--no-report",
        "--device",
        args.device,
    ]
    if args.layers:
        cmd += ["--layers", str(args.layers)]
    _check_run(cmd)
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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (gloo) or cuda (nccl)")
    p.add_argument(
        "--mode",
        choices=("launches", "paired", "both", "phases"),
        default="both",
        help="both = launches + paired; phases = the cost of the phase marks (with / without, paired)",
    )
    p.add_argument("--paired-steps", type=int, default=60, help="timed step pairs of the paired design")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bare-out", help=argparse.SUPPRESS)
    p.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare_worker:
        from fsdpbench.run.process_exit import exit_without_teardown

        bare_worker(args)
        exit_without_teardown(0)
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode in ("launches", "both"):
            out["launches"] = interleaved_launches(args, Path(tmp))
        if args.mode in ("paired", "both"):
            out["paired"] = paired_steps(args, Path(tmp))
        if args.mode == "phases":
            out["phases"] = phase_marks_cost(args, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def _report(
    title: str,
    bare: list[float],
    harness: list[float],
    unit: str,
    names: tuple[str, str] = ("fsdpbench", "bare"),
) -> dict[str, object]:
    from fsdpbench.results import stats

    comp = stats.compare_arms("bare", "fsdpbench", bare, harness)
    ci = f"{comp.ci95[0]:.4f}..{comp.ci95[1]:.4f}" if comp.ci95 else "—"
    within = comp.ci95 is not None and comp.ci95[0] >= 0.99 and comp.ci95[1] <= 1.01
    print(
        f"[{title}] median over {unit}: {names[0]} {stats.median(harness):.2f} ms, {names[1]} "
        f"{stats.median(bare):.2f} ms; ratio {names[0]}/{names[1]} = {comp.ratio:.4f} "
        f"({(comp.ratio - 1) * 100:+.2f}%), 95% CI {ci}; "
        f"target |difference| <= 1%: {'met' if abs(comp.ratio - 1) <= 0.01 else 'NOT met'}; "
        f"CI within ±1%: {'yes' if within else 'no'}",
        flush=True,
    )
    return {"bare_ms": bare, "fsdpbench_ms": harness, **comp.to_dict()}


def interleaved_launches(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """fsdpbench and bare launches, A B / B A per round; per-round medians."""
    medians: dict[str, list[float]] = {"fsdpbench": [], "bare": []}
    for r in range(args.rounds):
        for who in ("fsdpbench", "bare") if r % 2 == 0 else ("bare", "fsdpbench"):
            where = tmp / f"{who}{r}"
            where.mkdir()
            times = (
                run_fsdpbench(args, where) if who == "fsdpbench" else run_bare(args, where / "t.json")["bare"]
            )
            medians[who].append(statistics.median(times))
            print(
                f"round {r} {who:9s}: median {medians[who][-1]:8.2f} ms over {len(times)} steps", flush=True
            )
    return _report("launches", medians["bare"], medians["fsdpbench"], f"{args.rounds} rounds")


def paired_steps(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """One launch whose steps alternate between fsdpbench's step and the bare step."""
    paired = argparse.Namespace(**{**vars(args), "steps": args.paired_steps})
    times = run_bare(paired, tmp / "paired.json", paired=True)
    return _report("paired", times["bare"], times["fsdpbench"], f"{args.paired_steps} step pairs")


def phase_marks_cost(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """One launch whose steps alternate between fsdpbench's step with and without the phase marks."""
    paired = argparse.Namespace(**{**vars(args), "steps": args.paired_steps})
    times = run_bare(paired, tmp / "phases.json", phases=True)
    out = _report(
        "phases", times["bare"], times["fsdpbench"], f"{args.paired_steps} step pairs", ("with", "without")
    )
    out["paired_ratio"] = _paired_ratio(times["bare"], times["fsdpbench"])
    out["marks_direct"] = _marks_direct_cost(statistics.median(times["fsdpbench"]), args.device)
    return out


def _marks_direct_cost(step_ms: float, device: str = "cpu", repeats: int = 20_000) -> dict[str, float]:
    """The marks' own host cost per step (the marks and the read: host clock on CPU, CUDA events recorded
    and read after a sync on cuda), timed directly: what the paired comparison cannot resolve on a loaded
    machine. Best of 5 batches of ``repeats`` steps."""
    from fsdpbench.run.phase_marks import N_MARKS, PhaseMarks

    if device == "cuda":
        import torch

        def settle() -> None:
            torch.cuda.synchronize()
    else:

        def settle() -> None:
            pass

    marks = PhaseMarks(device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            for boundary in range(N_MARKS):
                marks.mark(boundary)
            settle()  # the step's closing sync, which the events need before they are read
            marks.read()
        best = min(best, (time.perf_counter() - t0) / repeats)
    us = best * 1e6
    print(
        f"[phases, direct] the marks cost {us:.2f} µs per step ({device}) = "
        f"{us / 1e3 / step_ms * 100:.4f}% of the median step ({step_ms:.1f} ms)",
        flush=True,
    )
    return {"us_per_step": us, "fraction_of_step": us / 1e3 / step_ms}


def _paired_ratio(without: list[float], with_: list[float], seed: int = 0) -> dict[str, object]:
    """The median over step pairs of (with / without) and its percentile-bootstrap CI over pairs: each pair
    ran back to back in one launch, so the pair's ratio cancels the load drift that widens the CI of the
    ratio of medians."""
    import numpy as np

    ratios = np.asarray(with_, dtype=float) / np.asarray(without, dtype=float)
    rng = np.random.default_rng(seed)
    boot = np.median(ratios[rng.integers(0, ratios.size, (10_000, ratios.size))], axis=1)
    low, high = (float(x) for x in np.quantile(boot, [0.025, 0.975]))
    median = float(np.median(ratios))
    print(
        f"[phases, paired] median over {ratios.size} pairs of with/without = {median:.4f} "
        f"({(median - 1) * 100:+.2f}%), 95% CI {low:.4f}..{high:.4f}; CI within ±1%: "
        f"{'yes' if low >= 0.99 and high <= 1.01 else 'no'}",
        flush=True,
    )
    return {"median": median, "ci95": [low, high], "pairs": int(ratios.size)}


if __name__ == "__main__":
    main()

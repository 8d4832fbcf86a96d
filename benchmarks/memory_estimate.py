"""``fsdpbench model``'s peak-memory estimate against the measured peak on CPU, over a settings matrix.

Each setting is one FSDP2 (``torch`` arm) training step on ``--nproc`` gloo ranks, measured as
``fsdpbench.run.memory`` describes: warm up, free the gradients, then record one step with
``profile_memory=True`` (a step of its own; no timing is taken from it) and take rank 0's peak
allocated = bytes of the tensors live at the start (sharded parameters, optimizer states) + the peak
running sum of the step's ``[memory]`` events. The process's peak resident set over the same step
(``/proc/self/clear_refs`` reset) is shown beside it; it includes the interpreter and libraries.
All settings run in one ``torchrun`` launch.

Usage: ``python benchmarks/memory_estimate.py [--nproc 2] [--settings default|ci] [--json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BASE = {
    "preset": "tiny",
    "layers": 4,
    "seq_len": 512,
    "ac": "off",
    "prefetch": 0,
    "optimizer": "adamw",
    "experts": "auto",
}
MATRIX: dict[str, list[dict[str, Any]]] = {
    "default": [
        {},
        {"seq_len": 256},
        {"seq_len": 1024},
        {"seq_len": 2048},
        {"layers": 8},
        {"layers": 8, "seq_len": 1024},
        {"ac": "full"},
        {"ac": "full", "seq_len": 2048},
        {"ac": "full", "prefetch": 2},
        {"prefetch": 1},
        {"prefetch": 2},
        {"prefetch": 2, "seq_len": 2048},
        {"optimizer": "sgd", "seq_len": 1024},
        {"experts": "loop"},
        {"experts": "loop", "ac": "full", "seq_len": 2048},
    ],
    # the shared fixture's shape (tests/conftest.py: tiny, seq 128, 2 ranks, SGD) at prefetch 0 and 1
    "ci": [
        {"seq_len": 128, "optimizer": "sgd"},
        {"seq_len": 128, "optimizer": "sgd", "prefetch": 1},
    ],
}


def settings_of(name: str) -> list[dict[str, Any]]:
    """The full settings of matrix ``name``: each entry over ``BASE``."""
    return [{**BASE, **s} for s in MATRIX[name]]


def measure(setting: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """One setting on this rank: build, warm up, record one step's memory (see the module docstring)."""
    import torch

    import fsdpbench.device as dev
    from fsdpbench.backends import get_backend
    from fsdpbench.config import RunConfig
    from fsdpbench.run import memory
    from fsdpbench.run.worker import StepRunner, build_sharded_model, make_optimizer

    prefetch = setting["prefetch"]
    arm = f"torch:prefetch={prefetch}" + (":ac=full" if setting["ac"] == "full" else "")
    cfg = RunConfig.from_sources(
        env={},
        overrides={
            "arms": arm,
            "preset": setting["preset"],
            "layers": setting["layers"],
            "seq_len": setting["seq_len"],
            "optimizer": setting["optimizer"],
        },
    )
    [arm_cfg] = cfg.arms
    backend = get_backend(arm_cfg.backend)
    mesh = backend.init_mesh("cpu", arm_cfg.mesh_shape(world))
    device = torch.device("cpu")
    model = build_sharded_model(cfg, arm_cfg, backend, mesh, device)
    model, optimizer = backend.make_training(model, lambda params: make_optimizer(cfg, params))
    _set_experts_impl(model, setting["experts"])
    runner = StepRunner(
        cfg=cfg,
        arm=arm_cfg,
        backend=backend,
        model=model,
        optimizer=optimizer,
        device_type="cpu",
        device=device,
        rank=rank,
        world=world,
        replicas=1,
        round_=0,
        steps_path=Path(os.devnull),
    )
    runner.train(0)  # warm-up: the optimizer states exist from here on
    optimizer.zero_grad(set_to_none=True)
    ids = runner.batch(1)
    gc.collect()
    live = memory.storage_bytes(memory.model_state_tensors(model, optimizer) + [ids])

    def step() -> None:
        loss = model(ids, labels=ids).loss
        backend.backward(loss)
        backend.optimizer_step(optimizer)

    dev.reset_peak_rss()
    rss_start = dev.peak_rss_bytes()
    result, _ = memory.record_step_memory(step, live)
    rss_peak = dev.peak_rss_bytes()
    out = {
        **setting,
        "nproc": world,
        "live_at_start_bytes": result.live_at_start,
        "peak_allocated_bytes": result.peak_allocated,
        "rss_start_bytes": rss_start,
        "rss_peak_bytes": rss_peak,
        "experts_impl": _experts_impl(model),
    }
    gc.collect()
    return out


def _set_experts_impl(model: Any, impl: str) -> None:
    from fsdpbench.model.moe import Experts

    for m in model.modules():
        if isinstance(m, Experts):
            m.impl = impl


def _experts_impl(model: Any) -> str:
    import torch

    from fsdpbench.model.moe import Experts, resolve_experts_impl

    for m in model.modules():
        if isinstance(m, Experts):
            return resolve_experts_impl(m.impl, torch.device("cpu"), torch.float32)
    return "none"


def worker(settings_path: str, out_path: str) -> None:
    """Under torchrun: every setting in turn on every rank; rank 0 writes the results."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    settings = json.loads(Path(settings_path).read_text())
    rows = []
    for s in settings:
        rows.append(measure(s, rank, world))
        dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(out_path).write_text(json.dumps(rows))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_matrix(settings: list[dict[str, Any]], nproc: int, timeout: float = 1200) -> list[dict[str, Any]]:
    """Measure ``settings`` in one torchrun launch of ``nproc`` ranks; rank 0's rows."""
    with tempfile.TemporaryDirectory() as tmp:
        spath, opath = Path(tmp, "settings.json"), Path(tmp, "rows.json")
        spath.write_text(json.dumps(settings))
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            f"--master-port={_free_port()}",
            __file__,
            "--worker",
            str(spath),
            str(opath),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"the measurement launch failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(opath.read_text())


def estimate(row: dict[str, Any]) -> dict[str, Any]:
    """``fsdpbench model``'s estimate for a measured row's setting."""
    from fsdpbench.config import model_preset
    from fsdpbench.model.memory import estimate_peak

    cfg = model_preset(row["preset"]).replace(num_hidden_layers=row["layers"])
    return estimate_peak(
        cfg,
        row["seq_len"],
        (row["nproc"],),
        param_dtype="float32",
        reduce_dtype="float32",
        master_dtype="float32",
        optimizer=row["optimizer"],
        ac=row["ac"],
        prefetch=row["prefetch"],
        kernel_path="pytorch",
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of measured vs estimated peaks."""
    lines = [
        "| layers | seq | ac | prefetch | optimizer | experts | measured peak allocated (MiB) | estimate (MiB) "
        "| estimate / measured | peak RSS (MiB) |",
        "|---:|---:|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        est = r["estimate"]["total"]
        lines.append(
            f"| {r['layers']} | {r['seq_len']} | {r['ac']} | {r['prefetch']} | {r['optimizer']} | "
            f"{r['experts_impl']} | {r['peak_allocated_bytes'] / 2**20:.2f} | {est / 2**20:.2f} | "
            f"{est / r['peak_allocated_bytes']:.3f} | {r['rss_peak_bytes'] / 2**20:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--settings", choices=sorted(MATRIX), default="default")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from fsdpbench.run.process_exit import exit_without_teardown

        worker(*args.worker)
        exit_without_teardown(0)
    rows = run_matrix(settings_of(args.settings), args.nproc)
    for r in rows:
        r["estimate"] = estimate(r)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

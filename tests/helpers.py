"""Helpers shared by several test files (which import these, never each other): the CLI runner, free
ports and the profiled A/B run builder; hand-made analyses, run folders, manifests and step records;
the sweep and report fakes. Torch is imported only inside the functions that need it."""

from __future__ import annotations

import copy
import gzip
import html.parser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

from fsdpbench.config import RunConfig
from fsdpbench.errors import LaunchError
from fsdpbench.run.launcher import interleaved_order

REPO = Path(__file__).resolve().parents[1]


SHARED = Path(os.environ.get("FSDPBENCH_SHARED") or REPO.parent / "shared")
"""The real-trace fixtures (../shared beside the checkout; ``FSDPBENCH_SHARED`` points elsewhere)."""


ASCEND_FIXTURES = SHARED / "fixtures" / "ascend"


def free_port() -> int:
    """A TCP port that is free right now on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(nproc: int) -> list[str]:
    """``python -m torch.distributed.run`` for ``nproc`` local ranks on a free port; the script and its
    arguments follow."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)] + [
        "--master-port",
        str(free_port()),
    ]


def ascend_output(root: Path, rank: int) -> Path:
    """The ``ASCEND_PROFILER_OUTPUT`` folder of rank ``rank`` in an Ascend export folder ``root``."""
    return root / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


def sql_rows(db: Path, query: str) -> list[tuple]:
    """``query``'s rows from the sqlite file ``db``, opened read-only (the shared fixtures stay untouched)."""
    import sqlite3

    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def run_cli(*args: str, timeout: float = 240, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run ``python -m fsdpbench ARGS`` in a subprocess; return the CompletedProcess (text mode)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "fsdpbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def run_profiled_ab(out: Path, arms: str, name: str, timeout: float = 500, *extra: str) -> Path:
    """``fsdpbench ab --profile`` of ``arms`` on 2 gloo ranks (tiny, 1 round of 1+2 steps, seq 128, no
    report, then ``extra`` flags) into ``out``; returns the run folder."""
    proc = run_cli(
        "ab",
        "--arms",
        arms,
        "--rounds",
        "1",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--profile",
        "--nproc",
        "2",
        "--seq-len",
        "128",
        "--out",
        str(out),
        "--name",
        name,
        "--master-port",
        str(free_port()),
        "--no-report",
        *extra,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = sorted(out.glob(f"{name}_*"))
    assert runs, f"no run folder under {out}: {proc.stdout}{proc.stderr}"
    return runs[-1]


# The known-delay 4-rank A/B (conftest's ``delay_ab_run``): its arms, and the delays they inject
DELAY_MS, DELAY2_MS = 150.0, 60.0
"""Large against the scheduling noise of a loaded 2-core machine running 4 ranks (tens of ms per step)."""
DELAY_RANK, DELAY_UNIT, DELAY_PHASE, DELAY_RANK2 = 2, "layers.1", "backward", 1
_PLACE = f"{DELAY_RANK}/{DELAY_UNIT}/{DELAY_PHASE}"
DELAY_ARMS = (
    "torch",
    f"torch:delay={_PLACE}/{DELAY_MS:g}",
    f"torch:delay={_PLACE}/{DELAY_MS:g}:delay={DELAY_RANK2}/{DELAY_UNIT}/{DELAY_PHASE}/{DELAY2_MS:g}",
)
"""The clean arm, D ms on rank 2 at layers.1's backward, and that plus D2 ms on rank 1 at the same place."""
DELAY_LABELS = (
    "torch",
    f"torch-delay{DELAY_RANK}-{DELAY_UNIT}-{DELAY_PHASE}-{DELAY_MS:g}ms",
    f"torch-delay{DELAY_RANK}-{DELAY_UNIT}-{DELAY_PHASE}-{DELAY_MS:g}ms"
    f"-delay{DELAY_RANK2}-{DELAY_UNIT}-{DELAY_PHASE}-{DELAY2_MS:g}ms",
)
"""The labels (and ``profiles/`` folders) of :data:`DELAY_ARMS`."""


DELAY_PROFILE_STEPS = 2
"""Profiled steps of the session's known-delay A/B (``--profile-steps``): the suite's one real multi-step profile."""


def run_delay_ab(out: Path, timeout: float = 560) -> Path:
    """``fsdpbench ab --profile`` of :data:`DELAY_ARMS` on 4 gloo ranks (tiny, ``--layers 2``, 1 round of 1
    warm-up + 2 timed steps, :data:`DELAY_PROFILE_STEPS` profiled steps, seq 128, no report) into ``out``;
    returns the run folder."""
    proc = run_cli(
        *("ab", "--arms", ",".join(DELAY_ARMS), "--nproc", "4", "--rounds", "1", "--warmup", "1"),
        *("--steps", "2", "--layers", "2", "--profile", "--seq-len", "128", "--no-report"),
        *("--profile-steps", str(DELAY_PROFILE_STEPS)),
        *("--name", "truth", "--out", str(out), "--master-port", str(free_port())),
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = out.glob("truth_*")
    return run


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (read from /proc; Linux)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def rank(
    r: int = 0,
    *,
    step=1_000_000.0,
    compute=800_000.0,
    comm=300_000.0,
    overlap=0.8,
    free=0.0,
    collectives=None,
    ops=None,
    sync=None,
) -> dict:
    """One rank of an Analysis JSON with a consistent breakdown (µs)."""
    exposed = comm * (1 - overlap)
    return {
        "rank": r,
        "step": 3,
        "step_time_us": step,
        "compute_us": compute,
        "comm_us": comm,
        "overlap_ratio": overlap,
        "overlapped_us": comm - exposed,
        "exposed_comm_us": exposed,
        "free_us": free,
        "kernel_time_us": compute + comm,
        "collectives": collectives
        if collectives is not None
        else {
            "all_gather": {"count": 12, "bytes": 10**9, "time_us": 200_000.0},
            "reduce_scatter": {"count": 6, "bytes": 5 * 10**8, "time_us": 100_000.0},
        },
        "ops": ops
        if ops is not None
        else [{"op_type": "MatMul", "count": 100, "total_us": 500_000.0, "mean_us": 5_000.0}],
        "sync": sync if sync is not None else {"barrier": 10, "launch_ffts": 59},
    }


def analysis(*ranks: dict) -> dict:
    return {
        "schema_version": 1,
        "sources": ["hand-built"],
        "warnings": [],
        "ranks": list(ranks) or [rank(0), rank(1)],
    }


def fragmented(ratio: float, bytes_ratio: float = 1.0) -> dict:
    coll = {
        "all_gather": {"count": 12 * ratio, "bytes": 10**9 * bytes_ratio, "time_us": 200_000.0},
        "reduce_scatter": {"count": 6, "bytes": 5 * 10**8, "time_us": 100_000.0},
    }
    return analysis(rank(0, collectives=coll), rank(1, collectives=copy.deepcopy(coll)))


def low_overlap(overlap: float) -> dict:
    return analysis(rank(0, overlap=overlap), rank(1, overlap=overlap))


ALPHA_US = 40.0


BETA_US_PER_BYTE = 2e-4  # 5 GB/s


def synthetic_analysis(
    *,
    n_ranks: int = 2,
    layers: int = 6,
    params_per_layer: int = 10,
    per_param: bool = False,
    compute_us: float = 200_000.0,
    overlap_ratio: float = 0.5,
    free_us: float = 1_000.0,
    ops: dict[str, tuple[float, int]] | None = None,
    sync: dict[str, int] | None = None,
    rank_compute_skew: dict[int, float] | None = None,
    alpha_us: float = ALPHA_US,
    beta: float = BETA_US_PER_BYTE,
    noise: float = 0.0,
    seed: int = 0,
) -> dict:
    """An Analysis-JSON dict whose collectives follow ``alpha + beta * bytes`` exactly (plus noise).

    Each layer holds ``params_per_layer`` tensors of varied size; ``per_param`` issues one all-gather
    (forward and backward re-gather) and one reduce-scatter per tensor, otherwise one per layer (FSDP2).
    Comm time is the sum of the call durations; exposed comm = comm * (1 - overlap_ratio).
    """
    rng = np.random.default_rng(seed)
    sizes = np.array([4096 * (1 + (i * 7) % 13) * 64 for i in range(params_per_layer)], dtype=float)
    ranks = []
    for rank in range(n_ranks):
        rows = []
        t = 0.0
        for kind, passes in (("all_gather", 2), ("reduce_scatter", 1)):
            for _ in range(passes):
                for _layer in range(layers):
                    calls = sizes if per_param else np.array([sizes.sum()])
                    for nbytes in calls:
                        dur = (alpha_us + beta * nbytes) * (1 + noise * rng.standard_normal())
                        rows.append((kind, nbytes, t * 1e3, (t + dur) * 1e3))
                        t += dur
        events = pd.DataFrame(rows, columns=["type", "bytes", "start_ns", "end_ns"])
        dur_us = (events["end_ns"] - events["start_ns"]) / 1e3
        collectives = {
            kind: {
                "count": int((events["type"] == kind).sum()),
                "bytes": int(events.loc[events["type"] == kind, "bytes"].sum()),
                "time_us": float(dur_us[events["type"] == kind].sum()),
                "median_bytes": None,
                "bandwidth_gbps": None,
            }
            for kind in ("all_gather", "reduce_scatter")
        }
        comm = float(dur_us.sum())
        compute = compute_us * (1 + (rank_compute_skew or {}).get(rank, 0.0))
        overlapped = comm * overlap_ratio
        exposed = comm - overlapped
        op_rows = [
            {"op_type": k, "count": c, "total_us": us, "mean_us": us / c if c else None}
            for k, (us, c) in (ops or {"MatMul": (compute_us * 0.6, 100)}).items()
        ]
        ranks.append(
            {
                "rank": rank,
                "step": 3,
                "step_time_us": compute + exposed + free_us,
                "overlap_ratio": overlap_ratio,
                "compute_us": compute,
                "comm_us": comm,
                "overlapped_us": overlapped,
                "exposed_comm_us": exposed,
                "free_us": free_us,
                "kernel_time_us": compute + comm,
                "collectives": collectives,
                "ops": op_rows,
                "sync": {
                    "barrier": 0,
                    "launch_ffts": 0,
                    "device_synchronize": 0,
                    "stream_synchronize": 0,
                    "event_synchronize": 0,
                    "kernel_launch": 0,
                    **(sync or {}),
                },
                "steps": [],
                "collective_events": events,
            }
        )
    return {"schema_version": 1, "sources": ["synthetic"], "format": "kineto", "warnings": [], "ranks": ranks}


def run_manifest(labels=("torch", "hyper"), rounds=3, optimizer="sgd", device_name="cpu"):
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch,torch:prefetch=1", "optimizer": optimizer, "rounds": rounds}
    ).to_dict()
    for arm, label in zip(cfg["arms"], labels, strict=True):
        arm["label"] = label
    return {
        "config": cfg,
        "arms": cfg["arms"],
        "order": interleaved_order(list(labels), rounds, "alternate", 0),
        "environment": {"world_size": 2, "device_name": device_name},
    }


def step_records(label, round_, times, losses=None, warmup=1):
    out = []
    for i, t in enumerate([999.0] * warmup + list(times)):
        out.append(
            {
                "arm": label,
                "round": round_,
                "step": i,
                "kind": "warmup" if i < warmup else "timed",
                "time_ms": t,
                "loss": (losses or [5.0 - 0.1 * k for k in range(20)])[i],
                "grad_norm": 1.0,
                "tokens": 512,
                "mem_allocated_bytes": None,
                "mem_reserved_bytes": None,
                "world_size": 2,
            }
        )
    return out


def ab_run(
    tmp_path: Path,
    arms: str,
    *extra: str,
    nproc: int = 2,
    timeout: float = 400,
    env=None,
    command: str = "ab",
):
    """One ``ab`` (or ``command``) run of ``arms`` (1 round of STEPS steps each, unprofiled, final
    parameters dumped); returns (run dir, steps by arm)."""
    from reference import LR, SEQ, STEPS

    proc = run_cli(
        command,
        "--arms",
        arms,
        "--nproc",
        str(nproc),
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--steps",
        str(STEPS),
        "--seq-len",
        str(SEQ),
        "--lr",
        str(LR),
        "--count-collectives",
        "--dump-params",
        "--no-report",
        "--no-profile",
        "--out",
        str(tmp_path),
        "--name",
        "ab",
        "--master-port",
        str(free_port()),
        *extra,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = tmp_path.glob("ab_*")
    by_arm: dict[str, list[dict]] = {}
    for line in (run_dir / "steps.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        by_arm.setdefault(rec["arm"], []).append(rec)
    return run_dir, by_arm


def assert_matches_reference(run_dir: Path, steps: list[dict], arm: str, rows: int) -> None:
    import torch

    from reference import reference_training

    ref_losses, ref_params = reference_training(rows)
    assert [s["loss"] for s in steps] == pytest.approx(ref_losses, abs=1e-6), arm
    params = torch.load(run_dir / "launches" / arm / "round0" / "final_params.pt")
    assert params.keys() == ref_params.keys(), arm
    worst = max((params[n] - ref_params[n]).abs().max().item() for n in params)
    assert worst <= 1e-6, f"{arm}: max |p - p_ref| = {worst}"


def called_parameter_owners() -> tuple[Any, list[Any]]:
    """(the tiny model, its modules that own parameters and whose forward runs), found with
    forward-pre-hooks on one unsharded single-process forward."""
    import torch

    from fsdpbench.config import preset_tiny
    from fsdpbench.model import build_model, init_full_tensor
    from fsdpbench.run.tokens import global_batch
    from reference import SEQ

    cfg = preset_tiny()
    model = build_model(cfg, device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_full_tensor(name, tuple(p.shape), 0))
    called: set[int] = set()
    for module in model.modules():
        module.register_forward_pre_hook(lambda m, args: called.add(id(m)))
    ids = global_batch(0, 0, 1, SEQ, cfg.vocab_size)
    model(ids, labels=ids)
    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    return model, [m for m in owners if id(m) in called]


def stored_analysis(analysis: dict, events: bool = True) -> dict:
    """``analysis`` (``synthetic_analysis``'s dict, changed in place) as analysis.json keeps it: each
    rank's collective events as columns, or with ``events`` False left out (as it was before)."""
    for r in analysis["ranks"]:
        frame = r.pop("collective_events")
        if events:
            r["collective_events"] = {c: frame[c].tolist() for c in frame.columns}
    return analysis


def hand_built_run(tmp_path, labels: list[str], events: bool = True):
    """A run folder with a manifest, placeholder profiles and a cached analysis.json (no real traces):
    each arm ``synthetic_analysis(per_param=i > 0, seed=i)``, its collective events kept as columns (as
    ``ensure_analysis`` writes them) or, with ``events`` False, left out (as analysis.json was before)."""
    arms = [{"label": lab, "backend": "torch", "prefetch": 0, "comm_fusion": False} for lab in labels]
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "arms": arms,
                "environment": {"world_size": 2},
                "config": {"model": {"num_hidden_layers": 6}},
            }
        )
    )
    for lab in labels:
        (tmp_path / "profiles" / lab).mkdir(parents=True)
        (tmp_path / "profiles" / lab / "placeholder.txt").write_text("not a trace")
    cached = {
        lab: stored_analysis(synthetic_analysis(per_param=i > 0, seed=i), events)
        for i, lab in enumerate(labels)
    }
    (tmp_path / "analysis.json").write_bytes(orjson.dumps(cached))
    return tmp_path


TINY_SWEEP = """
[sweep]
name = "tiny"

[base]
arms = ["torch", "torch:prefetch=1:label=torch-pf"]
preset = "tiny"
nproc = 2
device = "cpu"
warmup = 1
steps = 1
report = false

[[experiment]]
name = "a"
seq_len = [64, 128]
layers = 2
rounds = 1

[[experiment]]
name = "b"
seq_len = 64
layers = [2, 4]
rounds = 2
"""


def write_sweep_file(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class FakeRunAb:
    """Stands in for ``launcher.run_ab``: writes a run folder per DATA.md without launching anything.

    Cells named in ``crash_once`` write a partial run and raise ``LaunchError`` on their first call.
    """

    def __init__(self, crash_once: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, Path | None]] = []
        self.crash_once = set(crash_once)

    def __call__(self, cfg, *, resume=None, console=None, command=None) -> Path:
        self.calls.append((cfg.name, resume))
        if resume is None:
            run = Path(cfg.out) / f"{cfg.name}_{time.strftime('%Y%m%d_%H%M%S')}"
            run.mkdir(parents=True)
            (run / "manifest.json").write_bytes(
                orjson.dumps(
                    {"name": cfg.name, "config": cfg.to_dict(), "arms": [a.options() for a in cfg.arms]}
                )
            )
        else:
            run = resume
        labels = [a.label for a in cfg.arms]
        crash = cfg.name in self.crash_once
        ratio = 1.0 + 0.01 * cfg.seq_len / 64
        summary = {
            "arms": {
                a: {"status": "ok", "median_ms": 100.0 * (ratio if i else 1.0)} for i, a in enumerate(labels)
            },
            "comparisons": []
            if crash
            else [
                {
                    "base": labels[0],
                    "test": labels[1],
                    "ratio": ratio,
                    "ci95": [ratio - 0.01, ratio + 0.01],
                    "verdict": f"ratio {ratio:.2f}",
                }
            ],
            "parity": {"valid": True},
            "missing": [{"arm": labels[1], "round": 0, "why": "launch failed (rc 1)"}] if crash else [],
        }
        (run / "summary.json").write_bytes(orjson.dumps(summary))
        if crash:
            self.crash_once.discard(cfg.name)
            raise LaunchError(f"{cfg.name}: rank 1 crashed")
        return run


ARMS = ["torch", "hyper"]


def hand_rank(rank: int, overlap: float, ag: int, rs: int, slice_us: float) -> dict:
    step_us, comm_us, compute_us = 250_000.0, 90_000.0, 180_000.0
    overlapped = overlap * comm_us
    free = step_us - (compute_us + comm_us - overlapped)
    return {
        "rank": rank,
        "step": 3,
        "step_time_us": step_us,
        "overlap_ratio": overlap,
        "compute_us": compute_us,
        "comm_us": comm_us,
        "overlapped_us": overlapped,
        "exposed_comm_us": comm_us - overlapped,
        "free_us": free,
        "kernel_time_us": 200_000.0,
        "collectives": {
            "all_gather": {
                "count": ag,
                "bytes": 4_000_000,
                "time_us": 50_000.0,
                "median_bytes": 4_000_000 // ag,
                "bandwidth_gbps": 0.08,
            },
            "reduce_scatter": {
                "count": rs,
                "bytes": 2_000_000,
                "time_us": 40_000.0,
                "median_bytes": 2_000_000 // rs,
                "bandwidth_gbps": 0.05,
            },
        },
        "ops": [
            {"op_type": "MatMul", "count": 40, "total_us": 120_000.0, "mean_us": 3000.0},
            {"op_type": "Slice", "count": 30, "total_us": slice_us, "mean_us": slice_us / 30},
            {"op_type": "Cast", "count": 12, "total_us": 8_000.0, "mean_us": 666.0},
        ],
        "sync": {
            "barrier": ag // 2,
            "launch_ffts": 0,
            "device_synchronize": 1,
            "stream_synchronize": 0,
            "event_synchronize": 0,
            "kernel_launch": 300,
        },
        "steps": [],
    }


def make_run(
    root: Path,
    *,
    profiled: bool = True,
    parity_valid: bool = True,
    crashed_arm: str | None = None,
    with_summary: bool = True,
) -> Path:
    """A run folder of a 2-arm, 3-round A/B on 2 ranks, per docs/DATA.md."""
    run = root / "ab_20261202_120000"
    run.mkdir(parents=True)
    rounds = 3
    order = [{"round": r, "arm": a} for r in range(rounds) for a in (ARMS if r % 2 == 0 else ARMS[::-1])]
    manifest = {
        "schema_version": 1,
        "name": "ab",
        "created": "2026-12-02T12:00:00",
        "command": ["fsdpbench", "ab", "--arms", "torch,hyper", "--rounds", "3", "--profile"],
        "config": {
            "name": "ab",
            "preset": "tiny",
            "seq_len": 128,
            "rounds": rounds,
            "warmup": 1,
            "steps": 4,
            "nproc": 2,
            "device": "cpu",
            "profile": profiled,
            "model": {"hidden_size": 64, "num_hidden_layers": 4, "num_experts": 8},
        },
        "arms": [
            {
                "label": a,
                "backend": a,
                "prefetch": 0,
                "reshard_after_forward": True,
                "mesh": "",
                "param_dtype": "float32",
                "reduce_dtype": "float32",
                "comm_fusion": False,
                "ac": "off",
            }
            for a in ARMS
        ],
        "order": order,
        "environment": {
            "python": "3.11.7",
            "torch": "2.13.0+cpu",
            "torch_npu": None,
            "cann": None,
            "hyper_parallel": {"version": "0.1.0", "commit": "fdd0a808"},
            "host": "box",
            "device_type": "cpu",
            "device_name": "cpu",
            "device_count": 1,
            "world_size": 2,
            "nnodes": 1,
            "nproc_per_node": 2,
            "process_group_backend": "gloo",
        },
        "launches": [
            {"arm": o["arm"], "round": o["round"], "kind": "timed", "rc": 0, "wall_s": 7.1} for o in order
        ],
    }
    rng = np.random.default_rng(1)
    lines = []
    for o in order:
        base = 210.0 if o["arm"] == "torch" else 250.0
        for step in range(5):
            lines.append(
                {
                    "arm": o["arm"],
                    "round": o["round"],
                    "step": step,
                    "kind": "warmup" if step == 0 else "timed",
                    "time_ms": base * (1.5 if step == 0 else 1.0) + float(rng.normal(0, 3)),
                    "loss": 6.2,
                    "grad_norm": 1.0,
                    "tokens": 256,
                    "mem_allocated_bytes": None,
                    "mem_reserved_bytes": None,
                    "world_size": 2,
                }
            )
        launch = run / "launches" / o["arm"] / f"round{o['round']}"
        launch.mkdir(parents=True)
        failed = crashed_arm == o["arm"] and o["round"] == 2
        (launch / "status.json").write_bytes(
            orjson.dumps(
                {
                    "arm": o["arm"],
                    "round": o["round"],
                    "kind": "timed",
                    "rc": 1 if failed else 0,
                    "started": "",
                    "ended": "",
                    "wall_s": 7.0,
                    "error": "rank 1 crashed: RuntimeError: boom" if failed else None,
                }
            )
        )
    (run / "manifest.json").write_bytes(orjson.dumps(manifest))
    (run / "steps.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    if with_summary:
        summary = {
            "schema_version": 1,
            "arms": {
                a: {
                    "status": "failed" if a == crashed_arm else "ok",
                    "rounds": [{"round": r, "median_ms": m, "n_steps": 4} for r in range(rounds)],
                    "median_ms": m,
                    "p10_ms": m - 4,
                    "p90_ms": m + 4,
                    "tokens_per_s_per_device": 1000 / m,
                    "tflops_per_device": 0.01,
                    "mfu": None,
                    "peak_mem_allocated_bytes": None,
                    "peak_mem_reserved_bytes": None,
                }
                for a, m in (("torch", 210.0), ("hyper", 250.0))
            },
            "comparisons": [
                {
                    "base": "torch",
                    "test": "hyper",
                    "ratio": 250 / 210,
                    "ci95": [1.17, 1.21],
                    "time_change_pct": (250 / 210 - 1) * 100,
                    "significant": True,
                    "rounds_needed_1pct": 5,
                    "verdict": "hyper is 1.19× slower than torch (+19.0%; 95% CI 1.17×–1.21×)",
                }
            ],
            "verdict": "hyper is 1.19× slower than torch (+19.0%; 95% CI 1.17×–1.21×)",
            "parity": {
                "valid": parity_valid,
                "mode": "exact",
                "tolerance": 1e-6,
                "steps_compared": 4,
                "max_abs_diff": 0.0 if parity_valid else 0.31,
                "max_rel_diff": 0.0 if parity_valid else 0.05,
                "reason": None if parity_valid else "step 0 loss 6.20 vs 6.51",
            },
            "missing": [{"arm": crashed_arm, "round": 2, "why": "launch failed (rc 1)"}]
            if crashed_arm
            else [],
            "profiles": {a: f"profiles/{a}" for a in ARMS} if profiled else {},
        }
        (run / "summary.json").write_bytes(orjson.dumps(summary))
    if profiled:
        for a in ARMS:
            for k in range(2):
                d = run / "profiles" / a / f"rank{k}"
                d.mkdir(parents=True)
                (d / "trace.json").write_text("{}")
        analysis = {
            "torch": {
                "schema_version": 1,
                "sources": ["profiles/torch"],
                "format": "kineto",
                "warnings": [],
                "ranks": [hand_rank(k, 0.488, 12, 7, 100_000.0) for k in range(2)],
            },
            "hyper": {
                "schema_version": 1,
                "sources": ["profiles/hyper"],
                "format": "kineto",
                "warnings": [],
                "ranks": [hand_rank(k, 0.059, 124, 57, 36_000.0) for k in range(2)],
            },
        }
        diff = {
            "schema_version": 1,
            "base": "torch",
            "test": "hyper",
            "warnings": [],
            "side_by_side": {},
            "collectives": [
                {
                    "type": "all_gather",
                    "base_count": 12,
                    "test_count": 124,
                    "count_ratio": 10.3,
                    "base_bytes": 4_000_000,
                    "test_bytes": 4_000_000,
                    "bytes_ratio": 1.0,
                }
            ],
            "ops": [
                {
                    "op_type": f"Op{i}",
                    "base_us": 1000.0,
                    "test_us": 1000.0 + d,
                    "delta_us": d,
                    "base_count": 1,
                    "test_count": 1,
                }
                for i, d in enumerate([-64_000.0, 30_000.0, -5_000.0, 2_000.0])
            ],
            "sync": [{"name": "launch_ffts", "base": 59, "test": 365, "delta": 306}],
            "fits": {
                "test": {"all_gather": {"alpha_us": 10.0, "beta_us_per_byte": 1e-4, "r2": 0.98, "n": 124}}
            },
            "findings": [
                {
                    "id": "fragmentation",
                    "severity": "high",
                    "title": "hyper's collectives are 10.3× more fragmented",
                    "evidence": "all_gather 124 vs 12 (10.3×), same bytes",
                    "cause": "per-parameter collectives",
                    "action": "bucket per module",
                    "estimate": {
                        "label": "estimate",
                        "exposed_comm_delta_us": -200_000.0,
                        "step_time_delta_us": -150_000.0,
                    },
                },
                {  # as diff.json files before the typed Estimate wrote it: explicit nulls
                    "id": "prefetch_change",
                    "severity": "info",
                    "title": "Prefetch=1 exposes 3.0 ms less communication than prefetch=0",
                    "evidence": "prefetch=0 (torch) vs prefetch=1 (hyper)",
                    "cause": "explicit prefetch",
                    "action": "keep prefetch=1",
                    "estimate": {
                        "label": "measured",
                        "exposed_comm_delta_us": -3000.0,
                        "step_time_delta_us": None,
                    },
                },
            ],
        }
        # the analysis and diff are newer than the profiles, so write_report reuses them
        os.utime(run / "profiles", None)
        (run / "analysis.json").write_bytes(orjson.dumps(analysis))
        (run / "diff.json").write_bytes(orjson.dumps(diff))
        (run / "diff.md").write_text("# diff\n")
    return run


class _Inspector(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.external: list[str] = []
        self.figures: list[str] = []
        self.banners: list[str] = []
        self._in_banner = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        for key in ("src", "href", "xlink:href", "data", "action", "poster"):
            value = (a.get(key) or "").strip().lower()
            if re.match(r"^(https?:|//|file:|ftp:)", value):
                self.external.append(f"<{tag} {key}={value}>")
        if tag == "script" and "src" in a:
            self.external.append("<script src>")
        if tag == "link" and "href" in a:
            self.external.append("<link href>")
        if tag == "figure":
            self.figures.append(a.get("id", ""))
        if tag == "div" and "banner" in (a.get("class") or ""):
            self._in_banner = True
            self.banners.append(a.get("class", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._in_banner = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def inspect_html(path: Path) -> _Inspector:
    parser = _Inspector()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


def fake_npu_grouped_matmul(calls: list[dict], k_grouped: bool = True):
    """The op's signature as op-plugin documents it (docs/context/torch_npu-npu_grouped_matmul.md @
    4a859cf6, keyword-only after ``weight``); ``k_grouped=False`` refuses group_type=2 as the releases
    whose page lists only -1 and 0 for Atlas A2/A3 do."""
    import torch

    def npu_grouped_matmul(  # noqa: PLR0913 - the real signature
        x,
        weight,
        *,
        bias=None,
        scale=None,
        offset=None,
        antiquant_scale=None,
        antiquant_offset=None,
        per_token_scale=None,
        group_list=None,
        activation_input=None,
        activation_quant_scale=None,
        activation_quant_offset=None,
        split_item=0,
        group_type=None,
        group_list_type=0,
        act_type=0,
        output_dtype=None,
        tuning_config=None,
    ):
        if group_type == 2 and not k_grouped:
            raise RuntimeError("group_type only supports -1 and 0")
        calls.append(
            {
                "group_list": group_list.tolist(),
                "split_item": split_item,
                "group_type": group_type,
                "group_list_type": group_list_type,
                "dtype": group_list.dtype,
                "x_dtype": x[0].dtype,
                "x_shape": tuple(x[0].shape),
                "weight_shape": tuple(weight[0].shape),
            }
        )
        bounds = group_list.tolist() if group_list_type == 0 else torch.cumsum(group_list, 0).tolist()
        starts = [0, *bounds[:-1]]
        (x,), (w,) = x, weight
        if group_type == 0:  # M-grouped: rows of x, one [K, N] weight per group
            return [torch.cat([x[a:b] @ w[e] for e, (a, b) in enumerate(zip(starts, bounds, strict=True))])]
        assert group_type == 2  # K-grouped: x [K, S] and w [S, N] split along S, out [E, K, N]
        return [torch.stack([x[:, a:b] @ w[a:b] for a, b in zip(starts, bounds, strict=True)])]

    return npu_grouped_matmul


FAKE_LAUNCH_FILES = """
import json, pathlib, sys
spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
run_dir, ldir = pathlib.Path(spec["run_dir"]), pathlib.Path(spec["launch_dir"])
for rel, text in json.loads(sys.argv[2]).items():
    path = run_dir / rel.replace("{ldir}", str(ldir.relative_to(run_dir)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
"""
"""A stand-in for torchrun: writes the files given as JSON (``{ldir}`` = the launch folder)."""

FAKE_LAUNCH = (
    FAKE_LAUNCH_FILES
    + """
with open(run_dir / "steps.jsonl", "a") as f:
    for step in range(spec["config"]["profile_step"] + spec["config"].get("profile_steps", 1)):
        f.write(json.dumps({"arm": spec["arm"], "round": spec["round"], "step": step, "kind": "profile",
                            "time_ms": 1.0, "loss": 1.0}) + "\\n")
"""
)


def raw_x_events(path: Path) -> list[dict]:
    """The complete ("X") events of a raw Kineto JSON trace, gzipped or not."""
    raw = path.read_bytes()
    return [
        e
        for e in orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)["traceEvents"]
        if e.get("ph") == "X"
    ]


def raw_ns(e: dict) -> tuple[int, int]:
    """A raw complete event's [start, end) in integer ns."""
    s = round(float(e["ts"]) * 1000)
    return s, s + round(float(e["dur"]) * 1000)


def raw_training_ops(evs: list[dict]) -> list[tuple[int, int]]:
    """[start, end) ns of the training thread's cpu_op operators that count as compute by the tests' own rules:
    not a wrapper (autograd, FSDP hooks, collectives, profiler) and not inside a c10d launch."""
    main = next(e["tid"] for e in evs if e["name"].startswith("ProfilerStep#"))
    wrappers = (
        "autograd::",
        "torch::autograd::",
        "FSDP::",
        "c10d::",
        "_c10d_functional::",
        "c10d_functional::",
    )
    wrappers += ("profiler::", "torch::jit::")
    launches = [
        raw_ns(e) for e in evs if e["tid"] == main and e["name"].startswith(("c10d::", "record_param_comms"))
    ]
    return [
        raw_ns(e)
        for e in evs
        if e["tid"] == main
        and e.get("cat") == "cpu_op"
        and "::" in e["name"]
        and not e["name"].startswith(wrappers)
        and not any(a <= raw_ns(e)[0] and raw_ns(e)[1] <= b for a, b in launches)
    ]


def raw_outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans not nested in another of them, by start."""
    keep, reach = [], -1
    for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
        if s >= reach:
            keep.append((s, e))
        reach = max(reach, e)
    return keep


def raw_cpu_totals(path: Path) -> dict[str, int]:
    """The step's compute, communication and overlapped ns from the raw JSON, by the test's own rules:
    compute = outermost cpu_op operators of the training thread outside c10d launches and wrappers;
    communication = the outermost gloo:* spans; unions by a plain sweep over integer ns."""
    evs = raw_x_events(path)

    ops = raw_training_ops(evs)
    gloo = [raw_ns(e) for e in evs if e["name"].startswith("gloo:")]
    gloo_threads = {e["tid"] for e in evs if e["name"].startswith("gloo:")}

    def union(spans):
        out = []
        for s, e in sorted(spans):
            if e <= s:
                continue
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    comp, comm = union(raw_outermost(ops)), union(gloo)
    over = 0
    for a, b in comp:
        for c, d in comm:
            over += max(0, min(b, d) - max(a, c))
    return {
        "compute": sum(e - s for s, e in comp),
        "comm": sum(e - s for s, e in comm),
        "overlapped": over,
        "collectives": sum(  # the outermost gloo spans of each worker thread
            len(raw_outermost([raw_ns(e) for e in evs if e["tid"] == tid and e["name"].startswith("gloo:")]))
            for tid in gloo_threads
        ),
    }


# ------------------------------------------------------------------ a stand-in torch_npu (its FSDP2 patches)

NPU_STAND_IN: dict[str, str] = {
    "torch_npu/__init__.py": """
        import os
        from torch_npu.distributed.fsdp._add_fsdp_patch import _apply_fsdp_patch
        _apply_fsdp_patch()  # as torch_npu/_init/patches/api_patches.py does on import

        if os.environ.get("STANDIN_PREFETCH_LOG"):  # test instrumentation, not torch_npu: FSDP2's own
            # prefetch call, one line per prefetch ("forward layers.1"), one file per rank
            from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

            _prefetch = FSDPParamGroup._prefetch_unshard

            def _logged_prefetch(target, pass_type):
                path = os.path.join(os.environ["STANDIN_PREFETCH_LOG"], f"rank{os.environ.get('RANK', 0)}.txt")
                with open(path, "a") as f:
                    f.write(f"{pass_type} {target._module_fqn}\\n")
                return _prefetch(target, pass_type)

            FSDPParamGroup._prefetch_unshard = staticmethod(_logged_prefetch)
    """,
    "torch_npu/distributed/__init__.py": "",
    "torch_npu/distributed/fsdp/__init__.py": """
        from ._add_fsdp_patch import fully_shard
        fully_shard.__module__ = __name__
        __all__ = ["fully_shard"]
    """,
    # The wrappers of torch_npu/distributed/fsdp/_add_fsdp_patch.py (github.com/Ascend/pytorch v2.9.0-26.1.0,
    # 323a8176; line numbers below) on torch 2.13's FSDP2: the logic as there, names as torch 2.13 has them
    # (FSDPState._fsdp_param_groups, a list, where torch_npu reads _fsdp_param_group). The import patch's
    # NPU stream wait and non-blocking copies (lines 68-159) need an NPU and stay torch's own.
    "torch_npu/distributed/fsdp/_add_fsdp_patch.py": """
        import operator
        from collections import defaultdict
        from functools import reduce

        import torch
        import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives
        import torch.distributed.fsdp._fully_shard._fsdp_param_group as param_group_module
        from torch.distributed.fsdp import fully_shard as torch_fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

        _FSDP_ENHANCE_PATCH_APPLIED = False


        class FSDPMemCache:  # lines 20-62
            def __init__(self):
                self.buffers = defaultdict(list)
                self.used = defaultdict(list)

            def allocate(self, size, *, dtype, device):
                buffers, used = self.buffers[dtype], self.used[dtype]
                for i, buffer in enumerate(buffers):
                    if not used[i]:
                        needed = reduce(operator.mul, size)
                        if buffer.numel() < needed:
                            buffer = torch.empty(size, dtype=dtype, device=device)
                            buffers[i] = buffer
                        used[i] = True
                        return buffer[:needed].view(size)
                buffer = torch.empty(size, dtype=dtype, device=device)
                buffers.append(buffer)
                used.append(True)
                return buffer

            def free(self, tensor):
                ptr = tensor.untyped_storage().data_ptr()
                for i, buffer in enumerate(self.buffers[tensor.dtype]):
                    if buffer.untyped_storage().data_ptr() == ptr:
                        self.used[tensor.dtype][i] = False
                        return


        _fsdp_mem_cache = FSDPMemCache()
        _original_finalize = FSDPParamGroup.finalize_backward


        def _patched_finalize_backward(self):  # lines 68-84 (there: an NPU stream wait)
            return _original_finalize(self)


        def _patched_fsdp_param_group_init(original):  # lines 162-170
            def wrapper(self, *args, **kwargs):
                original(self, *args, **kwargs)
                if self.modules and self.fsdp_params:
                    use_mem_cache = getattr(self.modules[0], "_use_mem_cache", False)
                    self._all_gather_comm._use_mem_cache = use_mem_cache
                    self._reduce_scatter_comm._use_mem_cache = use_mem_cache
            return wrapper


        def _patched_all_gather_allocate(self, size, *, dtype, device):  # lines 173-182
            if getattr(self, "_use_mem_cache", False):
                return _fsdp_mem_cache.allocate(size, dtype=dtype, device=device)
            return torch.empty(*size, dtype=dtype, device=device)


        def _patched_wait_all_gather_streams_on_event(original):  # lines 185-196
            def wrapper(self, event):
                original(self, event)
                if self._training_state == TrainingState.FORWARD and self.comm_ctx.all_gather_state:
                    _fsdp_mem_cache.free(self.comm_ctx.all_gather_state.all_gather_result.all_gather_output)
                elif self._all_gather_result:
                    _fsdp_mem_cache.free(self._all_gather_result.all_gather_output)
            return wrapper


        def _patched_reduce_scatter_allocate(self, size, *, dtype, device):  # lines 199-210
            if getattr(self, "_use_mem_cache", False) and not getattr(self, "_mem_cache_flag", False):
                self._mem_cache_flag = True
                return _fsdp_mem_cache.allocate(size, dtype=dtype, device=device)
            return torch.empty(*size, dtype=dtype, device=device)


        def _patched_foreach_reduce(original):  # lines 213-221
            def wrapper(*args, **kwargs):
                out = original(*args, **kwargs)
                _fsdp_mem_cache.free(out[0])
                kwargs.get("reduce_scatter_comm", args[4])._mem_cache_flag = False
                return out
            return wrapper


        def _patched_post_forward(original):  # lines 224-233
            def wrapper(self, module, args, out):
                if getattr(self, "_skip_post_forward", False):
                    return out
                out = original(self, module, args, out)
                self._skip_post_forward = True
                return out
            return wrapper


        def _patched_post_backward(original):  # lines 236-241 (torch 2.13 passes *unused)
            def wrapper(self, *unused):
                self._skip_post_forward = False
                original(self, *unused)
            return wrapper


        def move_attr(src_obj, src_attr, dst_obj, dst_attr):  # lines 244-251
            value = getattr(src_obj, src_attr, None)
            setattr(dst_obj, dst_attr, value)
            if type(value) in (list, tuple, set, dict):
                setattr(src_obj, src_attr, type(value)())
            else:
                setattr(src_obj, src_attr, None)


        def _patched_fsdp_state_post_forward(original):  # lines 254-274
            def wrapper(self, module, args, out):
                if not hasattr(self, "_backup_forward_fetch"):
                    self._backup_forward_fetch = None
                groups = self._fsdp_param_groups  # torch_npu: self._fsdp_param_group
                if hasattr(module, "skip_custom_post_forward") or not groups:
                    return original(self, module, args, out)
                skip_post_forward = getattr(groups[0], "_skip_post_forward", False)
                if skip_post_forward or self._training_state == TrainingState.PRE_BACKWARD:
                    if self._backup_forward_fetch is not None:
                        move_attr(self, "_backup_forward_fetch", self, "_states_to_forward_prefetch")
                    return original(self, module, args, out)
                move_attr(self, "_states_to_forward_prefetch", self, "_backup_forward_fetch")
                return original(self, module, args, out)
            return wrapper


        def _apply_fsdp_patch():  # lines 277-283
            FSDPParamGroup.finalize_backward = _patched_finalize_backward


        def _apply_fsdp_enhance_patch():  # lines 286-314
            global _FSDP_ENHANCE_PATCH_APPLIED
            if _FSDP_ENHANCE_PATCH_APPLIED:
                return
            FSDPParamGroup.__init__ = _patched_fsdp_param_group_init(FSDPParamGroup.__init__)
            FSDPParamGroup._wait_all_gather_streams_on_event = _patched_wait_all_gather_streams_on_event(
                FSDPParamGroup._wait_all_gather_streams_on_event
            )
            for module in (collectives, param_group_module):
                module.DefaultAllGather.allocate = _patched_all_gather_allocate
                module.DefaultReduceScatter.allocate = _patched_reduce_scatter_allocate
            original_foreach_reduce = collectives.foreach_reduce
            collectives.foreach_reduce = _patched_foreach_reduce(original_foreach_reduce)
            param_group_module.foreach_reduce = _patched_foreach_reduce(original_foreach_reduce)
            FSDPState._post_forward = _patched_fsdp_state_post_forward(FSDPState._post_forward)
            FSDPParamGroup.post_forward = _patched_post_forward(FSDPParamGroup.post_forward)
            FSDPParamGroup.post_backward = _patched_post_backward(FSDPParamGroup.post_backward)
            _FSDP_ENHANCE_PATCH_APPLIED = True


        def fully_shard(*args, **kwargs):  # lines 317-319
            _apply_fsdp_enhance_patch()
            return torch_fully_shard(*args, **kwargs)
    """,
}
"""A ``torch_npu`` package for CPU tests: the structure of torch_npu's and the logic of its FSDP2 wrappers
(forward-prefetch backup/restore, ``skip_custom_post_forward``, ``_use_mem_cache``), replayed on torch
2.13; with ``STANDIN_PREFETCH_LOG`` set, every FSDP2 prefetch is logged per rank."""


def write_npu_stand_in(root: Path) -> Path:
    """Write ``NPU_STAND_IN`` under ``root`` (put it first on PYTHONPATH); returns ``root``."""
    import textwrap

    for rel, text in NPU_STAND_IN.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
"""Headless Chromium (Debian package ``chromium``), or None where it is not installed."""


def headless_chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on ``url`` with a throw-away profile under ``tmp_path`` and no background network,
    doing ``args`` (``--screenshot=FILE``, ``--window-size=W,H``, ``--dump-dom``)."""
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def replay_of(paths: list[Path], *edits: str) -> dict:
    """``analyze``'s ``replay`` object of ``paths`` in this process, with ``edits`` as what-ifs (it must replay)."""
    from fsdpbench.analysis import analyze

    res = analyze([str(p) for p in paths], workers=1, what_if=list(edits))
    assert res.replay is not None, res.replay_note
    return res.replay


def cuda_event(name: str, ts: float, dur: float, cat: str, tid: int = 100, pid: int = 1, **args: int) -> dict:
    """A Kineto complete event at ``ts`` µs after 1,000 µs (a hand-built trace's T0); ``args`` only when given."""
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": 1_000.0 + ts, "dur": dur}
    return {**e, "args": args} if args else e


def write_cuda_rank(folder: Path, events: list[dict]) -> Path:
    """``folder``/rank0.json.gz: a one-rank NCCL job's Kineto trace of ``events`` on a thread named "python3"
    (tid 100, pid 1); returns ``folder``."""
    meta = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}}
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
           "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [meta, *events]}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "rank0.json.gz", "wt") as fh:
        json.dump(doc, fh)
    return folder

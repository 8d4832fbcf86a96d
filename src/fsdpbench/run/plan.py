"""The run's plan: the interleaved launch order, each launch's torchrun command and ports, the plan's
fingerprint (the same on every node), and the verdict's group-sequential plan of a ``--rounds auto`` run.
Torch-free; split out of :mod:`fsdpbench.run.launcher`, which runs the plan."""

from __future__ import annotations

import hashlib
import random
import socket
import sys
from pathlib import Path
from typing import Any

import orjson

from fsdpbench.config import RunConfig
from fsdpbench.config.run import AUTO_MIN_ROUNDS
from fsdpbench.errors import ConfigError
from fsdpbench.results import run_folder


def interleaved_order(labels: list[str], rounds: int, order: str, seed: int) -> list[dict[str, Any]]:
    """The launch order, counterbalanced so that every even number of rounds is balanced (each arm runs
    before each other arm in half of them): ``alternate`` gives A B, B A, A B, … (ABBA blocks of launches);
    ``shuffle`` a seeded permutation in each even round and its reverse in the round after."""
    rng = random.Random(seed)
    out = []
    seq = list(labels)
    for r in range(rounds):
        if order == "shuffle":
            if r % 2 == 0:
                seq = list(labels)
                rng.shuffle(seq)
            else:
                seq = list(reversed(seq))
        else:
            seq = list(labels) if r % 2 == 0 else list(reversed(labels))
        out.extend({"round": r, "arm": a} for a in seq)
    return out


def free_port() -> int:
    """A TCP port that is free right now on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(
    cfg: RunConfig,
    spec_path: Path,
    log_dir: Path,
    port: int | None = None,
    python: str | None = None,
    *,
    module: str = "fsdpbench.run.worker",
    nproc: int | None = None,
) -> list[str]:
    """``python -m torch.distributed.run ... -m MODULE SPEC`` for one launch, run by ``python`` (the
    arm's interpreter; the launcher's own when None).

    Multi-node runs (or any run given ``--rdzv-endpoint``) use static rendezvous on the endpoint's host
    and ``port`` (``plan_ports``: a function of the run's plan, the same on every node); single-node
    runs use loopback on ``--master-port`` or a free port. ``nproc`` overrides the ranks per node (the
    collect step runs one process per node).
    """
    cmd = [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc or cfg.nproc}",
        f"--nnodes={cfg.nnodes}",
        f"--node-rank={cfg.node_rank}",
        "--rdzv-backend=static",
        f"--log-dir={log_dir}",
        "--redirects=3",
        "--max-restarts=0",
    ]
    if cfg.nnodes > 1 or cfg.rdzv_endpoint:
        host, base = rendezvous_address(cfg)
        cmd.append(f"--rdzv-endpoint={host}:{base if port is None else port}")
    else:
        cmd += ["--master-addr=127.0.0.1", f"--master-port={cfg.master_port or free_port()}"]
    return cmd + ["-m", module, str(spec_path)]


def rendezvous_address(cfg: RunConfig) -> tuple[str, int]:
    """Node 0's host and the base port: ``--rdzv-endpoint``'s, its port replaced by ``--master-port``
    when given."""
    host, _, port = cfg.rdzv_endpoint.rpartition(":")
    return host, cfg.master_port or int(port)


def launch_plan(order: list[dict[str, Any]], arms: list[str], profile: bool) -> list[tuple[str, int]]:
    """Every launch of the run, in plan order: the interleaved timed rounds, then, with ``profile`` (a
    separate profile launch per arm, ``--separate-profile``), one profile launch per arm."""
    return [(i["arm"], i["round"]) for i in order] + (
        [(a, run_folder.PROFILE_ROUND) for a in arms] if profile else []
    )


def plan_ports(base: int, plan: list[tuple[str, int]], arm: str, round_: int) -> tuple[int, int]:
    """``(launch port, collect port)`` of one launch: ``base + 1 + 2i`` and ``base + 2 + 2i`` for the
    plan's i-th launch (``base`` itself is the plan step's). Every node derives the same ports from the
    same plan, whatever it ran before, so a rerun or ``--resume`` cannot join the wrong launch."""
    i = plan.index((arm, round_))
    return base + 1 + 2 * i, base + 2 + 2 * i


PLAN_FINGERPRINT_IGNORES = (
    "out",
    "name",
    "node_rank",
    "rdzv_endpoint",
    "master_port",
    "collect_traces",
    "report",
    "timeout",
)
"""Options that may differ between the nodes of one run."""


def plan_fingerprint(manifest: dict[str, Any]) -> str:
    """A digest of what the run launches (config, arms, order), the same on every node of one run."""
    config = {k: v for k, v in manifest["config"].items() if k not in PLAN_FINGERPRINT_IGNORES}
    payload = {"config": config, "arms": manifest["arms"], "order": manifest["order"]}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def verdict_plan(cfg: RunConfig) -> dict[str, Any]:
    """The manifest's ``verdict_plan`` of a ``--rounds auto`` run: the group-sequential test it is judged by
    (boundaries on the paired t for looks 3..``max_rounds``), fixed when the run starts."""
    from fsdpbench.results import sequential

    return {
        "method": f"group-sequential paired t, Wang–Tsiatis shape {sequential.BOUNDARY_SHAPE:g}",
        "first_look": sequential.FIRST_LOOK,
        "max_rounds": cfg.max_rounds,
        "boundaries": [round(c, 4) for c in sequential.boundaries(cfg.max_rounds)],
        "continued_after": None,
    }


def extend_plan(manifest: dict[str, Any], cfg: RunConfig, max_rounds: int, console: Any) -> None:
    """``--resume --max-rounds N`` on a ``--rounds auto`` run: raise its limit to N. Rounds past the
    group-sequential plan (its ``max_rounds``, or the round a finished run had stopped at) are judged by the
    anytime-valid confidence sequence: the plan's boundaries did not foresee them (``verdict_plan``
    ``continued_after``). Changes ``manifest`` and ``cfg`` in place."""
    where = f"--resume with --max-rounds {max_rounds}"
    if not cfg.rounds_auto:
        raise ConfigError(f"{where}: only a --rounds auto run has a round limit to raise")
    if max_rounds < AUTO_MIN_ROUNDS:
        raise ConfigError(f"{where}: must be >= {AUTO_MIN_ROUNDS}")
    if max_rounds == cfg.max_rounds:
        return
    plan = manifest.setdefault("verdict_plan", verdict_plan(cfg))  # a run from before plans were recorded
    state = manifest.get("rounds_auto") or {}
    if state.get("stopped") and max_rounds > int(state.get("rounds") or 0):
        done = int(state.get("rounds") or 0)
        plan["continued_after"] = min(done, int(plan.get("continued_after") or done))
        manifest["rounds_auto"] = {**state, "stopped": False, "reason": None}
    cfg.max_rounds = manifest["config"]["max_rounds"] = max_rounds
    past = min(int(plan["max_rounds"]), int(plan.get("continued_after") or plan["max_rounds"]))
    if max_rounds > past:
        console.print(
            f"--max-rounds {max_rounds}: rounds past {past} are judged by an anytime-valid confidence sequence "
            f"(the group-sequential plan covered {past}); the verdict will say so"
        )

"""``fsdpbench ab``: interleaved A/B benchmark of several arms, with verdict and report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from fsdpbench.config import DEVICES, DTYPES, OPTIMIZER_IMPLS, OPTIMIZERS, ORDERS, RunConfig

# flag dest → RunConfig / shared arm option key (None defaults: only flags given override)
RUN_FLAGS = (
    "arms",
    "rounds",
    "warmup",
    "steps",
    "seq_len",
    "batch_size",
    "layers",
    "preset",
    "nproc",
    "nnodes",
    "node_rank",
    "rdzv_endpoint",
    "master_port",
    "collect_traces",
    "device",
    "profile",
    "separate_profile",
    "profile_step",
    "profile_steps",
    "profile_ranges",
    "profile_ranks",
    "out",
    "name",
    "seed",
    "optimizer",
    "lr",
    "optimizer_impl",
    "device_param_dtype",
    "order",
    "timeout",
    "ascend_parse_timeout",
    "report",
    "parity_steps",
    "count_collectives",
    "dump_params",
    "prefetch",
    "mesh",
    "reshard_after_forward",
    "param_dtype",
    "reduce_dtype",
    "ac",
    "comm_fusion",
    "ci_target",
    "max_rounds",
    "max_time",
)


def _rounds(text: str) -> int | str:
    """``--rounds``: a count, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of rounds or auto, got {text!r}") from None


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_run_arguments(parser: argparse.ArgumentParser, *, several_arms: bool = True) -> None:
    """The options shared by ``run`` and ``ab`` (every default is None: unset flags do not override)."""
    g = parser.add_argument_group("what to run")
    if several_arms:
        g.add_argument(
            "--arms",
            help="comma-separated BACKEND[:key=value...] items (backends torch, fsdp1, deepspeed, "
            "hyper; python=PATH runs an arm in another venv; fwd_prefetch=/bwd_prefetch=, fsdp=upstream|npu, "
            "mem_cache=on|off, kw.NAME=VALUE, env.NAME=VALUE, delay=RANK/UNIT/PHASE/MS (repeatable): docs/arms.md), "
            "e.g. torch,hyper:prefetch=2 (default: "
            "torch,fsdp1, plus deepspeed and hyper when importable)",
        )
    else:
        g.add_argument(
            "--arm", "--arms", dest="arms", help="one BACKEND[:key=value...] item (default: torch)"
        )
    g.add_argument("--config", metavar="FILE.toml", help="a TOML file of options (flags override it)")
    g.add_argument("--preset", help="model preset: tiny (default) or full")
    g.add_argument("--layers", type=int, help="decoder layers (env NUM_LAYERS)")
    g.add_argument("--seq-len", type=int, help="tokens per sequence (env SEQ_LEN; default 256)")
    g.add_argument("--batch-size", type=int, help="sequences per rank per step (default 1)")
    g.add_argument(
        "--rounds",
        type=_rounds,
        help="timed launches per arm (ab default 3, run default 1; the verdict is a paired t CI, none below 3), "
        "or auto: add interleaved rounds until every comparison's group-sequential CI excludes 1 or is "
        "narrower than --ci-target (docs/methodology.md)",
    )
    g.add_argument(
        "--ci-target",
        type=float,
        metavar="PCT",
        help='--rounds auto: stop with "no difference larger than X %%" when a ratio\'s 95%% CI holds 1 and is '
        "narrower than PCT %% of it (default 2; a smaller target means more rounds, not a stricter test)",
    )
    g.add_argument(
        "--max-rounds",
        type=int,
        help="--rounds auto: at most N rounds per arm; the group-sequential boundaries are computed for N "
        "(default 16)",
    )
    g.add_argument(
        "--max-time",
        type=float,
        metavar="SECONDS",
        help="--rounds auto: start no round that would end past SECONDS of launches (default: no limit)",
    )
    g.add_argument("--warmup", type=int, help="untimed steps per launch (default 2)")
    g.add_argument("--steps", type=int, help="timed steps per launch (default 8)")
    g.add_argument(
        "--order",
        choices=ORDERS,
        help="launch order per round (default alternate: A B, B A, ...; shuffle: a seeded permutation, then "
        "its reverse, per pair of rounds)",
    )
    g.add_argument("--seed", type=int, help="seed of weights and tokens (default 0)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, help="sgd (default; exact parity) or adamw")
    g.add_argument("--lr", type=float, help="learning rate (default 1e-3)")
    g.add_argument(
        "--optimizer-impl",
        choices=OPTIMIZER_IMPLS,
        help="foreach (default: batched kernels) or per-parameter, passed explicitly for every arm",
    )
    g.add_argument(
        "--device-param-dtype",
        choices=DTYPES,
        help="param_dtype of arms that set none, on NPU/GPU (default bfloat16; CPU always float32)",
    )
    a = parser.add_argument_group("arm options shared by all arms (an arm's own key=value wins)")
    a.add_argument(
        "--prefetch",
        help="prefetch of both directions: N layers, default (the library's own), none, or 0 = no explicit "
        "prefetch (FSDP2: its implicit 1-unit backward; fsdp1/deepspeed: none) (env PREFETCH)",
    )
    a.add_argument("--mesh", help="N (1D FSDP) or RxS (HSDP replicate x shard), e.g. 2x4")
    a.add_argument("--reshard-after-forward", type=_bool, metavar="BOOL", help="reshard layers after forward")
    a.add_argument("--param-dtype", choices=DTYPES, help="mixed-precision parameter dtype")
    a.add_argument("--reduce-dtype", choices=DTYPES, help="gradient reduction dtype")
    a.add_argument("--ac", choices=("off", "full"), help="activation checkpointing of every decoder layer")
    a.add_argument("--comm-fusion", type=_bool, metavar="BOOL", help="hyper only: fuse collectives")
    d = parser.add_argument_group("launch")
    d.add_argument("--nproc", type=int, help="ranks per node (default 2)")
    d.add_argument("--nnodes", type=int, help="nodes (default 1)")
    d.add_argument("--node-rank", type=int, help="this node's rank (multi-node)")
    d.add_argument(
        "--rdzv-endpoint",
        help="HOST:PORT of node 0 as every node reaches it (required with --nnodes > 1; docs/multi-node.md)",
    )
    d.add_argument(
        "--master-port",
        type=int,
        help="one node: rendezvous port on loopback (default: a free one); several nodes: the base port "
        "on --rdzv-endpoint's host (the run uses it and two ports per launch above it)",
    )
    d.add_argument(
        "--collect-traces",
        action="store_const",
        const=True,
        help="several nodes: send each rank's profiler trace to node 0 as well (by default each node "
        "analyses its own ranks after the profiled step and sends their compact results; the traces stay "
        "on their node, listed in summary.json's collected.left_in_place; docs/multi-node.md)",
    )
    d.add_argument("--device", choices=DEVICES, help="auto (default), cpu (gloo), cuda (nccl) or npu (hccl)")
    d.add_argument(
        "--timeout", type=float, help="seconds per launch before its process group is killed (default 900)"
    )
    d.add_argument(
        "--ascend-parse-timeout",
        type=float,
        help="NPU profile: seconds each rank folder's offline msprof parse may take before it is killed "
        "(default 1800; the folders are parsed in parallel, one process each, up to one per core)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--profile",
        action="store_const",
        const=True,
        help="profile one step per arm after the timed steps of its first round (excluded from the "
        "statistics), analysed in the report (env ENABLE_PROFILER; default: on for ab, off for run)",
    )
    o.add_argument(
        "--separate-profile",
        action="store_const",
        const=True,
        help="profile in one extra launch per arm instead (the launch records step --profile-step)",
    )
    o.add_argument(
        "--no-profile",
        dest="profile",
        action="store_const",
        const=False,
        help="no profiled step: timings only (the report then has no overlap, diff or findings)",
    )
    o.add_argument(
        "--profile-step",
        type=int,
        help="with --separate-profile: the step its launch records, >= 1 (default 3)",
    )
    o.add_argument(
        "--profile-steps",
        type=int,
        metavar="K",
        help="consecutive steps the profiler records (default 1; each but the last then also holds its "
        "bookkeeping): the replay's critical_excess and delay what-ifs take the median and the edit per "
        "step, so that one step's OS stall does not outrank a delay in every step (docs/replay.md)",
    )
    o.add_argument(
        "--profile-ranks",
        metavar="SPEC",
        help="which ranks run the profiler: all (default), ranks and ranges (0-7, 0,8,16) or per-node:K "
        "(the first K ranks of every node); the others train the same steps unprofiled, and the analysis "
        'says "k of N ranks" (env PROFILE_RANKS; docs/multi-node.md)',
    )
    o.add_argument(
        "--no-ranges",
        dest="profile_ranges",
        action="store_const",
        const=False,
        help="leave fsdpbench's own unit/phase and c10d ranges out of the profiled step: units then come "
        "from the implementation's own ranges (FSDP2's), as on a profile from elsewhere (docs/attribution.md)",
    )
    o.add_argument("--out", help="results root folder (default results/)")
    o.add_argument("--name", help="run name, the folder prefix")
    o.add_argument(
        "--resume",
        metavar="DIR",
        help="run only the missing launches of this run folder (its own options; with --rounds auto, "
        "--max-rounds may raise its limit: rounds past the planned ones are judged by an anytime-valid "
        "confidence sequence, docs/methodology.md)",
    )
    o.add_argument(
        "--no-report", dest="report", action="store_const", const=False, help="skip report.md/html"
    )
    dbg = parser.add_argument_group("debugging")
    dbg.add_argument("--parity-steps", type=int, help="leading steps whose losses must agree (default 4)")
    dbg.add_argument(
        "--count-collectives",
        action="store_const",
        const=True,
        help="record collective counts per step in steps.jsonl",
    )
    dbg.add_argument(
        "--dump-params",
        action="store_const",
        const=True,
        help="save each launch's full parameters after its timed steps (final_params.pt)",
    )


def config_from_args(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> RunConfig:
    """Resolve the RunConfig: preset → ``defaults`` → --config TOML → env names → flags."""
    overrides = {k: getattr(args, k, None) for k in RUN_FLAGS}
    if defaults:
        for key, value in defaults.items():
            if overrides.get(key) is None and not _set_elsewhere(args, key):
                overrides[key] = value
    return RunConfig.from_sources(getattr(args, "config", None), env=os.environ, overrides=overrides)


def _set_elsewhere(args: argparse.Namespace, key: str) -> bool:
    """Whether the TOML file or an environment name sets ``key`` (then a command default must not)."""
    from fsdpbench.config import ENV_NAMES, read_toml

    if key in ENV_NAMES.values() and any(os.environ.get(e) for e, k in ENV_NAMES.items() if k == key):
        return True
    if getattr(args, "config", None):
        data = read_toml(args.config)
        return key in data or key in (data.get("arm") or {})
    return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)


def execute(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> int:
    """Shared body of ``run`` and ``ab``: resolve, launch, summarise, report."""
    from rich.console import Console

    from fsdpbench.results import run_folder
    from fsdpbench.run.launcher import run_ab, write_report_safely

    console = Console(stderr=True)
    resume = Path(args.resume) if getattr(args, "resume", None) else None
    if resume is not None and not (resume / run_folder.MANIFEST).exists():
        from fsdpbench.errors import InputError

        raise InputError(f"--resume {resume}: no manifest.json there; give a run folder made by fsdpbench ab")
    cfg = None if resume is not None else config_from_args(args, defaults)
    run_dir = run_ab(
        cfg,  # type: ignore[arg-type]
        resume=resume,
        console=console,
        command=["fsdpbench", *sys.argv[1:]],
        max_rounds=getattr(args, "max_rounds", None) if resume is not None else None,
    )
    report = cfg.report if cfg is not None else getattr(args, "report", None) is not False
    if report:
        write_report_safely(run_dir, console)
    print(run_dir)
    return 0


AB_DEFAULTS: dict[str, Any] = {"profile": True}
"""What ``ab`` sets unless a flag, the --config file or an environment name does: a profiled step per
arm, so that a first ``fsdpbench ab`` (``make demo``) reports the overlap, diff, findings and estimates."""


def main(args: argparse.Namespace) -> int:
    return execute(args, defaults=AB_DEFAULTS)

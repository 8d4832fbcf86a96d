"""``fsdpbench analyze PATH... [--json FILE] [--step N] [--top N] [--workers N] [--units] [--explain UNIT]``: the study's profiler
numbers (overlap, exposed communication, collectives, kernel time by op type, sync/launch counts)
from raw traces, as terminal tables and JSON. Never imports torch. The tables are drawn by the terminal
room (:mod:`fsdpbench.report.terminal`); this module parses the options and calls it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdpbench.errors import ConfigError, InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fsdpbench analyze``."""
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="Kineto trace (.json/.json.gz), rank folder, *_ascend_pt folder, or a folder of ranks",
    )
    parser.add_argument("--json", metavar="FILE", help="write the analysis as JSON to FILE ('-' for stdout)")
    parser.add_argument("--step", type=int, metavar="N", help="only profiler step N (ProfilerStep#N)")
    parser.add_argument(
        "--top",
        type=int,
        default=15,
        metavar="N",
        help="op types shown in the terminal (default 15; the JSON lists them all)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes reading ranks; 2 or more also share the step replay's what-ifs with a forked child "
        "(default: one per CPU)",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="every per-rank column (adds overlapped, free, carried-over and kernel time); in a narrow "
        "terminal the per-rank table is split in parts, each with the rank and step labels",
    )
    parser.add_argument(
        "--units",
        action="store_true",
        help="a unit × phase table per rank: compute, communication, exposed communication and collectives "
        "of each FSDP unit's forward and backward and the optimizer step, from fsdpbench's own ranges in the "
        "profiled step; without them, forward, backward and optimizer alone from the autograd engine's and "
        "the optimizer's ranges (docs/attribution.md)",
    )
    parser.add_argument(
        "--explain",
        metavar="UNIT",
        help="list the (unit, phase) windows UNIT got on each rank (a unit name of the --units table, e.g. "
        "'layers.0' or 'root'): phase, thread, start and end (ms from the rank's first profiler step), the ranges that opened "
        "and closed each window, and the device events placed in it (docs/attribution.md)",
    )
    parser.add_argument(
        "--critical-path",
        action="store_true",
        help="the step replay's cross-rank critical path: per phase the time on it by kind, the top places "
        "(rank, unit, phase, kind) by critical time with their slack, the near-critical places and the "
        "replay's error against the measured step; also writes replay.perfetto.json (Chrome/Perfetto: the "
        "replayed step, the path as flow events, each task's slack in its args) beside the profiles "
        "(docs/replay.md)",
    )
    parser.add_argument(
        "--what-if",
        action="append",
        default=[],
        metavar="EDIT",
        help="replay the step with an edit of its graph (repeatable): scale:<collective type|kind|op regex>:"
        "<factor> (e.g. scale:all_gather:0.5), straggler:remove[:RANK], regroup:<type[,type]|all>:<count>|unit "
        "(merge each unit x phase's collectives, priced by the alpha-beta fit, one launch call each), prefetch:<unit>:<k> (issue its "
        "all-gathers k units earlier), delay:RANK:UNIT:PHASE:MS (negative MS removes a delay); the predicted "
        "step, per phase, and what changed on the critical path; an edit the graph cannot apply is answered "
        "by the closed form, labelled (docs/replay.md)",
    )
    parser.add_argument(
        "--no-replay",
        action="store_true",
        help="leave the step replay out of --json (its key is then null, with replay_note saying so): it costs "
        "about 2 s of CPU for 4 ranks of 60k device events (docs/benchmarks.md); without --json, "
        "--critical-path or --what-if it is not computed anyway",
    )
    parser.add_argument(
        "--ranks-only",
        action="store_true",
        help="only the per-rank part: write each rank's compact result beside its trace "
        "(<trace>.fsdpbench-rank: its metrics, collectives and step-replay graph) and print their sizes; "
        "a later `fsdpbench analyze` of the folder joins the ranks from them without reading a trace. "
        "Hosts of a cluster can run it on disjoint --ranks of a shared folder (docs/multi-node.md)",
    )
    parser.add_argument(
        "--ranks",
        metavar="LIST",
        help="with --ranks-only: the ranks to analyse, e.g. 0-3 or 0,8,16-23 (a rank is the number in "
        "its path: rank3, rank_3), or 'share': this process' contiguous share of them as its launcher numbers "
        "it (torchrun's RANK/WORLD_SIZE, srun's SLURM_PROCID/SLURM_NTASKS, mpirun's; default: all)",
    )
    parser.add_argument(
        "--replay-trace",
        metavar="FILE",
        help="where --critical-path writes the replayed step's Chrome/Perfetto trace (default: "
        "replay.perfetto.json in the folder of the first PATH)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the analysis, print it, optionally write JSON; 0 on success."""
    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.output.result import encode_analysis

    if args.top is not None and args.top < 1:
        raise ConfigError(f"--top must be at least 1 (got {args.top})")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    if args.no_replay and (args.critical_path or args.what_if):
        raise ConfigError(
            "--no-replay cannot be combined with --critical-path or --what-if (they are the replay)"
        )
    if args.ranks and not args.ranks_only:
        raise ConfigError("--ranks selects the ranks of --ranks-only; a plain analyze joins every rank found")
    if args.ranks_only:
        if args.json or args.critical_path or args.what_if or args.units or args.explain:
            raise ConfigError(
                "--ranks-only writes the compact results only: run `fsdpbench analyze` of the folder "
                "afterwards for --json, --units, --explain, --critical-path or --what-if"
            )
        return _ranks_only(args)
    replay = bool(args.json or args.critical_path or args.what_if) and not args.no_replay
    res = analyze(args.paths, step=args.step, workers=args.workers, replay=replay, what_if=args.what_if)
    if args.no_replay:
        res.replay_note = "not computed (--no-replay)"
    data = encode_analysis(res)
    trace_file = _write_replay_trace(res, args) if args.critical_path else None
    if args.json == "-":
        sys.stdout.buffer.write(data + b"\n")
        return 0
    from fsdpbench.report.terminal.analyze import render_analysis

    render_analysis(res, top=args.top, wide=args.wide)
    if res.compact_ranks:
        from rich.console import Console

        Console().print(
            f"joined {res.compact_ranks} of {len(res.ranks)} ranks from their compact results "
            "(*.fsdpbench-rank): no trace of theirs was read"
        )
    if args.units or args.explain:
        from rich.console import Console

        from fsdpbench.report.terminal.units import render_explain, render_units

        if args.units:
            render_units(res, Console())
        if args.explain:
            render_explain(res, args.explain, Console(), args.step)
    if args.critical_path or args.what_if:
        from rich.console import Console

        from fsdpbench.report.terminal.replay import render_replay

        render_replay(res, Console(), critical=args.critical_path, trace_file=trace_file)
    if args.json:
        out = Path(args.json)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data + b"\n")
        except OSError as exc:
            raise InputError(f"{out}: cannot write the JSON ({exc.strerror or exc})") from None
    return 0


def _ranks_only(args: argparse.Namespace) -> int:
    """``--ranks-only``: write the selected ranks' compact results, one line each; 1 if any failed."""
    from rich.console import Console

    from fsdpbench.analysis.ranks_only import analyze_ranks
    from fsdpbench.fmt import fmt_bytes, fmt_pct

    con = Console(highlight=False)
    done = analyze_ranks(args.paths, ranks=args.ranks, step=args.step, workers=args.workers)
    failed = [w for w in done if w.error]
    for w in done:
        for warning in w.warnings:
            con.print(f"warning: {warning}", markup=False)
        if w.error:
            con.print(f"rank {w.rank}: not analysed: {w.error}", markup=False)
            continue
        share = w.result_bytes / w.trace_bytes if w.trace_bytes else None
        con.print(
            f"rank {w.rank}: {Path(w.trace).name} ({fmt_bytes(w.trace_bytes)}) -> "
            f"{Path(w.trace).name}.fsdpbench-rank ({fmt_bytes(w.result_bytes)}, {fmt_pct(share)} of the trace)",
            markup=False,
        )
    ok = [w for w in done if not w.error]
    if ok:
        total_t = sum(w.trace_bytes or 0 for w in ok)
        total_r = sum(w.result_bytes or 0 for w in ok)
        con.print(
            f"{len(ok)} rank(s) analysed: compact results {fmt_bytes(total_r)} for {fmt_bytes(total_t)} of "
            f"traces; join them with `fsdpbench analyze` of the folder",
            markup=False,
        )
    return 1 if failed else 0


def _write_replay_trace(res, args: argparse.Namespace) -> Path | None:  # noqa: ANN001
    """Write the replayed step's Chrome/Perfetto trace (--critical-path); its path, None without a replay."""
    g = getattr(res, "_replay", None)
    if g is None:
        return None
    from fsdpbench.analysis.crossrank.replay_trace import write_trace

    if args.replay_trace:
        out = Path(args.replay_trace)
    else:
        first = Path(args.paths[0])
        out = (first if first.is_dir() else first.parent) / "replay.perfetto.json"
    try:
        write_trace(out, *g)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the replay trace ({exc.strerror or exc})") from None
    return out

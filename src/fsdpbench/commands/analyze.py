"""``fsdpbench analyze PATH... [--json FILE] [--step N] [--top N] [--workers N]``: the study's profiler
numbers (overlap, exposed communication, collectives, kernel time by op type, sync/launch counts)
from raw traces, as terminal tables and JSON. Never imports torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from fsdpbench.errors import ConfigError, InputError
from fsdpbench.fmt import fmt, fmt_bytes, fmt_pct, fmt_us_as_ms


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
        "--workers", type=int, metavar="N", help="processes reading ranks (default: one per CPU)"
    )


def _ms(us: float | None) -> str:
    return fmt_us_as_ms(us, 3)


def _pct(r: float | None) -> str:
    return fmt_pct(r)


def render(res, top: int = 15, console=None) -> None:  # noqa: ANN001 (rich types kept lazy)
    """Print the analysis as rich tables."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    t = Table(title=f"Per rank ({res.format}; times in ms)", title_justify="left")
    for col in (
        "rank",
        "step",
        "step time",
        "compute",
        "comm",
        "overlapped",
        "exposed comm",
        "free",
        "overlap",
        "kernel time",
    ):
        t.add_column(col, justify="right")
    for r in res.ranks:
        t.add_row(
            str(r.rank),
            "all" if r.step is None else str(r.step),
            _ms(r.step_time_us),
            _ms(r.compute_us),
            _ms(r.comm_us),
            _ms(r.overlapped_us),
            _ms(r.exposed_comm_us),
            _ms(r.free_us),
            _pct(r.overlap_ratio),
            _ms(r.kernel_time_us),
        )
    m = res.mean
    if len(res.ranks) > 1:
        t.add_row(
            "mean",
            "",
            _ms(m["step_time_us"]),
            _ms(m["compute_us"]),
            _ms(m["comm_us"]),
            _ms(m["overlapped_us"]),
            _ms(m["exposed_comm_us"]),
            _ms(m["free_us"]),
            _pct(m["overlap_ratio"]),
            _ms(m["kernel_time_us"]),
            style="bold",
        )
    con.print(t)

    c = Table(title="Collectives", title_justify="left")
    for col in ("rank", "type", "count", "bytes", "median size", "time (ms)", "bandwidth (GB/s)"):
        c.add_column(col, justify="right")
    for r in res.ranks:
        for ctype, s in r.collectives.items():
            bw = fmt(s["bandwidth_gbps"], 3)
            c.add_row(
                str(r.rank),
                ctype,
                str(s["count"]),
                fmt_bytes(s["bytes"]),
                fmt_bytes(s["median_bytes"]),
                _ms(s["time_us"]),
                bw,
            )
    if c.row_count:
        con.print(c)

    if res.ranks:
        r0 = res.ranks[0]
        o = Table(title=f"Top {top} op types by kernel time (rank {r0.rank})", title_justify="left")
        for col in ("op type", "count", "total (ms)", "mean (µs)"):
            o.add_column(col, justify="right" if col != "op type" else "left")
        for row in r0.op_stats.head(top).itertuples(index=False):
            o.add_row(str(row.op_type), str(row.count), _ms(row.total_us), f"{row.mean_us:.2f}")
        con.print(o)

        s = Table(title="Sync and launch counts (n/r: the trace cannot record it)", title_justify="left")
        s.add_column("rank", justify="right")
        for k in r0.sync:
            s.add_column(k, justify="right")
        for r in res.ranks:
            s.add_row(str(r.rank), *["n/r" if v is None else str(v) for v in r.sync.values()])
        con.print(s)

    across = res.across_ranks()
    if len(res.ranks) > 1:
        strag = (
            ", ".join(f"rank {d['rank']} (+{d['skew_us']:.1f} µs)" for d in across["stragglers"]) or "none"
        )
        con.print(f"slowest rank: {across['slowest_rank']}; stragglers by collective start skew: {strag}")
    for w in res.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


def main(args: argparse.Namespace) -> int:
    """Run the analysis, print it, optionally write JSON; 0 on success."""
    from fsdpbench.analysis import analyze

    if args.top is not None and args.top < 1:
        raise ConfigError(f"--top must be at least 1 (got {args.top})")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    res = analyze(args.paths, step=args.step, workers=args.workers)
    data = orjson.dumps(res.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if args.json == "-":
        sys.stdout.buffer.write(data + b"\n")
        return 0
    render(res, top=args.top)
    if args.json:
        out = Path(args.json)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data + b"\n")
        except OSError as exc:
            raise InputError(f"{out}: cannot write the JSON ({exc.strerror or exc})") from None
    return 0

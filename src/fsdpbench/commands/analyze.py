"""``fsdpbench analyze PATH... [--json FILE] [--step N] [--top N] [--workers N] [--units] [--explain UNIT]``: the study's profiler
numbers (overlap, exposed communication, collectives, kernel time by op type, sync/launch counts)
from raw traces, as terminal tables and JSON. Never imports torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdpbench.errors import ConfigError, InputError
from fsdpbench.fmt import fmt, fmt_bytes, fmt_pct, fmt_us_as_ms, shorten_middle, shorten_unique


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
        "--replay-trace",
        metavar="FILE",
        help="where --critical-path writes the replayed step's Chrome/Perfetto trace (default: "
        "replay.perfetto.json in the folder of the first PATH)",
    )


def _ms(us: float | None) -> str:
    return fmt_us_as_ms(us, 3)


def _pct(r: float | None) -> str:
    return fmt_pct(r)


# Per-rank columns: (header, metric, in the default narrow set?, caption text)
RANK_COLUMNS = (
    ("time", "step_time_us", True, "time: the profiled step"),
    ("compute", "compute_us", True, ""),
    ("comm", "comm_us", True, ""),
    ("overlapped", "overlapped_us", False, "overlapped: comm hidden under compute"),
    ("exposed", "exposed_comm_us", True, "exposed: comm − overlapped"),
    ("free", "free_us", False, "free: the device ran nothing"),
    ("carried", "carried_over_us", False, "carried: other steps' device work in the step"),
    ("overlap", "overlap_ratio", True, "overlap: overlapped / comm"),
    ("kernel", "kernel_time_us", False, "kernel: total kernel time"),
)
SYNC_HEADERS = {
    "barrier": "barrier",
    "launch_ffts": "ffts",
    "device_synchronize": "device",
    "stream_synchronize": "stream",
    "event_synchronize": "event",
    "kernel_launch": "launches",
}
"""Short headers for the sync/launch counts (the caption says what each is)."""


def _rank_cells(values: dict, columns: list[tuple[str, str, bool, str]]) -> list[str]:
    return [_pct(values[key]) if key == "overlap_ratio" else _ms(values[key]) for _, key, _, _ in columns]


def _rank_table(res, columns: list, title: str):  # noqa: ANN001, ANN202 (rich types kept lazy)
    from rich.table import Table

    caption = "; ".join(["times in ms", *(c[3] for c in columns if c[3])])
    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    t.add_column("rank", justify="right", no_wrap=True, min_width=4)
    t.add_column("step", justify="right", no_wrap=True, min_width=4)
    for header, *_ in columns:
        t.add_column(header, justify="right", no_wrap=True)
    for r in res.ranks:
        values = {key: getattr(r, key) for _, key, _, _ in columns}
        t.add_row(str(r.rank), "all" if r.step is None else str(r.step), *_rank_cells(values, columns))
    if len(res.ranks) > 1:
        t.add_row("mean", "", *_rank_cells(res.mean, columns), style="bold")
    return t


def _rank_tables(res, columns: list, width: int) -> list:  # noqa: ANN001 (rich types kept lazy)
    """The per-rank table, split by columns into parts no wider than ``width``: every part keeps the
    rank and step labels (a narrow terminal gets more parts, never squeezed labels or cut numbers)."""
    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=10_000)
    title = f"Per rank ({res.format})"

    def natural(cols: list) -> int:
        t = _rank_table(res, cols, title)
        return Measurement.get(wide, wide.options, t).maximum

    parts: list[list] = [[]]
    for col in columns:
        if parts[-1] and natural([*parts[-1], col]) > width:
            parts.append([])
        parts[-1].append(col)
    return [
        _rank_table(res, cols, title if i == 0 else f"{title}, continued") for i, cols in enumerate(parts)
    ]


def _group_table(res, con) -> None:  # noqa: ANN001 (rich types kept lazy)
    """Communication per process group (shard = intra-node, replicate = inter-node), mean over its ranks."""
    from rich.table import Table

    from fsdpbench.analysis.groups import WORLD_SIZE_RULE, summary_rows

    kinds = getattr(res, "process_groups", None) or {}
    rows = summary_rows(res.ranks, kinds)
    if not rows or (len(rows) == 1 and rows[0]["kind"] == "world" and rows[0]["group"] != "?"):
        return  # one group of all ranks: the per-rank table says it all
    g = Table(
        title="Communication per process group",
        title_justify="left",
        caption="mean over the group's ranks; count: collectives per rank; comm: ∪ of the group's "
        "communication, ms; exposed: its part not under compute, ms; bytes: per rank; GB/s: algorithm "
        "bandwidth; kind: shard = consecutive ranks (intra-node), replicate = strided (inter-node)"
        + (
            "; ?: the trace names no group, its ranks are the world of its distributedInfo"
            if any(info.get("rule") == WORLD_SIZE_RULE for info in kinds.values())
            else ""
        ),
        caption_justify="left",
    )
    for col in ("group", "kind", "ranks", "count", "comm", "exposed", "bytes", "GB/s"):
        g.add_column(col, justify="left" if col in ("group", "kind") else "right")
    for row in rows:
        count = (
            str(row["count_min"])
            if row["count_min"] == row["count_max"]
            else f"{row['count_min']}–{row['count_max']}"
        )
        g.add_row(
            row["group"],
            str(row["kind"]),
            _members(row),
            count,
            _ms(row["comm_us"]),
            _ms(row["exposed_us"]),
            fmt_bytes(row["bytes"]),
            fmt(row["algbw_gbps"], 3),
        )
    con.print(g)


def _members(row: dict) -> str:
    """A group's ranks as the table shows them: ``0,1`` (``0,1 of 8`` when more are in the group)."""
    members, size = row["ranks"], row.get("size")
    text = shorten_middle(",".join(map(str, members)), 24) if members else "?"
    return f"{text} of {size}" if size and (not members or size > len(members)) else text


def _internal_ms(row: dict, kind: str) -> str:
    """``host/device`` ms of one FSDP2 internal step of a unit × phase row, ``—`` where not in the trace."""
    part = (row.get("fsdp_internals") or {}).get(kind)
    if part is None:
        return "—"
    return f"{_ms(part['host_us'])}/{_ms(part['device_us'])}"


def render_units(res, console) -> None:  # noqa: ANN001 (rich types kept lazy)
    """One unit × phase table per rank (``--units``); ranks without rows are named once."""
    from rich.table import Table

    from fsdpbench.analysis import places as plc

    missing = [r.rank for r in res.ranks if r.units is None]
    for r in res.ranks:
        if r.units is None:
            continue
        t = Table(
            title=f"Units × phases (rank {r.rank}; from {r.units_source})",
            title_justify="left",
            caption="ms; exposed: comm − overlapped; collectives: count per type; FSDP2 internals: host/device "
            "ms of copy-in, all-gather, copy-out, reduce, rs-wait (— where not in this trace); "
            "rows sum to the step's totals (docs/attribution.md)",
            caption_justify="left",
        )
        for col in (
            "unit",
            "phase",
            "compute",
            "comm",
            "exposed",
            "collectives",
            "copy-in",
            "ag",
            "copy-out",
        ):
            t.add_column(col, justify="left" if col in ("unit", "phase", "collectives") else "right")
        t.add_column("reduce", justify="right")
        t.add_column("rs-wait", justify="right")
        for row in r.units:
            colls = " ".join(f"{k}×{v['count']}" for k, v in row["collectives"].items()) or "—"
            t.add_row(
                row["unit"],
                row["phase"],
                _ms(row["compute_us"]),
                _ms(row["comm_us"]),
                _ms(row["exposed_us"]),
                colls,
                *[_internal_ms(row, k) for k in ("copy_in", "all_gather", "copy_out", "reduce", "rs_wait")],
            )
        console.print(t)
        if r.prefetch is not None:
            console.print(
                f"prefetch chain (rank {r.rank}): {plc.prefetch_chain(r.prefetch)}", highlight=False
            )
    if missing:
        console.print(
            f"no unit × phase rows for rank(s) {', '.join(map(str, missing))}: they need a Kineto trace "
            "with fsdpbench's ranges (`fsdpbench run/ab --profile`) or FSDP2's own (`FSDP::pre_forward (<fqn>)` …), "
            "or for phases alone the autograd engine's or the optimizer's ranges",
            highlight=False,
        )


def explain_rows(res, unit: str, step: int | None = None) -> list[dict]:  # noqa: ANN001 (Analysis)
    """Per rank the windows ``unit`` got (:func:`fsdpbench.analysis.unit_ranges.find_ranges`, as the
    analysis found them): ``{rank, phase, thread, start_ms, end_ms, opened_by, closed_by, events}`` in
    start order, times from the start of the rank's first profiler step (else of its first event); ``events`` counts the compute and communication events placed in the window (of the
    profiled steps, or of ``step``). A rank without such a window gives one row with ``phase`` None and
    its units in ``opened_by``."""
    import numpy as np

    from fsdpbench.analysis import attribution, unit_ranges
    from fsdpbench.trace import Source, read_rank

    out: list[dict] = []
    for r in res.ranks:
        t = r._events if hasattr(r._events, "category") else read_rank(Source(Path(r.source), r.format)).table
        ranges = unit_ranges.find_ranges(t)
        select = (t.step == step) if step is not None else (t.step >= 0 if (t.step >= 0).any() else None)
        placed = attribution.place(t, r.mode, select, ranges)
        counts = np.bincount(placed.range_index[placed.range_index >= 0], minlength=len(ranges))
        lanes = [str(c) for c in t.lane.categories]
        steps = [i for i, c in enumerate(t.name.categories) if str(c).startswith("ProfilerStep#")]
        step_rows = unit_ranges.host_rows(t, steps)
        origin = int(t.start_ns[step_rows].min()) if step_rows.size else int(t.start_ns.min())
        mine = [i for i, u in enumerate(ranges.unit) if u == unit]
        if not mine:
            units = ", ".join(dict.fromkeys(ranges.unit)) or "none"
            out.append({"rank": r.rank, "phase": None, "opened_by": units})
            continue
        for i in sorted(mine, key=lambda i: int(ranges.start_ns[i])):
            out.append(
                {
                    "rank": r.rank,
                    "phase": ranges.phase[i],
                    "thread": lanes[int(ranges.lane[i])],
                    "start_ms": (int(ranges.start_ns[i]) - origin) / 1e6,
                    "end_ms": (int(ranges.end_ns[i]) - origin) / 1e6,
                    "opened_by": ranges.opened_by[i]
                    if ranges.opened_by
                    else f"the range itself ({ranges.source})",
                    "closed_by": ranges.closed_by[i]
                    if ranges.closed_by
                    else f"the range itself ({ranges.source})",
                    "events": int(counts[i]),
                }
            )
    return out


def render_explain(res, unit: str, console, step: int | None = None) -> None:  # noqa: ANN001 (rich types kept lazy)
    """``--explain UNIT``: the windows of :func:`explain_rows`, one table."""
    from rich.table import Table

    rows = explain_rows(res, unit, step)
    t = Table(
        title=f"Windows of unit {unit!r}",
        title_justify="left",
        caption="start, end: ms from the rank's first profiler step; events: compute and communication events placed in the window "
        "(the innermost window that contains their launch, docs/attribution.md)",
        caption_justify="left",
    )
    for col in ("rank", "phase", "thread", "start", "end", "opened by", "closed by", "events"):
        t.add_column(col, justify="right" if col in ("rank", "start", "end", "events") else "left")
    missing = []
    for row in rows:
        if row["phase"] is None:
            missing.append(f"rank {row['rank']} (its units: {row['opened_by']})")
            continue
        t.add_row(
            str(row["rank"]),
            row["phase"],
            row["thread"],
            f"{row['start_ms']:.3f}",
            f"{row['end_ms']:.3f}",
            row["opened_by"],
            row["closed_by"],
            str(row["events"]),
        )
    if t.row_count:
        console.print(t)
    for m in missing:
        console.print(f"no window of unit {unit!r} on {m}", highlight=False)


def render(res, top: int = 15, console=None, wide: bool = False) -> None:  # noqa: ANN001 (rich types kept lazy)
    """Print the analysis as rich tables that fit the console's width.

    Short headers with the units in each table's caption; op type names shortened in the middle;
    ``wide`` adds the per-rank columns overlapped, free and kernel time.
    """
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    columns = [c for c in RANK_COLUMNS if wide or c[2]]
    for part in _rank_tables(res, columns, con.width):
        con.print(part)

    c = Table(
        title="Collectives",
        title_justify="left",
        caption="bytes: total; median: message size; ms: time; GB/s: bandwidth",
        caption_justify="left",
    )
    for col in ("rank", "type", "count", "bytes", "median", "ms", "GB/s"):
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
    _group_table(res, con)

    if res.ranks:
        r0 = res.ranks[0]
        o = Table(
            title=f"Top {top} op types by kernel time (rank {r0.rank})",
            title_justify="left",
            caption="ms: total kernel time; mean µs: per call",
            caption_justify="left",
        )
        for col in ("op type", "count", "ms", "mean µs"):
            o.add_column(col, justify="right" if col != "op type" else "left", no_wrap=True)
        name_width = max(16, con.width - 40)  # what the three number columns and the borders leave
        rows = r0.ops[:top]  # rows without pandas when the result came from its cache
        names = shorten_unique([row["op_type"] for row in rows], name_width)
        for row, name in zip(rows, names, strict=True):
            o.add_row(name, str(row["count"]), _ms(row["total_us"]), f"{row['mean_us']:.2f}")
        con.print(o)

        s = Table(
            title="Sync and launch counts",
            title_justify="left",
            caption="ffts: Launch_Ffts tasks; device, stream, event: synchronise calls; launches: kernel "
            "launches; n/r: the trace cannot record it",
            caption_justify="left",
        )
        s.add_column("rank", justify="right")
        for k in r0.sync:
            s.add_column(SYNC_HEADERS.get(k, k), justify="right")
        for r in res.ranks:
            s.add_row(str(r.rank), *["n/r" if v is None else str(v) for v in r.sync.values()])
        con.print(s)

    from fsdpbench.analysis.groups import coverage_text

    if res.waits:
        _render_waits(con, res.waits)
    if len(res.ranks) > 1:
        strag = ", ".join(f"rank {d['rank']} (+{d['skew_us']:.1f} µs)" for d in res.stragglers) or "none"
        covers = coverage_text((res.waits or {}).get("partial_groups") or [])
        con.print(
            f"slowest rank: {res.slowest_rank}; stragglers by collective start skew: {strag}"
            + (f" ({covers})" if covers else ""),
            highlight=False,
        )
    for w in res.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False)


WAITS_TOP = 5


def _profiler_ops(profiler: list[dict]) -> str:
    """Which of the profiler's ops its per-rank rows cover: ``the trace's collectives (rank 0: 4 of its
    28 ops, …)``, or ``all its ops`` where none could be paired with the trace's."""
    parts = [
        f"rank {p['rank']}: "
        + (f"{p['paired']} of its {p['ops']} ops" if p.get("paired") else f"all {p['ops']} ops")
        for p in profiler
    ]
    if all(p.get("paired") == p["ops"] for p in profiler):
        return "the trace's collectives"
    return "the ops paired with the trace's collectives by name (" + ", ".join(parts) + ")"


def _render_waits(con, w: dict) -> None:  # noqa: ANN001 (rich types kept lazy)
    """Waiting vs transferring: per rank, bandwidth per type, the slowest collectives."""
    from rich.table import Table

    from fsdpbench.analysis.groups import coverage_text

    covers = coverage_text(w.get("partial_groups") or [])
    t = Table(
        title=f"Waiting vs transferring ({w['instances']} collectives matched by {w['match']}"
        + (f"; {covers}" if covers else "")
        + ")",
        title_justify="left",
        caption="ms; wait: for the last rank to arrive; exp.: not hidden under compute; offset: clock offset "
        f"to rank {w['reference_rank']} applied (µs)"
        + (
            "; profiler: the Ascend profiler's synchronization and elapse − synchronization "
            f"(docs/attribution.md) over {_profiler_ops(w['profiler'])}"
            if w.get("profiler")
            else ""
        ),
        caption_justify="left",
    )
    for col in ("rank", "wait", "transfer", "exp. wait", "exp. transfer", "offset µs"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in w["ranks"]:
        off = r["clock_offset_us"]
        t.add_row(
            str(r["rank"]),
            _ms(r["wait_us"]),
            _ms(r["transfer_us"]),
            _ms(r["exposed_wait_us"]),
            _ms(r["exposed_transfer_us"]),
            "?" if off is None else f"{off:.1f}",
        )
    for p in w.get("profiler") or []:  # the Ascend profiler's own split, per rank
        sync = p["synchronization_us"]
        t.add_row(f"{p['rank']} (profiler)", _ms(sync), _ms(p["elapse_us"] - sync), "", "", "")
    con.print(t)
    bw = ", ".join(
        f"{k} algbw {fmt(v['algbw_gbps'], 3)} / busbw {fmt(v['busbw_gbps'], 3)} GB/s"
        for k, v in w["bandwidth"].items()
    )
    if bw:
        con.print(f"bandwidth over transfer time: {bw}", highlight=False)
    top = Table(title="Slowest collectives", title_justify="left", caption="ms", caption_justify="left")
    for col in ("type", "unit", "phase", "bytes", "wait", "transfer", "last rank"):
        top.add_column(col, justify="right" if col not in ("type", "unit", "phase") else "left", no_wrap=True)
    for x in w["top"][:WAITS_TOP]:
        top.add_row(
            x["type"],
            x["unit"] or "—",
            x["phase"] or "—",
            fmt_bytes(x["bytes"]),
            _ms(x["wait_us"]),
            _ms(x["transfer_us"]),
            str(x["last_rank"]),
        )
    if top.row_count:
        con.print(top)


def main(args: argparse.Namespace) -> int:
    """Run the analysis, print it, optionally write JSON; 0 on success."""
    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.result import encode_analysis

    if args.top is not None and args.top < 1:
        raise ConfigError(f"--top must be at least 1 (got {args.top})")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    if args.no_replay and (args.critical_path or args.what_if):
        raise ConfigError(
            "--no-replay cannot be combined with --critical-path or --what-if (they are the replay)"
        )
    replay = bool(args.json or args.critical_path or args.what_if) and not args.no_replay
    res = analyze(args.paths, step=args.step, workers=args.workers, replay=replay, what_if=args.what_if)
    if args.no_replay:
        res.replay_note = "not computed (--no-replay)"
    data = encode_analysis(res)
    trace_file = _write_replay_trace(res, args) if args.critical_path else None
    if args.json == "-":
        sys.stdout.buffer.write(data + b"\n")
        return 0
    render(res, top=args.top, wide=args.wide)
    if args.units or args.explain:
        from rich.console import Console

        if args.units:
            render_units(res, Console())
        if args.explain:
            render_explain(res, args.explain, Console(), args.step)
    if args.critical_path or args.what_if:
        from rich.console import Console

        render_replay(res, Console(), critical=args.critical_path, trace_file=trace_file)
    if args.json:
        out = Path(args.json)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data + b"\n")
        except OSError as exc:
            raise InputError(f"{out}: cannot write the JSON ({exc.strerror or exc})") from None
    return 0


def _write_replay_trace(res, args: argparse.Namespace) -> Path | None:  # noqa: ANN001
    """Write the replayed step's Chrome/Perfetto trace (--critical-path); its path, None without a replay."""
    g = getattr(res, "_replay", None)
    if g is None:
        return None
    from fsdpbench.analysis.replay_trace import write_trace

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


REPLAY_TOP = 10


def render_replay(res, con, critical: bool = True, trace_file: Path | None = None) -> None:  # noqa: ANN001
    """The replay's terminal view: its error, the path per phase, the top places with their slack, and
    the what-ifs (docs/replay.md)."""
    from rich.table import Table

    rp = res.replay
    if rp is None:
        con.print(f"[yellow]no step replay:[/yellow] {res.replay_note or 'not computed'}", highlight=False)
        return
    err = rp["error_pct"]
    con.print(
        f"Step replay: replayed vs measured step {fmt(err['median'], 3)} % median, {fmt(err['max'], 3)} % max "
        f"over {len(rp['ranks'])} ranks; unexplained slack {_ms(rp['unexplained_slack_us'])} ms",
        highlight=False,
    )
    if critical:
        step = rp["figure"]["step_us"]
        kinds = [k for k in ("compute", "transfer", "wait", "host_gap", "launch", "sync")
                 if any(k in p["kinds"] for p in rp["by_phase"])]  # fmt: skip
        t = Table(title=f"Critical path per phase (step {_ms(step)} ms)", title_justify="left",
                  caption="ms on the cross-rank critical path, by kind of task", caption_justify="left")  # fmt: skip
        for col in ("phase", "path", *kinds):
            t.add_column(col, justify="left" if col == "phase" else "right", no_wrap=True)
        for p in rp["by_phase"]:
            t.add_row(
                p["phase"], _ms(p["us"]), *[_ms(p["kinds"].get(k)) if k in p["kinds"] else "" for k in kinds]
            )
        con.print(t)
        slack = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["slack_us"] for x in rp["slack"]}
        top = Table(title="Top places on the critical path", title_justify="left",
                    caption="ms; slack: how much the place could grow before the step grows (0 on the path)",
                    caption_justify="left")  # fmt: skip
        for col in ("rank", "unit", "phase", "kind", "critical", "slack"):
            top.add_column(
                col, justify="right" if col in ("rank", "critical", "slack") else "left", no_wrap=True
            )
        for x in rp["critical"][:REPLAY_TOP]:
            key = (x["rank"], x["unit"], x["phase"], x["kind"])
            top.add_row(str(x["rank"]), x["unit"], x["phase"], x["kind"], _ms(x["us"]), _ms(slack.get(key)))
        con.print(top)
        near = rp["near_critical"]
        if near:
            con.print(
                f"near-critical (off the path, slack < 2 % of the step): {len(near)} places, e.g. "
                + ", ".join(
                    f"rank {x['rank']} {x['unit']} {x['phase']} {x['kind']} ({_ms(x['slack_us'])} ms)"
                    for x in near[:3]
                ),
                highlight=False,
            )
        if trace_file is not None:
            con.print(
                f"replayed step with its critical path: {trace_file} (open in ui.perfetto.dev)",
                highlight=False,
            )
    if rp["what_if"]:
        w = Table(title="What-ifs (replayed)", title_justify="left", caption="ms", caption_justify="left")
        for col in ("edit", "predicted step", "change", "source", "largest change on the path"):
            w.add_column(
                col, justify="left" if col in ("edit", "source", "largest change on the path") else "right"
            )
        step = rp["figure"]["step_us"]
        for x in rp["what_if"]:
            c = x["changed"][0] if x["changed"] else None
            change = (
                f"rank {c['rank']} {c['unit']} {c['phase']} {c['kind']} {c['delta_us'] / 1000:+.3f}"
                if c
                else "—"
            )
            pred = x["predicted_step_us"]
            w.add_row(
                x["edit"],
                _ms(pred),
                "" if pred is None else f"{(pred - step) / 1000:+.3f}",
                x["source"],
                change,
            )
        con.print(w)

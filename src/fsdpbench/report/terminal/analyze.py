"""``fsdpbench analyze`` in the terminal: the per-rank table (split in parts in a narrow terminal), the
collectives, the communication per process group, the top op types, the sync and launch counts, and the
waiting vs transferring tables; every table fits the console (:mod:`fsdpbench.report.terminal.fit`)."""

from __future__ import annotations

from fsdpbench.fmt import fmt, fmt_bytes, fmt_pct, fmt_us_as_ms, shorten_middle, shorten_unique
from fsdpbench.report.terminal.fit import print_fitted


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

    from fsdpbench.analysis.crossrank.groups import WORLD_SIZE_RULE, summary_rows

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
    print_fitted(con, g, labels=2)


def _members(row: dict) -> str:
    """A group's ranks as the table shows them: ``0,1`` (``0,1 of 8`` when more are in the group)."""
    members, size = row["ranks"], row.get("size")
    text = shorten_middle(",".join(map(str, members)), 24) if members else "?"
    return f"{text} of {size}" if size and (not members or size > len(members)) else text


def render_analysis(res, top: int = 15, console=None, wide: bool = False) -> None:  # noqa: ANN001 (rich types kept lazy)
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
        print_fitted(con, c, labels=2)
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
        print_fitted(con, o, labels=1)

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
        print_fitted(con, s, labels=1)

    from fsdpbench.analysis.crossrank.groups import coverage_text

    if res.waits:
        _render_waits(con, res.waits)
    if len(res.ranks) > 1:
        strag = ", ".join(f"rank {d['rank']} (+{d['skew_us']:.1f} µs)" for d in res.stragglers) or "none"
        covers = coverage_text(
            (res.waits or {}).get("partial_groups") or [], (res.waits or {}).get("ranks_seen")
        )
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

    from fsdpbench.analysis.crossrank.groups import coverage_text

    covers = coverage_text(w.get("partial_groups") or [], w.get("ranks_seen"))
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
    print_fitted(con, t, labels=1)
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
        print_fitted(con, top, labels=3)

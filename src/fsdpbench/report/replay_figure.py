"""The replay figure: every rank's lanes over one replayed step, the critical path drawn through them and the
collectives' rendezvous marked (the Analysis JSON's ``replay.figure``; docs/reports.md, "How to read the replay
figure"). Drawn like the other figures (``report.figures``: matplotlib's object API, inline SVG)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from fsdpbench.analysis.findings.records import finite
from fsdpbench.report.figures import _figure, _merge_for_display, to_svg

REPLAY_KIND_COLORS = {
    "compute": "#4C72B0",
    "transfer": "#DD8452",
    "wait": "#E8A0A8",
    "host_gap": "#BDBDBD",
    "launch": "#8172B3",
    "sync": "#C44E52",
}
"""The replay's task kinds (``replay.figure.kinds``); an unknown kind is drawn grey."""
REPLAY_SEGMENT_CAP = 2000
"""The analysis keeps at most this many segments in ``replay.figure`` (the path's first, docs/DATA.md); a
figure that holds that many says that work off the path may be missing."""
REPLAY_MAX_ROWS = 40
"""The replay figure draws at most this many lanes: the ranks on the critical path first, then the others in
order; the title says how many ranks were left out."""


def _replay_rows(lanes: Sequence[dict], path_ranks: set[int]) -> tuple[list[tuple[int, int, dict]], int]:
    """The lanes drawn as ``(rank, index of the lane in figure.lanes, lane)``, ranks in order (a rank's lanes in
    their order), and how many ranks were left out to keep within ``REPLAY_MAX_ROWS``."""
    by_rank: dict[int, list[tuple[int, dict]]] = {}
    for index, lane in enumerate(lanes):
        by_rank.setdefault(int(lane["rank"]), []).append((index, lane))
    order = sorted(by_rank, key=lambda r: (r not in path_ranks, r))
    chosen: list[int] = []
    rows = 0
    for r in order:
        if chosen and rows + len(by_rank[r]) > REPLAY_MAX_ROWS:
            continue
        chosen.append(r)
        rows += len(by_rank[r])
    drawn = [(r, index, lane) for r in sorted(chosen) for index, lane in by_rank[r]]
    return drawn, len(by_rank) - len(chosen)


def replay_lanes(arm: str, figure: dict, name: str) -> str:
    """One replayed step of every rank (the analysis' ``replay.figure``): a row per lane, grouped by rank, its
    tasks coloured by kind (full colour on the critical path, faded off it), the critical path drawn as a black
    line through the lanes it crosses, and every collective's rendezvous: a tick where each rank arrived (red:
    the last to arrive, which starts the transfer) and the transfer span shaded over the ranks of the group.

    Args:
        arm: the arm's label (the title).
        figure: ``replay.figure``: ``step_us``, ``kinds``, ``lanes`` [{rank, lane, segments: [[start_us, end_us,
            kind_index, on_path], …]}], ``path`` [[rank, lane_index (into ``lanes``), start_us, end_us], …],
            ``rendezvous`` [{group, seq, type, arrivals: [[rank, us], …], last_rank, transfer_start_us,
            transfer_end_us}]; times in µs from the replayed step's start.
        name: the figure's id (salts the SVG's ids).
    """
    kinds = [str(k) for k in figure.get("kinds") or []]
    path = [p for p in figure.get("path") or [] if len(p) >= 4]
    lanes = figure.get("lanes") or []
    drawn, left_out = _replay_rows(lanes, {int(p[0]) for p in path})
    # y of each row: lanes of one rank together, a half-row gap between ranks
    y_of: dict[int, float] = {}
    rank_span: dict[int, tuple[float, float]] = {}
    y = 0.0
    for i, (rank, index, _) in enumerate(drawn):
        if i and drawn[i - 1][0] != rank:
            y += 0.6
        y_of[index] = y
        top, bottom = rank_span.get(rank, (y, y))
        rank_span[rank] = (min(top, y), max(bottom, y))
        y += 1.0
    n_rows = max(len(drawn), 1)
    step_ms = (finite(figure.get("step_us")) or 0.0) / 1e3
    ends = [float(s[1]) for _, _, lane in drawn for s in lane.get("segments") or [] if len(s) >= 2]
    span_ms = max([step_ms, *(e / 1e3 for e in ends), 1e-6])
    fig = _figure(14.0, min(0.3 * n_rows + 0.35 * len(rank_span) + 1.9, 24.0))
    ax = fig.add_subplot()
    used: set[int] = set()
    for _, index, lane in drawn:
        seg = np.asarray([s[:4] for s in lane.get("segments") or [] if len(s) >= 4], dtype=float).reshape(
            -1, 4
        )
        yc = y_of[index]
        for k in np.unique(seg[:, 2]).astype(int) if seg.size else []:
            color = REPLAY_KIND_COLORS.get(kinds[k] if 0 <= k < len(kinds) else "", "#8C8C8C")
            used.add(int(k))
            for on, height, alpha in ((0, 0.5, 0.4), (1, 0.8, 1.0)):
                mask = (seg[:, 2] == k) & ((seg[:, 3] > 0) == bool(on))
                if not mask.any():
                    continue
                # neighbours closer than a pixel drawn as one bar: the SVG stays small
                s, e = _merge_for_display(seg[mask, 0] / 1e3, seg[mask, 1] / 1e3, span_ms / 1500.0)
                ax.broken_barh(
                    np.column_stack([s, np.maximum(e - s, span_ms / 3000.0)]),
                    (yc - height / 2, height),
                    facecolors=color,
                    alpha=alpha,
                    linewidth=0,
                )
    # the rendezvous: transfer spans over the group's ranks, arrival ticks above each rank's lanes
    arrivals_x, arrivals_y, last_x, last_y = [], [], [], []
    for rv in figure.get("rendezvous") or []:
        ranks = [int(a[0]) for a in rv.get("arrivals") or [] if int(a[0]) in rank_span]
        start, end = finite(rv.get("transfer_start_us")), finite(rv.get("transfer_end_us"))
        if ranks and start is not None and end is not None:
            top = min(rank_span[r][0] for r in ranks) - 0.45
            bottom = max(rank_span[r][1] for r in ranks) + 0.45
            ax.add_patch(
                Rectangle(
                    (start / 1e3, top),
                    max(end - start, 0.0) / 1e3,
                    bottom - top,
                    facecolor=REPLAY_KIND_COLORS["transfer"],
                    alpha=0.12,
                    linewidth=0,
                    zorder=0,
                )
            )
        for a in rv.get("arrivals") or []:
            r, us = int(a[0]), finite(a[1])
            if r not in rank_span or us is None:
                continue
            xs, ys = (last_x, last_y) if r == rv.get("last_rank") else (arrivals_x, arrivals_y)
            xs.append(us / 1e3)
            ys.append(rank_span[r][0] - 0.5)
    ax.scatter(arrivals_x, arrivals_y, marker="v", s=14, color="#555555", linewidths=0, zorder=4)
    ax.scatter(last_x, last_y, marker="v", s=30, color="#D1495B", linewidths=0, zorder=5)
    # the critical path: a black line along each piece, thin connectors between consecutive pieces
    pieces = sorted(
        (
            (float(p[2]) / 1e3, float(p[3]) / 1e3, y_of[int(p[1])])
            for p in path
            if int(p[1]) in y_of and int(lanes[int(p[1])]["rank"]) == int(p[0])
        ),
        key=lambda p: (p[0], p[1]),
    )
    pieces = _join_pieces(pieces, span_ms / 1500.0)
    if pieces:
        ax.add_collection(
            LineCollection(
                [[(s, yy), (e, yy)] for s, e, yy in pieces], colors="#111111", linewidths=2.4, zorder=6
            )
        )
        ax.add_collection(
            LineCollection(
                [
                    [(a[1], a[2]), (b[0], b[2])]
                    for a, b in zip(pieces[:-1], pieces[1:], strict=True)
                    if a[2] != b[2]
                ],
                colors="#111111",
                linewidths=0.9,
                linestyles="dashed",
                zorder=6,
            )
        )
    labels = [f"r{rank} {_short(str(lane.get('lane', '')), 26)}" for rank, _, lane in drawn]
    ax.set_yticks([y_of[i] for _, i, _ in drawn], labels, fontsize=7)
    ax.set_ylim((y - 0.4) if drawn else 1.0, -1.0)
    ax.set_xlim(0, span_ms * 1.01)
    ax.set_xlabel("time from the replayed step's start, aligned clocks (ms)")
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.8)
    ax.set_axisbelow(True)
    more = f"; {left_out} more ranks not drawn" if left_out else ""
    n_segments = sum(len(lane.get("segments") or []) for lane in lanes)
    if n_segments >= REPLAY_SEGMENT_CAP:
        more += (
            f"; {n_segments:,} bars kept by the analysis, the path's first: work off the path may be missing"
        )
    ax.set_title(f"{arm} — replayed step {step_ms:,.2f} ms, every rank{more}", fontsize=10, loc="left")
    handles = [
        Patch(color=REPLAY_KIND_COLORS.get(kinds[k], "#8C8C8C"), label=kinds[k].replace("_", " "))
        for k in sorted(used)
        if k < len(kinds)
    ]
    handles += [
        Patch(facecolor="#BBBBBB", alpha=0.4, label="off the path (faded)"),
        Line2D([], [], color="#111111", linewidth=2.4, label="critical path"),
        Line2D(
            [], [], color="#555555", marker="v", linestyle="", markersize=5, label="arrival at a collective"
        ),
        Line2D([], [], color="#D1495B", marker="v", linestyle="", markersize=7, label="last to arrive"),
        Patch(facecolor=REPLAY_KIND_COLORS["transfer"], alpha=0.25, label="rendezvous transfer"),
    ]
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=min(len(handles), 6),
        frameon=False,
        fontsize=8,
    )
    return to_svg(fig, name)


def _join_pieces(
    pieces: list[tuple[float, float, float]], min_gap: float
) -> list[tuple[float, float, float]]:
    """Consecutive path pieces ``(start, end, y)`` on one row less than ``min_gap`` apart joined into one, so a
    path of thousands of tasks draws as one line per stretch on a lane."""
    if not pieces:
        return []
    arr = np.asarray(pieces, dtype=float)
    new = np.ones(len(arr), dtype=bool)
    new[1:] = (arr[1:, 2] != arr[:-1, 2]) | (arr[1:, 0] - arr[:-1, 1] > min_gap)
    first = np.flatnonzero(new)
    ends = np.maximum.reduceat(arr[:, 1], first)
    return [(float(arr[i, 0]), float(e), float(arr[i, 2])) for i, e in zip(first, ends, strict=True)]


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

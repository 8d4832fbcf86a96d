"""The report's plots, each a pure function from data to SVG text.

matplotlib's object API (``matplotlib.figure.Figure``, no pyplot) draws without a GUI backend and
without touching process-wide state, so the runner can call the report in its own process.
SVG keeps text as text (``svg.fonttype = none``) so it stays sharp and small; each figure's ids
are salted with its name so several inline SVGs never share a clip-path id.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from fsdpbench.fmt import MISSING

ARM_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#937860", "#DA8BC3", "#8C8C8C"]
PART_COLORS = {
    "compute only": "#4C72B0",
    "overlapped comm": "#8FB9E3",
    "exposed comm": "#D1495B",
    "free (idle)": "#D9D9D9",
}
CATEGORY_COLORS = {
    "compute": "#4C72B0",
    "comm": "#DD8452",
    "memcpy": "#55A868",
    "memset": "#8C8C8C",
    "sync": "#C44E52",
    "other": "#B5B5B5",
}


def arm_color(i: int) -> str:
    return ARM_COLORS[i % len(ARM_COLORS)]


def to_svg(fig: Figure, name: str) -> str:
    """Serialise ``fig`` to inline-ready SVG (no XML prolog, no metadata block with URLs)."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"fsdpbench-{name}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return text.strip()


def _figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=100)
    return fig


def _style(ax) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def step_times(arms: Sequence[str], samples: dict[str, dict[int, Sequence[float]]]) -> str:
    """Strip plot of timed step times (ms): one column per arm, one colour per round, a box per arm
    and a black tick at each round's median.

    Args:
        arms: arm labels in display order.
        samples: arm → round → step times in ms.
    """
    rounds = sorted({r for per_arm in samples.values() for r in per_arm})
    fig = _figure(min(10.0, max(7.0, 1.6 * len(arms) + 3.0)), 3.8)
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)
    width = 0.6
    round_colors = {r: ARM_COLORS[(i + 2) % len(ARM_COLORS)] for i, r in enumerate(rounds)}
    for i, arm in enumerate(arms):
        per_round = samples.get(arm, {})
        all_values = [v for r in rounds for v in per_round.get(r, [])]
        if all_values:
            ax.boxplot(
                [all_values],
                positions=[i],
                widths=width,
                showfliers=False,
                patch_artist=True,
                boxprops={"facecolor": "#f2f2f2", "edgecolor": "#9a9a9a"},
                medianprops={"color": "#333333", "linewidth": 1.6},
                whiskerprops={"color": "#9a9a9a"},
                capprops={"color": "#9a9a9a"},
            )
        for j, r in enumerate(rounds):
            values = np.asarray(per_round.get(r, []), dtype=float)
            if values.size == 0:
                continue
            offset = (j - (len(rounds) - 1) / 2) * (width / max(len(rounds), 1)) * 0.8
            x = i + offset + rng.uniform(-0.04, 0.04, values.size)
            ax.scatter(
                x,
                values,
                s=18,
                color=round_colors[r],
                alpha=0.85,
                zorder=3,
                label=f"round {r}" if i == 0 or r not in per_round else None,
            )
            ax.hlines(
                np.median(values), i + offset - 0.07, i + offset + 0.07, color="black", linewidth=2, zorder=4
            )
    ax.set_xticks(range(len(arms)), arms)
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_ylabel("step time (ms)")
    _style(ax)
    handles = [Patch(color=round_colors[r], label=f"round {r}") for r in rounds]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    ax.set_title(
        "Timed step times per arm (dots: steps, coloured by round; ticks: round medians)", fontsize=10
    )
    return to_svg(fig, "step_times")


def overlap_per_rank(arms: Sequence[str], ratios: dict[str, Sequence[float | None]]) -> str:
    """Grouped bars of the overlap ratio (0–1, shown in %) per rank, one bar per arm; ``None`` = no comm."""
    n_ranks = max((len(v) for v in ratios.values()), default=0)
    fig = _figure(min(11.0, max(7.0, 0.45 * n_ranks * max(len(arms), 1) + 3)), 3.4)
    ax = fig.add_subplot()
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        values = list(ratios.get(arm, []))
        x = np.arange(len(values)) + (i - (len(arms) - 1) / 2) * width
        heights = [100.0 * v if v is not None else 0.0 for v in values]
        bars = ax.bar(x, heights, width * 0.95, color=arm_color(i), label=arm)
        for bar, v in zip(bars, values, strict=True):
            text = MISSING if v is None else f"{100 * v:.0f}"
            ax.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.set_xticks(range(n_ranks), [f"rank {r}" for r in range(n_ranks)])
    ax.set_ylim(0, 105)
    ax.set_ylabel("overlap ratio (%)")
    _style(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    ax.set_title("Communication overlapped by compute, per rank (|comm ∩ compute| / |comm|)", fontsize=10)
    return to_svg(fig, "overlap")


def breakdown(arms: Sequence[str], parts_ms: dict[str, dict[str, float]]) -> str:
    """Horizontal stacked bars per arm: compute only, overlapped comm, exposed comm, free (ms)."""
    fig = _figure(10.0, 0.7 * len(arms) + 1.6)
    ax = fig.add_subplot()
    for i, arm in enumerate(arms):
        left = 0.0
        for part, color in PART_COLORS.items():
            value = parts_ms.get(arm, {}).get(part) or 0.0
            ax.barh(
                i,
                value,
                left=left,
                color=color,
                height=0.6,
                label=part if i == 0 else None,
                edgecolor="white",
                linewidth=0.5,
            )
            total = sum((parts_ms.get(arm, {}).get(p) or 0.0) for p in PART_COLORS)
            if total and value / total > 0.07:
                ax.text(
                    left + value / 2,
                    i,
                    f"{value:.1f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if part in ("compute only", "exposed comm") else "#222",
                )
            left += value
    ax.set_yticks(range(len(arms)), arms)
    ax.invert_yaxis()
    ax.set_xlabel("time in the profiled step, mean over ranks (ms)")
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 if len(arms) < 3 else -0.2),
        ncol=4,
        frameon=False,
        fontsize=9,
    )
    ax.set_title("Where the step goes", fontsize=10)
    return to_svg(fig, "breakdown")


def collective_counts(arms: Sequence[str], counts: dict[str, dict[str, float]]) -> str:
    """Grouped bars: collectives per step by type, one bar per arm (mean over ranks)."""
    types = sorted(  # most frequent first; ties by name, so the figure does not follow the hash seed
        {t for c in counts.values() for t in c}, key=lambda t: (-max(c.get(t, 0) for c in counts.values()), t)
    )
    fig = _figure(min(10.0, max(7.0, 1.1 * len(types) + 3.0)), 3.4)
    ax = fig.add_subplot()
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        values = [counts.get(arm, {}).get(t, 0) for t in types]
        x = np.arange(len(types)) + (i - (len(arms) - 1) / 2) * width
        bars = ax.bar(x, values, width * 0.95, color=arm_color(i), label=arm)
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:g}" if v == int(v) else f"{v:.1f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.set_xticks(range(len(types)), types)
    ax.set_ylabel("count in the profiled step")
    ax.margins(y=0.12)
    _style(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    ax.set_title("Collectives by type", fontsize=10)
    return to_svg(fig, "collectives")


def op_deltas(base: str, test: str, rows: Sequence[tuple[str, float]], name: str) -> str:
    """Horizontal bars of op-type time deltas (test − base, ms): green = test spends less time."""
    labels = [r[0] for r in rows]
    values = np.array([r[1] for r in rows], dtype=float)
    fig = _figure(10.0, 0.3 * len(rows) + 1.4)
    ax = fig.add_subplot()
    colors = ["#2E8B57" if v < 0 else "#C44E52" for v in values]
    ax.barh(range(len(rows)), values, color=colors, height=0.7)
    span = float(np.abs(values).max()) if values.size else 1.0
    for y, v in enumerate(values):
        ax.text(
            v + (0.01 * span if v >= 0 else -0.01 * span),
            y,
            f"{v:+.2f}",
            va="center",
            ha="left" if v >= 0 else "right",
            fontsize=7,
        )
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="#444", linewidth=0.8)
    ax.set_xlim(
        -1.25 * span if (values < 0).any() else -0.05 * span,
        1.25 * span if (values > 0).any() else 0.05 * span,
    )
    ax.set_xlabel(f"kernel/op time {test} − {base} (ms, mean over ranks; negative = {test} faster)")
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.set_title(f"Op types with the largest time difference ({test} vs {base})", fontsize=10)
    return to_svg(fig, name)


def _merge_for_display(start: np.ndarray, end: np.ndarray, min_gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals closer than ``min_gap`` (sub-pixel), so a dense lane draws as few rectangles."""
    if start.size == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1] + min_gap
    group = np.cumsum(new_group) - 1
    starts = s[new_group]
    ends = np.zeros(starts.size, dtype=running_end.dtype)
    np.maximum.at(ends, group, e)
    return starts, ends


def timeline(timelines: Sequence, max_lanes: int = 8) -> str:
    """One step on one rank per arm: a row per lane (stream/thread), rectangles coloured by category.

    Args:
        timelines: ``report.load.Timeline`` objects (times in ns from the step's start).
        max_lanes: the busiest lanes shown per arm; quieter lanes are left out (the caption says so).
    """
    spans = [float(np.max(t.end_ns)) if len(t.end_ns) else 0.0 for t in timelines]
    span_ms = max(spans + [1e-6]) / 1e6
    prepared = []
    for t in timelines:
        lanes = np.asarray(t.lane, dtype=object).astype(str)
        cats = np.asarray(t.category, dtype=object).astype(str)
        start = np.asarray(t.start_ns, dtype=np.float64) / 1e6
        end = np.asarray(t.end_ns, dtype=np.float64) / 1e6
        busy: dict[str, float] = {}
        has_comm: dict[str, bool] = {}
        for lane in np.unique(lanes):
            mask = lanes == lane
            s, e = _merge_for_display(start[mask], end[mask], 0.0)
            busy[lane] = float((e - s).sum())
            has_comm[lane] = bool((cats[mask] == "comm").any())
        # communication lanes first, then by busy time
        chosen = sorted(busy, key=lambda k: (not has_comm[k], -busy[k]))[:max_lanes]
        prepared.append((t, lanes, cats, start, end, chosen, has_comm))
    total_rows = sum(len(p[5]) for p in prepared)
    fig = _figure(11.5, 0.34 * total_rows + 0.9 * len(prepared) + 0.8)
    axes = fig.subplots(
        len(prepared),
        1,
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [max(len(p[5]), 1) for p in prepared]},
    )[:, 0]
    min_gap = span_ms / 1500.0
    for ax, (t, lanes, cats, start, end, chosen, has_comm) in zip(axes, prepared, strict=True):
        for row, lane in enumerate(chosen):
            lane_mask = lanes == lane
            # "other" (step markers, Python frames) first and thin, so it never hides the work on top
            for cat in ("other", "compute", "memcpy", "memset", "sync", "comm"):
                mask = lane_mask & (cats == cat)
                if not mask.any():
                    continue
                s, e = _merge_for_display(start[mask], end[mask], min_gap)
                height = 0.3 if cat == "other" else 0.76
                ax.broken_barh(
                    np.column_stack([s, np.maximum(e - s, span_ms / 3000.0)]),
                    (row - height / 2, height),
                    facecolors=CATEGORY_COLORS.get(cat, "#B5B5B5"),
                    linewidth=0,
                )
        labels = [
            ("⇄ " if has_comm[lane] else "") + (lane if len(lane) <= 28 else lane[:26] + "…")
            for lane in chosen
        ]
        ax.set_yticks(range(len(chosen)), labels, fontsize=7)
        ax.set_ylim(len(chosen) - 0.5, -0.5)
        step = f", step {t.step}" if t.step is not None else ""
        ax.set_title(f"{t.arm} — rank {t.rank}{step}", fontsize=9, loc="left")
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.8)
        ax.set_axisbelow(True)
    axes[-1].set_xlim(0, span_ms * 1.01)
    axes[-1].set_xlabel("time from the start of the profiled step (ms)")
    present = sorted({c for p in prepared for c in np.unique(p[2])} & set(CATEGORY_COLORS))
    handles = [Patch(color=CATEGORY_COLORS[c], label=c) for c in present]
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), frameon=False, fontsize=8)
    return to_svg(fig, "timeline")


def ratio_per_cell(
    labels: Sequence[str],
    ratios: Sequence[float | None],
    ci: Sequence[tuple[float, float] | None],
    xlabel: str,
) -> str:
    """Dot plot of the A/B ratio (test/base median step time) per sweep cell with its 95% CI."""
    fig = _figure(10.0, 0.38 * len(labels) + 1.4)
    ax = fig.add_subplot()
    for y, (ratio, interval) in enumerate(zip(ratios, ci, strict=True)):
        if ratio is None:
            ax.text(1.0, y, "  no result", va="center", fontsize=8, color="#888")
            continue
        color = "#2E8B57" if ratio < 1 else "#C44E52"
        if interval is not None:
            ax.hlines(y, interval[0], interval[1], color=color, linewidth=2.2, alpha=0.6)
        ax.plot([ratio], [y], "o", color=color, markersize=6)
        ax.text(ratio, y - 0.32, f"{ratio:.3f}", ha="center", va="bottom", fontsize=7)
    ax.axvline(1.0, color="#444", linewidth=0.9, linestyle="--")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.7)
    ax.set_xlabel(xlabel)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_title(
        "A/B ratio per cell (test median / base median; < 1 = test faster; bars: 95% CI)", fontsize=10
    )
    return to_svg(fig, "ratio_per_cell")


GROUP_KIND_COLORS = {
    "shard": ["#DD8452", "#F0B27A", "#C0392B", "#E59866"],
    "replicate": ["#8172B3", "#B39DDB", "#5E35B1", "#9575CD"],
    "world": ["#DD8452"],
    "other": ["#937860", "#C9A66B"],
    "unknown": ["#8C8C8C"],
}


def rank_timeline(timelines: Sequence) -> str:
    """The profiled step of every rank, one panel per arm: a row per rank, compute below (blue) and
    communication above, coloured by process group (shard groups in oranges, replicate in purples).

    Args:
        timelines: ``report.rank_timeline.RankTimeline`` objects (times in ns from the arm's origin).
    """
    ends = [
        float(max([0, *(e.max() for r in t.rows for _, e in [r.compute, *r.comm.values()] if e.size)]))
        for t in timelines
    ]
    span_ms = max([*ends, 1e-6]) / 1e6
    total_rows = sum(len(t.rows) for t in timelines)
    fig = _figure(11.5, 0.42 * total_rows + 0.9 * len(timelines) + 0.9)
    axes = fig.subplots(
        len(timelines),
        1,
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [max(len(t.rows), 1) for t in timelines]},
    )[:, 0]
    min_gap = span_ms / 1500.0
    kind_of: dict[str, str] = {}
    for t in timelines:
        for g in sorted({g for r in t.rows for g in r.comm}):
            kind_of.setdefault(g, t.kinds.get(g, "unknown"))
    per_kind = {k: sorted(g for g in kind_of if kind_of[g] == k) for k in set(kind_of.values())}
    colors: dict[str, str] = {}
    legend: dict[str, str] = {}  # label → colour
    for kind, names in sorted(per_kind.items()):
        palette = GROUP_KIND_COLORS.get(kind, GROUP_KIND_COLORS["other"])
        if len(names) > len(palette):  # many groups (many nodes): one colour per kind
            colors.update(dict.fromkeys(names, palette[0]))
            legend[f"{len(names)} {kind} groups"] = palette[0]
            continue
        for i, g in enumerate(names):
            colors[g] = palette[i]
            legend[f"group {g} ({kind})"] = palette[i]
    for ax, t in zip(axes, timelines, strict=True):
        for row, r in enumerate(t.rows):
            parts = [(r.compute, CATEGORY_COLORS["compute"], row + 0.2)]
            parts += [(iv, colors[g], row - 0.2) for g, iv in sorted(r.comm.items())]
            for (start, end), color, y in parts:
                if not start.size:
                    continue
                s, e = _merge_for_display(start / 1e6, end / 1e6, min_gap)
                ax.broken_barh(
                    np.column_stack([s, np.maximum(e - s, span_ms / 3000.0)]),
                    (y - 0.18, 0.36),
                    facecolors=color,
                    linewidth=0,
                )
        ax.set_yticks(range(len(t.rows)), [f"rank {r.rank}" for r in t.rows], fontsize=7)
        ax.set_ylim(len(t.rows) - 0.5, -0.5)
        step = f", step {t.step}" if t.step is not None else ""
        clock = "" if t.aligned else " (clocks not comparable: each rank from its own step start)"
        more = f"; {t.left_out} more ranks not drawn" if t.left_out else ""
        ax.set_title(f"{t.arm} — all ranks{step}{clock}{more}", fontsize=9, loc="left")
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.8)
        ax.set_axisbelow(True)
    axes[-1].set_xlim(0, span_ms * 1.01)
    axes[-1].set_xlabel("time from the earliest rank's step start (ms)")
    handles = [Patch(color=CATEGORY_COLORS["compute"], label="compute")]
    handles += [Patch(color=color, label=label) for label, color in legend.items()]
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=min(len(handles), 5),
        frameon=False,
        fontsize=8,
    )
    return to_svg(fig, "rank_timeline")


PHASE_COLORS = {"forward": "#8FB9E3", "backward": "#F2B880", "optimizer": "#9ED3A4"}


def memory_timeline(arm: str, timeline: dict) -> str:
    """Allocated memory over one arm's memory step (``summary.json``'s ``memory_timeline``), with the
    layers' forward/backward ranges and the optimizer step shaded, the live-at-start bytes dashed and
    the peak marked with the phase and unit it falls in."""
    t_ms = np.asarray(timeline["t_us"], dtype=float) / 1e3
    mib = np.asarray(timeline["allocated_bytes"], dtype=float) / 2**20
    reserved = timeline.get("reserved_bytes")  # Ascend (and device) sources: the allocator's reserved bytes
    reserved_mib = np.asarray(reserved, dtype=float) / 2**20 if reserved else None
    peak = timeline["peak"]
    fig = _figure(11.5, 3.0)
    ax = fig.subplots()
    highest = max(float(mib.max()) if mib.size else 0.0, float(reserved_mib.max()) if reserved else 0.0)
    top = highest * 1.12 if highest > 0 else 1.0
    for r in timeline["ranges"]:
        start, end = r["start_us"] / 1e3, r["end_us"] / 1e3
        if r["unit"] == "root":  # the root's ranges hold every layer's: a thin band along the bottom
            ax.axvspan(start, end, ymin=0, ymax=0.03, color=PHASE_COLORS[r["phase"]], linewidth=0)
            continue
        ax.axvspan(start, end, color=PHASE_COLORS[r["phase"]], alpha=0.35, linewidth=0)
        ax.axvline(start, color="#999999", linewidth=0.5)
        label = r["unit"].removeprefix("layers.") if r["unit"] else "opt"
        ax.text((start + end) / 2, top * 0.97, label, ha="center", va="top", fontsize=6, color="#555555")
    if reserved_mib is not None:
        ax.step(t_ms, reserved_mib, where="post", color="#9A9A9A", linewidth=0.8)
    ax.step(t_ms, mib, where="post", color="#333333", linewidth=1.0)
    live = sum(timeline["live_at_start_bytes"].values()) / 2**20
    ax.axhline(live, color="#777777", linestyle="--", linewidth=0.8)
    where_ = f"{peak['phase']} of {peak['unit']}" if peak.get("unit") else str(peak.get("phase"))
    ax.plot([peak["t_us"] / 1e3], [peak["bytes"] / 2**20], "o", color="#D1495B", markersize=5)
    ax.annotate(
        f"peak {peak['bytes'] / 2**20:.2f} MiB\n{where_}",
        (peak["t_us"] / 1e3, peak["bytes"] / 2**20),
        xytext=(6, -22),
        textcoords="offset points",
        fontsize=7,
        color="#D1495B",
    )
    ax.set_ylim(0, top)
    left = min(float(t_ms.min()), 0.0) if t_ms.size else 0.0
    ax.set_xlim(left, float(t_ms.max()) * 1.01 if t_ms.size and t_ms.max() > 0 else 1.0)
    ax.set_xlabel("time from the step's first range (ms)")
    ax.set_ylabel("allocated (MiB)")
    source = timeline.get("source", "kineto")
    what = f", {source} {timeline['component']}" if timeline.get("component") else ""
    ax.set_title(f"{arm} — memory step, rank {timeline.get('rank', 0)}{what}", fontsize=9, loc="left")
    _style(ax)
    handles = [Patch(color=c, alpha=0.5, label=p) for p, c in PHASE_COLORS.items()]
    handles.append(Patch(facecolor="none", edgecolor="#777777", linestyle="--", label="live at start"))
    if reserved_mib is not None:
        handles.append(Patch(facecolor="none", edgecolor="#9A9A9A", label="reserved"))
    ax.legend(handles=handles, loc="lower right", fontsize=7, frameon=False, ncol=4, bbox_to_anchor=(1, 1.0))
    return to_svg(fig, f"memory_timeline_{arm}")


def unit_phase_heatmap(
    units: Sequence[str],
    phases: Sequence[str],
    panels: dict[str, np.ndarray],
    name: str,
    diverging: bool = False,
) -> str:
    """Heatmaps side by side, one per panel: a unit per row, a phase per column, ms in each cell.

    Each panel is a ``(len(units), len(phases))`` array (NaN = no such place, drawn blank).
    ``diverging`` draws deltas around 0 (red = more in the test arm).
    """
    fig = _figure(min(4.2 * len(panels) + 1.0, 12.0), 0.32 * len(units) + 1.8)
    for i, (title, values) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), i + 1)
        finite_values = values[np.isfinite(values)]
        top = float(np.max(np.abs(finite_values))) if finite_values.size else 0.0
        top = top or 1.0
        cmap = matplotlib.colormaps["RdBu_r" if diverging else "Reds"].with_extremes(bad="#f2f2f2")
        image = ax.imshow(
            np.ma.masked_invalid(values),
            cmap=cmap,
            vmin=-top if diverging else 0.0,
            vmax=top,
            aspect="auto",
        )
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                dark = abs(v) > 0.6 * top
                ax.text(
                    c, r, f"{v:.1f}", ha="center", va="center", fontsize=7, color="white" if dark else "#222"
                )
        ax.set_xticks(range(len(phases)), phases, fontsize=8)
        ax.set_yticks(range(len(units)), units if i == 0 else [""] * len(units), fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    return to_svg(fig, name)

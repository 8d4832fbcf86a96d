"""The profile sections of a run report: overlap, time breakdown, collectives, op-type deltas,
sync counts and the timeline, from analysis.json (and diff.json for op deltas)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fsdpbench.analysis.compare.diff import DiffResult
from fsdpbench.analysis.findings import finite
from fsdpbench.analysis.output.result import RankMetrics
from fsdpbench.analysis.rank import memory_timeline as mt
from fsdpbench.fmt import fmt, fmt_bytes, fmt_pct, fmt_us_as_ms
from fsdpbench.report import figures
from fsdpbench.report.blocks import Banner, Block, Figure, Heading, Para, Table
from fsdpbench.report.load import RunData
from fsdpbench.report.places import places_section

TOP_OPS = 15


def _rank_table(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in analysis.get("ranks") or [] if isinstance(r, dict)]


def _mean_key(ranks: list[dict[str, Any]], key: str) -> float | None:
    values = [finite(r.get(key)) for r in ranks]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _mean_metric(ranks: list[RankMetrics], name: str) -> float | None:
    """The mean over ranks of metric ``name`` (ranks where it is not a finite number are left out)."""
    values = [finite(getattr(r, name)) for r in ranks]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def profile_section(data: RunData) -> list[Block]:
    """The "Profile of one step" section; a short note when the run has no analysed profiles."""
    blocks: list[Block] = [Heading("Profile of one step")]
    analysis = data.analysis or {}
    analyses = data.analyses
    arms = [a for a in data.arms if a in analyses] + [a for a in analyses if a not in data.arms]
    if not arms:
        blocks.append(
            Para(
                "This run was not profiled (no `profiles/`: `--no-profile`, or `fsdpbench run` without "
                "`--profile`), or its profiles could not be analysed. Rerun without `--no-profile` (`ab`) or "
                "with `--profile` to get overlap, collectives, op times and a timeline."
            )
        )
        return blocks
    k = int(((data.manifest or {}).get("config") or {}).get("profile_steps") or 1)
    if k > 1:  # --profile-steps: the analysis's figures are totals over the recorded steps
        blocks[0] = Heading(f"Profile of {k} steps")
        blocks.append(
            Para(
                f"The profiler recorded {k} consecutive steps per arm (`--profile-steps {k}`): every figure of "
                'this section, and a finding\'s estimate "on the profiled step", is a total over them (the '
                f"first {k - 1} also hold fsdpbench's bookkeeping after their training: docs/methodology.md); "
                "the timed-clock figures and the step replay's step and what-ifs are per step."
            )
        )
    ranks = {arm: _rank_table(analysis[arm]) for arm in arms}
    typed = {arm: analyses[arm].ranks for arm in arms}
    for arm in arms:
        for warning in analyses[arm].warnings:
            blocks.append(Banner("warning", f"`{arm}`: {warning}"))
    # overlap per rank
    ratios = {arm: [r.overlap_ratio for r in sorted(typed[arm], key=lambda r: r.rank)] for arm in arms}
    blocks.append(Heading("Communication overlap", 3))
    blocks.append(
        Figure(
            "overlap",
            figures.overlap_per_rank(arms, ratios),
            "Overlap ratio per rank = |∪comm ∩ ∪compute| / |∪comm|; — = no communication found.",
        )
    )
    rows = []
    for arm in arms:
        r = typed[arm]
        rows.append(
            [
                arm,
                str(len(r)),
                fmt_pct(_mean_metric(r, "overlap_ratio")),
                fmt_us_as_ms(_mean_metric(r, "step_time_us")),
                fmt_us_as_ms(_mean_metric(r, "compute_us")),
                fmt_us_as_ms(_mean_metric(r, "comm_us")),
                fmt_us_as_ms(_mean_metric(r, "overlapped_us")),
                fmt_us_as_ms(_mean_metric(r, "exposed_comm_us")),
                fmt_us_as_ms(_mean_metric(r, "free_us")),
                fmt_us_as_ms(_mean_metric(r, "kernel_time_us")),
            ]
        )
    blocks.append(
        Table(
            [
                "arm",
                "ranks",
                "overlap ratio",
                "step (ms)",
                "compute (ms)",
                "comm (ms)",
                "overlapped (ms)",
                "exposed comm (ms)",
                "free (ms)",
                "kernel time (ms)",
            ],
            rows,
        )
    )
    blocks.append(
        Para(
            "Means over ranks of the profiled step. Exposed comm = comm − overlapped: the "
            "communication time nothing hides."
        )
    )
    # breakdown
    parts = {}
    for arm in arms:
        compute, comm, overlapped, free = (
            _mean_metric(typed[arm], k) for k in ("compute_us", "comm_us", "overlapped_us", "free_us")
        )
        overlapped = overlapped or 0.0
        parts[arm] = {
            "compute only": max((compute or 0.0) - overlapped, 0.0) / 1000,
            "overlapped comm": overlapped / 1000,
            "exposed comm": max((comm or 0.0) - overlapped, 0.0) / 1000,
            "free (idle)": (free or 0.0) / 1000,
        }
    blocks.append(Heading("Time breakdown", 3))
    blocks.append(
        Figure(
            "breakdown",
            figures.breakdown(arms, parts),
            "Compute only + overlapped comm + exposed comm + free = the profiled step (mean over ranks).",
        )
    )
    blocks.extend(places_section(analysis, arms))
    blocks.extend(_collectives(arms, ranks))
    blocks.extend(_ops(data, arms, ranks))
    blocks.extend(_sync(arms, ranks))
    blocks.extend(_timeline(data))
    blocks.extend(_memory_timeline(data, arms))
    return blocks


def _memory_timeline(data: RunData, arms: list[str]) -> list[Block]:
    """Per arm, allocated memory over the memory step with its phases and units (docs/memory.md)."""
    arm_stats = data.summary.arms if data.summary else {}
    timelines = {a: arm_stats[a].memory_timeline if a in arm_stats else None for a in arms}
    blocks: list[Block] = [Heading("Memory over one step", 3)]
    if not any(t and "peak" in t for t in timelines.values()):
        blocks.append(
            Para(
                "No memory timeline: this run recorded no memory step (the profiling launch records one "
                "on CPU, CUDA and NPU; see docs/memory.md)."
            )
        )
        return blocks
    for arm, timeline in timelines.items():
        if not timeline:
            continue
        if "peak" not in timeline:
            blocks.append(Banner("warning", f"`{arm}`: no memory timeline: {timeline.get('error')}"))
            continue
        peak = timeline["peak"]
        parts = ", ".join(
            f"{k.replace('_', ' ')} {fmt_bytes(v)}"
            for k, v in {**timeline["live_at_start_bytes"], **peak["in_step_by_category"]}.items()
            if v
        )
        blocks.append(
            Figure(
                f"memory_timeline_{arm}",
                figures.memory_timeline(arm, timeline),
                f"`{arm}`: allocated memory over the memory step (one more step after the profiled one, "
                f"recorded with profile_memory and fsdpbench's ranges), rank {timeline.get('rank', 0)}"
                f"{_memory_source(timeline)}. "
                f"Peak {fmt_bytes(peak['bytes'])} in {mt.where(peak)}: {parts} (live at the start by "
                "category; the step's allocations still live at the peak by the phase they were made in). "
                "Shaded: each layer's forward (blue) and backward (orange), the optimizer (green); the "
                "root's ranges along the bottom; dashed: bytes live at the start.",
            )
        )
    return blocks


def _memory_source(timeline: dict[str, Any]) -> str:
    """``, from torch_npu's … (PTA: …); grey: reserved`` for an Ascend-sourced timeline, else empty."""
    source = timeline.get("source")
    if source not in ("ascend_text", "ascend_db"):
        return ""
    files = (
        "memory_record.csv / operator_memory.csv" if source == "ascend_text" else "MEMORY_RECORD / OP_MEMORY"
    )
    return (
        f", from torch_npu's {files} (component {timeline.get('component')}: the caching allocator's "
        "allocated bytes; grey: its reserved bytes; in-step categories are the operator_memory blocks "
        "live at the peak; 'other' = bytes from before the window the known categories do not cover)"
    )


def _collectives(arms: list[str], ranks: dict[str, list[dict[str, Any]]]) -> list[Block]:
    counts: dict[str, dict[str, float]] = {}
    rows = []
    for arm in arms:
        per_type: dict[str, list[dict[str, Any]]] = {}
        for r in ranks[arm]:
            for ctype, c in (r.get("collectives") or {}).items():
                per_type.setdefault(ctype, []).append(c)
        counts[arm] = {}
        for ctype, items in sorted(per_type.items()):
            n_ranks = max(len(ranks[arm]), 1)
            count = sum(finite(c.get("count")) or 0 for c in items) / n_ranks
            counts[arm][ctype] = count
            rows.append(
                [
                    arm,
                    ctype,
                    fmt(count, 1 if count != int(count) else 0),
                    fmt_bytes(_mean_key(items, "bytes")),
                    fmt_bytes(_mean_key(items, "median_bytes")),
                    fmt_us_as_ms(_mean_key(items, "time_us")),
                    fmt(_mean_key(items, "bandwidth_gbps"), 2),
                ]
            )
    if not rows:
        return [Heading("Collectives", 3), Para("No collectives were recognised in the profiles.")]
    return [
        Heading("Collectives", 3),
        Figure(
            "collectives",
            figures.collective_counts(arms, counts),
            "Collectives per profiled step by type (mean over ranks).",
        ),
        Table(["arm", "type", "count", "bytes", "median message", "time (ms)", "bandwidth (GB/s)"], rows),
    ]


def _op_rows_from_diff(diff: DiffResult) -> list[tuple[str, float]]:
    ops = [o for o in diff.ops if finite(o.delta_us) is not None]
    ops.sort(key=lambda o: -abs(finite(o.delta_us) or 0.0))
    return [(o.op_type, (finite(o.delta_us) or 0.0) / 1000) for o in ops[:TOP_OPS]]


def _op_means(rank_list: list[dict[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in rank_list:
        for op in r.get("ops") or []:
            totals[str(op.get("op_type"))] = totals.get(str(op.get("op_type")), 0.0) + (
                finite(op.get("total_us")) or 0.0
            )
    n = max(len(rank_list), 1)
    return {k: v / n for k, v in totals.items()}


def _ops(data: RunData, arms: list[str], ranks: dict[str, list[dict[str, Any]]]) -> list[Block]:
    """Op-type delta bars, test − base: from diff.json where present, else from the analysis ops."""
    if len(arms) < 2:
        return []
    blocks: list[Block] = [Heading("Op types: time difference", 3)]
    pairs: list[tuple[str, str, list[tuple[str, float]], str]] = []
    for d in data.diff_results:
        rows = _op_rows_from_diff(d)
        if rows:
            pairs.append((d.base, d.test, rows, "diff.json"))
    if not pairs:
        base_ops = _op_means(ranks[arms[0]])
        for test in arms[1:]:
            test_ops = _op_means(ranks[test])
            deltas = [
                (k, (test_ops.get(k, 0.0) - base_ops.get(k, 0.0)) / 1000)
                for k in set(base_ops) | set(test_ops)
            ]
            deltas = sorted((d for d in deltas if d[1] != 0), key=lambda d: -abs(d[1]))[:TOP_OPS]
            if deltas:
                pairs.append((arms[0], test, deltas, "analysis (top ops per rank only)"))
    if not pairs:
        blocks.append(Para("No op-type statistics in the analysis."))
        return blocks
    for i, (base, test, rows, source) in enumerate(pairs):
        blocks.append(
            Figure(
                f"op_deltas_{i}",
                figures.op_deltas(base, test, rows, f"op_deltas_{i}"),
                f"Top {len(rows)} op types by |time difference|, {test} − {base} (source: {source}).",
            )
        )
    return blocks


def _sync(arms: list[str], ranks: dict[str, list[dict[str, Any]]]) -> list[Block]:
    names: list[str] = []
    for arm in arms:
        for r in ranks[arm]:
            names.extend(k for k in (r.get("sync") or {}) if k not in names)
    if not names:
        return []
    rows = []
    for name in names:
        means = []
        for arm in arms:
            values = [finite((r.get("sync") or {}).get(name)) for r in ranks[arm]]
            values = [v for v in values if v is not None]
            means.append(float(np.mean(values)) if values else None)
        if any(m for m in means):  # rows of zeros only say "not recorded"
            rows.append([name, *(fmt(m, 1) for m in means)])
    heading = Heading("Synchronisation and launch counts", 3)
    if not rows:
        return [
            heading,
            Para(
                f"No sync or launch task recorded ({', '.join(names)} are 0 or not recordable in these traces: "
                "CPU/gloo traces have no such tasks)."
            ),
        ]
    return [heading, Table(["count (mean over ranks)", *arms], rows)]


def _timeline(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Timeline of one step", 3)]
    if not data.timelines:
        blocks.append(
            Para(
                "No timeline: the event tables of the profiles were not available "
                "(the analysis module is missing or could not read the traces)."
            )
        )
        return blocks
    ordered = [data.timelines[a] for a in data.arms if a in data.timelines]
    ordered += [t for a, t in data.timelines.items() if a not in data.arms]
    blocks.append(
        Figure(
            "timeline",
            figures.timeline(ordered),
            "One profiled step on one rank per arm. Each row is a lane (device stream or CPU thread; "
            "⇄ marks lanes with communication); colours are event categories. Up to 8 busiest lanes "
            "per arm are shown; neighbouring events closer than a pixel are drawn merged.",
        )
    )
    blocks += _rank_timeline(data)
    return blocks


def _rank_timeline(data: RunData) -> list[Block]:
    """Every rank of the profiled step on one clock, per arm, communication by process group."""
    timelines = getattr(data, "rank_timelines", None) or {}
    ordered = [timelines[a] for a in data.arms if a in timelines]
    ordered += [t for a, t in timelines.items() if a not in data.arms]
    blocks: list[Block] = _group_table(data)
    if not ordered:
        return blocks
    return blocks + [
        Figure(
            "rank_timeline",
            figures.rank_timeline(ordered),
            "The profiled step of every rank, per arm, on the common clock from the earliest rank's step "
            "start (the analysis' clock check decides whether the ranks' clocks compare; where they do not, "
            "each rank starts at its own step start and the panel says so). Per rank: compute below, "
            "communication above, coloured by process group: shard groups (consecutive ranks, intra-node) in "
            "oranges, replicate groups (strided ranks, inter-node) in purples.",
        )
    ]


def _group_table(data: RunData) -> list[Block]:
    """Communication per process group and arm (mean over the group's ranks), when an arm has several."""
    from fsdpbench.analysis.crossrank.groups import summary_rows

    analysis = data.analysis or {}
    rows = []
    for arm in [a for a in data.arms if a in analysis] + [a for a in analysis if a not in data.arms]:
        doc = analysis[arm] if isinstance(analysis[arm], dict) else {}
        groups = summary_rows(_rank_table(doc), doc.get("process_groups") or {})
        if len(groups) < 2:
            continue
        for g in groups:
            members = ",".join(map(str, g["ranks"])) if g["ranks"] else "?"
            count = (
                g["count_min"] if g["count_min"] == g["count_max"] else f"{g['count_min']}–{g['count_max']}"
            )
            rows.append(
                [arm, g["group"], str(g["kind"]), members, str(count), fmt_us_as_ms(g["comm_us"], 3),
                 fmt_us_as_ms(g["exposed_us"], 3), fmt_bytes(g["bytes"]), fmt(g["algbw_gbps"], 3)]
            )  # fmt: skip
    if not rows:
        return []
    return [
        Para(
            "Communication per process group (mean over the group's ranks; shard = consecutive ranks, "
            "intra-node; replicate = strided ranks, inter-node; count per rank; comm and exposed in ms; bytes "
            "per rank; GB/s: algorithm bandwidth):"
        ),
        Table(["arm", "group", "kind", "ranks", "count", "comm", "exposed", "bytes", "GB/s"], rows),
    ]

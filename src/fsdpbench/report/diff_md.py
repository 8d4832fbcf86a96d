"""A ``DiffResult`` as markdown (diff.md): the "differences" tables and the "conclusions" list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdpbench.analysis.compare.diff import METRIC_NAMES, METRICS, DiffResult
from fsdpbench.analysis.estimate.whatif import AlphaBetaFit
from fsdpbench.analysis.findings import COLLECTIVE_NAMES, Finding, SideMetrics, collective_phrase
from fsdpbench.analysis.findings import places as plc
from fsdpbench.analysis.rank import memory_timeline as mt
from fsdpbench.fmt import fmt, fmt_bytes, fmt_count, fmt_pct, fmt_points, fmt_us, fmt_x
from fsdpbench.report.estimate import estimate_lines, subject_timed_scale

OPS_IN_MARKDOWN = 15
MIB = 2**20
FIT_HEADER = ["source", "type", "α (µs)", "β (µs/MiB)", "R²", "n", "status"]
FIT_SOURCES = (
    "Sources: each arm's own calls; `pooled` = both arms' calls together; `aggregate` = per-rank "
    "totals of both arms, time = α·calls + β·bytes (the only source when per-call events are not "
    "available). Estimates use the first good fit in the order: own, pooled, aggregate, other arm."
)


def metric_cells(key: str, base: float | None, test: float | None, delta: float | None) -> list[str]:
    """One side-by-side row's cells: a ratio in % with a delta in points, times in ms/µs."""
    if key == "overlap_ratio":
        return [fmt_pct(base), fmt_pct(test), fmt_points(delta)]
    return [fmt_us(base), fmt_us(test), fmt_us(delta, signed=True)]


def collective_lines(result: DiffResult) -> list[str]:
    """One line per collective type: ``"all_gather 124 vs 12 (10.3×), same bytes"`` (test vs base)."""
    return [collective_phrase(r.name, r.test, r.base) for r in result.collectives]


def fit_rows(fits: Mapping[str, Mapping[str, AlphaBetaFit]]) -> list[list[str]]:
    """The α–β fits as table rows under ``FIT_HEADER`` (β per MiB, as every size is in binary units)."""
    return [
        [
            source,
            COLLECTIVE_NAMES.get(kind, kind),
            fmt(fit.alpha_us, 2),
            fmt(None if fit.beta_us_per_byte is None else fit.beta_us_per_byte * MIB, 3),
            fmt(fit.r2, 3),
            str(fit.n),
            fit.status_text,
        ]
        for source, per_type in fits.items()
        for kind, fit in per_type.items()
    ]


def fix_lines(findings: list[Finding]) -> list[str]:
    """The actions of the findings that call for one, ranked P0 first, with the gain each is worth."""
    actions = [
        f for f in findings if f.id not in ("step_time", "invalid_comparison") and f.severity != "info"
    ]
    lines = []
    for i, f in enumerate(actions):
        est = f.estimate
        gain = None if est is None else est.step_time_delta_us
        best = None if est is None else est.best_case_step_time_delta_us
        tail = (
            f" — estimated {fmt_us(gain, signed=True)} per step"
            if gain is not None
            else f" — at best {fmt_us(best, signed=True)} per step (bound)"
            if best is not None
            else ""
        )
        lines.append(f"P{i}: {f.action}{tail}")
    return lines


CALIBRATION_HEADER = [
    "estimate",
    "subject → counterfactual",
    "predicted (estimate)",
    "measured (timed)",
    "error",
    "predicted × timed/profiled",
    "error",
    "measured (profiled)",
    "error (profiled)",
]
CALIBRATION_NOTE = (
    "Changes of the subject's step time if it became the counterfactual arm (negative = faster); "
    "predicted = the finding's estimate on the profiled step (for regrouping: comm only … with the idle "
    "time that scales with the calls; error is of the second); measured (timed) = the difference of the "
    "timed medians (summary.json); error = (predicted − measured) / |measured|, negative = the estimate "
    "promised more gain than was measured."
)


def place_lines(result: DiffResult) -> list[str]:
    """The top (unit, phase) places by |exposed Δ| and the test arm's slowest collectives, one line each
    (diff.md and the terminal); ``[]`` when neither arm has units."""
    b, t = result.base, result.test
    lines = []
    for r in plc.by_exposed_delta(result.places)[: plc.TOP_PLACES]:
        wait = r.delta("exposed_wait_us")
        lines.append(
            f"{r.unit} {r.phase}: exposed {fmt_us(r.value('base', 'exposed_us'))} ({b}) → "
            f"{fmt_us(r.value('test', 'exposed_us'))} ({t}), Δ {fmt_us(r.delta('exposed_us'), signed=True)}"
            + (f" (wait {fmt_us(wait, signed=True)})" if wait is not None else "")
            + f"; compute Δ {fmt_us(r.delta('compute_us'), signed=True)}"
        )
    only_base, only_test = plc.unmatched_units(result.places)
    if only_base or only_test:
        lines.append(
            f"units not compared (named on one side only): {b}: {', '.join(only_base) or 'none'}; "
            f"{t}: {', '.join(only_test) or 'none'}"
        )
    for side, label in (("test", t), ("base", b)):
        for e in result.top_waits[side][: plc.TOP_WAITS]:
            lines.append(
                f"{label} slowest: {e.unit or '?'} {e.phase or '?'} {e.type or '?'} "
                f"{fmt_bytes(e.bytes)}: wait {fmt_us(e.wait_us)}, transfer {fmt_us(e.transfer_us)}"
                + (f", last rank {e.last_rank}" if e.last_rank is not None else "")
            )
    return lines


def _ms(value: float | None) -> str:
    return fmt_us(None if value is None else value * 1e3, signed=True)


def _error(pct: float | None) -> str:
    return fmt(pct, 0, "%") if pct is None or pct <= 0 else "+" + fmt(pct, 0, "%")


def _predicted(e: Mapping[str, Any]) -> str:
    """The prediction; ``"−60.0 ms (comm only) … −90.0 ms (comm + idle)"`` when it has the idle term."""
    if e.get("predicted_comm_only_ms") is None:
        return _ms(e.get("predicted_ms"))
    return f"{_ms(e['predicted_comm_only_ms'])} (comm only) … {_ms(e.get('predicted_ms'))} (comm + idle)"


def calibration_rows(entries: list[Mapping[str, Any]]) -> list[list[str]]:
    """Calibration entries (diff.json ``calibration``) as rows under ``CALIBRATION_HEADER``."""
    return [
        [
            str(e.get("estimate")) + ("" if e.get("match") == "exact" else " (approximate)"),
            f"{e.get('subject')} → {e.get('counterfactual')}",
            _predicted(e),
            _ms(e.get("measured_ms")),
            _error(e.get("error_pct")),
            _ms(e.get("predicted_timed_ms")),
            _error(e.get("error_timed_pct")),
            _ms(e.get("measured_profiled_ms")),
            _error(e.get("error_profiled_pct")),
        ]
        for e in entries
    ]


def distortion_text(result: DiffResult) -> str | None:
    """``"Profiled/timed step: torch 1.05, hyper 1.67"``, or ``None`` without timed medians."""
    ratio = (result.distortion or {}).get("ratio") or {}
    if not any(v is not None for v in ratio.values()):
        return None
    return "Profiled/timed step (profiler distortion): " + ", ".join(
        f"{arm} {fmt(r, 2)}" for arm, r in ratio.items()
    )


def _bytes_parts(parts: Mapping[str, int]) -> str:
    shown = [f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in parts.items() if v]
    return ", ".join(shown) or "none"


def memory_lines(result: DiffResult) -> list[str]:
    """The memory step's peak per arm, where it falls and its categories, then where they differ
    (``[]`` without memory timelines for both arms)."""
    timeline = result.memory_timeline
    if timeline is None:
        return []
    sides = ((result.base, timeline["base"]), (result.test, timeline["test"]))
    out = [f"Memory step, rank {timeline['base']['rank']} (profile_memory on; allocated bytes):"]
    for label, side in sides:
        live = side["live_at_start_bytes"]
        step = side["in_step_by_category"]
        collective = f" (inside {side['collective'].split('::')[2]})" if side["collective"] else ""
        out.append(
            f"  {label}: peak {fmt_bytes(side['peak_bytes'])} in {side['where']}{collective} = "
            f"live at start {fmt_bytes(sum(live.values()))} ({_bytes_parts(live)}) + step allocations "
            f"{fmt_bytes(sum(step.values()))} ({_bytes_parts(step)})"
        )
    d = timeline["difference"]
    out.append(
        f"  Δ peak {'+' if d['delta_bytes'] >= 0 else '−'}{fmt_bytes(abs(d['delta_bytes']))}: "
        + mt.difference_text(result.base, result.test, timeline["base"], timeline["test"])
    )
    return out


def _table(header: list[str], rows: list[list[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` has one ``l``/``r`` per column (default: the first left, the rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|".join("---" if a == "l" else "---:" for a in align)
    return ["| " + " | ".join(header) + " |", f"|{rule}|"] + ["| " + " | ".join(row) + " |" for row in rows]


def diff_markdown(result: DiffResult) -> str:
    """A "differences" and a "conclusions" section, like the study's report."""
    b, t = result.base, result.test
    md = [f"## Differences: {t} vs {b}", ""]
    md += [f"> **Warning:** {w}" for w in result.warnings]
    if result.warnings:
        md.append("")
    sbs = result.side_by_side
    md += [f"Profiled step, mean over {len(sbs.ranks)} rank(s); Δ = {t} − {b}.", ""]
    distortion = distortion_text(result)
    if distortion:
        md += [f"{distortion}: every number below is from the profiled step.", ""]
    memory = memory_lines(result)
    if memory:
        md += [memory[0], "", *(f"- {line.strip()}" for line in memory[1:]), ""]
    rows = []
    for key in METRICS:
        base, test = getattr(sbs.mean.base, key), getattr(sbs.mean.test, key)
        if base is not None or test is not None:
            rows.append([METRIC_NAMES[key], *metric_cells(key, base, test, sbs.delta(key))])
    md += _table(["metric", b, t, "Δ"], rows)
    if len(sbs.ranks) > 1:
        rows = []
        for r in sbs.ranks:
            rb, rt = r.base or SideMetrics(), r.test or SideMetrics()
            rows.append(
                [
                    str(r.rank),
                    fmt_us(rb.step_time_us),
                    fmt_us(rt.step_time_us),
                    fmt_pct(rb.overlap_ratio),
                    fmt_pct(rt.overlap_ratio),
                    fmt_us(rb.exposed_comm_us),
                    fmt_us(rt.exposed_comm_us),
                ]
            )
        header = [
            "rank",
            f"step {b}",
            f"step {t}",
            f"overlap {b}",
            f"overlap {t}",
            f"exposed {b}",
            f"exposed {t}",
        ]
        md += ["", "Per rank:", ""] + _table(header, rows, "r" * 7)
    md += ["", "### Collectives (calls per rank)", ""]
    md += [f"- {line}" for line in collective_lines(result)] or ["- none recognised on either side"]
    if result.collectives:
        rows = [
            [
                r.name,
                fmt_count(r.base.count),
                fmt_count(r.test.count),
                fmt_x(r.count_ratio),
                fmt_bytes(r.base.bytes),
                fmt_bytes(r.test.bytes),
                fmt_us(r.base.time_us),
                fmt_us(r.test.time_us),
            ]
            for r in result.collectives
        ]
        header = [
            "type",
            f"calls {b}",
            f"calls {t}",
            "ratio",
            f"bytes {b}",
            f"bytes {t}",
            f"time {b}",
            f"time {t}",
        ]
        md += [""] + _table(header, rows)
    where = place_lines(result)
    if where:
        md += ["", "### Where: units × phases (largest exposed-comm differences first)", ""]
        md += [f"- {line}" for line in where]
    md += ["", "### Kernel time by op type (largest differences first)", ""]
    if result.ops:
        rows = [
            [
                r.label,
                fmt_us(r.base.us),
                fmt_us(r.test.us),
                fmt_us(r.delta_us, signed=True),
                fmt_count(r.base.count),
                fmt_count(r.test.count),
                r.change,
            ]
            for r in result.ops[:OPS_IN_MARKDOWN]
        ]
        md += _table(["op type", b, t, "Δ", f"calls {b}", f"calls {t}", "change"], rows, "lrrrrrl")
        if len(result.ops) > OPS_IN_MARKDOWN:
            md.append(f"\n({len(result.ops) - OPS_IN_MARKDOWN} more op types in diff.json)")
    else:
        md.append("No op types on either side.")
    md += ["", "### Sync and launch tasks (per rank)", ""]
    sync_rows = [r for r in result.sync if r.base or r.test]
    if sync_rows:
        rows = [
            [r.label, fmt_count(r.base), fmt_count(r.test), fmt_count(r.delta, signed=True)]
            for r in sync_rows
        ]
        md += _table(["task", b, t, "Δ"], rows)
    else:
        md.append("No sync or launch task counted on either side (all zero or not in the traces).")
    md += ["", "### Latency–bandwidth fits, time = α + β·bytes (estimates)", ""]
    rows = fit_rows(result.fits)
    if rows:
        md += _table(FIT_HEADER, rows, "llrrrrl")
        md.append(f"\n{FIT_SOURCES}")
    else:
        md.append("No fits: no collective with a known size on either side.")
    md += ["", f"## Conclusions: {t} vs {b}", ""]
    if not result.findings:
        md.append("No rule fired: the profiles show no difference above the thresholds.")
    for i, f in enumerate(result.findings, 1):
        md += [
            f"{i}. **{f.title}** ({f.severity})",
            f"   - Evidence: {f.evidence}",
            f"   - Likely cause: {f.cause}",
            f"   - Action: {f.action}",
        ]
        scale = subject_timed_scale(f, (result.distortion or {}).get("ratio"))
        md += [f"   - {line}" for line in estimate_lines(f.estimate, timed_scale=scale)]
    fixes = fix_lines(result.findings)
    if fixes:
        md += ["", "Fixes ranked (P0 first):", ""] + [f"- {line}" for line in fixes]
    if result.calibration:
        md += ["", "### Calibration: estimates vs the measured counterfactual arm", ""]
        md += _table(CALIBRATION_HEADER, calibration_rows(result.calibration), "ll" + "r" * 7)
        md.append(f"\n{CALIBRATION_NOTE}")
    return "\n".join(md) + "\n"

"""Diff two profile analyses (base = control, test): side by side, collectives, ops, syncs, fits, findings.

``compare(base, test)`` works on the Analysis JSON of docs/DATA.md (or an ``Analysis`` object, whose
``to_dict()`` gives it) plus, when present, each rank's ``collective_events`` table for the α–β fits.
``fsdpbench.results.diff_run(run_dir)`` does it for a profiled ``fsdpbench ab`` run: the first arm of the
manifest is the base, every other arm a test. The vocabulary follows HTA's TraceDiff (control/test, ``test − base``
deltas, change categories added/deleted/increased/decreased/unchanged).

Torch-free on purpose.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from fsdpbench.analysis import findings as fnd
from fsdpbench.analysis import whatif
from fsdpbench.errors import InputError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
METRICS = (
    "step_time_us",
    "compute_us",
    "comm_us",
    "overlap_ratio",
    "exposed_comm_us",
    "free_us",
    "kernel_time_us",
)
METRIC_NAMES = {
    "step_time_us": "step time",
    "compute_us": "compute",
    "comm_us": "communication",
    "overlap_ratio": "overlap ratio",
    "exposed_comm_us": "exposed comm",
    "free_us": "free",
    "kernel_time_us": "total kernel time",
}
SAME_BYTES_TOL = 0.01
"""Bytes within this relative difference are reported as "same bytes"."""
OPS_IN_MARKDOWN = 15


def _num(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _delta(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


# ---- input normalisation ----------------------------------------------------------------------------


def _events_table(value: Any) -> pd.DataFrame | None:
    if value is None:
        return None
    if isinstance(value, pd.DataFrame):
        return value
    return pd.DataFrame(list(value), columns=["type", "bytes", "start_ns", "end_ns"])


def normalise(analysis: Any, what: str) -> tuple[dict[str, Any], list[pd.DataFrame | None]]:
    """The Analysis JSON dict and the per-rank collective event tables (``None`` where absent).

    Accepts an ``Analysis`` object (anything with ``to_dict()``; events from ``.ranks[i].collective_events``)
    or the dict itself (events from each rank dict's optional ``collective_events``: a DataFrame or
    records). Raises ``InputError`` naming ``what`` when it is neither or has no ranks.
    """
    events: list[pd.DataFrame | None] = []
    if hasattr(analysis, "to_dict") and not isinstance(analysis, Mapping):
        data = analysis.to_dict()
        for rank in getattr(analysis, "ranks", None) or []:
            events.append(_events_table(getattr(rank, "collective_events", None)))
    elif isinstance(analysis, Mapping):
        data = dict(analysis)
        ranks = []
        for rank in data.get("ranks") or []:
            rank = dict(rank)
            events.append(_events_table(rank.pop("collective_events", None)))
            ranks.append(rank)
        data["ranks"] = ranks
    else:
        raise InputError(
            f"{what}: expected an analysis (Analysis or its JSON dict), got {type(analysis).__name__}"
        )
    if not data.get("ranks"):
        raise InputError(f"{what}: the analysis has no ranks; analyze the profiles first (fsdpbench analyze)")
    events += [None] * (len(data["ranks"]) - len(events))
    return data, events


def _mean_metrics(data: Mapping[str, Any]) -> dict[str, float | None]:
    ranks = data["ranks"]
    given = data.get("mean") or {}
    out = {}
    for key in METRICS:
        values = [_num(r.get(key)) for r in ranks]
        values = [v for v in values if v is not None]
        out[key] = (
            _num(given.get(key))
            if _num(given.get(key)) is not None
            else (sum(values) / len(values) if values else None)
        )
    return out


def _mean_table(
    ranks: list[Mapping[str, Any]], rows_of, key: str, fields: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """Mean over ranks of ``fields`` per ``key`` value; a key missing on a rank counts as 0 there."""
    per_rank = [{str(row[key]): row for row in rows_of(r)} for r in ranks]
    keys = sorted({k for table in per_rank for k in table})
    out: dict[str, dict[str, float]] = {}
    for k in keys:
        out[k] = {}
        for f in fields:
            values = [_num(table[k].get(f)) if k in table else 0.0 for table in per_rank]
            known = [v for v in values if v is not None]
            out[k][f] = sum(known) / len(known) if known else None
    return out


def _collective_rows(rank: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"type": t, **v} for t, v in (rank.get("collectives") or {}).items()]


def _sync_rows(rank: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": n, "value": v} for n, v in (rank.get("sync") or {}).items()]


# ---- the result ---------------------------------------------------------------------------------------


@dataclass
class DiffResult:
    """The comparison of a test arm against a base arm; see ``to_dict``/``to_markdown``/``render``."""

    base: str
    test: str
    side_by_side: dict[str, Any]
    collectives: list[dict[str, Any]]
    ops: list[dict[str, Any]]
    sync: list[dict[str, Any]]
    fits: dict[str, dict[str, whatif.AlphaBetaFit]]
    findings: list[fnd.Finding]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The Diff JSON of docs/DATA.md."""
        return {
            "schema_version": SCHEMA_VERSION,
            "base": self.base,
            "test": self.test,
            "warnings": list(self.warnings),
            "side_by_side": self.side_by_side,
            "collectives": self.collectives,
            "ops": self.ops,
            "sync": self.sync,
            "fits": {
                src: {t: f.to_dict() for t, f in fits.items()} for src, fits in self.fits.items() if fits
            },
            "findings": [f.to_dict() for f in self.findings],
        }

    def finding(self, rule_id: str) -> fnd.Finding | None:
        """The first finding of ``rule_id``, or ``None``."""
        return next((f for f in self.findings if f.id == rule_id), None)

    # -- markdown ------------------------------------------------------------------------------------

    def collective_lines(self) -> list[str]:
        """One line per collective type: ``"AllGather 124 vs 12 (10.3×), same bytes"`` (test vs base)."""
        lines = []
        for r in self.collectives:
            name = fnd.COLLECTIVE_NAMES.get(r["type"], r["type"])
            ratio = f" ({r['count_ratio']:.1f}×)" if r["count_ratio"] is not None else ""
            br = r["bytes_ratio"]
            by = (
                "bytes n/a"
                if br is None
                else "same bytes"
                if abs(br - 1) <= SAME_BYTES_TOL
                else f"bytes {br:.2f}×"
            )
            lines.append(
                f"{name} {fnd.fmt_count(r['test_count'])} vs {fnd.fmt_count(r['base_count'])}{ratio}, {by}"
            )
        return lines

    def to_markdown(self) -> str:
        """A "differences" and a "conclusions" section, like the study's report."""
        b, t = self.base, self.test
        md = [f"## Differences: {t} vs {b}", ""]
        for w in self.warnings:
            md.append(f"> **Warning:** {w}")
        if self.warnings:
            md.append("")
        mean = self.side_by_side["mean"]
        n_ranks = len(self.side_by_side["ranks"])
        md += [
            f"Profiled step, mean over {n_ranks} rank(s); Δ = {t} − {b}.",
            "",
            f"| metric | {b} | {t} | Δ |",
            "|---|---:|---:|---:|",
        ]
        for key in METRICS:
            vb, vt, dv = mean["base"].get(key), mean["test"].get(key), mean["delta"].get(key)
            if vb is None and vt is None:
                continue
            if key == "overlap_ratio":
                cells = (fnd.fmt_ratio(vb), fnd.fmt_ratio(vt), fnd.fmt_points(dv))
            else:
                cells = (fnd.fmt_us(vb), fnd.fmt_us(vt), fnd.fmt_us(dv, signed=True))
            md.append(f"| {METRIC_NAMES[key]} | " + " | ".join(cells) + " |")
        if n_ranks > 1:
            md += [
                "",
                "Per rank:",
                "",
                f"| rank | step {b} | step {t} | overlap {b} | overlap {t} | exposed {b} | exposed {t} |",
                "|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in self.side_by_side["ranks"]:
                rb, rt = r["base"] or {}, r["test"] or {}
                md.append(
                    f"| {r['rank']} | {fnd.fmt_us(rb.get('step_time_us'))} | {fnd.fmt_us(rt.get('step_time_us'))} | "
                    f"{fnd.fmt_ratio(rb.get('overlap_ratio'))} | {fnd.fmt_ratio(rt.get('overlap_ratio'))} | "
                    f"{fnd.fmt_us(rb.get('exposed_comm_us'))} | {fnd.fmt_us(rt.get('exposed_comm_us'))} |"
                )
        md += ["", "### Collectives (calls per rank)", ""]
        md += [f"- {line}" for line in self.collective_lines()] or ["- none recognised on either side"]
        if self.collectives:
            md += [
                "",
                f"| type | calls {b} | calls {t} | ratio | bytes {b} | bytes {t} | time {b} | time {t} |",
                "|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in self.collectives:
                md.append(
                    f"| {fnd.COLLECTIVE_NAMES.get(r['type'], r['type'])} | {fnd.fmt_count(r['base_count'])} | "
                    f"{fnd.fmt_count(r['test_count'])} | {_fmt_x(r['count_ratio'])} | {fnd.fmt_bytes(r['base_bytes'])} | "
                    f"{fnd.fmt_bytes(r['test_bytes'])} | {fnd.fmt_us(r['base_time_us'])} | {fnd.fmt_us(r['test_time_us'])} |"
                )
        md += ["", "### Kernel time by op type (largest differences first)", ""]
        if self.ops:
            md += [
                f"| op type | {b} | {t} | Δ | calls {b} | calls {t} | change |",
                "|---|---:|---:|---:|---:|---:|---|",
            ]
            for r in self.ops[:OPS_IN_MARKDOWN]:
                md.append(
                    f"| {r['op_type']} | {fnd.fmt_us(r['base_us'])} | {fnd.fmt_us(r['test_us'])} | "
                    f"{fnd.fmt_us(r['delta_us'], signed=True)} | {fnd.fmt_count(r['base_count'])} | "
                    f"{fnd.fmt_count(r['test_count'])} | {r['change']} |"
                )
            if len(self.ops) > OPS_IN_MARKDOWN:
                md.append(f"\n({len(self.ops) - OPS_IN_MARKDOWN} more op types in diff.json)")
        else:
            md.append("No op types on either side.")
        md += ["", "### Sync and launch tasks (per rank)", ""]
        sync_rows = [r for r in self.sync if r["base"] or r["test"]]
        if sync_rows:
            md += [f"| task | {b} | {t} | Δ |", "|---|---:|---:|---:|"]
            for r in sync_rows:
                d = (
                    "n/a"
                    if r["delta"] is None
                    else f"{r['delta']:+.0f}"
                    if float(r["delta"]).is_integer()
                    else f"{r['delta']:+.1f}"
                )
                md.append(
                    f"| {fnd.SYNC_NAMES.get(r['name'], r['name'])} | {fnd.fmt_count(r['base'])} | {fnd.fmt_count(r['test'])} | {d} |"
                )
        else:
            md.append("None counted on either side (all zero or not in the traces).")
        md += ["", "### Latency–bandwidth fits, time = α + β·bytes (estimates)", ""]
        rows = [(src, kind, fit) for src, fits in self.fits.items() for kind, fit in fits.items()]
        if rows:
            md += ["| source | type | α | β (µs/MB) | R² | n | status |", "|---|---|---:|---:|---:|---:|---|"]
            for src, kind, fit in rows:
                md.append(
                    f"| {src} | {fnd.COLLECTIVE_NAMES.get(kind, kind)} | {fnd.fmt_us(fit.alpha_us)} | "
                    f"{'n/a' if fit.beta_us_per_byte is None else f'{fit.beta_us_per_byte * 1e6:.3g}'} | "
                    f"{'n/a' if fit.r2 is None else f'{fit.r2:.3f}'} | {fit.n} | {_fit_status(fit)} |"
                )
            md.append(
                "\nSources: each arm's own calls; `pooled` = both arms' calls together; `aggregate` = per-rank "
                "totals of both arms, time = α·calls + β·bytes (the only source when per-call events are not "
                "available). Estimates use the first good fit in the order: own, pooled, aggregate, other arm."
            )
        else:
            md.append("No fits: no collective with a known size on either side.")
        md += ["", f"## Conclusions: {t} vs {b}", ""]
        if not self.findings:
            md.append("No rule fired: the profiles show no difference above the thresholds.")
        for i, f in enumerate(self.findings, 1):
            md += [
                f"{i}. **{f.title}** ({f.severity})",
                f"   - Evidence: {f.evidence}",
                f"   - Likely cause: {f.cause}",
                f"   - Action: {f.action}",
            ]
            est = _estimate_text(f.estimate)
            if est:
                md.append(f"   - {est}")
        actions = [
            f
            for f in self.findings
            if f.id not in ("step_time", "invalid_comparison") and f.severity != "info"
        ]
        if actions:
            md += ["", "Fixes ranked (P0 first):", ""]
            for i, f in enumerate(actions):
                est = f.estimate or {}
                gain, best = est.get("step_time_delta_us"), est.get("best_case_step_time_delta_us")
                tail = (
                    f" — estimated {fnd.fmt_us(gain, signed=True)} per step"
                    if isinstance(gain, (int, float))
                    else f" — at best {fnd.fmt_us(best, signed=True)} per step (bound)"
                    if isinstance(best, (int, float))
                    else ""
                )
                md.append(f"- P{i}: {f.action}{tail}")
        return "\n".join(md) + "\n"

    # -- terminal --------------------------------------------------------------------------------------

    def render(self, console: Any = None) -> None:
        """Print rich tables: the side by side, collectives, top op deltas, syncs, then the findings."""
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        b, t = self.base, self.test
        for w in self.warnings:
            console.print(f"[bold yellow]warning:[/] {w}")
        table = Table(title=f"{t} vs {b}: profiled step, rank mean")
        for col in ("metric", b, t, "Δ"):
            table.add_column(col, justify="left" if col == "metric" else "right")
        mean = self.side_by_side["mean"]
        for key in METRICS:
            vb, vt, dv = mean["base"].get(key), mean["test"].get(key), mean["delta"].get(key)
            if key == "overlap_ratio":
                table.add_row(METRIC_NAMES[key], fnd.fmt_ratio(vb), fnd.fmt_ratio(vt), fnd.fmt_points(dv))
            else:
                table.add_row(METRIC_NAMES[key], fnd.fmt_us(vb), fnd.fmt_us(vt), fnd.fmt_us(dv, signed=True))
        console.print(table)
        if self.collectives:
            table = Table(title="collectives (calls per rank)")
            for col in ("type", f"calls {b}", f"calls {t}", "ratio", f"bytes {b}", f"bytes {t}"):
                table.add_column(col, justify="left" if col == "type" else "right")
            for r in self.collectives:
                table.add_row(
                    fnd.COLLECTIVE_NAMES.get(r["type"], r["type"]),
                    fnd.fmt_count(r["base_count"]),
                    fnd.fmt_count(r["test_count"]),
                    _fmt_x(r["count_ratio"]),
                    fnd.fmt_bytes(r["base_bytes"]),
                    fnd.fmt_bytes(r["test_bytes"]),
                )
            console.print(table)
        if self.ops:
            table = Table(title="kernel time by op type, largest differences")
            for col in ("op type", b, t, "Δ", f"calls {b}", f"calls {t}"):
                table.add_column(col, justify="left" if col == "op type" else "right")
            for r in self.ops[:10]:
                table.add_row(
                    r["op_type"],
                    fnd.fmt_us(r["base_us"]),
                    fnd.fmt_us(r["test_us"]),
                    fnd.fmt_us(r["delta_us"], signed=True),
                    fnd.fmt_count(r["base_count"]),
                    fnd.fmt_count(r["test_count"]),
                )
            console.print(table)
        sync_rows = [r for r in self.sync if r["base"] or r["test"]]
        if sync_rows:
            table = Table(title="sync / launch tasks per rank")
            for col in ("task", b, t, "Δ"):
                table.add_column(col, justify="left" if col == "task" else "right")
            for r in sync_rows:
                table.add_row(
                    fnd.SYNC_NAMES.get(r["name"], r["name"]),
                    fnd.fmt_count(r["base"]),
                    fnd.fmt_count(r["test"]),
                    fnd.fmt_count(r["delta"]),
                )
            console.print(table)
        colours = {"high": "red", "medium": "yellow", "low": "cyan", "info": "blue"}
        for i, f in enumerate(self.findings, 1):
            console.print(f"{i}. [{colours.get(f.severity, 'white')}]{f.severity}[/] [bold]{f.title}[/]")
            console.print(f"   evidence: {f.evidence}", highlight=False)
            console.print(f"   action: {f.action}", highlight=False)
            est = _estimate_text(f.estimate)
            if est:
                console.print(f"   {est}", highlight=False)


def _fit_status(fit: whatif.AlphaBetaFit) -> str:
    if fit.poor:
        return f"poor fit (R² < {whatif.POOR_FIT_R2})"
    if fit.ok and fit.alpha_us is not None and fit.alpha_us < 0:
        return "ok, α < 0 (not resolved)"
    return fit.status


def _fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}×"


def _estimate_text(est: Mapping[str, Any] | None) -> str:
    if not est:
        return ""
    label = str(est.get("label", "estimate")).capitalize()
    parts = []
    for key, name in (
        ("step_time_delta_us", "step time"),
        ("exposed_comm_delta_us", "exposed comm"),
        ("comm_delta_us", "communication"),
    ):
        if isinstance(est.get(key), (int, float)):
            parts.append(f"{name} {fnd.fmt_us(est[key], signed=True)}")
    if isinstance(est.get("best_case_step_time_delta_us"), (int, float)):
        parts.append(f"best case step time {fnd.fmt_us(est['best_case_step_time_delta_us'], signed=True)}")
    if isinstance(est.get("step_time_lower_bound_us"), (int, float)):
        parts.append(
            f"lower bound on the step max(compute, comm) = {fnd.fmt_us(est['step_time_lower_bound_us'])}"
        )
    layer = est.get("one_bucket_per_layer")
    if isinstance(layer, Mapping) and isinstance(layer.get("step_time_delta_us"), (int, float)):
        parts.append(
            f"one bucket per layer: step time {fnd.fmt_us(layer['step_time_delta_us'], signed=True)}"
        )
    if not parts:
        return f"{label}: {est.get('note', 'not priced')}" if label == "Estimate" else ""
    scenario = est.get("scenario") or est.get("grouping")
    return f"{label}{f' — {scenario}' if scenario else ''}: " + "; ".join(parts)


# ---- comparison ---------------------------------------------------------------------------------------


def _side_by_side(db: Mapping[str, Any], dt: Mapping[str, Any]) -> dict[str, Any]:
    mb, mt = _mean_metrics(db), _mean_metrics(dt)
    by_rank_b = {r.get("rank", i): r for i, r in enumerate(db["ranks"])}
    by_rank_t = {r.get("rank", i): r for i, r in enumerate(dt["ranks"])}
    ranks = []
    for rank in sorted(set(by_rank_b) | set(by_rank_t), key=lambda x: (x is None, x)):
        rb = {k: _num(by_rank_b[rank].get(k)) for k in METRICS} if rank in by_rank_b else None
        rt = {k: _num(by_rank_t[rank].get(k)) for k in METRICS} if rank in by_rank_t else None
        delta = {k: _delta(rt[k], rb[k]) for k in METRICS} if rb and rt else None
        ranks.append({"rank": rank, "base": rb, "test": rt, "delta": delta})
    return {
        "metrics": list(METRICS),
        "mean": {
            "base": mb,
            "test": mt,
            "delta": {k: _delta(mt[k], mb[k]) for k in METRICS},
            "ratio": {k: _ratio(mt[k], mb[k]) for k in METRICS if k != "overlap_ratio"},
        },
        "ranks": ranks,
    }


def _collectives(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[dict[str, Any]]:
    fields = ("count", "bytes", "time_us")
    cb = _mean_table(db["ranks"], _collective_rows, "type", fields)
    ct = _mean_table(dt["ranks"], _collective_rows, "type", fields)
    order = list(fnd.COLLECTIVE_NAMES)
    rows = []
    for kind in sorted(set(cb) | set(ct), key=lambda k: (order.index(k) if k in order else len(order), k)):
        b, t = cb.get(kind, {}), ct.get(kind, {})
        rows.append(
            {
                "type": kind,
                "base_count": b.get("count"),
                "test_count": t.get("count"),
                "count_ratio": _ratio(t.get("count"), b.get("count")),
                "base_bytes": b.get("bytes"),
                "test_bytes": t.get("bytes"),
                "bytes_ratio": _ratio(t.get("bytes"), b.get("bytes")),
                "base_time_us": b.get("time_us"),
                "test_time_us": t.get("time_us"),
                "time_delta_us": _delta(t.get("time_us"), b.get("time_us")),
            }
        )
    return rows


def _ops(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[dict[str, Any]]:
    fields = ("total_us", "count")
    ob = _mean_table(db["ranks"], lambda r: r.get("ops") or [], "op_type", fields)
    ot = _mean_table(dt["ranks"], lambda r: r.get("ops") or [], "op_type", fields)
    rows = []
    for op in set(ob) | set(ot):
        b, t = ob.get(op), ot.get(op)
        bu = b["total_us"] if b else 0.0
        tu = t["total_us"] if t else 0.0
        delta = _delta(tu, bu)
        change = (
            "added"
            if not b or not b["count"]
            else "deleted"
            if not t or not t["count"]
            else "unchanged"
            if delta == 0
            else "increased"
            if delta and delta > 0
            else "decreased"
        )
        rows.append(
            {
                "op_type": op,
                "base_us": bu,
                "test_us": tu,
                "delta_us": delta,
                "base_count": b["count"] if b else 0.0,
                "test_count": t["count"] if t else 0.0,
                "change": change,
            }
        )
    return sorted(rows, key=lambda r: (-abs(r["delta_us"] or 0.0), r["op_type"]))


def _sync(db: Mapping[str, Any], dt: Mapping[str, Any]) -> list[dict[str, Any]]:
    sb = _mean_table(db["ranks"], _sync_rows, "name", ("value",))
    st = _mean_table(dt["ranks"], _sync_rows, "name", ("value",))
    order = list(fnd.SYNC_NAMES)
    rows = []
    for name in sorted(set(sb) | set(st), key=lambda k: (order.index(k) if k in order else len(order), k)):
        b, t = sb.get(name, {}).get("value"), st.get(name, {}).get("value")
        rows.append({"name": name, "base": b, "test": t, "delta": _delta(t, b)})
    return rows


def _aggregate_fits(db: Mapping[str, Any], dt: Mapping[str, Any]) -> dict[str, whatif.AlphaBetaFit]:
    points: dict[str, list[tuple[Any, Any, Any]]] = {}
    for data in (db, dt):
        for rank in data["ranks"]:
            for kind, c in (rank.get("collectives") or {}).items():
                points.setdefault(kind, []).append((c.get("count"), c.get("bytes"), c.get("time_us")))
    return {k: whatif.fit_aggregates(*zip(*pts, strict=True)) for k, pts in sorted(points.items())}


def _describe(label: str, data: Mapping[str, Any], side_ctx: Mapping[str, Any]) -> str:
    ws = side_ctx.get("world_size") or len(data["ranks"])
    steps = sorted({r.get("step") for r in data["ranks"] if r.get("step") is not None})
    src = ", ".join(str(s) for s in (data.get("sources") or [])) or "in-memory analysis"
    return f"{label} ({ws} ranks{f', step {steps[0]}' if len(steps) == 1 else ''}; {src})"


def _problems(db: Mapping[str, Any], dt: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
    problems = []
    parity = context.get("parity") or {}
    if parity.get("valid") is False:
        problems.append(
            f"numerical parity failed ({parity.get('reason') or 'losses differ'}): the arms may not "
            "compute the same thing"
        )
    cb, ct = context.get("base") or {}, context.get("test") or {}
    wb, wt = cb.get("world_size") or len(db["ranks"]), ct.get("world_size") or len(dt["ranks"])
    if wb != wt:
        problems.append(f"world size differs ({wb} vs {wt} ranks): per-rank communication is not comparable")
    elif len(db["ranks"]) != len(dt["ranks"]):
        problems.append(
            f"ranks analysed differ ({len(db['ranks'])} vs {len(dt['ranks'])} of {wb}): a rank's "
            "profile is missing or unreadable, so the means cover different ranks"
        )
    mb, mt = cb.get("model"), ct.get("model")
    if isinstance(mb, Mapping) and isinstance(mt, Mapping) and mb != mt:
        keys = sorted(k for k in set(mb) | set(mt) if mb.get(k) != mt.get(k))
        shown = ", ".join(f"{k} {mb.get(k)!r} vs {mt.get(k)!r}" for k in keys[:5])
        problems.append(f"model differs ({shown}): the arms ran different workloads")
    nb = {len(r.get("steps") or []) for r in db["ranks"]} - {0}
    nt = {len(r.get("steps") or []) for r in dt["ranks"]} - {0}
    if nb and nt and nb != nt:
        problems.append(
            f"number of profiled steps differs ({sorted(nb)} vs {sorted(nt)}): totals cover different work"
        )
    sb = {r.get("step") for r in db["ranks"]} - {None}
    st = {r.get("step") for r in dt["ranks"]} - {None}
    if sb and st and sb != st:
        problems.append(
            f"profiled step differs (step {sorted(sb)} vs {sorted(st)}): warm-up effects may differ"
        )
    return problems


def compare(
    base: Any,
    test: Any,
    *,
    base_label: str = "base",
    test_label: str = "test",
    base_arm: dict[str, Any] | None = None,
    test_arm: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> DiffResult:
    """Compare a test analysis against a base (control) analysis.

    Args:
        base, test: ``Analysis`` objects or their JSON dicts (docs/DATA.md); per-rank
            ``collective_events`` tables, when present, feed the per-call α–β fits.
        base_label, test_label: the names used in every table and sentence.
        base_arm, test_arm: the arms' options from manifest.json (``prefetch``, ``comm_fusion``,
            ``reshard_after_forward``); the prefetch finding names them.
        context: ``{"parity": summary.json parity, "base": {"world_size", "model"}, "test": {...},
            "num_layers": int}``; differences make an ``invalid_comparison`` finding and a warning.

    Returns:
        The ``DiffResult``: deltas are ``test − base`` in µs, ratios ``test / base``; counts are per rank
        (mean over ranks).
    """
    context = dict(context or {})
    db, eb = normalise(base, f"base ({base_label})")
    dt, et = normalise(test, f"test ({test_label})")
    warnings = [
        f"{lab}: {w}" for lab, d in ((base_label, db), (test_label, dt)) for w in d.get("warnings") or []
    ]
    problems = _problems(db, dt, context)
    if problems:
        what = (
            f"comparing {_describe(base_label, db, context.get('base') or {})} with "
            f"{_describe(test_label, dt, context.get('test') or {})}"
        )
        warnings += [f"{what}: {p}" for p in problems]
    fits = {
        "base": whatif.fit_ranks(eb),
        "test": whatif.fit_ranks(et),
        "pooled": whatif.fit_ranks(eb + et),
        "aggregate": _aggregate_fits(db, dt),
    }
    side = _side_by_side(db, dt)
    collectives, ops, sync = _collectives(db, dt), _ops(db, dt), _sync(db, dt)
    for lab, rows_key in ((base_label, "base_count"), (test_label, "test_count")):
        if not any(r[rows_key] for r in collectives):
            warnings.append(
                f"{lab}: no collectives recognised; its overlap and comm numbers are not meaningful"
            )
    rule_input = fnd.RuleInput(
        labels={"base": base_label, "test": test_label},
        mean={"base": side["mean"]["base"], "test": side["mean"]["test"]},
        ranks={"base": db["ranks"], "test": dt["ranks"]},
        collectives=collectives,
        ops=ops,
        sync=sync,
        fits=fits,
        arms={"base": base_arm, "test": test_arm},
        problems=problems,
        num_layers=context.get("num_layers"),
    )
    return DiffResult(
        base_label, test_label, side, collectives, ops, sync, fits, fnd.evaluate(rule_input), warnings
    )

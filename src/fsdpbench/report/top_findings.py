"""The report's first screen after the verdict: the top three findings of each diff, one line each.

A line says what (the finding's title and severity), where (the unit and phase that carry its estimate),
how much (the estimated or measured change of the step) and what to do (its action), and links to the full
finding in the Diagnosis section further down. The step-time headline and the invalid-comparison finding are
left out: the verdict above already says both.
"""

from __future__ import annotations

from fsdpbench.analysis.compare.diff import DiffResult
from fsdpbench.analysis.estimate.whatif import SOURCE_CLOSED_FORM, SOURCE_REPLAY, Estimate
from fsdpbench.analysis.findings import Finding
from fsdpbench.analysis.findings.replay import place_text
from fsdpbench.fmt import MISSING, fmt_us
from fsdpbench.report.blocks import Block, Bullets, Heading, Para, anchor
from fsdpbench.report.estimate import place_gain
from fsdpbench.report.load import RunData

TOP_FINDINGS = 3
"""Findings shown per diff on the first screen."""

SAID_BY_THE_VERDICT = frozenset({"invalid_comparison", "step_time"})
"""Finding ids the verdict already states (the ranking pins them first); not repeated among the top ones."""

HEADING = "Top findings: what to do first"


def top_findings(findings: list[Finding], n: int = TOP_FINDINGS) -> list[tuple[int, Finding]]:
    """The first ``n`` findings in the diff's own ranking that are not the verdict's, each with its number in
    the full list (1-based, as the Diagnosis section numbers them)."""
    ranked = [(i, f) for i, f in enumerate(findings, 1) if f.id not in SAID_BY_THE_VERDICT]
    return ranked[:n]


def where_text(est: Estimate | None) -> str | None:
    """The unit and phase an estimate rests on most: its per-unit row with the largest gain, else the first
    critical-path place the replayed edit changed; ``None`` when it names no place."""
    if est is None:
        return None
    if est.per_unit:
        top = max(est.per_unit, key=place_gain)
        if top.get("unit") and top.get("phase"):
            return f"{top['unit']} {top['phase']}"
    if est.changed:
        return place_text(est.changed[0])
    return None


def how_much_text(est: Estimate | None) -> str:
    """The change of the step in a few words: ``step time −20.5 ms (estimate, closed form, profiled step)``,
    ``exposed comm −163.0 ms (measured)``, or ``not priced``."""
    if est is None:
        return "not priced"
    measured = est.label == "measured"
    known = [
        (name, value)
        for value, name in (
            (est.step_time_delta_us, "step time"),
            (est.exposed_comm_delta_us, "exposed comm"),
            (est.comm_delta_us, "communication"),
            (est.best_case_step_time_delta_us, "best case step time"),
        )
        if value is not None
    ]
    if not known:
        return "not priced"
    name, value = known[0]
    if measured:
        return f"{name} {fmt_us(value, signed=True)} (measured)"
    how = {SOURCE_REPLAY: "replayed", SOURCE_CLOSED_FORM: "closed form"}.get(est.source or "")
    return f"{name} {fmt_us(value, signed=True)} (estimate{f', {how}' if how else ''}, profiled step)"


def finding_line(finding: Finding, number: int, link: str) -> str:
    """One line: what, where, how much, what to do, and a link to the full finding."""
    parts = [f"**[{(finding.severity or MISSING).upper()}] {finding.title or finding.id}**"]
    where = where_text(finding.estimate)
    if where:
        parts.append(f"where: {where}")
    parts.append(f"how much: {how_much_text(finding.estimate)}")
    if finding.action:
        parts.append(f"do: {finding.action}")
    parts.append(f"[finding {number} below](#{link})")
    return " — ".join(parts)


def top_findings_section(data: RunData) -> list[Block]:
    """The heading and one bulleted line per top finding of each diff; nothing when the run has no diff (the
    Diagnosis section says why)."""
    diffs: list[DiffResult] = data.diff_results
    if not diffs:
        return []
    blocks: list[Block] = [Heading(HEADING, 3)]
    for d in diffs:
        pair = f"{d.test} vs {d.base}"
        top = top_findings(d.findings)
        lead = f"{pair}: " if len(diffs) > 1 else ""
        if not top:
            blocks.append(Para(f"{lead}no rule found a cause beyond the step-time headline."))
            continue
        if lead:
            blocks.append(Para(f"**{pair}**"))
        blocks.append(Bullets([finding_line(f, i, anchor(pair)) for i, f in top]))
    return blocks

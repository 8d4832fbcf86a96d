"""The report's phase section: forward, backward, optimizer and remainder per arm, and per comparison
each phase's ratio with its interval (from summary.json; docs/phases.md)."""

from __future__ import annotations

from fsdpbench.analysis.findings import finite
from fsdpbench.fmt import MISSING, fmt, speed_text
from fsdpbench.report.blocks import Block, Heading, Para, Table
from fsdpbench.report.load import RunData
from fsdpbench.results.phases import MARKED_PHASES, PHASES


def phase_section(data: RunData) -> list[Block]:
    """Heading, the per-arm phase table (slowest rank and rank 0), the per-phase comparison table."""
    blocks: list[Block] = [Heading("Phase times per arm")]
    summary = data.summary
    arms = summary.arms if summary else {}
    with_phases = {a: s.phases for a, s in arms.items() if s.phases}
    if not with_phases:
        blocks.append(
            Para("No phase times: the run's steps carry none (recorded by fsdpbench since issue 21).")
        )
        return blocks
    rows = []
    for arm, entry in with_phases.items():
        for view, name in (("max_over_ranks", "slowest rank"), ("rank0", "rank 0")):
            values = entry.get(view) or {}
            rows.append(
                [arm, name, *(fmt(values.get(p), 1) for p in PHASES), str(len(entry.get("rounds") or []))]
            )
    blocks.append(Table(["arm", "ranks", *(f"{p} (ms)" for p in PHASES), "rounds"], rows))
    clocks = sorted({str(e.get("clock")) for e in with_phases.values()})
    blocks.append(
        Para(
            "Median over rounds of each round's median over timed steps. **slowest rank**: per phase the "
            "maximum over ranks, so the phases do not sum to the step time; **rank 0**: its own split, which "
            f"sums to its step time. Measured with {' and '.join(f'`{c}`' for c in clocks)} "
            "(device events on the compute stream, or the host clock on CPU; see docs/phases.md)."
        )
    )
    comp_rows = []
    for comp in summary.comparisons if summary else []:
        for phase in MARKED_PHASES:
            c = (comp.phases or {}).get(phase)
            if not c:
                continue
            ci = c.ci95 or (None, None)
            comp_rows.append(
                [
                    f"{comp.test} vs {comp.base}",
                    phase,
                    fmt(c.ratio, 3),
                    f"{fmt(ci[0], 3)} – {fmt(ci[1], 3)}" if len(ci) == 2 and None not in ci else MISSING,
                    speed_text(finite(c.ratio)),
                    "**no CI: cannot tell yet**"
                    if not c.ci95
                    else {True: "yes", False: "**not significant**"}.get(c.significant, MISSING),
                ]
            )
    if comp_rows:
        blocks.append(
            Table(
                ["comparison", "phase", "ratio test/base", "95% CI of ratio", "test vs base", "significant"],
                comp_rows,
            )
        )
        blocks.append(
            Para(
                "Per phase: the slowest rank's per-round medians compared by the step time's rule (paired by "
                "round: the interval each verdict names); fewer than 3 rounds per arm give no interval."
            )
        )
    return blocks

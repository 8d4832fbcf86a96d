"""The index report of a sweep tree: the study's overview table, a plot and a table comparing the cells.

Reads ``sweep.json`` and each cell's ``summary.json`` / ``analysis.json`` / ``diff.json``; never imports
torch. The overview (``overview``) is also what ``fsdpbench sweep`` prints at the end.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpbench.analysis.compare.diff import DiffResult, diffs_from_json
from fsdpbench.analysis.findings import finite
from fsdpbench.analysis.output.result import Analysis, convert_analysis
from fsdpbench.errors import InputError
from fsdpbench.fmt import MISSING, fmt, fmt_pct, speed_text
from fsdpbench.report import figures
from fsdpbench.report.blocks import Banner, Block, Code, Figure, Heading, Para, Table, render
from fsdpbench.results import run_folder, stats
from fsdpbench.results.cells import cell_settings
from fsdpbench.results.run_folder import read_json_if_readable
from fsdpbench.results.summary import ArmComparison, Summary

MAX_ARM_COLUMNS = 4
"""Up to this many distinct arm labels get a median column each in the overview; more share one column."""


def _mean_overlap(analyses: Mapping[str, Analysis], arm: str) -> float | None:
    """The arm's overlap ratio, mean over its ranks (those without one left out)."""
    return finite(analyses[arm].mean.get("overlap_ratio")) if arm in analyses else None


def _diff_mean_overlap(diff: DiffResult | None, side: str) -> float | None:
    return None if diff is None else finite(diff.side_by_side.mean[side].overlap_ratio)


def _top_finding(diff: DiffResult | None, test: str) -> str | None:
    """The diff's first finding after the step-time headline, as a clause: its title, the test arm's
    name replaced by "its" when the finding is about the test arm ("its communication is 10.3× more
    fragmented than torch's")."""
    for finding in diff.findings if diff is not None else []:
        if finding.id == "step_time" or not finding.title:
            continue
        title = finding.title
        if finding.subject == test and title.startswith(f"{test}'s "):
            return "its " + title[len(test) + 3 :]
        if title[:1].isupper() and title[1:2].islower():
            title = title[0].lower() + title[1:]
        return title
    return None


def conclusion(
    comparison: ArmComparison,
    *,
    rounds: tuple[int, int] | None = None,
    diff: DiffResult | None = None,
    overlap: tuple[float | None, float | None] = (None, None),
    parity_valid: bool | None = True,
) -> str:
    """One line from a comparison's verdict and the diff's top finding.

    "hyper 1.09× faster (−8.3%); its communication is 10.3× more fragmented than torch's, overlap 44%
    (hyper) vs 58% (torch)". The speed part follows the verdict's three outcomes (``stats.verdict_text``):
    a speed when the CI excludes 1, "no difference detected" when it contains 1, "cannot tell yet" without
    a CI (an arm with one round).

    Args:
        comparison: one entry of the summary's ``comparisons``.
        rounds: (base, test) rounds, when the comparison does not record them (summaries before ``rounds``).
        diff: the diff.json object of this pair (profiled cells), for the top finding and the overlaps.
        overlap: (base, test) mean overlap ratios, used when ``diff`` has none.
        parity_valid: ``False`` marks the line invalid (the arms' losses differ).
    """
    base = "base" if comparison.base is None else str(comparison.base)
    test = "test" if comparison.test is None else str(comparison.test)
    ratio = finite(comparison.ratio)
    if ratio is None or ratio <= 0:
        return MISSING
    ci = _ci(comparison)
    recorded = comparison.rounds
    if recorded is not None and len(recorded) == 2:
        rounds = (int(recorded[0]), int(recorded[1]))
    if ci is None:
        speed = (
            f"cannot tell yet: {test} {speed_text(ratio)} from {stats.rounds_phrase(base, test, rounds)}, "
            "no CI (needs 3+ rounds per arm)"
        )
    elif ci[0] <= 1.0 <= ci[1]:
        speed = f"no difference detected ({test}/{base} {ratio:.3f}, CI {ci[0]:.3f}–{ci[1]:.3f})"
    else:
        speed = f"{test} {speed_text(ratio)}"
    details = []
    top = _top_finding(diff, test)
    if top:
        details.append(top)
    ov_base = _diff_mean_overlap(diff, "base")
    ov_test = _diff_mean_overlap(diff, "test")
    if ov_base is None or ov_test is None:
        ov_base, ov_test = overlap
    if ov_base is not None and ov_test is not None:
        details.append(f"overlap {fmt_pct(ov_test, 0)} ({test}) vs {fmt_pct(ov_base, 0)} ({base})")
    line = speed + ("; " + ", ".join(details) if details else "")
    return ("INVALID (losses differ): " + line) if parity_valid is False else line


@dataclass
class Overview:
    """The study's overview table: one row per comparison of every cell."""

    headers: list[str]
    rows: list[list[str]]


def _arm_rounds(summary: Summary, base: str, test: str) -> tuple[int, int] | None:
    counts = [len(summary.arms[a].rounds) if a in summary.arms else 0 for a in (base, test)]
    return (counts[0], counts[1]) if all(counts) else None


def _ci(comparison: ArmComparison) -> tuple[float, float] | None:
    """The comparison's 95% CI when it has both ends."""
    ci = comparison.ci95
    return (float(ci[0]), float(ci[1])) if ci is not None and len(ci) == 2 and None not in ci else None


@dataclass
class CellResults:
    """What a cell's run folder holds, typed; a file that is missing, unreadable or not of its kind reads
    as empty (the cell's row then shows less), never as an error: the index is written mid-sweep."""

    summary: Summary
    analyses: dict[str, Analysis]
    diffs: list[DiffResult]
    skipped: list[str] = field(default_factory=list)
    """Why a piece of the cell's files was left out: an analysis.json (or an arm of it) that does not decode."""

    @classmethod
    def read(cls, run_dir: Path | None) -> CellResults:
        """summary.json, analysis.json and diff.json of ``run_dir`` (None: a cell that has no folder yet)."""
        raw = read_json_if_readable(run_dir / run_folder.SUMMARY) if run_dir else None
        try:
            summary = Summary.from_dict(raw if isinstance(raw, dict) else {})
        except InputError:
            summary = Summary.from_dict({})
        path = run_dir / run_folder.ANALYSIS if run_dir else None
        raw = read_json_if_readable(path) if path else None
        analyses = {}
        skipped = []
        if path is not None and path.is_file() and not isinstance(raw, dict):
            skipped.append(f"`{run_folder.ANALYSIS}` is not a JSON object of arms")
        for arm, doc in (raw if isinstance(raw, dict) else {}).items():
            try:
                analyses[str(arm)] = convert_analysis(doc, run_folder.ANALYSIS, f"$.{arm}")
            except InputError as exc:
                skipped.append(f"arm `{arm}` of `{run_folder.ANALYSIS}` does not decode ({exc})")
        diffs = (
            diffs_from_json(
                run_folder.diff_list(read_json_if_readable(run_dir / run_folder.DIFF_JSON)),
                str(run_dir / run_folder.DIFF_JSON),
                skipped=lambda exc: None,  # the overview shows the cell without that comparison's diff
            )
            if run_dir
            else []
        )
        return cls(summary, analyses, diffs, skipped)


def overview(tree: Path, state: Mapping[str, Any] | None = None) -> Overview:
    """The study's overview of a sweep tree: per cell (and per comparison in it) its mesh, sequence length,
    layers, prefetch, whether it was profiled, each arm's median step time, the ratio with its 95% CI, and
    a one-line ``conclusion``.

    Args:
        tree: the sweep tree (holds sweep.json).
        state: sweep.json already read (default: read it).
    """
    state = state if state is not None else read_json_if_readable(tree / run_folder.SWEEP_STATE)
    cells = [c for c in (state or {}).get("cells") or [] if isinstance(c, dict)]
    loaded = []
    labels: list[str] = []
    for c in cells:
        results = CellResults.read(tree / c["run_dir"] if c.get("run_dir") else None)
        config = c.get("config") if isinstance(c.get("config"), dict) else {}
        cell_labels = [str(a.get("label")) for a in config.get("arms") or [] if isinstance(a, dict)]
        cell_labels += [a for a in results.summary.arms if a not in cell_labels]
        labels += [a for a in cell_labels if a not in labels]
        loaded.append((c, config, results))
    per_arm = len(labels) <= MAX_ARM_COLUMNS
    headers = ["experiment", "mesh", "seq_len", "layers", "prefetch", "profiled"]
    headers += [f"{a} (ms)" for a in labels] if per_arm else ["median step (ms)"]
    headers += ["ratio", "95% CI", "conclusion"]
    rows = []
    for c, config, results in loaded:
        summary = results.summary
        settings = cell_settings(config)
        arms = summary.arms
        if per_arm:
            medians = [fmt(arms[a].median_ms, 1) if a in arms else MISSING for a in labels]
        else:
            medians = [" / ".join(f"{a} {fmt(s.median_ms, 1)}" for a, s in arms.items()) or MISSING]
        comparisons = summary.comparisons
        parity_valid = summary.parity.valid if summary.parity else None
        for comp in comparisons or [None]:
            if comp is None:
                ratio_text, ci_text = MISSING, MISSING
                line = c.get("error") or {"done": "no comparison (one arm)"}.get(
                    c.get("status"), "no result yet"
                )
                line = f"{c.get('status', MISSING)}: {line}" if c.get("status") != "done" else line
            else:
                base, test = str(comp.base), str(comp.test)
                ci = _ci(comp)
                ratio_text = fmt(finite(comp.ratio), 3)
                if len(comparisons) > 1:
                    ratio_text += f" ({test}/{base})"
                ci_text = (
                    f"{fmt(ci[0], 3)}–{fmt(ci[1], 3)}"
                    if ci is not None
                    else "none (1 round)"
                    if _arm_rounds(summary, base, test) == (1, 1)
                    else MISSING
                )
                diff = next((d for d in results.diffs if d.base == base and d.test == test), None)
                line = conclusion(
                    comp,
                    rounds=_arm_rounds(summary, base, test),
                    diff=diff,
                    overlap=(_mean_overlap(results.analyses, base), _mean_overlap(results.analyses, test)),
                    parity_valid=parity_valid,
                )
                if c.get("status") not in ("done", None):
                    line = f"{c.get('status')} (not complete): {line}"
            rows.append(
                [
                    str(c.get("name", MISSING)),
                    settings["mesh"],
                    settings["seq_len"],
                    settings["layers"],
                    settings["prefetch"],
                    settings["profiled"],
                    *medians,
                    ratio_text,
                    ci_text,
                    line,
                ]
            )
    return Overview(headers, rows)


def _status_blocks(tree: Path, state: Mapping[str, Any], cells: list[dict[str, Any]]) -> list[Block]:
    """The cells' statuses in a line, and a banner for failed, running and unfinished cells."""
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.get("status", MISSING)] = counts.get(c.get("status", MISSING), 0) + 1
    blocks: list[Block] = [
        Para(
            f"**{len(cells)} cells** — "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + f". Tree: `{tree}`; source: `{state.get('source', MISSING)}`; updated {state.get('updated', MISSING)}."
        ),
    ]
    if counts.get("failed"):
        blocks.append(
            Banner(
                "warning",
                f"{counts['failed']} cell(s) failed; rerun the same command to retry them "
                "(finished cells are skipped).",
            )
        )
    if counts.get("running"):
        blocks.append(
            Banner(
                "info", f"{counts['running']} cell(s) running now; this page is rewritten after each cell."
            )
        )
    if counts.get("pending") or counts.get("partial"):
        n = counts.get("pending", 0) + counts.get("partial", 0)
        blocks.append(
            Banner(
                "info",
                f"{n} cell(s) not finished; if the sweep is not running any more, rerun the "
                "same command to finish them.",
            )
        )
    return blocks


OVERVIEW_TEXT = (
    "One row per experiment (per comparison when a cell has more than two arms). Mesh: FSDP over all "
    "ranks, or HSDP replicas×shards; prefetch 0 is the library's default (FSDP2 keeps its implicit "
    "one-unit backward prefetch; hyper and FSDP1 prefetch nothing). The times are each arm's median "
    "of per-round medians; ratio = test / base (below 1 the test arm is faster) with its 95% "
    "interval (paired by round: docs/methodology.md). The conclusion says the verdict (a speed when the CI excludes 1, no difference "
    "when it contains 1, cannot tell yet without a CI) and, for profiled cells, the diff's top finding "
    "and the mean overlap of each arm."
)

CELL_HEADERS = [
    "cell",
    "status",
    "seq_len",
    "layers",
    "prefetch",
    "mesh",
    "median step (ms)",
    "ratio",
    "95% CI",
    "overlap (mean over ranks)",
    "verdict",
    "report",
]


@dataclass
class CellTable:
    """The cells table (one row per comparison of every cell) and what the ratio figure plots."""

    rows: list[list[str]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    ratios: list[float | None] = field(default_factory=list)
    cis: list[tuple[float, float] | None] = field(default_factory=list)
    invalid: list[Any] = field(default_factory=list)
    """The names of cells whose parity failed."""
    skipped: list[str] = field(default_factory=list)
    """``cell <name>: <why>`` for each piece of a cell's files left out (``CellResults.skipped``)."""


def _comparison_verdict(comp: ArmComparison | None, summary: Summary, cell: Mapping[str, Any]) -> str:
    """A comparison's verdict, made again from its numbers where it has them (older summaries called a
    ratio without a CI "no difference detected"), naming the rule that made its interval (a summary of
    schema 1: the unpaired percentile bootstrap; its interval is not recomputed)."""
    verdict = (comp.verdict if comp else None) or summary.verdict or cell.get("error") or MISSING
    ratio = finite(comp.ratio) if comp else None
    if comp and ratio is not None and comp.base and comp.test:
        verdict = stats.verdict_text(
            str(comp.base),
            str(comp.test),
            ratio,
            _ci(comp),
            comp.rounds
            if comp.rounds is not None and len(comp.rounds) == 2
            else _arm_rounds(summary, str(comp.base), str(comp.test)),
            interval=comp.interval_name,
            decision=comp.decision,
        )
    return str(verdict)


def cell_table(tree: Path, cells: list[dict[str, Any]]) -> CellTable:
    """Each cell's settings, medians, ratio, CI, overlaps, verdict and report link, one row per comparison."""
    table = CellTable()
    for c in cells:
        run_rel = c.get("run_dir")
        run_dir = tree / run_rel if run_rel else None
        results = CellResults.read(run_dir)
        table.skipped += [f"cell {c.get('name')}: {why}" for why in results.skipped]
        summary = results.summary
        arms = summary.arms
        params = c.get("params") or {}
        bad_parity = summary.parity is not None and summary.parity.valid is False
        if bad_parity:
            table.invalid.append(c.get("name"))
        medians = " / ".join(f"{a} {fmt(s.median_ms, 1)}" for a, s in arms.items()) or MISSING
        overlaps = " / ".join(
            f"{a} {fmt_pct(_mean_overlap(results.analyses, a), 0)}"
            for a in arms
            if _mean_overlap(results.analyses, a) is not None
        )
        report = run_dir / f"{run_folder.REPORT}.html" if run_dir else None
        link = (
            f"[report]({run_rel}/{run_folder.REPORT}.html)"
            if report is not None and report.is_file()
            else MISSING
        )
        comparisons: list[ArmComparison | None] = [*summary.comparisons] or [None]
        for comp in comparisons:
            ci = _ci(comp) if comp else None
            ratio = finite(comp.ratio) if comp else None
            verdict = _comparison_verdict(comp, summary, c)
            if bad_parity:
                verdict = "**INVALID (parity failed)** " + verdict
            table.rows.append(
                [
                    str(c.get("name")),
                    str(c.get("status")),
                    str(params.get("seq_len") or MISSING),
                    str(params.get("layers") or MISSING),
                    str(params.get("prefetch") if params.get("prefetch") is not None else MISSING),
                    str(params.get("mesh") or MISSING),
                    medians,
                    fmt(ratio, 3),
                    f"{fmt(ci[0], 3)}–{fmt(ci[1], 3)}" if ci else MISSING,
                    overlaps or MISSING,
                    verdict,
                    link,
                ]
            )
            pair = f" ({comp.test}/{comp.base})" if comp and comp.base else ""
            table.labels.append(f"{c.get('name')}{pair}")
            table.ratios.append(ratio)
            table.cis.append(ci)
    return table


def _ratio_blocks(table: CellTable) -> list[Block]:
    """The A/B ratio per cell figure, or a line saying there is none yet."""
    if not any(r is not None for r in table.ratios):
        return [Heading("A/B ratio per cell"), Para("No cell has a result yet.")]
    return [
        Heading("A/B ratio per cell"),
        Figure(
            "ratio_per_cell",
            figures.ratio_per_cell(
                table.labels, table.ratios, table.cis, "test median step time / base median step time"
            ),
            "Each cell's ratio with its 95% interval (paired by round); left of the dashed "
            "line the test arm is faster.",
        ),
    ]


def _reproduce_blocks(state: Mapping[str, Any]) -> list[Block]:
    command = state.get("command") or [
        "fsdpbench",
        "sweep",
        "--config",
        str(state.get("source", "FILE.toml")),
    ]
    return [
        Heading("Reproduce"),
        Code(
            shlex.join(map(str, command))
            + "\n# rerunning the same command skips finished cells and resumes the rest"
        ),
    ]


def build_index(tree: Path) -> tuple[str, list[Block]]:
    """Title and blocks of the index of ``tree`` (a folder holding sweep.json): the cells' statuses, the
    study's overview, the ratio per cell, the cells table and the command that made it."""
    state = read_json_if_readable(tree / run_folder.SWEEP_STATE)
    if not isinstance(state, dict):
        raise InputError(
            f"{tree} is not a sweep results tree (no readable sweep.json); run `fsdpbench sweep --config FILE`"
        )
    cells = [c for c in state.get("cells") or [] if isinstance(c, dict)]
    overview_table = overview(tree, state)
    table = cell_table(tree, cells)
    blocks: list[Block] = []
    if table.invalid:
        blocks.append(
            Banner(
                "error",
                f"COMPARISON INVALID in {len(table.invalid)} cell(s) ({', '.join(map(str, table.invalid))}): "
                "parity failed, so their ratios are not A/B results.",
            )
        )
    blocks += _status_blocks(tree, state, cells)
    if table.skipped:
        blocks.append(
            Banner(
                "warning",
                f"{len(table.skipped)} analysis file(s) of the cells could not be read and are left out (their "
                "overlap and conclusion show less; `fsdpbench report <cell>` analyses the profiles again): "
                + "; ".join(table.skipped)
                + ".",
            )
        )
    blocks += [
        Heading("Overview"),
        Table(overview_table.headers, overview_table.rows, numeric=False),
        Para(OVERVIEW_TEXT),
    ]
    blocks += _ratio_blocks(table)
    blocks += [Heading("Cells"), Table(CELL_HEADERS, table.rows, numeric=False)]
    blocks += _reproduce_blocks(state)
    return f"fsdpbench sweep — {state.get('name', tree.name)}", blocks


def write_index(tree: Path) -> list[Path]:
    """Write ``index.md`` (+ ``figures/``) and a self-contained ``index.html`` in ``tree``."""

    title, blocks = build_index(tree)
    return render(tree, "index", title, blocks)

"""The index report of a sweep tree: one table and one plot comparing the cells.

Reads ``sweep.json`` and each cell's ``summary.json`` / ``analysis.json``; never imports torch.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np

from fsdpbench import results
from fsdpbench.analysis.findings import finite
from fsdpbench.errors import InputError
from fsdpbench.fmt import MISSING, fmt, fmt_pct
from fsdpbench.report import figures
from fsdpbench.report.blocks import Banner, Block, Code, Figure, Heading, Para, Table
from fsdpbench.results import read_json_if_readable


def _mean_overlap(analysis: dict[str, Any] | None, arm: str) -> float | None:
    ranks = ((analysis or {}).get(arm) or {}).get("ranks") or []
    values = [finite(r.get("overlap_ratio")) for r in ranks if isinstance(r, dict)]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def build_index(tree: Path) -> tuple[str, list[Block]]:
    """Title and blocks of the index of ``tree`` (a folder holding sweep.json)."""
    state = read_json_if_readable(tree / results.SWEEP_STATE)
    if not isinstance(state, dict):
        raise InputError(
            f"{tree} is not a sweep results tree (no readable sweep.json); run `fsdpbench sweep --config FILE`"
        )
    cells = [c for c in state.get("cells") or [] if isinstance(c, dict)]
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
    rows, labels, ratios, cis, invalid = [], [], [], [], []
    for c in cells:
        run_rel = c.get("run_dir")
        run_dir = tree / run_rel if run_rel else None
        summary = read_json_if_readable(run_dir / results.SUMMARY) if run_dir else None
        analysis = read_json_if_readable(run_dir / results.ANALYSIS) if run_dir else None
        summary = summary if isinstance(summary, dict) else {}
        arms = summary.get("arms") or {}
        params = c.get("params") or {}
        parity = summary.get("parity") or {}
        bad_parity = parity.get("valid") is False
        if bad_parity:
            invalid.append(c.get("name"))
        medians = " / ".join(f"{a} {fmt(s.get('median_ms'), 1)}" for a, s in arms.items()) or MISSING
        overlaps = " / ".join(
            f"{a} {fmt_pct(_mean_overlap(analysis, a), 0)}"
            for a in arms
            if _mean_overlap(analysis, a) is not None
        )
        report = run_dir / f"{results.REPORT}.html" if run_dir else None
        link = (
            f"[report]({run_rel}/{results.REPORT}.html)"
            if report is not None and report.is_file()
            else MISSING
        )
        comparisons = summary.get("comparisons") or [{}]
        for comp in comparisons:
            ci = comp.get("ci95") or None
            ratio = finite(comp.get("ratio"))
            verdict = comp.get("verdict") or summary.get("verdict") or c.get("error") or MISSING
            if bad_parity:
                verdict = "**INVALID (parity failed)** " + str(verdict)
            rows.append(
                [
                    str(c.get("name")),
                    str(c.get("status")),
                    str(params.get("seq_len") or MISSING),
                    str(params.get("layers") or MISSING),
                    str(params.get("prefetch") if params.get("prefetch") is not None else MISSING),
                    str(params.get("mesh") or MISSING),
                    medians,
                    fmt(ratio, 3),
                    f"{fmt(ci[0], 3)}–{fmt(ci[1], 3)}" if ci and len(ci) == 2 and None not in ci else MISSING,
                    overlaps or MISSING,
                    str(verdict),
                    link,
                ]
            )
            pair = f" ({comp.get('test')}/{comp.get('base')})" if comp.get("base") else ""
            labels.append(f"{c.get('name')}{pair}")
            ratios.append(ratio)
            cis.append((float(ci[0]), float(ci[1])) if ci and len(ci) == 2 and None not in ci else None)
    if invalid:
        blocks.insert(
            0,
            Banner(
                "error",
                f"COMPARISON INVALID in {len(invalid)} cell(s) ({', '.join(map(str, invalid))}): "
                "parity failed, so their ratios are not A/B results.",
            ),
        )
    blocks.append(Heading("A/B ratio per cell"))
    if any(r is not None for r in ratios):
        blocks.append(
            Figure(
                "ratio_per_cell",
                figures.ratio_per_cell(labels, ratios, cis, "test median step time / base median step time"),
                "Each cell's ratio of medians with its bootstrap 95% CI over rounds; left of the dashed "
                "line the test arm is faster.",
            )
        )
    else:
        blocks.append(Para("No cell has a result yet."))
    blocks.append(Heading("Cells"))
    blocks.append(
        Table(
            [
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
            ],
            rows,
            numeric=False,
        )
    )
    blocks.append(Heading("Reproduce"))
    command = state.get("command") or [
        "fsdpbench",
        "sweep",
        "--config",
        str(state.get("source", "FILE.toml")),
    ]
    blocks.append(
        Code(
            shlex.join(map(str, command))
            + "\n# rerunning the same command skips finished cells and resumes the rest"
        )
    )
    return f"fsdpbench sweep — {state.get('name', tree.name)}", blocks


def write_index(tree: Path) -> list[Path]:
    """Write ``index.md`` (+ ``figures/``) and a self-contained ``index.html`` in ``tree``."""
    from fsdpbench.report import render

    title, blocks = build_index(tree)
    return render(tree, "index", title, blocks)

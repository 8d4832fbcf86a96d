"""``fsdpbench sweep --config FILE.toml``: a grid of ab runs in one results tree, resumable, with an
index report (index.md / index.html) comparing the cells; the study's overview table (docs/sweeps.md) is
printed at the end (by :mod:`fsdpbench.report.terminal.sweep`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        metavar="FILE.toml",
        help="the sweep file ([sweep], [base], [grid], [[experiment]]; see configs/study.toml)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder that holds the sweep tree (default: [sweep] out, else results/)",
    )
    parser.add_argument(
        "--only", default=None, metavar="GLOB", help="run only the cells whose name matches GLOB"
    )
    parser.add_argument(
        "--node-rank",
        type=int,
        default=None,
        metavar="K",
        help="this node's rank for every cell with nnodes > 1 (the same sweep file on every node; node 0 "
        "decides which cells run, the others follow: docs/multi-node.md)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list the cells and their state; run nothing")
    parser.add_argument(
        "--index-only",
        action="store_true",
        help="rewrite index.md/index.html from what exists and print the overview table (docs/sweeps.md)",
    )


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from fsdpbench.report.terminal.sweep import print_overview
    from fsdpbench.run import sweep as sweep_mod

    console = Console()
    sweep = sweep_mod.load_sweep(args.config, out=args.out, node_rank=getattr(args, "node_rank", None))
    if args.dry_run:
        table = Table(title=f"sweep {sweep.name}: {len(sweep.cells)} cells in {sweep.tree}")
        for header in sweep_mod.DRY_RUN_HEADERS:
            table.add_column(header)
        for row in sweep_mod.describe_cells(sweep):
            table.add_row(*row)
        console.print(table)
        return 0
    if args.index_only:
        from fsdpbench.report import write_index

        for path in write_index(sweep.tree):
            if path.stem == "index":
                console.print(f"wrote {path}")
        print_overview(console, sweep.tree, f"sweep {sweep.name}: overview")
        return 0
    cells = sweep_mod.run_sweep(sweep, only=args.only, console=console, command=sweep_mod.main_command())
    failed = [c for c in cells if c.status == "failed"]
    node = next((c.config.node_rank for c in cells if c.config.nnodes > 1), 0)
    if not node:
        print_overview(console, sweep.tree, f"sweep {sweep.name}: overview")
    console.print(
        f"sweep {sweep.name}: "
        + ", ".join(
            f"{sum(c.status == s for c in cells)} {s}" for s in ("done", "failed", "partial", "pending")
        )
    )
    if node:  # its tree holds only its own ranks' files; node 0's has every cell's steps and the index
        console.print(
            f"node {node}: no index here; node 0's sweep tree has every cell's results and the index"
        )
    else:
        console.print(f"index: {sweep.tree / 'index.html'}")
    return 1 if failed else 0

"""``fsdpbench report RUN_DIR``: write report.md and a self-contained report.html for a run
(or the index of a sweep results tree)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="a results folder of `fsdpbench ab`/`run`, or a sweep results tree (writes its index)",
    )
    parser.add_argument(
        "--memory-rank",
        type=int,
        default=0,
        metavar="K",
        help="draw the memory timelines of rank K's memory step (default 0, as in summary.json; docs/memory.md)",
    )


def main(args: argparse.Namespace) -> int:
    from fsdpbench.report import write_index, write_report
    from fsdpbench.results import run_folder

    run_dir: Path = args.run_dir
    if (run_dir / run_folder.SWEEP_STATE).is_file():
        written = write_index(run_dir)
    else:
        written = write_report(run_dir, memory_rank=args.memory_rank)
    for path in written:
        if path.suffix in (".md", ".html") and path.stem in (run_folder.REPORT, "index"):
            print(f"wrote {path}")
    return 0

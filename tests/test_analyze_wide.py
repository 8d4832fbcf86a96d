"""``fsdpbench analyze --wide`` in an 80-column terminal: the per-rank table is split in parts, each
keeping the rank and step labels; no line is wider than 80, no label or number is cut. The rendered
text is read back and its compute column checked against the profiler's own step_trace_time.csv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from fsdpbench.report.terminal.analyze import RANK_COLUMNS

LEVEL0 = Path(__file__).parent / "fixtures" / "ascend_level0"


def test_wide_at_80_columns_keeps_rank_and_step_labels(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(LEVEL0, run, ignore=shutil.ignore_patterns("PROVENANCE.md", ".*"))
    env = {**os.environ, "COLUMNS": "80", "LINES": "200", "TERM": "dumb"}
    out = subprocess.run(
        [sys.executable, "-m", "fsdpbench", "analyze", str(run), "--wide", "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    per_rank = out[: out.index("Collectives")]
    assert "…" not in per_rank
    headers = [line for line in per_rank.splitlines() if "rank" in line and "step" in line]
    assert len(headers) >= 2  # split in parts, every part with both labels
    shown = {word.strip("┃│ ") for line in headers for word in line.split("┃")}
    assert {h for h, *_ in RANK_COLUMNS} <= shown  # every wide column somewhere
    for rank in (0, 1):
        ref = pd.read_csv(
            LEVEL0 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        ).iloc[0]
        rows = [line.strip("│ ").split("│") for line in per_rank.splitlines() if line.startswith("│")]
        mine = [[c.strip() for c in row] for row in rows if row[0].strip() == str(rank)]
        assert len(mine) == len(headers) and all(row[1] == "50" for row in mine)  # labels in every part
        assert f"{ref['Computing'] / 1000:.3f}" in mine[0]
    means = [line for line in per_rank.splitlines() if line.startswith("│ mean")]
    assert len(means) == len(headers)

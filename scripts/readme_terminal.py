"""Write the README's terminal sample ("What it prints") from a run's summary.json, as `fsdpbench ab` prints it.

    python scripts/readme_terminal.py --run RUN_DIR   # keep RUN_DIR's summary figures and rewrite the README block
    python scripts/readme_terminal.py                 # rewrite the block from the figures kept (after a code change)
    python scripts/readme_terminal.py --check         # exit 1 when the README's block is not what the code prints

The figures the end of `fsdpbench ab` reads (the per-arm medians, the comparisons, parity, the verdict) are
kept in docs/img/terminal_sample.json, a few KB cut from the run's summary.json; the block is
``print_summary`` of them on an 80-column console, with the per-phase table and all but the last three
per-phase lines cut at ``...``, then the run folder. tests/test_docs.py renders it again and compares.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SAMPLE = REPO / "docs" / "img" / "terminal_sample.json"
WIDTH = 80
PHASE_LINES_SHOWN = 3
BEGIN = "<!-- terminal sample: scripts/readme_terminal.py -->\n```text\n"
END = "```\n"
ARM_KEYS = (
    "median_ms",
    "p10_ms",
    "p90_ms",
    "tokens_per_s_per_device",
    "tflops_per_device",
    "mfu",
    "peak_mem_allocated_bytes",
    "peak_rss_bytes",
    "peak_rss_since",
    "phases",
)


def keep_figures(summary: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """What ``print_summary`` reads of ``summary`` (the rounds as a count), and the run folder's path."""
    arms = {
        label: {"rounds": [{}] * len(arm["rounds"]), **{k: arm.get(k) for k in ARM_KEYS}}
        for label, arm in summary["arms"].items()
    }
    kept = {k: summary[k] for k in ("comparisons", "parity", "missing", "verdict")}
    return {"run_dir": run_dir, "arms": arms, **kept}


def _printed(draw, *args: Any) -> str:  # noqa: ANN001
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=WIDTH, color_system=None, force_terminal=False, legacy_windows=False)
    draw(console, *args)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())  # rich pads to the width


def render(sample: dict[str, Any]) -> str:
    """The README block's text: the end of `fsdpbench ab`'s output for ``sample``, cut as described above."""
    from fsdpbench.report.console import print_summary
    from fsdpbench.report.terminal.summary import print_phase_table
    from fsdpbench.results import phases

    full = _printed(print_summary, sample)
    table = _printed(print_phase_table, sample)
    verdicts = _printed(phases.print_phase_verdicts, sample)
    head, _, rest = full.partition(table)
    middle = rest.removesuffix(verdicts)
    assert table and rest != middle, (
        "print_summary no longer prints the phase table, then the phase lines last"
    )
    shown = "".join(verdicts.splitlines(keepends=True)[-PHASE_LINES_SHOWN:])
    return f"{head}...\n{middle}...\n{shown}{sample['run_dir']}\n"


def readme_block(text: str) -> str:
    """The sample block now in the README's ``text``."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END, start)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a run folder of `fsdpbench ab` whose figures to keep")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the README differs")
    args = parser.parse_args(argv)
    if args.run is not None:
        summary = json.loads((args.run / "summary.json").read_text(encoding="utf-8"))
        SAMPLE.write_text(json.dumps(keep_figures(summary, str(args.run)), indent=1) + "\n", encoding="utf-8")
    block = render(json.loads(SAMPLE.read_text(encoding="utf-8")))
    text = README.read_text(encoding="utf-8")
    if args.check:
        if readme_block(text) != block:
            print(
                "README.md's terminal sample differs: run python scripts/readme_terminal.py", file=sys.stderr
            )
            return 1
        return 0
    README.write_text(text.replace(BEGIN + readme_block(text) + END, BEGIN + block + END), encoding="utf-8")
    print(f"wrote the terminal sample of {SAMPLE.relative_to(REPO)} into {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

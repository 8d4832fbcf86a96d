"""``fsdpbench diff BASE TEST`` or ``fsdpbench diff RUN_DIR``: differences, findings and what-if estimates.

BASE/TEST are profile paths (a rank's trace, a folder of ranks, an ``*_ascend_pt`` folder) or analysis
JSON files written by ``fsdpbench analyze --json``. RUN_DIR is a profiled ``fsdpbench ab`` run: its first
arm is the base, every other arm a test, and diff.json/diff.md are written into it. Torch-free.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fsdpbench.errors import ConfigError, InputError
from fsdpbench.results import run_folder

ANALYSIS_JSON_MAX_BYTES = 64 << 20
"""A plain ``*.json`` file up to this size is checked for being an analysis JSON (else it is a trace)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fsdpbench diff``."""
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="BASE TEST (trace paths or analysis JSON files), or one RUN_DIR of `fsdpbench ab --profile`",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="write the diff JSON here (RUN_DIR: default RUN_DIR/diff.json)",
    )
    parser.add_argument(
        "--md", type=Path, metavar="FILE", help="write the markdown here (RUN_DIR: default RUN_DIR/diff.md)"
    )
    parser.add_argument(
        "--labels", metavar="BASE,TEST", help="names of the two sides (default: the path names)"
    )
    parser.add_argument(
        "--step", type=int, help="analyze only this profiler step (default: the analysis default)"
    )
    parser.add_argument(
        "--reanalyze",
        action="store_true",
        help="RUN_DIR: analyze the profiles again even if analysis.json is fresh (it keeps the "
        "collective events: the per-call alpha-beta fits are the same either way)",
    )
    parser.add_argument(
        "--memory-rank",
        type=int,
        default=0,
        metavar="K",
        help="RUN_DIR: compare the memory timelines of rank K's memory step (default 0, as in summary.json)",
    )
    parser.add_argument("--quiet", action="store_true", help="no terminal tables")


def _load_side(path: Path, what: str, step: int | None) -> Any:
    if not path.exists():
        raise InputError(
            f"{what} path {path} does not exist; pass a profile folder/trace or an analysis JSON"
        )
    name = path.name
    if path.is_file() and name.endswith(".json") and not name.endswith(".pt.trace.json"):
        if path.stat().st_size <= ANALYSIS_JSON_MAX_BYTES:
            try:
                data = run_folder.read_json_file(path)
            except InputError as exc:
                raise InputError(f"{what} {exc}") from None
            if isinstance(data, dict) and "ranks" in data and "schema_version" in data:
                from fsdpbench.analysis.output.result import convert_analysis

                return convert_analysis(data, f"{what} {path}")
    from fsdpbench.analysis import analyze

    return analyze([path], step=step)


def _run_arm(path: Path) -> tuple[dict[str, Any], float | None] | None:
    """The manifest arm and timed median (ms) of a profile path inside a run folder
    (``RUN/profiles/<arm>/...``), or ``None`` when the path is not inside one."""
    path = path.resolve()
    for folder in path.parents:
        if not run_folder.is_run_dir(folder):
            continue
        rel = path.relative_to(folder).parts
        if len(rel) < 2 or rel[0] != run_folder.PROFILES:
            return None
        manifest = run_folder.read_json_if_readable(folder / run_folder.MANIFEST) or {}
        arm = next((a for a in manifest.get("arms") or [] if a.get("label") == rel[1]), None)
        if arm is None:
            return None
        summary = run_folder.read_json_if_readable(folder / run_folder.SUMMARY) or {}
        return arm, ((summary.get("arms") or {}).get(rel[1]) or {}).get("median_ms")
    return None


def _replay_wanted(sides: dict[str, Any], arms: dict[str, dict[str, Any]]) -> None:
    """Replay on each side analysed now the what-ifs its findings read (``replay_edits.replay_wanted``); a
    side read from an analysis JSON keeps the what-ifs it has."""
    from fsdpbench.analysis.findings import replay_edits
    from fsdpbench.analysis.output.result import Analysis

    analysed = {lab: res for lab, res in sides.items() if isinstance(res, Analysis)}
    if len(analysed) == len(sides):  # the wanted edits compare the two sides
        replay_edits.replay_wanted(analysed, arms)


def main(args: argparse.Namespace) -> int:
    """Run the diff, print the tables and write the requested files; 0 on success."""
    from rich.console import Console

    from fsdpbench.analysis import derived
    from fsdpbench.analysis.compare.diff import add_calibration, diff_analyses
    from fsdpbench.report.diff_md import diff_markdown
    from fsdpbench.report.terminal import render_diff

    paths: list[Path] = [Path(p) for p in args.paths]
    console = Console()
    if len(paths) == 1:
        run_dir = paths[0]
        if args.labels:
            raise ConfigError(
                "--labels applies to BASE TEST; a RUN_DIR takes the arm labels from its manifest"
            )
        if not run_dir.is_dir():
            raise InputError(
                f"{run_dir} is not a run folder; pass a RUN_DIR of `fsdpbench ab --profile` or two "
                "paths BASE TEST"
            )
        results = derived.diff_run(
            run_dir, reanalyze=args.reanalyze, step=args.step, memory_rank=args.memory_rank
        )
        json_path = args.json or run_dir / run_folder.DIFF_JSON
        md_path = args.md or run_dir / run_folder.DIFF_MD
    elif len(paths) == 2:
        if args.reanalyze:
            raise ConfigError("--reanalyze applies to a RUN_DIR; BASE TEST traces are always analyzed")
        if args.memory_rank:
            raise ConfigError(
                "--memory-rank applies to a RUN_DIR (its memory_step/ folder); BASE TEST have none"
            )
        labels = args.labels.split(",") if args.labels else [p.name.removesuffix(".json") for p in paths]
        if len(labels) != 2 or not all(labels):
            raise ConfigError(f"--labels must be two names BASE,TEST, got {args.labels!r}")
        if labels[0] == labels[1]:
            labels = [f"base:{labels[0]}", f"test:{labels[1]}"]
        base = _load_side(paths[0], "BASE", args.step)
        test = _load_side(paths[1], "TEST", args.step)
        sides = [_run_arm(p) for p in paths]
        arms = {lab: side[0] for lab, side in zip(labels, sides, strict=True) if side is not None}
        _replay_wanted(dict(zip(labels, (base, test), strict=True)), arms)
        result = diff_analyses(
            base,
            test,
            base_label=labels[0],
            test_label=labels[1],
            base_arm=arms.get(labels[0]),
            test_arm=arms.get(labels[1]),
        )
        if len(arms) == 2:  # two runs' profiles: calibrate when one arm is the other's counterfactual
            timed = {lab: side[1] for lab, side in zip(labels, sides, strict=True) if side is not None}
            add_calibration(result, arms, timed)
        results = [result]
        json_path, md_path = args.json, args.md
    else:
        raise ConfigError(f"diff takes BASE TEST or one RUN_DIR, got {len(paths)} paths")
    if not args.quiet:
        for result in results:
            render_diff(result, console)
    markdown = "\n\n".join(diff_markdown(r) for r in results) if md_path is not None else ""
    for path in derived.write_diffs([r.to_dict() for r in results], json_path, md_path, markdown):
        console.print(f"wrote {path}", highlight=False)
    return 0

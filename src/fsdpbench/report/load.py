"""Read every piece of a run folder (docs/DATA.md) that exists, and note every piece that does not.

Nothing here raises for a missing or broken piece: the report shows what is there and says what
is not. A folder that holds none of a run's files is refused (``InputError``), and so is a broken
``analysis.json`` (fsdpbench's own derived file: its error names the file and the field).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from fsdpbench.analysis.derived import BROKEN_ANALYSIS_HINT
from fsdpbench.errors import InputError
from fsdpbench.results import run_folder
from fsdpbench.results.run_folder import RUN_MARKERS, is_run_dir
from fsdpbench.results.summary import Summary

if TYPE_CHECKING:
    from fsdpbench.analysis.compare.diff import DiffResult
    from fsdpbench.analysis.output.result import Analysis

log = logging.getLogger(__name__)


@dataclass
class RunData:
    """What a run folder holds, parsed; ``None`` where the piece is absent or unreadable.

    ``analysis`` and ``diffs`` hold the JSON as read (the places and sweep tables read it so);
    :attr:`analyses` and :attr:`diff_results` give the same as typed objects. ``manifest`` is the JSON
    as read; ``summary`` is summary.json as a :class:`~fsdpbench.results.summary.Summary`.
    """

    run_dir: Path
    manifest: dict[str, Any] | None = None
    summary: Summary | None = None
    steps: pd.DataFrame | None = None
    statuses: list[dict[str, Any]] = field(default_factory=list)
    analysis: dict[str, dict[str, Any]] | None = None
    """arm label → the analysis JSON of that arm's profiles."""
    diffs: list[dict[str, Any]] = field(default_factory=list)
    """One diff JSON per (base, test) pair."""
    timelines: dict[str, Timeline] = field(default_factory=dict)
    rank_timelines: dict[str, Any] = field(default_factory=dict)
    """arm label → ``report.rank_timeline.RankTimeline`` (every rank of the profiled step, aligned)."""
    missing: list[str] = field(default_factory=list)
    """Human-readable notes: what is absent or failed, and what to do about it."""
    _typed: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False, compare=False)
    """``analysis``/``diffs`` → (the JSON it was typed from, the typed value): typed once per JSON."""

    @property
    def analyses(self) -> dict[str, Analysis]:
        """arm label → the arm's :class:`~fsdpbench.analysis.output.result.Analysis` read from ``analysis``.

        Raises:
            InputError: an arm's JSON is not an Analysis object, naming the file and the field
                (``analysis.json: $.torch.ranks[1].step_time_us: expected `float`, got `str```).
        """
        from fsdpbench.analysis.output.result import convert_analysis

        what = str(self.run_dir / run_folder.ANALYSIS)

        def parse(raw: dict[str, Any]) -> dict[str, Analysis]:
            try:
                return {arm: convert_analysis(doc, what, f"$.{arm}") for arm, doc in raw.items()}
            except InputError as exc:
                raise InputError(f"{exc} ({BROKEN_ANALYSIS_HINT})") from None

        return self._typed_value("analysis", self.analysis or {}, parse)

    @property
    def diff_results(self) -> list[DiffResult]:
        """``diffs`` as :class:`~fsdpbench.analysis.compare.diff.DiffResult` objects; one that is not a Diff JSON
        object is left out and named in ``missing``."""
        from fsdpbench.analysis.compare.diff import diffs_from_json

        def parse(raw: list[dict[str, Any]]) -> list[DiffResult]:
            return diffs_from_json(
                raw,
                run_folder.DIFF_JSON,
                lambda exc: self.missing.append(
                    f"a diff in `{run_folder.DIFF_JSON}` could not be read ({exc}); it is left out."
                ),
            )

        return self._typed_value("diffs", self.diffs, parse)

    def _typed_value(self, name: str, raw: Any, parse: Any) -> Any:
        """``parse(raw)``, computed again only when the JSON held under ``name`` was replaced."""
        seen = self._typed.get(name)
        if seen is None or seen[0] is not raw:
            self._typed[name] = (raw, parse(raw))
        return self._typed[name][1]

    @property
    def arms(self) -> list[str]:
        """Arm labels in the manifest's order, else the summary's, else the order they ran."""
        if self.manifest and self.manifest.get("arms"):
            return [a.get("label") or a.get("backend", "?") for a in self.manifest["arms"]]
        if self.summary and self.summary.arms:
            return list(self.summary.arms)
        if self.steps is not None and "arm" in self.steps:
            return list(dict.fromkeys(self.steps["arm"]))
        return []

    def profile_dirs(self) -> dict[str, Path]:
        """arm label → its profile folder, for arms that have one."""
        order = {a: i for i, a in enumerate(self.arms)}
        found = sorted(run_folder.profiled_arms(self.run_dir), key=lambda a: order.get(a, len(order)))
        return {a: run_folder.profile_dir(self.run_dir, a) for a in found}


@dataclass
class Timeline:
    """Events of one profiler step on one rank, times in ns from the step's start."""

    arm: str
    rank: int
    step: int | None
    name: list[str]
    category: list[str]
    lane: list[str]
    start_ns: Any  # numpy int64 arrays
    end_ns: Any


def load_optional_json(path: Path, data: RunData, what: str) -> Any:
    """Parsed JSON of ``path``, or ``None`` with a note in ``data.missing``."""
    if not path.is_file():
        return None
    try:
        return run_folder.read_json_file(path)
    except InputError as exc:
        data.missing.append(f"{what} `{path.name}` could not be read ({exc}); it is left out.")
        return None


def load_summary(path: Path, data: RunData) -> Summary | None:
    """summary.json as a ``Summary``, or ``None`` with a note in ``data.missing`` when it is unreadable or
    not a summary (a key it lacks reads as None, as ``Summary.from_dict`` reads any summary)."""
    raw = load_optional_json(path, data, "the summary")
    if raw is None:
        return None
    try:
        return Summary.from_dict(raw, what=path.name)
    except InputError as exc:
        data.missing.append(f"the summary `{path.name}` is not an fsdpbench summary ({exc}); it is left out.")
        return None


def load_step_frame(path: Path, data: RunData) -> pd.DataFrame | None:
    """steps.jsonl as a DataFrame; a torn last line (a crash mid-write) is skipped with a note."""
    if not path.is_file():
        return None
    rows, bad = run_folder.parse_jsonl(path.read_bytes())
    if bad:
        data.missing.append(
            f"`steps.jsonl` has {bad} unreadable line(s) (a crash mid-write?); they are skipped."
        )
    if not rows:
        return None
    return pd.DataFrame(rows)


def read_analysis_json(path: Path) -> dict[str, Any] | None:
    """analysis.json as read (None when absent). Unlike the other pieces, a broken one is an error: it
    is fsdpbench's own derived file, and a report of it would show wrong or missing numbers.

    Raises:
        InputError: it is not JSON or not an object of arms, naming the file (its fields are checked
            by :attr:`RunData.analyses`).
    """
    from fsdpbench.analysis.output.result import read_analysis_arms

    if not path.is_file():
        return None
    try:
        return read_analysis_arms(path)
    except InputError as exc:
        raise InputError(f"{exc} ({BROKEN_ANALYSIS_HINT})") from None


def not_a_run_error(path: Path) -> InputError:
    """The error for a folder that is not a run, naming run folders below it when there are some."""
    if not path.exists():
        return InputError(
            f"{path}: no such folder; pass a run folder written by `fsdpbench ab` or `fsdpbench run`"
        )
    if not path.is_dir():
        return InputError(f"{path} is a file, not a run folder; pass the folder that holds manifest.json")
    below = sorted(p.parent for m in RUN_MARKERS for p in path.glob(f"*/{m}"))
    hint = ""
    if below:
        names = ", ".join(str(p) for p in list(dict.fromkeys(below))[:3])
        hint = f"; run folders below it: {names}"
    return InputError(f"{path} is not a fsdpbench run folder (none of {', '.join(RUN_MARKERS)} in it){hint}")


def load_run(run_dir: Path) -> RunData:
    """Read manifest, summary, steps, launch statuses, analysis.json and diff.json of ``run_dir``."""
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise not_a_run_error(run_dir)
    data = RunData(run_dir=run_dir)
    data.manifest = run_folder.upgrade_manifest(
        load_optional_json(run_dir / run_folder.MANIFEST, data, "the manifest")
    )
    if data.manifest is None:
        data.missing.append(
            "`manifest.json` is missing: configuration, environment and commands are unknown."
        )
    data.summary = load_summary(run_dir / run_folder.SUMMARY, data)
    if data.summary is None:
        data.missing.append(
            "`summary.json` is missing: no verdict or statistics yet "
            f"(the run may have stopped early; `fsdpbench ab --resume {run_dir}` finishes it)."
        )
    data.steps = load_step_frame(run_dir / run_folder.STEPS, data)
    if data.steps is None:
        data.missing.append("`steps.jsonl` is missing or empty: no step times to plot.")
    for status in sorted((run_dir / run_folder.LAUNCHES).glob(f"*/*/{run_folder.STATUS}")):
        parsed = load_optional_json(status, data, "a launch status")
        if isinstance(parsed, dict):
            data.statuses.append(parsed)
    data.analysis = read_analysis_json(run_dir / run_folder.ANALYSIS)
    data.analyses  # noqa: B018 - checked here, so that a broken analysis.json stops the report at once
    data.diffs = run_folder.diff_list(load_optional_json(run_dir / run_folder.DIFF_JSON, data, "the diff"))
    return data

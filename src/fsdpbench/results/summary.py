"""``summary.json`` as typed objects: what ``summarize.build_summary`` writes and the report reads.

Field names, order and values are the file's (docs/DATA.md, "summary.json"): ``to_dict`` gives the
JSON object key for key, ``from_dict`` reads one back (both from ``records.Record``, through msgspec,
which names a field of the wrong type). ``from_dict`` takes partial objects as the report always has:
a key the object lacks (a file written before the field existed, a hand-made summary) reads as None
(an absent list or mapping as empty); keys this version does not know are dropped.
``Summary.read`` is the strict reader of a file: it refuses one without ``schema_version``.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fsdpbench import records
from fsdpbench.errors import InputError
from fsdpbench.records import Record


@dataclass(kw_only=True, slots=True)
class RoundMedian(Record):
    """One timed round of an arm: the median step time over its timed steps."""

    round: int | None = None
    median_ms: float | None = None
    n_steps: int | None = None


@dataclass(kw_only=True, slots=True)
class ArmSummary(Record):
    """One arm's statistics; an arm with no timed round has ``status="missing"`` and every figure None."""

    status: str | None = None
    """``"ok"`` or ``"missing"`` (``"failed"`` in summaries of older launchers)."""
    rounds: list[RoundMedian] = field(default_factory=list)
    median_ms: float | None = None
    """Median of the per-round medians."""
    p10_ms: float | None = None
    p90_ms: float | None = None
    tokens_per_s_per_device: float | None = None
    tflops_per_device: float | None = None
    mfu: float | None = None
    peak_flops_per_device: float | None = None
    peak_mem_allocated_bytes: int | None = None
    peak_mem_reserved_bytes: int | None = None
    phases: dict[str, Any] | None = None
    """``phases.arm_phases``: per-phase medians (docs/phases.md)."""
    peak_rss_bytes: int | None = None
    peak_rss_since: str | None = None
    memory_timeline: dict[str, Any] | None = None
    """Written only for an arm whose memory step was recorded (the key is absent otherwise)."""

    _omit_if_none: ClassVar[frozenset[str]] = frozenset({"memory_timeline"})


@dataclass(kw_only=True, slots=True)
class RatioSummary(Record):
    """``stats.Comparison.to_dict()`` as stored: test arm against base arm (ratio > 1 = test slower)."""

    base: str | None = None
    test: str | None = None
    ratio: float | None = None
    ci95: tuple[float, float] | None = None
    rounds: tuple[int, int] | None = None
    time_change_pct: float | None = None
    significant: bool | None = None
    rounds_needed_1pct: int | None = None
    method: str | None = None
    """The rule that made ``ci95`` and the verdict: ``paired t``, ``group-sequential``, ``confidence
    sequence``, "" (no interval). Absent (None) in summaries of schema 1, whose verdicts the unpaired
    percentile bootstrap made (``stats.BOOTSTRAP_RULE``): ``interval_name`` says so, nothing recomputes them."""
    look: int | None = None
    looks: int | None = None
    level: float | None = None
    decision: str | None = None
    """``stats.Decision.verdict``: slower, faster, no difference [larger than X %], cannot tell."""
    stop: bool | None = None
    reason: str | None = None
    verdict: str | None = None

    _omit_if_none: ClassVar[frozenset[str]] = frozenset(
        {"method", "look", "looks", "level", "decision", "stop", "reason"}
    )  # keys of schema 2: a summary of schema 1 reads and writes back byte for byte

    @property
    def interval_name(self) -> str:
        """What ``ci95`` is, in the verdict's words (``stats.interval_name``)."""
        from fsdpbench.results import stats

        rounds = min(self.rounds) if self.rounds else None
        method = self.method if self.method is not None else stats.BOOTSTRAP_RULE
        return stats.interval_name(method, self.level, rounds, self.look, self.looks)


@dataclass(kw_only=True, slots=True)
class MemoryRatio(Record):
    """Peak memory of the test arm over the base arm's, and which measure both arms have."""

    measure: str | None = None
    base_bytes: int | None = None
    test_bytes: int | None = None
    ratio: float | None = None


@dataclass(kw_only=True, slots=True)
class ArmComparison(RatioSummary):
    """One entry of ``comparisons``: the step-time ratio, per marked phase the same, and the memory ratio
    (its verdict names the memory ratio too)."""

    phases: dict[str, RatioSummary | None] | None = None
    memory: MemoryRatio | None = None


@dataclass(kw_only=True, slots=True)
class Parity(Record):
    """The loss check of ``summarize.check_parity``: the first steps' losses of every arm against the first."""

    valid: bool | None = None
    mode: str | None = None
    tolerance: float | None = None
    steps_compared: int | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    reason: str | None = None


@dataclass(kw_only=True, slots=True)
class MissingLaunch(Record):
    """An arm-round of the plan with no finished launch."""

    arm: str | None = None
    round: int | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True)
class RoundsCheck(Record):
    """``--rounds auto``'s decision after ``rounds`` complete rounds: go on, or stop and why (``run.rounds.check``;
    manifest.json and summary.json ``rounds_auto``)."""

    rounds: int | None = None
    stopped: bool = False
    reason: str | None = None
    """``settled``, ``max_rounds``, ``max_time`` or ``parity_failed`` when ``stopped``; None otherwise."""
    why: str | None = None
    """One line for the terminal, the summary and the report."""


@dataclass(kw_only=True, slots=True)
class Summary(Record):
    """The whole ``summary.json`` of a run (docs/DATA.md)."""

    schema_version: int | None = None
    arms: dict[str, ArmSummary] = field(default_factory=dict)
    comparisons: list[ArmComparison] = field(default_factory=list)
    verdict: str | None = None
    """Every comparison's verdict joined by "; ", prefixed "INVALID COMPARISON" when parity failed."""
    parity: Parity | None = None
    """None when the summary holds no parity result (absent or empty)."""
    missing: list[MissingLaunch] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)
    """Arm → its profile folder, relative to the run folder."""
    flops_per_token: float | None = None
    peak_bf16_flops_per_device: float | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    """The launcher's failure records, each with ``resolved``."""
    collected: dict[str, Any] | None = None
    """What the other nodes sent to node 0 (None on one node)."""
    launch_time: dict[str, Any] | None = None
    """Where the launches' wall time went (``run_folder.launch_time``); None before any launch has parts."""
    rounds_auto: RoundsCheck | None = None
    """``--rounds auto``'s last decision; None without it."""

    def __post_init__(self) -> None:
        # an empty "parity" object is no parity result, as summaries have always read it
        if self.parity == Parity():
            self.parity = None

    @classmethod
    def read(cls, path: str | Path) -> Summary:
        """The summary.json at ``path`` (a run folder or the file); ``InputError`` naming the file when it
        is missing, not JSON, or not a summary."""
        from fsdpbench.results import run_folder

        path = Path(path)
        if path.is_dir():
            path = path / run_folder.SUMMARY
        hint = f"`fsdpbench ab --resume {path.parent}` writes it again from the run's steps"
        blob = records.read_bytes(path)  # a file that is not there or not readable: no hint
        try:
            summary = records.decode(blob, cls, str(path))
        except InputError as exc:
            raise InputError(f"{exc}; {hint}") from None
        if summary.schema_version is None:
            raise InputError(f"{path}: not an fsdpbench summary.json (no schema_version); {hint}")
        return summary

    def write(self, path: str | Path) -> Path:
        """Write ``to_dict()`` to ``path`` atomically (indented JSON, as every run folder file)."""
        from fsdpbench.results import run_folder

        return run_folder.write_atomic(path, records.encode(self))

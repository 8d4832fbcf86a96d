"""``summary.json`` as typed objects: what ``summarize.build_summary`` writes and the report reads.

Field names, order and values are the file's (docs/DATA.md, "summary.json"): ``to_dict`` gives the
JSON object key for key, ``from_dict`` reads one back. ``from_dict`` takes partial objects as the
report always has: a key the object lacks (a file written before the field existed, a hand-made
summary) reads as None (an absent list or mapping as empty); keys this version does not know are
dropped. ``Summary.read`` is the strict reader of a file: it refuses one without ``schema_version``.
Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdpbench.errors import InputError


def _plain(value: Any) -> Any:
    """JSON-ready ``value``: nested dataclasses through their ``to_dict``, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _fields_dict(obj: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _pair(value: Any) -> tuple[Any, Any] | None:
    return tuple(value) if value else None  # type: ignore[return-value]


class _Record:
    """``to_dict`` (fields in order, nested records as dicts) and a ``from_dict`` that reads each field
    by name, a missing key as None; records with nested parts override ``from_dict``."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


@dataclass(kw_only=True, slots=True)
class RoundMedian(_Record):
    """One timed round of an arm: the median step time over its timed steps."""

    round: int | None
    median_ms: float | None
    n_steps: int | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoundMedian:
        return cls(round=d.get("round"), median_ms=d.get("median_ms"), n_steps=d.get("n_steps"))


@dataclass(kw_only=True, slots=True)
class ArmSummary(_Record):
    """One arm's statistics; an arm with no timed round has ``status="missing"`` and every figure None."""

    status: str | None
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

    def to_dict(self) -> dict[str, Any]:
        out = _fields_dict(self)
        if self.memory_timeline is None:
            del out["memory_timeline"]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArmSummary:
        names = {f.name for f in dataclasses.fields(cls)} - {"status", "rounds"}
        return cls(
            status=d.get("status"),
            rounds=[RoundMedian.from_dict(r) for r in d.get("rounds") or []],
            **{k: d.get(k) for k in names},
        )


@dataclass(kw_only=True, slots=True)
class RatioSummary(_Record):
    """``stats.Comparison.to_dict()`` as stored: test arm against base arm (ratio > 1 = test slower)."""

    base: str | None
    test: str | None
    ratio: float | None
    ci95: tuple[float, float] | None
    rounds: tuple[int, int] | None
    time_change_pct: float | None
    significant: bool | None
    rounds_needed_1pct: int | None
    verdict: str | None

    @classmethod
    def _kwargs(cls, d: dict[str, Any]) -> dict[str, Any]:
        plain = ("base", "test", "ratio", "time_change_pct", "significant", "rounds_needed_1pct", "verdict")
        return {
            **{k: d.get(k) for k in plain},
            "ci95": _pair(d.get("ci95")),
            "rounds": _pair(d.get("rounds")),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RatioSummary:
        return cls(**cls._kwargs(d))


@dataclass(kw_only=True, slots=True)
class MemoryRatio(_Record):
    """Peak memory of the test arm over the base arm's, and which measure both arms have."""

    measure: str | None
    base_bytes: int | None
    test_bytes: int | None
    ratio: float | None


@dataclass(kw_only=True, slots=True)
class ArmComparison(RatioSummary):
    """One entry of ``comparisons``: the step-time ratio, per marked phase the same, and the memory ratio
    (its verdict names the memory ratio too)."""

    phases: dict[str, RatioSummary | None] | None = None
    memory: MemoryRatio | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArmComparison:
        phases = d.get("phases")
        memory = d.get("memory")
        return cls(
            **cls._kwargs(d),
            phases=None
            if phases is None
            else {p: None if c is None else RatioSummary.from_dict(c) for p, c in phases.items()},
            memory=None if memory is None else MemoryRatio.from_dict(memory),
        )


@dataclass(kw_only=True, slots=True)
class Parity(_Record):
    """The loss check of ``summarize.check_parity``: the first steps' losses of every arm against the first."""

    valid: bool | None
    mode: str | None
    tolerance: float | None
    steps_compared: int | None
    max_abs_diff: float | None
    max_rel_diff: float | None
    reason: str | None


@dataclass(kw_only=True, slots=True)
class MissingLaunch(_Record):
    """An arm-round of the plan with no finished launch."""

    arm: str | None
    round: int | None
    why: str | None


@dataclass(kw_only=True, slots=True)
class Summary(_Record):
    """The whole ``summary.json`` of a run (docs/DATA.md)."""

    schema_version: int | None
    arms: dict[str, ArmSummary]
    comparisons: list[ArmComparison]
    verdict: str | None
    """Every comparison's verdict joined by "; ", prefixed "INVALID COMPARISON" when parity failed."""
    parity: Parity | None
    """None when the summary holds no parity result (absent or empty)."""
    missing: list[MissingLaunch]
    profiles: dict[str, str]
    """Arm → its profile folder, relative to the run folder."""
    flops_per_token: float | None
    peak_bf16_flops_per_device: float | None
    failures: list[dict[str, Any]]
    """The launcher's failure records, each with ``resolved``."""
    collected: dict[str, Any] | None
    """What the other nodes sent to node 0 (None on one node)."""
    launch_time: dict[str, Any] | None = None
    """Where the launches' wall time went (``run_folder.launch_time``); None before any launch has parts."""
    rounds_auto: dict[str, Any] | None = None
    """``--rounds auto``'s last decision (``rounds.RoundsCheck.to_dict``); None without it."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        return cls(
            schema_version=d.get("schema_version"),
            arms={label: ArmSummary.from_dict(a) for label, a in (d.get("arms") or {}).items()},
            comparisons=[ArmComparison.from_dict(c) for c in d.get("comparisons") or []],
            verdict=d.get("verdict"),
            parity=Parity.from_dict(d["parity"]) if d.get("parity") else None,
            missing=[MissingLaunch.from_dict(m) for m in d.get("missing") or []],
            profiles=dict(d.get("profiles") or {}),
            flops_per_token=d.get("flops_per_token"),
            peak_bf16_flops_per_device=d.get("peak_bf16_flops_per_device"),
            failures=list(d.get("failures") or []),
            collected=d.get("collected"),
            launch_time=d.get("launch_time"),
            rounds_auto=d.get("rounds_auto"),
        )

    @classmethod
    def read(cls, path: str | Path) -> Summary:
        """The summary.json at ``path`` (a run folder or the file); ``InputError`` naming the file when it
        is missing, not JSON, or not a summary."""
        from fsdpbench.results import run_folder

        path = Path(path)
        if path.is_dir():
            path = path / run_folder.SUMMARY
        data = run_folder.read_json_file(path)
        try:
            if not isinstance(data, dict) or "schema_version" not in data:
                raise KeyError("schema_version")
            return cls.from_dict(data)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise InputError(
                f"{path}: not an fsdpbench summary.json ({type(exc).__name__}: {exc}); "
                f"`fsdpbench ab --resume {path.parent}` writes it again from the run's steps"
            ) from None

    def write(self, path: str | Path) -> Path:
        """Write ``to_dict()`` to ``path`` atomically (indented JSON, as every run folder file)."""
        from fsdpbench.results import run_folder

        return run_folder.write_json(path, self.to_dict())

"""The run folder's format (docs/DATA.md): its file and folder names, JSON reading and writing, launch bookkeeping.

Written by ``run/`` and read by ``report/`` and ``analysis/``, so it imports neither. Writing is crash-safe: files
are replaced atomically, ``steps.jsonl`` is only appended (and a partial last line, from a killed writer, is
ignored when reading). Torch-free. The summary is built in ``run/summarize.py``; the derived files
(``analysis.json``, ``diff.json``) in ``analysis/derived.py``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from fsdpbench.errors import InputError
from fsdpbench.records import JSON_OPTIONS, read_bytes

SCHEMA_VERSION = 2
"""2: the paired verdict (``comparisons[].method`` …) and manifest ``arm_runtime[arm].prefetch_verified_after_steps``;
1: the unpaired bootstrap verdict, and that key named ``prefetch_verified_after_warmup``."""

PREFETCH_VERIFIED = "prefetch_verified_after_steps"
"""manifest.json ``arm_runtime[arm]``: whether the arm's prefetch lists were still the plan's after all its steps."""
PREFETCH_VERIFIED_SCHEMA_1 = "prefetch_verified_after_warmup"
"""The same key in schema-1 manifests (it was always set after all the steps, not after the warm-up)."""

# ---- names in a run folder (docs/DATA.md) -------------------------------------------------------------------
MANIFEST = "manifest.json"
STEPS = "steps.jsonl"
SUMMARY = "summary.json"
STATUS = "status.json"
ANALYSIS = "analysis.json"
DIFF_JSON = "diff.json"
DIFF_MD = "diff.md"
PROFILES = "profiles"
MEMORY_STEP = "memory_step"
"""``memory_step/<arm>/rank<k>.trace.json.gz`` and ``rank<k>.live.json``: the profiling launch's memory-recording
step (docs/memory.md), kept out of ``profiles/`` so the attribution never reads it."""
LAUNCHES = "launches"
REPORT = "report"
"""Stem of ``report.md`` / ``report.html``; their figures go to ``FIGURES``."""
FIGURES = "figures"
SWEEP_STATE = "sweep.json"
"""The state file at the top of a sweep tree (``fsdpbench sweep``), beside its run folders."""
RUN_MARKERS = (MANIFEST, SUMMARY, STEPS)
"""A folder holding any of these is a run folder."""

# in each launch folder (launches/<arm>/round<r> or .../profile)
LAUNCH_SPEC = "spec.json"
LAUNCH_LOG = "torchrun.log"
LAUNCH_ENVIRONMENT = "environment.json"
"""Rank 0's facts about the device, libraries and backend, merged into the manifest by the launcher."""
LAUNCH_NODE_ENVIRONMENT = "environment_node{node}.json"
"""Each node's own facts (its local rank 0 writes them), read by the checks that run on every node."""
LAUNCH_TIMING = "timing.json"
"""Rank 0's wall-clock stamps (``time.time()``) of its launch's stages; the launcher turns them into the
``parts_s`` of status.json (``launch_parts``)."""
LAUNCH_ERROR = "error_rank{rank}.json"
"""What a failing rank writes (``LAUNCH_ERROR.format(rank=k)``); the launcher explains the failure from it."""

PROFILE_ROUND = -1
"""The ``round`` of an arm's profile launch, everywhere (launch specs, ``steps.jsonl``, ``status.json``,
the manifest's launches); timed rounds are 0, 1, ... On disk the launch's ``kind`` says the same."""


PROFILED_ROUND = 0
"""The round whose launch also profiles each arm, after its timed steps (unless ``--separate-profile``):
the first, because ``--rounds auto`` does not know the last in advance and a run stopped early keeps it."""
PROFILE_AFTER_TIMED = 2
"""Steps a profiled round runs under the profiler after its timed steps: one the profiler warms up on,
then the recorded one (the model, caches and communicators are already warm from the timed steps); with
``--profile-steps K`` the recorded one and the K − 1 after it (``PROFILE_AFTER_TIMED - 1 + K`` steps)."""


def launch_kind(round_: int) -> str:
    """``profile`` for the profile launch (``PROFILE_ROUND``), else ``timed``."""
    return "profile" if round_ == PROFILE_ROUND else "timed"


def profile_dir(run_dir: str | Path, arm: str) -> Path:
    """``profiles/<arm>``: the arm's profiler output, one ``rank<k>/`` folder per rank."""
    return Path(run_dir) / PROFILES / arm


def memory_step_files(run_dir: str | Path, arm: str, rank: int) -> tuple[Path, Path]:
    """(Chrome trace, live-at-start JSON) of ``rank``'s memory-recording step of ``arm``."""
    folder = Path(run_dir) / MEMORY_STEP / arm
    return folder / f"rank{rank}.trace.json.gz", folder / f"rank{rank}.live.json"


def memory_step_npu_dir(run_dir: str | Path, arm: str, rank: int) -> Path:
    """``memory_step/<arm>/rank<k>``: the torch_npu profile of ``rank``'s memory step (its ``*_ascend_pt``
    folder once parsed)."""
    return Path(run_dir) / MEMORY_STEP / arm / f"rank{rank}"


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder holding at least one of a run's own files (``RUN_MARKERS``)."""
    path = Path(path)
    return path.is_dir() and any((path / m).is_file() for m in RUN_MARKERS)


def create_run_dir(out: str | Path, name: str) -> Path:
    """Create ``<out>/<name>_<YYYYmmdd_HHMMSS>`` (a suffix ``_2``, ``_3``... if it exists; never reused)."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{time.strftime('%Y%m%d_%H%M%S')}"
    for i in range(1, 1000):
        path = root / (stem if i == 1 else f"{stem}_{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise InputError(f"cannot create a new run folder under {root}")


def write_atomic(path: str | Path, content: str | bytes) -> Path:
    """Write ``content`` to ``path`` atomically (a reader sees the old or the new file, never half);
    creates the parent folder. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(content.encode() if isinstance(content, str) else content)
    os.replace(tmp, path)
    return path


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON, atomically. Returns ``path``."""
    return write_atomic(path, orjson.dumps(data, option=JSON_OPTIONS))


def read_json_file(path: str | Path) -> Any:
    """Read a JSON file, or raise ``InputError`` naming it."""
    blob = read_bytes(path)
    try:
        return orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); rerun the command that wrote it") from None


def read_json_if_readable(path: str | Path) -> Any:
    """Parsed JSON of ``path``, or ``None`` when it is missing, unreadable or not valid JSON."""
    try:
        return orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def parse_jsonl(blob: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records of JSON-lines text, and how many non-blank lines could not be decoded (a line torn
    by a killed writer is one)."""
    records, bad = [], 0
    for line in blob.splitlines():
        if not line.strip():
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad += 1
    return records, bad


def append_step(path: str | Path, record: dict[str, Any]) -> None:
    """Append one step record as a line and flush it to the OS."""
    with open(path, "ab") as f:
        f.write(orjson.dumps(record) + b"\n")
        f.flush()


def read_step_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """All complete step records of a run (a truncated last line is skipped)."""
    path = Path(run_dir) / STEPS
    if not path.exists():
        return []
    return parse_jsonl(path.read_bytes())[0]


def drop_steps(run_dir: str | Path, arm: str, round_: int, keep_to: Path | None = None) -> int:
    """Remove the records of one arm-round from ``steps.jsonl`` (before it is run again on resume).

    The dropped lines go to ``keep_to`` when given. Returns how many were dropped.
    """
    path = Path(run_dir) / STEPS
    if not path.exists():
        return 0
    kept, dropped = [], []
    for line in path.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        (dropped if (rec.get("arm"), rec.get("round")) == (arm, round_) else kept).append(line)
    if dropped:
        if keep_to is not None:
            keep_to.parent.mkdir(parents=True, exist_ok=True)
            with open(keep_to, "ab") as f:
                f.write(b"\n".join(dropped) + b"\n")
        write_atomic(path, b"".join(line + b"\n" for line in kept))
    return len(dropped)


def set_aside_profiles(run_dir: str | Path, arm: str, keep_to: Path) -> Path | None:
    """Move ``profiles/<arm>`` (an earlier profile launch's traces) to ``keep_to`` before the arm is
    profiled again, so no old rank trace is analysed beside the new ones. Returns where they went,
    or None when there was nothing to move."""
    old = profile_dir(run_dir, arm)
    if not old.exists():
        return None
    keep_to.parent.mkdir(parents=True, exist_ok=True)
    os.replace(old, keep_to)
    return keep_to


LAUNCH_PARTS = ("start", "process_group", "model", "warmup", "timed", "profile", "teardown", "after")
"""The parts of a launch's wall time, in order (docs/DATA.md, status.json ``parts_s``)."""
INIT_PARTS = ("start", "process_group", "model")
"""The parts that are initialisation: interpreter and imports, process group, model build + init + sharding."""
_STAMP_ORDER = ("entered", "process_group", "model", "warmup", "timed", "profile")


def launch_parts(
    stamps: Mapping[str, float] | None, spawned: float, exited: float, ended: float
) -> dict[str, float] | None:
    """Seconds of each of ``LAUNCH_PARTS`` from rank 0's stamps (``LAUNCH_TIMING``) and the launcher's own
    wall-clock times: ``spawned`` (torchrun started), ``exited`` (it exited), ``ended`` (the launch's
    after-work — the NPU profile parse, the collect step — done). None when a stamp is missing (a failed
    launch, or rank 0 on another host)."""
    if not stamps or any(not isinstance(stamps.get(k), int | float) for k in _STAMP_ORDER):
        return None
    edges = [spawned, *(float(stamps[k]) for k in _STAMP_ORDER), exited, ended]
    return {part: round(b - a, 4) for part, a, b in zip(LAUNCH_PARTS, edges[:-1], edges[1:], strict=True)}


def launch_time(launches: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """summary.json's ``launch_time``: where the launches' time went, from the manifest's successful
    launches (the last attempt of each): their total wall time, each part's total, the shares of the timed
    steps and of initialisation, and each launch's parts; None before any launch has its parts."""
    last: dict[tuple[str, int], Mapping[str, Any]] = {}
    for item in launches:
        last[(item["arm"], item["round"])] = item
    timed = [x for x in last.values() if x.get("rc") == 0 and x.get("parts_s")]
    if not timed:
        return None
    total = math.fsum(float(x["wall_s"]) for x in timed)
    parts = {p: round(math.fsum(float(x["parts_s"].get(p) or 0.0) for x in timed), 3) for p in LAUNCH_PARTS}
    init = math.fsum(parts[p] for p in INIT_PARTS)
    return {
        "launches": len(timed),
        "wall_s": round(total, 3),
        "parts_s": parts,
        "per_launch": [
            {"arm": x["arm"], "round": x["round"], "wall_s": x["wall_s"], "parts_s": x["parts_s"]}
            for x in timed
        ],
        "timed_pct": 100.0 * parts["timed"] / total if total > 0 else None,
        "init_pct": 100.0 * init / total if total > 0 else None,
    }


def launch_time_line(launch_time: Mapping[str, Any] | None) -> str | None:
    """ "timed steps were N % of the run's time; initialisation M % (S s in L launches)", or None."""
    if not launch_time or launch_time.get("timed_pct") is None:
        return None
    return (
        f"timed steps were {launch_time['timed_pct']:.0f} % of the run's time; initialisation "
        f"{launch_time['init_pct']:.0f} % ({launch_time['wall_s']:.1f} s in {launch_time['launches']} launches)"
    )


def launch_dir(run_dir: str | Path, arm: str, round_: int) -> Path:
    """``launches/<arm>/round<r>``, or ``launches/<arm>/profile`` for ``PROFILE_ROUND``."""
    leaf = "profile" if round_ == PROFILE_ROUND else f"round{round_}"
    return Path(run_dir) / LAUNCHES / arm / leaf


def launch_ok(run_dir: str | Path, arm: str, round_: int) -> bool:
    """Whether that launch finished with rc 0 and passed the launcher's checks (no ``error``)."""
    status = read_json_if_readable(launch_dir(run_dir, arm, round_) / STATUS)
    return isinstance(status, dict) and status.get("rc") == 0 and not status.get("error")


def diff_list(payload: Any) -> list[dict[str, Any]]:
    """The diffs of a diff.json payload (one diff object, or a list of them for several test arms)."""
    if isinstance(payload, dict):
        return [payload]
    if isinstance(payload, list):
        return [d for d in payload if isinstance(d, dict)]
    return []


def profiled_arms(run_dir: str | Path) -> list[str]:
    """Arms with a non-empty ``profiles/<arm>`` folder: the manifest's arms first, in its order, then
    any other folder by name."""
    root = Path(run_dir) / PROFILES
    if not root.is_dir():
        return []
    found = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.iterdir()))
    manifest = read_json_if_readable(Path(run_dir) / MANIFEST)
    order = [a.get("label") for a in (manifest or {}).get("arms") or [] if isinstance(a, dict)]
    return [a for a in order if a in found] + [a for a in found if a not in order]


def upgrade_manifest(manifest: Any) -> Any:
    """A manifest as read, with the keys of older schemas under their schema-2 names (changed in place; anything
    that is not a manifest object is returned as is): ``arm_runtime[arm].prefetch_verified_after_warmup`` of a
    schema-1 file (and of schema-2 files written before the rename was released) reads as
    ``prefetch_verified_after_steps``."""
    runtime = manifest.get("arm_runtime") if isinstance(manifest, dict) else None
    for facts in (runtime or {}).values() if isinstance(runtime, dict) else ():
        if isinstance(facts, dict) and PREFETCH_VERIFIED_SCHEMA_1 in facts:
            old = facts.pop(PREFETCH_VERIFIED_SCHEMA_1)
            facts.setdefault(PREFETCH_VERIFIED, old)
    return manifest

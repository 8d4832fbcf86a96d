"""The results folder of ``fsdpbench run``/``ab``: its one owner (layout and fields: docs/DATA.md).

Every other module takes the folder's file names, JSON reading and writing, launch bookkeeping and the
derived files (``analysis.json``, ``diff.json``) from here. Writing is crash-safe: files are replaced
atomically, ``steps.jsonl`` is only appended (and a partial last line, from a killed writer, is ignored
when reading). Torch-free; the analysis modules are imported only by the functions that analyse.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fsdpbench.errors import InputError
from fsdpbench.run import phases, stats
from fsdpbench.run.device import peak_bf16_flops, peak_flops
from fsdpbench.run.summary import ArmComparison, ArmSummary, MissingLaunch, Parity, RoundMedian, Summary

if TYPE_CHECKING:  # the analysis side imports pandas: only the functions that analyse load it
    from fsdpbench.analysis.diff import DiffResult

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

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
then the recorded one (the model, caches and communicators are already warm from the timed steps)."""


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


def memory_timelines(run_dir: str | Path, labels: list[str], rank: int = 0) -> dict[str, Any]:
    """``{arm: memory_timeline}`` of ``rank`` for the arms whose memory step was recorded
    (``analysis.memory_timeline.step_timeline``; on NPU ``analysis.ascend_memory_timeline``); an arm whose
    files cannot be read gets ``{"error": why}``."""
    import gzip

    from fsdpbench.analysis.memory_timeline import step_timeline

    out: dict[str, Any] = {}
    for arm in labels:
        trace, live = memory_step_files(run_dir, arm, rank)
        npu_dir = memory_step_npu_dir(run_dir, arm, rank)
        if not trace.is_file() and npu_dir.is_dir():
            out[arm] = _ascend_memory_timeline(npu_dir, live, rank)
            continue
        if not trace.is_file() or not live.is_file():
            continue
        try:
            events = orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
            facts = read_json_file(live)
            out[arm] = step_timeline(events, facts["live_at_start_bytes"], facts.get("device_type", 0))
            out[arm]["rank"] = rank
        except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
            out[arm] = {"error": f"{trace}: {exc}"}
    return out


def memory_timelines_of_rank(run_dir: str | Path, summary: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """``{arm: memory_timeline}`` for the report and the diff: summary.json's (rank 0) for ``rank`` 0, else
    read from ``memory_step/<arm>/`` (``--memory-rank``). Raises ``InputError`` when no arm recorded ``rank``."""
    labels = list(summary.get("arms") or {})
    if rank == 0:
        return {label: (summary["arms"].get(label) or {}).get("memory_timeline") for label in labels}
    if rank < 0:
        raise InputError(f"--memory-rank {rank}: a rank is 0 or more")
    found = memory_timelines(run_dir, labels, rank)
    if not found:
        have = sorted(
            {p.name.split(".")[0].removeprefix("rank") for p in (Path(run_dir) / MEMORY_STEP).glob("*/rank*")}
        )
        raise InputError(
            f"{Path(run_dir) / MEMORY_STEP}: no arm recorded a memory step of rank {rank} "
            f"(ranks recorded: {', '.join(have) or 'none'}); pick one of those with --memory-rank"
        )
    return {label: found.get(label) for label in labels}


def _ascend_memory_timeline(npu_dir: Path, live: Path, rank: int) -> dict[str, Any]:
    """The memory timeline of one rank's parsed torch_npu memory step (``*_ascend_pt`` under ``npu_dir``)."""
    from fsdpbench.analysis.ascend_memory_timeline import ascend_step_timeline, read_export

    folders = sorted(npu_dir.glob("*_ascend_pt"))
    if not folders:
        return {
            "error": f"{npu_dir}: no *_ascend_pt folder; the memory step's torch_npu profile was not parsed "
            "(see the profiling launch's ascend_parse.log: launches/<arm>/round0/, or profile/)"
        }
    try:
        facts = read_json_file(live) if live.is_file() else {}
        timeline = ascend_step_timeline(read_export(folders[-1]), facts.get("live_at_start_bytes"))
    except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
        return {"error": f"{folders[-1]}: {exc}"}
    timeline["rank"] = rank
    return timeline


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
    return write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def read_json_file(path: str | Path) -> Any:
    """Read a JSON file, or raise ``InputError`` naming it."""
    try:
        return orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
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


def build_summary(
    manifest: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    done: set[tuple[str, int]] | None = None,
    flops_per_token: float | None = None,
) -> dict[str, Any]:
    """``summarize_run(...).to_dict()``: the JSON object of ``summary.json``."""
    return summarize_run(manifest, steps, done=done, flops_per_token=flops_per_token).to_dict()


def summarize_run(
    manifest: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    done: set[tuple[str, int]] | None = None,
    flops_per_token: float | None = None,
) -> Summary:
    """The ``summary.json`` of a run, typed, from its manifest and step records (see docs/DATA.md).

    Args:
        manifest: the run's manifest (config, arms, order, environment).
        steps: records from ``read_step_records``.
        done: arm-rounds whose launch succeeded; rounds outside it are listed under ``missing``
            and left out of the statistics (``None`` = every round that has timed steps).
        flops_per_token: model FLOPs per token (forward + backward) for TFLOP/s and MFU.
    """
    cfg = manifest["config"]
    labels = [a["label"] for a in manifest["arms"]]
    env = manifest.get("environment") or {}
    world = int(env.get("world_size") or cfg["nproc"] * cfg["nnodes"])
    peak = peak_bf16_flops(env.get("device_name"))
    runtime = manifest.get("arm_runtime") or {}

    timed: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    timed_records: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    mem: dict[str, list[tuple[Any, Any, Any]]] = defaultdict(list)
    rss_since: dict[str, set[str]] = defaultdict(set)
    tokens_per_step: dict[str, float] = {}
    for rec in steps:
        if rec.get("kind") != "timed":
            continue
        key = (rec["arm"], rec["round"])
        if done is not None and key not in done:
            continue
        timed[rec["arm"]][rec["round"]].append(float(rec["time_ms"]))
        timed_records[rec["arm"]][rec["round"]].append(rec)
        mem[rec["arm"]].append(
            (rec.get("mem_allocated_bytes"), rec.get("mem_reserved_bytes"), rec.get("mem_peak_rss_bytes"))
        )
        if rec.get("mem_peak_rss_since"):
            rss_since[rec["arm"]].add(rec["mem_peak_rss_since"])
        tokens_per_step[rec["arm"]] = float(rec["tokens"])

    arms: dict[str, ArmSummary] = {}
    round_medians: dict[str, list[float]] = {}
    for label in labels:
        rounds = timed.get(label, {})
        if not rounds:
            arms[label] = ArmSummary(status="missing")
            continue
        per_round = [
            RoundMedian(round=r, median_ms=stats.median(v), n_steps=len(v)) for r, v in sorted(rounds.items())
        ]
        medians = [r.median_ms for r in per_round]
        round_medians[label] = medians
        pooled = [t for v in rounds.values() for t in v]
        med = stats.median(medians)
        tps = tokens_per_step[label] / world / (med / 1e3)
        tflops = flops_per_token * tps / 1e12 if flops_per_token else None
        allocs = [m[0] for m in mem[label] if m[0] is not None]
        reserved = [m[1] for m in mem[label] if m[1] is not None]
        arm_peak = arm_peak_flops(env.get("device_name"), runtime.get(label), cfg, label)
        rss = [m[2] for m in mem[label] if m[2] is not None]
        arms[label] = ArmSummary(
            status="ok",
            rounds=per_round,
            median_ms=med,
            p10_ms=stats.percentile(pooled, 10),
            p90_ms=stats.percentile(pooled, 90),
            tokens_per_s_per_device=tps,
            tflops_per_device=tflops,
            mfu=tflops * 1e12 / arm_peak if (tflops is not None and arm_peak) else None,
            peak_flops_per_device=arm_peak,
            peak_mem_allocated_bytes=max(allocs) if allocs else None,
            peak_mem_reserved_bytes=max(reserved) if reserved else None,
            phases=phases.arm_phases(timed_records[label]),
            peak_rss_bytes=max(rss) if rss else None,
            peak_rss_since=_rss_since(rss_since.get(label)) if rss else None,
        )

    comparisons = []
    if labels and labels[0] in round_medians:
        base = labels[0]
        for label in labels[1:]:
            if label in round_medians:
                comp = stats.compare_arms(
                    base, label, round_medians[base], round_medians[label], seed=cfg.get("seed", 0)
                ).to_dict()
                comp["phases"] = phases.compare_phases(
                    base, label, arms[base].phases, arms[label].phases, seed=cfg.get("seed", 0)
                )
                comp = with_memory_ratio(comp, arms[base].to_dict(), arms[label].to_dict())
                comparisons.append(ArmComparison.from_dict(comp))
    parity = Parity.from_dict(
        check_parity(steps, labels, cfg, done, runtime=runtime, device_type=env.get("device_type"))
    )
    verdict = "; ".join(c.verdict for c in comparisons) or None
    if verdict and not parity.valid:
        verdict = f"INVALID COMPARISON (losses differ: {parity.reason}); timing only: {verdict}"
    missing: list[MissingLaunch] = []
    for item in manifest.get("order", []):
        key = (item["arm"], item["round"])
        if key not in (done if done is not None else {(a, r) for a, rs in timed.items() for r in rs}):
            missing.append(MissingLaunch(arm=item["arm"], round=item["round"], why="not run yet"))
    return Summary(
        schema_version=SCHEMA_VERSION,
        arms=arms,
        comparisons=comparisons,
        verdict=verdict,
        parity=parity,
        missing=missing,
        profiles={a: f"{PROFILES}/{a}" for a in labels if (manifest.get("profiles") or {}).get(a)},
        flops_per_token=flops_per_token,
        peak_bf16_flops_per_device=peak,
        failures=_failures(manifest, done),
        collected=_collected(manifest),
        launch_time=launch_time(manifest.get("launches") or []),
        rounds_auto=manifest.get("rounds_auto"),
    )


def _failures(manifest: dict[str, Any], done: set[tuple[str, int]] | None) -> list[dict[str, Any]]:
    """Every failed launch attempt, first cause first (the launcher's records), each with ``resolved``:
    whether a later attempt of the same launch succeeded."""
    profiles = manifest.get("profiles") or {}
    out = []
    for f in manifest.get("failures") or []:
        if f["round"] == PROFILE_ROUND:
            resolved = bool(profiles.get(f["arm"]))
        else:
            resolved = done is not None and (f["arm"], f["round"]) in done
        out.append({**f, "resolved": resolved})
    return out


def _collected(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """What the other nodes sent to node 0 (None on one node): totals and the files left in place."""
    if int((manifest.get("config") or {}).get("nnodes") or 1) <= 1:
        return None
    records = manifest.get("collected") or []
    return {
        "nodes": sorted({c["node"] for c in records}),
        "files": sum(c["files"] for c in records),
        "bytes": sum(c["bytes"] for c in records),
        "failed_check": [
            {"node": c["node"], "path": p} for c in records for p in c.get("failed_check") or []
        ],
        "left_in_place": [
            {"node": c["node"], **item} for c in records for item in c.get("left_in_place") or []
        ],
    }


def arm_peak_flops(
    device_name: str | None, runtime: dict[str, Any] | None, cfg: dict[str, Any], label: str
) -> float | None:
    """The peak FLOP/s an arm's MFU is taken against: the device model's peak for the parameter dtype
    the arm ran with (``arm_runtime``; the configured one for runs recorded before it existed)."""
    runtime = runtime or {}
    dtype = runtime.get("param_dtype") or next(
        (a.get("param_dtype") for a in cfg.get("arms", []) if a.get("label") == label), "float32"
    )
    return peak_flops(device_name, dtype, runtime.get("float32_matmul_precision") or "highest")


ACCELERATOR_PARITY_ULPS = 8
"""Exact parity on NPU/GPU allows this many float32 rounding steps of the loss: the same float32
arithmetic in another order (a different kernel or reduction tree) moves the last bits."""


PEAK_MEMORY_MEASURES = (
    ("peak_mem_allocated_bytes", "peak allocated (device allocator)"),
    ("peak_rss_bytes", "peak resident set (process)"),
)
"""The figures a memory ratio is taken from, in order of preference: the device allocator's peak
allocated where both arms have it (GPU/NPU), else the processes' peak resident set (CPU)."""


def _rss_since(spans: set[str] | None) -> str:
    """``"step"`` when every step's peak resident set was reset before it, else ``"process start"``."""
    return "step" if spans == {"reset"} else "process start"


def peak_memory_figure(arm: dict[str, Any]) -> tuple[int | None, str | None]:
    """(bytes, label) of an arm's peak memory: the first of ``PEAK_MEMORY_MEASURES`` it has."""
    for key, label in PEAK_MEMORY_MEASURES:
        if arm.get(key) is not None:
            if key == "peak_rss_bytes" and arm.get("peak_rss_since") == "process start":
                label += ", since process start"
            return arm[key], label
    return None, None


def with_memory_ratio(comp: dict[str, Any], base: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """``comp`` with ``memory`` (the peak-memory ratio test/base and what it measures) and the ratio
    beside the time ratio in its verdict; ``memory`` is None when the arms share no measure."""
    for key, label in PEAK_MEMORY_MEASURES:
        b, t = base.get(key), test.get(key)
        if b and t is not None:
            if key == "peak_rss_bytes" and "process start" in (
                base.get("peak_rss_since"),
                test.get("peak_rss_since"),
            ):
                label += ", since process start"
            comp["memory"] = {"measure": label, "base_bytes": b, "test_bytes": t, "ratio": t / b}
            comp["verdict"] = (
                f"{comp['verdict']}; peak memory {comp['test']}/{comp['base']} {t / b:.3f} ({label})"
            )
            return comp
    comp["memory"] = None
    return comp


def check_parity(
    steps: list[dict[str, Any]],
    labels: list[str],
    cfg: dict[str, Any],
    done: set[tuple[str, int]] | None = None,
    *,
    runtime: dict[str, dict[str, Any]] | None = None,
    device_type: str | None = None,
) -> dict[str, Any]:
    """Compare the losses of the first ``parity_steps`` steps of every arm against the first arm.

    Exact mode (SGD, fp32 params and reductions in every arm as run, ``runtime``): |Δloss| ≤ 1e-6 on
    CPU, and on NPU/GPU ≤ ``ACCELERATOR_PARITY_ULPS`` float32 spacings of the loss (1e-6 is one
    spacing of a loss near 12). Otherwise relative |Δloss| / |loss| ≤ 1e-2. Each arm's lowest finished
    round (profile launches included) is used. The losses themselves are per-rank float32 values summed
    in float64 on the host (``worker.StepRunner.record``).
    """
    runtime = runtime or {}
    accelerator = device_type in ("cuda", "npu")
    arms = [{**a, **(runtime.get(a.get("label")) or {})} for a in cfg.get("arms", [])]
    exact = cfg.get("optimizer") == "sgd" and all(
        a.get("param_dtype") == "float32" and a.get("reduce_dtype") == "float32" for a in arms
    )
    mode, tol = ("exact", 1e-6) if exact else ("relative", 1e-2)
    if exact and accelerator:
        mode = f"exact within {ACCELERATOR_PARITY_ULPS} float32 steps"
    n = min(int(cfg.get("parity_steps", 4)), int(cfg.get("warmup", 0)) + int(cfg.get("steps", 1)))
    losses: dict[str, list[float]] = {}
    for label in labels:
        by_round: dict[int, dict[int, float]] = defaultdict(dict)
        for rec in steps:
            if rec.get("arm") == label and rec.get("loss") is not None:
                if done is not None and rec["round"] != PROFILE_ROUND and (label, rec["round"]) not in done:
                    continue
                by_round[rec["round"]][rec["step"]] = float(rec["loss"])
        full = [
            r
            for r in sorted(by_round, key=lambda r: (r == PROFILE_ROUND, r))
            if all(s in by_round[r] for s in range(n))
        ]
        if full:
            losses[label] = [by_round[full[0]][s] for s in range(n)]
    result = {
        "valid": True,
        "mode": mode,
        "tolerance": tol,
        "steps_compared": 0,
        "max_abs_diff": None,
        "max_rel_diff": None,
        "reason": None,
    }
    present = [lb for lb in labels if lb in losses]
    if len(present) < 2 or n == 0:
        result["reason"] = "fewer than two arms with losses to compare"
        return result
    ref = losses[present[0]]
    max_abs = max_rel = 0.0
    worst = None
    for label in present[1:]:
        for s, (a, b) in enumerate(zip(ref, losses[label], strict=True)):
            d = abs(a - b)
            r = d / max(abs(a), 1e-30)
            step_tol = exact_tolerance(a, accelerator) if exact else tol
            if d > max_abs:
                max_abs = d
            if r > max_rel:
                max_rel = r
            if (d if exact else r) > step_tol and worst is None:
                worst = f"{mode} tolerance {step_tol:g} exceeded at {label} step {s}: loss {b:.8g} vs {present[0]} {a:.8g}"
    if exact and accelerator:
        tol = max(exact_tolerance(a, True) for a in ref)
    result.update(steps_compared=n, max_abs_diff=max_abs, max_rel_diff=max_rel, tolerance=tol)
    if worst:
        result.update(valid=False, reason=worst)
    return result


def exact_tolerance(loss: float, accelerator: bool) -> float:
    """|Δloss| allowed in exact mode: 1e-6 on CPU; on NPU/GPU, ``ACCELERATOR_PARITY_ULPS`` float32
    spacings at ``loss`` (at least 1e-6)."""
    if not accelerator:
        return 1e-6
    import numpy as np

    return max(1e-6, ACCELERATOR_PARITY_ULPS * float(np.spacing(np.float32(abs(loss)))))


# ---- derived files: analysis.json and diff.json ----------------------------------------------------------


def _newest_mtime(folder: Path) -> float:
    """The newest modification time of the profiler output under ``folder`` (0 when it holds none).

    Hidden files are skipped: the trace readers' event-table caches (``.<trace>.fsdpbench.npz``) and
    temporary files are written beside the traces when they are read, and are not new profiles."""
    newest = 0.0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.startswith("."):
                continue
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
            except OSError:  # removed while we walk
                pass
    return newest


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


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


def _has_fit_events(entry: Any) -> bool:
    """Whether an analysis.json entry keeps every rank's collective events (the per-call α–β fits'
    input). One written before they were kept would give a diff without those fits, unlike the traces
    it stands for, so it counts as stale while those traces are there."""
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    return not isinstance(ranks, list) or all(
        isinstance(r, dict) and isinstance(r.get("collective_events"), dict) for r in ranks
    )


def ensure_analysis(
    run_dir: str | Path,
    arms: Iterable[str] | None = None,
    *,
    step: int | None = None,
    reanalyze: bool = False,
    failed: dict[str, Exception] | None = None,
) -> dict[str, Any]:
    """Each arm's analysis: its ``analysis.json`` entry when fresh, else a new analysis of its profiles.

    An entry is fresh when ``analysis.json`` is no older than every file under ``profiles/<arm>`` and
    keeps each rank's collective events. New analyses of the default steps (``step`` None) are written
    back into ``analysis.json``, with those events (``Analysis.to_dict(fit_events=True)``), in one atomic
    write, which keeps the other fresh entries and drops stale ones, so the next call reuses them.

    Args:
        run_dir: a run folder (docs/DATA.md).
        arms: arm labels (default: ``profiled_arms``).
        step: analyse only this profiler step (never cached: ``analysis.json`` holds the default).
        reanalyze: analyse even fresh arms. An entry without its ranks' collective events (the per-call
            α–β fits' input; written before analysis.json kept them) is fresh only while the arm has
            no profiles to analyse again.
        failed: when given, an arm whose profiles are missing or cannot be analysed is put here and left
            out of the result; when None the error propagates.
    Returns:
        arm → its analysis JSON dict (reused) or ``Analysis`` object (analysed now), in ``arms`` order.
    Raises:
        InputError: (``failed`` None) an arm has no profiles, or its analysis failed.
    """
    run_dir = Path(run_dir)
    arms = profiled_arms(run_dir) if arms is None else list(arms)
    path = run_dir / ANALYSIS
    saved_at = _mtime(path)
    cached = read_json_if_readable(path) if saved_at is not None else None
    cached = cached if isinstance(cached, dict) else {}
    newest = {arm: _newest_mtime(profile_dir(run_dir, arm)) for arm in cached}
    fresh = {
        arm: entry
        for arm, entry in cached.items()
        if saved_at is not None
        and saved_at >= newest[arm]
        # without its events only while there are no profiles to analyse (an analysis.json kept alone)
        and (_has_fit_events(entry) or newest[arm] == 0.0)
    }
    out: dict[str, Any] = {}
    new: dict[str, Any] = {}
    for arm in arms:
        if arm in fresh and step is None and not reanalyze:
            log.debug("arm %s: using %s", arm, path)
            out[arm] = fresh[arm]
            continue
        folder = profile_dir(run_dir, arm)
        try:
            if not folder.is_dir() or _newest_mtime(folder) == 0.0:
                raise InputError(
                    f"arm {arm!r}: no profiles under {folder}; rerun with `fsdpbench ab --profile` "
                    f"(or the arm failed: see {LAUNCHES}/<arm>/round0/, or profile/ with --separate-profile)"
                )
            from fsdpbench.analysis import analyze  # pandas and the trace readers: only when analysing

            log.debug("arm %s: analyzing %s", arm, folder)
            out[arm] = analyze([folder], step=step)
        except Exception as exc:
            if failed is None:
                raise
            log.debug("analysis of %s failed", folder, exc_info=True)
            failed[arm] = exc
            fresh.pop(arm, None)
            continue
        if step is None:
            new[arm] = out[arm].to_dict(fit_events=True)
    if new:
        write_json(path, {**fresh, **new})
    return out


def diff_list(payload: Any) -> list[dict[str, Any]]:
    """The diffs of a diff.json payload (one diff object, or a list of them for several test arms)."""
    if isinstance(payload, dict):
        return [payload]
    if isinstance(payload, list):
        return [d for d in payload if isinstance(d, dict)]
    return []


def write_diffs(
    diffs: list[dict[str, Any]], json_path: str | Path | None, md_path: str | Path | None, markdown: str
) -> list[Path]:
    """Write diff.json (one object for one test arm, else a list; docs/DATA.md) and diff.md atomically;
    a ``None`` path is skipped. Returns the paths written."""
    written = []
    if json_path is not None:
        written.append(write_json(json_path, diffs[0] if len(diffs) == 1 else diffs))
    if md_path is not None:
        written.append(write_atomic(md_path, markdown))
    return written


def _run_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(
            f"{run_dir} is not a fsdpbench run folder (no {MANIFEST}); pass a run folder "
            "written by `fsdpbench ab --profile`, or two trace paths BASE TEST"
        )
    manifest = read_json_file(path)
    if len(manifest.get("arms") or []) < 2:
        raise InputError(
            f"{path} lists {len(manifest.get('arms') or [])} arm(s); a diff needs at least two (base and test)"
        )
    return manifest


def _diff_arms(
    run_dir: Path, manifest: dict[str, Any], analyses: Mapping[str, Any], memory_rank: int = 0
) -> list[DiffResult]:
    from fsdpbench.analysis.calibration import calibration_pairs
    from fsdpbench.analysis.diff import add_calibration, diff_analyses

    summary = read_json_file(run_dir / SUMMARY) if (run_dir / SUMMARY).is_file() else {}
    arms = {a["label"]: a for a in manifest["arms"]}
    env = manifest.get("environment") or {}
    model = (manifest.get("config") or {}).get("model")
    side = {"world_size": env.get("world_size"), "model": model}
    context = {
        "parity": summary.get("parity"),
        "base": side,
        "test": side,
        "num_layers": (model or {}).get("num_hidden_layers") if isinstance(model, Mapping) else None,
        "peak_memory": {
            label: list(peak_memory_figure(stats)) for label, stats in (summary.get("arms") or {}).items()
        },
        "memory_timeline": memory_timelines_of_rank(run_dir, summary, memory_rank),
    }
    labels = list(arms)
    base = labels[0]

    def pair(x: str, y: str) -> DiffResult:
        return diff_analyses(
            analyses[x],
            analyses[y],
            base_label=x,
            test_label=y,
            base_arm=arms[x],
            test_arm=arms[y],
            context=context,
        )

    results = [pair(base, label) for label in labels[1:]]
    # calibration covers every counterfactual pair: a pair between two test arms is diffed in memory only,
    # and its entries go with the diff of its later arm
    timed = {label: ((summary.get("arms") or {}).get(label) or {}).get("median_ms") for label in labels}
    extra: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x, y in calibration_pairs(arms):
        if x != base:
            extra[y].append(pair(x, y).to_dict())
    for result in results:
        add_calibration(result, arms, timed, extra[result.test])
    return results


def diff_run(
    run_dir: str | Path, *, reanalyze: bool = False, step: int | None = None, memory_rank: int = 0
) -> list[DiffResult]:
    """One ``DiffResult`` per test arm of a profiled run, each against the manifest's first arm; the memory
    timelines are ``memory_rank``'s (``memory_timelines_of_rank``).

    The analyses come from ``ensure_analysis``; parity from summary.json, the world size and model from
    manifest.json, the arms' options (prefetch, comm_fusion) from the manifest's arm entries.

    Raises:
        InputError: the folder is not a run, has fewer than two arms, or an arm has no profiles.
    """
    run_dir = Path(run_dir)
    manifest = _run_manifest(run_dir)
    labels = [a.get("label") for a in manifest["arms"]]
    analyses = ensure_analysis(run_dir, labels, step=step, reanalyze=reanalyze)
    return _diff_arms(run_dir, manifest, analyses, memory_rank)


def ensure_diffs(run_dir: str | Path, markdown: Callable[[list[DiffResult]], str]) -> list[dict[str, Any]]:
    """The diff JSON of every test arm: ``diff.json`` while it is no older than ``analysis.json`` (itself no
    older than the profiles), else a new diff (analysing what is stale) written to ``diff.json`` and
    ``diff.md``.

    Args:
        run_dir: a profiled run folder.
        markdown: renders the new diffs as the text of ``diff.md``.
    Returns:
        One diff dict per test arm, in manifest order (always a list).
    Raises:
        InputError: as ``diff_run``.
    """
    run_dir = Path(run_dir)
    manifest = _run_manifest(run_dir)
    labels = [a.get("label") for a in manifest["arms"]]
    saved_at, analysed_at = _mtime(run_dir / DIFF_JSON), _mtime(run_dir / ANALYSIS)
    if (
        saved_at is not None
        and analysed_at is not None
        and saved_at >= analysed_at
        and all(analysed_at >= _newest_mtime(profile_dir(run_dir, arm)) for arm in labels)
    ):
        diffs = diff_list(read_json_if_readable(run_dir / DIFF_JSON))
        if diffs:
            return diffs
    analyses = ensure_analysis(run_dir, labels)
    results = _diff_arms(run_dir, manifest, analyses)
    diffs = [r.to_dict() for r in results]
    write_diffs(diffs, run_dir / DIFF_JSON, run_dir / DIFF_MD, markdown(results))
    return diffs

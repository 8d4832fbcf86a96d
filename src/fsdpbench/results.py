"""The results folder of ``fsdpbench run``/``ab`` (layout and fields: docs/DATA.md).

Writing is crash-safe: JSON files are replaced atomically, ``steps.jsonl`` is only appended (and a
partial last line, from a killed writer, is ignored when reading). Torch-free.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from fsdpbench import stats
from fsdpbench.device import peak_bf16_flops
from fsdpbench.errors import InputError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
STEPS = "steps.jsonl"
SUMMARY = "summary.json"
STATUS = "status.json"


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


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically (a reader sees the old or the new file, never half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    """Read a JSON file, or raise ``InputError`` naming it."""
    try:
        return orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None


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


def read_steps(run_dir: str | Path) -> list[dict[str, Any]]:
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
        tmp = path.with_name(f".{STEPS}.tmp")
        tmp.write_bytes(b"".join(line + b"\n" for line in kept))
        os.replace(tmp, path)
    return len(dropped)


def set_aside_profiles(run_dir: str | Path, arm: str, keep_to: Path) -> Path | None:
    """Move ``profiles/<arm>`` (an earlier profile launch's traces) to ``keep_to`` before the arm is
    profiled again, so no old rank trace is analysed beside the new ones. Returns where they went,
    or None when there was nothing to move."""
    old = Path(run_dir) / "profiles" / arm
    if not old.exists():
        return None
    keep_to.parent.mkdir(parents=True, exist_ok=True)
    os.replace(old, keep_to)
    return keep_to


def launch_dir(run_dir: str | Path, arm: str, round_: int | None) -> Path:
    """``launches/<arm>/round<r>`` or ``launches/<arm>/profile`` (``round_`` None or -1)."""
    leaf = "profile" if round_ is None or round_ < 0 else f"round{round_}"
    return Path(run_dir) / "launches" / arm / leaf


def launch_ok(run_dir: str | Path, arm: str, round_: int | None) -> bool:
    """Whether that launch finished with rc 0 and passed the launcher's checks (no ``error``)."""
    path = launch_dir(run_dir, arm, round_) / STATUS
    if not path.exists():
        return False
    try:
        status = read_json(path)
    except InputError:
        return False
    return status.get("rc") == 0 and not status.get("error")


def build_summary(
    manifest: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    done: set[tuple[str, int]] | None = None,
    flops_per_token: float | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` of a run from its manifest and step records (see docs/DATA.md).

    Args:
        manifest: the run's manifest (config, arms, order, environment).
        steps: records from ``read_steps``.
        done: arm-rounds whose launch succeeded; rounds outside it are listed under ``missing``
            and left out of the statistics (``None`` = every round that has timed steps).
        flops_per_token: model FLOPs per token (forward + backward) for TFLOP/s and MFU.
    """
    cfg = manifest["config"]
    labels = [a["label"] for a in manifest["arms"]]
    env = manifest.get("environment") or {}
    world = int(env.get("world_size") or cfg["nproc"] * cfg["nnodes"])
    peak = peak_bf16_flops(env.get("device_name"))

    timed: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    mem: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    tokens_per_step: dict[str, float] = {}
    for rec in steps:
        if rec.get("kind") != "timed":
            continue
        key = (rec["arm"], rec["round"])
        if done is not None and key not in done:
            continue
        timed[rec["arm"]][rec["round"]].append(float(rec["time_ms"]))
        mem[rec["arm"]].append((rec.get("mem_allocated_bytes"), rec.get("mem_reserved_bytes")))
        tokens_per_step[rec["arm"]] = float(rec["tokens"])

    arms: dict[str, Any] = {}
    round_medians: dict[str, list[float]] = {}
    for label in labels:
        rounds = timed.get(label, {})
        if not rounds:
            arms[label] = {
                "status": "missing",
                "rounds": [],
                "median_ms": None,
                "p10_ms": None,
                "p90_ms": None,
                "tokens_per_s_per_device": None,
                "tflops_per_device": None,
                "mfu": None,
                "peak_mem_allocated_bytes": None,
                "peak_mem_reserved_bytes": None,
            }
            continue
        per_round = [
            {"round": r, "median_ms": stats.median(v), "n_steps": len(v)} for r, v in sorted(rounds.items())
        ]
        medians = [r["median_ms"] for r in per_round]
        round_medians[label] = medians
        pooled = [t for v in rounds.values() for t in v]
        med = stats.median(medians)
        tps = tokens_per_step[label] / world / (med / 1e3)
        tflops = flops_per_token * tps / 1e12 if flops_per_token else None
        allocs = [m[0] for m in mem[label] if m[0] is not None]
        reserved = [m[1] for m in mem[label] if m[1] is not None]
        arms[label] = {
            "status": "ok",
            "rounds": per_round,
            "median_ms": med,
            "p10_ms": stats.percentile(pooled, 10),
            "p90_ms": stats.percentile(pooled, 90),
            "tokens_per_s_per_device": tps,
            "tflops_per_device": tflops,
            "mfu": tflops * 1e12 / peak if (tflops is not None and peak) else None,
            "peak_mem_allocated_bytes": max(allocs) if allocs else None,
            "peak_mem_reserved_bytes": max(reserved) if reserved else None,
        }

    comparisons = []
    if labels and labels[0] in round_medians:
        base = labels[0]
        for label in labels[1:]:
            if label in round_medians:
                comp = stats.compare(
                    base, label, round_medians[base], round_medians[label], seed=cfg.get("seed", 0)
                )
                comparisons.append(comp.to_dict())
    parity = check_parity(steps, labels, cfg, done)
    verdict = "; ".join(c["verdict"] for c in comparisons) or None
    if verdict and not parity["valid"]:
        verdict = f"INVALID COMPARISON (losses differ: {parity['reason']}); timing only: {verdict}"
    missing = []
    for item in manifest.get("order", []):
        key = (item["arm"], item["round"])
        if key not in (done if done is not None else {(a, r) for a, rs in timed.items() for r in rs}):
            missing.append({"arm": item["arm"], "round": item["round"], "why": "not run yet"})
    return {
        "schema_version": SCHEMA_VERSION,
        "arms": arms,
        "comparisons": comparisons,
        "verdict": verdict,
        "parity": parity,
        "missing": missing,
        "profiles": {a: f"profiles/{a}" for a in labels if (manifest.get("profiles") or {}).get(a)},
        "flops_per_token": flops_per_token,
        "peak_bf16_flops_per_device": peak,
    }


def check_parity(
    steps: list[dict[str, Any]],
    labels: list[str],
    cfg: dict[str, Any],
    done: set[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """Compare the losses of the first ``parity_steps`` steps of every arm against the first arm.

    Exact mode (SGD, fp32 params and reductions in every arm): |Δloss| ≤ 1e-6. Otherwise relative
    |Δloss| / |loss| ≤ 1e-2. Each arm's lowest finished round (profile launches included) is used.
    """
    arms = cfg.get("arms", [])
    exact = cfg.get("optimizer") == "sgd" and all(
        a.get("param_dtype") == "float32" and a.get("reduce_dtype") == "float32" for a in arms
    )
    mode, tol = ("exact", 1e-6) if exact else ("relative", 1e-2)
    n = min(int(cfg.get("parity_steps", 4)), int(cfg.get("warmup", 0)) + int(cfg.get("steps", 1)))
    losses: dict[str, list[float]] = {}
    for label in labels:
        by_round: dict[int, dict[int, float]] = defaultdict(dict)
        for rec in steps:
            if rec.get("arm") == label and rec.get("loss") is not None:
                if done is not None and rec["round"] >= 0 and (label, rec["round"]) not in done:
                    continue
                by_round[rec["round"]][rec["step"]] = float(rec["loss"])
        full = [
            r for r in sorted(by_round, key=lambda r: (r < 0, r)) if all(s in by_round[r] for s in range(n))
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
            if d > max_abs:
                max_abs = d
            if r > max_rel:
                max_rel = r
            if (d if exact else r) > tol and worst is None:
                worst = f"{label} step {s}: loss {b:.8g} vs {present[0]} {a:.8g}"
    result.update(steps_compared=n, max_abs_diff=max_abs, max_rel_diff=max_rel)
    if worst:
        result.update(valid=False, reason=f"{mode} tolerance {tol:g} exceeded at {worst}")
    return result

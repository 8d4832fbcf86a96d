"""The run's summary (``summary.json``, docs/DATA.md) from its manifest and steps: statistics, comparisons, parity.

Run-side: it reads the device's peak FLOPS; the records and the statistics it uses live in ``results/``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from fsdpbench.device import peak_bf16_flops, peak_flops
from fsdpbench.results import phases, stats
from fsdpbench.results.run_folder import MANIFEST, PROFILE_ROUND, PROFILES, SCHEMA_VERSION, launch_time
from fsdpbench.results.stats import with_memory_ratio
from fsdpbench.results.summary import (
    ArmComparison,
    ArmSummary,
    MissingLaunch,
    Parity,
    RoundMedian,
    RoundsCheck,
    Summary,
)

log = logging.getLogger(__name__)


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
    round_medians: dict[str, dict[int, float]] = {}
    for label in labels:
        rounds = timed.get(label, {})
        if not rounds:
            arms[label] = ArmSummary(status="missing")
            continue
        per_round = [
            RoundMedian(round=r, median_ms=stats.median(v), n_steps=len(v)) for r, v in sorted(rounds.items())
        ]
        medians = [r.median_ms for r in per_round]
        round_medians[label] = {r.round: r.median_ms for r in per_round}  # type: ignore[misc]
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
    rule = verdict_rule(manifest)
    if labels and labels[0] in round_medians:
        base = labels[0]
        for label in labels[1:]:
            if label in round_medians:
                first = first_in_round(manifest.get("order") or [], base, label)
                comp = stats.compare_arms(
                    base, label, round_medians[base], round_medians[label], first, **rule
                ).to_dict()
                comp["phases"] = phases.compare_phases(
                    base, label, arms[base].phases, arms[label].phases, first, **rule
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
        rounds_auto=RoundsCheck.from_dict(manifest["rounds_auto"], MANIFEST, "$.rounds_auto")
        if manifest.get("rounds_auto")
        else None,
    )


def verdict_rule(manifest: dict[str, Any]) -> dict[str, Any]:
    """``stats.decide``'s settings for this run: ``planned`` = ``--rounds N``, or None under ``--rounds auto``
    with ``max_rounds`` the rounds its group-sequential plan covers (``verdict_plan``: a ``--resume`` that went
    past the plan leaves it at the rounds the plan foresaw, so later looks use the confidence sequence)."""
    cfg = manifest["config"]
    auto = bool(cfg.get("rounds_auto"))
    plan = manifest.get("verdict_plan") or {}
    max_rounds = int(plan.get("max_rounds") or cfg.get("max_rounds") or 16)
    if plan.get("continued_after") is not None:
        max_rounds = min(max_rounds, int(plan["continued_after"]))
    return {
        "max_rounds": max_rounds,
        "ci_target": float(cfg.get("ci_target") or 2.0),
        "planned": None if auto else int(cfg.get("rounds") or 1),
    }


def first_in_round(order: list[dict[str, Any]], base: str, test: str) -> dict[int, str]:
    """Round → ``"base"`` or ``"test"``: which of the two arms the launch order runs first in that round."""
    first: dict[int, str] = {}
    for item in order:
        if item["arm"] in (base, test) and item["round"] not in first:
            first[item["round"]] = "base" if item["arm"] == base else "test"
    return first


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


def _rss_since(spans: set[str] | None) -> str:
    """``"step"`` when every step's peak resident set was reset before it, else ``"process start"``."""
    return "step" if spans == {"reset"} else "process start"


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

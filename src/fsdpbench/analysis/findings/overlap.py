"""The overlap rules: an arm overlaps little of its communication, and where comm is exposed."""

from __future__ import annotations

from dataclasses import replace

from fsdpbench.analysis.estimate import whatif, whatif_units
from fsdpbench.analysis.findings import places as plc
from fsdpbench.analysis.findings import replay as rp
from fsdpbench.analysis.findings.records import Finding, RuleInput, Side, safe_delta
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import (
    EXPOSED_GAP_SHARE,
    EXPOSED_SHARE,
    LOW_OVERLAP_RATIO,
    OVERLAP_GAP,
    PLACE_DELTA_SHARE,
    PLACE_MAX_LISTED,
    PLACE_WAIT_SHARE,
)
from fsdpbench.fmt import fmt_pct, fmt_us


def _prefetch_phrase(x: RuleInput, side: Side) -> tuple[str, int | None]:
    depth = x.arms[side].prefetch
    lab = x.labels[side]
    if depth is None:
        return f"arm {lab}'s prefetch setting is unknown (no manifest)", None
    return f"arm {lab} runs prefetch={depth}", depth


def _no_gather_action(lab: str, kinds: list[str]) -> str:
    """The low-overlap advice for an arm that gathers no parameters (layer prefetch moves all-gathers,
    so it cannot help): all-reduce only is DDP-style gradient sync."""
    said = f"{lab} issues {', '.join(kinds)} and no all_gather, so layer prefetch does not apply"
    if kinds == ["all_reduce"]:
        return (
            f"{said}: start the gradient all-reduces during backward (smaller buckets, e.g. DDP's "
            "bucket_cap_mb) or issue fewer (no_sync over gradient-accumulation steps)"
        )
    return f"{said}: issue these collectives earlier, beside compute that does not depend on them"


def rule_low_overlap(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        m, mo = x.mean[side], x.mean[other]
        ov, ov_o = m.overlap_ratio, mo.overlap_ratio
        exp, exp_o = m.exposed_comm_us, mo.exposed_comm_us
        step, step_o = m.step_time_us, mo.step_time_us
        if ov is None or exp is None or not step:
            continue
        absolute = ov < LOW_OVERLAP_RATIO and exp / step >= EXPOSED_SHARE
        relative = (
            ov_o is not None
            and exp_o is not None
            and bool(step_o)
            and ov <= ov_o - OVERLAP_GAP
            and exp - exp_o >= EXPOSED_GAP_SHARE * step_o
        )
        if not (absolute or relative):
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        phrase, depth = _prefetch_phrase(x, side)
        kinds = sorted({r.type for r in x.collectives if r[side].count})
        action = (
            _no_gather_action(lab, kinds)
            if kinds and "all_gather" not in kinds
            else f"{phrase}: enable explicit layer prefetch (prefetch=1)"
            if depth == 0
            else f"{phrase}: try prefetch={depth + 1}"
            if depth is not None
            else f"{phrase}: enable explicit layer prefetch (prefetch=1 or deeper)"
        )
        evidence = (
            f"overlap {fmt_pct(ov)} ({lab}) vs {fmt_pct(ov_o)} ({lab_o}); exposed comm "
            f"{fmt_us(exp)} = {fmt_pct(exp / step)} of {lab}'s step"
            + (f" vs {fmt_us(exp_o)} ({lab_o})" if exp_o is not None else "")
        )
        per_unit = whatif_units.estimate_prefetch_units(
            x.analysis[side], **{k: v for k, v in m.breakdown().items() if k != "exposed_comm_us"}
        )
        if per_unit is not None:  # per (unit, phase): the exposed all-gathers one unit further ahead
            estimate = per_unit
            if ov_o is None or ov_o < ov + OVERLAP_GAP:  # and the bound, as without units
                best = whatif.estimate_overlap(target_overlap_ratio=1.0, **m.breakdown())
                estimate.best_case_step_time_delta_us = best.step_time_delta_us
        elif ov_o is not None and ov_o >= ov + OVERLAP_GAP:
            estimate = whatif.estimate_overlap(target_overlap_ratio=ov_o, **m.breakdown())
            estimate.scenario = f"{lab} hides comm as well as {lab_o} does ({fmt_pct(ov_o)})"
            estimate.basis = whatif.BASIS_STEP
        else:  # no arm shows what is achievable: give only the best case, which is a bound, not an estimate
            best = whatif.estimate_overlap(target_overlap_ratio=1.0, **m.breakdown())
            estimate = replace(
                best,
                exposed_comm_delta_us=None,
                step_time_delta_us=None,
                best_case_step_time_delta_us=best.step_time_delta_us,
                scenario=f"no arm overlaps much better than {lab}; best case = all comm hidden",
                basis=whatif.BASIS_STEP,
            )
        closed = estimate
        estimate = rp.replay_or_closed_form(
            x.analysis[side],
            lambda edit: edit.startswith("prefetch:"),
            f"prefetch:<unit>:{(depth or 0) + 1}",
            "the replayed prefetch edit that shortens the step most",
            closed,
            rp.fastest,
        )
        findings.append(
            Finding(
                "low_overlap",
                "high",
                f"{lab} leaves {fmt_us(exp)} of communication exposed (overlap {fmt_pct(ov)})",
                evidence,
                "collectives are issued when their layer needs them, not ahead of time, so compute waits",
                action,
                estimate,
                subject=lab,
            )
        )
    return findings


def rule_exposed_place(x: RuleInput) -> list[Finding]:
    """The (unit, phase) places where one arm exposes more communication than the other, each with its
    collectives, its exposed time and Δ, and how much of it was waiting for the rank that arrived last."""
    step = x.mean.base.step_time_us
    if not step or not x.places:
        return []
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        sign = 1.0 if side == "test" else -1.0
        hits = [
            r
            for r in plc.by_exposed_delta(x.places)
            if sign * (r.delta("exposed_us") or 0.0) >= PLACE_DELTA_SHARE * step
        ][:PLACE_MAX_LISTED]
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        data = x.analysis[side]
        phrases = [plc.place_phrase(r, side, data, lab_o) for r in hits]
        extra = sum(sign * (r.delta("exposed_us") or 0.0) for r in hits)
        total = safe_delta(x.mean[side].exposed_comm_us, x.mean[other].exposed_comm_us)
        top = hits[0]
        exposed, wait = top.value(side, "exposed_us"), top.value(side, "exposed_wait_us")
        waiting = wait is not None and bool(exposed) and wait / exposed >= PLACE_WAIT_SHARE
        rank = plc.waited_for(data, (top.unit, top.phase))
        if waiting:
            cause = (
                f"in {top.unit} {top.phase} the ranks mostly wait for "
                + (f"rank {rank}" if rank is not None else "the last rank")
                + " to arrive at the collective: the delay is that rank's work before it, not the transfer"
            )
            action = (
                f"find what delays {'rank ' + str(rank) if rank is not None else 'the last rank'} before "
                f"{top.unit} {top.phase}'s collective (imbalance, a host stall, a slow rank)"
            )
        else:
            cause = (
                f"in {top.unit} {top.phase} the collectives transfer while nothing computes: they are issued "
                "too late (or too fragmented) to overlap"
            )
            action = f"overlap {top.unit} {top.phase}'s collectives: prefetch them earlier or bucket them"
        findings.append(
            Finding(
                "exposed_place",
                "high" if sign * (top.delta("exposed_us") or 0.0) >= EXPOSED_SHARE * step else "medium",
                f"{lab}: {phrases[0]}",
                "; ".join(phrases)
                + f"; these {len(hits)} place(s) expose {fmt_us(extra, signed=True)} vs {lab_o}"
                + (f" of the step's {fmt_us(total, signed=True)}" if total is not None else ""),
                cause,
                action,
                subject=lab,
            )
        )
    return findings


LOW_OVERLAP = Rule(
    "low_overlap",
    f"an arm's overlap ratio < {LOW_OVERLAP_RATIO} with exposed comm >= {EXPOSED_SHARE:.0%} of its step, "
    f"or its overlap is >= {OVERLAP_GAP} below the other arm's with exposed comm larger by >= "
    f"{EXPOSED_GAP_SHARE:.0%} of the other's step",
    "high",
    "explicit layer prefetch (the arm's prefetch setting is named; try one deeper); for an arm with no "
    "all_gather (all_reduce only: DDP-style), gradient all-reduces started during backward instead",
    rule_low_overlap,
)
"""Row of the rules table."""

EXPOSED_PLACE = Rule(
    "exposed_place",
    f"a (unit, phase) exposes more comm in one arm by >= {PLACE_DELTA_SHARE:.0%} of the base step "
    f"(top {PLACE_MAX_LISTED} per arm, from the profiles' units and waits)",
    f"high if the largest is >= {EXPOSED_SHARE:.0%} of the step, else medium",
    f"waiting >= {PLACE_WAIT_SHARE:.0%} of it: find what delays the rank that arrives last; else overlap "
    "that unit's collectives (prefetch earlier, bucket)",
    rule_exposed_place,
)
"""Row of the rules table."""

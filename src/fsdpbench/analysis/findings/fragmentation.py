"""The fragmentation rule: one arm issues many more, smaller collectives of a type."""

from __future__ import annotations

from collections.abc import Mapping

from fsdpbench.analysis.estimate import whatif, whatif_units
from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings import replay as rp
from fsdpbench.analysis.findings.records import (
    CollectiveRow,
    Finding,
    RuleInput,
    Side,
    collective_phrase,
    safe_ratio,
)
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.thresholds import (
    FRAGMENTATION_COUNT_RATIO,
    FRAGMENTATION_HIGH_SHARE,
    SIMILAR_BYTES,
)
from fsdpbench.fmt import fmt_pct, fmt_us, fmt_x


def _fit_candidates(x: RuleInput, side: Side) -> list[tuple[str, Mapping[str, whatif.AlphaBetaFit]]]:
    order = (side, "pooled", "aggregate", x.other(side))
    return [(source, x.fits.get(source, {})) for source in order]


def _bucket_summary(estimate: Estimate, target_counts: dict[str, int], basis: str) -> Estimate:
    """The figures of a one-bucket-per-layer (per-unit) regrouping ``estimate``, as the fragmentation
    estimate's ``one_bucket_per_layer`` carries them (deltas, bound, targets, basis)."""
    return Estimate(
        comm_delta_us=estimate.comm_delta_us,
        exposed_comm_delta_us=estimate.exposed_comm_delta_us,
        step_time_delta_us=estimate.step_time_delta_us,
        idle_delta_us=estimate.idle_delta_us,
        wait_delta_us=estimate.wait_delta_us,
        step_time_lower_bound_us=estimate.step_time_lower_bound_us,
        target_counts=target_counts,
        basis=basis,
    )


def _from_replay(
    data: Mapping[str, object],
    data_o: Mapping[str, object],
    hits: list[CollectiveRow],
    side: Side,
    other: Side,
    closed: Estimate,
) -> Estimate:
    """The replay's regrouping (``regroup:<types>:<count>``: every fragmented type at the other arm's count
    per (unit, phase), ``replay_edits.regroup_edits``; else the most costly type's) where the arm's replay has
    it, else ``closed`` labelled as the closed-form fallback; the same for the one-bucket-per-unit scenario
    (``regroup:<types>:unit``)."""
    from fsdpbench.analysis.findings.replay_edits import regroup_edits

    ordered = sorted(hits, key=lambda r: -(r[side].time_us or 0.0))
    types = [r.type for r in ordered]
    top = ordered[0]
    # the edit merges each (unit, phase)'s calls into <count>: the other arm's count per place, every
    # fragmented type in one edit where they share it (replay_edits.regroup_edits)
    edits = regroup_edits(data, data_o, types)
    wanted = edits[0] if len(edits) > 1 else f"regroup:{top.type}:{round(top[other].count or 0)}"

    def pick(rows):  # the wanted edit, else the one covering most types, the most costly type first
        rank = {t: i for i, t in enumerate(types)}
        return min(
            rows,
            key=lambda w: (
                w["edit"] != wanted,
                -len(w["edit"].split(":")[1].split(",")),
                min(rank[t] for t in w["edit"].split(":")[1].split(",")),
            ),
        )

    bucket = closed.one_bucket_per_layer
    estimate = rp.replay_or_closed_form(
        data, lambda e: rp.is_regroup(e, types), wanted, closed.scenario or "", closed, pick
    )
    per_unit = [w for w in rp.what_ifs(data) if rp.is_regroup(w["edit"], types, per_unit=True)]
    if per_unit:
        wanted = edits[-1] if edits else wanted  # regroup:<types>:unit
        estimate.one_bucket_per_layer = rp.estimate_from_what_if(data, pick(per_unit), "one call per unit")
    elif bucket is not None:
        estimate.one_bucket_per_layer = rp.closed_form(
            bucket, data, edits[-1] if edits else f"regroup:{top.type}:unit"
        )
    return estimate


def rule_fragmentation(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = []
        for row in x.collectives:
            s, o = row[side], row[other]
            if not s.count or not o.count or not s.bytes or not o.bytes:
                continue
            if (
                s.count / o.count >= FRAGMENTATION_COUNT_RATIO
                and SIMILAR_BYTES[0] <= s.bytes / o.bytes <= SIMILAR_BYTES[1]
            ):
                hits.append(row)
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            collective_phrase(r.name, r[side], r[other])
            + (
                f", {fmt_us(r[side].time_us)} vs {fmt_us(r[other].time_us)}"
                if r[side].time_us is not None
                else ""
            )
            for r in hits
        )
        per_type = {r.type: (r[side].count, r[side].time_us) for r in hits}
        fit_for = {}
        for r in hits:
            chosen = whatif.choose_fit(r.type, *_fit_candidates(x, side))
            if chosen is not None:
                fit_for[r.type] = chosen
        m = x.mean[side]
        # the idle term (idle time scales with the calls) brackets the measured change with the comm-only
        # prediction on CPU/gloo (docs/diagnosis.md, "Calibration"); both are shown
        data, data_o = x.analysis[side], x.analysis[other]
        by_unit = whatif_units.has_unit_rows(data) and whatif_units.has_unit_rows(data_o)
        priced = {**m.breakdown(), "free_us": m.free_us}
        step_waits = None if by_unit else whatif.step_waits(data)  # the step-totals path's wait term
        # per (unit, phase): each place's calls at the other arm's count there
        estimate = (
            whatif_units.estimate_regrouping_units(
                data, whatif_units.unit_counts(data_o), fit_for, types=per_type, **priced
            )
            if by_unit
            else None
        )
        if estimate is None:  # traces without fsdpbench's ranges: whole-step totals
            estimate = whatif.estimate_regrouping(
                per_type, {r.type: r[other].count for r in hits}, fit_for, **priced, waits=step_waits
            )
            estimate.basis = whatif.BASIS_STEP
        estimate.scenario = f"{lab}'s collectives issued at {lab_o}'s granularity"
        per_unit = (  # one bucket per unit: one call of each type per (unit, phase)
            whatif_units.estimate_regrouping_units(
                data, {k: 1.0 for k in whatif_units.unit_counts(data)}, fit_for, types=per_type, **priced
            )
            if by_unit
            else None
        )
        if per_unit is not None:
            estimate.one_bucket_per_layer = _bucket_summary(
                per_unit, {k: round(t.target_count) for k, t in per_unit.per_type.items()}, whatif.BASIS_UNITS
            )
        elif x.num_layers:
            layer = whatif.layer_bucket_counts(
                x.num_layers, reshard_after_forward=x.arms[side].reshard_after_forward
            )
            per_layer = whatif.estimate_regrouping(
                per_type,
                {k: v for k, v in layer.items() if k in per_type},
                fit_for,
                **priced,
                waits=step_waits,
            )
            estimate.one_bucket_per_layer = _bucket_summary(per_layer, layer, whatif.BASIS_STEP)
        estimate = _from_replay(data, data_o, hits, side, other, estimate)
        frag_time = sum(r[side].time_us or 0.0 for r in hits)
        share = safe_ratio(frag_time, m.step_time_us)
        severity = "high" if share is not None and share >= FRAGMENTATION_HIGH_SHARE else "medium"
        if share is None:
            share_text = ""
        elif share <= 1.0:
            share_text = f"; these collectives take {fmt_pct(share)} of {lab}'s step"
        else:  # calls on several comm threads/streams run concurrently, so their sum can exceed the step
            share_text = (
                f"; their calls add up to {fmt_us(frag_time)}, more than {lab}'s whole step "
                f"({fmt_us(m.step_time_us)}): they run concurrently"
            )
        arm = x.arms[side]
        action = (
            "bucket per-parameter collectives per module: one all-gather and one reduce-scatter per "
            "shard unit over a flat buffer, as FSDP2 does"
        )
        if arm.backend in (None, "hyper") and arm.comm_fusion is False:  # comm_fusion is hyper's option only
            action += f"; or enable comm fusion (arm {lab} runs comm_fusion=false)"
        elif arm.backend == "deepspeed" and not arm.prefetch:
            action += (
                f"; for DeepSpeed, let it coalesce a prefetch bucket into one all-gather (arm {lab}: "
                "prefetch=1 or a larger stage3_prefetch_bucket_size)"
            )
        max_ratio = max(r[side].count / r[other].count for r in hits)
        if arm.unit == "module" or (arm.backend == "hyper" and arm.comm_fusion is False):
            cause = "per-parameter collectives (one call per tensor) instead of one per module"
        else:  # e.g. FSDP2's per-unit reduce-scatters vs DeepSpeed's one bucket: not per-parameter
            cause = f"more, smaller collectives than {lab_o}"
        findings.append(
            Finding(
                "fragmentation",
                severity,
                f"{lab}'s communication is {fmt_x(max_ratio)} more fragmented than {lab_o}'s",
                evidence + share_text,
                f"{cause}: every call pays the fixed latency alpha again, and small calls use the link poorly",
                action,
                estimate,
                subject=lab,
            )
        )
    return findings


FRAGMENTATION = Rule(
    "fragmentation",
    f"a collective type's count ratio >= {FRAGMENTATION_COUNT_RATIO:g}x with bytes ratio in "
    f"[{SIMILAR_BYTES[0]}, {SIMILAR_BYTES[1]}]",
    f"high if those collectives take >= {FRAGMENTATION_HIGH_SHARE:.0%} of the step, else medium",
    "bucket per-parameter collectives per module (one all-gather/reduce-scatter per shard unit); "
    "or enable comm fusion (hyper arms) or let DeepSpeed coalesce a prefetch bucket (prefetch=1 or a larger "
    "`stage3_prefetch_bucket_size`)",
    rule_fragmentation,
)
"""Row of the rules table."""

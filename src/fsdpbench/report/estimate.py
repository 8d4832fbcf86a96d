"""A finding's what-if estimate in words: the one renderer for diff.md, report.md/html and the terminal."""

from __future__ import annotations

from collections.abc import Mapping

from fsdpbench.analysis.estimate.whatif import SOURCE_CLOSED_FORM, SOURCE_REPLAY, Estimate
from fsdpbench.analysis.findings import COLLECTIVE_NAMES, Finding
from fsdpbench.analysis.findings.replay import place_text
from fsdpbench.fmt import fmt, fmt_count, fmt_pct, fmt_us


def _deltas(est: Estimate) -> list[str]:
    parts = []
    step = est.step_time_delta_us
    if step is not None and est.idle_delta_us is not None:  # the two predictions bracket the change
        comm_only = step - est.idle_delta_us
        parts.append(
            f"step time {fmt_us(comm_only, signed=True)} (comm only) to {fmt_us(step, signed=True)} "
            "(comm + idle time)"
        )
        step = None
    parts += [
        f"{name} {fmt_us(value, signed=True)}"
        for value, name in (
            (step, "step time"),
            (est.exposed_comm_delta_us, "exposed comm"),
            (est.comm_delta_us, "communication"),
        )
        if value is not None
    ]
    if est.best_case_step_time_delta_us is not None:
        parts.append(f"best case step time {fmt_us(est.best_case_step_time_delta_us, signed=True)} (a bound)")
    if est.step_time_lower_bound_us is not None:
        parts.append(f"lower bound on the step max(compute, comm) = {fmt_us(est.step_time_lower_bound_us)}")
    return parts


def place_gain(row: Mapping[str, object]) -> float:
    """A per-unit row's exposed gain: regrouping's exposed transfer and wait saved, prefetch's hidden."""
    if "exposed_saved_us" in row:
        return float(row.get("exposed_saved_us") or 0.0) + float(row.get("exposed_wait_saved_us") or 0.0)
    return float(row.get("hidden_us") or 0.0)


def subject_timed_scale(
    finding: Finding, profiled_per_timed: Mapping[str, float | None] | None
) -> float | None:
    """timed/profiled step of the arm a finding is about (``finding.subject``; for a diff.json written
    before findings named their subject, the arm label that comes first in the title, the longest at that
    place so ``torch-unitmodule`` wins over ``torch``); ``None`` when unknown."""
    ratios = profiled_per_timed or {}
    subject = finding.subject
    if subject is None:
        found = [(finding.title.find(arm), -len(arm), arm) for arm in ratios if arm in finding.title]
        subject = min(found)[2] if found else None
    ratio = ratios.get(subject) if subject is not None else None
    return 1.0 / ratio if ratio else None


def estimate_lines(
    est: Estimate | None, *, details: bool = False, timed_scale: float | None = None
) -> list[str]:
    """The estimate as lines of text: a headline, then (``details``) how it was priced and its assumptions.

    Headline: ``"Estimate — <scenario>: step time −1.2 ms; exposed comm −1.0 ms; ..."`` for a modelled
    what-if (``"Estimate (replay) — …"`` when the step replay priced it, with the edit replayed; a closed form
    ends in ``[closed form: <why the replay could not>]``), ``"Measured: exposed comm −3.0 ms"`` for a measured
    change, ``"Estimate: not priced ..."`` when the rule could not price it. Missing numbers are left out, never printed as ``None``.
    No lines for ``None``. ``timed_scale`` (the subject arm's timed/profiled step ratio) qualifies a
    step-time estimate: it was computed on the profiled step, and is also given on the timed clock.
    """
    if est is None:
        return []
    label = "Measured" if est.label == "measured" else "Estimate"
    if label == "Estimate" and est.source == SOURCE_REPLAY:
        label = "Estimate (replay)"
    parts = _deltas(est)
    layer = est.one_bucket_per_layer
    if layer is not None and layer.step_time_delta_us is not None:
        other = (
            f" ({layer.source})" if layer.source and layer.source != est.source else ""
        )  # replay vs closed form
        parts.append(
            f"one bucket per layer{other}: step time {fmt_us(layer.step_time_delta_us, signed=True)}"
        )
    if parts:
        if est.label != "measured" and timed_scale is not None and est.step_time_delta_us is not None:
            parts[0] += (  # the step-time part comes first
                f" (on the profiled step; ≈ {fmt_us(est.step_time_delta_us * timed_scale, signed=True)} "
                f"on the timed clock, × timed/profiled {fmt(timed_scale, 2)})"
            )
        lines = [f"{label}{f' — {est.scenario}' if est.scenario else ''}: " + "; ".join(parts)]
    elif est.label != "measured":
        lines = [f"{label}: {est.note or 'not priced'}"]
    else:
        return []
    if est.source == SOURCE_CLOSED_FORM:  # the fallback says so, and why the replay could not price it
        lines[0] += f" [closed form: {est.source_note}]" if est.source_note else " [closed form]"
    elif est.source == SOURCE_REPLAY and est.edit:
        lines[0] += f" [edit `{est.edit}` replayed]"
    if not details:
        return lines
    if est.target_overlap_ratio is not None:
        lines.append(f"target overlap ratio {fmt_pct(est.target_overlap_ratio)}")
    if est.per_type:
        per = []
        for kind, t in est.per_type.items():
            priced = (
                f"saves {fmt_us(t.saved_us)}; α {fmt(t.alpha_us, 1)} µs from the {t.fit_source} fit, "
                f"R² {fmt(t.fit_r2, 2)}"
                if t.saved_us is not None and t.fit_source
                else f"saves {fmt_us(t.saved_us)}"
                if t.saved_us is not None
                else "not priced"
            )
            note = f"; {t.note}" if t.note else ""
            per.append(
                f"{COLLECTIVE_NAMES.get(kind, kind)} {fmt_count(t.count)} → {fmt_count(t.target_count)} calls "
                f"({priced}{note})"
            )
        lines.append("per type: " + "; ".join(per))
    if layer is not None:
        targets = ", ".join(f"{COLLECTIVE_NAMES.get(k, k)} {v}" for k, v in layer.target_counts.items())
        lines.append(
            f"one bucket per layer ({targets} calls): "
            + ("; ".join(_deltas(layer)) or "not priced")
            + (
                f" [closed form: {layer.source_note}]"
                if layer.source == SOURCE_CLOSED_FORM and layer.source_note
                else ""
            )
            + (f" [edit `{layer.edit}` replayed]" if layer.source == SOURCE_REPLAY and layer.edit else "")
        )
    if est.note and parts:
        lines.append(f"note: {est.note}")
    if est.changed:
        places = ", ".join(f"{place_text(c)} {fmt_us(c.get('delta_us'), signed=True)}" for c in est.changed)
        lines.append(f"changed on the critical path: {places}")
    if est.wait_delta_us is not None:
        lines.append(
            f"of the communication change, {fmt_us(est.wait_delta_us, signed=True)} is less waiting for the "
            "last rank (every call is a rendezvous)"
        )
    if est.basis == "units":  # whatif.BASIS_UNITS; the places that carry the estimate
        top = sorted(est.per_unit, key=lambda u: -place_gain(u))[:3]
        places = ", ".join(f"{u['unit']} {u['phase']} {fmt_us(place_gain(u))}" for u in top)
        lines.append("computed per unit and phase" + (f" (most: {places})" if places else ""))
    elif est.basis is not None:
        lines.append(f"computed from {est.basis} (the trace has no fsdpbench unit ranges)")
    if est.assumptions:
        lines.append("assumptions: " + "; ".join(est.assumptions))
    return lines

"""Calibration: each what-if estimate of a diff next to the change measured by the arm it predicts.

A diff's findings price fixes ("regroup the collectives: −839 ms", "prefetch: −1054 ms"). When the same
run also holds the arm that *is* that fix (the counterfactual), the prediction can be checked:

==========================  ===========================================  ===================================
estimate                    from                                         counterfactual arm (vs the subject)
==========================  ===========================================  ===================================
``regrouping``              fragmentation ``step_time_delta_us``         the other arm of the diff: same
                                                                         options but ``unit`` (exact), or
                                                                         hyper → torch/fsdp1 (approximate:
                                                                         the compute path differs too)
``one_bucket_per_layer``    fragmentation ``one_bucket_per_layer``       the same, when it runs ``unit=layer``
``prefetch_overlap``        the diff's ``prefetch_estimates`` (per unit  same options but prefetch
                            and phase); without units low_overlap's      (``prefetch``, ``fwd_prefetch``,
                            ``estimate_overlap``, or the same estimate   ``bwd_prefetch``, resolved per
                            from the diff's side-by-side means when no   direction): the other prefetches at
                            finding fired                                least as far in both directions,
                                                                         further in one (exact); none
                                                                         when neither arm has comm
``remove_delay`` /          the replay's ``what_if`` of the subject's    the same options but ``delay``
``add_delay``               profile (``delay:RANK:UNIT:PHASE:MS``, one   (``delay=RANK/UNIT/PHASE/MS``):
                            edit per place whose delay differs;          the ground truth of a known
                            ``delay_entry``; not in diffs' own lists)    delay, measured in the same run
==========================  ===========================================  ===================================

The fragmentation finding's estimate is the replay's ``regroup`` what-if where the subject's replay has
it, else the closed form (``source``; a replayed estimate has no ``per_type``): both are calibrated, the
entry carrying the estimate's ``source``, and the subject is the finding's ``subject`` arm.

Straggler estimates ("rank r computes like the others") have no counterfactual arm in one run: removing a
slow rank means another placement or machine, which is not an arm option. They are never calibrated here.

Sign convention: ``predicted_ms`` and ``measured_ms`` are the change of the *subject's* step time (the arm
the estimate is about) if it became the counterfactual: ``measured = step(counterfactual) − step(subject)``,
negative = faster. ``error_pct = (predicted − measured) / |measured| · 100``: negative = the estimate
promised more gain (or less loss) than was measured. ``measured_ms`` uses the timed medians
(summary.json); ``measured_profiled_ms`` the profiled step (the diff's rank-mean ``step_time_us``), the
same clock the estimate was computed on. The profiler slows arms unequally (``distortion``), so
``predicted_timed_ms`` rescales the prediction by the subject's timed/profiled ratio. The part of the step
an estimate models (``component``: comm for regrouping, exposed comm for prefetch) is compared on its own
too (``predicted_component_ms``/``measured_component_ms``), free of the compute and idle-time noise of one
profiled step. ``basis`` is the estimate's (``units``: per unit and phase; ``step totals``;
docs/calibration.md). ``independent`` is false when an α–β fit that priced the estimate saw the
counterfactual arm's calls (pooled, aggregate or the other side's fit): the check is then partly circular.

Pure and torch-free; the inputs are the plain dicts of manifest.json, summary.json and diff.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fsdpbench.analysis.estimate import whatif
from fsdpbench.analysis.findings import prefetch_deeper_side
from fsdpbench.config.arms import manifest_prefetch

PREFETCH_OPTIONS = frozenset({"prefetch", "fwd_prefetch", "bwd_prefetch"})
"""The arm options that set prefetch (``prefetch`` both directions, the others one each)."""
IGNORED_OPTIONS = frozenset({"label", "python"})
"""Arm fields that do not change what runs (``python`` is recorded; a different interpreter is
reported by the diff's own warnings)."""
DISTORTION_GAP = 0.10
"""Warn when two arms' profiled/timed ratios differ by more than this (absolute)."""


def arm_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The option names whose values differ between two manifest arm dicts (``label``/``python`` ignored)."""
    keys = (set(a) | set(b)) - IGNORED_OPTIONS
    defaults = {"unit": "layer", "prefetch": 0, "fwd_prefetch": "", "bwd_prefetch": ""}  # older manifests
    return {k for k in keys if a.get(k, defaults.get(k)) != b.get(k, defaults.get(k))}


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted − measured) / |measured| · 100``; ``None`` when either is missing or measured is 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / abs(measured) * 100.0


def distortion(
    timed_ms: Mapping[str, float | None], profiled_ms: Mapping[str, float | None]
) -> dict[str, Any]:
    """Each arm's profiled/timed step ratio and a warning when the arms are distorted differently.

    Returns:
        ``{"ratio": {arm: profiled / timed or None}, "warnings": [...]}``; a warning when the largest and
        smallest ratio differ by more than ``DISTORTION_GAP``: every profile-based comparison between
        those arms is then biased by the profiler itself.
    """
    ratio = {
        arm: (profiled_ms.get(arm) / t if t and profiled_ms.get(arm) is not None else None)
        for arm, t in timed_ms.items()
    }
    known = {a: r for a, r in ratio.items() if r is not None}
    warnings = []
    if len(known) >= 2:
        hi, lo = max(known, key=known.__getitem__), min(known, key=known.__getitem__)
        if known[hi] - known[lo] > DISTORTION_GAP:
            warnings.append(
                f"the profiler distorts the arms differently: profiled/timed step {known[hi]:.2f} ({hi}) vs "
                f"{known[lo]:.2f} ({lo}); profile-based differences between them are biased by that much"
            )
    return {"ratio": ratio, "warnings": warnings}


def _delta_ms(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _us_to_ms(value: Any) -> float | None:
    return None if value is None else float(value) / 1e3


def _subject_of_fragmentation(diff: Mapping[str, Any], finding: Mapping[str, Any]) -> str | None:
    """The side the fragmentation finding's estimate is about: the finding's ``subject`` label where it names
    one of the diff's arms (a replayed estimate carries no ``per_type``), else (diff.json files written
    before findings named their subject) the side whose call counts the estimate's ``per_type`` priced."""
    subject = finding.get("subject")
    for side in ("base", "test"):
        if subject is not None and diff.get(side) == subject:
            return side
    estimate = finding.get("estimate") or {}
    per_type = estimate.get("per_type") or {}
    rows = {r.get("type"): r for r in diff.get("collectives") or []}
    for side in ("base", "test"):
        if per_type and all(
            kind in rows and rows[kind].get(f"{side}_count") == row.get("count")
            for kind, row in per_type.items()
        ):
            return side
    return None


def _entry(
    name: str,
    diff: Mapping[str, Any],
    subject_side: str,
    predicted_us: Any,
    *,
    basis: str | None = None,
    timed_ms: Mapping[str, float | None],
    match: str,
    note: str = "",
    component: tuple[str, Any] | None = None,
    fit_sources: Sequence[str] = (),
    comm_only_us: Any = None,
) -> dict[str, Any]:
    other_side = "test" if subject_side == "base" else "base"
    subject, counterfactual = diff[subject_side], diff[other_side]
    means = (diff.get("side_by_side") or {}).get("mean") or {}
    prof = {side: _us_to_ms((means.get(side) or {}).get("step_time_us")) for side in ("base", "test")}
    predicted = _us_to_ms(predicted_us)
    measured = _delta_ms(timed_ms.get(counterfactual), timed_ms.get(subject))
    measured_prof = _delta_ms(prof[other_side], prof[subject_side])
    ratio = (
        (timed_ms.get(subject) / prof[subject_side]) if timed_ms.get(subject) and prof[subject_side] else None
    )
    predicted_timed = predicted * ratio if predicted is not None and ratio is not None else None
    out: dict[str, Any] = {
        "estimate": name,
        "base": diff["base"],
        "test": diff["test"],
        "subject": subject,
        "counterfactual": counterfactual,
        "match": match,
        "predicted_ms": predicted,
        "measured_ms": measured,
        "error_pct": error_pct(predicted, measured),
        "measured_profiled_ms": measured_prof,
        "error_profiled_pct": error_pct(predicted, measured_prof),
        "predicted_timed_ms": predicted_timed,
        "error_timed_pct": error_pct(predicted_timed, measured),
        "label": "estimate vs measured",
        "note": note,
    }
    if basis is not None:  # per unit and phase, or whole-step totals (whatif.BASIS_*)
        out["basis"] = basis
    if comm_only_us is not None:  # the prediction without the idle-time term: the two bracket the change
        out["predicted_comm_only_ms"] = _us_to_ms(comm_only_us)
        out["error_comm_only_pct"] = error_pct(out["predicted_comm_only_ms"], measured)
    if component is not None:  # the part of the step the estimate models, free of compute/idle noise
        key, predicted_part = component
        part = {side: (means.get(side) or {}).get(key) for side in ("base", "test")}
        measured_part = _us_to_ms(
            None
            if part[other_side] is None or part[subject_side] is None
            else part[other_side] - part[subject_side]
        )
        out.update(
            component=key,
            predicted_component_ms=_us_to_ms(predicted_part),
            measured_component_ms=measured_part,
            error_component_pct=error_pct(_us_to_ms(predicted_part), measured_part),
        )
    if fit_sources:
        out["fit_sources"] = sorted(set(fit_sources))
        # a fit that saw the counterfactual arm's own calls (pooled, aggregate, the other side) makes the
        # check partly circular: only fits of the subject's own calls give an independent prediction
        out["independent"] = set(fit_sources) == {subject_side}
    return out


def _comm_only(estimate: Mapping[str, Any]) -> float | None:
    """The step-time change without the idle-time term, when the estimate has one."""
    step, idle = estimate.get("step_time_delta_us"), estimate.get("idle_delta_us")
    return None if step is None or idle is None else step - idle


def _regrouping_match(s: Mapping[str, Any], o: Mapping[str, Any]) -> str | None:
    diff = arm_differences(s, o)
    if diff == {"unit"} and s.get("unit") == "module" and o.get("unit", "layer") == "layer":
        return "exact"
    if (
        diff - {"comm_fusion", "unit"} == {"backend"}
        and s.get("backend") == "hyper"
        and o.get("backend")
        in (
            "torch",
            "fsdp1",
        )
    ):
        return "approximate: different backends (the compute path differs too)"
    return None


def calibrate_diff(
    diff: Mapping[str, Any], arms: Mapping[str, Mapping[str, Any]], timed_ms: Mapping[str, float | None]
) -> list[dict[str, Any]]:
    """Calibration entries of one diff (diff.json's dict; see the module docstring for the rules).

    Args:
        diff: a Diff JSON dict (``base``, ``test``, ``side_by_side``, ``collectives``, ``findings``).
        arms: manifest arm dicts by label (``backend``, ``unit``, ``prefetch``, ...).
        timed_ms: each arm's timed median step time in ms (summary.json ``arms[label].median_ms``).

    Returns:
        ``[{estimate, base, test, subject, counterfactual, match, predicted_ms, measured_ms, error_pct,
        measured_profiled_ms, error_profiled_pct, predicted_timed_ms, error_timed_pct, label, note}]``,
        one per estimate whose counterfactual is the diff's other arm; empty when there is none.
    """
    labels = {"base": diff["base"], "test": diff["test"]}
    if labels["base"] not in arms or labels["test"] not in arms:
        return []
    entries: list[dict[str, Any]] = []
    findings = list(diff.get("findings") or [])
    for f in findings:
        if f.get("id") != "fragmentation" or not f.get("estimate"):
            continue
        est = f["estimate"]
        side = _subject_of_fragmentation(diff, f)
        if side is None:
            continue
        other = "test" if side == "base" else "base"
        match = _regrouping_match(arms[labels[side]], arms[labels[other]])
        if match is None:
            continue
        sources = [r["fit_source"] for r in (est.get("per_type") or {}).values() if r.get("fit_source")]
        common = {"timed_ms": timed_ms, "match": match, "fit_sources": sources}
        estimates = [("regrouping", est)]
        per_layer = est.get("one_bucket_per_layer")
        if per_layer and arms[labels[other]].get("unit", "layer") == "layer":
            estimates.append(("one_bucket_per_layer", per_layer))
        for name, e in estimates:
            entry = _entry(
                name,
                diff,
                side,
                e.get("step_time_delta_us"),
                basis=e.get("basis") or est.get("basis"),
                component=("comm_us", e.get("comm_delta_us")),
                comm_only_us=_comm_only(e),
                **common,
            )
            if e.get("source"):
                entry["source"] = e["source"]
            entries.append(entry)
    entries += _prefetch_entries(diff, arms, labels, findings, timed_ms)
    return entries


def _prefetch_entries(
    diff: Mapping[str, Any],
    arms: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, str],
    findings: Sequence[Mapping[str, Any]],
    timed_ms: Mapping[str, float | None],
) -> list[dict[str, Any]]:
    deeper = prefetch_counterfactual(arms[labels["base"]], arms[labels["test"]])
    if deeper is None:
        return []
    other = deeper
    side = "base" if deeper == "test" else "test"
    means = (diff.get("side_by_side") or {}).get("mean") or {}
    m, mo = means.get(side) or {}, means.get(other) or {}
    if not m.get("comm_us") and not mo.get("comm_us"):  # e.g. one rank: no collectives, nothing to hide
        return []
    found = next(
        (
            f["estimate"]
            for f in findings
            if f.get("id") == "low_overlap"
            and (f.get("estimate") or {}).get("step_time_delta_us") is not None
            and m.get("overlap_ratio") is not None
            and mo.get("overlap_ratio") is not None
            and m["overlap_ratio"] < mo["overlap_ratio"]
        ),
        None,
    )
    note = "from the low_overlap finding"
    per_unit = (diff.get("prefetch_estimates") or {}).get(side)
    if per_unit and per_unit.get("step_time_delta_us") is not None:  # per (unit, phase), finding or not
        found, note = per_unit, "per unit and phase (the diff's prefetch_estimates)"
    elif found is None:
        if mo.get("overlap_ratio") is None:
            return []
        found = whatif.estimate_overlap(
            target_overlap_ratio=float(mo["overlap_ratio"]),
            **{k: m.get(k) for k in ("step_time_us", "compute_us", "comm_us", "exposed_comm_us")},
        ).to_dict()
        found["basis"] = whatif.BASIS_STEP
        note = "no low_overlap finding: the same estimate computed from the diff's side-by-side means"
    return [
        _entry(
            "prefetch_overlap",
            diff,
            side,
            found.get("step_time_delta_us"),
            timed_ms=timed_ms,
            match="exact",
            note=note,
            basis=found.get("basis"),
            component=("exposed_comm_us", found.get("exposed_comm_delta_us")),
        )
    ]


def prefetch_counterfactual(base: Mapping[str, Any], test: Mapping[str, Any]) -> str | None:
    """``"test"`` or ``"base"``: the arm that is the prefetch counterfactual of the other. The two differ
    only in prefetch options, resolved per direction as run (``fwd_prefetch``/``bwd_prefetch``,
    ``config.arms.manifest_prefetch``), and that arm prefetches at least as far in both directions and
    further in one (``findings.prefetch_deeper_side``). ``None`` otherwise."""
    differences = arm_differences(base, test)
    if not differences or not differences <= PREFETCH_OPTIONS or base.get("backend") != test.get("backend"):
        return None
    directions = manifest_prefetch(base), manifest_prefetch(test)
    if directions[0] is None or directions[1] is None or directions[0] == directions[1]:
        return None
    backend = base.get("backend")
    return prefetch_deeper_side(directions[0], directions[1], (backend, backend))


def is_counterfactual_pair(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether one of two manifest arms is the counterfactual of an estimate about the other: they differ
    in ``unit`` alone, in prefetch alone with one prefetching further (``prefetch_counterfactual``), or are
    hyper vs torch/fsdp1 (``_regrouping_match``)."""
    return (
        arm_differences(a, b) == {"unit"}
        or prefetch_counterfactual(a, b) is not None
        or _regrouping_match(a, b) is not None
        or _regrouping_match(b, a) is not None
    )


def calibration_pairs(arms: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Every pair of arm labels ``(earlier, later)`` in manifest order that ``is_counterfactual_pair``;
    the pairs a run's calibration covers, whether or not the run diffs them."""
    labels = list(arms)
    return [
        (x, y)
        for i, x in enumerate(labels)
        for y in labels[i + 1 :]
        if is_counterfactual_pair(arms[x], arms[y])
    ]


def calibrate_run(
    manifest: Mapping[str, Any], summary: Mapping[str, Any], diffs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Calibration of a run: ``{"entries": [...], "distortion": {...}}`` from its manifest.json,
    summary.json and diff dicts (one per test arm vs the first, as ``diff_run`` gives them)."""
    arms = {a["label"]: a for a in manifest.get("arms") or []}
    timed = {label: (summary.get("arms") or {}).get(label, {}).get("median_ms") for label in arms}
    profiled: dict[str, float | None] = {}
    for d in diffs:
        means = (d.get("side_by_side") or {}).get("mean") or {}
        for side in ("base", "test"):
            profiled.setdefault(d[side], _us_to_ms((means.get(side) or {}).get("step_time_us")))
    entries = [e for d in diffs for e in calibrate_diff(d, arms, timed)]
    return {"entries": entries, "distortion": distortion(timed, profiled)}


# ------------------------------------------------------------------------------------ known delays
DELAY_TOLERANCE_OF_DELAY = 0.10
"""A delay prediction passes within this share of the delay (issue 39's causality check) ..."""
DELAY_TOLERANCE_OF_STEP = 0.02
"""... or within this share of the measured step, whichever is larger."""


def _arm_delays(arm: Mapping[str, Any]) -> dict[tuple[int, str, str], float]:
    """{(rank, unit, phase): ms} of a manifest arm dict's ``delay`` texts (none: {})."""
    from fsdpbench.config.arms import parse_delays

    return {d.place: d.ms for d in parse_delays(arm.get("delay") or [])}


def delay_counterfactual(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two manifest arms differ in their ``delay`` option alone (a known-delay pair)."""
    return arm_differences({**a, "delay": a.get("delay") or []}, {**b, "delay": b.get("delay") or []}) == {
        "delay"
    }


def delay_edits(subject: Mapping[str, Any], counterfactual: Mapping[str, Any]) -> list[str]:
    """The replay edits that turn the subject arm's delays into the counterfactual's:
    ``delay:RANK:UNIT:PHASE:MS`` per place whose delay differs (MS = counterfactual − subject; negative
    removes), in (rank, unit, phase) order."""
    mine, theirs = _arm_delays(subject), _arm_delays(counterfactual)
    edits = []
    for place in sorted(set(mine) | set(theirs)):
        change = theirs.get(place, 0.0) - mine.get(place, 0.0)
        if change:
            rank, unit, phase = place
            edits.append(f"delay:{rank}:{unit}:{phase}:{change:g}")
    return edits


def replay_step_us(replay: Mapping[str, Any] | None) -> float | None:
    """The replayed (unmodified) step of an analysis's ``replay`` object, on the clock its what-ifs'
    ``predicted_step_us`` use: ``step_us`` (per step: the window from the first rank's start to the last
    rank's end, aligned clocks, over ``steps``), else (replays made before it) ``figure.step_us``, else the
    longest rank's ``replayed_us``; None without a replay."""
    step = (replay or {}).get("step_us")
    if step is not None:
        return float(step)
    step = ((replay or {}).get("figure") or {}).get("step_us")
    if step is not None:
        return float(step)
    ranks = (replay or {}).get("ranks") or []
    values = [float(r["replayed_us"]) for r in ranks if r.get("replayed_us") is not None]
    return max(values) if values else None


def find_what_if(replay: Mapping[str, Any] | None, edits: Sequence[str]) -> Mapping[str, Any] | None:
    """The ``replay.what_if`` entry of exactly ``edits`` applied together (``edit`` holds them as given to
    ``analyze --what-if``, several joined by ``+``: ``joint_edit``); None when the replay has none."""
    wanted = joint_edit(edits)
    for entry in (replay or {}).get("what_if") or []:
        if entry.get("edit") == wanted:
            return entry
    return None


def joint_edit(edits: Sequence[str]) -> str:
    """One ``--what-if`` text for several edits applied together: joined by ``+``."""
    return "+".join(edits)


def delay_entry(
    subject: str,
    counterfactual: str,
    arms: Mapping[str, Mapping[str, Any]],
    timed_ms: Mapping[str, float | None],
    replay: Mapping[str, Any] | None,
    profiled_ms: Mapping[str, float | None] | None = None,
) -> dict[str, Any] | None:
    """The check of a known delay: the subject arm's replay, edited by ``delay_edits`` (remove its delay,
    add the counterfactual's), against the counterfactual arm's measured step in the same run.

    Args:
        subject, counterfactual: arm labels that differ in ``delay`` alone (``delay_counterfactual``).
        arms: manifest arm dicts by label.
        timed_ms: timed median step (ms) by label (summary.json): the judge.
        replay: the subject's analysis ``replay`` object with the edit in ``what_if`` (``find_what_if``).
        profiled_ms: each arm's profiled step (ms), for the same comparison on the profiled clock.

    Returns:
        ``{estimate: remove_delay|add_delay|change_delay, subject, counterfactual, match, edits, source,
        predicted_ms, predicted_step_ms, replayed_step_ms, measured_ms, error_pct, measured_profiled_ms,
        error_profiled_pct, delay_ms, tolerance_ms, within, label, note}``: ``predicted_ms`` = the edited
        replay's step − the unedited replay's (so the replay's own error cancels), ``measured_ms`` =
        timed(counterfactual) − timed(subject); ``tolerance_ms`` = max(10 % of the largest delay change,
        2 % of the counterfactual's timed step), ``within`` whether |predicted − measured| is inside it.
        None when the arms are not a delay pair.
    """
    if not delay_counterfactual(arms[subject], arms[counterfactual]):
        return None
    edits = delay_edits(arms[subject], arms[counterfactual])
    changes = [float(e.rsplit(":", 1)[1]) for e in edits]
    name = (
        "add_delay"
        if all(c > 0 for c in changes)
        else "remove_delay"
        if all(c < 0 for c in changes)
        else "change_delay"
    )
    found = find_what_if(replay, edits)
    replayed = replay_step_us(replay)
    predicted_step = (
        None if found is None or found.get("predicted_step_us") is None else float(found["predicted_step_us"])
    )
    predicted = None if predicted_step is None or replayed is None else (predicted_step - replayed) / 1e3
    measured = _delta_ms(timed_ms.get(counterfactual), timed_ms.get(subject))
    prof = profiled_ms or {}
    measured_prof = _delta_ms(prof.get(counterfactual), prof.get(subject))
    delay = max((abs(c) for c in changes), default=0.0)
    step = timed_ms.get(counterfactual)
    tolerance = max(DELAY_TOLERANCE_OF_DELAY * delay, DELAY_TOLERANCE_OF_STEP * step if step else 0.0)
    if replay is None:
        note = "the subject's analysis has no replay"
    elif found is None:
        note = f"the replay has no what-if {joint_edit(edits)!r}"
    else:
        note = str(found.get("note") or "")
    return {
        "estimate": name,
        "subject": subject,
        "counterfactual": counterfactual,
        "match": "exact",
        "edits": edits,
        "source": None if found is None else found.get("source"),
        "predicted_ms": predicted,
        "predicted_step_ms": _us_to_ms(predicted_step),
        "replayed_step_ms": _us_to_ms(replayed),
        "measured_ms": measured,
        "error_pct": error_pct(predicted, measured),
        "measured_profiled_ms": measured_prof,
        "error_profiled_pct": error_pct(predicted, measured_prof),
        "delay_ms": delay,
        "tolerance_ms": tolerance,
        "within": None if predicted is None or measured is None else abs(predicted - measured) <= tolerance,
        "label": "estimate vs measured",
        "note": note,
    }


def delay_pairs(arms: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Every ordered pair (subject, counterfactual) of arm labels that differ in ``delay`` alone: both
    directions (one removes what the other adds)."""
    labels = list(arms)
    return [(x, y) for x in labels for y in labels if x != y and delay_counterfactual(arms[x], arms[y])]


def calibrate_delays(
    manifest: Mapping[str, Any],
    summary: Mapping[str, Any],
    replays: Mapping[str, Mapping[str, Any] | None],
    profiled_ms: Mapping[str, float | None] | None = None,
) -> list[dict[str, Any]]:
    """``delay_entry`` of every delay pair of a run (``delay_pairs``), from its manifest.json, summary.json
    and each arm's analysis ``replay`` object (by label; with the pair's edits in ``what_if``)."""
    arms = {a["label"]: a for a in manifest.get("arms") or []}
    timed = {label: (summary.get("arms") or {}).get(label, {}).get("median_ms") for label in arms}
    out = []
    for subject, counterfactual in delay_pairs(arms):
        entry = delay_entry(subject, counterfactual, arms, timed, replays.get(subject), profiled_ms)
        if entry is not None:
            out.append(entry)
    return out

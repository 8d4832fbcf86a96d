"""The prefetch rule: the arms' prefetch settings differ, and what that did to exposed comm."""

from __future__ import annotations

from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings.records import Finding, RuleInput, Side, safe_delta
from fsdpbench.analysis.findings.rule import Rule
from fsdpbench.analysis.findings.text import capital
from fsdpbench.config.arms import Depth, prefetch_units
from fsdpbench.fmt import fmt_pct, fmt_points, fmt_us

PREFETCH_DIRECTIONS = ("forward", "backward")


def _prefetch_setting(directions: tuple[Depth, Depth], changed: list[int]) -> str:
    """One arm's prefetch in the directions that differ: ``prefetch=1`` when both differ and are equal,
    else ``backward prefetch=none`` (joined with ``, ``)."""
    if len(changed) == 2 and directions[0] == directions[1]:
        return f"prefetch={directions[0]}"
    return ", ".join(f"{PREFETCH_DIRECTIONS[d]} prefetch={directions[d]}" for d in changed)


def prefetch_deeper_side(
    base: tuple[Depth, Depth], test: tuple[Depth, Depth], backends: tuple[str | None, str | None]
) -> Side | None:
    """The side that prefetches at least as far in both directions and further in one, ``default`` read as
    each side's backend's own (``config.arms.prefetch_units``); ``None`` when neither does or a depth is
    not in units."""
    units = [
        [prefetch_units(backend, d, dirs[d]) for d in (0, 1)]
        for dirs, backend in zip((base, test), backends, strict=True)
    ]
    if any(u is None for side in units for u in side):
        return None
    (b_fwd, b_bwd), (t_fwd, t_bwd) = units
    if t_fwd >= b_fwd and t_bwd >= b_bwd and (t_fwd, t_bwd) != (b_fwd, b_bwd):  # type: ignore[operator]
        return "test"
    if b_fwd >= t_fwd and b_bwd >= t_bwd and (t_fwd, t_bwd) != (b_fwd, b_bwd):  # type: ignore[operator]
        return "base"
    return None


def rule_prefetch_change(x: RuleInput) -> list[Finding]:
    """Two arms whose prefetch settings differ, per direction (``fwd_prefetch``/``bwd_prefetch``)."""
    db, dt = x.arms.base.prefetch_directions, x.arms.test.prefetch_directions
    if db is None or dt is None or db == dt:
        return []
    changed = [d for d in (0, 1) if db[d] != dt[d]]
    b, t = x.mean.base, x.mean.test
    lb, lt = x.labels.base, x.labels.test
    ovb, ovt = b.overlap_ratio, t.overlap_ratio
    eb, et = b.exposed_comm_us, t.exposed_comm_us
    sb, st = _prefetch_setting(db, changed), _prefetch_setting(dt, changed)
    if len(changed) == 2 and db[0] == db[1] and dt[0] == dt[1]:
        what = f"prefetch {db[0]} → {dt[0]}"
    else:
        what = ", ".join(f"{PREFETCH_DIRECTIONS[d]} prefetch {db[d]} → {dt[d]}" for d in changed)
    change = "" if ovb is None or ovt is None else f" ({fmt_points(ovt - ovb)})"
    measured = safe_delta(et, eb)
    evidence = (
        f"{what} ({lb} → {lt}): overlap {fmt_pct(ovb)} → {fmt_pct(ovt)}{change}; "
        f"exposed comm {fmt_us(eb)} → {fmt_us(et)}"
        + (f" ({fmt_us(measured, signed=True)})" if measured is not None else "")
    )
    deeper = prefetch_deeper_side(db, dt, (x.arms.base.backend, x.arms.test.backend))
    why = "explicit prefetch issues the next layer's all-gather while the current layer computes"
    if not b.comm_us and not t.comm_us:  # one rank (FSDP issues no collectives) or none recognised
        return [
            Finding(
                "prefetch_change",
                "info",
                f"{capital(what)}: neither profile has communication to prefetch",
                f"{what} ({lb} → {lt}): no collectives in either arm's profiled step (one rank, where FSDP "
                "issues none, or collectives fsdpbench does not recognise); any step-time difference between "
                "them is not exposed communication",
                why,
                "profile with two ranks or more to see what the prefetch depth does to exposed communication",
            )
        ]
    estimate = None if measured is None else Estimate(label="measured", exposed_comm_delta_us=measured)
    if deeper is None:  # e.g. deeper forward but shallower backward, or DeepSpeed's bucket vs N layers
        lower = "test" if measured is not None and measured < 0 else "base"
        title = f"{capital(what)}: exposed communication " + (
            fmt_us(measured, signed=True) if measured is not None else "not measured"
        )
        action = (
            f"neither arm prefetches further in every direction; keep the setting that exposes less "
            f"communication (arm {x.labels[lower]})"
            if measured is not None
            else "profile both arms to see which setting exposes less communication"
        )
        return [Finding("prefetch_change", "info", title, evidence, why, action, estimate)]
    shallower = "base" if deeper == "test" else "test"
    deep_text, shallow_text = (st, sb) if deeper == "test" else (sb, st)
    e_deep, e_shallow = (et, eb) if deeper == "test" else (eb, et)
    helped = e_deep is not None and e_shallow is not None and e_deep < e_shallow
    gap = safe_delta(e_deep, e_shallow)
    if helped:
        title = f"{capital(deep_text)} exposes {fmt_us(-gap)} less communication than {shallow_text}"
        action = f"keep {deep_text} (arm {x.labels[deeper]})"
    else:
        title = f"{capital(deep_text)} did not reduce exposed communication" + (
            f" ({fmt_us(gap, signed=True)} vs {shallow_text})" if gap is not None else ""
        )
        step_gap = safe_delta(x.mean[deeper].step_time_us, x.mean[shallower].step_time_us)
        shallower_step = x.mean[shallower].step_time_us
        if step_gap is not None and shallower_step and step_gap < -0.01 * shallower_step:
            action = (  # faster for another reason: do not advise against it on exposed comm alone
                f"its profiled step is {fmt_us(-step_gap)} shorter all the same, for a reason other than "
                f"exposed communication: check the timed verdict before choosing between {x.labels[deeper]} "
                f"and {x.labels[shallower]}"
            )
        else:
            action = (
                f"keep the shallower prefetch (arm {x.labels[shallower]}); deeper prefetch only costs memory "
                "here"
            )
    return [
        Finding("prefetch_change", "info" if helped else "medium", title, evidence, why, action, estimate)
    ]


PREFETCH_CHANGE = Rule(
    "prefetch_change",
    "the arms' prefetch settings differ in either direction (from the manifest, as run)",
    "info, or medium when the deeper prefetch did not reduce exposed comm",
    "keep the prefetch depth that exposes less comm",
    rule_prefetch_change,
)
"""Row of the rules table."""

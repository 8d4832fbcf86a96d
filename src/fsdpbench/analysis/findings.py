"""Findings: explicit rules that turn the differences between two profiles into a ranked diagnosis.

Every rule is one row of ``RULES`` (id, when it fires, severity, what to do) and one function below.
The thresholds are the module constants; README.md ("Findings: the rules") carries the same table. Rules read the
rank-mean metrics of both arms (``base`` = control, ``test``), the collective/op/sync comparison rows
built by ``fsdpbench.analysis.diff`` and the α–β fits of ``fsdpbench.analysis.whatif``.

Torch-free on purpose.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from fsdpbench.analysis import whatif

# ---- thresholds (documented in RULES and README.md ("Findings: the rules")) ---------------------------------
FRAGMENTATION_COUNT_RATIO = 3.0
"""A collective type issued at least this many times more often by one arm ..."""
SIMILAR_BYTES = (0.8, 1.25)
"""... while moving bytes within this ratio of the other's, is fragmented."""
FRAGMENTATION_HIGH_SHARE = 0.10
"""Fragmentation is ``high`` when the fragmented collectives take this share of the step, else ``medium``."""
LOW_OVERLAP_RATIO = 0.5
"""An arm whose overlap ratio is below this ..."""
EXPOSED_SHARE = 0.10
"""... and whose exposed comm is at least this share of its step has a low-overlap finding."""
OVERLAP_GAP = 0.15
"""Also low overlap: an arm whose overlap is this much below the other's ..."""
EXPOSED_GAP_SHARE = 0.05
"""... with exposed comm larger by at least this share of the other arm's step."""
SYNC_RATIO = 2.0
"""A sync/launch count at least this many times the other arm's ..."""
SYNC_MIN_DELTA = 50
"""... and larger by at least this many calls (per rank) is a storm."""
OP_DELTA_SHARE = 0.02
"""An op type whose time differs by at least this share of the base step is a compute-path difference."""
OP_MAX_LISTED = 5
"""At most this many op types are named in the compute-path finding."""
STRAGGLER_SKEW = 0.10
"""A rank whose compute time exceeds the median of the other ranks by this share is a straggler."""
HCCL_AVG_RE = re.compile(r"^(?P<op>\S+) \(HCCL AVG of (?P<collective>\w+)\)$")
"""Op types the Ascend reader gives the divide kernels torch_npu runs after an AVG collective
(``fsdpbench.trace.ascend.HCCL_AVG_LABEL``)."""

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}

COLLECTIVE_NAMES = {
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "all_reduce": "AllReduce",
    "broadcast": "Broadcast",
    "all_to_all": "AllToAll",
    "send_recv": "SendRecv",
    "barrier": "Barrier",
    "other": "Other",
}
SYNC_NAMES = {
    "barrier": "BARRIER",
    "launch_ffts": "Launch_Ffts",
    "device_synchronize": "DeviceSynchronize",
    "stream_synchronize": "StreamSynchronize",
    "event_synchronize": "EventSynchronize",
    "kernel_launch": "kernel launches",
}


@dataclass(frozen=True)
class Rule:
    """One documented rule: its id, when it fires, its severity and the action it recommends."""

    id: str
    fires_when: str
    severity: str
    action: str


RULES: tuple[Rule, ...] = (
    Rule(
        "invalid_comparison",
        "parity failed, or world size, analysed ranks, model or profiled steps differ between the arms",
        "high",
        "compare like with like: same model, world size and step; fix parity first",
    ),
    Rule(
        "step_time",
        "always (both step times known): the headline and its breakdown",
        "info",
        "none: read the findings below for the causes",
    ),
    Rule(
        "fragmentation",
        f"a collective type's count ratio >= {FRAGMENTATION_COUNT_RATIO:g}x with bytes ratio in "
        f"[{SIMILAR_BYTES[0]}, {SIMILAR_BYTES[1]}]",
        f"high if those collectives take >= {FRAGMENTATION_HIGH_SHARE:.0%} of the step, else medium",
        "bucket per-parameter collectives per module (one all-gather/reduce-scatter per shard unit); "
        "or enable comm fusion (hyper arms) or let DeepSpeed coalesce a prefetch bucket (prefetch=1 or a larger "
        "`stage3_prefetch_bucket_size`)",
    ),
    Rule(
        "low_overlap",
        f"an arm's overlap ratio < {LOW_OVERLAP_RATIO} with exposed comm >= {EXPOSED_SHARE:.0%} of its step, "
        f"or its overlap is >= {OVERLAP_GAP} below the other arm's with exposed comm larger by >= "
        f"{EXPOSED_GAP_SHARE:.0%} of the other's step",
        "high",
        "explicit layer prefetch (the arm's prefetch setting is named; try one deeper)",
    ),
    Rule(
        "prefetch_change",
        "the arms' prefetch settings differ (from the manifest)",
        "info, or medium when the deeper prefetch did not reduce exposed comm",
        "keep the prefetch depth that exposes less comm",
    ),
    Rule(
        "sync_storm",
        f"a sync/launch count >= {SYNC_RATIO:g}x the other arm's and >= {SYNC_MIN_DELTA} more per rank",
        "medium",
        "remove per-parameter synchronisation and launches (fewer, larger operations)",
    ),
    Rule(
        "compute_path",
        f"op types whose time differs by >= {OP_DELTA_SHARE:.0%} of the base step (top {OP_MAX_LISTED})",
        "medium when the test arm is slower in total, else info",
        "adopt the faster arm's op path for those op types",
    ),
    Rule(
        "straggler",
        f"a rank's compute time >= {STRAGGLER_SKEW:.0%} above the median of the other ranks",
        "medium",
        "find why that rank computes longer (placement, imbalance, a noisy neighbour)",
    ),
    Rule(
        "hccl_avg_division",
        "an arm runs divide kernels on the HCCL stream (torch_npu's ReduceOp.AVG = SUM + one divide per "
        "reduce-scatter/all-reduce) and the arms' counts differ",
        f"medium when the divides' time differs by >= {OP_DELTA_SHARE:.0%} of the base step, else info",
        "fewer, bucketed reduce-scatters (one divide per bucket), or reduce with SUM and scale the gradients once",
    ),
)
RULE_ORDER = {r.id: i for i, r in enumerate(RULES)}


@dataclass
class Finding:
    """One diagnosis: ``to_dict()`` gives ``{id, severity, title, evidence, cause, action, estimate}``."""

    id: str
    severity: str
    title: str
    evidence: str
    cause: str
    action: str
    estimate: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "cause": self.cause,
            "action": self.action,
            "estimate": self.estimate,
        }


@dataclass
class RuleInput:
    """Everything the rules read: labels, rank-mean metrics, per-rank metrics, comparison rows, fits.

    ``mean[side]`` / ``ranks[side]`` (side ``"base"``/``"test"``) hold Analysis-JSON metric keys
    (``step_time_us``, ``compute_us``, ``comm_us``, ``overlap_ratio``, ``exposed_comm_us``, ...).
    ``collectives``/``ops``/``sync`` are the Diff-JSON rows; ``fits[source][type]`` the α–β fits
    (sources ``base``, ``test``, ``pooled`` = both traces' calls together, ``aggregate`` = per-rank
    totals when the per-call events are missing; estimates prefer them in the order side, pooled,
    aggregate, other side); ``arms[side]`` the manifest arm options or ``None``.
    ``problems`` lists why the comparison may mislead; ``num_layers`` enables per-layer targets.
    """

    labels: dict[str, str]
    mean: dict[str, dict[str, Any]]
    ranks: dict[str, list[dict[str, Any]]]
    collectives: list[dict[str, Any]]
    ops: list[dict[str, Any]]
    sync: list[dict[str, Any]]
    fits: dict[str, Mapping[str, whatif.AlphaBetaFit]]
    arms: dict[str, dict[str, Any] | None] = field(default_factory=lambda: {"base": None, "test": None})
    problems: list[str] = field(default_factory=list)
    num_layers: int | None = None

    def other(self, side: str) -> str:
        return "test" if side == "base" else "base"


# ---- formatting helpers shared with diff.py --------------------------------------------------------


def fmt_us(value: float | None, *, signed: bool = False) -> str:
    """µs as ``"12.3 ms"`` / ``"640 µs"``; ``signed`` prints ``+``/``−`` (the study's minus sign)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    sign = ("+" if value > 0 else "−" if value < 0 else "±") if signed else ("−" if value < 0 else "")
    mag = abs(value)
    body = f"{mag / 1e3:.1f} ms" if mag >= 1000 else f"{mag:.0f} µs"
    return sign + body


def fmt_count(value: float | None) -> str:
    """A per-rank count: integral values without decimals, means with one."""
    if value is None:
        return "n/a"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def fmt_bytes(value: float | None, *, missing: str = "n/a") -> str:
    """Bytes with decimal prefixes (``"4.10 kB"``, ``"1.69 GB"``), as message sizes are quoted."""
    if value is None:
        return missing
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def fmt_points(value: float | None) -> str:
    """A change of a 0–1 ratio in percentage points, with the study's minus sign."""
    return "n/a" if value is None else f"{value * 100:+.1f} pts".replace("-", "−")


def _num(d: Mapping[str, Any] | None, key: str) -> float | None:
    value = None if d is None else d.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


# ---- the rules ------------------------------------------------------------------------------------


def rule_invalid_comparison(x: RuleInput) -> list[Finding]:
    if not x.problems:
        return []
    return [
        Finding(
            "invalid_comparison",
            "high",
            f"Comparison may mislead: {x.labels['base']} vs {x.labels['test']}",
            "; ".join(x.problems),
            "the arms did not run the same workload under the same conditions, so differences mix causes",
            RULES[0].action,
        )
    ]


def rule_step_time(x: RuleInput) -> list[Finding]:
    b, t = x.mean["base"], x.mean["test"]
    sb, st = _num(b, "step_time_us"), _num(t, "step_time_us")
    if sb is None or st is None or sb <= 0:
        return []
    lb, lt = x.labels["base"], x.labels["test"]
    change = st / sb - 1.0
    verb = "slower" if change > 0 else "faster"
    parts = []
    for key, name in (("compute_us", "compute"), ("exposed_comm_us", "exposed comm"), ("free_us", "free")):
        vb, vt = _num(b, key), _num(t, key)
        if vb is not None and vt is not None:
            parts.append(f"{name} {fmt_us(vb)} → {fmt_us(vt)} ({fmt_us(vt - vb, signed=True)})")
    return [
        Finding(
            "step_time",
            "info",
            f"{lt} is {abs(change):.1%} {verb} than {lb} in the profiled step",
            f"step {fmt_us(sb)} → {fmt_us(st)} ({fmt_us(st - sb, signed=True)}); " + "; ".join(parts),
            "the findings below attribute the difference",
            RULES[1].action,
        )
    ]


def _fit_candidates(x: RuleInput, side: str) -> list[tuple[str, Mapping[str, whatif.AlphaBetaFit]]]:
    order = (side, "pooled", "aggregate", x.other(side))
    return [(source, x.fits.get(source, {})) for source in order]


def rule_fragmentation(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = []
        for row in x.collectives:
            n_side, n_other = row.get(f"{side}_count"), row.get(f"{other}_count")
            b_side, b_other = row.get(f"{side}_bytes"), row.get(f"{other}_bytes")
            if not n_side or not n_other or not b_side or not b_other:
                continue
            if (
                n_side / n_other >= FRAGMENTATION_COUNT_RATIO
                and SIMILAR_BYTES[0] <= b_side / b_other <= SIMILAR_BYTES[1]
            ):
                hits.append(row)
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            f"{COLLECTIVE_NAMES.get(r['type'], r['type'])} {fmt_count(r[f'{side}_count'])} vs "
            f"{fmt_count(r[f'{other}_count'])} ({r[f'{side}_count'] / r[f'{other}_count']:.1f}×), "
            + (
                "same bytes"
                if abs(r[f"{side}_bytes"] / r[f"{other}_bytes"] - 1) < 0.01
                else f"bytes {r[f'{side}_bytes'] / r[f'{other}_bytes']:.2f}×"
            )
            + (
                f", {fmt_us(r.get(f'{side}_time_us'))} vs {fmt_us(r.get(f'{other}_time_us'))}"
                if r.get(f"{side}_time_us") is not None
                else ""
            )
            for r in hits
        )
        per_type = {
            r["type"]: {"count": r[f"{side}_count"], "time_us": r.get(f"{side}_time_us")} for r in hits
        }
        targets = {r["type"]: r[f"{other}_count"] for r in hits}
        fit_for = {}
        for r in hits:
            chosen = whatif.choose_fit(r["type"], *_fit_candidates(x, side))
            if chosen is not None:
                fit_for[r["type"]] = chosen
        m = x.mean[side]
        breakdown = {k: _num(m, k) for k in ("step_time_us", "compute_us", "comm_us", "exposed_comm_us")}
        estimate = whatif.estimate_regrouping(per_type, targets, fit_for, **breakdown)
        estimate["grouping"] = f"{lab}'s collectives issued at {lab_o}'s granularity"
        if x.num_layers:
            layer = whatif.layer_bucket_counts(
                x.num_layers,
                reshard_after_forward=bool((x.arms.get(side) or {}).get("reshard_after_forward", True)),
            )
            per_layer = whatif.estimate_regrouping(
                per_type, {k: v for k, v in layer.items() if k in per_type}, fit_for, **breakdown
            )
            estimate["one_bucket_per_layer"] = {
                k: per_layer[k]
                for k in (
                    "comm_delta_us",
                    "exposed_comm_delta_us",
                    "step_time_delta_us",
                    "step_time_lower_bound_us",
                )
            }
            estimate["one_bucket_per_layer"]["target_counts"] = layer
        frag_time = sum(float(r.get(f"{side}_time_us") or 0.0) for r in hits)
        share = _share(frag_time, _num(m, "step_time_us"))
        severity = "high" if share is not None and share >= FRAGMENTATION_HIGH_SHARE else "medium"
        if share is None:
            share_text = ""
        elif share <= 1.0:
            share_text = f"; these collectives take {share:.1%} of {lab}'s step"
        else:  # calls on several comm threads/streams run concurrently, so their sum can exceed the step
            share_text = (
                f"; their calls add up to {fmt_us(frag_time)}, more than {lab}'s whole step "
                f"({fmt_us(_num(m, 'step_time_us'))}): they run concurrently"
            )
        arm = x.arms.get(side) or {}
        action = (
            "bucket per-parameter collectives per module: one all-gather and one reduce-scatter per "
            "shard unit over a flat buffer, as FSDP2 does"
        )
        backend = arm.get("backend")
        if (
            backend in (None, "hyper") and arm.get("comm_fusion") is False
        ):  # comm_fusion is hyper's option only
            action += f"; or enable comm fusion (arm {lab} runs comm_fusion=false)"
        elif backend == "deepspeed" and not arm.get("prefetch"):
            action += (
                f"; for DeepSpeed, let it coalesce a prefetch bucket into one all-gather (arm {lab}: "
                "prefetch=1 or a larger stage3_prefetch_bucket_size)"
            )
        max_ratio = max(r[f"{side}_count"] / r[f"{other}_count"] for r in hits)
        findings.append(
            Finding(
                "fragmentation",
                severity,
                f"{lab}'s communication is {max_ratio:.1f}× more fragmented than {lab_o}'s",
                evidence + share_text,
                "per-parameter collectives (one call per tensor) instead of one per module: every call pays the "
                "fixed latency alpha again, and small calls use the link poorly",
                action,
                estimate,
            )
        )
    return findings


def _prefetch_phrase(x: RuleInput, side: str) -> tuple[str, int | None]:
    arm = x.arms.get(side)
    lab = x.labels[side]
    if not arm or arm.get("prefetch") is None:
        return f"arm {lab}'s prefetch setting is unknown (no manifest)", None
    depth = int(arm["prefetch"])
    return f"arm {lab} runs prefetch={depth}", depth


def rule_low_overlap(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        m, mo = x.mean[side], x.mean[other]
        ov, ov_o = _num(m, "overlap_ratio"), _num(mo, "overlap_ratio")
        exp, exp_o = _num(m, "exposed_comm_us"), _num(mo, "exposed_comm_us")
        step, step_o = _num(m, "step_time_us"), _num(mo, "step_time_us")
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
        action = (
            f"{phrase}: enable explicit layer prefetch (prefetch=1)"
            if depth == 0
            else f"{phrase}: try prefetch={depth + 1}"
            if depth is not None
            else f"{phrase}: enable explicit layer prefetch (prefetch=1 or deeper)"
        )
        evidence = (
            f"overlap {fmt_ratio(ov)} ({lab}) vs {fmt_ratio(ov_o)} ({lab_o}); exposed comm "
            f"{fmt_us(exp)} = {exp / step:.1%} of {lab}'s step"
            + (f" vs {fmt_us(exp_o)} ({lab_o})" if exp_o is not None else "")
        )
        breakdown = {k: _num(m, k) for k in ("step_time_us", "compute_us", "comm_us", "exposed_comm_us")}
        if ov_o is not None and ov_o >= ov + OVERLAP_GAP:
            estimate = whatif.estimate_overlap(target_overlap_ratio=ov_o, **breakdown)
            estimate["scenario"] = f"{lab} hides comm as well as {lab_o} does ({fmt_ratio(ov_o)})"
        else:  # no arm shows what is achievable: give only the best case, which is a bound, not an estimate
            best = whatif.estimate_overlap(target_overlap_ratio=1.0, **breakdown)
            estimate = {
                **best,
                "exposed_comm_delta_us": None,
                "step_time_delta_us": None,
                "best_case_step_time_delta_us": best["step_time_delta_us"],
                "scenario": f"no arm overlaps much better than {lab}; best case = all comm hidden",
            }
        findings.append(
            Finding(
                "low_overlap",
                "high",
                f"{lab} leaves {fmt_us(exp)} of communication exposed (overlap {fmt_ratio(ov)})",
                evidence,
                "collectives are issued when their layer needs them, not ahead of time, so compute waits",
                action,
                estimate,
            )
        )
    return findings


def rule_prefetch_change(x: RuleInput) -> list[Finding]:
    pb, pt = (x.arms.get("base") or {}).get("prefetch"), (x.arms.get("test") or {}).get("prefetch")
    if pb is None or pt is None or int(pb) == int(pt):
        return []
    b, t = x.mean["base"], x.mean["test"]
    lb, lt = x.labels["base"], x.labels["test"]
    ovb, ovt = _num(b, "overlap_ratio"), _num(t, "overlap_ratio")
    eb, et = _num(b, "exposed_comm_us"), _num(t, "exposed_comm_us")
    deeper, shallower = ("test", "base") if int(pt) > int(pb) else ("base", "test")
    e_deep, e_shallow = (et, eb) if deeper == "test" else (eb, et)
    helped = e_deep is not None and e_shallow is not None and e_deep < e_shallow
    change = "" if ovb is None or ovt is None else f" ({fmt_points(ovt - ovb)})"
    evidence = (
        f"prefetch={pb} ({lb}) vs prefetch={pt} ({lt}): overlap {fmt_ratio(ovb)} → {fmt_ratio(ovt)}{change}; "
        f"exposed comm {fmt_us(eb)} → {fmt_us(et)}"
        + (f" ({fmt_us(et - eb, signed=True)})" if eb is not None and et is not None else "")
    )
    hi, lo = max(int(pb), int(pt)), min(int(pb), int(pt))
    gap = None if e_deep is None or e_shallow is None else e_deep - e_shallow
    if helped:
        title = f"Prefetch={hi} exposes {fmt_us(-gap)} less communication than prefetch={lo}"
        action = f"keep prefetch={hi} (arm {x.labels[deeper]})"
    else:
        title = f"Prefetch={hi} did not reduce exposed communication" + (
            f" ({fmt_us(gap, signed=True)} vs prefetch={lo})" if gap is not None else ""
        )
        action = (
            f"keep the shallower prefetch (arm {x.labels[shallower]}); deeper prefetch only costs memory here"
        )
    return [
        Finding(
            "prefetch_change",
            "info" if helped else "medium",
            title,
            evidence,
            "explicit prefetch issues the next layer's all-gather while the current layer computes",
            action,
            {"label": "measured", "exposed_comm_delta_us": None if eb is None or et is None else et - eb},
        )
    ]


def rule_sync_storm(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("test", "base"):
        other = x.other(side)
        hits = [
            r
            for r in x.sync
            if r.get(side) is not None
            and r.get(other) is not None
            and r[side] - r[other] >= SYNC_MIN_DELTA
            and r[side] >= SYNC_RATIO * r[other]
        ]
        if not hits:
            continue
        lab, lab_o = x.labels[side], x.labels[other]
        evidence = "; ".join(
            f"{SYNC_NAMES.get(r['name'], r['name'])} {fmt_count(r[side])} vs {fmt_count(r[other])} "
            f"(+{fmt_count(r[side] - r[other])} per rank)"
            for r in hits
        )
        findings.append(
            Finding(
                "sync_storm",
                "medium",
                f"{lab} issues far more sync/launch tasks than {lab_o}",
                evidence,
                "synchronisation or a launch per parameter or per collective: each one stalls the host or the "
                "device queue",
                RULES[RULE_ORDER["sync_storm"]].action,
                {
                    "label": "estimate",
                    "step_time_delta_us": None,
                    "note": "not priced: the trace does not give the cost of one sync",
                },
            )
        )
    return findings


def rule_compute_path(x: RuleInput) -> list[Finding]:
    step = _num(x.mean["base"], "step_time_us")
    if not step:
        return []
    hits = [r for r in x.ops if r.get("delta_us") is not None and abs(r["delta_us"]) >= OP_DELTA_SHARE * step]
    if not hits:
        return []
    hits = sorted(hits, key=lambda r: -abs(r["delta_us"]))[:OP_MAX_LISTED]
    lb, lt = x.labels["base"], x.labels["test"]
    net = sum(r["delta_us"] for r in hits)
    evidence = "; ".join(
        f"{r['op_type']} {fmt_us(r['delta_us'], signed=True)} ({fmt_us(r.get('base_us'))} → "
        f"{fmt_us(r.get('test_us'))}, count {fmt_count(r.get('base_count'))} → {fmt_count(r.get('test_count'))})"
        for r in hits
    )
    slower = [r for r in hits if r["delta_us"] > 0]
    faster = [r for r in hits if r["delta_us"] < 0]
    if net < 0:  # the test arm is faster overall: price what the base would gain from the test's ops
        title, adopter, donor, gain_rows = f"{lt}'s compute path is faster on ", lb, lt, faster
    else:
        title, adopter, donor, gain_rows = f"{lt}'s compute path is slower on ", lt, lb, slower
    title += ", ".join(r["op_type"] for r in gain_rows)
    return [
        Finding(
            "compute_path",
            "medium" if net > 0 else "info",
            title,
            f"{lt} − {lb} kernel time: {evidence}",
            "the arms run different ops for the same model step (e.g. copies/slices around the flat buffers, "
            "casts for mixed precision)",
            f"adopt {donor}'s path for {', '.join(r['op_type'] for r in gain_rows)} in {adopter}",
            {
                "label": "estimate",
                "step_time_delta_us": -sum(abs(r["delta_us"]) for r in gain_rows),
                "scenario": f"{adopter} runs {donor}'s faster ops; an upper bound on the gain, as compute may overlap comm",
            },
        )
    ]


def rule_straggler(x: RuleInput) -> list[Finding]:
    findings = []
    for side in ("base", "test"):
        ranks = x.ranks.get(side) or []
        key = "compute_us" if all(_num(r, "compute_us") is not None for r in ranks) else "step_time_us"
        values = [(r.get("rank"), _num(r, key)) for r in ranks if _num(r, key) is not None]
        if len(values) < 2:
            continue
        # compare each rank with the median of the *other* ranks (with 2 ranks: the other rank)
        skews = []
        for i, (rank, v) in enumerate(values):
            others = median(w for j, (_, w) in enumerate(values) if j != i)
            if others > 0 and v >= others * (1 + STRAGGLER_SKEW):
                skews.append((v / others - 1, rank, v, others))
        if not skews:
            continue
        _, rank, worst, mid = max(skews)
        lab = x.labels[side]
        what = "compute" if key == "compute_us" else "step time"
        findings.append(
            Finding(
                "straggler",
                "medium",
                f"rank {rank} is a straggler in {lab}",
                f"rank {rank} {what} {fmt_us(worst)} vs {fmt_us(mid)} "
                + (
                    "on the other rank "
                    if len(values) == 2
                    else f"(median of the other {len(values) - 1} ranks) "
                )
                + f"(+{worst / mid - 1:.1%})",
                "one rank computes longer and every collective waits for it",
                f"find why rank {rank} of {lab} computes longer (placement, imbalance, a noisy neighbour)",
                {
                    "label": "estimate",
                    "step_time_delta_us": -(worst - mid),
                    "scenario": f"rank {rank} computes as fast as the other ranks (median)",
                },
            )
        )
    return findings


def rule_hccl_avg_division(x: RuleInput) -> list[Finding]:
    """HCCL has no AVG reduce: torch_npu sums, then divides on the HCCL stream, once per collective, so
    an arm that issues more reduce-scatters also runs more divides (the study's "RealDiv 173 vs 73")."""
    per: dict[str, dict[str, dict[str, float]]] = {"base": {}, "test": {}}
    for r in x.ops:
        m = HCCL_AVG_RE.match(str(r.get("op_type", "")))
        if not m:
            continue
        for side in ("base", "test"):
            acc = per[side].setdefault(m["collective"], {"count": 0.0, "us": 0.0})
            acc["count"] += float(r.get(f"{side}_count") or 0.0)
            acc["us"] += float(r.get(f"{side}_us") or 0.0)
    n = {side: sum(v["count"] for v in per[side].values()) for side in per}
    us = {side: sum(v["us"] for v in per[side].values()) for side in per}
    if not (n["base"] or n["test"]) or n["base"] == n["test"]:
        return []
    more = "test" if n["test"] > n["base"] else "base"
    fewer = x.other(more)
    lab, lab_o = x.labels[more], x.labels[fewer]
    delta = us[more] - us[fewer]
    step = _num(x.mean["base"], "step_time_us")
    severity = "medium" if step and delta >= OP_DELTA_SHARE * step else "info"

    def side_text(side: str) -> str:
        parts = [
            f"{fmt_count(v['count'])} after {COLLECTIVE_NAMES.get(c, c)}"
            for c, v in sorted(per[side].items())
            if v["count"]
        ]
        return f"{fmt_count(n[side])} ({', '.join(parts) or 'none'}; {fmt_us(us[side])})"

    return [
        Finding(
            "hccl_avg_division",
            severity,
            f"{lab} runs {fmt_count(n[more])} HCCL AVG divides vs {fmt_count(n[fewer])} in {lab_o}",
            f"divide kernels on the HCCL stream: {lab} {side_text(more)}; {lab_o} {side_text(fewer)}",
            "HCCL has no AVG reduce: torch_npu reduces with SUM and then divides on the HCCL stream, one divide "
            "kernel per reduce-scatter/all-reduce, so more (per-parameter) collectives mean as many more divides, "
            "counted as compute",
            RULES[RULE_ORDER["hccl_avg_division"]].action,
            {
                "label": "estimate",
                "step_time_delta_us": -delta if delta > 0 else None,
                "scenario": f"{lab} runs as many divides as {lab_o}; an upper bound, as they may overlap other work",
            },
        )
    ]


RULE_FUNCTIONS: dict[str, Callable[[RuleInput], list[Finding]]] = {
    "invalid_comparison": rule_invalid_comparison,
    "step_time": rule_step_time,
    "fragmentation": rule_fragmentation,
    "low_overlap": rule_low_overlap,
    "prefetch_change": rule_prefetch_change,
    "sync_storm": rule_sync_storm,
    "compute_path": rule_compute_path,
    "straggler": rule_straggler,
    "hccl_avg_division": rule_hccl_avg_division,
}


def _gain(f: Finding) -> float:
    delta = (f.estimate or {}).get("step_time_delta_us")
    return -float(delta) if isinstance(delta, (int, float)) else 0.0


def evaluate(x: RuleInput) -> list[Finding]:
    """Run every rule and rank the findings.

    Order: an invalid comparison first, the step-time headline second, then by severity, then by
    the estimated step-time gain (largest first), then by the order of ``RULES``.
    """
    findings = [f for rule in RULES for f in RULE_FUNCTIONS[rule.id](x)]
    pinned = {"invalid_comparison": 0, "step_time": 1}
    return sorted(
        findings,
        key=lambda f: (pinned.get(f.id, 2), SEVERITY_ORDER.get(f.severity, 9), -_gain(f), RULE_ORDER[f.id]),
    )

"""The per-(unit, phase) what-if estimates (issue 21 step 4): prefetch and regrouping priced on the ranks'
``units`` rows and ``waits.units``, against hand computations; the whole-step path for traces without
units; the aggregate α–β fit on transfer time; the calibration's prefetch prediction per unit."""

from __future__ import annotations

import copy
import json

import pytest

from fsdpbench.analysis import derived
from fsdpbench.analysis.compare import calibration as cal
from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.estimate import whatif, whatif_units
from fsdpbench.analysis.output.result import RankMetrics
from fsdpbench.report.estimate import estimate_lines
from fsdpbench.results import run_folder
from helpers import analysis, rank


def _row(unit: str, phase: str, compute: float, colls: dict, *, overlapped: float = 0.0, comm=0.0) -> dict:
    return {
        "unit": unit,
        "phase": phase,
        "compute_us": compute,
        "comm_us": comm,
        "overlapped_us": overlapped,
        "exposed_us": comm - overlapped,
        "collectives": {k: {"count": c, "bytes": b} for k, (c, b) in colls.items()},
        "fsdp_internals": None,
    }


def _split(exposed_transfer: float, transfer: float | None = None) -> dict:
    t = exposed_transfer if transfer is None else transfer
    return {"wait_us": 0.0, "transfer_us": t, "exposed_wait_us": 0.0, "exposed_transfer_us": exposed_transfer}


PREFETCH_ROWS = [
    _row("root", "forward", 10.0, {"all_gather": (1, 100)}),
    _row("layers.0", "forward", 40.0, {"all_gather": (1, 100)}, overlapped=5.0, comm=30.0),
    _row("layers.1", "forward", 30.0, {"all_gather": (1, 100)}),
    _row("layers.1", "backward", 50.0, {"all_gather": (1, 100), "reduce_scatter": (1, 300)}),
    _row("layers.0", "backward", 60.0, {"all_gather": (1, 100), "reduce_scatter": (1, 300)}),
    _row("(all)", "optimizer", 7.0, {}),
]


def _prefetch_analysis() -> dict:
    r0 = {"rank": 0, "units": copy.deepcopy(PREFETCH_ROWS)}
    r1 = {"rank": 1, "units": copy.deepcopy(PREFETCH_ROWS)}
    exposed = {  # exposed transfer per place: rank 0, rank 1
        ("root", "forward"): (4.0, 0.0),
        ("layers.0", "forward"): (20.0, 0.0),
        ("layers.1", "forward"): (50.0, 100.0),
        ("layers.1", "backward"): (40.0, 0.0),
        ("layers.0", "backward"): (80.0, 0.0),
    }
    units = [
        {"unit": u, "phase": p, "ranks": {"0": _split(a), "1": _split(b)}}
        for (u, p), (a, b) in exposed.items()
    ]
    return {"ranks": [r0, r1], "waits": {"units": units}}


def test_prefetch_per_unit_hides_each_units_exposed_all_gather_under_the_previous_units_free_compute():
    est = whatif_units.estimate_prefetch_units(
        _prefetch_analysis(), step_time_us=1000.0, compute_us=400.0, comm_us=500.0
    )
    # by hand, rank 0: forward: root first (nothing before it) 0; layers.0 min(20, root 10 − 0) = 10;
    # layers.1 min(50, layers.0 40 − 5) = 35; backward: layers.1 first 0; layers.0's all-gather is
    # 100 of its 400 bytes: min(80 · 0.25, layers.1 50) = 20 → 65.
    # rank 1: only layers.1 forward exposes 100 → min(100, 35) = 35. Mean: 50.
    assert est.basis == whatif.BASIS_UNITS
    assert est.exposed_comm_delta_us == pytest.approx(-50.0)
    assert est.step_time_delta_us == pytest.approx(-50.0)
    assert est.step_time_lower_bound_us == pytest.approx(500.0)
    per = {(u["unit"], u["phase"]): u for u in est.per_unit}
    assert per[("layers.1", "forward")]["hidden_us"] == pytest.approx(35.0)
    assert per[("layers.0", "forward")]["hidden_us"] == pytest.approx(5.0)  # (10 + 0) / 2
    assert per[("layers.0", "backward")]["all_gather_exposed_transfer_us"] == pytest.approx(10.0)
    assert per[("layers.0", "backward")]["slack_us"] == pytest.approx(50.0)
    assert ("(all)", "optimizer") not in per
    assert not any("one rank" in a for a in est.assumptions)  # a place without collectives has no split
    d = est.to_dict()
    assert d["basis"] == "units" and whatif.Estimate.from_dict(d).per_unit == est.per_unit
    assert "computed per unit and phase (most: layers.1 forward" in "\n".join(
        estimate_lines(est, details=True)
    )


def test_prefetch_per_unit_without_waits_counts_the_places_exposed_comm_and_says_so():
    data = {"ranks": [{"rank": 0, "units": [_row("a", "forward", 8.0, {"all_gather": (1, 1)}, comm=3.0),
                                              _row("b", "forward", 1.0, {"all_gather": (1, 1)}, comm=12.0)]}]}  # fmt: skip
    est = whatif_units.estimate_prefetch_units(data)
    assert est.exposed_comm_delta_us == pytest.approx(-8.0)  # min(b's exposed 12, a's compute 8)
    assert est.step_time_delta_us is None  # no step time given
    assert any("one rank" in a for a in est.assumptions)
    assert whatif_units.estimate_prefetch_units({"ranks": [{"rank": 0, "units": None}]}) is None


def _regroup_analysis() -> dict:
    rows = [
        _row("layers.0", "forward", 1.0, {"all_gather": (5, 500)}),
        _row("layers.0", "backward", 1.0, {"all_gather": (5, 500), "reduce_scatter": (5, 500)}),
        _row("root", "forward", 1.0, {"all_gather": (2, 200)}),
    ]
    units = [
        {"unit": "layers.0", "phase": "forward", "ranks": {"0": _split(40.0, 80.0)}},
        {"unit": "layers.0", "phase": "backward", "ranks": {"0": _split(200.0, 200.0)}},
        {"unit": "root", "phase": "forward", "ranks": {"0": _split(3.0, 3.0)}},
    ]
    return {"ranks": [{"rank": 0, "units": rows}], "waits": {"units": units}}


def test_regrouping_per_unit_prices_each_places_merged_calls_at_alpha_and_keeps_its_own_overlap():
    fits = {
        "all_gather": ("test", whatif.AlphaBetaFit(10.0, 0.001, 0.9, 10, "ok")),
        "reduce_scatter": ("test", whatif.AlphaBetaFit(4.0, 0.001, 0.9, 10, "ok")),
    }
    targets = {
        ("layers.0", "forward", "all_gather"): 1,
        ("layers.0", "backward", "all_gather"): 1,
        ("layers.0", "backward", "reduce_scatter"): 1,
        ("root", "forward", "all_gather"): 1,
    }
    est = whatif_units.estimate_regrouping_units(
        _regroup_analysis(),
        targets,
        fits,
        step_time_us=1000.0,
        compute_us=300.0,
        comm_us=400.0,
        exposed_comm_us=300.0,
        free_us=170.0,
    )
    # by hand: layers.0 forward 4 · 10 = 40 (≤ transfer 80), exposed 40 · 40/80 = 20; layers.0 backward
    # 4 · 10 + 4 · 4 = 56, all exposed; root forward 1 · 10 = 10, capped at its transfer 3, exposed 3.
    # Calls 17 → 4: idle −170 · (1 − 4/17) = −130.
    assert est.basis == whatif.BASIS_UNITS
    assert est.comm_delta_us == pytest.approx(-99.0)
    assert est.exposed_comm_delta_us == pytest.approx(-79.0)
    assert est.idle_delta_us == pytest.approx(-130.0)
    assert est.step_time_delta_us == pytest.approx(-209.0)
    assert est.step_time_lower_bound_us == pytest.approx(max(300.0, 400.0 - 99.0))
    ag = est.per_type["all_gather"]
    assert (ag.count, ag.target_count, ag.alpha_us, ag.fit_source) == (12.0, 3.0, 10.0, "test")
    per = {(u["unit"], u["phase"]): u for u in est.per_unit}
    assert per[("root", "forward")]["saved_us"] == pytest.approx(3.0)
    assert (
        per[("layers.0", "backward")]["count"] == 10.0
        and per[("layers.0", "backward")]["target_count"] == 2.0
    )
    # only the types asked for: reduce-scatter kept as it is
    only_ag = whatif_units.estimate_regrouping_units(
        _regroup_analysis(), targets, fits, types=["all_gather"], step_time_us=1000.0, compute_us=300.0,
        comm_us=400.0, exposed_comm_us=300.0,
    )  # fmt: skip
    assert only_ag.comm_delta_us == pytest.approx(-(40.0 + 40.0 + 3.0))
    assert "reduce_scatter" not in only_ag.per_type


def test_regrouping_per_unit_removes_each_places_wait_by_the_share_of_its_calls_removed():
    """Two ranks; waits at each place (every gloo/NCCL call is a rendezvous), by hand."""
    fits = {"all_gather": ("test", whatif.AlphaBetaFit(10.0, 0.001, 0.9, 10, "ok"))}
    rows = [
        _row("layers.0", "forward", 1.0, {"all_gather": (8, 800)}),
        _row("layers.0", "backward", 1.0, {"all_gather": (4, 400), "reduce_scatter": (4, 400)}),
    ]
    waits = {  # (wait, exposed wait) per place and rank; transfer 500, all exposed
        ("layers.0", "forward"): {"0": (40.0, 30.0), "1": (0.0, 0.0)},
        ("layers.0", "backward"): {"0": (80.0, 80.0), "1": (16.0, 8.0)},
    }
    units = [
        {
            "unit": u,
            "phase": p,
            "ranks": {
                rk: {"wait_us": w, "transfer_us": 500.0, "exposed_wait_us": ew, "exposed_transfer_us": 500.0}
                for rk, (w, ew) in by_rank.items()
            },
        }
        for (u, p), by_rank in waits.items()
    ]
    data = {"ranks": [{"rank": r, "units": copy.deepcopy(rows)} for r in (0, 1)], "waits": {"units": units}}
    targets = {("layers.0", "forward", "all_gather"): 2, ("layers.0", "backward", "all_gather"): 1}
    est = whatif_units.estimate_regrouping_units(
        data, targets, fits, types=["all_gather"], step_time_us=2000.0, compute_us=2.0, comm_us=1500.0,
        exposed_comm_us=1400.0,
    )  # fmt: skip
    # by hand, per rank: forward removes 6 of 8 calls (share 3/4), backward 3 of its 8 calls (3/8, the
    # reduce-scatters stay). Waits saved: rank 0 40·3/4 + 80·3/8 = 60, rank 1 0 + 16·3/8 = 6 → mean 33;
    # exposed: rank 0 30·3/4 + 80·3/8 = 52.5, rank 1 8·3/8 = 3 → mean 27.75. Transfer saved per rank
    # 6·10 + 3·10 = 90, all exposed.
    assert est.wait_delta_us == pytest.approx(-33.0)
    assert est.comm_delta_us == pytest.approx(-(90.0 + 33.0))
    assert est.exposed_comm_delta_us == pytest.approx(-(90.0 + 27.75))
    assert est.step_time_delta_us == pytest.approx(-(90.0 + 27.75))  # no idle figure given
    assert est.step_time_lower_bound_us == pytest.approx(1500.0 - 123.0)
    per = {(u["unit"], u["phase"]): u for u in est.per_unit}
    assert per[("layers.0", "forward")]["wait_saved_us"] == pytest.approx((30.0 + 0.0) / 2)
    assert per[("layers.0", "forward")]["exposed_wait_saved_us"] == pytest.approx((22.5 + 0.0) / 2)
    assert per[("layers.0", "backward")]["wait_saved_us"] == pytest.approx((30.0 + 6.0) / 2)
    assert any("rendezvous" in a for a in est.assumptions)
    text = "\n".join(estimate_lines(est, details=True))
    assert "communication change, −33 µs is less waiting for the last rank" in text
    # the field survives diff.json
    assert whatif.Estimate.from_dict(json.loads(json.dumps(est.to_dict()))).wait_delta_us == pytest.approx(
        -33.0
    )
    # one rank: no split, no wait term
    one = {"ranks": [{"rank": 0, "units": copy.deepcopy(rows)}]}
    alone = whatif_units.estimate_regrouping_units(
        one, targets, fits, step_time_us=2000.0, compute_us=2.0, comm_us=1500.0, exposed_comm_us=1400.0
    )
    assert alone.wait_delta_us is None


def test_regrouping_on_step_totals_removes_the_steps_wait_by_the_share_of_all_its_calls_removed():
    """Traces without units but with two ranks: the same wait term on the whole step, by hand."""
    data = {
        "ranks": [
            {"rank": r, "collectives": {"all_gather": {"count": 16}, "reduce_scatter": {"count": 4}}}
            for r in (0, 1)
        ],
        "waits": {
            "ranks": [
                {"rank": 0, "wait_us": 120.0, "exposed_wait_us": 100.0},
                {"rank": 1, "wait_us": 80.0, "exposed_wait_us": 60.0},
            ]
        },
    }
    waits = whatif.step_waits(data)
    assert waits == whatif.StepWaits(wait_us=100.0, exposed_wait_us=80.0, calls=20.0)
    assert whatif.step_waits({"ranks": data["ranks"], "waits": {}}) is None  # one rank: no split
    fits = {"all_gather": ("test", whatif.AlphaBetaFit(10.0, 0.001, 0.9, 10, "ok"))}
    est = whatif.estimate_regrouping(
        {"all_gather": (16.0, 1600.0)}, {"all_gather": 4.0}, fits, step_time_us=5000.0, compute_us=1000.0,
        comm_us=2000.0, exposed_comm_us=1000.0, waits=waits,
    )  # fmt: skip
    # by hand: 12 calls removed · α 10 = 120 of the type's 1600 µs → comm × (1 − 0.075) = 1850 (−150);
    # exposed 1000 → 925 (−75). Waits: 12 of all 20 calls removed (0.6): −60, exposed −48.
    assert est.wait_delta_us == pytest.approx(-60.0)
    assert est.comm_delta_us == pytest.approx(-210.0)
    assert est.exposed_comm_delta_us == pytest.approx(-123.0)
    assert est.step_time_delta_us == pytest.approx(-123.0)
    assert est.step_time_lower_bound_us == pytest.approx(1790.0)
    without = whatif.estimate_regrouping(
        {"all_gather": (16.0, 1600.0)}, {"all_gather": 4.0}, fits, step_time_us=5000.0, compute_us=1000.0,
        comm_us=2000.0, exposed_comm_us=1000.0,
    )  # fmt: skip
    assert without.wait_delta_us is None and without.comm_delta_us == pytest.approx(-150.0)


# ------------------------------------------------------------------ through the diff's findings
ALPHA, BETA = 100.0, 1e-5


def _arm(ag_count: int, per_unit: int, *, with_units: bool, durations: float) -> dict:
    coll = {
        "all_gather": {
            "count": ag_count,
            "bytes": 10**9,
            "time_us": durations,
            "transfer_us": ag_count * ALPHA + BETA * 10**9,  # what the cross-rank split gives
        },
        "reduce_scatter": {"count": 6, "bytes": 5 * 10**8, "time_us": 100_000.0},
    }
    ranks = [rank(r, collectives=copy.deepcopy(coll), free=50_000.0) for r in (0, 1)]
    data = analysis(*ranks)
    if with_units:
        for r in ranks:
            r["units"] = [
                _row("layers.0", "forward", 1.0, {"all_gather": (per_unit, 5 * 10**8)}),
                _row("layers.1", "forward", 1.0, {"all_gather": (per_unit, 5 * 10**8)}),
                _row("layers.0", "backward", 1.0, {"reduce_scatter": (6, 5 * 10**8)}),
            ]
        data["waits"] = {
            "units": [
                {"unit": "layers.0", "phase": "forward", "ranks": {"0": _split(5000.0, 10000.0), "1": _split(5000.0, 10000.0)}},
                {"unit": "layers.1", "phase": "forward", "ranks": {"0": _split(12000.0), "1": _split(12000.0)}},
            ]
        }  # fmt: skip
    return data


@pytest.mark.parametrize("with_units", [True, False])
def test_the_fragmentation_finding_prices_per_unit_with_units_and_on_step_totals_without(with_units):
    base = _arm(12, 6, with_units=with_units, durations=200_000.0)
    test = _arm(120, 60, with_units=with_units, durations=300_000.0)
    if not with_units:  # the step's waits (rank means 12.6 ms, half exposed) without places to put them
        test["waits"] = {
            "ranks": [{"rank": r, "wait_us": 12_600.0, "exposed_wait_us": 6_300.0} for r in (0, 1)]
        }
    d = diff_analyses(base, test, base_label="torch", test_label="module", context={"num_layers": 2})
    # the aggregate fit is made on transfer time: α = 100 exactly (on durations it would be ≈ 926)
    agg = d.fits["aggregate"]["all_gather"]
    assert agg.alpha_us == pytest.approx(ALPHA) and agg.beta_us_per_byte == pytest.approx(BETA)
    est = d.finding("fragmentation").estimate
    assert est.per_type["all_gather"].alpha_us == pytest.approx(ALPHA)
    if not with_units:
        assert est.basis == whatif.BASIS_STEP and est.per_unit == []
        assert "computed from step totals" in "\n".join(estimate_lines(est, details=True))
        assert est.one_bucket_per_layer.basis == whatif.BASIS_STEP
        # by hand: 120 + 6 calls per rank; 108 all-gathers removed → wait 12.6 ms · 108/126; one bucket
        # per layer (2L+1 = 5 all-gathers) removes 115
        assert est.wait_delta_us == pytest.approx(-10_800.0)
        assert est.one_bucket_per_layer.wait_delta_us == pytest.approx(-12_600.0 * 115 / 126)
        return
    # by hand: per place 60 → 6 calls: 54 · 100 = 5400 saved; layers.0 exposes half its transfer (2700),
    # layers.1 all (5400); idle −50 ms · (1 − 12/120)
    assert est.basis == whatif.BASIS_UNITS
    assert est.comm_delta_us == pytest.approx(-10_800.0)
    assert est.exposed_comm_delta_us == pytest.approx(-8_100.0)
    assert est.idle_delta_us == pytest.approx(-45_000.0)
    assert est.step_time_delta_us == pytest.approx(-53_100.0)
    # one bucket per unit: 60 → 1 per place: 59 · 100 each; exposed 2950 + 5900; calls 120 → 2
    layer = est.one_bucket_per_layer
    assert layer.basis == whatif.BASIS_UNITS and layer.target_counts == {"all_gather": 2}
    assert layer.comm_delta_us == pytest.approx(-11_800.0)
    assert layer.step_time_delta_us == pytest.approx(-8_850.0 - 50_000.0 * (1 - 2 / 120))
    # the calibration entry says which basis priced it
    arms = {"torch": {"label": "torch", "backend": "torch"}, "module": {"label": "module", "backend": "torch", "unit": "module"}}  # fmt: skip
    entries = cal.calibrate_diff(d.to_dict(), arms, {"torch": 100.0, "module": 160.0})
    assert {e["estimate"]: e["basis"] for e in entries} == {
        "regrouping": "units",
        "one_bucket_per_layer": "units",
    }
    assert entries[0]["predicted_ms"] == pytest.approx(-53.1)


def test_the_calibrations_prefetch_prediction_is_the_diffs_per_unit_estimate():
    base = analysis(rank(0, overlap=0.0), rank(1, overlap=0.0))
    for r in base["ranks"]:
        r["units"] = copy.deepcopy(PREFETCH_ROWS)
    base["waits"] = _prefetch_analysis()["waits"]
    d = diff_analyses(base, copy.deepcopy(base), base_label="p0", test_label="p1").to_dict()
    assert d["prefetch_estimates"]["base"]["basis"] == "units"
    arms = {"p0": {"label": "p0", "backend": "torch", "prefetch": 0}, "p1": {"label": "p1", "backend": "torch", "prefetch": 1}}  # fmt: skip
    (entry,) = cal.calibrate_diff(d, arms, {"p0": 1000.0, "p1": 990.0})
    assert entry["estimate"] == "prefetch_overlap" and entry["subject"] == "p0"
    assert entry["basis"] == "units" and entry["predicted_ms"] == pytest.approx(-0.050)  # −50 µs, as above
    assert entry["predicted_component_ms"] == pytest.approx(-0.050)
    # without units: the whole-step estimate, labelled so
    plain = diff_analyses(
        analysis(rank(0), rank(1)), analysis(rank(0), rank(1)), base_label="p0", test_label="p1"
    )
    d = plain.to_dict()
    assert d["prefetch_estimates"] == {"base": None, "test": None}
    (entry,) = cal.calibrate_diff(d, arms, {"p0": 1000.0, "p1": 990.0})
    assert entry["basis"] == "step totals"


def test_a_ranks_collectives_get_their_transfer_time_per_type_from_the_split():
    import pandas as pd

    m = RankMetrics(
        step=None, step_time_us=1.0, overlap_ratio=None, compute_us=0.0, comm_us=0.0, overlapped_us=0.0,
        rank=0, exposed_comm_us=0.0, free_us=0.0, kernel_time_us=0.0, ops=[], sync={},
        collectives={"all_gather": {"count": 2, "time_us": 30.0}, "reduce_scatter": {"count": 1, "time_us": 5.0}},
        collective_events=pd.DataFrame(
            {"type": ["all_gather", "reduce_scatter", "all_gather"], "bytes": [1.0, 1.0, 1.0],
             "start_ns": [0, 10_000, 20_000], "end_ns": [10_000, 15_000, 40_000]}
        ),
    )  # fmt: skip
    m.set_transfer_ns({0: (4.0, 6.0), 2: (15.0, 5.0)})  # row 1 has no split: its whole duration
    assert m.collectives["all_gather"]["transfer_us"] == pytest.approx(11.0)
    assert m.collectives["reduce_scatter"]["transfer_us"] == pytest.approx(5.0)
    assert m.to_dict()["collectives"]["all_gather"]["time_us"] == 30.0


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_the_shared_run_prices_prefetch_per_unit_as_a_hand_computation_over_its_analysis_json(
    profiled_ab_run,
):
    d = derived.diff_run(profiled_ab_run)[0].to_dict()
    data = json.loads((profiled_ab_run / run_folder.ANALYSIS).read_text())
    label = d["base"]
    arm = data[label]
    # the hand computation, straight from the JSON rows
    split = {(w["unit"], w["phase"], rk): s for w in arm["waits"]["units"] for rk, s in w["ranks"].items()}
    total = 0.0
    ranks = [r for r in arm["ranks"] if r.get("units")]
    for r in ranks:
        for phase in ("forward", "backward"):
            rows = [u for u in r["units"] if u["phase"] == phase]
            for prev, row in zip(rows, rows[1:], strict=False):
                colls = row["collectives"]
                if "all_gather" not in colls:
                    continue
                share = colls["all_gather"]["bytes"] / sum(c["bytes"] for c in colls.values())
                exposed = split[(row["unit"], phase, str(r["rank"]))]["exposed_transfer_us"] * share
                total += min(exposed, max(prev["compute_us"] - prev["overlapped_us"], 0.0)) / len(ranks)
    est = d["prefetch_estimates"]["base"]
    assert est["basis"] == "units"
    assert est["exposed_comm_delta_us"] == pytest.approx(-total, abs=1e-6)
    assert total > 0  # CPU/gloo: nothing overlaps, so every unit after the first has compute to hide under

"""Calibration entries on hand-built manifest/summary/diff tables: which estimate each counterfactual arm
checks, the measured change from the run's own numbers, and the error arithmetic done by hand."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare import calibration as cal


def _arm(label: str, backend: str = "torch", **options) -> dict:
    return {
        "label": label,
        "backend": backend,
        "prefetch": 0,
        "unit": "layer",
        "comm_fusion": False,
        **options,
    }


def _diff(base: str, test: str, base_mean: dict, test_mean: dict, collectives=(), findings=()) -> dict:
    return {
        "base": base,
        "test": test,
        "side_by_side": {"mean": {"base": base_mean, "test": test_mean}},
        "collectives": list(collectives),
        "findings": list(findings),
    }


FRAG = {  # torch-unitmodule (base) issues 121/62 calls, torch (test) 9/5
    "collectives": [
        {"type": "all_gather", "base_count": 121, "test_count": 9},
        {"type": "reduce_scatter", "base_count": 62, "test_count": 5},
    ],
    "findings": [
        {
            "id": "fragmentation",
            "estimate": {
                "label": "estimate",
                "step_time_delta_us": -60_000.0,
                "comm_delta_us": -70_000.0,
                "per_type": {
                    "all_gather": {"count": 121, "fit_source": "aggregate"},
                    "reduce_scatter": {"count": 62, "fit_source": "base"},
                },
                "one_bucket_per_layer": {"step_time_delta_us": -55_000.0},
            },
        },
        {"id": "straggler", "estimate": {"label": "estimate", "step_time_delta_us": -5_000.0}},
    ],
}


def test_regrouping_is_checked_against_the_unit_layer_arm_with_hand_computed_errors():
    arms = {"torch-unitmodule": _arm("torch-unitmodule", unit="module"), "torch": _arm("torch")}
    diff = _diff(
        "torch-unitmodule",
        "torch",
        {"step_time_us": 400_000.0, "comm_us": 150_000.0},
        {"step_time_us": 320_000.0, "comm_us": 60_000.0},
        **FRAG,
    )
    timed = {"torch-unitmodule": 500.0, "torch": 400.0}
    entries = cal.calibrate_diff(diff, arms, timed)
    assert [e["estimate"] for e in entries] == ["regrouping", "one_bucket_per_layer"]  # no straggler entry
    e = entries[0]
    assert (e["subject"], e["counterfactual"], e["match"]) == ("torch-unitmodule", "torch", "exact")
    assert e["predicted_ms"] == pytest.approx(-60.0)
    assert e["measured_ms"] == pytest.approx(400.0 - 500.0)  # timed: −100 ms
    assert e["error_pct"] == pytest.approx((-60 + 100) / 100 * 100)  # +40 %: promised less than measured
    assert e["measured_profiled_ms"] == pytest.approx(-80.0)
    assert e["error_profiled_pct"] == pytest.approx((-60 + 80) / 80 * 100)  # +25 %
    assert e["predicted_timed_ms"] == pytest.approx(-60.0 * 500 / 400)  # scaled by the subject's distortion
    assert e["error_timed_pct"] == pytest.approx((-75 + 100) / 100 * 100)
    assert entries[1]["predicted_ms"] == pytest.approx(-55.0)
    # the modelled part on its own: comm 150 → 60 ms measured (−90), predicted −70: +22 %
    assert e["component"] == "comm_us" and e["predicted_component_ms"] == pytest.approx(-70.0)
    assert e["measured_component_ms"] == pytest.approx(-90.0)
    assert e["error_component_pct"] == pytest.approx((-70 + 90) / 90 * 100)
    # all_gather was priced by the aggregate fit, which saw torch's own calls: not independent
    assert e["fit_sources"] == ["aggregate", "base"] and e["independent"] is False


def test_fragmentation_of_the_test_side_makes_the_base_the_counterfactual():
    arms = {"torch": _arm("torch"), "torch-unitmodule": _arm("torch-unitmodule", unit="module")}
    swapped = {
        "collectives": [
            {"type": k["type"], "base_count": k["test_count"], "test_count": k["base_count"]}
            for k in FRAG["collectives"]
        ],
        "findings": FRAG["findings"][:1],
    }
    diff = _diff("torch", "torch-unitmodule", {"step_time_us": 3e5}, {"step_time_us": 4e5}, **swapped)
    (e, _) = cal.calibrate_diff(diff, arms, {"torch": 300.0, "torch-unitmodule": 450.0})
    assert (e["subject"], e["counterfactual"]) == ("torch-unitmodule", "torch")
    assert e["measured_ms"] == pytest.approx(-150.0) and e["error_pct"] == pytest.approx(
        (-60 + 150) / 150 * 100
    )


def test_hyper_vs_torch_regrouping_is_approximate_and_a_confounded_pair_gives_no_entry():
    diff = _diff("hyper", "torch", {"step_time_us": 4e5}, {"step_time_us": 3e5}, **FRAG)
    timed = {"hyper": 500.0, "torch": 400.0}
    (e, _) = cal.calibrate_diff(diff, {"hyper": _arm("hyper", "hyper"), "torch": _arm("torch")}, timed)
    assert e["match"].startswith("approximate")
    # also differs in prefetch: the measured change would mix two effects, so nothing is calibrated
    arms = {"hyper": _arm("hyper", "hyper"), "torch": _arm("torch", prefetch=1)}
    assert cal.calibrate_diff(diff, arms, timed) == []


def test_prefetch_estimate_from_the_low_overlap_finding_or_computed_when_none_fired():
    arms = {"torch": _arm("torch"), "torch-prefetch1": _arm("torch-prefetch1", prefetch=1)}
    base = {
        "step_time_us": 300e3,
        "compute_us": 200e3,
        "comm_us": 150e3,
        "exposed_comm_us": 100e3,
        "overlap_ratio": 1 / 3,
    }
    test = {"step_time_us": 260e3, "overlap_ratio": 0.6}
    timed = {"torch": 320.0, "torch-prefetch1": 290.0}
    low = {"id": "low_overlap", "estimate": {"step_time_delta_us": -40_000.0}}
    (e,) = cal.calibrate_diff(_diff("torch", "torch-prefetch1", base, test, findings=[low]), arms, timed)
    assert (e["estimate"], e["subject"], e["counterfactual"]) == (
        "prefetch_overlap",
        "torch",
        "torch-prefetch1",
    )
    assert e["predicted_ms"] == pytest.approx(-40.0) and e["measured_ms"] == pytest.approx(-30.0)
    assert e["error_pct"] == pytest.approx((-40 + 30) / 30 * 100)
    (e,) = cal.calibrate_diff(_diff("torch", "torch-prefetch1", base, test), arms, timed)
    # by hand: exposed comm at the other arm's overlap = 150 · (1 − 0.6) = 60 ms, i.e. −40 ms
    assert e["predicted_ms"] == pytest.approx(-40.0) and "computed" in e["note"]


def test_a_prefetch_pair_without_communication_on_either_side_has_nothing_to_calibrate():
    """One GPU (seen on an H200): FSDP2 issues no collectives, the estimate is 0 by construction, and an
    entry would report the step's other changes as its error (+100%)."""
    arms = {"torch": _arm("torch"), "torch-prefetch1": _arm("torch-prefetch1", prefetch=1)}
    one_rank = {"step_time_us": 183_800.0, "compute_us": 106_200.0, "comm_us": 0.0, "exposed_comm_us": 0.0}
    faster = {**one_rank, "step_time_us": 171_400.0}
    diff = _diff("torch", "torch-prefetch1", one_rank, faster)
    assert cal.calibrate_diff(diff, arms, {"torch": 183.9, "torch-prefetch1": 168.2}) == []


def test_no_counterfactual_arm_means_no_entries():
    arms = {"torch": _arm("torch"), "torch-raf0": _arm("torch-raf0", reshard_after_forward=False)}
    diff = _diff(
        "torch",
        "torch-raf0",
        {"step_time_us": 3e5, "overlap_ratio": 0.2},
        {"step_time_us": 3e5, "overlap_ratio": 0.3},
    )
    assert cal.calibrate_diff(diff, arms, {"torch": 1.0, "torch-raf0": 1.0}) == []


def test_error_is_none_without_a_measured_change_and_signs_follow_the_definition():
    assert cal.error_pct(-50.0, -100.0) == pytest.approx(50.0)
    assert cal.error_pct(-150.0, -100.0) == pytest.approx(-50.0)
    assert cal.error_pct(10.0, 0.0) is None and cal.error_pct(None, 1.0) is None


def test_distortion_ratio_per_arm_and_warning_when_arms_differ():
    out = cal.distortion({"torch": 353.0, "hyper": 951.0}, {"torch": 323.0, "hyper": 1584.0})
    assert out["ratio"]["torch"] == pytest.approx(323 / 353) and out["ratio"]["hyper"] == pytest.approx(
        1584 / 951
    )
    assert len(out["warnings"]) == 1 and "hyper" in out["warnings"][0]
    assert cal.distortion({"a": 100.0, "b": 100.0}, {"a": 105.0, "b": 110.0})["warnings"] == []


def test_calibrate_run_reads_manifest_summary_and_diffs():
    manifest = {"arms": [_arm("torch-unitmodule", unit="module"), _arm("torch")]}
    summary = {"arms": {"torch-unitmodule": {"median_ms": 500.0}, "torch": {"median_ms": 400.0}}}
    diff = _diff("torch-unitmodule", "torch", {"step_time_us": 4e5}, {"step_time_us": 3.2e5}, **FRAG)
    out = cal.calibrate_run(manifest, summary, [diff])
    assert [e["estimate"] for e in out["entries"]] == ["regrouping", "one_bucket_per_layer"]
    assert out["distortion"]["ratio"] == {"torch-unitmodule": pytest.approx(0.8), "torch": pytest.approx(0.8)}

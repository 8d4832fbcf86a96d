"""Arms that differ in one prefetch direction only (``fwd_prefetch``/``bwd_prefetch``) are paired as a
prefetch change by the findings and the calibration, and described per direction. Hand-written manifest
arm dicts and analyses; the expected numbers are computed by hand from them."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare import calibration as cal
from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.config.arms import Arm, manifest_prefetch
from helpers import low_overlap


def _arm(label: str, backend: str = "torch", **options) -> dict:
    """A manifest arm entry as the launcher writes it (``Arm.options()``)."""
    return Arm(backend=backend, label=label, **options).options()


def test_manifest_prefetch_resolves_each_direction_as_run():
    assert manifest_prefetch(_arm("t", bwd_prefetch="none")) == ("default", "none")
    assert manifest_prefetch(_arm("t", prefetch=2, fwd_prefetch="1")) == (1, 2)
    assert manifest_prefetch(_arm("f", "fsdp1")) == ("none", "none")  # prefetch=0 on fsdp1: turned off
    assert manifest_prefetch({"prefetch": 1}) == (1, 1)  # hand-written, no backend
    assert manifest_prefetch({"backend": "fsdp1", "prefetch": 3}) is None  # not a valid arm: unknown
    assert manifest_prefetch({"backend": "torch"}) is None  # no prefetch option recorded


def test_backward_only_change_is_paired_and_worded_per_direction():
    # exposed comm = comm · (1 − overlap): 300 ms · 0.7 = 210 ms (base) → 300 ms · 0.4 = 120 ms (test)
    d = diff_analyses(
        low_overlap(0.3),
        low_overlap(0.6),
        base_label="torch-bwdnone",
        test_label="torch-bwd1",
        base_arm=_arm("torch-bwdnone", bwd_prefetch="none"),
        test_arm=_arm("torch-bwd1", bwd_prefetch="1"),
    )
    f = d.finding("prefetch_change")
    assert f is not None and f.severity == "info"
    assert f.evidence.startswith(
        "backward prefetch none → 1 (torch-bwdnone → torch-bwd1): overlap 30.0% → 60.0%"
    )
    assert "forward" not in f.evidence + f.title  # the forward direction did not change
    assert f.title == "Backward prefetch=1 exposes 90.0 ms less communication than backward prefetch=none"
    assert f.action == "keep backward prefetch=1 (arm torch-bwd1)"
    assert f.estimate.exposed_comm_delta_us == pytest.approx(-90_000.0)
    # the same settings on both sides (written as prefetch=1 vs fwd_prefetch=1:bwd_prefetch=1): no finding
    same = diff_analyses(
        low_overlap(0.3),
        low_overlap(0.6),
        base_arm=_arm("a", prefetch=1),
        test_arm=_arm("b", fwd_prefetch="1", bwd_prefetch="1"),
    )
    assert same.finding("prefetch_change") is None


def test_forward_only_change_that_did_not_help_is_medium():
    d = diff_analyses(
        low_overlap(0.6),
        low_overlap(0.3),
        base_label="torch",
        test_label="torch-fwd2",
        base_arm=_arm("torch"),
        test_arm=_arm("torch-fwd2", fwd_prefetch="2"),
    )
    f = d.finding("prefetch_change")
    assert f.severity == "medium" and f.evidence.startswith(
        "forward prefetch default → 2 (torch → torch-fwd2)"
    )
    assert (
        f.title
        == "Forward prefetch=2 did not reduce exposed communication (+90.0 ms vs forward prefetch=default)"
    )


def test_implicit_backward_default_vs_explicit_one_is_described_but_not_ordered():
    """FSDP2's default is an implicit one-unit backward prefetch: explicit 1 is no deeper, and a change of
    forward one way and backward the other is no deeper either; both are still described."""
    d = diff_analyses(
        low_overlap(0.3),
        low_overlap(0.6),
        base_label="torch",
        test_label="torch-bwd1",
        base_arm=_arm("torch"),
        test_arm=_arm("torch-bwd1", bwd_prefetch="1"),
    )
    f = d.finding("prefetch_change")
    assert f.severity == "info" and f.title == "Backward prefetch default → 1: exposed communication −90.0 ms"
    assert "arm torch-bwd1" in f.action
    crossed = diff_analyses(
        low_overlap(0.3),
        low_overlap(0.6),
        base_arm=_arm("a", fwd_prefetch="2", bwd_prefetch="none"),
        test_arm=_arm("b", fwd_prefetch="none", bwd_prefetch="2"),
    )
    f = crossed.finding("prefetch_change")
    assert f.title.startswith("Forward prefetch 2 → none, backward prefetch none → 2: ")


def _diff(base: str, test: str, base_mean: dict, test_mean: dict) -> dict:
    return {
        "base": base,
        "test": test,
        "side_by_side": {"mean": {"base": base_mean, "test": test_mean}},
        "collectives": [],
        "findings": [],
    }


BASE_MEAN = {
    "step_time_us": 300e3,
    "compute_us": 200e3,
    "comm_us": 150e3,
    "exposed_comm_us": 100e3,
    "overlap_ratio": 1 / 3,
}


def test_calibration_pairs_a_one_direction_change_with_the_shallower_arm_as_subject():
    arms = {
        "torch-bwd1": _arm("torch-bwd1", bwd_prefetch="1"),
        "torch-bwdnone": _arm("torch-bwdnone", bwd_prefetch="none"),
    }
    timed = {"torch-bwd1": 290.0, "torch-bwdnone": 320.0}
    test_mean = {"step_time_us": 260e3, "overlap_ratio": 0.6}
    (e,) = cal.calibrate_diff(_diff("torch-bwd1", "torch-bwdnone", test_mean, BASE_MEAN), arms, timed)
    assert (e["estimate"], e["subject"], e["counterfactual"]) == (
        "prefetch_overlap",
        "torch-bwdnone",
        "torch-bwd1",
    )
    # by hand: exposed comm at the other arm's overlap = 150 · (1 − 0.6) = 60 ms, i.e. −40 ms; measured 290 − 320
    assert e["predicted_ms"] == pytest.approx(-40.0) and e["measured_ms"] == pytest.approx(-30.0)
    assert cal.calibration_pairs(arms) == [("torch-bwd1", "torch-bwdnone")]


def test_calibration_skips_prefetch_pairs_without_a_deeper_arm_or_with_another_difference():
    arms = {
        "torch": _arm("torch"),
        "torch-bwd1": _arm("torch-bwd1", bwd_prefetch="1"),  # implicit 1 vs explicit 1: not deeper
        "crossed": _arm(
            "crossed", fwd_prefetch="1", bwd_prefetch="none"
        ),  # deeper forward, shallower backward
        "torch-fwd1-ac": _arm("torch-fwd1-ac", fwd_prefetch="1", ac="full"),  # prefetch and ac differ
    }
    timed = dict.fromkeys(arms, 300.0)
    for base, test in (("torch", "torch-bwd1"), ("torch", "crossed"), ("torch", "torch-fwd1-ac")):
        assert cal.calibrate_diff(_diff(base, test, BASE_MEAN, BASE_MEAN), arms, timed) == [], test
    assert cal.calibration_pairs(arms) == []

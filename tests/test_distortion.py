"""Profiler distortion per arm (profiled/timed step) in the diff: hand-built analyses and timed medians, the
warning when the arms are distorted differently, and step-time estimates given on the timed clock too."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare.diff import add_calibration, diff_analyses
from fsdpbench.analysis.estimate.whatif import Estimate
from fsdpbench.analysis.findings import Finding
from fsdpbench.report.diff_md import diff_markdown
from fsdpbench.report.estimate import estimate_lines, subject_timed_scale
from helpers import analysis

ARMS = {"a": {"label": "a", "backend": "torch"}, "b": {"label": "b", "backend": "torch", "ac": "full"}}


def _diff(timed_a: float, timed_b: float):
    # every hand-built rank has a 1,000,000 µs = 1000 ms profiled step
    return add_calibration(
        diff_analyses(analysis(), analysis(), base_label="a", test_label="b"),
        ARMS,
        {
            "a": timed_a,
            "b": timed_b,
        },
    )


def test_distortion_ratio_is_profiled_over_timed_and_warns_when_the_arms_differ():
    d = _diff(1000.0, 500.0)
    assert d.distortion["ratio"] == pytest.approx({"a": 1000 / 1000, "b": 1000 / 500})
    assert any("the profiler distorts the arms differently" in w for w in d.warnings)
    assert d.calibration == []  # the arms differ in ac only: nothing predicts that
    md = diff_markdown(d)
    assert "Profiled/timed step (profiler distortion): a 1.00, b 2.00" in md
    assert "> **Warning:** the profiler distorts the arms differently" in md


def test_no_warning_when_the_arms_are_distorted_alike_and_none_without_timed_medians():
    d = _diff(1000.0, 960.0)  # 1.00 vs 1.04: within 0.10
    assert not any("distorts" in w for w in d.warnings)
    d = add_calibration(diff_analyses(analysis(), analysis(), base_label="a", test_label="b"), ARMS, {})
    assert d.distortion is None and "profiler distortion" not in diff_markdown(d)


def test_the_estimate_of_a_finding_is_rescaled_by_its_subject_arms_timed_over_profiled():
    ratios = {"torch": 1.25, "torch-unitmodule": 0.5, "missing": None}

    def finding(title: str, subject: str | None = None) -> Finding:
        return Finding("x", "medium", title, "", "", "", subject=subject)

    # the finding names its subject: the title is not read
    assert subject_timed_scale(finding("anything", "torch-unitmodule"), ratios) == pytest.approx(2.0)
    assert subject_timed_scale(finding("torch-unitmodule's comm", "torch"), ratios) == pytest.approx(0.8)
    # diff.json written before findings named their subject: the first (longest) label in the title
    assert subject_timed_scale(
        finding("torch-unitmodule's communication is 13× more fragmented than torch's"), ratios
    ) == (pytest.approx(2.0))
    assert subject_timed_scale(finding("rank 0 is a straggler in torch"), ratios) == pytest.approx(0.8)
    assert subject_timed_scale(finding("missing leaves comm exposed"), ratios) is None
    assert subject_timed_scale(finding("no arm named"), ratios) is None
    [line] = estimate_lines(
        Estimate(step_time_delta_us=-5_000.0, exposed_comm_delta_us=-4_000.0), timed_scale=2.0
    )
    assert line.endswith(
        "step time −5.0 ms (on the profiled step; ≈ −10.0 ms on the timed clock, × timed/profiled 2.00); "
        "exposed comm −4.0 ms"
    )
    [line] = estimate_lines(Estimate(label="measured", exposed_comm_delta_us=-5_000.0), timed_scale=2.0)
    assert "timed clock" not in line  # a measured change is not rescaled

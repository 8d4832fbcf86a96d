"""Calibration of the replay's delay what-ifs (issue 39 point 5) on hand-built manifest/summary/replay
dicts: which arms pair, the edits, and the error arithmetic done by hand."""

from __future__ import annotations

import pytest

from fsdpbench.analysis.compare import calibration as cal


def _arm(label: str, *delay: str, **options) -> dict:
    arm = {"label": label, "backend": "torch", "prefetch": 0, "unit": "layer", **options}
    if delay:
        arm["delay"] = list(delay)
    return arm


ARMS = {
    "torch": _arm("torch"),
    "d50": _arm("d50", "2/layers.1/backward/50"),
    "d50d20": _arm("d50d20", "2/layers.1/backward/50", "1/layers.1/backward/20"),
    "module": _arm("module", unit="module"),
    "module-d50": _arm("module-d50", "2/layers.1/backward/50", unit="module"),
}


def test_arms_pair_when_they_differ_in_delay_alone():
    assert cal.delay_counterfactual(ARMS["torch"], ARMS["d50"])
    assert cal.delay_counterfactual(ARMS["d50"], ARMS["d50d20"])
    assert not cal.delay_counterfactual(ARMS["torch"], ARMS["module-d50"])  # unit differs too
    assert not cal.delay_counterfactual(ARMS["torch"], ARMS["module"])
    assert not cal.delay_counterfactual(ARMS["torch"], _arm("torch-2"))  # no delay on either
    arms = {k: ARMS[k] for k in ("torch", "d50", "module")}
    assert cal.delay_pairs(arms) == [("torch", "d50"), ("d50", "torch")]


def test_the_edits_remove_the_subjects_delays_and_add_the_counterfactuals():
    assert cal.delay_edits(ARMS["d50"], ARMS["torch"]) == ["delay:2:layers.1:backward:-50"]
    assert cal.delay_edits(ARMS["torch"], ARMS["d50d20"]) == [
        "delay:1:layers.1:backward:20",
        "delay:2:layers.1:backward:50",
    ]
    assert cal.delay_edits(ARMS["d50d20"], ARMS["d50"]) == ["delay:1:layers.1:backward:-20"]
    changed = {**ARMS["d50"], "delay": ["2/layers.1/backward/30"]}
    assert cal.delay_edits(ARMS["d50"], changed) == ["delay:2:layers.1:backward:-20"]


def _replay(step_us: list[float], what_if: list[dict]) -> dict:
    return {
        "ranks": [{"rank": r, "measured_us": s, "replayed_us": s} for r, s in enumerate(step_us)],
        "what_if": what_if,
    }


def test_remove_the_delay_is_the_edited_replay_minus_the_unedited_against_the_timed_change():
    replay = _replay(
        [300_000.0, 302_000.0, 301_000.0, 299_000.0],  # replayed step: the longest rank, 302 ms
        [{"edit": "delay:2:layers.1:backward:-50", "predicted_step_us": 254_000.0, "source": "replay"}],
    )
    timed = {"torch": 240.0, "d50": 290.0}
    e = cal.delay_entry("d50", "torch", ARMS, timed, replay, profiled_ms={"torch": 255.0, "d50": 302.0})
    assert (e["estimate"], e["edits"], e["source"]) == (
        "remove_delay",
        ["delay:2:layers.1:backward:-50"],
        "replay",
    )
    assert e["replayed_step_ms"] == pytest.approx(302.0)
    assert e["predicted_ms"] == pytest.approx(254.0 - 302.0)  # −48 ms
    assert e["measured_ms"] == pytest.approx(240.0 - 290.0)  # −50 ms
    assert e["error_pct"] == pytest.approx((-48 + 50) / 50 * 100)  # +4 %
    assert e["measured_profiled_ms"] == pytest.approx(255.0 - 302.0)
    assert e["delay_ms"] == 50.0
    assert e["tolerance_ms"] == pytest.approx(max(5.0, 0.02 * 240.0))  # 10 % of the delay wins: 5 ms
    assert e["within"] is True  # |−48 − (−50)| = 2 ≤ 5


def test_masking_adds_both_delays_in_one_what_if_and_fails_a_per_rank_sum():
    edits = "delay:1:layers.1:backward:20+delay:2:layers.1:backward:50"
    replay = _replay([250_000.0, 250_000.0], [{"edit": edits, "predicted_step_us": 320_000.0}])  # +70 ms
    e = cal.delay_entry("torch", "d50d20", ARMS, {"torch": 250.0, "d50d20": 301.0}, replay)
    assert e["estimate"] == "add_delay"
    assert e["predicted_ms"] == pytest.approx(70.0)
    assert e["measured_ms"] == pytest.approx(51.0)
    assert e["tolerance_ms"] == pytest.approx(max(0.1 * 50, 0.02 * 301.0))  # 6.02 ms
    assert e["within"] is False


def test_without_the_what_if_the_entry_says_so_and_predicts_nothing():
    replay = _replay([250_000.0], [{"edit": "straggler:remove", "predicted_step_us": 1.0}])
    e = cal.delay_entry("torch", "d50", ARMS, {"torch": 250.0, "d50": 300.0}, replay)
    assert e["predicted_ms"] is None and e["within"] is None
    assert "no what-if 'delay:2:layers.1:backward:50'" in e["note"]
    e = cal.delay_entry("torch", "d50", ARMS, {"torch": 250.0, "d50": 300.0}, None)
    assert e["note"] == "the subject's analysis has no replay"
    assert cal.delay_entry("torch", "module", ARMS, {}, replay) is None  # not a delay pair


def test_a_runs_delay_calibration_covers_both_directions_of_each_pair():
    manifest = {"arms": [ARMS["torch"], ARMS["d50"]]}
    summary = {"arms": {"torch": {"median_ms": 240.0}, "d50": {"median_ms": 290.0}}}
    replays = {
        "torch": _replay(
            [240_000.0], [{"edit": "delay:2:layers.1:backward:50", "predicted_step_us": 291_000.0}]
        ),
        "d50": _replay(
            [290_000.0], [{"edit": "delay:2:layers.1:backward:-50", "predicted_step_us": 238_000.0}]
        ),
    }
    entries = cal.calibrate_delays(manifest, summary, replays)
    assert [(e["subject"], e["estimate"], e["predicted_ms"]) for e in entries] == [
        ("torch", "add_delay", pytest.approx(51.0)),
        ("d50", "remove_delay", pytest.approx(-52.0)),
    ]
    assert all(e["within"] for e in entries)


def test_the_unedited_step_is_the_figures_when_the_replay_has_one():
    replay = _replay([300_000.0, 302_000.0], [])
    assert cal.replay_step_us(replay) == 302_000.0  # the longest rank
    replay["figure"] = {"step_us": 303_500.0}  # first start to last end on the aligned clock
    assert cal.replay_step_us(replay) == 303_500.0
    assert cal.replay_step_us(None) is None

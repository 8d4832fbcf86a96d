"""Where a launch's time goes: ``run_folder.launch_parts`` / ``launch_time`` on hand-made stamps, and the
closing line of ``ab`` (the end-to-end check on real launches is in test_runner_profile.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fsdpbench.report.console import print_summary
from fsdpbench.results import run_folder

STAMPS = {
    "entered": 103.0,
    "process_group": 103.5,
    "model": 109.0,
    "warmup": 110.0,
    "timed": 114.0,
    "profile": 116.0,
}


def test_parts_are_the_gaps_between_the_launchers_and_rank_0s_stamps():
    parts = run_folder.launch_parts(STAMPS, spawned=100.0, exited=117.0, ended=117.25)
    assert parts == {
        "start": 3.0,
        "process_group": 0.5,
        "model": 5.5,
        "warmup": 1.0,
        "timed": 4.0,
        "profile": 2.0,
        "teardown": 1.0,
        "after": 0.25,
    }


@pytest.mark.parametrize("stamps", [None, {}, {k: v for k, v in STAMPS.items() if k != "timed"}])
def test_no_parts_without_every_stamp(stamps):
    assert run_folder.launch_parts(stamps, 100.0, 117.0, 117.25) is None


def test_the_runs_shares_count_the_last_attempt_of_each_successful_launch():
    one = {
        "start": 3.0,
        "process_group": 0.5,
        "model": 5.5,
        "warmup": 1.0,
        "timed": 4.0,
        "profile": 2.0,
        "teardown": 1.0,
        "after": 0.0,
    }  # 17 s
    two = {**one, "profile": 0.0}  # 15 s
    launches = [
        {"arm": "a", "round": 0, "rc": 1, "wall_s": 5.0, "parts_s": None},  # failed first attempt
        {"arm": "a", "round": 0, "rc": 0, "wall_s": 17.0, "parts_s": one},
        {"arm": "b", "round": 0, "rc": 0, "wall_s": 15.0, "parts_s": two},
    ]
    got = run_folder.launch_time(launches)
    # timed 4 + 4 = 8 of 32 s = 25 %; initialisation (3 + 0.5 + 5.5) · 2 = 18 of 32 s = 56.25 %
    assert (got["launches"], got["wall_s"], got["parts_s"]["timed"]) == (2, 32.0, 8.0)
    assert got["timed_pct"] == pytest.approx(25.0) and got["init_pct"] == pytest.approx(56.25)
    assert [x["arm"] for x in got["per_launch"]] == ["a", "b"]
    assert run_folder.launch_time(launches[:1]) is None
    assert run_folder.launch_time_line(got) == (
        "timed steps were 25 % of the run's time; initialisation 56 % (32.0 s in 2 launches)"
    )


def test_ab_ends_with_the_time_line_and_why_auto_stopped():
    summary = {
        "arms": {},
        "comparisons": [],
        "parity": {"valid": True, "steps_compared": 0},
        "missing": [],
        "verdict": None,
        "launch_time": {"launches": 2, "wall_s": 32.0, "timed_pct": 25.0, "init_pct": 56.25},
        "rounds_auto": {
            "rounds": 3,
            "stopped": True,
            "reason": "settled",
            "why": "stopped after 3 rounds: x",
        },
    }
    out = io.StringIO()
    print_summary(Console(file=out, width=200), summary)
    lines = out.getvalue().splitlines()
    assert "--rounds auto stopped after 3 rounds: x" in lines
    assert (
        lines[-1]
        == "time: timed steps were 25 % of the run's time; initialisation 56 % (32.0 s in 2 launches)"
    )

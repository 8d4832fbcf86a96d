"""The step replay where people see it: the report's critical-path section and figure, and the findings' what-ifs
taken from the replay (labelled), with the closed forms as the labelled fallback.

Every number here comes from a hand-built ``replay`` block (docs/DATA.md) whose values are worked out below, never
from fsdpbench's own replay.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.estimate.whatif import SOURCE_CLOSED_FORM, SOURCE_REPLAY
from fsdpbench.report import load_run, write_report
from fsdpbench.report.build import build_report
from fsdpbench.report.estimate import estimate_lines
from fsdpbench.report.replay import arm_blocks
from fsdpbench.report.replay_figure import REPLAY_KIND_COLORS, replay_lanes
from helpers import (
    CHROMIUM,
    analysis,
    fragmented,
    headless_chromium,
    inspect_html,
    make_run,
    rank,
    raw_x_events,
)

# --------------------------------------------------------------------------------------------
# The hand-built replay of a 2-rank step (µs), one lane per rank (gloo: the main thread runs everything)
#
#   rank 0: compute layers.0 forward [0, 40 000]   waits [40 000, 55 000]   transfer [55 000, 65 000]
#           compute layers.0 backward [65 000, 100 000]                                   → ends at 100 000
#   rank 1: compute layers.0 forward [0, 55 000]   (arrives last)           transfer [55 000, 65 000]
#           compute layers.0 backward [65 000, 95 000]                                    → ends at  95 000
#   the all_gather (group 0, seq 0): arrivals rank 0 at 40 000, rank 1 at 55 000; last = rank 1; transfer
#   55 000–65 000 for both.
#
# The step ends at rank 0's 100 000. Back from there: rank 0's backward compute (35 000), the transfer (10 000),
# whose start is bound by the last arrival, rank 1, so the path crosses to rank 1's forward compute (55 000):
# 35 000 + 10 000 + 55 000 = 100 000 = the step. By phase: forward 65 000 (compute 55 000 + transfer 10 000),
# backward 35 000. Off the path: rank 1's backward compute could grow 100 000 − 95 000 = 5 000; rank 0's
# forward compute 55 000 − 40 000 = 15 000. Near-critical (slack < 2 % of 100 000 = 2 000): none.
# Measured: rank 0 101 000, rank 1 95 500 → errors 1 000 / 101 000 = 0.990 %, 500 / 95 500 = 0.524 %:
# median 0.757 %, max 0.990 %.
# What-ifs: regrouping the all_gathers (124 → 12 calls) shortens the transfer 10 000 → 1 000 and rank 1's
# forward compute by 3 000 of launches: 100 000 − 9 000 − 3 000 = 88 000. Removing the straggler gives rank 1
# rank 0's forward compute (40 000): max(40 000, 40 000) + 10 000 + 35 000 = 85 000.
# --------------------------------------------------------------------------------------------

STEP_US = 100_000.0
KINDS = ["compute", "transfer", "wait", "host_gap", "launch", "sync"]


def place(r: int, phase: str, kind: str, **value: float) -> dict:
    return {"rank": r, "unit": "layers.0", "phase": phase, "kind": kind, **value}


def hand_replay(*, near_critical: list[dict] | None = None, what_if: list[dict] | None = None) -> dict:
    """The replay block of the step above (``near_critical`` and ``what_if`` replaceable)."""
    return {
        "error_pct": {"median": (1_000 / 101_000 + 500 / 95_500) / 2 * 100, "max": 1_000 / 101_000 * 100},
        "ranks": [
            {"rank": 0, "measured_us": 101_000.0, "replayed_us": 100_000.0},
            {"rank": 1, "measured_us": 95_500.0, "replayed_us": 95_000.0},
        ],
        "unexplained_slack_us": 400.0,
        "notes": ["collectives matched by (group, seq)"],
        "critical": [
            place(1, "forward", "compute", us=55_000.0),
            place(0, "backward", "compute", us=35_000.0),
            place(1, "forward", "transfer", us=10_000.0),
        ],
        "near_critical": near_critical or [],
        "slack": [
            place(1, "forward", "compute", slack_us=0.0),
            place(0, "backward", "compute", slack_us=0.0),
            place(1, "forward", "transfer", slack_us=0.0),
            place(1, "backward", "compute", slack_us=5_000.0),
            place(0, "forward", "compute", slack_us=15_000.0),
        ],
        "by_phase": [
            {"phase": "forward", "us": 65_000.0, "kinds": {"compute": 55_000.0, "transfer": 10_000.0}},
            {"phase": "backward", "us": 35_000.0, "kinds": {"compute": 35_000.0}},
        ],
        "what_if": what_if
        if what_if is not None
        else [
            {
                "edit": "regroup:all_gather:12",
                "predicted_step_us": 88_000.0,
                "phases": {"forward": 53_000.0, "backward": 35_000.0},
                "changed": [
                    place(1, "forward", "compute", delta_us=-3_000.0),
                    place(1, "forward", "transfer", delta_us=-9_000.0),
                ],
                "source": "replay",
                "note": "",
            },
            {
                "edit": "straggler:remove",
                "predicted_step_us": 85_000.0,
                "phases": {"forward": 50_000.0, "backward": 35_000.0},
                "changed": [place(1, "forward", "compute", delta_us=-15_000.0)],
                "source": "replay",
                "note": "",
            },
        ],
        "figure": {
            "step_us": STEP_US,
            "kinds": KINDS,
            "lanes": [
                {
                    "rank": 0,
                    "lane": "thread 1 (main)",
                    "segments": [
                        [0, 40_000, 0, 0],
                        [40_000, 55_000, 2, 0],
                        [55_000, 65_000, 1, 0],
                        [65_000, 100_000, 0, 1],
                    ],  # fmt: skip
                },
                {
                    "rank": 1,
                    "lane": "thread 1 (main)",
                    "segments": [[0, 55_000, 0, 1], [55_000, 65_000, 1, 1], [65_000, 95_000, 0, 0]],
                },
            ],
            "path": [
                [1, 1, 0, 55_000],
                [1, 1, 55_000, 65_000],
                [0, 0, 65_000, 100_000],
            ],  # lane: index into lanes
            "rendezvous": [
                {
                    "group": "0",
                    "seq": 0,
                    "type": "all_gather",
                    "arrivals": [[0, 40_000], [1, 55_000]],
                    "last_rank": 1,
                    "transfer_start_us": 55_000,
                    "transfer_end_us": 65_000,
                }
            ],
        },
    }


NO_REPLAY_NOTE = "the traces have no launch correlation ids"


def with_replay(data: dict, replay: dict | None) -> dict:
    data = copy.deepcopy(data)
    data["replay"] = replay
    if replay is None:
        data["replay_note"] = NO_REPLAY_NOTE
    return data


# --------------------------------------------------------------------------------------------
# Findings: the replay's what-ifs, labelled; closed forms only as the labelled fallback
# --------------------------------------------------------------------------------------------


def test_fragmentation_estimate_is_the_replayed_regrouping_and_says_so():
    test = with_replay(fragmented(124 / 12), hand_replay())
    d = diff_analyses(analysis(), test, base_label="torch", test_label="hyper")
    est = d.finding("fragmentation").estimate
    assert est.source == SOURCE_REPLAY and est.edit == "regroup:all_gather:12"
    assert est.step_time_delta_us == pytest.approx(88_000.0 - 100_000.0)  # predicted − replayed step
    assert [c["delta_us"] for c in est.changed] == [-9_000.0, -3_000.0]  # largest change first
    lines = estimate_lines(est, details=True)
    assert lines[0] == (
        "Estimate (replay) — hyper's collectives issued at torch's granularity: step time −12.0 ms "
        "[edit `regroup:all_gather:12` replayed]"
    )
    assert (
        "changed on the critical path: rank 1 layers.0 forward transfer −9.0 ms, "
        "rank 1 layers.0 forward compute −3.0 ms"
    ) in lines


def test_a_replayed_regrouping_with_a_closed_form_per_layer_scenario_labels_each():
    """Given the layer count, the regrouping also prices one bucket per layer; the replay has no
    ``regroup:all_gather:unit`` edit, so that scenario stays a closed form and says so beside the replay's."""
    test = with_replay(fragmented(124 / 12), hand_replay())
    d = diff_analyses(analysis(), test, test_label="hyper", context={"num_layers": 4})
    est = d.finding("fragmentation").estimate
    assert est.source == SOURCE_REPLAY
    layer = est.one_bucket_per_layer
    assert layer.source == SOURCE_CLOSED_FORM and "regroup:all_gather:unit" in layer.source_note
    lines = estimate_lines(est, details=True)
    assert "one bucket per layer (closed form): step time" in lines[0]
    assert any(
        line.startswith("one bucket per layer (") and "[closed form: the replay" in line for line in lines
    )


def test_estimate_falls_back_to_the_closed_form_and_says_why_when_the_replay_is_null():
    closed = diff_analyses(analysis(), fragmented(124 / 12), test_label="hyper").finding("fragmentation")
    d = diff_analyses(analysis(), with_replay(fragmented(124 / 12), None), test_label="hyper")
    est = d.finding("fragmentation").estimate
    assert est.source == SOURCE_CLOSED_FORM
    assert est.step_time_delta_us == pytest.approx(closed.estimate.step_time_delta_us)  # the same closed form
    assert estimate_lines(est)[0].endswith(
        f"[closed form: the replay had not what it needed because {NO_REPLAY_NOTE}]"
    )
    # the one-bucket-per-unit scenario falls back too, and says so
    assert est.one_bucket_per_layer is None or est.one_bucket_per_layer.source == SOURCE_CLOSED_FORM


def test_a_replay_without_the_edit_names_the_edit_it_would_need():
    test = with_replay(fragmented(124 / 12), hand_replay(what_if=[]))
    est = diff_analyses(analysis(), test, test_label="hyper").finding("fragmentation").estimate
    assert est.source == SOURCE_CLOSED_FORM
    assert "the replay has no `regroup:all_gather:12` what-if" in est.source_note


def test_a_replayed_edit_without_a_step_falls_back_and_gives_the_replays_reason():
    failed = {"edit": "regroup:all_gather:12", "predicted_step_us": None, "phases": {}, "changed": [],
              "source": "replay", "note": "the edited graph has a cycle"}  # fmt: skip
    test = with_replay(fragmented(124 / 12), hand_replay(what_if=[failed]))
    est = diff_analyses(analysis(), test, test_label="hyper").finding("fragmentation").estimate
    assert est.source == SOURCE_CLOSED_FORM
    assert "its `regroup:all_gather:12` replay gave no step (the edited graph has a cycle)" in est.source_note


def test_straggler_estimate_is_the_replayed_straggler_removal():
    skewed = analysis(rank(0), rank(1, compute=1_000_000.0))
    d = diff_analyses(analysis(), with_replay(skewed, hand_replay()), test_label="hyper")
    est = d.finding("straggler").estimate
    assert est.source == SOURCE_REPLAY and est.edit == "straggler:remove"
    assert est.step_time_delta_us == pytest.approx(85_000.0 - 100_000.0)
    assert est.changed == [place(1, "forward", "compute", delta_us=-15_000.0)]
    # the straggler's own removal (``straggler:remove:1``: rank 1's work only) comes before every rank's
    mine = {**hand_replay()["what_if"][1], "edit": "straggler:remove:1", "predicted_step_us": 86_000.0}
    replay = hand_replay(what_if=[hand_replay()["what_if"][1], mine])
    est = (
        diff_analyses(analysis(), with_replay(skewed, replay), test_label="hyper")
        .finding("straggler")
        .estimate
    )
    assert est.edit == "straggler:remove:1" and est.step_time_delta_us == pytest.approx(86_000.0 - 100_000.0)


def test_critical_path_finding_names_the_top_place_and_says_when_many_paths_are_near():
    d = diff_analyses(analysis(), with_replay(analysis(), hand_replay()), test_label="hyper")
    f = d.finding("critical_path")
    # 55 000 of the 100 000 µs step on rank 1's forward compute
    assert (
        f.title
        == "hyper's step is held by rank 1 layers.0 forward compute (55.0% of it on the critical path)"
    )
    assert "replay error median 0.8%, max 1.0%" in f.evidence and "many almost-equal paths" not in f.cause
    near = [place(1, "backward", "compute", slack_us=1_000.0), place(0, "forward", "wait", slack_us=1_500.0)]
    d = diff_analyses(
        analysis(), with_replay(analysis(), hand_replay(near_critical=near)), test_label="hyper"
    )
    assert "many almost-equal paths" in d.finding("critical_path").cause
    assert diff_analyses(analysis(), analysis()).finding("critical_path") is None  # no replay, no finding


# --------------------------------------------------------------------------------------------
# The report: the critical-path section, one figure per arm, the error always shown
# --------------------------------------------------------------------------------------------


def replay_run(tmp_path: Path, torch_replay: dict | None, hyper_replay: dict | None) -> Path:
    """``make_run``'s 2-arm run with the replays put into analysis.json, and diff.json recomputed from it."""
    run = make_run(tmp_path)
    doc = orjson.loads((run / "analysis.json").read_bytes()) if (run / "analysis.json").is_file() else None
    assert doc is not None
    doc["torch"] = with_replay(doc["torch"], torch_replay)
    doc["hyper"] = with_replay(doc["hyper"], hyper_replay)
    (run / "analysis.json").write_bytes(orjson.dumps(doc))
    diff = diff_analyses(doc["torch"], doc["hyper"], base_label="torch", test_label="hyper")
    (run / "diff.json").write_bytes(orjson.dumps([diff.to_dict()]))
    (run / "diff.md").unlink(missing_ok=True)
    return run


def test_report_shows_the_replay_error_path_per_phase_and_top_places(tmp_path):
    near = [place(1, "backward", "compute", slack_us=1_000.0), place(0, "forward", "wait", slack_us=1_500.0)]
    run = replay_run(tmp_path, hand_replay(near_critical=near), hand_replay())
    write_report(run)
    md = (run / "report.md").read_text()
    section = md.split("## Critical path (step replay)")[1].split("\n## ")[0]
    hyper = section.split("### `hyper`")[1]
    assert "**Replay error**: median 0.8%, max 1.0% over ranks" in hyper
    assert "unexplained slack 400 µs" in hyper and "0.4% of the replayed step" in hyper
    assert "Replay notes: collectives matched by (group, seq)." in hyper
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in hyper.splitlines() if line.startswith("|")
    ]
    # the path per phase: forward 65 ms = 55 compute + 10 transfer, backward 35 ms compute
    assert ["forward", "65.00", "65.0%", "55.00", "10.00"] in rows
    assert ["backward", "35.00", "35.0%", "35.00", "—"] in rows
    # top places by critical time, each with its slack (0: on the path)
    assert ["1", "1", "layers.0", "forward", "compute", "55.00", "55.0%", "0.00"] in rows
    assert ["3", "1", "layers.0", "forward", "transfer", "10.00", "10.0%", "0.00"] in rows
    # per rank: |100 000 − 101 000| / 101 000
    assert ["0", "101.00", "100.00", "1.0%"] in rows
    assert "one path sets the step" in hyper and "Many almost-equal paths" not in hyper
    torch = section.split("### `torch`")[1].split("### `hyper`")[0]
    assert "Many almost-equal paths: 2 places off the critical path have slack under 2.0 ms" in torch
    # the replayed what-ifs: 88 000 − 100 000
    assert "`regroup:all_gather:12`" in hyper and "−12.0 ms" in hyper and "−12.0%" in hyper
    # the diagnosis takes the replay's regrouping and names its source
    assert "Estimate (replay) — hyper's collectives issued at torch's granularity: step time −12.0 ms" in md
    # one figure per arm in the page, and beside report.md
    page = inspect_html(run / "report.html")
    assert {"fig-replay_torch", "fig-replay_hyper"} <= set(page.figures)
    assert re.search(r"!\[[^\]]*\]\(figures/replay_hyper\.svg\)", md)
    svg = (run / "figures" / "replay_hyper.svg").read_text()
    assert "critical path" in svg and "last to arrive" in svg and "replayed step 100.00 ms" in svg


def test_report_says_the_slack_at_collectives_with_peers_outside_and_the_queue_gaps(tmp_path):
    rp = {**hand_replay(), "queue_gap_us": 3_019.0,
          "unexplained_slack_split_us": {"peers_outside": 250.0, "collectives": 0.0, "other": 150.0}}  # fmt: skip
    run = replay_run(tmp_path, hand_replay(), rp)
    write_report(run)
    hyper = (run / "report.md").read_text().split("### `hyper`")[1]
    assert (
        "unexplained slack 400 µs (time tasks started later than the graph explains, 0.4% of the replayed "
        "step); of it 0.250 ms at collectives whose peers are not in the input; 3.019 ms of queue gaps kept as "
        "lane latencies"
    ) in " ".join(hyper.split())


def test_report_says_why_an_arm_has_no_replay_and_that_its_what_ifs_are_closed_forms(tmp_path):
    run = replay_run(tmp_path, None, hand_replay())
    write_report(run)
    md = (run / "report.md").read_text()
    torch = md.split("### `torch`")[1].split("### `hyper`")[0]
    assert f"no step replay: {NO_REPLAY_NOTE}" in torch and "closed forms" in torch
    assert "fig-replay_torch" not in inspect_html(run / "report.html").figures


def test_an_unknown_or_large_replay_error_gets_a_warning():
    replay = hand_replay()
    replay["error_pct"] = {"median": 3.0, "max": 12.0}
    texts = [getattr(b, "text", "") for b in arm_blocks("x", {"replay": replay})]
    assert any("reaches 12.0% on a rank" in t for t in texts)
    assert not any(
        "reaches" in t for t in (getattr(b, "text", "") for b in arm_blocks("x", {"replay": hand_replay()}))
    )


def test_a_report_without_replays_still_builds(tmp_path):
    data = load_run(make_run(tmp_path))
    _, blocks = build_report(data)
    texts = " ".join(getattr(b, "text", "") for b in blocks)
    assert "this analysis has no replay" in texts and not data.missing


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package chromium) is not installed")
def test_replay_figure_is_visible_at_1400_px_in_headless_chromium(tmp_path):
    """The figure alone at 1,400 px: its lanes, the black critical path and the red last arrival are drawn."""
    page = tmp_path / "figure.html"
    svg = replay_lanes("hyper", hand_replay()["figure"], "replay_hyper")
    page.write_text(f"<!doctype html><html><body style='margin:0;background:#fff'>{svg}</body></html>")
    png = tmp_path / "figure.png"
    proc = headless_chromium(
        tmp_path, page.resolve().as_uri(), f"--screenshot={png}", "--window-size=1400,700"
    )
    assert png.is_file(), proc.stderr[-2000:]
    from matplotlib.image import imread

    rgb = (imread(png)[..., :3] * 255).round().astype(int)

    def pixels(hex_color: str, tol: int = 12) -> int:
        target = np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(rgb - target).max(axis=-1) <= tol).sum())

    assert pixels(REPLAY_KIND_COLORS["compute"]) > 2_000  # the on-path compute bars
    assert pixels("#111111", tol=20) > 500  # the critical path line
    assert pixels("#D1495B") > 20  # the last arrival's tick
    keep = os.environ.get("FSDPBENCH_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(png, keep)


def test_replay_figure_of_many_ranks_keeps_the_ranks_on_the_path_and_says_how_many_are_left_out():
    """64 ranks of one lane each, the path on rank 63 only: 40 rows are drawn (rank 63, then ranks 0–38), and
    the title says 64 − 40 = 24 ranks were left out."""
    lanes = [{"rank": r, "lane": "main", "segments": [[0, 1_000, 0, int(r == 63)]]} for r in range(64)]
    figure = {
        "step_us": 1_000,
        "kinds": KINDS,
        "lanes": lanes,
        "path": [[63, 63, 0, 1_000]],
        "rendezvous": [],
    }
    svg = replay_lanes("big", figure, "replay_big")
    assert "24 more ranks not drawn" in svg
    assert "r63 main" in svg and "r38 main" in svg and "r39 main" not in svg
    assert "work off the path may be missing" not in svg  # 64 segments: nothing was capped
    lanes[0]["segments"] = [[i, i + 0.5, 0, 0] for i in range(2_000)]  # a figure at the analysis' cap says so
    assert (
        "2,063 bars kept by the analysis, the path's first: work off the path may be missing"
        in replay_lanes("big", figure, "replay_big")
    )


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_report_of_a_real_run_has_a_replay_figure_per_arm_and_the_measured_steps_of_the_traces(
    profiled_ab_run, tmp_path
):
    """On the shared 2-rank gloo run (no launch of its own): each arm gets its replay figure, and the per-rank
    "measured" column is each rank's ProfilerStep span read from the raw trace with the standard library."""
    run = tmp_path / profiled_ab_run.name
    shutil.copytree(profiled_ab_run, run)  # the fixture is shared: write into a copy
    for stale in ("analysis.json", "diff.json", "diff.md"):
        (run / stale).unlink(missing_ok=True)
    write_report(run)
    arms = [a["label"] for a in orjson.loads((run / "manifest.json").read_bytes())["arms"]]
    page = inspect_html(run / "report.html")
    assert {f"fig-replay_{arm}" for arm in arms} <= set(page.figures)
    md = (run / "report.md").read_text()
    for arm in arms:
        part = md.split(f"### `{arm}`", 1)[1].split("\n### ", 1)[0]
        assert "**Replay error**: median" in part
        rows = [
            [c.strip() for c in line.strip("|").split("|")]
            for line in part.splitlines()
            if line.startswith("|")
        ]
        for trace in sorted((run / "profiles" / arm).glob("rank*/[!.]*.json*")):  # not the hidden caches
            steps = [e for e in raw_x_events(trace) if str(e.get("name", "")).startswith("ProfilerStep#")]
            rank = trace.parent.name.removeprefix("rank")
            measured = f"{steps[-1]['dur'] / 1000:,.2f}"
            assert any(row[:2] == [rank, measured] for row in rows), (arm, rank, measured)


def test_the_place_that_determines_the_step_comes_first():
    """``critical_excess`` of the step above: rank 1's forward compute 55 000 against rank 0's 40 000, all on the
    path → 15 000 (its transfer, 10 000 on both ranks, adds none); rank 0's backward compute 35 000 against
    30 000 → 5 000. Shown right after the replay's error, before the figure, rank 1 first."""
    from fsdpbench.report.blocks import Figure, Table

    replay = hand_replay()
    replay["critical_excess"] = [
        {"rank": 1, "unit": "layers.0", "phase": "forward", "excess_us": 15_000.0, "critical_us": 65_000.0,
         "own_us": 65_000.0, "peers_us": 50_000.0},
        {"rank": 0, "unit": "layers.0", "phase": "backward", "excess_us": 5_000.0, "critical_us": 35_000.0,
         "own_us": 35_000.0, "peers_us": 30_000.0},
    ]  # fmt: skip
    blocks = arm_blocks("x", {"replay": replay}, heading=False)
    texts = [getattr(b, "text", "") for b in blocks]
    at = next(i for i, t in enumerate(texts) if "Which place determines the step" in t)
    table = blocks[at + 1]
    assert isinstance(table, Table)
    figure = next(i for i, b in enumerate(blocks) if isinstance(b, Figure))
    assert at < figure
    assert all(
        "critical" not in t.lower() or "error" in t.lower() or "replay" in t.lower() for t in texts[:at]
    )
    assert [row[1:5] for row in table.rows] == [
        ["1", "layers.0", "forward", "15.00"],
        ["0", "layers.0", "backward", "5.00"],
    ]
    assert table.rows[0][5] == "15.0%"
    # a replay made before critical_excess existed: no block
    assert not any(
        "Which place" in getattr(b, "text", "") for b in arm_blocks("x", {"replay": hand_replay()})
    )
    f = diff_analyses(analysis(), with_replay(analysis(), replay), test_label="hyper").finding(
        "critical_path"
    )
    assert "the place that determines the step: rank 1 layers.0 forward, 15.0 ms on the path" in f.evidence
    f = diff_analyses(analysis(), with_replay(analysis(), hand_replay()), test_label="hyper").finding(
        "critical_path"
    )
    assert "determines the step" not in f.evidence

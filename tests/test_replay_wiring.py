"""The replay's what-ifs where people see them (issue 39): a run folder's analyses request the edits its findings
read, the findings and the report take the replay's numbers, and an edit the graph refuses is answered by the
closed form, labelled."""

from __future__ import annotations

import json
import shutil
import statistics

import orjson
import pytest

from fsdpbench.analysis.estimate.whatif import SOURCE_CLOSED_FORM, SOURCE_REPLAY
from fsdpbench.analysis.findings.replay_edits import wanted_edits
from fsdpbench.report import write_report
from test_replay import _regroup_rank, _x


def _unit_row(unit: str, phase: str, calls: dict[str, int], **figures: float) -> dict:
    return {
        "unit": unit,
        "phase": phase,
        "collectives": {k: {"count": n, "bytes": 1000.0 * n} for k, n in calls.items()},
        **figures,
    }


def _arm(compute_us: list[float], units: list[dict]) -> dict:
    """An Analysis JSON with a replay: every rank with ``units`` and the step totals of its collectives."""
    ranks = []
    for r, c in enumerate(compute_us):
        totals: dict[str, dict[str, float]] = {}
        for row in units:
            for k, v in row["collectives"].items():
                t = totals.setdefault(k, {"count": 0.0, "bytes": 0.0})
                t["count"] += v["count"]
                t["bytes"] += v["bytes"]
        ranks.append(
            {"rank": r, "compute_us": c, "step_time_us": 1000.0, "collectives": totals, "units": units}
        )
    return {"ranks": ranks, "replay": {"what_if": []}}


def test_wanted_edits_name_the_straggler_the_other_arms_granularity_and_the_most_exposed_unit():
    """By hand. Per rank, arm A issues 15 all-gathers in each layer's forward and 15 reduce-scatters in its
    backward (1,000 B each), arm B 2 per place moving the same 15,000 B: A has 30 / 4 = 7.5× B's calls of
    each type (≥ 3×) at the same bytes, and B's count per place is 2. Compute per rank 100, 100, 130: rank 2
    is 130 / median(100, 100) − 1 = 30 % (≥ 10 %) over the others. In A's forward, layers.1's exposed
    all-gather (20 µs) can hide under layers.0's free compute (50 − 0 µs): the prefetch edit is layers.1's,
    one unit ahead (no prefetch depth known: 0 + 1)."""
    a_units = [
        _unit_row(
            "layers.0", "forward", {"all_gather": 15}, compute_us=50.0, overlapped_us=0.0, exposed_us=0.0
        ),
        _unit_row(
            "layers.1", "forward", {"all_gather": 15}, compute_us=50.0, overlapped_us=0.0, exposed_us=20.0
        ),
        _unit_row("layers.0", "backward", {"reduce_scatter": 15}, compute_us=50.0),
        _unit_row("layers.1", "backward", {"reduce_scatter": 15}, compute_us=50.0),
    ]
    b_units = [
        {
            **row,
            "exposed_us": 0.0,
            "collectives": {k: {"count": 2, "bytes": 15000.0} for k in row["collectives"]},
        }
        for row in a_units
    ]
    a = _arm([100.0, 100.0, 130.0], a_units)
    b = _arm([100.0, 100.0, 100.0], b_units)
    assert wanted_edits(a, [b]) == [
        "straggler:remove:2",
        "regroup:all_gather,reduce_scatter:2",
        "regroup:all_gather,reduce_scatter:unit",
        "prefetch:layers.1:1",
    ]
    # B: no straggler, nothing fragmented against A, and no exposed all-gather to prefetch
    assert wanted_edits(b, [a]) == []
    # the prefetch depth the arm runs with: one unit further. Two units ahead, layers.1 (one unit before it in
    # its phase) cannot be moved by the replay, which would refuse the edit: none is asked for
    assert not any(e.startswith("prefetch:") for e in wanted_edits(a, [b], prefetch_depth=1))
    # with the root's forward before layers.0, layers.1 has two units before it
    root = _unit_row("root", "forward", {}, compute_us=10.0, overlapped_us=0.0, exposed_us=0.0)
    assert wanted_edits(_arm([100.0, 100.0, 130.0], [root, *a_units]), [b], prefetch_depth=1)[-1] == (
        "prefetch:layers.1:2"
    )
    # without a replay nothing is asked of it
    assert wanted_edits({**a, "replay": None}, [b]) == []


def test_an_edit_the_graph_refuses_is_answered_by_the_closed_form_and_says_why(tmp_path):
    """The hand-built 2-rank trace of test_replay's regroup (measured step 191 µs, the collectives waiting for
    rank 0): a delay at a place rank 0 does not have is refused by the graph, and the closed form answers
    191 + 5,000 µs; the same delay where rank 0 has it is replayed: rank 0 is the last to arrive at every
    collective, so the whole step moves by 5 ms, 5,191 µs. A regrouping of a type the trace lacks has no closed
    form either: no step, and the note says both."""
    from fsdpbench.analysis import analyze

    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_regroup_rank(r)))
    edits = ["delay:0:nowhere:forward:5", "delay:0:layers.0:forward:5", "regroup:all_gather:unit"]
    res = analyze([str(tmp_path)], workers=1, what_if=edits)
    rows = {w["edit"]: w for w in res.replay["what_if"]}
    refused = rows["delay:0:nowhere:forward:5"]
    assert refused["source"] == SOURCE_CLOSED_FORM
    assert refused["predicted_step_us"] == pytest.approx(191.0 + 5000.0)
    assert (
        "the replay cannot apply it" in refused["note"] and "no place (nowhere, forward)" in refused["note"]
    )
    assert "closed form: the delay adds to" in refused["note"]
    replayed = rows["delay:0:layers.0:forward:5"]
    assert replayed["source"] == SOURCE_REPLAY
    assert replayed["predicted_step_us"] == pytest.approx(191.0 + 5000.0)
    none = rows["regroup:all_gather:unit"]
    assert none["source"] == SOURCE_CLOSED_FORM and none["predicted_step_us"] is None
    assert "the profiles have no all_gather collective" in none["note"]


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_run_folder_findings_take_the_replays_numbers(profiled_ab_run, tmp_path):
    """On the shared 2-rank gloo run (no launch of its own): the report's analysis.json carries, per arm, the
    edits its findings read (the straggler rule's rank, from the ranks' compute read here with plain Python;
    a prefetch edit where the arm all-gathers), and every finding estimated by the replay gives exactly that
    row's predicted step − the replayed step, read from analysis.json, and says so in the report."""
    run = tmp_path / profiled_ab_run.name
    shutil.copytree(profiled_ab_run, run)  # the fixture is shared: write into a copy
    for stale in ("analysis.json", "diff.json", "diff.md"):
        (run / stale).unlink(missing_ok=True)
    write_report(run)
    analyses = orjson.loads((run / "analysis.json").read_bytes())
    rows = {}
    for arm, data in analyses.items():
        replay = data["replay"]
        assert replay is not None, data.get("replay_note")
        edits = [w["edit"] for w in replay["what_if"]]
        rows[arm] = {w["edit"]: (w, replay["figure"]["step_us"]) for w in replay["what_if"]}
        compute = {r["rank"]: r["compute_us"] for r in data["ranks"]}
        skew = {
            k: v / statistics.median(w for j, w in compute.items() if j != k) - 1 for k, v in compute.items()
        }
        slowest = max(skew, key=skew.get)
        assert (f"straggler:remove:{slowest}" in edits) == (skew[slowest] >= 0.10), (arm, skew, edits)
        if any("all_gather" in (r.get("collectives") or {}) for r in data["ranks"]):
            assert any(e.startswith("prefetch:") for e in edits), edits
        assert all(w["source"] == SOURCE_REPLAY for w in replay["what_if"]), replay["what_if"]
    diff = orjson.loads((run / "diff.json").read_bytes())
    diffs = diff if isinstance(diff, list) else [diff]
    replayed = [
        (f, d)
        for d in diffs
        for f in d["findings"]
        if (f.get("estimate") or {}).get("source") == SOURCE_REPLAY
    ]
    assert replayed, [f["id"] for d in diffs for f in d["findings"]]
    md = (run / "report.md").read_text()
    for f, _ in replayed:
        est = f["estimate"]
        row, step = rows[f["subject"]][est["edit"]]
        assert est["step_time_delta_us"] == pytest.approx(row["predicted_step_us"] - step)
        assert f"[edit `{est['edit']}` replayed]" in md
    assert {f["id"] for f, _ in replayed} & {"low_overlap", "straggler"}


# Host work per call, by hand. Two identical ranks; forward places layers.0, layers.1, layers.2 hold 1, 2 and 3
# all_reduces. Each place: aten::mm 20 µs, then per call a 10 µs host gap, the c10d::allreduce_ call (1 µs) and
# the gloo transfer (5 µs, the thread waiting for it), so the host gaps per place are 10 × calls: the fit is
# a = 0, b = 10 µs per call, R² 1 over the 3 places × 2 ranks. Measured: layers.0 0 → 36, layers.1 36 → 88,
# layers.2 88 → 156, then head's aten::mm (no collective) 156 → 176, the step.
# regroup:all_reduce:unit (equal sizes: no α–β fit, a merged transfer lasts its members' sum) merges layers.1's
# two into one of 10 µs and layers.2's three into one of 15 µs; the calls merged away (1 and 2) take 10 µs each
# off their place's host gaps (20 → 10: each gap × 1/2; 30 → 10: × 1/3) and their launch calls (1 µs) go:
# layers.1: mm 36 → 56, gaps 5 + 5 → 66, the last call 66 → 67, its arrival 67, merged transfer 67 → 77;
# layers.2: mm 77 → 97, gaps 3 × 3.333 → 107, call → 108, transfer 108 → 123; head 123 → 143: the predicted
# step 143 µs.
CALLS = {"layers.0": 1, "layers.1": 2, "layers.2": 3}


def _host_rank(rank: int) -> dict:
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 1,
            "tid": 200,
            "args": {"name": "thread 200 (pt_gloo_runloop)"},
        },
    ]
    t = 0
    for unit, n in CALLS.items():
        start = t
        ev.append(_x("aten::mm", t, 20))
        t += 20
        for _ in range(n):
            op = _x("c10d::allreduce_", t + 10, 1)
            op["args"] = {"Input Dims": [[1000]], "Input type": ["float"]}
            ev += [op, _x("gloo:all_reduce", t + 11, 5, tid=200, cat="user_annotation")]
            t += 16
        ev.append(_x(f"fsdpbench::forward::{unit}", start, t - start, cat="user_annotation"))
    ev += [_x("aten::mm", t, 20), _x("fsdpbench::forward::head", t, 20, cat="user_annotation")]
    ev.append(_x("ProfilerStep#1", 0, t + 20, cat="user_annotation"))
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_regroup_prices_the_merged_calls_host_gaps_and_launch_calls_by_hand(tmp_path):
    from fsdpbench.analysis import analyze

    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_host_rank(r)))
    res = analyze([str(tmp_path)], workers=1, what_if=["regroup:all_reduce:unit"])
    assert {r["rank"]: r["measured_us"] for r in res.replay["ranks"]} == {0: 176.0, 1: 176.0}
    w = res.replay["what_if"][0]
    assert w["source"] == SOURCE_REPLAY
    assert w["predicted_step_us"] == pytest.approx(143.0, abs=0.01)
    assert "5 all_reduce collectives merged into 2" in w["note"]  # the members of the two merged calls
    assert "host_gap 10.0 µs per call (0.0 µs + 10.0 µs × calls per place over 6 places, R² 1.00" in w["note"]

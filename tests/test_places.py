"""Findings and report name the place: (unit, phase) rows of both arms, their deltas, the exposed_place
finding, diff.md / terminal lines and the report's unit × phase section.

Hand-built Analysis JSON with hand-computed means and deltas; the real path on the shared profiled run.
"""

from __future__ import annotations

import io
import json

import pytest

from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.findings import places as plc
from fsdpbench.report import figures
from fsdpbench.report.blocks import Figure, Table
from fsdpbench.report.diff_md import diff_markdown, place_lines
from fsdpbench.report.places import places_section


def _row(unit: str, phase: str, compute: float, comm: float, exposed: float, rs: int = 0) -> dict:
    return {
        "unit": unit,
        "phase": phase,
        "compute_us": compute,
        "comm_us": comm,
        "overlapped_us": comm - exposed,
        "exposed_us": exposed,
        "collectives": {"reduce_scatter": {"count": rs, "bytes": 4096 * rs}} if rs else {},
        "fsdp_internals": None,
    }


def _rank(rank: int, units: list[dict], exposed: float) -> dict:
    return {
        "rank": rank,
        "step_time_us": 100_000.0,
        "compute_us": 50_000.0,
        "comm_us": exposed + 1000.0,
        "overlap_ratio": 0.1,
        "exposed_comm_us": exposed,
        "free_us": 0.0,
        "kernel_time_us": 50_000.0,
        "collectives": {"reduce_scatter": {"count": 2, "bytes": 8192, "time_us": exposed}},
        "units": units,
    }


def _split(wait: float, transfer: float) -> dict:
    return {
        "wait_us": wait,
        "transfer_us": transfer,
        "exposed_wait_us": wait,
        "exposed_transfer_us": transfer,
    }


BASE = {
    "ranks": [
        _rank(
            0,
            [_row("layers.0", "forward", 1000, 300, 100), _row("layers.0", "backward", 2000, 500, 200, 1)],
            300,
        ),
        _rank(
            1,
            [_row("layers.0", "forward", 1200, 300, 300), _row("layers.0", "backward", 2000, 500, 0, 1)],
            300,
        ),
    ],
    "waits": {
        "units": [
            {"unit": "layers.0", "phase": "backward", "ranks": {"0": _split(200, 0), "1": _split(0, 0)}}
        ],
        "top": [],
    },
}
TEST = {
    "ranks": [
        _rank(
            0,
            [
                _row("layers.0", "forward", 1000, 300, 200),
                _row("layers.0", "backward", 2000, 46000, 45000, 2),
                _row("root", "backward", 10, 1000, 1000),
            ],
            46200,
        ),
        _rank(
            1, [_row("layers.0", "forward", 1000, 300, 200), _row("layers.0", "backward", 2000, 40000, 39000, 2)], 39200
        ),
    ],
    "waits": {
        "units": [
            {
                "unit": "layers.0",
                "phase": "backward",
                "ranks": {"0": _split(40000, 5000), "1": _split(27200, 11800)},
            }
        ],
        "top": [
            {"unit": "layers.0", "phase": "backward", "type": "reduce_scatter", "bytes": 4096.0, "last_rank": 1,
             "wait_us": 40000.0, "transfer_us": 2000.0},
            {"unit": "layers.0", "phase": "backward", "type": "reduce_scatter", "bytes": 4096.0, "last_rank": 0,
             "wait_us": 5000.0, "transfer_us": 9000.0},
        ],
    },
}  # fmt: skip


def test_arm_places_are_rank_means_with_the_wait_split():
    got = plc.arm_places(TEST)
    assert list(got) == [("layers.0", "forward"), ("layers.0", "backward"), ("root", "backward")]
    bwd = got[("layers.0", "backward")]
    # (45000 + 39000) / 2; waits (40000 + 27200) / 2 and (5000 + 11800) / 2
    assert bwd["exposed_us"] == 42000.0 and bwd["comm_us"] == 43000.0 and bwd["compute_us"] == 2000.0
    assert bwd["exposed_wait_us"] == 33600.0 and bwd["exposed_transfer_us"] == 8400.0
    # root backward only on rank 0: counts as 0 on rank 1
    assert got[("root", "backward")]["exposed_us"] == 500.0
    assert plc.collective_types(TEST, ("layers.0", "backward")) == {"reduce_scatter": 2.0}
    assert plc.waited_for(TEST, ("layers.0", "backward")) == 1  # 40 ms behind rank 1 vs 5 ms behind rank 0
    assert plc.waited_for(TEST, ("layers.0", "forward")) is None


def test_compare_places_deltas_and_order():
    rows = plc.compare_places(BASE, TEST)
    by = {(r.unit, r.phase): r for r in rows}
    assert by[("layers.0", "forward")].delta("exposed_us") == 0.0  # 200 − (100 + 300) / 2
    assert by[("layers.0", "forward")].delta("compute_us") == -100.0  # 1000 − 1100
    assert by[("layers.0", "backward")].delta("exposed_us") == 41900.0  # 42000 − 100
    assert by[("layers.0", "backward")].delta("exposed_wait_us") == 33500.0  # 33600 − 100
    # the base names no root at all (another wrapping): listed, not compared against nothing
    assert by[("root", "backward")].base is None and by[("root", "backward")].delta("exposed_us") is None
    assert plc.unmatched_units(rows) == ([], ["root"])
    ordered = [(r.unit, r.phase) for r in plc.by_exposed_delta(rows)]
    assert ordered == [("layers.0", "backward"), ("layers.0", "forward")]
    d = by[("layers.0", "backward")].to_dict()
    assert d["delta"]["exposed_us"] == 41900.0 and d["base"]["exposed_us"] == 100.0


def test_one_arm_without_units_gives_no_deltas_and_no_finding():
    base = {"ranks": [{k: v for k, v in r.items() if k != "units"} for r in BASE["ranks"]]}
    rows = plc.compare_places(base, TEST)
    assert rows and all(not r.compared and r.delta("exposed_us") is None for r in rows)
    result = diff_analyses(base, TEST, base_label="torch", test_label="hyper")
    assert result.finding("exposed_place") is None
    assert plc.compare_places({"ranks": [{"rank": 0}]}, {"ranks": [{"rank": 0}]}) == []


def test_exposed_place_finding_names_unit_phase_collective_and_the_rank_waited_for():
    result = diff_analyses(BASE, TEST, base_label="torch", test_label="hyper")
    f = result.finding("exposed_place")
    assert f is not None and f.subject == "hyper"
    # 41.9 ms ≥ 10% of torch's 100 ms step → high; 33600 / 42000 = 80% waiting, mostly for rank 1
    assert f.severity == "high"
    assert f.title == (
        "hyper: layers.0 backward: reduce_scatter ×2 exposed 42.0 ms (+41.9 ms vs torch), 80.0% of it waiting for rank 1"
    )
    # root backward's +500 µs is under 2% of the step: not listed; the step's exposed Δ = 42700 − 300
    assert f.evidence.endswith("; these 1 place(s) expose +41.9 ms vs torch of the step's +42.4 ms")
    assert "rank 1" in f.action and "wait" in f.cause
    assert not [g for g in result.findings if g.id == "exposed_place" and g.subject == "torch"]
    out = result.to_dict()
    assert [p["unit"] for p in out["places"]] == ["layers.0", "layers.0", "root"]
    assert out["top_waits"]["test"][0]["last_rank"] == 1 and out["top_waits"]["base"] == []
    json.dumps(out)  # JSON-serialisable


def test_transfer_dominated_place_blames_overlap_not_a_rank():
    test = json.loads(json.dumps(TEST))
    test["waits"]["units"][0]["ranks"] = {"0": _split(0, 45000), "1": _split(0, 39000)}
    f = diff_analyses(BASE, test, base_label="torch", test_label="hyper").finding("exposed_place")
    assert f.title.endswith("exposed 42.0 ms (+41.9 ms vs torch), 0.0% of it waiting for rank 1")
    assert f.action.startswith("overlap layers.0 backward's collectives")


def test_diff_markdown_and_terminal_lines_show_the_places_and_slowest_collectives():
    result = diff_analyses(BASE, TEST, base_label="torch", test_label="hyper")
    lines = place_lines(result)
    assert lines[0] == (
        "layers.0 backward: exposed 100 µs (torch) → 42.0 ms (hyper), Δ +41.9 ms (wait +33.5 ms); compute Δ ±0 µs"
    )
    assert lines[1].startswith("layers.0 forward: exposed 200 µs (torch) → 200 µs (hyper), Δ ±0 µs")
    assert lines[2] == "units not compared (named on one side only): torch: none; hyper: root"
    assert lines[3] == (
        "hyper slowest: layers.0 backward reduce_scatter 4.00 KiB: wait 40.0 ms, transfer 2.0 ms, last rank 1"
    )
    md = diff_markdown(result)
    assert "### Where: units × phases" in md and f"- {lines[0]}" in md
    from rich.console import Console

    from fsdpbench.report.terminal import render_diff

    buf = io.StringIO()
    render_diff(result, Console(file=buf, width=200))
    assert lines[0] in buf.getvalue()


def test_report_section_tables_and_heatmaps():
    blocks = places_section({"torch": BASE, "hyper": TEST}, ["torch", "hyper"])
    tables = [b for b in blocks if isinstance(b, Table)]
    figs = [b for b in blocks if isinstance(b, Figure)]
    assert [f.name for f in figs] == ["places_0", "places_1", "places_delta_1"]
    assert "<svg" in figs[0].svg and "42.0" in figs[1].svg and "41.9" in figs[2].svg
    torch_rows = {(r[0], r[1]): r for r in tables[0].rows}
    assert torch_rows[("layers.0", "forward")][2:5] == ["1.1", "0.3", "0.2"]  # compute, comm, exposed (ms)
    top = tables[2].rows[0]  # hyper's slowest collectives
    assert top == ["layers.0", "backward", "reduce_scatter", "4.00 KiB", "40.0", "2.0", "1"]
    delta = tables[3]
    assert delta.rows[0][:6] == ["layers.0", "backward", "0.1", "42.0", "+41.9", "+33.5"]
    assert places_section({"a": {"ranks": [{"rank": 0}]}}, ["a"]) == []


def test_heatmap_marks_missing_places_blank():
    import numpy as np

    svg = figures.unit_phase_heatmap(
        ["layers.0", "root"],
        ["forward", "backward"],
        {"x": np.array([[1.0, np.nan], [np.nan, -2.5]])},
        "t",
        True,
    )
    assert "1.0" in svg and ("−2.5" in svg or "-2.5" in svg) and "nan" not in svg


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_real_run_places_diff_and_report(profiled_ab_run):
    """The shared profiled run: the diff's place rows equal the rank means of the analyses' own unit rows
    (read here from analysis.json), and the report shows the section with its figures."""
    from fsdpbench.analysis.derived import diff_run

    [result] = diff_run(profiled_ab_run)  # writes analysis.json when the run has none yet
    analysis = json.loads((profiled_ab_run / "analysis.json").read_text())
    base, test = analysis[result.base], analysis[result.test]

    def means(data: dict, key: str) -> dict:
        out: dict = {}
        for r in data["ranks"]:
            for row in r["units"]:
                out[(row["unit"], row["phase"])] = out.get((row["unit"], row["phase"]), 0.0) + row[key]
        return {k: v / len(data["ranks"]) for k, v in out.items()}

    eb, et = means(base, "exposed_us"), means(test, "exposed_us")
    assert {("layers.0", "forward"), ("layers.0", "backward")} <= set(et)
    rows = {(r.unit, r.phase): r for r in result.places}
    assert set(rows) == set(eb) | set(et)
    for key, row in rows.items():
        assert row.delta("exposed_us") == pytest.approx(et.get(key, 0.0) - eb.get(key, 0.0), abs=1e-6)
    # each place's wait + transfer of exposed comm is its exposed comm (waits' own identity, per place)
    for key, v in plc.arm_places(test).items():
        if v["exposed_wait_us"] is not None and key[1] in ("forward", "backward"):
            assert v["exposed_wait_us"] + v["exposed_transfer_us"] == pytest.approx(v["exposed_us"], abs=1.0)
    assert place_lines(result)
    from fsdpbench.report import write_report

    write_report(profiled_ab_run)
    md = (profiled_ab_run / "report.md").read_text()
    assert "### Where: units × phases" in md and "Units × phases: `" in md
    assert (profiled_ab_run / "figures" / "places_delta_1.svg").is_file()

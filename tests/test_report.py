"""The run report: it parses, is self-contained, shows every figure, and degrades gracefully."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import orjson
import pytest

from fsdpbench.analysis.estimate.whatif import Estimate, TypeSaving
from fsdpbench.analysis.output.result_records import AnalysisRecord
from fsdpbench.errors import InputError
from fsdpbench.fmt import fmt_us
from fsdpbench.records import convert
from fsdpbench.report import load_run, write_report
from fsdpbench.report.build import build_report
from fsdpbench.report.estimate import estimate_lines
from helpers import CHROMIUM, hand_rank, headless_chromium, inspect_html, make_run

# --------------------------------------------------------------------------------------------
# A realistic fake run folder, field for field as docs/DATA.md describes it
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# HTML inspection with the standard library's parser
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_profiled_run_report_is_self_contained_html_with_every_figure(tmp_path):
    run = make_run(tmp_path)
    written = write_report(run)
    assert run / "report.html" in written and run / "report.md" in written
    page = inspect_html(run / "report.html")
    assert page.external == [] and "http" not in (run / "report.html").read_text()
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert {"fig-step_times", "fig-overlap", "fig-breakdown", "fig-collectives", "fig-op_deltas_0"} <= set(
        page.figures
    )
    assert page.tags.get("svg", 0) == len(page.figures)
    text = " ".join(page.text)
    assert "hyper is 1.19× slower than torch (+19.0%" in text
    assert f"{250 / 210:.2f}× slower (+{(250 / 210 - 1) * 100:.1f}%)" in text  # the verdict table's cell
    assert "bucket per module" in text  # the diff's finding
    assert "Estimate: step time −150.0 ms; exposed comm −200.0 ms" in text
    # a measured change is labelled as one, and a missing number is left out, never printed as None
    assert "Measured: exposed comm −3.0 ms" in text and "not a measurement" not in text
    assert "None" not in (run / "report.md").read_text()
    assert "fsdpbench ab --arms torch,hyper --rounds 3 --profile" in text  # the command from the manifest


def test_markdown_references_figures_written_beside_it(tmp_path):
    run = make_run(tmp_path)
    write_report(run)
    md = (run / "report.md").read_text()
    refs = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.svg)\)", md)
    assert len(refs) >= 5
    for ref in refs:
        svg = (run / ref).read_text()
        assert svg.startswith("<?xml") and "<svg" in svg


def test_overlap_and_collective_numbers_come_from_the_analysis(tmp_path):
    run = make_run(tmp_path)
    data = load_run(run)
    _, blocks = build_report(data)
    tables = [b for b in blocks if type(b).__name__ == "Table"]
    overlap = next(t for t in tables if "overlap ratio" in t.headers)
    by_arm = {row[0]: row for row in overlap.rows}
    assert by_arm["torch"][2] == "48.8%" and by_arm["hyper"][2] == "5.9%"
    # exposed comm = comm − overlapped = 90 ms × (1 − ratio)
    assert by_arm["hyper"][7] == f"{90 * (1 - 0.059):,.2f}"
    coll = next(t for t in tables if "median message" in t.headers)
    counts = {(r[0], r[1]): r[2] for r in coll.rows}
    assert counts[("hyper", "all_gather")] == "124" and counts[("torch", "reduce_scatter")] == "7"


def test_step_time_table_uses_only_timed_steps(tmp_path):
    run = make_run(tmp_path)
    data = load_run(run)
    _, blocks = build_report(data)
    table = next(b for b in blocks if type(b).__name__ == "Table" and "timed steps" in b.headers)
    timed = data.steps[data.steps["kind"] == "timed"]
    expected = timed.groupby(["arm", "round"])["time_ms"].median()
    for arm, rnd, n, median, *_ in table.rows:
        assert n == "4"
        assert median == f"{expected[(arm, int(rnd))]:,.1f}"


def test_run_without_profiles_still_reports_and_says_so(tmp_path):
    run = make_run(tmp_path, profiled=False)
    write_report(run)
    page = inspect_html(run / "report.html")
    text = " ".join(page.text)
    assert "was not profiled" in text and "--profile" in text
    assert "fig-step_times" in page.figures and "fig-overlap" not in page.figures
    assert "hyper is 1.19× slower" in text


def test_failed_parity_puts_a_loud_banner_first(tmp_path):
    run = make_run(tmp_path, parity_valid=False)
    write_report(run)
    page = inspect_html(run / "report.html")
    assert page.banners[0] == "banner error"
    assert "COMPARISON INVALID" in " ".join(page.text)
    assert "COMPARISON INVALID" in (run / "report.md").read_text().split("## Step time")[0]


def test_crashed_arm_and_missing_summary_are_named(tmp_path):
    run = make_run(tmp_path, crashed_arm="hyper", with_summary=False)
    write_report(run)
    text = (run / "report.md").read_text()
    assert "## Missing pieces" in text and "summary.json" in text and "No verdict yet" in text
    run2 = make_run(tmp_path / "b", crashed_arm="hyper")
    write_report(run2)
    text2 = (run2 / "report.md").read_text()
    assert "status **failed**" in text2 and "rank 1 crashed" in text2 and "round 2" in text2


def test_torn_steps_line_and_broken_json_do_not_stop_the_report(tmp_path):
    run = make_run(tmp_path)
    with open(run / "steps.jsonl", "ab") as f:
        f.write(b'{"arm": "torch", "round": 9, "ti')
    (run / "diff.json").write_text("{not json")
    write_report(run)
    text = (run / "report.md").read_text()
    assert "unreadable line" in text and "`diff.json` could not be read" in text
    assert "## Step time per arm and round" in text


def test_a_summary_json_that_is_not_a_summary_is_named_and_the_report_still_written(tmp_path):
    """Valid JSON of the wrong shape (written here: a list, then arms as a list) is left out like a
    missing summary: no verdict, no statistics, the file named under Missing pieces."""
    for n, wrong in enumerate(([1, 2], {"schema_version": 1, "arms": ["torch", "hyper"]})):
        run = make_run(tmp_path / str(n))
        (run / "summary.json").write_bytes(orjson.dumps(wrong))
        write_report(run)
        text = (run / "report.md").read_text()
        missing = text.split("## Missing pieces")[1]
        assert "the summary `summary.json` is not an fsdpbench summary" in missing
        assert "No verdict yet" in text and "No per-arm statistics" in text
        assert "## Step time per arm and round" in text


def test_a_folder_that_is_not_a_run_is_refused_naming_runs_below_it(tmp_path):
    make_run(tmp_path / "results")
    with pytest.raises(InputError, match=r"not a fsdpbench run folder.*ab_20261202_120000"):
        write_report(tmp_path / "results")
    with pytest.raises(InputError, match="no such folder"):
        write_report(tmp_path / "nowhere")


def test_cli_refuses_a_non_run_folder_in_one_line_without_traceback(tmp_path):
    from helpers import run_cli

    proc = run_cli("report", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "is not a fsdpbench run folder" in proc.stderr


def test_stale_analysis_is_recomputed_with_the_analysis_module(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    (run / "analysis.json").unlink()
    (run / "diff.json").unlink()
    calls = []
    source = orjson.loads(orjson.dumps(hand_rank(0, 0.25, 4, 2, 1000.0)))

    class FakeAnalysis:
        def __init__(self, path):
            calls.append(path)
            n = 400
            start = np.arange(n, dtype=np.int64) * 1000
            events = {
                "name": np.array(["mm"] * n),
                "category": np.where(np.arange(n) % 3 == 0, "comm", "compute"),
                "start_ns": start,
                "end_ns": start + 800,
                "lane": np.where(np.arange(n) % 3 == 0, "gloo", "main"),
                "step": np.full(n, 3),
            }
            self.ranks = [types.SimpleNamespace(rank=0, step=None, events=events, source=str(path))]
            self.replay = None  # no step replay: derived.ensure_analysis asks for none

        def record(self, fit_events=False):
            rank = copy.deepcopy(source)
            if fit_events:  # as analysis.json keeps them (here: none)
                rank["collective_events"] = {"type": [], "bytes": [], "start_ns": [], "end_ns": []}
            return convert({"schema_version": 1, "warnings": [], "ranks": [rank]}, AnalysisRecord, "fake")

    import fsdpbench.analysis.findings.replay_edits as replay_edits

    fake = types.ModuleType("fsdpbench.analysis")
    fake.analyze = lambda paths, step=None: FakeAnalysis(paths[0])
    fake.replay_edits = replay_edits  # derived asks it which edits to replay (none: no replay here)
    monkeypatch.setitem(sys.modules, "fsdpbench.analysis", fake)

    def failing_diff(*args, **kwargs):
        raise RuntimeError("no diff today")

    monkeypatch.setattr(
        "fsdpbench.analysis.derived._diff_arms", failing_diff
    )  # a failing piece is named, not fatal
    written = write_report(run)
    assert run / "analysis.json" in written
    assert set(orjson.loads((run / "analysis.json").read_bytes())) == {"torch", "hyper"}
    page = inspect_html(run / "report.html")
    assert "fig-timeline" in page.figures
    assert "the diff of the arms failed: no diff today" in (run / "report.md").read_text()


def test_estimate_lines_name_measured_changes_bounds_and_unpriced_estimates_without_none():
    measured = Estimate(label="measured", exposed_comm_delta_us=-3000.0)
    assert estimate_lines(measured, details=True) == ["Measured: exposed comm −3.0 ms"]
    bound = Estimate(best_case_step_time_delta_us=-240_000.0, scenario="all comm hidden")
    assert estimate_lines(bound) == ["Estimate — all comm hidden: best case step time −240.0 ms (a bound)"]
    assert estimate_lines(Estimate(note="not priced: no cost of one sync")) == [
        "Estimate: not priced: no cost of one sync"
    ]
    assert estimate_lines(Estimate(label="measured")) == [] and estimate_lines(None) == []
    priced = Estimate(
        step_time_delta_us=-1120.0,
        per_type={
            "all_gather": TypeSaving(124, 12, saved_us=1120.0, alpha_us=10.0, fit_source="test", fit_r2=0.99)
        },
        assumptions=["compute time is unchanged"],
    )
    lines = estimate_lines(priced, details=True)
    assert lines == [
        "Estimate: step time −1.1 ms",
        "per type: all_gather 124 → 12 calls (saves 1.1 ms; α 10.0 µs from the test fit, R² 0.99)",
        "assumptions: compute time is unchanged",
    ]


def test_timeline_takes_the_last_profiled_step_of_the_first_rank_from_zero():
    from fsdpbench.report import timeline_from_analysis

    events = {
        "name": np.array(["a", "b", "c", "d"]),
        "category": np.array(["compute", "comm", "compute", "other"]),
        "start_ns": np.array([100, 5_000, 7_000, 9_000]),
        "end_ns": np.array([900, 6_000, 8_000, 9_500]),
        "lane": np.array(["s7", "s9", "s7", "s7"]),
        "step": np.array([2, 3, 3, -1]),
    }
    rank1 = types.SimpleNamespace(rank=1, step=None, events={k: v[:1] for k, v in events.items()})
    rank0 = types.SimpleNamespace(rank=0, step=None, events=events)
    timeline = timeline_from_analysis("torch", types.SimpleNamespace(ranks=[rank1, rank0]))
    assert (timeline.rank, timeline.step) == (0, 3)
    assert timeline.name == ["b", "c"]
    assert list(timeline.start_ns) == [0, 2_000] and list(timeline.end_ns) == [1_000, 3_000]


def test_report_side_does_not_import_torch():
    code = "import sys, fsdpbench.report, fsdpbench.report.build, fsdpbench.commands.report; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package chromium) is not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    run = make_run(tmp_path)
    write_report(run)
    png = tmp_path / "report.png"
    proc = headless_chromium(
        tmp_path, (run / "report.html").resolve().as_uri(), f"--screenshot={png}", "--window-size=1400,3000"
    )
    assert png.is_file(), proc.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.shape[0] == 3000 and pixels.shape[1] == 1400
    # a rendered page is not blank: many distinct colours (figures, banners, text)
    distinct = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(distinct) > 50
    keep = os.environ.get("FSDPBENCH_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(png, keep)


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_report_of_a_real_profiled_run_has_profile_figures_and_timeline(profiled_ab_run, tmp_path):
    run = tmp_path / profiled_ab_run.name
    shutil.copytree(profiled_ab_run, run)  # the fixture is shared: write into a copy
    for stale in ("analysis.json", "diff.json", "diff.md"):
        (run / stale).unlink(missing_ok=True)
    written = write_report(run)
    assert {run / "analysis.json", run / "report.html"} <= set(written)
    page = inspect_html(run / "report.html")
    assert page.external == []
    assert {"fig-step_times", "fig-overlap", "fig-breakdown", "fig-collectives", "fig-timeline"} <= set(
        page.figures
    )
    analysis = orjson.loads((run / "analysis.json").read_bytes())
    manifest = orjson.loads((run / "manifest.json").read_bytes())
    assert set(analysis) == {a["label"] for a in manifest["arms"]}
    # the overlap table shows the analysis' own mean over ranks
    data = load_run(run)
    _, blocks = build_report(data)
    table = next(b for b in blocks if type(b).__name__ == "Table" and "overlap ratio" in b.headers)
    for row in table.rows:
        ratios = [r["overlap_ratio"] for r in analysis[row[0]]["ranks"] if r["overlap_ratio"] is not None]
        expected = f"{100 * float(np.mean(ratios)):.1f}%" if ratios else "—"
        assert row[2] == expected
    # prefetch 0 vs 1: the measured exposed-comm change is labelled "Measured", nothing reads "None"
    md = (run / "report.md").read_text()
    diff = orjson.loads((run / "diff.json").read_bytes())
    prefetch = next(f for f in diff["findings"] if f["id"] == "prefetch_change")
    measured = prefetch["estimate"]["exposed_comm_delta_us"]
    assert f"Measured: exposed comm {fmt_us(measured, signed=True)}" in md
    assert "None" not in md and "None" not in (run / "diff.md").read_text()
    assert not [line for line in md.splitlines() if "Measured" in line and "not a measurement" in line]


def test_a_report_of_a_run_with_a_fresh_analysis_decodes_analysis_json_once(tmp_path, monkeypatch):
    """load_run decodes analysis.json; the freshness check of the analysis reuses that decoding."""
    from fsdpbench.results import run_folder

    run = make_run(tmp_path)
    reads = []
    real = run_folder.read_json_file
    monkeypatch.setattr(
        run_folder, "read_json_file", lambda path: reads.append(Path(path).name) or real(path)
    )
    before = (run / "analysis.json").read_bytes()
    write_report(run)
    assert (run / "analysis.json").read_bytes() == before  # reused, not written again
    assert reads.count("analysis.json") == 1

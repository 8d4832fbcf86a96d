"""fsdpbench diff: side by side, Diff JSON shape, markdown, the CLI's bad-input messages, a profiled run."""

from __future__ import annotations

import json

import orjson
import pytest

from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.derived import diff_run
from fsdpbench.errors import InputError
from fsdpbench.report.diff_md import diff_markdown
from helpers import (
    ALPHA_US,
    BETA_US_PER_BYTE,
    analysis,
    hand_built_run,
    rank,
    run_cli,
    synthetic_analysis,
)


def test_side_by_side_gives_each_rank_and_the_mean_with_test_minus_base():
    base = analysis(rank(0, step=1000.0, overlap=0.5), rank(1, step=1200.0, overlap=0.7))
    test = analysis(rank(0, step=1500.0, overlap=0.1), rank(1, step=1300.0, overlap=0.3))
    sbs = diff_analyses(base, test).side_by_side.to_dict()
    assert [r["rank"] for r in sbs["ranks"]] == [0, 1]
    assert (
        sbs["ranks"][0]["delta"]["step_time_us"] == 500.0
        and sbs["ranks"][1]["delta"]["step_time_us"] == 100.0
    )
    assert sbs["mean"]["base"]["step_time_us"] == 1100.0 and sbs["mean"]["test"]["step_time_us"] == 1400.0
    assert sbs["mean"]["delta"]["overlap_ratio"] == pytest.approx(-0.4)
    assert sbs["mean"]["ratio"]["step_time_us"] == pytest.approx(1400 / 1100)


def test_op_rows_are_sorted_by_size_of_the_difference_with_hta_change_categories():
    ops_b = [
        {"op_type": "Slice", "count": 10, "total_us": 100.0},
        {"op_type": "Gone", "count": 2, "total_us": 5.0},
        {"op_type": "MatMul", "count": 5, "total_us": 50.0},
    ]
    ops_t = [
        {"op_type": "Slice", "count": 4, "total_us": 36.0},
        {"op_type": "New", "count": 1, "total_us": 20.0},
        {"op_type": "MatMul", "count": 5, "total_us": 50.0},
    ]
    rows = diff_analyses(analysis(rank(0, ops=ops_b)), analysis(rank(0, ops=ops_t))).ops
    assert [(r.op_type, r.delta_us, r.change) for r in rows] == [
        ("Slice", -64.0, "decreased"),
        ("New", 20.0, "added"),
        ("Gone", -5.0, "deleted"),
        ("MatMul", 0.0, "unchanged"),
    ]
    assert rows[0].base.count == 10 and rows[0].test.count == 4


def test_counts_are_means_per_rank_and_a_type_missing_on_a_rank_counts_zero():
    r0 = rank(0, collectives={"all_gather": {"count": 10, "bytes": 100, "time_us": 1.0}}, sync={"barrier": 4})
    r1 = rank(1, collectives={}, sync={"barrier": 6})
    d = diff_analyses(analysis(r0, r1), analysis(r0, r1))
    assert d.collectives[0].base.count == 5.0 and d.sync[0].to_dict() == {
        "name": "barrier",
        "base": 5.0,
        "test": 5.0,
        "delta": 0.0,
    }


def test_diff_json_has_the_documented_keys_and_serialises():
    d = diff_analyses(
        synthetic_analysis(), synthetic_analysis(per_param=True), base_label="torch", test_label="hyper"
    )
    out = orjson.loads(orjson.dumps(d.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY))
    assert set(out) == {
        "schema_version",
        "base",
        "test",
        "warnings",
        "side_by_side",
        "collectives",
        "ops",
        "sync",
        "fits",
        "findings",
        "calibration",
        "places",
        "top_waits",
        "prefetch_estimates",
    }
    assert out["places"] == [] and out["top_waits"] == {"base": [], "test": []}  # no units in these analyses
    assert out["prefetch_estimates"] == {"base": None, "test": None}
    assert out["calibration"] == []  # no manifest arms: nothing to calibrate against
    assert out["base"] == "torch" and out["test"] == "hyper"
    assert set(out["collectives"][0]) >= {
        "type",
        "base_count",
        "test_count",
        "count_ratio",
        "base_bytes",
        "test_bytes",
        "bytes_ratio",
    }
    assert set(out["fits"]["test"]["all_gather"]) >= {"alpha_us", "beta_us_per_byte", "r2", "n"}
    for f in out["findings"]:
        assert set(f) == {"id", "severity", "title", "evidence", "cause", "action", "estimate", "subject"}
        assert f["subject"] in (None, "torch", "hyper")
        assert f["severity"] in {"high", "medium", "low", "info"}
    # hyper's per-parameter collectives: the fragmentation finding is about hyper
    assert [f["subject"] for f in out["findings"] if f["id"] == "fragmentation"] == ["hyper"]


def test_markdown_has_differences_and_conclusions_and_labels_estimates():
    d = diff_analyses(
        synthetic_analysis(),
        synthetic_analysis(per_param=True, overlap_ratio=0.1),
        base_label="torch",
        test_label="hyper",
        test_arm={"prefetch": 0},
    )
    md = diff_markdown(d)
    assert "## Differences: hyper vs torch" in md and "## Conclusions: hyper vs torch" in md
    assert "- all_gather 120 vs 12 (10.0×), same bytes" in md
    assert "Estimate — hyper's collectives issued at torch's granularity" in md
    assert "Fixes ranked (P0 first)" in md and "- P0: arm hyper runs prefetch=0" in md


def test_compare_rejects_input_that_is_not_an_analysis():
    with pytest.raises(InputError, match="base \\(torch\\): expected an analysis"):
        diff_analyses(42, analysis(), base_label="torch")
    with pytest.raises(InputError, match="test \\(test\\): the analysis has no ranks"):
        diff_analyses(analysis(), {"schema_version": 1, "ranks": []})


def test_a_side_without_collectives_is_warned_about():
    quiet = analysis(rank(0, collectives={}), rank(1, collectives={}))
    d = diff_analyses(analysis(), quiet, test_label="hyper")
    assert any("hyper: no collectives recognised" in w for w in d.warnings)


# ---- CLI -------------------------------------------------------------------------------------------------


def _one_line_error(proc, phrase: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert phrase in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_bad_inputs_give_one_clear_line(tmp_path):
    _one_line_error(run_cli("diff", str(tmp_path / "nope"), str(tmp_path / "nope2"), timeout=60), "BASE path")
    _one_line_error(
        run_cli("diff", str(tmp_path), timeout=60), "not a fsdpbench run folder (no manifest.json)"
    )
    (tmp_path / "manifest.json").write_text(json.dumps({"arms": [{"label": "torch"}]}))
    _one_line_error(run_cli("diff", str(tmp_path), timeout=60), "lists 1 arm(s); a diff needs at least two")
    (tmp_path / "manifest.json").write_text(json.dumps({"arms": [{"label": "torch"}, {"label": "hyper"}]}))
    _one_line_error(run_cli("diff", str(tmp_path), timeout=60), "arm 'torch': no profiles under")
    _one_line_error(run_cli("diff", "a", "b", "c", timeout=60), "BASE TEST or one RUN_DIR, got 3 paths")


def test_cli_diffs_two_analysis_json_files_and_writes_json_and_markdown(tmp_path):
    def strip(a: dict) -> dict:  # what `fsdpbench analyze --json` writes: no event tables
        return {**a, "ranks": [{k: v for k, v in r.items() if k != "collective_events"} for r in a["ranks"]]}

    (tmp_path / "torch.json").write_bytes(orjson.dumps(strip(synthetic_analysis())))
    (tmp_path / "hyper.json").write_bytes(orjson.dumps(strip(synthetic_analysis(per_param=True, seed=3))))
    proc = run_cli(
        "diff",
        str(tmp_path / "torch.json"),
        str(tmp_path / "hyper.json"),
        "--json",
        str(tmp_path / "d.json"),
        "--md",
        str(tmp_path / "d.md"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "all_gather" in proc.stdout and "more fragmented" in proc.stdout
    out = orjson.loads((tmp_path / "d.json").read_bytes())
    assert (out["base"], out["test"]) == ("torch", "hyper")
    frag = next(f for f in out["findings"] if f["id"] == "fragmentation")
    # without per-call events the fit falls back to per-rank totals, which still recover alpha here
    assert out["fits"]["aggregate"]["all_gather"]["alpha_us"] == pytest.approx(40.0, rel=1e-6)
    assert frag["estimate"]["comm_delta_us"] == pytest.approx(-((120 - 12) + (60 - 6)) * 40.0)
    assert "## Conclusions: hyper vs torch" in (tmp_path / "d.md").read_text()


def test_diff_run_uses_a_fresh_analysis_json_and_diffs_every_test_arm_against_the_first(tmp_path):
    run = hand_built_run(tmp_path, ["torch", "hyper", "hyper-prefetch1"])
    results = diff_run(run)
    assert [(r.base, r.test) for r in results] == [("torch", "hyper"), ("torch", "hyper-prefetch1")]
    frag = results[0].finding("fragmentation")
    assert frag is not None and frag.estimate.one_bucket_per_layer.target_counts == {
        "all_gather": 13,
        "reduce_scatter": 7,
    }  # num_hidden_layers from the manifest's model
    assert results[0].fits["aggregate"]["all_gather"].ok


def test_diff_run_fits_the_collective_events_analysis_json_keeps(tmp_path):
    """The per-call fits come from analysis.json's events: synthetic_analysis's calls take exactly
    ALPHA_US + BETA_US_PER_BYTE * bytes, so each arm's own fit gives those back (one layer-sized call
    per layer in FSDP2's torch arm, one per tensor in hyper's)."""
    run = hand_built_run(tmp_path, ["torch", "hyper"])
    [result] = diff_run(run)
    for source in ("test", "pooled"):
        for kind in ("all_gather", "reduce_scatter"):
            fit = result.fits[source][kind]
            assert fit.ok, (source, kind, fit.status)
            assert fit.alpha_us == pytest.approx(ALPHA_US, rel=1e-6)
            assert fit.beta_us_per_byte == pytest.approx(BETA_US_PER_BYTE, rel=1e-6)
    cached = orjson.loads((run / "analysis.json").read_bytes())
    for source, arm in (("base", "torch"), ("test", "hyper")):
        calls = sum(t == "all_gather" for r in cached[arm]["ranks"] for t in r["collective_events"]["type"])
        assert result.fits[source]["all_gather"].n == calls
    # torch's calls all move one layer's bytes: fixed and per-byte cost cannot be told apart
    assert result.fits["base"]["all_gather"].status == "same_size"


def test_diff_run_reanalyzes_an_analysis_json_entry_without_collective_events(tmp_path):
    """An entry written before analysis.json kept the events would give no per-call fits, unlike the
    traces: it is stale, so the profiles are read (the placeholder's error proves it)."""
    run = hand_built_run(tmp_path, ["torch", "hyper"], events=False)
    with pytest.raises(InputError, match=r"profiles/torch: no profiles found"):
        diff_run(run)


def test_an_old_analysis_json_kept_without_its_profiles_still_diffs_with_aggregate_fits(tmp_path):
    import shutil

    run = hand_built_run(tmp_path, ["torch", "hyper"], events=False)
    shutil.rmtree(run / "profiles")  # only analysis.json was kept: nothing to analyse again
    [result] = diff_run(run)
    assert {k for k, v in result.fits.items() if v} == {"aggregate"}
    assert result.fits["aggregate"]["all_gather"].ok


def test_diff_run_names_the_side_of_malformed_collective_events(tmp_path):
    run = hand_built_run(tmp_path, ["torch", "hyper"])
    cached = orjson.loads((run / "analysis.json").read_bytes())
    del cached["hyper"]["ranks"][1]["collective_events"]["end_ns"]
    (run / "analysis.json").write_bytes(orjson.dumps(cached))
    with pytest.raises(
        InputError,
        match=r"analysis.json: \$.hyper.ranks\[1\].collective_events: object missing required field `end_ns`",
    ):
        diff_run(run)


def test_diff_run_names_collective_event_columns_of_different_lengths(tmp_path):
    run = hand_built_run(tmp_path, ["torch", "hyper"])
    cached = orjson.loads((run / "analysis.json").read_bytes())
    cached["hyper"]["ranks"][1]["collective_events"]["end_ns"].pop()
    (run / "analysis.json").write_bytes(orjson.dumps(cached))
    n = len(cached["hyper"]["ranks"][1]["collective_events"]["type"])
    with pytest.raises(
        InputError,
        match=rf"analysis.json: \$.hyper.ranks\[1\].collective_events: columns of different lengths .*'end_ns': {n - 1}",
    ):
        diff_run(run)


def test_diff_run_reanalyzes_when_profiles_are_newer_than_analysis_json(tmp_path):
    import os

    run = hand_built_run(tmp_path, ["torch", "hyper"])
    cached = run / "analysis.json"
    os.utime(cached, (cached.stat().st_atime, cached.stat().st_mtime - 100))
    # the placeholder is not a trace: the error proves the profiles were read, not the cached analysis.json
    with pytest.raises(InputError, match=r"profiles/torch: no profiles found"):
        diff_run(run)


def test_cli_writes_a_list_for_several_test_arms_and_never_imports_torch(tmp_path):
    import subprocess
    import sys

    run = hand_built_run(tmp_path, ["torch", "hyper", "hyper-prefetch1"])
    code = (
        "import sys; from fsdpbench.cli import main; rc = main(['diff', sys.argv[1], '--quiet']); "
        "assert 'torch' not in sys.modules, 'torch was imported'; raise SystemExit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = orjson.loads((run / "diff.json").read_bytes())
    assert [d["test"] for d in out] == ["hyper", "hyper-prefetch1"]
    assert (run / "diff.md").read_text().count("## Conclusions: ") == 2


# ---- a real profiled CPU run ------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_profiled_prefetch_run_diff_shows_the_overlap_change_and_a_prefetch_finding(profiled_ab_run):
    proc = run_cli("diff", str(profiled_ab_run), "--quiet", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = orjson.loads((profiled_ab_run / "diff.json").read_bytes())
    assert out["base"] != out["test"]
    mean = out["side_by_side"]["mean"]
    ob, ot = mean["base"]["overlap_ratio"], mean["test"]["overlap_ratio"]
    assert ob is not None and ot is not None and mean["delta"]["overlap_ratio"] == pytest.approx(ot - ob)
    assert {r["type"] for r in out["collectives"]} & {"all_gather", "reduce_scatter", "all_reduce"}
    prefetch = next(f for f in out["findings"] if f["id"] == "prefetch_change")
    # torch prefetch=0 is FSDP2's default in both directions (config.arms.PREFETCH_ZERO)
    assert prefetch["evidence"].startswith("prefetch default → 1 (")
    assert f"{ob:.1%} → {ot:.1%}" in prefetch["evidence"]
    md = (profiled_ab_run / "diff.md").read_text()
    assert "overlap ratio" in md and prefetch["title"] in md
    # two profile folders given directly, with labels
    prof = profiled_ab_run / "profiles"
    base_dir, test_dir = sorted(p for p in prof.iterdir() if p.is_dir())
    proc = run_cli(
        "diff",
        str(base_dir),
        str(test_dir),
        "--labels",
        "p0,p1",
        "--quiet",
        "--json",
        str(profiled_ab_run / "pair.json"),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    pair = orjson.loads((profiled_ab_run / "pair.json").read_bytes())
    assert (pair["base"], pair["test"]) == ("p0", "p1") and pair["collectives"] == out["collectives"]
    [result] = diff_run(profiled_ab_run)  # the Python API gives the same findings
    assert sorted(f.id for f in result.findings) == sorted(f["id"] for f in out["findings"])


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_run_folder_diffs_the_same_the_first_time_and_from_its_analysis_json(
    profiled_ab_run, tmp_path, monkeypatch
):
    """The first diff of a fresh run analyses the traces and writes analysis.json; every later one reads
    that file. Both give the same diff, per-call α–β fits included (they once appeared only in the first),
    and a diff of the two arms' traces (BASE TEST, never through analysis.json) agrees."""
    import shutil

    from fsdpbench.analysis import analyze
    from fsdpbench.results import run_folder

    monkeypatch.setenv("FSDPBENCH_NO_CACHE", "1")  # as `diff --no-cache`: read the traces themselves
    run = shutil.copytree(profiled_ab_run, tmp_path / "run")  # copy2: the profiles keep their mtimes
    for written in (run_folder.ANALYSIS, run_folder.DIFF_JSON, run_folder.DIFF_MD):
        (run / written).unlink(missing_ok=True)
    [first] = diff_run(run)
    assert (run / run_folder.ANALYSIS).is_file()
    [later] = diff_run(run)
    assert later.to_dict() == first.to_dict()
    base, test = (analyze([run_folder.profile_dir(run, arm)]) for arm in (first.base, first.test))
    from_traces = diff_analyses(base, test, base_label=first.base, test_label=first.test)
    for source in ("base", "test", "pooled"):
        assert later.fits[source], source
        assert {k: f.to_dict() for k, f in later.fits[source].items()} == {
            k: f.to_dict() for k, f in from_traces.fits[source].items()
        }

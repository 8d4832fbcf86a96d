"""The run folder's owner (run_folder.py): cached analysis.json and diff.json, launches, one profile encoding.

Staleness is decided by file times, so each test sets them with ``os.utime`` instead of sleeping; the
analysis itself is a stand-in that records which folders it was asked to read.
"""

from __future__ import annotations

import os
import time

import orjson
import pytest

from fsdpbench.analysis import Analysis, derived
from fsdpbench.analysis.output.result import convert_analysis
from fsdpbench.errors import InputError
from fsdpbench.results import run_folder
from fsdpbench.run.sweep import run_status
from helpers import stored_analysis, synthetic_analysis

T0 = time.time() - 1000  # profiles were written then; later times are T0 + seconds


def _entry(source: str) -> dict:
    """A minimal Analysis JSON as analysis.json keeps it (here: no collectives), told apart by its source."""
    events = {"type": [], "bytes": [], "start_ns": [], "end_ns": []}
    rank = {
        "rank": 0,
        "step_time_us": 1.0,
        "collectives": {},
        "ops": [],
        "sync": {},
        "collective_events": events,
    }
    return {"schema_version": 1, "sources": [source], "ranks": [rank]}


def _analysis(folder) -> Analysis:
    """What ``analyze`` returns, reduced to what the run folder uses, naming the folder it read."""
    return convert_analysis(_entry(folder.name), "stand-in")


def _sources(analyses: dict) -> dict:
    return {arm: a.sources[0] for arm, a in analyses.items()}


@pytest.fixture
def analyze_calls(monkeypatch):
    calls = []

    def analyze(paths, step=None):
        calls.append((paths[0].name, step))
        if (paths[0] / "rank0" / "broken").exists():
            raise InputError(f"{paths[0]}: not a trace")
        return _analysis(paths[0])

    monkeypatch.setattr("fsdpbench.analysis.analyze", analyze)
    return calls


def _touch(path, t):
    os.utime(path, (t, t))


def _run(tmp_path, labels=("torch", "hyper"), cached=None, analysis_at=T0 + 10):
    """A run folder: a manifest, one placeholder trace per arm (written at T0) and, when ``cached`` is given,
    an analysis.json written at ``analysis_at``."""
    arms = [{"label": lab, "backend": "torch", "prefetch": 0, "comm_fusion": False} for lab in labels]
    manifest = {"schema_version": 1, "arms": arms, "environment": {"world_size": 2}, "config": {}}
    (tmp_path / run_folder.MANIFEST).write_bytes(orjson.dumps(manifest))
    for lab in labels:
        trace = run_folder.profile_dir(tmp_path, lab) / "rank0" / "rank0.pt.trace.json.gz"
        trace.parent.mkdir(parents=True)
        trace.write_text("placeholder")
        _touch(trace, T0)
    if cached is not None:
        (tmp_path / run_folder.ANALYSIS).write_bytes(orjson.dumps(cached))
        _touch(tmp_path / run_folder.ANALYSIS, analysis_at)
    return tmp_path


def _trace(run, arm):
    return run_folder.profile_dir(run, arm) / "rank0" / "rank0.pt.trace.json.gz"


def test_fresh_entries_are_reused_and_only_the_arm_with_newer_profiles_is_analysed_again(
    tmp_path, analyze_calls
):
    run = _run(tmp_path, cached={"torch": _entry("cached torch"), "hyper": _entry("cached hyper")})
    _touch(_trace(run, "hyper"), T0 + 20)  # hyper was profiled again after analysis.json was written
    out = derived.ensure_analysis(run, ["torch", "hyper"])
    assert analyze_calls == [("hyper", None)]
    assert _sources(out) == {"torch": "cached torch", "hyper": "hyper"}
    saved = orjson.loads((run / run_folder.ANALYSIS).read_bytes())
    assert {arm: a["sources"] for arm, a in saved.items()} == {"torch": ["cached torch"], "hyper": ["hyper"]}
    assert saved["hyper"]["ranks"][0]["collective_events"] == _entry("")["ranks"][0]["collective_events"]
    assert _sources(derived.ensure_analysis(run)) == {"torch": "cached torch", "hyper": "hyper"}
    assert len(analyze_calls) == 1  # now both are fresh: nothing is read again


def test_a_missing_analysis_json_is_written_with_every_arm(tmp_path, analyze_calls):
    run = _run(tmp_path)
    out = derived.ensure_analysis(run)
    assert list(out) == ["torch", "hyper"]  # manifest order
    assert sorted(analyze_calls) == [("hyper", None), ("torch", None)]
    assert set(orjson.loads((run / run_folder.ANALYSIS).read_bytes())) == {"torch", "hyper"}


def test_cache_files_beside_the_traces_do_not_make_the_analysis_stale(tmp_path, analyze_calls):
    run = _run(tmp_path, cached={"torch": _entry("1"), "hyper": _entry("2")})
    cache = _trace(run, "torch").with_name(".rank0.pt.trace.json.gz.fsdpbench.npz")
    cache.write_bytes(b"columns")
    _touch(cache, T0 + 50)  # written by a later read of the traces, after analysis.json
    assert _sources(derived.ensure_analysis(run)) == {"torch": "1", "hyper": "2"}
    assert analyze_calls == []


def test_reanalyze_and_a_chosen_step_read_the_profiles_and_only_the_default_is_cached(
    tmp_path, analyze_calls
):
    run = _run(tmp_path, cached={"torch": _entry("1"), "hyper": _entry("2")})
    derived.ensure_analysis(run, ["torch"], step=3)
    assert analyze_calls == [("torch", 3)]
    assert orjson.loads((run / run_folder.ANALYSIS).read_bytes())["torch"]["sources"] == ["1"]
    derived.ensure_analysis(run, ["torch"], reanalyze=True)
    assert analyze_calls[-1] == ("torch", None)
    assert orjson.loads((run / run_folder.ANALYSIS).read_bytes())["torch"]["sources"] == ["torch"]


def test_an_arm_that_fails_is_named_and_its_stale_entry_dropped_or_the_error_raised(tmp_path, analyze_calls):
    run = _run(tmp_path, cached={"torch": _entry("1"), "hyper": _entry("2")})
    for arm in ("torch", "hyper"):
        _touch(_trace(run, arm), T0 + 20)
    (_trace(run, "hyper").parent / "broken").write_text("")
    with pytest.raises(InputError, match="hyper: not a trace"):
        derived.ensure_analysis(run)
    failed: dict[str, Exception] = {}
    out = derived.ensure_analysis(run, failed=failed)
    assert list(out) == ["torch"] and list(failed) == ["hyper"]
    assert set(orjson.loads((run / run_folder.ANALYSIS).read_bytes())) == {"torch"}


def test_an_arm_without_profiles_is_refused_naming_the_folder(tmp_path, analyze_calls):
    run = _run(tmp_path)
    with pytest.raises(InputError, match=r"arm 'fsdp1': no profiles under .*profiles/fsdp1"):
        derived.ensure_analysis(run, ["torch", "fsdp1"])


def test_diffs_are_reused_while_newer_than_the_analysis_and_always_come_as_a_list(tmp_path, monkeypatch):
    labels = ["torch", "hyper"]
    cached = {
        lab: stored_analysis(synthetic_analysis(per_param=i > 0, seed=i)) for i, lab in enumerate(labels)
    }
    run = _run(tmp_path, labels, cached=cached, analysis_at=T0 + 10)
    computed = []
    real = derived._diff_arms
    monkeypatch.setattr(derived, "_diff_arms", lambda *a: computed.append(1) or real(*a))

    first = derived.ensure_diffs(run, lambda diffs: f"{len(diffs)} diff(s)")
    assert [(d["base"], d["test"]) for d in first] == [("torch", "hyper")] and computed == [1]
    assert (
        orjson.loads((run / run_folder.DIFF_JSON).read_bytes())["test"] == "hyper"
    )  # one test arm: an object
    assert (run / run_folder.DIFF_MD).read_text() == "1 diff(s)"

    assert derived.ensure_diffs(run, lambda diffs: "unused") == first and computed == [1]
    _touch(run / run_folder.ANALYSIS, time.time() + 10)  # a newer analysis makes the diff stale
    assert derived.ensure_diffs(run, lambda diffs: "again") == first and computed == [1, 1]
    assert (run / run_folder.DIFF_MD).read_text() == "again"


def test_diff_list_reads_both_shapes_that_diff_json_has():
    assert run_folder.diff_list({"test": "hyper"}) == [{"test": "hyper"}]
    assert run_folder.diff_list([{"test": "a"}, {"test": "b"}]) == [{"test": "a"}, {"test": "b"}]
    assert run_folder.diff_list(None) == []


def test_write_atomic_leaves_no_temporary_file_and_replaces_the_old_content(tmp_path):
    path = tmp_path / "sub" / "x.json"
    run_folder.write_json(path, {"a": 1})
    run_folder.write_json(path, {"a": 2})
    assert orjson.loads(path.read_bytes()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_a_profile_launch_is_round_profile_round_in_its_folder_and_kind(tmp_path):
    assert (
        run_folder.launch_dir(tmp_path, "torch", run_folder.PROFILE_ROUND)
        == tmp_path / "launches/torch/profile"
    )
    assert run_folder.launch_dir(tmp_path, "torch", 0) == tmp_path / "launches/torch/round0"
    assert (
        run_folder.launch_kind(run_folder.PROFILE_ROUND) == "profile" and run_folder.launch_kind(2) == "timed"
    )


@pytest.mark.parametrize(
    ("profiles", "ok"),
    [
        ({"torch": "profiles/torch"}, True),  # the launcher records a profile only when its launch passed
        ({}, False),  # failed, not parsed (rc 0 but the launcher's check failed), or not run yet
    ],
)
def test_a_sweep_cell_is_done_only_when_every_arm_was_profiled(tmp_path, profiles, ok):
    """The profile rides in round 0 (or a --separate-profile launch): either way the manifest's
    ``profiles`` names it once that launch passed every check."""
    manifest = {"config": {"profile": True}, "arms": [{"label": "torch"}], "profiles": profiles}
    summary = {"arms": {"torch": {"status": "ok"}}, "missing": []}
    run_folder.write_json(tmp_path / run_folder.MANIFEST, manifest)
    run_folder.write_json(tmp_path / run_folder.SUMMARY, summary)
    assert run_status(tmp_path) == ("done" if ok else "partial")


def test_new_profiles_make_both_the_analysis_and_the_diff_stale(tmp_path, monkeypatch):
    labels = ["torch", "hyper"]
    cached = {
        lab: stored_analysis(synthetic_analysis(per_param=i > 0, seed=i)) for i, lab in enumerate(labels)
    }
    run = _run(tmp_path, labels, cached=cached, analysis_at=T0 + 10)
    derived.ensure_diffs(run, lambda diffs: "first")
    analysed = []

    fresh = convert_analysis(cached["hyper"], "stand-in")  # the new analysis of hyper, for a trace read
    monkeypatch.setattr(
        "fsdpbench.analysis.analyze", lambda paths, step=None: analysed.append(paths[0].name) or fresh
    )
    _touch(_trace(run, "hyper"), time.time() + 20)  # profiled again after diff.json was written
    diffs = derived.ensure_diffs(run, lambda diffs: "second")
    assert analysed == ["hyper"] and [d["test"] for d in diffs] == ["hyper"]
    assert (run / run_folder.DIFF_MD).read_text() == "second"


@pytest.mark.parametrize(
    ("rounds_auto", "ok"),
    [
        ({"rounds": 3, "stopped": True, "reason": "settled"}, True),
        ({"rounds": 3, "stopped": False, "reason": None}, False),  # it had decided on a fourth round
        (None, False),  # the run ended between its last round and the check
    ],
)
def test_a_sweep_cell_with_rounds_auto_is_done_only_once_it_stopped(tmp_path, rounds_auto, ok):
    manifest = {"config": {"rounds_auto": True}, "arms": [{"label": "torch"}], "rounds_auto": rounds_auto}
    run_folder.write_json(tmp_path / run_folder.MANIFEST, manifest)
    run_folder.write_json(tmp_path / run_folder.SUMMARY, {"arms": {"torch": {"status": "ok"}}, "missing": []})
    assert run_status(tmp_path) == ("done" if ok else "partial")

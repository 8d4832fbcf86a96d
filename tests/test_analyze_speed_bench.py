"""benchmarks/analyze_speed.py runs end to end on a tiny trace and reports what it says it reports:
wall and CPU seconds and peak memory for every run, and the ratios the issue's targets are read from."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from helpers import REPO


def test_benchmark_reports_time_cpu_and_memory_for_every_run(tmp_path):
    out = tmp_path / "speed.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "analyze_speed.py"), "--ranks", "2", "--events", "300"]
        + ["--skip-hta", "--repeat", "1", "--keep", str(tmp_path / "traces"), "--json", str(out), "--split"]
        + ["--src", str(REPO / "src")],  # an "older" src: the same one, timed beside it
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    got = orjson.loads(out.read_bytes())
    assert set(got["runs"]) == {
        "fsdpbench analyze",
        "fsdpbench analyze (cached)",
        "fsdpbench analyze (first)",
        f"orjson.loads ({got['workers']} procs)",
        "orjson.loads (1 proc)",
        "fsdpbench analyze (split)",
        "fsdpbench analyze, --src",
        "fsdpbench analyze (split), --src",
        "fsdpbench analyze (first), --src",
    }
    for name, r in got["runs"].items():
        assert r["wall_s"] > 0 and r["cpu_s"] > 0, name
        # RSS counts shared pages in every process, PSS splits them: the RSS sum is never the smaller
        assert 0 < r["max_proc_rss_mb"], name
        assert r["peak_rss_mb"] >= r["peak_pss_mb"] >= 0, name
    assert got["ratios"]["cached_over_cold_cpu"] > 0
    ours, src = got["runs"]["fsdpbench analyze"], got["runs"]["fsdpbench analyze, --src"]
    assert got["ratios"]["cold_over_src_cold_cpu"] == ours["cpu_s"] / src["cpu_s"]
    assert "--src's cold" in done.stdout
    # the first run (its caches removed, then written) against --src's
    first, src_first = (
        got["runs"]["fsdpbench analyze (first)"],
        got["runs"]["fsdpbench analyze (first), --src"],
    )
    assert got["ratios"]["first_over_src_first_cpu"] == first["cpu_s"] / src_first["cpu_s"]
    assert "first run (writing its caches)" in done.stdout
    # the split run's own figures against the OS's total for its process tree (os.wait4): they leave
    # out only the interpreter's teardown after the analysis is written
    split = got["runs"]["fsdpbench analyze (split)"]
    # 2 ranks, 2 processes: the main process and one forked child (which may find both ranks taken)
    assert split["main_cpu_s"] > 0 and split["workers_cpu_s"] >= 0
    assert 0.5 * split["cpu_s"] <= split["main_cpu_s"] + split["workers_cpu_s"] <= split["cpu_s"] + 0.01
    assert "main process" in done.stdout
    assert "CPU time" in done.stdout and "peak PSS MB" in done.stdout
    # the caches a cached run reads were written beside the traces
    assert sorted(p.name for p in (tmp_path / "traces").glob(".*.fsdpbench.npz")) == [
        ".rank0.json.gz.fsdpbench.npz",
        ".rank1.json.gz.fsdpbench.npz",
    ]


def test_split_child_charges_an_in_process_analysis_to_the_main_process(tmp_path):
    """With one worker the ranks are read in the main process: the child reports no worker time at all,
    and its main-process time is the OS's total for it (os.wait4), teardown apart."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import analyze_speed
    finally:
        sys.path.pop(0)
    traces = tmp_path / "traces"
    traces.mkdir()
    analyze_speed.generate(traces, 2, 300)
    out = tmp_path / "split.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", analyze_speed._SPLIT, str(traces), "1", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    main_s, workers_s = (float(x) for x in out.read_text().split())
    assert workers_s == 0.0
    assert 0.5 * (usage.ru_utime + usage.ru_stime) <= main_s <= usage.ru_utime + usage.ru_stime + 0.01

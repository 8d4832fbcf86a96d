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
        + ["--skip-hta", "--repeat", "1", "--keep", str(tmp_path / "traces"), "--json", str(out)],
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
        f"orjson.loads ({got['workers']} procs)",
        "orjson.loads (1 proc)",
    }
    for name, r in got["runs"].items():
        assert r["wall_s"] > 0 and r["cpu_s"] > 0, name
        # RSS counts shared pages in every process, PSS splits them: the RSS sum is never the smaller
        assert 0 < r["max_proc_rss_mb"], name
        assert r["peak_rss_mb"] >= r["peak_pss_mb"] >= 0, name
    assert got["ratios"]["cached_over_cold_cpu"] > 0
    assert "CPU time" in done.stdout and "peak PSS MB" in done.stdout
    # the caches a cached run reads were written beside the traces
    assert sorted(p.name for p in (tmp_path / "traces").glob(".*.fsdpbench.npz")) == [
        ".rank0.json.gz.fsdpbench.npz",
        ".rank1.json.gz.fsdpbench.npz",
    ]

"""benchmarks/large_trace.py: its generated ranks hold what it says (read back from the raw file with
gzip + orjson), its rank-count run reports time, memory and collectives matched across every rank, and
measuring a rank whose events all lie in its one profiled step allocates less than a copy of its table."""

from __future__ import annotations

import gzip
import importlib.util
import os
import subprocess
import sys
import tracemalloc
from collections import Counter
from dataclasses import fields

import numpy as np
import orjson
import pytest

from fsdpbench.analysis import pipeline
from fsdpbench.trace import find_all, read_rank
from helpers import REPO


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("large_trace", REPO / "benchmarks" / "large_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_rank_holds_kernels_launches_cpu_ops_collectives_and_ranges(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "BLOCK", 1_000)  # three blocks, the last one short
    path = tmp_path / "rank1.json.gz"
    size = bench.write_rank(path, rank=1, world=4, kernels=2_500)
    raw = gzip.decompress(path.read_bytes())
    assert size == len(raw)
    doc = orjson.loads(raw)
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 4}
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    cats = Counter(e["cat"] for e in xs)
    # per block: n kernels (n/50 of them memcpy), n launches, n CPU ops, 17 ranges; one step over all
    assert cats["kernel"] + cats["gpu_memcpy"] == 2_500
    assert cats["cuda_runtime"] == cats["cpu_op"] == 2_500
    assert cats["user_annotation"] == 3 * (2 * bench.UNITS + 1) + 1
    comm = [e for e in xs if e["cat"] == "kernel" and "Group size" in e["args"]]
    marks = [e for e in xs if e["name"] == "record_param_comms"]
    assert len(comm) == len(marks) == 1_000 // 20 * 2 + 500 // 20
    assert [e["args"]["Seq"] for e in marks] == list(range(len(marks)))
    step = next(e for e in xs if e["name"] == "ProfilerStep#3")
    assert all(step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] for e in xs)
    # blocks follow each other: every kernel of block k ends before block k+1's first launch
    launches = sorted(e["ts"] for e in xs if e["cat"] == "cuda_runtime")
    assert launches[-1] - launches[0] > 2 * 1e6  # three blocks, each starting on a whole second


def test_scale_run_matches_every_collective_across_ranks(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "large_trace.py"), "--dir", str(tmp_path / "t")]
        + ["--scale", "2", "3", "--rank-kernels", "400", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    got = orjson.loads(out.read_bytes())["scale"]
    for ranks in (2, 3):
        row = got[f"{ranks} fsdpbench analyze"]
        run = row["run"]
        assert run["wall_s"] > 0 and run["cpu_s"] > 0 and run["max_proc_rss_mb"] > 0
        # the collectives in the raw file of rank 0 (every rank issues the same ones)
        raw = orjson.loads(gzip.decompress((tmp_path / "t" / f"r{ranks}x400" / "rank0.json.gz").read_bytes()))
        n_comm = sum(1 for e in raw["traceEvents"] if e.get("name") == "record_param_comms")
        assert row["waits"] == {
            "match": "group_seq",
            "instances": n_comm,
            "ranks_matched": ranks,
            "unmatched": 0,
        }


def test_join_scale_joins_every_rank_from_compact_results_alone(tmp_path):
    out = tmp_path / "join.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "large_trace.py"), "--dir", str(tmp_path / "t")]
        + ["--scale", "3", "--rank-kernels", "400", "--join", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    row = orjson.loads(out.read_bytes())["scale"]["3"]
    folder = tmp_path / "t" / "join3x400"
    # one trace (rank 0's), three compact results; the join matched every collective of the raw file
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "rank0.json.gz",
        *(f"rank{r}.json.gz.fsdpbench-rank" for r in range(3)),
    ]
    raw = orjson.loads(gzip.decompress((folder / "rank0.json.gz").read_bytes()))
    n_comm = sum(1 for e in raw["traceEvents"] if e.get("name") == "record_param_comms")
    assert row["waits"] == {"match": "group_seq", "instances": n_comm, "ranks_matched": 3}
    assert row["trace_bytes"] == (folder / "rank0.json.gz").stat().st_size
    for name in ("join", "join + replay"):
        assert row[name]["cpu_s"] > 0 and row[name]["mb_per_rank"] == row[name]["max_proc_rss_mb"] / 3


def _table_bytes(table) -> int:
    return sum(
        getattr(table, f.name).nbytes
        if isinstance(getattr(table, f.name), np.ndarray)
        else getattr(table, f.name).codes.nbytes
        for f in fields(table)
        if f.name != "comm"
    )


def test_measuring_a_one_step_rank_does_not_copy_its_table(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("FSDPBENCH_NO_CACHE", "1")
    monkeypatch.setattr(bench, "BLOCK", 10_000)
    path = tmp_path / "rank0.json.gz"
    bench.write_rank(path, rank=0, world=2, kernels=20_000)
    trace = read_rank(find_all([path])[0])
    assert set(trace.table.step.tolist()) == {3}  # every event in the one profiled step
    table = _table_bytes(trace.table)
    tracemalloc.start()
    try:
        pipeline.rank_metrics(trace, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # numpy reports its buffers to tracemalloc; a copy of the table alone would be ``table`` bytes
    assert peak < 0.9 * table, (peak, table)


def test_measuring_a_rank_with_ranges_does_not_import_numpy_ma(bench, tmp_path, monkeypatch):
    """numpy 2's ``np.unique`` imports numpy.ma on first use (~30 ms in every worker process): reading and
    measuring a rank with fsdpbench's ranges (units × phases, collective places) must not need it."""
    monkeypatch.setattr(bench, "BLOCK", 2_000)
    path = tmp_path / "rank0.json.gz"
    bench.write_rank(path, rank=0, world=2, kernels=2_000)
    code = (
        "import sys\n"
        "from fsdpbench.analysis import pipeline\n"
        "from fsdpbench.trace import find_all\n"
        "out = pipeline._analyze_one(find_all([sys.argv[1]])[0], None, False, None)\n"
        "assert out.metrics.units, out.error\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FSDPBENCH_NO_CACHE": "1", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

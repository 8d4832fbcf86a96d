"""The numpy event table and the metrics computed on it, against pandas computing the same from the
table's DataFrame (an independent implementation: groupby / value_counts / Categorical), and the
promise behind it: a cold ``fsdpbench analyze`` of Kineto traces never imports pandas."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fsdpbench.analysis.rank.collectives import collective_events, summarize
from fsdpbench.analysis.rank.ops import KERNEL_CATEGORIES, kernel_time_us, op_stats
from fsdpbench.analysis.rank.sync import sync_counts
from fsdpbench.trace import TASKS, find_all, read_rank
from fsdpbench.trace.kineto_cpu import outermost
from fsdpbench.trace.synthetic import make_trace, write_trace
from fsdpbench.trace.table import Coded, EventTable, make_table
from helpers import REPO


def _traces(shared) -> list:
    kineto = sorted((shared / "fixtures" / "kineto").glob("*/*.json*"))
    return [read_rank(s) for p in kineto for s in find_all([p])]


@pytest.fixture(scope="module")
def fixture_traces(shared_fixtures, tmp_path_factory):
    synthetic = write_trace(
        tmp_path_factory.mktemp("syn") / "rank0.json.gz", make_trace(device_events=3000, seed=3)
    )
    gloo = REPO / "tests" / "fixtures" / "traces" / "gloo_min.json"
    return [
        *_traces(shared_fixtures),
        read_rank(synthetic),
        read_rank(gloo, cache=False),
    ]  # no cache in the repo


def test_op_stats_equal_a_pandas_groupby(fixture_traces):
    for t in fixture_traces:
        df = t.events
        k = df[df["device"] & df["category"].isin(KERNEL_CATEGORIES)]
        dur = k["end_ns"] - k["start_ns"]
        g = dur.groupby(k["op_type"].astype(str)).agg(["count", "sum"])
        want = {o: (int(c), s / 1000.0) for o, c, s in zip(g.index, g["count"], g["sum"], strict=True)}
        rows = op_stats(t.table)
        assert {r["op_type"]: (r["count"], r["total_us"]) for r in rows} == want, t.source
        assert [r["total_us"] for r in rows] == sorted((r["total_us"] for r in rows), reverse=True)
        assert kernel_time_us(rows) == pytest.approx(float(dur.sum()) / 1000.0, rel=1e-12)


def test_collectives_and_sync_counts_equal_pandas(fixture_traces):
    for t in fixture_traces:
        df = t.events
        comm = df[df["device"] & (df["category"] == "comm")]
        types = comm["collective"].astype(str).replace("", "other")
        got = summarize(collective_events(t.table))
        assert {k: v["count"] for k, v in got.items()} == types.value_counts().to_dict(), t.source
        for ctype, v in got.items():
            d = (comm["end_ns"] - comm["start_ns"])[types == ctype]
            assert v["time_us"] == float(d.sum()) / 1000.0
        counts = df["task"].value_counts()
        assert sync_counts(t.table) == {k: int(counts.get(k, 0)) for k in TASKS}, t.source


def test_coded_matches_pandas_categorical():
    rng = np.random.default_rng(0)
    words = ["b", "a", "stream 7", "", "nccl:all_reduce", None]
    values = [words[i] for i in rng.integers(0, len(words), 500)]
    mine, theirs = Coded.of(values), pd.Categorical(values)
    assert mine.categories == list(theirs.categories)
    assert np.array_equal(mine.codes, theirs.codes)
    fixed = Coded.of(values, ["a", "b"])  # outside the given categories: missing
    want = pd.Series(values, dtype=object).map({"a": 0, "b": 1}).fillna(-1).astype(int)
    assert fixed.codes.tolist() == want.tolist()
    assert list(mine.to_categorical()) == list(theirs)


def test_a_table_survives_the_dataframe_round_trip(fixture_traces):
    for t in fixture_traces:
        back = EventTable.from_frame(t.events)
        pd.testing.assert_frame_equal(back.to_frame(), t.events)


def test_make_table_sorts_by_start_and_keeps_rows_together():
    t = make_table(
        name=["c", "a", "b"],
        category=np.array(["comm", "compute", "other"], dtype=object),
        start_ns=np.array([30, 10, 20]),
        end_ns=np.array([31, 11, 21]),
        lane=["s1", "s2", "s1"],
        device=np.array([True, True, False]),
    )
    assert t.start_ns.tolist() == [10, 20, 30]
    assert t.name.strings().tolist() == ["a", "b", "c"]
    assert t.category.strings().tolist() == ["compute", "other", "comm"]
    assert t.lane.strings().tolist() == ["s2", "s1", "s1"]


def _outermost_brute(idx, start, end, lane):
    """Spans not strictly inside another span of ``idx`` on the same lane (equal spans: the first)."""
    out = []
    for i in idx:
        inside = False
        for j in idx:
            if j == i or (lane is not None and lane[i] != lane[j]):
                continue
            contains = start[j] <= start[i] and end[i] <= end[j]
            if contains and ((start[j], -end[j]) < (start[i], -end[i]) or j < i):
                inside = True
                break
        if not inside:
            out.append(i)
    return sorted(out)


@pytest.mark.parametrize("with_lanes", [False, True])
def test_outermost_equals_a_brute_force_nesting_check(with_lanes):
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = 25
        start = rng.integers(0, 50, n)
        end = start + rng.integers(1, 30, n)
        lane = rng.integers(0, 3, n) if with_lanes else None
        # properly nested spans only (what a profiler writes on one thread): drop partial overlaps
        keep: list[int] = []
        for i in np.argsort(start, kind="stable"):
            ok = all(
                (lane is not None and lane[i] != lane[j])
                or end[i] <= start[j]
                or end[j] <= start[i]
                or (start[j] <= start[i] and end[i] <= end[j])
                or (start[i] <= start[j] and end[j] <= end[i])
                for j in keep
            )
            if ok:
                keep.append(int(i))
        idx = np.array(sorted(keep))
        got = sorted(outermost(idx, start, end, lane).tolist())
        assert got == _outermost_brute(idx.tolist(), start, end, lane)


def _two_ranks(folder) -> None:
    for r in range(2):
        write_trace(folder / f"rank{r}.json.gz", make_trace(rank=r, world_size=2, device_events=2000))


def _analyze_in_a_subprocess(folder, *args: str, cache: bool) -> list[str]:
    """Run ``fsdpbench analyze FOLDER --json FOLDER/a.json ARGS`` in a fresh interpreter; return which of
    numpy and pandas it imported."""
    code = (
        "import sys\n"
        "from fsdpbench.cli import main\n"
        f"sys.argv = ['fsdpbench', 'analyze', {str(folder)!r}, '--json', {str(folder / 'a.json')!r}, *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "import json\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas'})))\n"
    )
    env = {k: v for k, v in os.environ.items() if not cache or k != "FSDPBENCH_NO_CACHE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cold_analyze_of_kineto_traces_never_imports_pandas(tmp_path):
    _two_ranks(tmp_path)
    assert _analyze_in_a_subprocess(tmp_path, "--no-cache", "--workers", "1", cache=False) == ["numpy"]
    assert (tmp_path / "a.json").stat().st_size > 0


def test_a_cached_analyze_imports_neither_numpy_nor_pandas(tmp_path):
    _two_ranks(tmp_path)
    assert _analyze_in_a_subprocess(tmp_path, cache=True) == ["numpy"]  # the first run measures the ranks
    cold = (tmp_path / "a.json").read_bytes()
    assert _analyze_in_a_subprocess(tmp_path, cache=True) == []
    assert (tmp_path / "a.json").read_bytes() == cold

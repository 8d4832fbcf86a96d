"""The per-rank result cache beside Kineto traces (analysis/result_cache.py): the reference is the
same analysis with every cache off (``FSDPBENCH_NO_CACHE=1``, what ``--no-cache`` sets), so a cached
result must equal a recomputed one field by field, and a second run must neither read an event table
nor run ``rank_metrics``."""

from __future__ import annotations

import os
import zlib

import pandas as pd
import pytest

from fsdpbench import analysis
from fsdpbench.analysis import pipeline, result_cache
from fsdpbench.trace import cache as table_cache
from fsdpbench.trace.synthetic import make_trace, write_trace


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch):
    monkeypatch.delenv(table_cache.NO_CACHE_ENV, raising=False)


def _ranks(folder, n: int = 3, steps: int = 1) -> None:
    for rank in range(n):
        write_trace(
            folder / f"rank{rank}.json.gz",
            make_trace(rank=rank, world_size=n, device_events=300, steps=steps, seed=rank, orphans=2),
        )


def _reference(folder, monkeypatch, **kw) -> analysis.Analysis:
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    try:
        return analysis.analyze([folder], workers=1, **kw)
    finally:
        monkeypatch.delenv(table_cache.NO_CACHE_ENV)


def _count_metrics(monkeypatch) -> list[str]:
    """Spy on rank_metrics; returns the list of sources it was run on."""
    calls: list[str] = []
    real = pipeline.rank_metrics

    def spy(trace, step=None):
        calls.append(trace.source)
        return real(trace, step)

    monkeypatch.setattr(pipeline, "rank_metrics", spy)
    return calls


def _forbid(monkeypatch, module, reader: str) -> None:
    """Make ``module.reader`` fail the test: a cached result must not read the trace."""

    def no_read(*args, **kwargs):
        raise AssertionError(f"{reader} was called although the rank's result is cached")

    monkeypatch.setattr(module, reader, no_read)


def _same(got: analysis.Analysis, ref: analysis.Analysis) -> None:
    assert got.record().to_dict() == ref.record().to_dict()
    for a, b in zip(got.ranks, ref.ranks, strict=True):
        pd.testing.assert_frame_equal(a.collective_events, b.collective_events)  # the α–β fits' input
        pd.testing.assert_frame_equal(a.op_stats, b.op_stats)
        for sa, sb in zip(a.steps, b.steps, strict=True):
            pd.testing.assert_frame_equal(sa.op_stats, sb.op_stats)
        assert (a.source, a.format, a.mode, a.device_span_ns) == (
            b.source,
            b.format,
            b.mode,
            b.device_span_ns,
        )


@pytest.mark.parametrize("steps", [1, 2])
def test_second_run_equals_a_no_cache_run_without_reading_or_measuring(tmp_path, monkeypatch, steps):
    _ranks(tmp_path, steps=steps)
    ref = _reference(tmp_path, monkeypatch)
    first = analysis.analyze([tmp_path], workers=1)  # writes both caches
    assert all(result_cache.cache_path(p).is_file() for p in tmp_path.glob("rank*.json.gz"))

    _forbid(monkeypatch, pipeline, "read_rank")
    calls = _count_metrics(monkeypatch)
    second = analysis.analyze([tmp_path], workers=2)
    assert calls == []
    _same(first, ref)
    _same(second, ref)
    assert second.warnings == ref.warnings  # reader warnings (orphans) come back from the cache too


def test_diff_fits_from_cached_results_equal_recomputed_ones(tmp_path, monkeypatch):
    from fsdpbench.analysis.estimate import whatif

    _ranks(tmp_path)
    ref = _reference(tmp_path, monkeypatch)
    analysis.analyze([tmp_path], workers=1)
    got = analysis.analyze([tmp_path], workers=1)
    assert whatif.fit_events(pd.concat([r.collective_events for r in got.ranks])) == whatif.fit_events(
        pd.concat([r.collective_events for r in ref.ranks])
    )


def test_a_changed_step_or_analysis_source_recomputes(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2, steps=2)
    analysis.analyze([tmp_path], workers=1)
    calls = _count_metrics(monkeypatch)
    step = analysis.analyze([tmp_path], workers=1, step=4)
    assert len(calls) == 2  # another step selection: computed again
    _same(step, _reference(tmp_path, monkeypatch, step=4))
    calls.clear()
    analysis.analyze([tmp_path], workers=1, step=4)
    assert calls == []  # and cached under its own key
    monkeypatch.setattr(result_cache, "analysis_hash", lambda: "another analysis version")
    analysis.analyze([tmp_path], workers=1, step=4)
    assert len(calls) == 2


def test_analysis_hash_covers_the_analysis_and_table_sources():
    from pathlib import Path

    here = Path(result_cache.__file__).parent
    # the hash is over these files' bytes: a change to any of them changes it
    assert (here / "rank" / "overlap.py").is_file() and (here.parent / "trace" / "table.py").is_file()
    result_cache.analysis_hash.cache_clear()
    h = result_cache.analysis_hash()
    assert len(h) == 32 and h == result_cache.analysis_hash()


def test_a_changed_trace_recomputes(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2)
    analysis.analyze([tmp_path], workers=1)
    write_trace(tmp_path / "rank1.json.gz", make_trace(rank=1, world_size=2, device_events=500, seed=9))
    calls = _count_metrics(monkeypatch)
    got = analysis.analyze([tmp_path], workers=1)
    assert [os.path.basename(c) for c in calls] == ["rank1.json.gz"]
    _same(got, _reference(tmp_path, monkeypatch))


def test_a_damaged_result_cache_is_ignored(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2)
    analysis.analyze([tmp_path], workers=1)
    result_cache.cache_path(tmp_path / "rank0.json.gz").write_bytes(b"{not json")
    _same(analysis.analyze([tmp_path], workers=1), _reference(tmp_path, monkeypatch))


def test_an_unwritable_folder_skips_quietly(tmp_path, monkeypatch, caplog):
    _ranks(tmp_path, n=2)
    ref = _reference(tmp_path, monkeypatch)
    tmp_path.chmod(0o555)
    try:
        got = analysis.analyze([tmp_path], workers=1)
    finally:
        tmp_path.chmod(0o755)
    assert not list(tmp_path.glob(".*.fsdpbench.metrics"))
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    _same(got, ref)


def test_no_cache_neither_reads_nor_writes_results(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2)
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    analysis.analyze([tmp_path], workers=1)
    assert not list(tmp_path.glob(".*.fsdpbench.metrics"))


def test_cached_cli_run_prints_the_same_tables_and_json_without_importing_pandas(tmp_path):
    """The reference is the same CLI run with ``--no-cache``; the import check runs the CLI's own
    entry point in a fresh interpreter and lists the modules it loaded."""
    import sys

    import orjson

    from helpers import run_cli

    _ranks(tmp_path)
    env = {table_cache.NO_CACHE_ENV: ""}
    ref = run_cli("analyze", str(tmp_path), "--no-cache", "--wide", env=env)
    ref_json = run_cli("analyze", str(tmp_path), "--no-cache", "--json", "-", env=env)
    run_cli("analyze", str(tmp_path), "--json", os.devnull, env=env)  # writes the caches
    got = run_cli("analyze", str(tmp_path), "--wide", env=env)
    got_json = run_cli("analyze", str(tmp_path), "--json", "-", env=env)
    assert ref.returncode == got.returncode == 0, ref.stderr + got.stderr
    assert got.stdout == ref.stdout and "Top 15 op types" in got.stdout
    assert orjson.loads(got_json.stdout) == orjson.loads(ref_json.stdout)
    code = (
        "import sys; from fsdpbench.cli import main; rc = main(['analyze', sys.argv[1], '--json', sys.argv[2]]); "
        "print(sorted(m for m in sys.modules if m.startswith(('pandas', 'msgspec', 'concurrent.futures.process'))))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), os.devnull],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, table_cache.NO_CACHE_ENV: ""},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"  # no pandas, no decoder, no process pool


def _ascend_copy(tmp_path):
    """The in-repo two-rank torch_npu level-0 export (with step_trace_time.csv), writable."""
    import shutil

    from helpers import REPO

    folder = tmp_path / "ascend"
    shutil.copytree(
        REPO / "tests" / "fixtures" / "ascend_level0", folder, ignore=shutil.ignore_patterns(".*")
    )
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    return folder


def test_ascend_folders_are_cached_beside_them_and_equal_a_no_cache_run(tmp_path, monkeypatch):
    from fsdpbench.trace import ascend

    folder = _ascend_copy(tmp_path)
    ref = _reference(folder, monkeypatch)
    assert any(r.cross_check is not None for r in ref.ranks)  # the profiler's own step numbers
    analysis.analyze([folder], workers=1)
    ranks = sorted(folder.glob("*_ascend_pt"))
    assert ranks and all(result_cache.cache_path(p).is_file() for p in ranks)
    assert all(table_cache.cache_path(p).is_file() for p in ranks)

    _forbid(monkeypatch, ascend, "read_ascend")
    calls = _count_metrics(monkeypatch)
    got = analysis.analyze([folder], workers=2)
    assert calls == []
    _same(got, ref)
    assert got.warnings == ref.warnings  # the reader's and the cross-check's warnings
    for a, b in zip(got.ranks, ref.ranks, strict=True):
        pd.testing.assert_frame_equal(a.cross_check, b.cross_check)


def test_an_ascend_table_cache_reads_back_the_same_trace(tmp_path, monkeypatch):
    from fsdpbench.trace import ascend, read_rank

    folder = _ascend_copy(tmp_path)
    rank0 = sorted(folder.glob("*_ascend_pt"))[0]
    fresh = read_rank(rank0)  # writes the table cache
    monkeypatch.setattr(ascend, "read_ascend", lambda *a, **k: pytest.fail("read instead of the cache"))
    again = read_rank(rank0)
    pd.testing.assert_frame_equal(again.events, fresh.events)
    pd.testing.assert_frame_equal(again.steps, fresh.steps)
    pd.testing.assert_frame_equal(again.cross_check, fresh.cross_check)
    assert (again.rank, again.warnings, again.recorded_tasks) == (
        fresh.rank,
        fresh.warnings,
        fresh.recorded_tasks,
    )


def test_a_changed_file_in_an_ascend_folder_recomputes_that_rank(tmp_path, monkeypatch):
    folder = _ascend_copy(tmp_path)
    analysis.analyze([folder], workers=1)
    rank1 = sorted(folder.glob("*_ascend_pt"))[1]
    changed = next((rank1 / "ASCEND_PROFILER_OUTPUT").glob("*.csv"))
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    calls = _count_metrics(monkeypatch)
    analysis.analyze([folder], workers=1)
    assert [os.path.basename(c) for c in calls] == [rank1.name]


def test_a_trace_copied_with_its_cache_reports_where_it_is_now(tmp_path, monkeypatch):
    import shutil

    (tmp_path / "a").mkdir()
    _ranks(tmp_path / "a", n=2)
    analysis.analyze([tmp_path / "a"], workers=1)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # caches and mtimes come along: their keys still match
    calls = _count_metrics(monkeypatch)
    got = analysis.analyze([tmp_path / "b"], workers=1)
    assert calls == []
    assert [r.source for r in got.ranks] == [str(tmp_path / "b" / f"rank{i}.json.gz") for i in range(2)]


def _spy_wait_transfer(monkeypatch) -> list[int]:
    """Count calls of the cross-rank wait/transfer computation."""
    from fsdpbench.analysis.crossrank import waits

    calls: list[int] = []
    real = waits.wait_transfer

    def spy(ranks, *args, **kwargs):
        calls.append(len(ranks))
        return real(ranks, *args, **kwargs)

    monkeypatch.setattr(waits, "wait_transfer", spy)
    return calls


def test_a_second_run_takes_the_cross_rank_waits_from_their_cache(tmp_path, monkeypatch):
    _ranks(tmp_path, n=3)
    ref = _reference(tmp_path, monkeypatch)
    assert ref.waits["instances"] > 0 and "transfer_ns" in ref.ranks[0].collective_events
    calls = _spy_wait_transfer(monkeypatch)
    analysis.analyze([tmp_path], workers=1)
    assert calls == [3] and result_cache.cross_path(tmp_path / "rank0.json.gz").is_file()
    second = analysis.analyze([tmp_path], workers=1)
    assert calls == [3]  # not computed again
    _same(second, ref)  # waits, warnings and every rank's transfer_ns column as recomputed
    assert second.warnings == ref.warnings


def test_a_changed_rank_or_rank_set_recomputes_the_cross_rank_waits(tmp_path, monkeypatch):
    _ranks(tmp_path, n=3)
    analysis.analyze([tmp_path], workers=1)
    calls = _spy_wait_transfer(monkeypatch)
    write_trace(tmp_path / "rank2.json.gz", make_trace(rank=2, world_size=3, device_events=500, seed=9))
    _same(analysis.analyze([tmp_path], workers=1), _reference(tmp_path, monkeypatch))
    assert calls == [3, 3]  # the analysis and its no-cache reference
    two = [tmp_path / "rank0.json.gz", tmp_path / "rank1.json.gz"]  # same first rank, other set
    got = analysis.analyze(two, workers=1)
    assert calls[-1] == 2
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    assert got.record().to_dict() == analysis.analyze(two, workers=1).record().to_dict()


def test_a_damaged_cross_rank_cache_is_ignored(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2)
    analysis.analyze([tmp_path], workers=1)
    path = result_cache.cross_path(tmp_path / "rank0.json.gz")
    path.write_bytes(b'{"key": 1, "waits": [')
    _same(analysis.analyze([tmp_path], workers=1), _reference(tmp_path, monkeypatch))
    raw = zlib.decompress(path.read_bytes())  # rewritten: JSON, newline, the ranks' transfer_ns columns
    path.write_bytes(zlib.compress(raw[:-8]))  # one value short
    calls = _spy_wait_transfer(monkeypatch)
    _same(analysis.analyze([tmp_path], workers=1), _reference(tmp_path, monkeypatch))
    assert calls == [2, 2]  # recomputed (and the reference)


def test_a_result_cache_with_truncated_exposed_intervals_is_recomputed(tmp_path, monkeypatch):
    _ranks(tmp_path, n=2)
    analysis.analyze([tmp_path], workers=1)
    path = result_cache.cache_path(tmp_path / "rank0.json.gz")
    raw = zlib.decompress(path.read_bytes())
    assert raw.count(b"\n") >= 1 and len(raw) - raw.index(b"\n") - 1 > 16  # JSON, newline, intervals
    path.write_bytes(zlib.compress(raw[:-8]))
    result_cache.cross_path(tmp_path / "rank0.json.gz").unlink()
    calls = _count_metrics(monkeypatch)
    got = analysis.analyze([tmp_path], workers=1)
    assert [os.path.basename(c) for c in calls] == ["rank0.json.gz"]
    _same(got, _reference(tmp_path, monkeypatch))

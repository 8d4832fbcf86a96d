"""The columnar event-table cache beside Kineto traces (trace/cache.py): the reference is the reader
itself with the cache off (``read_kineto``), so a cached table must equal a fresh read exactly."""

from __future__ import annotations

import concurrent.futures
import os
import shutil

import orjson
import pandas as pd
import pytest

from fsdpbench.analysis import fanout
from fsdpbench.trace import cache as table_cache
from fsdpbench.trace import kineto, read_rank
from fsdpbench.trace.kineto import read_kineto
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import REPO, run_cli

GLOO_MIN = REPO / "tests" / "fixtures" / "traces" / "gloo_min.json"


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch):
    monkeypatch.delenv(table_cache.NO_CACHE_ENV, raising=False)


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert (a.rank, a.format, a.mode, a.warnings, a.recorded_tasks) == (
        b.rank,
        b.format,
        b.mode,
        b.warnings,
        b.recorded_tasks,
    )


def _no_decoding(monkeypatch) -> None:
    def fail(path):
        raise AssertionError(f"{path} was decoded although its cache is valid")

    monkeypatch.setattr(kineto, "decode", fail)


@pytest.mark.parametrize("source", ["gpu", "gloo"])
def test_second_read_equals_a_fresh_read_and_skips_decoding(tmp_path, monkeypatch, source):
    if source == "gpu":
        path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=300, seed=4))
    else:
        path = tmp_path / GLOO_MIN.name
        shutil.copy(GLOO_MIN, path)
    fresh = read_kineto(path)
    first = read_rank(path)
    assert table_cache.cache_path(path).stat().st_mode == path.stat().st_mode  # same permissions
    _no_decoding(monkeypatch)
    second = read_rank(path)
    _same(first, fresh)
    _same(second, fresh)
    assert second.source == str(path)


def test_a_changed_trace_is_read_again(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=200, seed=1))
    read_rank(path)
    stat = path.stat()
    write_trace(path, make_trace(device_events=250, seed=2))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: size and head hash tell
    got = read_rank(path)
    _same(got, read_kineto(path))
    assert len(got.events) > 2 * 200
    # same size and mtime, a changed head: read again
    doc = orjson.loads(GLOO_MIN.read_bytes())
    plain = tmp_path / "rank1.json"
    plain.write_bytes(orjson.dumps(doc))
    read_rank(plain)
    data = bytearray(plain.read_bytes())
    stat = plain.stat()
    at = data.index(b'"ProfilerStep#')
    data[at + len(b'"ProfilerStep#')] = ord("7")  # step number changes, size does not
    plain.write_bytes(bytes(data))
    os.utime(plain, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert plain.stat().st_size == stat.st_size
    again = read_rank(plain)
    assert again.steps["step"].iloc[0] == 7
    _same(again, read_kineto(plain))


def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=100, seed=3))
    read_rank(path)
    table_cache.cache_path(path).write_bytes(b"not a zip")
    _same(read_rank(path), read_kineto(path))
    assert table_cache.load(path, table_cache.trace_key(path)) is not None


def test_a_read_only_folder_gets_no_cache(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = write_trace(folder / "rank0.json.gz", make_trace(device_events=100, seed=5))
    folder.chmod(0o555)
    try:
        got = read_rank(path)
        assert os.listdir(folder) == ["rank0.json.gz"]  # no cache, no temporary file
        _same(got, read_kineto(path))
    finally:
        folder.chmod(0o755)


def test_no_cache_neither_reads_nor_writes(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=100, seed=6))
    read_rank(path, cache=False)
    assert not table_cache.cache_path(path).exists()
    read_rank(path)
    assert table_cache.cache_path(path).is_file()
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    calls = []
    decode = kineto.decode
    monkeypatch.setattr(kineto, "decode", lambda p: (calls.append(p), decode(p))[1])
    read_rank(path)
    assert len(calls) == 1  # decoded although a valid cache is there


def test_cli_no_cache_flag_on_analyze(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=100, seed=7))
    env = {table_cache.NO_CACHE_ENV: ""}
    out = run_cli("analyze", str(path), "--no-cache", "--json", str(tmp_path / "a.json"), env=env)
    assert out.returncode == 0, out.stderr
    assert not table_cache.cache_path(path).exists()
    out = run_cli("analyze", str(path), "--json", str(tmp_path / "b.json"), env=env)
    assert out.returncode == 0, out.stderr
    assert table_cache.cache_path(path).is_file()
    out = run_cli("analyze", str(path), "--json", str(tmp_path / "c.json"), env=env)
    assert out.returncode == 0, out.stderr
    a, c = (orjson.loads((tmp_path / f"{x}.json").read_bytes()) for x in "ac")
    assert a == c  # the cached read gives the same numbers as the fresh one


def _ranks(folder, n: int, events: int = 200):
    for rank in range(n):
        write_trace(
            folder / f"rank{rank}.json.gz",
            make_trace(rank=rank, world_size=n, device_events=events, seed=rank),
        )


def test_cached_ranks_are_read_in_process_without_a_worker_pool(tmp_path, monkeypatch):
    from fsdpbench import analysis

    _ranks(tmp_path, 3)
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    reference = analysis.analyze([tmp_path], workers=1).record().to_dict()  # decoded, no cache involved
    monkeypatch.delenv(table_cache.NO_CACHE_ENV)
    assert analysis.analyze([tmp_path], workers=2).record().to_dict() == reference  # writes the caches
    assert all(table_cache.fresh(p) for p in tmp_path.glob("rank*.json.gz"))

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started although every rank has a valid cache")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    monkeypatch.setattr(fanout, "Fanout", no_pool)
    _no_decoding(monkeypatch)
    assert analysis.analyze([tmp_path], workers=2).record().to_dict() == reference


def test_only_uncached_ranks_go_to_the_workers(tmp_path, monkeypatch):
    from fsdpbench import analysis

    _ranks(tmp_path, 3)
    read_rank(tmp_path / "rank1.json.gz")  # only rank 1 has a cache
    shared = []
    real = fanout.Fanout

    class Spy(real):
        def __init__(self, fn, items, *args):
            shared.extend(source.path.name for _, source in items)
            super().__init__(fn, items, *args)

    monkeypatch.setattr(fanout, "Fanout", Spy)
    got = analysis.analyze([tmp_path], workers=2)
    assert sorted(shared) == ["rank0.json.gz", "rank2.json.gz"]
    monkeypatch.setenv(table_cache.NO_CACHE_ENV, "1")
    assert got.record().to_dict() == analysis.analyze([tmp_path], workers=1).record().to_dict()


@pytest.mark.parametrize("workers", [1, 2])
def test_no_event_table_is_kept_for_more_than_one_rank(tmp_path, workers):
    from fsdpbench.analysis import analyze

    _ranks(tmp_path, 3)
    res = analyze([tmp_path], workers=workers)
    assert [r._events for r in res.ranks] == [None] * 3  # one table at a time, none held at the end
    # read again on first use, equal to a fresh read
    pd.testing.assert_frame_equal(res.ranks[2].events, read_kineto(tmp_path / "rank2.json.gz").events)
    from fsdpbench.analysis import result_cache

    result_cache.cache_path(tmp_path / "rank0.json.gz").unlink()  # else its metrics come from that cache
    single = analyze([tmp_path / "rank0.json.gz"])
    assert single.ranks[0]._events is not None  # a single rank keeps the table it computed from
    single = analyze([tmp_path / "rank0.json.gz"])  # its result cached now: the table is read on first use
    assert single.ranks[0]._events is None
    pd.testing.assert_frame_equal(single.ranks[0].events, read_kineto(tmp_path / "rank0.json.gz").events)


def test_progress_bar_on_stderr_only_when_asked_or_on_a_terminal(tmp_path, capsys):
    from fsdpbench.analysis import analyze

    _ranks(tmp_path, 5, events=50)
    analyze([tmp_path], workers=1)  # stderr is not a terminal here: no bar
    assert capsys.readouterr() == ("", "")
    analyze([tmp_path], workers=2, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "reading ranks" in err and "5/5" in err


@pytest.mark.parametrize(
    "values",
    [
        [],
        [5],
        [0, 127, -128],
        [1_000_000_000_000, 1_000_000_000_500, 999_999_999_000],  # differences fit int16, values do not
        [2**63 - 1, -(2**63), 0, 2**62],  # differences wrap around int64
    ],
)
@pytest.mark.parametrize("key", ["e.start_ns", "e.end_ns", "e.launch_ns", "e.step"])
def test_stored_columns_come_back_exactly_with_their_type(key, values):
    import numpy as np

    start = np.array([3 - i for i in range(len(values))], dtype=np.int64)  # the column differences refer to
    col = np.array(values, dtype=np.int64)
    cols = {"e.start_ns": col if key == "e.start_ns" else start}
    stored, (dtype, base) = table_cache._packed(key, col, cols)
    back = table_cache._unpacked(stored, dtype, base, cols)
    assert back.dtype == np.int64 and back.tolist() == values
    assert stored.dtype.itemsize <= 8


def test_the_caches_are_smaller_than_the_trace_and_read_back_equal(tmp_path):
    """A 20k-event GPU-like rank: the table, result and replay-graph caches together stay under the gzipped
    trace (os.stat), and an analysis from them writes the JSON a --no-cache one does."""
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=20_000, seed=5))
    on = {table_cache.NO_CACHE_ENV: ""}
    for out in ("first.json", "cached.json"):
        proc = run_cli("analyze", str(path), "--json", str(tmp_path / out), timeout=120, env=on)
        assert proc.returncode == 0, proc.stderr
    caches = [p for p in tmp_path.iterdir() if p.name.startswith(f".{path.name}.fsdpbench.")]
    suffixes = sorted(p.name.removeprefix(f".{path.name}") for p in caches)
    assert suffixes == [".fsdpbench.metrics", ".fsdpbench.npz", ".fsdpbench.replay"]  # table, result, graph
    assert sum(os.stat(p).st_size for p in caches) <= os.stat(path).st_size
    proc = run_cli("analyze", str(path), "--no-cache", "--json", str(tmp_path / "fresh.json"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    fresh = orjson.loads((tmp_path / "fresh.json").read_bytes())
    assert orjson.loads((tmp_path / "cached.json").read_bytes()) == fresh


def test_cache_members_are_deflated_by_isal_and_read_back_exactly(tmp_path):
    """With ISA-L installed (the ``fast`` extra) each member of the cache is ISA-L's level-1 raw deflate
    of the member's bytes (the reference: ``isal_zlib`` called directly on what zipfile inflates), and the
    cache still reads back as a fresh read."""
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    import zipfile

    trace = write_trace(tmp_path / "rank0.json.gz", make_trace(rank=0, world_size=2, device_events=20_000))
    fresh = read_rank(trace)  # writes the cache
    with zipfile.ZipFile(table_cache.cache_path(trace)) as z:
        assert z.testzip() is None  # every member's CRC checks out
        largest = max(z.infolist(), key=lambda i: i.file_size)
        data = z.read(largest)
    deflate = isal_zlib.compressobj(1, isal_zlib.DEFLATED, -15)
    assert largest.compress_size == len(deflate.compress(data) + deflate.flush())
    _same(read_rank(trace), fresh)

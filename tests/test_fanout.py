"""Ranks read by this process and forked children (analysis/fanout.py): every item once, in order, a dying
child named by the rank it was reading, a child's exception raised here, no hang."""

from __future__ import annotations

import os
import signal
import time

import pytest

from fsdpbench.analysis import fanout, pipeline
from fsdpbench.trace.synthetic import make_trace, write_trace

pytestmark = pytest.mark.skipif(not fanout.available(), reason="fork-based fan-out is Linux only")


def _slow(item: int) -> tuple[int, int]:
    time.sleep(0.02)  # every process gets items, even on a loaded machine
    return item * item, os.getpid()


def test_every_item_once_in_order_by_this_process_and_the_children():
    parent = os.getpid()
    items = list(range(40))
    with fanout.Fanout(_slow, items, 3, lambda i, why: None) as fan:
        arrived = []
        out = fan.results(lambda: arrived.append(1))
    assert [value for value, _ in out] == [i * i for i in items]
    pids = {pid for _, pid in out}
    assert parent in pids and len(pids) >= 2  # the caller worked beside its children
    assert len(arrived) == len(items)
    assert not _has_children()  # every child reaped


def _has_children() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def _big(item: int) -> tuple[int, float, bytes]:
    return os.getpid(), time.monotonic(), bytes(1 << 20)  # 16 times a pipe's buffer


def test_children_never_wait_for_the_caller_to_read_their_results():
    """While the caller is still busy (reading cached ranks) before it takes its share, the children's
    results are drained: a child does not stop after its first result that fills the pipe."""
    with fanout.Fanout(_big, list(range(4)), 2, lambda i, why: None) as fan:
        time.sleep(1.0)  # the caller's own work before results()
        called = time.monotonic()
        out = fan.results()
    assert os.getpid() not in {pid for pid, _, _ in out}  # the child did every item meanwhile
    assert max(done for _, done, _ in out) < called
    assert all(len(data) == 1 << 20 for _, _, data in out)


def test_a_caller_that_fails_stops_and_reaps_its_children():
    parent = os.getpid()

    def fn(i: int) -> int:
        if os.getpid() == parent:
            raise KeyboardInterrupt  # as Ctrl-C in the caller's own share
        time.sleep(60)  # a child still busy: stopped, not waited for
        return i

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), fanout.Fanout(fn, list(range(4)), 3, lambda i, why: None) as fan:
        fan.results()
    assert time.monotonic() - t0 < 30
    assert not _has_children()


def test_an_exception_in_a_child_is_raised_here():
    parent = os.getpid()

    def fn(i: int) -> int:
        if os.getpid() != parent:
            raise ValueError(f"bad item {i}")
        time.sleep(0.05)
        return i

    with (
        pytest.raises(ValueError, match="bad item"),
        fanout.Fanout(fn, list(range(6)), 2, lambda i, w: None) as fan,
    ):
        fan.results()
    assert not _has_children()


def _ranks(folder, n: int) -> None:
    for rank in range(n):
        write_trace(
            folder / f"rank{rank}.json.gz", make_trace(rank=rank, world_size=n, device_events=200, seed=rank)
        )


_PARENT = os.getpid()
_REAL_ANALYZE_ONE = pipeline._analyze_one


def _analyze_one_dying_in_a_child(source, *args, **kwargs):  # module level: a process pool pickles it
    if os.getpid() != _PARENT:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does
    time.sleep(0.3)  # the child takes a rank meanwhile
    return _REAL_ANALYZE_ONE(source, *args, **kwargs)


def _dies_in_a_child(monkeypatch) -> None:
    assert os.getpid() == _PARENT
    monkeypatch.setattr(pipeline, "_analyze_one", _analyze_one_dying_in_a_child)


def test_a_worker_that_dies_is_named_by_its_rank_and_the_others_are_analysed(tmp_path, monkeypatch):
    """A worker killed while reading a rank: that rank is skipped with its file and the signal named,
    the others are analysed, nothing hangs."""
    from fsdpbench.analysis import analyze

    monkeypatch.setenv("FSDPBENCH_NO_CACHE", "1")
    _ranks(tmp_path, 3)
    _dies_in_a_child(monkeypatch)
    t0 = time.monotonic()
    res = analyze([tmp_path], workers=2)
    assert time.monotonic() - t0 < 30
    lost = [w for w in res.warnings if "worker process" in w]
    assert len(lost) == 1 and len(res.ranks) == 2
    missing = ({0, 1, 2} - {r.rank for r in res.ranks}).pop()
    assert lost[0] == (
        f"skipped: {tmp_path / f'rank{missing}.json.gz'}: the worker process reading it died (killed by "
        "SIGKILL, likely out of memory); analyse it alone with --workers 1 to see why"
    )


def test_a_dying_worker_of_the_process_pool_names_the_ranks_it_cost(tmp_path, monkeypatch):
    """Where fork is not used (not Linux), a process pool reads the ranks: a worker that dies breaks the
    pool, and every rank left is named in one error, not a traceback."""
    from fsdpbench.analysis import analyze
    from fsdpbench.errors import InputError

    monkeypatch.setenv("FSDPBENCH_NO_CACHE", "1")
    monkeypatch.setattr(fanout, "available", lambda: False)
    _ranks(tmp_path, 2)
    _dies_in_a_child(monkeypatch)
    with pytest.raises(InputError) as err:
        analyze([tmp_path], workers=2)
    for rank in (0, 1):
        assert (
            f"{tmp_path / f'rank{rank}.json.gz'}: the worker process reading it died (a process of the pool "
            "was terminated abruptly)" in str(err.value)
        )

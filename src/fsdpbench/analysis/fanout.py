"""Work shared between this process and forked children, each taking the next item when done with its
last: how :func:`fsdpbench.analysis.pipeline.analyze` reads ranks in parallel on Linux.

The calling process is one of the ``processes``: it forks ``processes - 1`` children (after the
measuring modules are imported, so that they inherit them) and then works through the items beside
them. Against a ``ProcessPoolExecutor`` of ``processes`` workers this is one process fewer, no
management and feeder threads, no call queue, and no idle parent: a cold ``analyze`` of 4 ranks
costs less CPU time for the same wall time (docs/benchmarks.md, "fourth look").

The items to take are 4-byte indices written into a pipe before the children are forked: a 4-byte
read from a pipe is atomic, so each index goes to exactly one process, and the pipe's end (all
written, every write end closed) tells each process there is nothing left. Each child sends, on a pipe
of its own, the index it takes before working on it and then the pickled result; a thread of the
parent drains those pipes meanwhile, so that a child never waits for the parent to read. A child that
dies (killed, out of memory) leaves the index it had taken without a result: :meth:`Fanout.results` returns
``lost(item, why)`` for it, never waits for it.
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["MAX_ITEMS", "Fanout", "available", "share"]

T = TypeVar("T")
R = TypeVar("R")

_INDEX = struct.Struct("<I")
_HEADER = struct.Struct("<IQ")  # (item index, bytes of the pickled result that follow; 0: "taken")
MAX_ITEMS = 16384
"""Most items one call shares: their indices must all fit a pipe's default 64 KiB buffer before the
children start (a larger batch goes to the caller's other path)."""


def available() -> bool:
    """Whether this platform forks safely: Linux (macOS's system libraries are not fork-safe, Windows
    has no fork)."""
    return sys.platform == "linux" and hasattr(os, "fork")


def _exit_reason(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = ", likely out of memory" if sig == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


def _take(tickets: int) -> int | None:
    data = os.read(tickets, _INDEX.size)
    return _INDEX.unpack(data)[0] if len(data) == _INDEX.size else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _child(fn: Callable[[T], R], items: Sequence[T], tickets: int, out: int) -> None:
    """A child's loop: take an index, say so, send the result (or the exception it raised)."""
    while (i := _take(tickets)) is not None:
        _write_all(out, _HEADER.pack(i, 0))
        try:
            result: Any = fn(items[i])
        except Exception as exc:  # raised again in the parent, as a process pool does
            result = exc
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an exception (or result) that does not pickle: its text does
            data = pickle.dumps(RuntimeError(f"{type(result).__name__}: {result} ({exc})"))
        _write_all(out, _HEADER.pack(i, len(data)) + data)


class _Drain(threading.Thread):
    """Reads every child's pipe to its end: ``taken[pid]`` the index a child is working on (None
    between items) and ``results[index]`` each pickled result; the function given to :meth:`notify`
    is called as each one arrives (at once for those that came before it was given)."""

    def __init__(self, pipes: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.pipes = dict(pipes)  # read fd -> child pid
        self._lock = threading.Lock()
        self._arrived = 0  # results that came before notify() was called
        self._on_result: Callable[[], None] | None = None
        self.taken: dict[int, int | None] = dict.fromkeys(pipes.values())
        self.results: dict[int, bytes] = {}
        self.error: BaseException | None = None

    def notify(self, on_result: Callable[[], None]) -> None:
        """Call ``on_result`` for each result that has come and, from another thread, each that comes."""
        with self._lock:
            self._on_result, arrived, self._arrived = on_result, self._arrived, 0
        for _ in range(arrived):
            on_result()

    def _arrive(self) -> None:
        with self._lock:
            on_result = self._on_result
            if on_result is None:
                self._arrived += 1
        if on_result is not None:
            on_result()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc

    def _run(self) -> None:
        buffers = {fd: bytearray() for fd in self.pipes}
        with selectors.DefaultSelector() as sel:
            for fd in self.pipes:
                sel.register(fd, selectors.EVENT_READ)
            while buffers:
                for key, _ in sel.select():
                    fd = key.fd
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:  # the child has exited
                        sel.unregister(fd)
                        del buffers[fd]
                        continue
                    buf = buffers[fd]
                    buf += chunk
                    while len(buf) >= _HEADER.size:
                        index, size = _HEADER.unpack_from(buf)
                        end = _HEADER.size + size
                        if len(buf) < end:
                            break
                        if size == 0:
                            self.taken[self.pipes[fd]] = index
                        else:
                            self.results[index] = bytes(buf[_HEADER.size : end])
                            self.taken[self.pipes[fd]] = None
                            self._arrive()
                        del buf[:end]


class Fanout:
    """``[fn(item) for item in items]`` computed by this process and ``processes - 1`` children forked
    when it is entered (a context manager: leaving it stops and reaps any child still running).

    Args:
        fn: run on each item, in whichever process takes it; an exception it raises in a child is
            raised again by :meth:`results` (after every child has finished), as ``concurrent.futures``
            does.
        items: at most :data:`MAX_ITEMS`.
        processes: processes working, this one included (at least 2).
        lost: the result for an item whose child died before sending its result, given the item and
            why (``"killed by SIGKILL, likely out of memory"``).
    """

    def __init__(
        self, fn: Callable[[T], R], items: Sequence[T], processes: int, lost: Callable[[T, str], R]
    ) -> None:
        if len(items) > MAX_ITEMS:
            raise ValueError(f"Fanout shares at most {MAX_ITEMS} items, not {len(items)}")
        self.fn, self.items, self.processes, self.lost = fn, items, processes, lost
        self.pipes: dict[int, int] = {}  # read end of each child's pipe -> its pid
        self.tickets = -1
        self.drain: _Drain | None = None

    def __enter__(self) -> Fanout:
        self.tickets, feed = os.pipe()
        _write_all(feed, b"".join(_INDEX.pack(i) for i in range(len(self.items))))
        os.close(feed)  # every index written: a process that reads nothing has nothing left to take
        for stream in (sys.stdout, sys.stderr):  # else a child's first write could repeat the parent's
            if stream is not None:
                stream.flush()
        for _ in range(self.processes - 1):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller's code
                code = 0
                try:
                    for fd in self.pipes:
                        os.close(fd)
                    os.close(read_end)
                    _child(self.fn, self.items, self.tickets, write_end)
                except BaseException:  # noqa: BLE001 - the parent reports its item as lost
                    code = 1
                finally:
                    os._exit(code)
            os.close(write_end)
            self.pipes[read_end] = pid
        # started at once (every child forked): a child never waits for the caller to read its results
        self.drain = _Drain(self.pipes)
        self.drain.start()
        return self

    def results(self, on_result: Callable[[], None] = lambda: None) -> list[R]:
        """Work through the items beside the children; the results in ``items``' order.

        Args:
            on_result: called as each result arrives (from another thread for the children's).
        """
        drain = self.drain
        if drain is None:
            raise RuntimeError("Fanout.results() is called inside its with block")
        drain.notify(on_result)
        mine: dict[int, Any] = {}
        while (i := _take(self.tickets)) is not None:
            mine[i] = self.fn(self.items[i])
            on_result()
        drain.join()
        if drain.error is not None:
            raise drain.error
        why = {pid: _exit_reason(os.waitpid(pid, 0)[1]) for pid in self.pipes.values()}
        self._close()
        out: list[Any] = []
        for i, item in enumerate(self.items):
            if i in mine:
                out.append(mine[i])
            elif i in drain.results:
                result = pickle.loads(drain.results.pop(i))  # its bytes freed as it is read
                if isinstance(result, Exception):
                    raise result
                out.append(result)
            else:  # taken by a child that died on it
                pid = next((p for p, taken in drain.taken.items() if taken == i), None)
                out.append(
                    self.lost(item, why[pid] if pid is not None else "; ".join(sorted(set(why.values()))))
                )
        return out

    def _close(self) -> None:
        for fd in self.pipes:
            os.close(fd)
        self.pipes.clear()
        if self.tickets >= 0:
            os.close(self.tickets)
            self.tickets = -1

    def __exit__(self, *exc: object) -> None:
        for pid in self.pipes.values():  # left early (an error, an interrupt): stop the children
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if self.drain is not None:  # it reads the pipes: done once the children are gone
            self.drain.join()
        self._close()


def share(jobs: Sequence[Callable[[], R]], processes: int = 2) -> list[R]:
    """``[job() for job in jobs]``, shared between this process and ``processes - 1`` forked children (a
    :class:`Fanout`) where ``processes`` > 1, there are two jobs or more and the platform forks safely
    (:func:`available`); a job whose child died is run again here. The jobs must only read what they
    share (a child's writes stay in the child) and return what pickles."""
    processes = min(processes, len(jobs))
    if processes < 2 or not available() or len(jobs) > MAX_ITEMS:
        return [job() for job in jobs]
    with Fanout(_call, jobs, processes, lambda job, _why: job()) as fan:
        return fan.results()


def _call(job: Callable[[], R]) -> R:
    return job()

"""Why a launch failed: the first cause among its ranks, then the others as its consequences.

Two sources per node, both in the launch folder (a collected node's under ``node<k>/``):
``error_rank<k>.json`` (what a rank's Python raised, written by the worker) and torchrun's own log
(``torchrun.log``), whose ``Failures:`` and ``Root Cause (first observed failure)`` blocks give each
failed rank's exit code or signal. A rank killed by a signal writes no error file, and its peers see
the closed socket at once: their collective-transport errors (gloo pair errors, ``DistBackendError``)
often come *earlier* in time than the killed rank's death is observed. So the order is by kind first
(signal deaths and non-collective exceptions, then bare exit codes, then collective-transport errors,
then the SIGTERM/SIGINT that torchrun sends to the survivors) and by time only within a kind.
Torch-free.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from fsdpbench.errors import InputError
from fsdpbench.records import Record
from fsdpbench.results import run_folder

NODE_DIR = "node{node}"
"""Where node 0 keeps a collected node's launch files, inside the launch folder."""

TRANSPORT_TYPES = ("DistBackendError", "DistNetworkError", "DistStoreError")
TRANSPORT_TEXT = re.compile(
    r"gloo|pair\.cc|connection (closed|reset) by peer|broken pipe|NCCL|HCCL|ProcessGroup|"
    r"timed out waiting|socket|ECONNRESET|EPIPE",
    re.IGNORECASE,
)
"""A collective-transport error: a peer went away (its cause lies elsewhere)."""
TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals torchrun (or the launcher) sends to the ranks that survive a failure."""
SELF_EXPLAINING = ("ConfigError", "InputError", "LaunchError")
"""Error types whose message already says what to do."""

# kinds, in the order of their likelihood to be the cause
SIGNAL, EXCEPTION, EXIT, TRANSPORT, TERMINATED = "signal", "exception", "exit", "collective", "terminated"
KIND_ORDER = {SIGNAL: 0, EXCEPTION: 0, EXIT: 1, TRANSPORT: 2, TERMINATED: 3}

_BLOCK = re.compile(
    r"^\s*time\s*:\s*(?P<time>\S+)\s*$\n"
    r"^\s*host\s*:\s*(?P<host>.*?)\s*$\n"
    r"^\s*rank\s*:\s*(?P<rank>-?\d+)\s*\(local_rank:\s*(?P<local>\d+)\)\s*$\n"
    r"^\s*exitcode\s*:\s*(?P<code>-?\d+)[^\n]*$\n"
    r"(?:^\s*error_file\s*:\s*(?P<error_file>.*?)\s*$\n)?"
    r"(?:^\s*traceback\s*:\s*(?P<traceback>.*?)\s*$)?",
    re.MULTILINE,
)


@dataclasses.dataclass
class RankFailure(Record):
    """One failed rank, merged from its error file and torchrun's report."""

    _keys: ClassVar[tuple[str, ...]] = (
        "rank",
        "node",
        "host",
        "kind",
        "exit_code",
        "signal",
        "signal_name",
        "exception",
        "message",
        "oom",
        "time",
    )

    rank: int
    node: int | None = None
    host: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    exception: str | None = None
    message: str | None = None
    """The exception's last traceback line without its type (or its first message line)."""
    oom: bool = False
    time: float | None = None
    """Unix time: the error file's, else the time torchrun observed the failure (1 s resolution)."""

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    @property
    def kind(self) -> str:
        if self.exception is not None:
            transport = self.exception in TRANSPORT_TYPES or TRANSPORT_TEXT.search(self.message or "")
            return TRANSPORT if transport and not self.oom else EXCEPTION
        if self.signal is not None:
            return TERMINATED if self.signal in TERMINATION_SIGNALS else SIGNAL
        return EXIT

    def how(self) -> str:
        """``killed by signal 9 (SIGKILL)``, ``crashed with RuntimeError: ...``, ``exited with code 1``."""
        if self.exception is not None:
            return f"crashed with {self.exception}" + (f": {self.message}" if self.message else "")
        if self.signal is not None:
            return f"was killed by signal {self.signal} ({self.signal_name})"
        return f"exited with code {self.exit_code}"

    def where(self, nodes: bool) -> str:
        return f"rank {self.rank}" + (f" (node {self.node})" if nodes and self.node is not None else "")


def _last_line(error: dict[str, Any]) -> str:
    """The exception's last traceback line without its ``Type: `` prefix, else its message."""
    lines = [ln.strip() for ln in str(error.get("traceback") or "").splitlines() if ln.strip()]
    if lines:
        return re.sub(r"^[A-Za-z_][\w.]*: ", "", lines[-1])[:300]
    return str(error.get("message") or "")[:300]


def torchrun_failures(log_text: str) -> list[RankFailure]:
    """The failed ranks that torchrun's ``ChildFailedError`` report lists (root cause and the others)."""
    found: dict[int, RankFailure] = {}
    for m in _BLOCK.finditer(log_text):
        rank, code = int(m["rank"]), int(m["code"])
        try:
            when = datetime.strptime(m["time"], "%Y-%m-%d_%H:%M:%S").timestamp()
        except ValueError:
            when = None
        sig = -code if code < 0 else None
        tb = m["traceback"] or ""
        sig_match = re.match(r"Signal (\d+)", tb)
        if sig is None and sig_match:
            sig = int(sig_match[1])
        found.setdefault(rank, RankFailure(rank=rank, host=m["host"], exit_code=code, signal=sig, time=when))
    return list(found.values())


def node_failures(folder: Path, node: int | None) -> list[RankFailure]:
    """Every failed rank one node's launch files describe (``folder`` holds its error files and log)."""
    by_rank: dict[int, RankFailure] = {}
    log_path = folder / run_folder.LAUNCH_LOG
    if log_path.is_file():
        for f in torchrun_failures(log_path.read_text(errors="replace")):
            f.node = node
            by_rank[f.rank] = f
    for path in sorted(folder.glob(run_folder.LAUNCH_ERROR.format(rank="*"))):
        try:
            error = run_folder.read_json_file(path)
            rank = int(error["rank"])
        except (InputError, KeyError, TypeError, ValueError):
            continue
        f = by_rank.setdefault(rank, RankFailure(rank=rank, node=node))
        f.exception = str(error.get("type") or "Exception")
        f.message = _last_line(error)
        f.oom = bool(error.get("oom"))
        if isinstance(error.get("time"), int | float):
            f.time = float(error["time"])
    return list(by_rank.values())


def launch_failures(ldir: Path, node: int = 0) -> list[RankFailure]:
    """The failed ranks of a launch, first cause first: this node's files in ``ldir`` (node ``node``)
    and each collected node's in ``ldir/node<k>/``."""
    failures = node_failures(ldir, node)
    for sub in sorted(ldir.glob(NODE_DIR.format(node="*"))):
        if sub.is_dir() and sub.name[4:].isdigit():
            failures += node_failures(sub, int(sub.name[4:]))
    return sorted(
        failures,
        key=lambda f: (
            KIND_ORDER[f.kind],
            f.time if f.time is not None else float("inf"),
            f.rank,
        ),
    )


def describe(failures: list[RankFailure], nodes: bool = False, max_others: int = 3) -> str | None:
    """One line: the first cause and how, then the others as consequences (None: nothing failed)."""
    if not failures:
        return None
    first, others = failures[0], failures[1:]
    if first.oom:
        text = (
            f"out of memory on {first.where(nodes)} ({first.message}); reduce --seq-len, --layers or "
            f"--batch-size, use --ac full or more ranks"
        )
    elif first.exception in SELF_EXPLAINING:
        text = f"{first.where(nodes)}: {first.message}"
    else:
        text = f"{first.where(nodes)} {first.how()}"
    if others:
        listed = "; ".join(f"{f.where(nodes)} {_short(f)}" for f in others[:max_others])
        more = f" and {len(others) - max_others} more" if len(others) > max_others else ""
        text += f" — then, as consequences: {listed}{more} (full output in the launch log)"
    return text


def _short(f: RankFailure) -> str:
    if f.exception is not None:
        text = re.sub(r"^\[[^\]]*\]\s*", "", f.message or "").split(". ")[0]  # gloo's "[file:line] "
        return f"{f.exception}" + (f" ({text[:100]})" if text else "")
    return f.how().replace("was killed by", "killed by")


def explain(ldir: Path, rc: int | None, node: int = 0, nodes: bool = False) -> str:
    """The launch's failure in one line: the first cause from the ranks' error files and torchrun's
    report, else the last line of torchrun's log."""
    text = describe(launch_failures(ldir, node), nodes)
    if text:
        return text
    log_path = ldir / run_folder.LAUNCH_LOG
    lines = (
        [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
        if log_path.exists()
        else []
    )
    return f"torchrun exited with code {rc}" + (f": {lines[-1].strip()[:300]}" if lines else "")


def failure_record(ldir: Path, node: int = 0) -> dict[str, Any] | None:
    """``{"first_cause": {...}, "consequences": [...]}`` for status.json and summary.json (None: no rank
    failed, e.g. a timeout or a missing output)."""
    failures = launch_failures(ldir, node)
    if not failures:
        return None
    return {"first_cause": failures[0].to_dict(), "consequences": [f.to_dict() for f in failures[1:]]}


def launch_verdict(ldir: Path, reports: list[dict[str, Any]], nnodes: int) -> str | None:
    """Node 0's verdict on a multi-node launch (None: it succeeded) from each node's report
    ``{node, rc, error, timed_out}`` and the launch files of every node (collected into ``ldir``)."""

    def tagged(report: dict[str, Any], text: str) -> str:
        return text if not report.get("node") else f"node {report['node']}: {text}"

    timed_out = [r for r in reports if r.get("timed_out") and r.get("error")]
    if timed_out:  # the launcher killed the ranks itself: their signals are not the cause
        return tagged(timed_out[0], timed_out[0]["error"])
    if any(r.get("rc") != 0 for r in reports):
        text = describe(launch_failures(ldir, 0), nodes=nnodes > 1)
        if text:
            return text
    for report in reports:
        if report.get("rc") != 0 or report.get("error"):
            return tagged(report, report.get("error") or f"torchrun exited with code {report.get('rc')}")
    return None


__all__ = [
    "RankFailure",
    "describe",
    "explain",
    "failure_record",
    "launch_failures",
    "launch_verdict",
    "torchrun_failures",
]

"""Shared test helpers: free ports, a CLI runner, and one profiled A/B run reused by several tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FSDPBENCH_SHARED") or REPO.parent / "shared")
"""The real-trace fixtures (../shared beside the checkout; ``FSDPBENCH_SHARED`` points elsewhere)."""
ASCEND_FIXTURES = SHARED / "fixtures" / "ascend"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """``SHARED``, or skip the test when it is absent (e.g. a clone without ../shared beside it).

    Session-scoped so that it runs (and skips) before any module fixture that reads the files.
    """
    if not (SHARED / "fixtures").is_dir():
        pytest.skip(
            f"{SHARED / 'fixtures'} is absent: the real-trace fixtures live in ../shared beside the checkout"
        )
    return SHARED


@pytest.fixture(autouse=True)
def _no_table_cache(monkeypatch):
    """Tests read their traces afresh (no columnar cache beside fixtures); test_trace_cache.py turns it on."""
    monkeypatch.setenv("FSDPBENCH_NO_CACHE", "1")


def free_port() -> int:
    """A TCP port that is free right now on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, timeout: float = 240, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run ``python -m fsdpbench ARGS`` in a subprocess; return the CompletedProcess (text mode)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "fsdpbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def run_profiled_ab(out: Path, arms: str, name: str, timeout: float = 500) -> Path:
    """``fsdpbench ab --profile`` of ``arms`` on 2 gloo ranks (tiny, 1 round of 1+2 steps, seq 128, no
    report) into ``out``; returns the run folder."""
    proc = run_cli(
        "ab",
        "--arms",
        arms,
        "--rounds",
        "1",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--profile",
        "--nproc",
        "2",
        "--seq-len",
        "128",
        "--out",
        str(out),
        "--name",
        name,
        "--master-port",
        str(free_port()),
        "--no-report",
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = sorted(out.glob(f"{name}_*"))
    assert runs, f"no run folder under {out}: {proc.stdout}{proc.stderr}"
    return runs[-1]


@pytest.fixture(scope="session")
def profiled_ab_run(tmp_path_factory) -> Path:
    """One profiled 2-rank gloo A/B run (torch prefetch 0 vs 1, tiny preset), shared by the
    analysis, diff and report tests. Returns the run folder."""
    return run_profiled_ab(tmp_path_factory.mktemp("profiled_ab"), "torch,torch:prefetch=1", "fixture", 400)


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (read from /proc; Linux)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids

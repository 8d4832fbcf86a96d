"""Shared fixtures: the real-trace folder, no table cache, one profiled A/B run reused by several tests
(plain helpers live in helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import SHARED, run_delay_ab, run_profiled_ab


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


@pytest.fixture(scope="session")
def profiled_ab_run(tmp_path_factory) -> Path:
    """One profiled 2-rank gloo A/B run (torch prefetch 0 vs 1, tiny preset), shared by the
    analysis, diff and report tests. Returns the run folder."""
    return run_profiled_ab(tmp_path_factory.mktemp("profiled_ab"), "torch,torch:prefetch=1", "fixture", 400)


@pytest.fixture(scope="session")
def plain_fsdp2_profiles(tmp_path_factory) -> Path:
    """Profiles of a plain FSDP2 script that knows nothing of fsdpbench (tests/plain_fsdp2.py): one
    torchrun of 2 gloo ranks writes ``raf_true/`` and ``raf_false/`` (reshard_after_forward), one
    trace per rank each. Returns their parent folder."""
    import subprocess

    from helpers import REPO, torchrun_command

    out = tmp_path_factory.mktemp("plain_fsdp2")
    cmd = torchrun_command(2)
    proc = subprocess.run(
        [*cmd, str(REPO / "tests" / "plain_fsdp2.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def delay_ab_run(tmp_path_factory) -> Path:
    """One profiled 4-rank gloo A/B of a clean arm and two arms with known delays (``helpers.DELAY_ARMS``,
    tiny, 2 layers), shared by the delay checks (test_delay_truth.py) and the 4-rank replay checks
    (test_replay.py: the clean arm ``torch``). Returns the run folder."""
    return run_delay_ab(tmp_path_factory.mktemp("delay_ab"))

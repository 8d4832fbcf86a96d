"""During one ``analyze`` each trace's cache key (a hash of its first MiB, of every file of an Ascend
folder: ``trace.cache.trace_key``) is computed exactly once, whichever caches use it (the event-table
cache, the result cache, the cross-rank waits cache), cold, warm, or with only the table cache warm.
The reference is the number of traces the test itself wrote or copied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fsdpbench.analysis import analyze, result_cache
from fsdpbench.trace import cache as table_cache
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import REPO

N_RANKS = 3


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch):
    monkeypatch.delenv(table_cache.NO_CACHE_ENV, raising=False)


@pytest.fixture
def key_calls(monkeypatch, tmp_path) -> Path:
    """Count ``trace_key`` calls, in this process and in forked workers: one line per call in a file."""
    log = tmp_path / "key_calls.txt"
    real = table_cache.trace_key

    def spy(trace: Path):
        with log.open("a") as f:
            f.write(f"{Path(trace).name}\n")
        return real(trace)

    monkeypatch.setattr(table_cache, "trace_key", spy)
    return log


def _calls(log: Path) -> list[str]:
    calls = sorted(log.read_text().splitlines()) if log.is_file() else []
    log.unlink(missing_ok=True)
    return calls


def _kineto_ranks(folder: Path) -> list[str]:
    folder.mkdir()
    names = []
    for rank in range(N_RANKS):
        path = folder / f"rank{rank}.json.gz"
        write_trace(path, make_trace(rank=rank, world_size=N_RANKS, device_events=200, seed=rank))
        names.append(path.name)
    return names


@pytest.mark.parametrize("workers", [1, 2])
def test_each_kineto_trace_is_hashed_once_per_analysis_cold_warm_and_table_only(tmp_path, key_calls, workers):
    folder = tmp_path / "traces"
    names = _kineto_ranks(folder)
    first = analyze([folder], workers=workers)  # cold: writes the table, result and waits caches
    assert _calls(key_calls) == names
    assert all(result_cache.cache_path(folder / n).is_file() for n in names)

    second = analyze([folder], workers=workers)  # every rank and the waits from their caches
    assert _calls(key_calls) == names
    assert second.record().to_dict() == first.record().to_dict()

    for n in names:  # only the event-table caches left: each rank read from its table cache
        result_cache.cache_path(folder / n).unlink()
    third = analyze([folder], workers=workers)
    assert _calls(key_calls) == names
    assert third.record().to_dict() == first.record().to_dict()


def test_each_ascend_folder_is_hashed_once_per_analysis(tmp_path, key_calls):
    folder = tmp_path / "ascend"
    shutil.copytree(
        REPO / "tests" / "fixtures" / "ascend_level0", folder, ignore=shutil.ignore_patterns(".*")
    )
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    names = sorted(p.name for p in folder.glob("*_ascend_pt"))
    assert len(names) == 2
    first = analyze([folder], workers=1)
    assert _calls(key_calls) == names
    second = analyze([folder], workers=1)
    assert _calls(key_calls) == names
    assert second.record().to_dict() == first.record().to_dict()

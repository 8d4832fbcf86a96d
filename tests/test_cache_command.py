"""``fsdpbench cache list|clear`` on tmp copies of fixture traces: the reference is the file system itself
(``os.walk`` / ``os.stat`` of what the test finds beside the traces), and ``ab``'s profile default is
checked against the parsed configuration."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import REPO, run_cli

GLOO_MIN = REPO / "tests" / "fixtures" / "traces" / "gloo_min.json"
KINETO_NAME = "rank0.json"  # a name analyze discovers in a folder
ASCEND_LEVEL0 = REPO / "tests" / "fixtures" / "ascend_level0"
NO_CACHE = {"FSDPBENCH_NO_CACHE": ""}  # conftest turns caching off for the tests; these need it on


def _files(root: Path) -> dict[Path, int]:
    """Every file under ``root`` with its size, from the file system."""
    return {Path(d, f): os.stat(Path(d, f)).st_size for d, _, names in os.walk(root) for f in names}


@pytest.fixture
def traces(tmp_path) -> Path:
    """A Kineto trace and an Ascend rank set copied into tmp, analysed once (caches written beside)."""
    root = tmp_path / "traces"
    (root / "kineto").mkdir(parents=True)
    shutil.copy(GLOO_MIN, root / "kineto" / KINETO_NAME)
    shutil.copytree(ASCEND_LEVEL0, root / "ascend")
    for folder in ("kineto", "ascend"):
        proc = run_cli("analyze", str(root / folder), timeout=120, env=NO_CACHE)
        assert proc.returncode == 0, proc.stderr
    return root


def test_analyze_writes_caches_that_list_shows_with_their_sizes(traces):
    before = _files(ASCEND_LEVEL0)
    cache_files = {p: s for p, s in _files(traces).items() if ".fsdpbench." in p.name}
    # beside the Kineto trace and beside each Ascend rank folder, hidden and named after the trace
    assert traces / "kineto" / f".{KINETO_NAME}.fsdpbench.npz" in cache_files
    assert traces / "kineto" / f".{KINETO_NAME}.fsdpbench.metrics" in cache_files
    for rank in ("rank0_ascend_pt", "rank1_ascend_pt"):
        assert traces / "ascend" / f".{rank}.fsdpbench.metrics" in cache_files
    proc = run_cli("cache", "list", str(traces), timeout=60)
    assert proc.returncode == 0, proc.stderr
    *rows, total = proc.stdout.strip().splitlines()
    listed = {Path(line.split(maxsplit=1)[1]): int(line.split()[0].replace(",", "")) for line in rows}
    assert listed == cache_files
    assert f"{len(cache_files)} cache file(s), {sum(cache_files.values()):,d} bytes" in total
    assert f"fsdpbench cache clear {traces}" in total
    assert _files(ASCEND_LEVEL0) == before  # the fixture itself got no cache


def test_list_of_one_trace_shows_only_its_own_caches(traces):
    trace = traces / "kineto" / KINETO_NAME
    proc = run_cli("cache", "list", str(trace), timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = {Path(line.split(maxsplit=1)[1]) for line in proc.stdout.strip().splitlines()[:-1]}
    assert listed == {p for p in _files(trace.parent) if p.name.startswith(f".{trace.name}.fsdpbench.")}
    assert listed


def test_clear_removes_exactly_the_caches_and_keeps_the_traces(traces):
    files = _files(traces)
    (traces / "kineto" / ".fsdpbench-abc123.tmp").write_bytes(b"left behind by an interrupted write")
    (traces / "kineto" / "notes.fsdpbench.txt").write_text("not a cache: not hidden, not a cache suffix")
    proc = run_cli("cache", "clear", str(traces), timeout=60)
    assert proc.returncode == 0, proc.stderr
    left = _files(traces)
    assert set(left) == {p for p in files if ".fsdpbench." not in p.name} | {
        traces / "kineto" / "notes.fsdpbench.txt"
    }
    assert all(left[p] == files[p] for p in files if p in left)  # traces untouched
    proc = run_cli("cache", "list", str(traces), timeout=60)
    assert proc.stdout.strip().splitlines() == [
        f"0 cache file(s), 0 bytes (0 B); remove them with: fsdpbench cache clear {traces}"
    ]


def test_a_missing_path_is_one_clear_line(tmp_path):
    proc = run_cli("cache", "list", str(tmp_path / "nowhere"), timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "nowhere: no such file or folder" in lines[0]


def test_analyze_help_says_where_the_caches_are_and_how_to_clear_them():
    proc = run_cli("analyze", "--help", timeout=60)
    text = " ".join(proc.stdout.split())
    assert "fsdpbench cache list|clear PATH" in text and "docs/caches.md" in text


@pytest.mark.parametrize(
    ("argv", "env", "profile"),
    [
        (["ab"], {}, True),
        (["ab", "--profile"], {}, True),
        (["ab", "--no-profile"], {}, False),
        (["ab"], {"ENABLE_PROFILER": "0"}, False),
        (["run"], {}, False),
        (["run", "--profile"], {}, True),
    ],
)
def test_ab_profiles_unless_told_not_to(monkeypatch, tmp_path, capsys, argv, env, profile):
    """The configuration ``ab``/``run`` hand to the launcher (replaced: nothing is launched)."""
    from fsdpbench import cli

    seen = []

    def fake_run_ab(cfg, **_):
        seen.append(cfg)
        return tmp_path

    monkeypatch.setattr("fsdpbench.run.launcher.run_ab", fake_run_ab)
    monkeypatch.delenv("ENABLE_PROFILER", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main([*argv, "--arms", "torch", "--no-report", "--out", str(tmp_path)]) == 0
    assert [cfg.profile for cfg in seen] == [profile]

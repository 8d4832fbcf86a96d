"""Torch is optional for the analysis side (issue 32 point 4): analyze, diff, report and cache run where
``import torch`` fails and write what they write with torch; ab, run, sweep and model exit 2 with one
line naming the ``run`` extra; and ``pip install .`` into a fresh venv installs no torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv

import pytest

from helpers import REPO, run_cli

FIXTURES = REPO / "tests" / "fixtures"
NO_TORCH = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_torch"), str(REPO / "src")])}
EXTRA_HINT = "pip install 'fsdpbench[run]'"


def test_the_blocker_blocks_torch():
    proc = subprocess.run(
        [sys.executable, "-c", "import torch"], capture_output=True, text=True, env={**os.environ, **NO_TORCH}
    )
    assert proc.returncode != 0 and "No module named 'torch'" in proc.stderr


def test_analyze_and_diff_without_torch_write_what_they_write_with_it(tmp_path):
    rank0, rank1 = (
        FIXTURES / "ascend_server_2rank" / "test_rank_0",
        FIXTURES / "ascend_server_2rank" / "test_rank_1",
    )
    for env, tag in ((None, "torch"), (NO_TORCH, "none")):
        proc = run_cli(
            "analyze",
            "--no-cache",
            str(FIXTURES / "hta_ddp_step"),
            "--json",
            str(tmp_path / f"a_{tag}.json"),
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        proc = run_cli(
            "diff",
            "--no-cache",
            "--quiet",
            str(rank0),
            str(rank1),
            "--json",
            str(tmp_path / f"d_{tag}.json"),
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
    for kind in ("a", "d"):
        assert (tmp_path / f"{kind}_none.json").read_bytes() == (tmp_path / f"{kind}_torch.json").read_bytes()
    proc = run_cli("cache", "list", str(FIXTURES / "hta_ddp_step"), env=NO_TORCH)
    assert proc.returncode == 0 and "cache file(s)" in proc.stdout, proc.stderr


def test_report_without_torch_writes_the_same_report(profiled_ab_run, tmp_path):
    texts = []
    for env, tag in ((None, "torch"), (NO_TORCH, "none")):
        run = shutil.copytree(profiled_ab_run, tmp_path / tag / profiled_ab_run.name)  # the title names it
        proc = run_cli("report", "--no-cache", str(run), env=env)
        assert proc.returncode == 0, proc.stderr
        texts.append((run / "report.md").read_text().replace(str(run), "RUN"))
    assert texts[0] == texts[1]


@pytest.mark.parametrize(
    "args",
    [("ab", "--arms", "torch,torch"), ("run", "--arm", "torch"), ("sweep", "--config", "x.toml"), ("model",)],
)
def test_run_side_without_torch_names_the_extra(args):
    proc = run_cli(*args, env=NO_TORCH, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and EXTRA_HINT in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"fsdpbench {args[0]}: error: torch is not installed")


def test_fresh_venv_without_extras_has_no_torch_and_analyzes(tmp_path):
    """``pip install .`` (no extras) into a fresh venv: no torch resolved, analyze works, ab names the extra.
    pip resolves from the index it is configured with (PyPI in CI). ~20 s, most of it pip: the venv has no
    pip of its own (this interpreter's pip installs into it) and nothing is byte-compiled."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "src"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(
            REPO / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("*.egg-info", "__pycache__")} if name == "src" else {}),
        )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-compile",
            "--disable-pip-version-check",
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print(u.find_spec('torch') is None, u.find_spec('fsdpbench').origin)",
        ],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
    )
    assert found.stdout.split()[0] == "True", found.stdout + found.stderr
    assert str(env_dir) in found.stdout  # the venv's own fsdpbench, not this checkout's
    fsdpbench = env_dir / "bin" / "fsdpbench"
    out = tmp_path / "a.json"
    proc = subprocess.run(
        [str(fsdpbench), "analyze", "--no-cache", str(FIXTURES / "hta_ddp_step"), "--json", str(out)],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    reference = run_cli("analyze", "--no-cache", str(FIXTURES / "hta_ddp_step"), "--json", "-")
    assert out.read_text().strip() == reference.stdout.strip()
    proc = subprocess.run(
        [str(fsdpbench), "ab"], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 2 and EXTRA_HINT in proc.stderr, proc.stderr


def test_every_module_of_the_analysis_side_imports_without_torch():
    """Every module under analysis/, trace/, report/ and commands/ imports where torch cannot (the run side's
    commands import torch only when they run)."""
    code = (
        "import importlib, pkgutil, fsdpbench\n"
        "for room in ('analysis', 'trace', 'report', 'commands'):\n"
        "    pkg = importlib.import_module('fsdpbench.' + room)\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "        print(m.name)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **NO_TORCH}
    )
    assert proc.returncode == 0, proc.stderr
    imported = proc.stdout.split()
    assert "fsdpbench.analysis.findings.registry" in imported and "fsdpbench.commands.ab" in imported

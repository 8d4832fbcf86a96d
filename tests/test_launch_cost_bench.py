"""benchmarks/launch_cost.py runs end to end on the tiny preset and reports what it says: the shard mode
computes about its shard, the before mode every value, and the element counts are the model's own."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from fsdpbench.config import preset_tiny
from fsdpbench.model import build_model
from helpers import REPO

SCRIPT = str(REPO / "benchmarks" / "launch_cost.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=240, env=env
    )


def test_shard_mode_computes_its_shard_and_before_mode_the_whole_model(tmp_path):
    out = tmp_path / "cost.json"
    done = _run("--preset", "tiny", "--world", "4", "--rank", "1", "--compare", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr
    got = orjson.loads(out.read_bytes())
    total = sum(p.numel() for p in build_model(preset_tiny(), device="meta").parameters())
    by_mode = {r["mode"]: r for r in got["runs"]}
    assert set(by_mode) == {"shard", "before"}
    for r in by_mode.values():
        # every tiny parameter's shard dim divides by 4 (plan rule 5), so the shard is exactly a quarter
        assert r["total_values"] == total and r["shard_values"] == total // 4
        assert r["init_s"] > 0 and r["init_cpu_s"] > 0
    assert by_mode["before"]["values_drawn"] == total
    assert total // 4 <= by_mode["shard"]["values_drawn"] <= 1.2 * (total // 4)
    assert set(got["before_over_shard"]) == {"init_s", "init_cpu_s"}
    assert "before/shard" in done.stdout


def test_a_rank_outside_the_world_is_one_line():
    done = _run("--preset", "tiny", "--world", "4", "--rank", "4")
    assert done.returncode != 0
    assert done.stderr.strip() == "launch_cost: --rank 4 is outside --world 4 (0..3)"

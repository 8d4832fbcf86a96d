"""`fsdpbench analyze` on the profiles a profiled `fsdpbench ab` run writes: no extra step needed."""

from __future__ import annotations

import orjson
import pytest

from fsdpbench.analysis import NO_COLLECTIVES, analyze
from helpers import run_cli


@pytest.mark.distributed
def test_runner_profiles_analyse_with_fsdp_collectives_on_every_rank(profiled_ab_run):
    arms = sorted(p for p in (profiled_ab_run / "profiles").iterdir() if p.is_dir())
    assert len(arms) == 2
    for arm in arms:
        res = analyze([arm])
        assert [r.rank for r in res.ranks] == [0, 1]
        assert not [w for w in res.warnings if NO_COLLECTIVES in w]
        for r in res.ranks:
            assert r.mode == "cpu" and r.step is not None
            # FSDP2: parameters all-gathered in forward and backward, gradients reduce-scattered
            assert r.collectives["all_gather"]["count"] >= 2 and r.collectives["reduce_scatter"]["count"] >= 1
            assert r.collectives["all_gather"]["bytes"] > 0
            assert r.overlap_ratio is not None and 0.0 <= r.overlap_ratio <= 1.0
            assert abs(r.compute_us + r.exposed_comm_us + r.free_us - r.step_time_us) < 0.01
            assert len(r.collective_events) == sum(c["count"] for c in r.collectives.values())
        # every rank runs the same collectives
        counts = [{t: c["count"] for t, c in r.collectives.items()} for r in res.ranks]
        assert counts[0] == counts[1]


@pytest.mark.distributed
def test_analyze_cli_on_the_run_prints_tables_and_writes_json(profiled_ab_run, tmp_path):
    arm = sorted((profiled_ab_run / "profiles").iterdir())[0]
    out = tmp_path / "a.json"
    proc = run_cli("analyze", str(arm), "--json", str(out), "--top", "5", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Per rank" in proc.stdout and "all_gather" in proc.stdout
    data = orjson.loads(out.read_bytes())
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert len(data["ranks"][0]["ops"]) > 5  # the JSON lists every op type; --top only trims the terminal

"""``--profile-ranks`` (issue 41 part 1): the spec parser against hand-listed ranks, its sources (flag, TOML,
env), the analysis of part of the world on hand-built ranks, and one 4-rank gloo run profiling ranks 0 and 2:
its files (a glob), manifest, steps.jsonl and the traces' own ``distributedInfo`` read in plain Python, and
"2 of 4 ranks" wherever its waits are shown (terminal, analysis JSON, report)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from fsdpbench.analysis.crossrank.groups import (
    compact_ranks,
    coverage_text,
    group_kinds,
    partial_groups,
    ranks_seen,
)
from fsdpbench.config import RunConfig
from fsdpbench.config.ranks import profiled_ranks
from fsdpbench.errors import ConfigError
from helpers import free_port, run_cli


@pytest.mark.parametrize(
    ("spec", "world", "nproc", "want"),
    [
        ("all", 4, 2, [0, 1, 2, 3]),
        ("", 3, 3, [0, 1, 2]),
        ("0-7", 16, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        ("0,8,16", 24, 8, [0, 8, 16]),
        ("16, 0,8", 24, 8, [0, 8, 16]),  # any order, spaces: sorted
        ("3,1-2,2", 4, 4, [1, 2, 3]),  # overlapping items: each rank once
        ("5-5", 8, 8, [5]),
        ("per-node:2", 8, 4, [0, 1, 4, 5]),  # nodes 0 (ranks 0-3) and 1 (4-7): their first two
        ("per-node:1", 6, 2, [0, 2, 4]),
        ("PER-NODE:3", 3, 3, [0, 1, 2]),
    ],
)
def test_a_spec_names_the_ranks_listed_by_hand(spec, world, nproc, want):
    assert profiled_ranks(spec, world, nproc) == want


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("a", "is not a rank or a range"),
        ("-1", "is not a rank or a range"),
        ("1.5", "is not a rank or a range"),
        ("0,,2", "an empty item"),
        ("3-1", "ends before it starts"),
        ("0-4", "rank 4 is outside the world of 4 ranks (0..3)"),
        ("4", "rank 4 is outside the world of 4 ranks"),
        ("per-node:0", "1 <= K <= --nproc (2 ranks per node), got 0"),
        ("per-node:3", "1 <= K <= --nproc (2 ranks per node), got 3"),
        ("per-node:x", "per-node:K needs a count K"),
    ],
)
def test_a_bad_spec_is_one_error_naming_the_option_and_the_spec(spec, why):
    with pytest.raises(ConfigError) as exc:
        profiled_ranks(spec, 4, 2)
    assert str(exc.value).startswith(f"--profile-ranks {spec!r}: ")
    assert why in str(exc.value)


def test_the_option_comes_from_the_flag_the_toml_file_or_the_environment(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text("nproc = 4\nprofile_ranks = [0, 2]\n")
    assert RunConfig.from_sources(str(toml), env={}).profiled_ranks == [0, 2]
    env = {"PROFILE_RANKS": "per-node:1"}
    assert RunConfig.from_sources(str(toml), env=env).profiled_ranks == [0]  # env over TOML
    flag = {"profile_ranks": "1-3"}
    assert RunConfig.from_sources(str(toml), env=env, overrides=flag).profiled_ranks == [1, 2, 3]
    assert RunConfig.from_sources(None, env={}, overrides={"nproc": 4}).profiled_ranks == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match=r"^--profile-ranks '0,9': rank 9 is outside the world of 4"):
        RunConfig.from_sources(None, env={}, overrides={"nproc": 4, "profile_ranks": "0,9"})


def _rank(rank: int, world: int | None, groups: dict | None = None) -> SimpleNamespace:
    """A rank as group_kinds reads it: a gloo trace naming group "0" (fsdpbench's c10d ranges, no ranks said)."""
    return SimpleNamespace(rank=rank, world_size=world, by_group={"0": {"count": 5}}, groups=groups or {})


def test_part_of_the_world_is_said_once_as_k_of_n_ranks_and_the_default_group_spans_the_world():
    seen = [_rank(0, 4), _rank(2, 4)]
    assert ranks_seen(seen) == {"analysed": [0, 2], "world_size": 4}
    kinds = group_kinds(seen)
    # group "0" is c10d's default group: all 4 ranks, not "world" of the 2 analysed ones (nor stride-2 "replicate")
    assert kinds["0"]["ranks"] == [0, 1, 2, 3] and kinds["0"]["size"] == 4 and kinds["0"]["kind"] == "world"
    partial = partial_groups(kinds, seen)
    assert partial == [{"group": "0", "analysed": [0, 2], "size": 4}]
    assert coverage_text(partial, ranks_seen(seen)) == "2 of 4 ranks (0,2): the last arrival may be outside"
    # another group whose ranks the trace does not say: its layout cannot be told from part of the world
    other = [SimpleNamespace(rank=r, world_size=4, by_group={"7": {}}, groups={}) for r in (0, 2)]
    assert group_kinds(other)["7"]["kind"] == "unknown"


def test_every_rank_seen_or_an_unknown_world_says_nothing_new():
    every = [_rank(r, 4) for r in range(4)]
    assert group_kinds(every)["0"] == {
        "kind": "world",
        "ranks": [0, 1, 2, 3],
        "rule": "analysed ranks",
        "size": None,
    }
    assert coverage_text(partial_groups(group_kinds(every), every), ranks_seen(every)) is None
    unknown = [_rank(0, None), _rank(2, None)]
    assert ranks_seen(unknown) == {"analysed": [0, 2], "world_size": None}
    assert coverage_text([], ranks_seen(unknown)) is None
    # a partial group the trace sizes (NCCL ranks, an Ascend matrix) keeps its own wording beside the world's
    said = [{"group": "9", "analysed": [0, 2], "size": 8}]
    assert coverage_text(said, None) == "2 of 8 ranks of group 9: the last arrival may be outside"


def test_compact_ranks_writes_runs_as_ranges():
    assert compact_ranks([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert compact_ranks([5]) == "5"


WORLD = 4
PROFILED = [0, 2]
WARMUP, STEPS, PROFILE_AFTER_TIMED = 1, 2, 2  # run_folder.PROFILE_AFTER_TIMED: two steps after the timed ones


def _distributed_info(trace: Path) -> dict:
    """The trace's own ``distributedInfo`` (plain gzip + json, not fsdpbench's reader)."""
    return json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]


def test_a_4_rank_run_profiles_ranks_0_and_2_only_and_its_analysis_says_2_of_4_ranks(tmp_path):
    proc = run_cli(
        *("run", "--arm", "torch", "--rounds", "1", "--warmup", str(WARMUP), "--steps", str(STEPS)),
        *("--profile", "--profile-ranks", "0,2", "--nproc", str(WORLD), "--layers", "1", "--seq-len", "32"),
        *("--out", str(tmp_path), "--name", "pr", "--master-port", str(free_port()), "--no-report"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = tmp_path.glob("pr_*")
    # files: a profile and a memory step for ranks 0 and 2, nothing for 1 and 3
    assert sorted(p.name for p in (run / "profiles" / "torch").iterdir()) == ["rank0", "rank2"]
    assert sorted(p.name for p in (run / "memory_step" / "torch").iterdir()) == [
        "rank0.live.json",
        "rank0.trace.json.gz",
        "rank2.live.json",
        "rank2.trace.json.gz",
    ]
    for rank in PROFILED:
        (trace,) = (run / "profiles" / "torch" / f"rank{rank}").glob("*.pt.trace.json.gz")
        info = _distributed_info(trace)
        assert (info["rank"], info["world_size"]) == (rank, WORLD)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["profiled_ranks"] == PROFILED and manifest["config"]["profile_ranks"] == "0,2"
    # steps: every step of the launch recorded as without --profile-ranks, each with all 4 ranks' own times
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    kinds = [s["kind"] for s in steps]
    assert kinds == ["warmup"] * WARMUP + ["timed"] * STEPS + ["profile"] * PROFILE_AFTER_TIMED
    for s in steps:
        assert s["world_size"] == WORLD and len(s["rank_time_ms"]) == WORLD
        assert all(t > 0 for t in s["rank_time_ms"])

    # terminal: the waits table, the stragglers line and the replay line say it
    out = tmp_path / "analysis.json"
    proc = run_cli(
        "analyze", str(run / "profiles" / "torch"), "--critical-path", "--json", str(out),
        env={"COLUMNS": "400"}, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = "2 of 4 ranks (0,2)"
    text = " ".join(proc.stdout.split())  # rich wraps titles and lines at the table's width
    for where in (
        r"Waiting vs transferring \(5 collectives matched by c10d_ranges; ",  # the waits table's title
        r"stragglers by collective start skew: [^(]*\([^)]*\) \(",  # the stragglers line
        r"Step replay: replayed vs measured step [^;]* over ",  # the replay line
    ):
        assert re.search(where + re.escape(said), text), (where, text)
    data = json.loads(out.read_text())
    assert data["waits"]["ranks_seen"] == {"analysed": PROFILED, "world_size": WORLD}
    assert [r["rank"] for r in data["waits"]["ranks"]] == PROFILED
    assert data["replay"]["ranks_seen"] == {"analysed": PROFILED, "world_size": WORLD}
    assert data["process_groups"]["0"]["ranks"] == [0, 1, 2, 3]

    # the report (and its analysis.json): the warning, the units section, the replay notes
    proc = run_cli("report", str(run), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stored = json.loads((run / "analysis.json").read_text())["torch"]
    assert stored["waits"]["ranks_seen"] == {"analysed": PROFILED, "world_size": WORLD}
    md = (run / "report.md").read_text()
    assert f"waits and stragglers cover {said}" in md
    assert f"Waits and transfers over {said}" in md
    assert f"replayed over {said}" in md


def test_a_sweep_tree_started_before_the_option_resumes_and_a_changed_spec_is_refused(tmp_path):
    """sweep.json written before ``profile_ranks`` existed (the key absent) is the default ``all``: it resumes;
    a sweep file that now sets another spec is a different configuration."""
    from fsdpbench.run.sweep import STATE_FILE, load_sweep, run_sweep
    from helpers import TINY_SWEEP, FakeRunAb, write_sweep_file

    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    run_sweep(sweep, run_ab=FakeRunAb(), write_index=False)
    state_path = sweep.tree / STATE_FILE
    state = json.loads(state_path.read_text())
    for cell in state["cells"]:
        del cell["config"]["profile_ranks"]
    state_path.write_text(json.dumps(state))
    run_sweep(load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path), run_ab=FakeRunAb())
    changed = TINY_SWEEP.replace("[base]\n", '[base]\nprofile_ranks = "0"\n')
    with pytest.raises(ConfigError, match=r"different configuration \(profile_ranks: 'all' → '0'\)"):
        run_sweep(load_sweep(write_sweep_file(tmp_path, changed), out=tmp_path), run_ab=FakeRunAb())

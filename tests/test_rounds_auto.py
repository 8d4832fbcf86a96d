"""``--rounds auto``: the stopping rule against hand computations, and the launcher's loop on fake launches
whose round medians are chosen so that the round at which the CI first excludes 1 follows from a binomial
tail computed here (no torchrun: a stand-in writes each launch's step records)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import orjson
import pytest

from fsdpbench.config import RunConfig
from fsdpbench.errors import ConfigError, LaunchError
from fsdpbench.results import run_folder
from fsdpbench.run import launcher, rounds

# ---------------------------------------------------------------------------------------------------------
# the rule alone: hand-made comparisons, widths worked out by hand
# ---------------------------------------------------------------------------------------------------------


def _comparison(ratio: float, ci: tuple[float, float] | None) -> dict:
    return {"base": "torch", "test": "other", "ratio": ratio, "ci95": list(ci) if ci else None}


def _check(comparisons, **kw):
    args = {
        "parity_valid": True,
        "rounds": 3,
        "ci_target_pct": 2.0,
        "max_rounds": 10,
        "elapsed_s": 0.0,
        "round_s": 10.0,
        "max_time_s": 0.0,
    }
    return rounds.check(comparisons, **{**args, **kw})


def test_a_ci_that_excludes_1_settles_the_comparison():
    got = _check([_comparison(1.07, (1.05, 1.10))])  # 5 % wide, but without 1
    assert (got.stopped, got.reason) == (True, rounds.STOP_SETTLED)


def test_a_ci_narrower_than_the_target_settles_it_even_when_it_holds_1():
    # width (1.009 − 0.999) / 1.004 = 0.996 % < 2 %
    got = _check([_comparison(1.004, (0.999, 1.009))])
    assert (got.stopped, got.reason) == (True, rounds.STOP_SETTLED)
    # (1.011 − 0.990) / 1.0 = 2.1 % ≥ 2 %: one more round
    more = _check([_comparison(1.0, (0.990, 1.011))])
    assert (more.stopped, more.reason) == (False, None) and "2.1 % wide" in more.why


def test_every_comparison_must_be_settled_and_no_ci_is_not_settled():
    settled, unsure = _comparison(1.2, (1.1, 1.3)), _comparison(1.0, (0.95, 1.05))
    assert not _check([settled, unsure]).stopped
    assert not _check([_comparison(1.2, None)]).stopped


def test_limits_stop_it_and_say_it_is_not_sure():
    unsure = [_comparison(1.0, (0.95, 1.05))]
    at_max = _check(unsure, rounds=10, max_rounds=10)
    assert (at_max.stopped, at_max.reason) == (True, rounds.STOP_MAX_ROUNDS) and "not sure" in at_max.why
    # 100 s spent + a 30 s round > 120 s: no more; 100 + 15 ≤ 120: one more; 0 = no limit
    late = _check(unsure, elapsed_s=100.0, round_s=30.0, max_time_s=120.0)
    assert (late.stopped, late.reason) == (True, rounds.STOP_MAX_TIME)
    assert not _check(unsure, elapsed_s=100.0, round_s=15.0, max_time_s=120.0).stopped
    assert not _check(unsure, elapsed_s=1e9, round_s=30.0, max_time_s=0.0).stopped


def test_failed_parity_stops_at_once():
    got = _check([_comparison(1.0, (0.95, 1.05))], parity_valid=False)
    assert (got.stopped, got.reason) == (True, rounds.STOP_PARITY)


# ---------------------------------------------------------------------------------------------------------
# the options
# ---------------------------------------------------------------------------------------------------------


def test_rounds_auto_from_a_flag_or_a_toml_file(tmp_path):
    cfg = RunConfig.from_sources(env={}, overrides={"arms": "torch", "rounds": "auto", "max_rounds": 5})
    assert (cfg.rounds_auto, cfg.rounds, cfg.max_rounds, cfg.ci_target) == (True, 3, 5, 2.0)
    toml = tmp_path / "a.toml"
    toml.write_text('arms = "torch"\nrounds = "auto"\nci_target = 1.5\n')
    cfg = RunConfig.from_sources(str(toml), env={})
    assert (cfg.rounds_auto, cfg.ci_target) == (True, 1.5)
    assert not RunConfig.from_sources(str(toml), env={}, overrides={"rounds": 4}).rounds_auto  # flag wins


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_rounds": 2}, "--max-rounds must be >= 3"),
        ({"ci_target": 0}, "--ci-target must be > 0"),
        ({"max_time": -1}, "--max-time must be >= 0"),
        ({"nnodes": 2, "rdzv_endpoint": "h:29400"}, "--rounds auto runs on one node only"),
    ],
)
def test_bad_auto_options_are_one_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_sources(env={}, overrides={"arms": "torch", "rounds": "auto", **overrides})


def test_the_cli_takes_rounds_auto_and_refuses_other_words():
    from helpers import run_cli

    proc = run_cli("ab", "--rounds", "many", timeout=60)
    assert proc.returncode == 2 and "expected a number of rounds or auto, got 'many'" in proc.stderr


# ---------------------------------------------------------------------------------------------------------
# the loop, on fake launches
# ---------------------------------------------------------------------------------------------------------

FAKE_WORKER = """
import json, pathlib, sys
spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
table, fail = json.loads(sys.argv[2]), json.loads(sys.argv[3])
cfg, arm, rnd = spec["config"], spec["arm"], spec["round"]
if [arm, rnd] in fail:
    sys.exit(1)
ms = table[arm][rnd] if rnd < len(table[arm]) else table[arm][-1]
with open(pathlib.Path(spec["run_dir"]) / "steps.jsonl", "a") as f:
    for step in range(cfg["warmup"] + cfg["steps"]):
        kind = "warmup" if step < cfg["warmup"] else "timed"
        f.write(json.dumps({"arm": arm, "round": rnd, "step": step, "kind": kind, "time_ms": ms,
                            "loss": 1.0, "tokens": 256}) + "\\n")
"""
"""Stands in for torchrun: every step of (arm, round) takes ``table[arm][round]`` ms (the last entry for
later rounds); an (arm, round) in ``fail`` exits 1."""


def _fake(monkeypatch, table: dict[str, list[float]], fail: list[list] | None = None) -> None:
    monkeypatch.setattr(
        launcher,
        "torchrun_command",
        lambda cfg, spec, logs, port=None, python=None: [
            sys.executable,
            "-c",
            FAKE_WORKER,
            str(spec),
            json.dumps(table),
            json.dumps(fail or []),
        ],
    )


def _auto(tmp_path: Path, arms: str, **more) -> RunConfig:
    return RunConfig.from_sources(
        env={},
        overrides={
            "arms": arms,
            "rounds": "auto",
            "warmup": 1,
            "steps": 2,
            "out": str(tmp_path),
            "report": False,
            **more,
        },
    )


def _summary(run_dir: Path) -> dict:
    return orjson.loads((run_dir / run_folder.SUMMARY).read_bytes())


def test_two_identical_arms_stop_with_no_difference_once_the_ci_is_narrow(tmp_path, monkeypatch):
    """Equal times in every round: every bootstrap ratio is exactly 1, a CI of width 0 — settled at the
    first check (3 rounds)."""
    _fake(monkeypatch, {"torch": [100.0], "torch-prefetch1": [100.0]})
    run_dir = launcher.run_ab(_auto(tmp_path, "torch,torch:prefetch=1"))
    summary = _summary(run_dir)
    assert summary["rounds_auto"]["reason"] == rounds.STOP_SETTLED and summary["rounds_auto"]["rounds"] == 3
    assert [len(a["rounds"]) for a in summary["arms"].values()] == [3, 3]
    assert summary["verdict"].startswith("no difference detected")


def test_two_noisy_identical_arms_stop_at_max_rounds_with_no_difference(tmp_path, monkeypatch):
    """Per-round medians 100, 110, 100, 110 in one arm and 110, 100, 110, 100 in the other: the CI holds 1
    and stays about 20 % wide, so it stops at --max-rounds 4 and says it is not sure."""
    _fake(
        monkeypatch, {"torch": [100.0, 110.0, 100.0, 110.0], "torch-prefetch1": [110.0, 100.0, 110.0, 100.0]}
    )
    run_dir = launcher.run_ab(_auto(tmp_path, "torch,torch:prefetch=1", max_rounds=4))
    summary = _summary(run_dir)
    assert (
        summary["rounds_auto"]["reason"] == rounds.STOP_MAX_ROUNDS and summary["rounds_auto"]["rounds"] == 4
    )
    manifest = orjson.loads((run_dir / run_folder.MANIFEST).read_bytes())
    assert [(i["round"], i["arm"]) for i in manifest["order"]][6:] == [(3, "torch-prefetch1"), (3, "torch")]
    assert summary["verdict"].startswith("no difference detected")


def _first_round_without_1(p_slow_round: float = 0.025, limit: int = 20) -> int:
    """The test arm takes 120 ms in every round but one (80 ms), the base 100 ms in all. A bootstrap
    resample's median ratio is ≤ 1 when at least half of its n draws (⌈n/2⌉) are the fast round, each with
    probability 1/n; the 95% CI excludes 1 once that probability is under 2.5 %."""
    for n in range(3, limit):
        k = math.ceil(n / 2)
        tail = sum(math.comb(n, j) * (1 / n) ** j * (1 - 1 / n) ** (n - j) for j in range(k, n + 1))
        if tail < p_slow_round:
            return n
    raise AssertionError("no round excludes 1")


def test_a_real_difference_stops_as_soon_as_the_ci_excludes_1(tmp_path, monkeypatch):
    expected = _first_round_without_1()  # 7: the tails are .26, .26, .058, .062, then .010
    assert expected == 7
    test_arm = [120.0, 80.0] + [120.0] * 10
    _fake(monkeypatch, {"torch": [100.0], "torch-ac": test_arm})
    run_dir = launcher.run_ab(_auto(tmp_path, "torch,torch:ac=full:label=torch-ac"))
    summary = _summary(run_dir)
    assert summary["rounds_auto"]["reason"] == rounds.STOP_SETTLED
    assert summary["rounds_auto"]["rounds"] == expected
    (comp,) = summary["comparisons"]
    assert comp["ci95"][0] > 1.0 and comp["rounds"] == [expected, expected]
    assert "slower" in summary["verdict"]


def test_resume_carries_on_adding_rounds_where_the_run_stopped(tmp_path, monkeypatch):
    test_arm = [120.0, 80.0] + [120.0] * 10
    _fake(monkeypatch, {"torch": [100.0], "torch-ac": test_arm}, fail=[["torch-ac", 4]])
    cfg = _auto(tmp_path, "torch,torch:ac=full:label=torch-ac")
    with pytest.raises(LaunchError, match="round 4"):
        launcher.run_ab(cfg)
    (run_dir,) = tmp_path.glob("ab_*")
    assert _summary(run_dir)["rounds_auto"]["stopped"] is False  # it had decided on round 5 (index 4)
    _fake(monkeypatch, {"torch": [100.0], "torch-ac": test_arm})
    launcher.run_ab(cfg, resume=run_dir)
    summary = _summary(run_dir)
    assert (summary["rounds_auto"]["reason"], summary["rounds_auto"]["rounds"]) == (rounds.STOP_SETTLED, 7)
    assert summary["missing"] == []


# ---------------------------------------------------------------------------------------------------------
# real launches: the CLI path end to end (6 tiny launches)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ab_rounds_auto_runs_real_launches_and_says_why_it_stopped(tmp_path):
    """Two identical arms, a CI target of 1000 %: a CI of two equal configurations is far narrower than
    that even on a loaded machine (a round 10× slower than the others would be needed), so it stops at the
    first check, after 3 interleaved rounds (``--max-rounds 3`` bounds it to 6 launches), and says so."""
    from helpers import free_port, run_cli

    proc = run_cli(
        *("ab", "--arms", "torch,torch:label=again", "--rounds", "auto", "--ci-target", "1000"),
        *("--max-rounds", "3", "--warmup", "1", "--steps", "2", "--seq-len", "32", "--layers", "1"),
        *("--nproc", "2", "--no-profile", "--no-report", "--out", str(tmp_path), "--name", "auto"),
        *("--master-port", str(free_port())),
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = tmp_path.glob("auto_*")
    steps = [orjson.loads(line) for line in (run_dir / run_folder.STEPS).read_bytes().splitlines()]
    assert sorted({(s["arm"], s["round"]) for s in steps if s["kind"] == "timed"}) == [
        (arm, r) for arm in ("again", "torch") for r in range(3)
    ]
    summary = _summary(run_dir)
    assert (summary["rounds_auto"]["reason"], summary["rounds_auto"]["rounds"]) == (rounds.STOP_SETTLED, 3)
    said = " ".join(proc.stderr.split())  # rich wraps and pads the lines
    assert "--rounds auto stopped after 3 rounds: every comparison's 95% CI excludes 1 or is narrower" in said
    assert "time: timed steps were" in said


def test_resume_decides_when_the_run_ended_between_a_round_and_its_check(tmp_path, monkeypatch):
    """A run killed after its last launch but before the check: --resume checks, adds the next round and
    goes on (the same decisions as an uninterrupted run: 7 rounds)."""
    _fake(monkeypatch, {"torch": [100.0], "torch-ac": [120.0, 80.0] + [120.0] * 10})
    cfg = _auto(tmp_path, "torch,torch:ac=full:label=torch-ac")
    calls = []
    real = launcher.Run.next_auto_round

    def interrupted_once(self, console):
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return real(self, console)

    monkeypatch.setattr(launcher.Run, "next_auto_round", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        launcher.run_ab(cfg)
    (run_dir,) = tmp_path.glob("ab_*")
    launcher.run_ab(cfg, resume=run_dir)
    summary = _summary(run_dir)
    assert (summary["rounds_auto"]["reason"], summary["rounds_auto"]["rounds"]) == (rounds.STOP_SETTLED, 7)

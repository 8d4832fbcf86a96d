"""summary.json as typed objects (``fsdpbench.results.summary``): the file reads into a ``Summary`` and writes
back key for key, against the JSON itself (decoded here with the standard library, order kept)."""

from __future__ import annotations

import json

import pytest

from fsdpbench.errors import InputError
from fsdpbench.results.summary import ArmComparison, ArmSummary, RoundsCheck, Summary
from fsdpbench.run import summarize

MISSING_ARM = {
    "status": "missing",
    "rounds": [],
    "median_ms": None,
    "p10_ms": None,
    "p90_ms": None,
    "tokens_per_s_per_device": None,
    "tflops_per_device": None,
    "mfu": None,
    "peak_flops_per_device": None,
    "peak_mem_allocated_bytes": None,
    "peak_mem_reserved_bytes": None,
    "phases": None,
    "peak_rss_bytes": None,
    "peak_rss_since": None,
}
"""An arm with no timed round, as summary.json has always written it (docs/DATA.md)."""


def _manifest() -> dict:
    arms = [{"label": "torch"}, {"label": "hyper"}]
    return {
        "config": {"nproc": 1, "nnodes": 1, "arms": arms, "warmup": 0, "steps": 1},
        "arms": arms,
        "order": [{"arm": "torch", "round": 0}, {"arm": "hyper", "round": 0}],
    }


def _same_json(a: dict, b: dict) -> bool:
    """Equal including key order (what the bytes of the file show)."""
    return json.dumps(a) == json.dumps(b)


def test_an_arm_with_no_timed_round_writes_every_figure_as_null_in_the_files_order():
    summary = summarize.build_summary(_manifest(), [])
    assert _same_json(summary["arms"]["torch"], MISSING_ARM)
    assert _same_json(ArmSummary(status="missing").to_dict(), MISSING_ARM)
    assert summary["missing"] == [
        {"arm": "torch", "round": 0, "why": "not run yet"},
        {"arm": "hyper", "round": 0, "why": "not run yet"},
    ]


def test_a_comparison_reads_back_with_tuples_and_writes_lists():
    raw = {
        "base": "torch",
        "test": "hyper",
        "ratio": 1.25,
        "ci95": [1.2, 1.3],
        "rounds": [3, 3],
        "time_change_pct": 25.0,
        "significant": True,
        "rounds_needed_1pct": 4,
        "verdict": "hyper is 1.25× slower than torch",
        "phases": {"forward": None},
        "memory": {
            "measure": "peak resident set (process)",
            "base_bytes": 10,
            "test_bytes": 15,
            "ratio": 1.5,
        },
    }
    comp = ArmComparison.from_dict(raw)
    assert comp.ci95 == (1.2, 1.3) and comp.rounds == (3, 3) and comp.memory.ratio == 1.5
    assert _same_json(comp.to_dict(), raw)


def test_a_summary_written_before_a_field_existed_reads_it_as_none(tmp_path):
    old_arm = {
        k: v for k, v in MISSING_ARM.items() if k not in ("phases", "peak_rss_bytes", "peak_rss_since")
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"schema_version": 1, "arms": {"torch": old_arm}, "parity": {"valid": True}}))
    s = Summary.read(tmp_path)
    assert s.arms["torch"].phases is None and s.arms["torch"].peak_rss_since is None
    assert s.comparisons == [] and s.verdict is None and s.parity.valid is True


def test_a_file_that_is_not_a_summary_is_refused_naming_it(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"arms": {}}))
    with pytest.raises(InputError, match=r"summary\.json: not an fsdpbench summary\.json .*--resume"):
        Summary.read(path)
    with pytest.raises(InputError, match="no such file"):
        Summary.read(tmp_path / "elsewhere")


@pytest.mark.distributed
def test_the_summary_of_a_real_run_round_trips_key_for_key(profiled_ab_run):
    """The shared profiled run's summary.json (written by the launcher) → Summary → the same JSON."""
    raw = json.loads((profiled_ab_run / "summary.json").read_text())
    summary = Summary.read(profiled_ab_run)
    assert _same_json(Summary.from_dict(raw).to_dict(), raw)
    assert _same_json(summary.to_dict(), raw)
    assert list(summary.arms) == list(raw["arms"])
    for label, arm in raw["arms"].items():
        typed = summary.arms[label]
        assert typed.median_ms == arm["median_ms"] and [r.median_ms for r in typed.rounds] == [
            r["median_ms"] for r in arm["rounds"]
        ]
        assert (typed.memory_timeline is None) == ("memory_timeline" not in arm)
    assert [c.verdict for c in summary.comparisons] == [c["verdict"] for c in raw["comparisons"]]
    assert summary.parity.valid == raw["parity"]["valid"]


def test_a_schema_1_summary_keeps_its_verdict_and_names_the_bootstrap_that_made_it(tmp_path):
    """A summary of schema 1 (before the paired verdict): its comparison has no ``method``; it reads and writes
    back byte for byte, its verdict is not recomputed, and wherever the verdict is made again from its numbers
    (the sweep index) the interval is named as the unpaired percentile bootstrap it was."""
    from fsdpbench.report.index import _comparison_verdict

    comp = {
        "base": "torch",
        "test": "hyper",
        "ratio": 1.25,
        "ci95": [1.2, 1.3],
        "rounds": [3, 3],
        "time_change_pct": 25.0,
        "significant": True,
        "rounds_needed_1pct": 4,
        "verdict": "hyper is 1.25× slower than torch (+25.0%; 95% CI 1.20×–1.30×)",
    }
    raw = {"schema_version": 1, "arms": {}, "comparisons": [comp], "verdict": comp["verdict"]}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(raw))
    s = Summary.read(path)
    (c,) = s.comparisons
    assert c.method is None and c.verdict == comp["verdict"] and s.verdict == comp["verdict"]
    assert c.interval_name == "95% CI (percentile bootstrap, unpaired: the rule of schema 1)"
    assert _same_json({k: c.to_dict()[k] for k in comp}, comp) and "method" not in c.to_dict()
    again = _comparison_verdict(c, s, {})
    assert again == (
        "hyper is 1.25× slower than torch (+25.0%; "
        "95% CI (percentile bootstrap, unpaired: the rule of schema 1) 1.20×–1.30×)"
    )


def test_a_new_summary_records_the_rule_of_each_comparison():
    """Schema 2: each comparison says which rule made its interval and whether ``--rounds auto`` may stop."""
    steps = []
    for r, (a, b) in enumerate([(100.0, 110.0), (101.0, 111.1), (99.0, 108.9)]):
        for arm, t in (("torch", a), ("hyper", b)):
            steps.append({"arm": arm, "round": r, "step": 0, "kind": "timed", "time_ms": t, "tokens": 8})
    manifest = _manifest()
    manifest["config"]["rounds"] = 3
    manifest["order"] = [
        {"arm": a, "round": r}
        for r in range(3)
        for a in (("torch", "hyper") if r % 2 == 0 else ("hyper", "torch"))
    ]
    s = summarize.summarize_run(manifest, steps)
    assert s.schema_version == 2
    (c,) = s.comparisons
    assert (c.method, c.decision, c.stop, c.level) == ("paired t", "slower", True, 0.95)
    assert "look" not in c.to_dict() and c.to_dict()["method"] == "paired t"
    assert s.verdict.startswith("hyper is 1.10× slower than torch (+10.0%; 95 % CI (paired t, 3 rounds) ")


def test_rounds_auto_reads_as_a_typed_decision_and_writes_back_the_same_object():
    decision = {"rounds": 6, "stopped": True, "reason": "max_rounds", "why": "stopped after 6 rounds: max"}
    summary = Summary.from_dict({"schema_version": 2, "rounds_auto": decision})
    assert summary.rounds_auto == RoundsCheck(
        rounds=6, stopped=True, reason="max_rounds", why=decision["why"]
    )
    assert summary.to_dict()["rounds_auto"] == decision
    assert Summary.from_dict({"schema_version": 2}).rounds_auto is None
    with pytest.raises(InputError, match=r"\$\.rounds_auto\.rounds"):
        Summary.from_dict({"schema_version": 2, "rounds_auto": {**decision, "rounds": "six"}}, "summary.json")

"""Each findings rule fires on hand-built metric tables when it should, and stays quiet otherwise."""

from __future__ import annotations

import copy

import pytest

from fsdpbench.analysis import findings as fnd
from fsdpbench.analysis.compare.diff import diff_analyses
from helpers import REPO, analysis, fragmented, low_overlap, rank


def ids(result) -> list[str]:
    return [f.id for f in result.findings]


def test_identical_profiles_give_only_the_step_time_headline():
    d = diff_analyses(analysis(), analysis(), base_arm={"prefetch": 1}, test_arm={"prefetch": 1})
    assert ids(d) == ["step_time"]
    assert d.findings[0].severity == "info" and "0.0%" in d.findings[0].title
    assert d.warnings == []


def test_fragmentation_fires_at_three_times_the_calls_for_the_same_bytes():
    d = diff_analyses(analysis(), fragmented(124 / 12), base_label="torch", test_label="hyper")
    f = d.finding("fragmentation")
    assert f is not None and f.severity == "high"  # 200 ms of 1 s step >= 10%
    assert "all_gather 124 vs 12 (10.3×), same bytes" in f.evidence
    assert "reduce_scatter" not in f.evidence
    assert "bucket" in f.action and f.estimate.label == "estimate"
    assert diff_analyses(analysis(), fragmented(3.0)).finding("fragmentation") is not None


def test_fragmentation_stays_quiet_below_the_ratio_or_when_bytes_differ():
    assert diff_analyses(analysis(), fragmented(2.9)).finding("fragmentation") is None
    assert diff_analyses(analysis(), fragmented(10.0, bytes_ratio=2.0)).finding("fragmentation") is None


def test_fragmentation_of_the_base_arm_is_reported_for_the_base():
    d = diff_analyses(fragmented(10.0), analysis(), base_label="hyper", test_label="torch")
    assert d.finding("fragmentation").title.startswith("hyper's communication is 10.0×")


def test_fragmentation_names_comm_fusion_when_the_arm_runs_without_it():
    arm = {"backend": "hyper", "prefetch": 0, "comm_fusion": False}
    d = diff_analyses(analysis(), fragmented(10.0), test_label="hyper", test_arm=arm)
    assert "comm_fusion=false" in d.finding("fragmentation").action


@pytest.mark.parametrize("backend", ["torch", "fsdp1", "deepspeed"])
def test_fragmentation_suggests_comm_fusion_only_to_hyper(backend):
    """Every arm's manifest entry has comm_fusion=false, but only hyper has that option; a DeepSpeed arm
    is told about its own prefetch bucket instead."""
    arm = {"backend": backend, "prefetch": 0, "comm_fusion": False}
    action = (
        diff_analyses(analysis(), fragmented(10.0), test_label=backend, test_arm=arm)
        .finding("fragmentation")
        .action
    )
    assert "comm_fusion" not in action
    assert ("stage3_prefetch_bucket_size" in action) == (backend == "deepspeed")


@pytest.mark.parametrize(("prefetch", "advice"), [(0, "prefetch=1"), (1, "prefetch=2"), (None, "unknown")])
def test_low_overlap_recommends_prefetch_naming_the_arms_setting(prefetch, advice):
    arm = None if prefetch is None else {"prefetch": prefetch}
    d = diff_analyses(analysis(), low_overlap(0.2), test_label="hyper", base_arm=arm, test_arm=arm)
    f = d.finding("low_overlap")
    assert f is not None and f.severity == "high" and advice in f.action
    assert "overlap 20.0% (hyper) vs 80.0% (base)" in f.evidence
    # hiding comm as well as the base: exposed 300k*(1-0.8) - 300k*(1-0.2) = -180 ms
    assert f.estimate.exposed_comm_delta_us == pytest.approx(-180_000.0)


def test_low_overlap_stays_quiet_when_comm_is_hidden_or_exposed_comm_is_small():
    assert diff_analyses(low_overlap(0.7), low_overlap(0.6)).finding("low_overlap") is None
    small = analysis(
        rank(0, overlap=0.2, comm=50_000.0), rank(1, overlap=0.2, comm=50_000.0)
    )  # 4% of the step
    assert diff_analyses(small, small).finding("low_overlap") is None


def test_prefetch_change_reports_the_measured_overlap_change_only_when_settings_differ():
    d = diff_analyses(
        low_overlap(0.3),
        low_overlap(0.6),
        base_label="torch",
        test_label="torch-prefetch1",
        base_arm={"prefetch": 0},
        test_arm={"prefetch": 1},
    )
    f = d.finding("prefetch_change")
    assert f is not None and f.severity == "info" and "30.0% → 60.0% (+30.0 pts)" in f.evidence
    assert f.estimate.exposed_comm_delta_us == pytest.approx(-90_000.0)
    worse = diff_analyses(
        low_overlap(0.6), low_overlap(0.3), base_arm={"prefetch": 0}, test_arm={"prefetch": 1}
    )
    assert worse.finding("prefetch_change").severity == "medium"
    same = diff_analyses(
        low_overlap(0.3), low_overlap(0.6), base_arm={"prefetch": 1}, test_arm={"prefetch": 1}
    )
    assert same.finding("prefetch_change") is None


def syncs(**counts: int) -> dict:
    return analysis(rank(0, sync=counts), rank(1, sync=counts))


def test_sync_storm_fires_on_many_more_barriers_and_launches():
    d = diff_analyses(syncs(barrier=10, launch_ffts=59), syncs(barrier=120, launch_ffts=365))
    f = d.finding("sync_storm")
    assert (
        f is not None
        and "BARRIER 120 vs 10 (+110 per rank)" in f.evidence
        and "Launch_Ffts 365 vs 59" in f.evidence
    )


def test_sync_storm_stays_quiet_for_small_or_proportionally_small_increases():
    assert diff_analyses(syncs(barrier=10), syncs(barrier=40)).finding("sync_storm") is None  # +30 < 50
    assert (
        diff_analyses(syncs(launch_ffts=300), syncs(launch_ffts=500)).finding("sync_storm") is None
    )  # 1.7x < 2x


def with_ops(**ops_us: float) -> dict:
    ops = [{"op_type": k, "count": 10, "total_us": v} for k, v in ops_us.items()]
    return analysis(rank(0, ops=ops), rank(1, ops=copy.deepcopy(ops)))


def test_compute_path_names_op_types_whose_time_moves_by_two_percent_of_the_step():
    d = diff_analyses(
        with_ops(Slice=100_000.0, MatMul=500_000.0, Cast=20_000.0),
        with_ops(Slice=36_000.0, MatMul=500_000.0, Cast=10_000.0),
        test_label="hyper",
    )
    f = d.finding("compute_path")
    assert f is not None and f.severity == "info"
    assert f.title == "hyper's compute path is faster on Slice"  # Cast moved 1% of the step: below threshold
    assert "Slice −64.0 ms" in f.evidence
    slower = diff_analyses(with_ops(Slice=36_000.0), with_ops(Slice=100_000.0)).finding("compute_path")
    assert slower.severity == "medium" and slower.estimate.step_time_delta_us == pytest.approx(-64_000.0)


def test_compute_path_stays_quiet_for_small_op_differences():
    assert diff_analyses(with_ops(Slice=100_000.0), with_ops(Slice=85_000.0)).finding("compute_path") is None


def test_straggler_names_the_rank_that_computes_longest():
    skewed = analysis(rank(0), rank(1), rank(2, compute=1_000_000.0), rank(3))
    d = diff_analyses(analysis(rank(0), rank(1), rank(2), rank(3)), skewed, test_label="hyper")
    f = d.finding("straggler")
    assert f is not None and f.title == "rank 2 is a straggler in hyper" and "+25.0%" in f.evidence


def test_straggler_stays_quiet_for_small_skew():
    d = diff_analyses(analysis(), analysis(rank(0), rank(1, compute=840_000.0)))  # 5%
    assert d.finding("straggler") is None


@pytest.mark.parametrize(
    ("context", "test", "phrase"),
    [
        ({"parity": {"valid": False, "reason": "loss differs at step 2"}}, None, "parity failed"),
        ({}, analysis(rank(0), rank(1), rank(2), rank(3)), "world size differs (2 vs 4 ranks)"),
        (
            {"base": {"model": {"num_hidden_layers": 4}}, "test": {"model": {"num_hidden_layers": 8}}},
            None,
            "num_hidden_layers 4 vs 8",
        ),
    ],
)
def test_invalid_comparison_comes_first_and_warns_what_is_compared(context, test, phrase):
    d = diff_analyses(analysis(), test or analysis(), base_label="torch", test_label="hyper", context=context)
    assert d.findings[0].id == "invalid_comparison" and phrase in d.findings[0].evidence
    assert any(w.startswith("comparing torch (") and phrase in w for w in d.warnings)


def test_invalid_comparison_names_a_missing_rank_profile_when_world_sizes_match():
    ctx = {"base": {"world_size": 2}, "test": {"world_size": 2}}
    d = diff_analyses(analysis(), analysis(rank(0)), context=ctx)
    assert "ranks analysed differ (2 vs 1 of 2)" in d.finding("invalid_comparison").evidence


def test_invalid_comparison_stays_quiet_for_a_valid_comparison():
    ctx = {
        "parity": {"valid": True},
        "base": {"world_size": 2, "model": {"a": 1}},
        "test": {"world_size": 2, "model": {"a": 1}},
    }
    assert diff_analyses(analysis(), analysis(), context=ctx).finding("invalid_comparison") is None


def test_findings_are_ranked_by_severity_then_estimated_gain():
    test = analysis(
        *(
            rank(
                r,
                overlap=0.2,
                collectives={"all_gather": {"count": 120, "bytes": 10**9, "time_us": 200_000.0}},
                sync={"barrier": 200},
            )
            for r in (0, 1)
        )
    )
    d = diff_analyses(analysis(), test, base_arm={"prefetch": 0}, test_arm={"prefetch": 0})
    order = ids(d)
    assert order[0] == "step_time"
    severities = [fnd.SEVERITY_ORDER[f.severity] for f in d.findings[1:]]
    assert severities == sorted(severities) and {"low_overlap", "fragmentation", "sync_storm"} <= set(order)


def test_every_rule_carries_its_check_and_its_findings_carry_its_id():
    assert len({r.id for r in fnd.RULES}) == len(fnd.RULES)
    assert all(r.fires_when and r.severity and r.action and callable(r.check) for r in fnd.RULES)
    test = analysis(
        *(
            rank(r, overlap=0.2, collectives={"all_gather": {"count": 120, "bytes": 10**9, "time_us": 2e5}})
            for r in (0, 1)
        )
    )
    d = diff_analyses(analysis(), test, base_arm={"prefetch": 0}, test_arm={"prefetch": 1})
    assert {"step_time", "fragmentation", "low_overlap", "prefetch_change"} <= {f.id for f in d.findings}
    assert [r.check.__name__ for r in fnd.RULES] == [f"rule_{r.id}" for r in fnd.RULES]


def test_readme_rules_table_matches_the_code():
    doc = (REPO / "docs" / "diagnosis.md").read_text()
    for r in fnd.RULES:
        assert f"| `{r.id}` | {r.fires_when} | {r.severity} | {r.action} |" in doc, r.id


def test_low_overlap_without_a_better_arm_gives_only_the_best_case_bound():
    d = diff_analyses(low_overlap(0.1), low_overlap(0.2), test_label="hyper")
    f = next(f for f in d.findings if f.id == "low_overlap" and f.title.startswith("hyper"))
    assert f.estimate.step_time_delta_us is None
    assert f.estimate.best_case_step_time_delta_us == pytest.approx(-300_000.0 * 0.8)


def _avg_ops(n_rs: float, n_ar: float = 0.0, us_each: float = 20.0) -> list[dict]:
    """Op rows as the Ascend reader labels torch_npu's AVG divides (see test_trace_ascend_hccl_avg.py)."""
    ops = [{"op_type": "MatMul", "count": 100, "total_us": 500_000.0}]
    if n_rs:
        ops.append(
            {"op_type": "RealDiv (HCCL AVG of reduce_scatter)", "count": n_rs, "total_us": n_rs * us_each}
        )
    if n_ar:
        ops.append({"op_type": "RealDiv (HCCL AVG of all_reduce)", "count": n_ar, "total_us": n_ar * us_each})
    return ops


def test_hccl_avg_division_names_the_arm_with_more_divides_and_their_collectives():
    """The study: hyper's ~10x more reduce-scatters cost as many more divides (RealDiv 173 vs 73 there)."""
    base = analysis(*(rank(r, ops=_avg_ops(12, 1)) for r in (0, 1)))
    test = analysis(*(rank(r, ops=_avg_ops(124, 1, us_each=200.0)) for r in (0, 1)))
    d = diff_analyses(base, test, base_label="torch", test_label="hyper")
    f = d.finding("hccl_avg_division")
    assert f is not None and f.title == "hyper runs 125 HCCL AVG divides vs 13 in torch"
    assert "hyper 125 (1 after all_reduce, 124 after reduce_scatter" in f.evidence
    assert "torch 13 (1 after all_reduce, 12 after reduce_scatter" in f.evidence
    # 125 divides * 200 µs - 13 * 20 µs = 24.74 ms >= 2% of the 1 s base step
    assert f.severity == "medium" and f.estimate.step_time_delta_us == pytest.approx(
        -(125 * 200.0 - 13 * 20.0)
    )
    assert "SUM" in f.cause and "bucket" in f.action


def test_hccl_avg_division_is_info_when_the_divides_cost_little_and_reported_for_the_base_too():
    base = analysis(*(rank(r, ops=_avg_ops(120)) for r in (0, 1)))
    test = analysis(*(rank(r, ops=_avg_ops(12)) for r in (0, 1)))
    f = diff_analyses(base, test, base_label="hyper", test_label="torch").finding("hccl_avg_division")
    assert f is not None and f.severity == "info" and f.title.startswith("hyper runs 120")


def test_hccl_avg_division_stays_quiet_without_divides_or_with_equal_counts():
    assert diff_analyses(analysis(), analysis()).finding("hccl_avg_division") is None
    same = analysis(*(rank(r, ops=_avg_ops(12)) for r in (0, 1)))
    assert diff_analyses(same, copy.deepcopy(same)).finding("hccl_avg_division") is None


# ------------------------------------------------------- one rank on a GPU (seen on an H200, 2026-12-04)
def _one_rank(step: float, free: float, launches: float, comm: float = 0.0) -> dict:
    """A one-rank profile as FSDP2 gives it on one GPU: no collectives, compute + free = step."""
    r = rank(0, step=step, compute=step - free, comm=comm, overlap=0.0, free=free, collectives={})
    r["sync"] = {"device_synchronize": 2, "kernel_launch": launches}
    return analysis(r)


def test_an_arm_whose_step_difference_is_idle_time_is_host_bound():
    """The unit=module arm on one H200: 2.03x the step, all of it idle (numbers from that run, rounded)."""
    d = diff_analyses(
        _one_rank(115_600.0, 112_300.0, 1767), _one_rank(234_300.0, 231_000.0, 1824), test_label="module"
    )
    f = d.finding("host_bound")
    # by hand: idle +118.7 ms >= 10% of 115.6 ms and all of the +118.7 ms step difference; 98.6% of its step
    assert f is not None and f.subject == "module" and f.severity == "high"
    assert f.title == "module is host-bound: 118.7 ms more idle time than base"
    assert "idle 231.0 ms of module's 234.3 ms step (98.6%)" in f.evidence
    assert "kernel launches 1767 → 1824 per rank" in f.evidence
    assert f.estimate.label == "measured" and f.estimate.step_time_delta_us == pytest.approx(-118_700.0)
    # the other direction: the base is the idle one
    back = diff_analyses(_one_rank(234_300.0, 231_000.0, 1824), _one_rank(115_600.0, 112_300.0, 1767))
    assert back.finding("host_bound").subject == "base"
    # idle time that explains under half of the step difference (compute does the rest): no finding
    slower = _one_rank(300_000.0, 150_000.0, 1767)
    assert diff_analyses(_one_rank(115_600.0, 112_300.0, 1767), slower).finding("host_bound") is None
    # and the headline no longer claims findings below when none follow
    alone = diff_analyses(_one_rank(115_600.0, 112_300.0, 1767), _one_rank(116_000.0, 112_700.0, 1767))
    headline = alone.finding("step_time")
    assert ids(alone) == ["step_time"] and headline.cause.startswith("no rule found a cause")
    assert "findings below" not in headline.action


def test_prefetch_with_no_communication_on_either_side_says_so_instead_of_advising():
    """One rank: FSDP2 issues no collectives, so a deeper prefetch cannot change exposed comm."""
    d = diff_analyses(
        _one_rank(183_800.0, 77_600.0, 2305),
        _one_rank(171_400.0, 65_300.0, 2305),
        base_label="torch",
        test_label="torch-prefetch1",
        base_arm={"prefetch": 0},
        test_arm={"prefetch": 1},
    )
    f = d.finding("prefetch_change")
    assert f.severity == "info" and "neither profile has communication to prefetch" in f.title
    assert "keep the shallower" not in f.action and "two ranks or more" in f.action


def test_a_deeper_prefetch_that_exposes_as_much_but_steps_faster_is_not_advised_against():
    base = analysis(rank(0, step=1_000_000.0, overlap=0.3), rank(1, step=1_000_000.0, overlap=0.3))
    faster = analysis(rank(0, step=900_000.0, overlap=0.3), rank(1, step=900_000.0, overlap=0.3))
    arms = {"base_arm": {"prefetch": 0}, "test_arm": {"prefetch": 1}, "test_label": "deep"}
    f = diff_analyses(base, faster, **arms).finding("prefetch_change")
    assert f.severity == "medium" and "did not reduce exposed communication" in f.title
    assert "100.0 ms shorter all the same" in f.action and "keep the shallower" not in f.action
    same_step = diff_analyses(base, copy.deepcopy(base), **arms).finding("prefetch_change")
    assert same_step.action.startswith("keep the shallower prefetch (arm base)")


def test_a_host_bound_arm_that_is_also_fragmented_comes_after_the_fragmentation_finding():
    """Idle time that comes with 10x the collective calls is a symptom of the fragmentation: medium, and
    the cause says so; the fragmentation finding (high) ranks above it."""
    coll = lambda n: {"all_gather": {"count": n, "bytes": 10**9, "time_us": 200_000.0}}  # noqa: E731
    base = analysis(rank(0, step=1_000_000.0, free=100_000.0, collectives=coll(12)))
    test = analysis(rank(0, step=2_000_000.0, free=1_000_000.0, collectives=coll(120)))
    d = diff_analyses(base, test, test_label="hyper")
    f = d.finding("host_bound")
    assert f.severity == "medium" and "which the fragmentation finding prices" in f.cause
    assert ids(d).index("fragmentation") < ids(d).index("host_bound")

"""Results folder writing and the summary built from it (synthetic records, no launches)."""

from __future__ import annotations

import itertools
import math

import pytest

from fsdpbench.config import RunConfig
from fsdpbench.results import run_folder
from fsdpbench.run import summarize
from fsdpbench.run.launcher import interleaved_order, torchrun_command
from helpers import run_manifest, step_records


def test_run_folder_is_never_reused(tmp_path):
    a = run_folder.create_run_dir(tmp_path, "ab")
    b = run_folder.create_run_dir(tmp_path, "ab")
    assert a != b and a.name.startswith("ab_") and b.exists()


def test_read_steps_skips_a_truncated_last_line(tmp_path):
    for rec in step_records("torch", 0, [1.0, 2.0]):
        run_folder.append_step(tmp_path / "steps.jsonl", rec)
    with open(tmp_path / "steps.jsonl", "ab") as f:
        f.write(b'{"arm": "torch", "ro')
    assert len(run_folder.read_step_records(tmp_path)) == 3


def test_drop_steps_removes_only_that_arm_round_and_keeps_a_copy(tmp_path):
    for rec in (
        step_records("torch", 0, [1.0]) + step_records("hyper", 0, [2.0]) + step_records("torch", 1, [3.0])
    ):
        run_folder.append_step(tmp_path / "steps.jsonl", rec)
    assert run_folder.drop_steps(tmp_path, "torch", 0, keep_to=tmp_path / "kept.jsonl") == 2
    left = run_folder.read_step_records(tmp_path)
    assert {(r["arm"], r["round"]) for r in left} == {("hyper", 0), ("torch", 1)}
    assert len((tmp_path / "kept.jsonl").read_text().splitlines()) == 2


def test_summary_statistics_use_per_round_medians_of_timed_steps():
    steps = []
    for r, (a, b) in enumerate(
        [
            ([100, 102, 98], [125, 127, 123]),
            ([101, 103, 99], [126, 128, 124]),
            ([99, 101, 97], [124, 126, 122]),
        ]
    ):
        steps += step_records("torch", r, a) + step_records("hyper", r, b)
    s = summarize.build_summary(run_manifest(), steps, flops_per_token=1e6)
    torch_arm = s["arms"]["torch"]
    assert [x["median_ms"] for x in torch_arm["rounds"]] == [100, 101, 99]
    assert torch_arm["median_ms"] == 100
    # pooled timed steps (warmup 999 ms excluded): sorted 97,98,99,...; p10 at position 0.1·8 = 0.8
    assert torch_arm["p10_ms"] == pytest.approx(97.8)
    assert torch_arm["tokens_per_s_per_device"] == pytest.approx(512 / 2 / 0.1)
    assert torch_arm["tflops_per_device"] == pytest.approx(1e6 * 2560 / 1e12)
    assert torch_arm["mfu"] is None  # cpu: no peak FLOP/s, no guess
    comp = s["comparisons"][0]
    # paired by round, base first in rounds 0 and 2 (alternate order): the crossover mean of the log ratios
    d = [math.log(t / b) for b, t in ((100, 125), (101, 126), (99, 124))]
    assert comp["ratio"] == pytest.approx(math.exp((d[1] + (d[0] + d[2]) / 2) / 2)) and comp["significant"]
    assert comp["method"] == "paired t" and comp["decision"] == "slower"
    assert s["verdict"].startswith("hyper is 1.25× slower than torch (+24.9%; 95 % CI (paired t, 3 rounds)")
    assert s["parity"]["valid"] and s["parity"]["mode"] == "exact" and s["missing"] == []


def test_summary_of_one_round_per_arm_cannot_tell_yet_even_at_a_large_ratio():
    """ab's own verdict (summary.json) for 1 round per arm: 399 ms vs 100 ms is no CI, not "no difference"."""
    steps = step_records("torch", 0, [100.0, 100.0]) + step_records("hyper", 0, [399.0, 399.0])
    s = summarize.build_summary(run_manifest(rounds=1), steps)
    comp = s["comparisons"][0]
    assert comp["ratio"] == pytest.approx(3.99) and comp["ci95"] is None and comp["rounds"] == [1, 1]
    assert s["verdict"].startswith(
        "cannot tell yet whether hyper differs from torch: ratio 3.990 from 1 round"
    )
    assert "no difference" not in s["verdict"]


def test_mfu_uses_the_peak_of_the_dtype_each_arm_ran_and_of_the_exact_device_model():
    """Peaks from NVIDIA's datasheets (dense = half the sparsity figure): H100 SXM bf16 989.4 / FP32 67
    TFLOP/s; H200 NVL bf16 1,671 sparse → 835 dense, FP32 60; H200 SXM bf16 989."""
    steps = step_records("torch", 0, [100.0]) + step_records("hyper", 0, [100.0])
    tflops = 1e9 * 2560  # FLOP/s per device: 1e9 FLOP/token × 512 tokens / 2 ranks / 0.1 s
    manifest = run_manifest(rounds=1, device_name="NVIDIA H100 80GB HBM3")
    manifest["arm_runtime"] = {"torch": {"param_dtype": "bfloat16"}, "hyper": {"param_dtype": "float32"}}
    s = summarize.build_summary(manifest, steps, flops_per_token=1e9)
    assert s["arms"]["torch"]["mfu"] == pytest.approx(tflops / 989e12)
    assert s["arms"]["hyper"]["mfu"] == pytest.approx(tflops / 67e12)  # fp32 arm: not the bf16 peak
    manifest["arm_runtime"]["hyper"]["float32_matmul_precision"] = "high"  # TF32 allowed: the TF32 peak
    assert summarize.build_summary(manifest, steps, flops_per_token=1e9)["arms"]["hyper"][
        "mfu"
    ] == pytest.approx(tflops / 494.5e12)
    for name, peak in (("NVIDIA H200 NVL", 835e12), ("NVIDIA H200", 989e12)):
        manifest["environment"]["device_name"] = name
        s = summarize.build_summary(manifest, steps, flops_per_token=1e9)
        assert s["arms"]["torch"]["peak_flops_per_device"] == peak


def _fp32_exact_losses(spacings: int) -> list[float]:
    """Losses near 12 and the same losses moved by ``spacings`` float32 steps (2**-20 each near 12)."""
    return [12.0, 11.9, 11.8, 11.7 + spacings * 2.0**-20, 11.6]


@pytest.mark.parametrize("device_type", ["cuda", "npu"])
def test_exact_parity_allows_a_few_float32_steps_on_accelerators_only(device_type):
    steps = step_records("torch", 0, [100.0] * 4, losses=_fp32_exact_losses(0))
    steps += step_records("hyper", 0, [100.0] * 4, losses=_fp32_exact_losses(3))  # 3 float32 steps at 11.7
    manifest = run_manifest(rounds=1)
    cpu = summarize.build_summary(manifest, steps)["parity"]
    assert not cpu["valid"] and cpu["tolerance"] == 1e-6  # CPU: exact stays exact (3·2**-20 ≈ 2.9e-6)
    manifest["environment"]["device_type"] = device_type
    accel = summarize.build_summary(manifest, steps)["parity"]
    assert accel["valid"] and accel["tolerance"] == 8 * 2.0**-20 and accel["mode"].startswith("exact")
    far = step_records("torch", 0, [100.0] * 4, losses=_fp32_exact_losses(0))
    far += step_records("hyper", 0, [100.0] * 4, losses=_fp32_exact_losses(9))
    assert not summarize.build_summary(manifest, far)["parity"]["valid"]  # 9 steps: more than a few


def test_parity_mode_follows_the_dtype_each_arm_ran_with():
    """bf16 by device default (arm_runtime) is not exact mode, whatever the configured param_dtype."""
    steps = step_records("torch", 0, [100.0] * 4) + step_records(
        "hyper", 0, [100.0] * 4, losses=[5.0, 4.9, 4.8, 4.7001, 4.6]
    )
    manifest = run_manifest(rounds=1)
    manifest["arm_runtime"] = {"torch": {"param_dtype": "bfloat16"}, "hyper": {"param_dtype": "bfloat16"}}
    parity = summarize.build_summary(manifest, steps)["parity"]
    assert parity["mode"] == "relative" and parity["valid"]


def test_loss_mismatch_marks_the_comparison_invalid():
    steps = step_records("torch", 0, [100.0] * 4) + step_records(
        "hyper", 0, [100.0] * 4, losses=[5.0, 4.9, 4.8, 4.7001, 4.6]
    )
    s = summarize.build_summary(run_manifest(rounds=1), steps)
    assert not s["parity"]["valid"] and "hyper step 3" in s["parity"]["reason"]
    assert s["verdict"].startswith("INVALID COMPARISON")


def test_relative_parity_tolerance_applies_with_adamw():
    steps = step_records("torch", 0, [100.0] * 4) + step_records(
        "hyper", 0, [100.0] * 4, losses=[5.0, 4.9, 4.8, 4.7001, 4.6]
    )
    parity = summarize.build_summary(run_manifest(rounds=1, optimizer="adamw"), steps)["parity"]
    assert parity["valid"] and parity["mode"] == "relative" and parity["tolerance"] == 1e-2


def test_unfinished_rounds_are_listed_missing_and_left_out():
    steps = step_records("torch", 0, [100.0]) + step_records("hyper", 0, [90.0])
    s = summarize.build_summary(run_manifest(rounds=2), steps, done={("torch", 0)})
    assert {(m["arm"], m["round"]) for m in s["missing"]} == {("hyper", 0), ("hyper", 1), ("torch", 1)}
    assert s["arms"]["hyper"]["status"] == "missing" and s["comparisons"] == []


def test_alternate_order_is_abba_and_shuffle_is_seeded():
    assert [(o["round"], o["arm"]) for o in interleaved_order(["A", "B"], 3, "alternate", 0)] == [
        (0, "A"),
        (0, "B"),
        (1, "B"),
        (1, "A"),
        (2, "A"),
        (2, "B"),
    ]
    assert interleaved_order(list("ABC"), 4, "shuffle", 3) == interleaved_order(list("ABC"), 4, "shuffle", 3)


def _rounds(order: list[dict]) -> list[tuple[str, ...]]:
    by_round: dict[int, list[str]] = {}
    for o in order:
        by_round.setdefault(o["round"], []).append(o["arm"])
    return [tuple(by_round[r]) for r in sorted(by_round)]


def test_shuffle_is_a_real_seeded_permutation_per_round():
    """Fails for an identity "shuffle", for ``alternate`` under another name and for an unseeded one."""
    labels, rounds = list("ABCD"), 12
    shuffled = _rounds(interleaved_order(labels, rounds, "shuffle", 3))
    assert all(sorted(r) == labels for r in shuffled)  # every arm once per round
    assert shuffled == _rounds(interleaved_order(labels, rounds, "shuffle", 3))  # reproducible
    assert shuffled != _rounds(interleaved_order(labels, rounds, "alternate", 3))
    assert any(r != tuple(labels) for r in shuffled)  # not the identity
    assert len(set(shuffled)) > 2  # more than the two orders alternate knows
    assert shuffled != _rounds(interleaved_order(labels, rounds, "shuffle", 4))  # the seed matters


@pytest.mark.parametrize("order", ["alternate", "shuffle"])
def test_every_even_number_of_rounds_is_balanced(order):
    """Counterbalanced: over rounds 0..2k−1 each arm runs before each other arm in exactly k rounds (the
    verdict's first-in-round effect cancels); the shuffle's odd round is its even round reversed."""
    labels = list("ABCD")
    by_round = _rounds(interleaved_order(labels, 12, order, 7))
    for even in range(2, 13, 2):
        for a, b in itertools.permutations(labels, 2):
            before = sum(r.index(a) < r.index(b) for r in by_round[:even])
            assert before == even // 2, (order, even, a, b)


def test_multinode_launch_uses_static_rendezvous_on_the_given_port(tmp_path):
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch", "nnodes": 2, "node_rank": 1, "rdzv_endpoint": "10.0.0.1:29400"}
    )
    cmd = torchrun_command(cfg, tmp_path / "spec.json", tmp_path / "logs", 29403)
    assert "--nnodes=2" in cmd and "--node-rank=1" in cmd and "--rdzv-endpoint=10.0.0.1:29403" in cmd
    assert cmd[-3:] == ["-m", "fsdpbench.run.worker", str(tmp_path / "spec.json")]

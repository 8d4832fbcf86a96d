"""Peak memory per arm on every device: the process's peak resident set on CPU (``/proc`` read by the
test itself), the summary's per-arm peaks and the memory ratio beside the time ratio (hand values)."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

import fsdpbench.device as dev
from fsdpbench.run import summarize
from helpers import run_manifest, step_records

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")


def _status_kib(field: str) -> int:
    """``field`` of /proc/self/status in KiB, read here independently of fsdpbench."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


@linux
def test_peak_rss_is_vmhwm_and_reset_brings_it_down_to_the_current_resident_set():
    block = np.ones(64 * 2**20, dtype=np.uint8)  # 64 MiB, touched
    high = _status_kib("VmHWM")
    assert dev.peak_rss_bytes() == high * 1024 or abs(dev.peak_rss_bytes() - high * 1024) < 2**20
    del block
    assert dev.reset_peak_rss() is True
    assert dev.peak_rss_since() == "reset"
    after = dev.peak_rss_bytes()
    rss = _status_kib("VmRSS") * 1024
    assert after < high * 1024 - 32 * 2**20  # the 64 MiB block's peak is gone
    assert abs(after - rss) < 8 * 2**20
    block = np.ones(48 * 2**20, dtype=np.uint8)
    assert dev.peak_rss_bytes() >= after + 40 * 2**20
    del block


def test_failed_reset_says_the_peak_spans_the_process(monkeypatch, tmp_path):
    monkeypatch.setattr(dev, "PROC_CLEAR_REFS", str(tmp_path / "absent" / "clear_refs"))
    assert dev.reset_peak_rss() is False
    assert dev.peak_rss_since() == "process start"
    monkeypatch.undo()
    dev.reset_peak_rss()  # leave the module's state as a successful reset


def _with_mem(steps, alloc, rss, since="reset"):
    for rec, a, r in zip([s for s in steps if s["kind"] == "timed"], alloc, rss, strict=True):
        rec.update(mem_allocated_bytes=a, mem_reserved_bytes=a and a + 100, mem_peak_rss_bytes=r)
        rec["mem_peak_rss_since"] = since
    return steps


def test_summary_peaks_and_memory_ratio_on_cpu_use_the_resident_set():
    steps = _with_mem(step_records("torch", 0, [100, 101]), [None, None], [1000, 1500]) + _with_mem(
        step_records("hyper", 1, [110, 111]), [None, None], [1800, 1200]
    )
    s = summarize.build_summary(run_manifest(rounds=1), steps)
    assert s["arms"]["torch"]["peak_rss_bytes"] == 1500
    assert s["arms"]["hyper"]["peak_rss_bytes"] == 1800
    assert s["arms"]["torch"]["peak_rss_since"] == "step"
    assert s["arms"]["torch"]["peak_mem_allocated_bytes"] is None
    [c] = s["comparisons"]
    assert c["memory"]["ratio"] == pytest.approx(1800 / 1500)
    assert c["memory"]["measure"] == "peak resident set (process)"
    assert "peak memory hyper/torch 1.200 (peak resident set (process))" in s["verdict"]
    json.dumps(s)


def test_device_allocator_peak_is_preferred_and_unreset_rss_is_labelled():
    steps = _with_mem(step_records("torch", 0, [100, 101]), [4000, 5000], [9, 9]) + _with_mem(
        step_records("hyper", 1, [110, 111]), [4500, 4000], [9, 9]
    )
    c = summarize.build_summary(run_manifest(rounds=1), steps)["comparisons"][0]
    assert c["memory"]["ratio"] == pytest.approx(4500 / 5000)
    assert c["memory"]["measure"] == "peak allocated (device allocator)"
    steps = _with_mem(step_records("torch", 0, [100]), [None], [10], "process start") + _with_mem(
        step_records("hyper", 1, [110]), [None], [20], "process start"
    )
    s = summarize.build_summary(run_manifest(rounds=1), steps)
    assert s["arms"]["torch"]["peak_rss_since"] == "process start"
    assert "since process start" in s["comparisons"][0]["memory"]["measure"]


def test_old_steps_without_memory_give_no_ratio():
    s = summarize.build_summary(
        run_manifest(rounds=1), step_records("torch", 0, [100]) + step_records("hyper", 1, [110])
    )
    assert s["comparisons"][0]["memory"] is None
    assert "peak memory" not in s["verdict"]


@pytest.mark.distributed
def test_profiled_run_records_every_ranks_peak_resident_set(profiled_ab_run):
    """The fixture's CPU run: every timed step carries a peak resident set reset before the step, and
    summary.json's per-arm peak is the max of the raw records (read here from steps.jsonl)."""
    raw = [json.loads(line) for line in (profiled_ab_run / "steps.jsonl").read_text().splitlines()]
    summary = json.loads((profiled_ab_run / "summary.json").read_text())
    for arm, stats in summary["arms"].items():
        timed = [r for r in raw if r["arm"] == arm and r["kind"] == "timed"]
        assert timed and all(r["mem_peak_rss_since"] == "reset" for r in timed)
        assert stats["peak_rss_bytes"] == max(r["mem_peak_rss_bytes"] for r in timed)
        assert 50 * 2**20 < stats["peak_rss_bytes"] < 8 * 2**30  # a torch process, not a stray unit
    assert summary["comparisons"][0]["memory"]["measure"] == "peak resident set (process)"


def _compare_with_peaks(base_bytes, test_bytes, measure_test="peak resident set (process)", **arms):
    from fsdpbench.analysis.compare.diff import diff_analyses
    from helpers import analysis

    context = {
        "peak_memory": {
            "torch": [base_bytes, "peak resident set (process)"],
            "torch-p2": [test_bytes, measure_test],
        }
    }
    return diff_analyses(
        analysis(), analysis(), base_label="torch", test_label="torch-p2", context=context, **arms
    ).finding("peak_memory")


def test_peak_memory_finding_fires_beyond_5_percent_and_names_the_differing_option():
    f = _compare_with_peaks(1000 * 2**20, 1060 * 2**20, base_arm={"prefetch": 0}, test_arm={"prefetch": 2})
    assert f is not None and f.severity == "medium" and f.subject == "torch-p2"
    assert "6% higher" in f.title and "prefetch 0 vs 2" in f.cause
    assert "test/base 1.060" in f.evidence
    lower = _compare_with_peaks(1000, 900)
    assert lower.severity == "info" and "10% lower" in lower.title
    assert _compare_with_peaks(1000, 1049) is None  # within 5%
    assert _compare_with_peaks(1000, 2000, measure_test="peak allocated (device allocator)") is None
    assert _compare_with_peaks(None, 2000) is None


def test_ab_table_shows_the_resident_set_on_cpu():
    import io

    from rich.console import Console

    from fsdpbench.report.console import print_summary

    arm = {
        "rounds": [0],
        "median_ms": 100.0,
        "p10_ms": 90.0,
        "p90_ms": 110.0,
        "tokens_per_s_per_device": 1.0,
        "tflops_per_device": None,
        "mfu": None,
        "peak_mem_allocated_bytes": None,
        "peak_rss_bytes": 3 * 2**30,
        "peak_rss_since": "step",
    }
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    summary = {"arms": {"torch": arm}, "comparisons": [], "parity": {"valid": True, "steps_compared": 0}}
    print_summary(console, {**summary, "missing": [], "verdict": ""})
    text = console.export_text()
    assert "GiB" in text and "3.00" in text and "resident set" in text

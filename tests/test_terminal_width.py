"""Terminal output fits an 80-column terminal: nothing wider, no arm label or number cut to "…"."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from fsdpbench.report.console import print_summary


def _console() -> Console:
    return Console(width=80, record=True, file=io.StringIO(), color_system=None)


def _arm(median_ms: float, tflops: float, mfu: float | None = None, mem: float | None = None) -> dict:
    return {
        "rounds": [0, 1, 2],
        "median_ms": median_ms,
        "p10_ms": median_ms * 0.9,
        "p90_ms": median_ms * 1.2,
        "tokens_per_s_per_device": 12753.2,
        "tflops_per_device": tflops,
        "mfu": mfu,
        "peak_mem_allocated_bytes": mem,
    }


def _summary(arms: dict) -> dict:
    parity = {"valid": True, "steps_compared": 0}
    return {"arms": arms, "comparisons": [], "parity": parity, "missing": [], "verdict": ""}


@pytest.mark.parametrize(
    "arms",
    [
        {"torch-prefetch2-mesh1x2": _arm(339.8, 0.00131), "hyper-prefetch1-fusion1": _arm(245.5, 0.00181)},
        {  # a GPU run: MFU and memory columns, and a label too long to sit beside them
            "torch": _arm(12339.8, 312.0, 0.41, 40e9),
            "hyper-prefetch2-pdtbf16-rdtfp32-fusion1": _arm(245.5, 298.0, 0.39, 39e9),
        },
    ],
    ids=["cpu", "gpu-long-label"],
)
def test_ab_summary_fits_80_columns_and_keeps_every_label_whole(arms):
    console = _console()
    print_summary(console, _summary(arms))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    words = text.split()
    assert all(label in words or f"{label}." in words or f"{label};" in words for label in arms)
    assert "12339.8" in text or "339.8" in text  # numbers whole


def test_ab_summary_leaves_out_columns_empty_for_every_arm():
    """On CPU there is no MFU and no device memory: no column of dashes."""
    console = _console()
    print_summary(console, _summary({"torch": _arm(339.8, 0.00131), "fsdp1": _arm(245.5, 0.00181)}))
    header = next(line for line in console.export_text().splitlines() if "median" in line)
    assert "MFU" not in header and "GiB" not in header and "tok/s" in header


GLOO_MIN = Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"
LONG_KERNEL = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::(anonymous "
    "namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda(float)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::direct_copy_kernel"
    "_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1} const&)::"
    "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_tail_sgemm_128x64_nn)"
)


def _analysis_with_a_long_kernel_name():
    from fsdpbench.analysis import analyze

    res = analyze([GLOO_MIN], workers=1)
    res.ranks[0].op_stats.loc[0, "op_type"] = LONG_KERNEL
    return res


def test_analyze_fits_80_columns_with_whole_headers_and_middle_shortened_names():
    from fsdpbench.report.terminal.analyze import render_analysis

    console = _console()
    render_analysis(_analysis_with_a_long_kernel_name(), console=console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "compute" in line)
    assert [h.strip() for h in header.strip("┃").split("┃")] == [
        "rank",
        "step",
        "time",
        "compute",
        "comm",
        "exposed",
        "overlap",
    ]
    cut = [line for line in lines if "…" in line]
    assert len(cut) == 1  # only the long kernel name, on one line, and nothing else
    name = cut[0].split("│")[1].strip()
    head, tail = name.split("…")
    assert LONG_KERNEL.startswith(head) and LONG_KERNEL.endswith(tail) and len(head) > 15 and len(tail) > 15
    assert any(h in " ".join(lines) for h in ("ms: total kernel time", "times in ms"))


def test_analyze_wide_adds_the_remaining_per_rank_columns():
    from fsdpbench.report.terminal.analyze import render_analysis

    console = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    render_analysis(_analysis_with_a_long_kernel_name(), console=console, wide=True)
    header = next(line for line in console.export_text().splitlines() if "compute" in line)
    assert [h.strip() for h in header.strip("┃").split("┃")][2:] == [
        "time",
        "compute",
        "comm",
        "overlapped",
        "exposed",
        "free",
        "carried",
        "overlap",
        "kernel",
    ]


def test_shorten_middle_keeps_both_ends_and_the_width():
    from fsdpbench.fmt import shorten_middle

    assert shorten_middle("abcdefghij", 10) == "abcdefghij"
    assert shorten_middle("abcdefghijk", 5) == "ab…jk"
    assert shorten_middle("abcdefghijk", 6) == "abc…jk"


def test_diff_fits_80_columns_with_long_labels_and_kernel_names():
    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.compare.diff import diff_analyses
    from fsdpbench.report.terminal import render_diff

    base, test = _analysis_with_a_long_kernel_name(), analyze([GLOO_MIN], workers=1)
    labels = ("torch-prefetch2-mesh1x2-pdtbf16", "hyper-prefetch2-pdtbf16-rdtfp32-fusion1")
    console = _console()
    render_diff(diff_analyses(base, test, base_label=labels[0], test_label=labels[1]), console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    words = " ".join(" ".join(lines).split())
    assert words.count(f"base = {labels[0]}; test = {labels[1]}") == 1  # the legend, once, whole
    tables = [line for line in lines if line.startswith(("┃", "│"))]
    cut = [line for line in tables if "…" in line]
    assert len(cut) == 1 and "op type" not in cut[0]  # only the long kernel name is shortened
    head, tail = cut[0].split("│")[1].strip().split("…")
    assert LONG_KERNEL.startswith(head) and LONG_KERNEL.endswith(tail)
    assert any("calls base" in line for line in tables) or not base.ranks[0].collectives


def test_diff_keeps_short_labels_as_headers():
    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.compare.diff import diff_analyses
    from fsdpbench.report.terminal import render_diff

    res = analyze([GLOO_MIN], workers=1)
    console = _console()
    render_diff(diff_analyses(res, res, base_label="torch", test_label="hyper"), console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "metric" in line)
    assert [h.strip() for h in header.strip("┃").split("┃")] == ["metric", "torch", "hyper", "Δ"]
    assert "base = " not in text


def test_diff_bookkeeping_log_lines_show_only_with_verbose(tmp_path):
    """The "arm torch: using .../analysis.json" bookkeeping is not in diff's output (nor in ab's report step)."""
    from helpers import hand_built_run, run_cli

    run = hand_built_run(tmp_path, ["torch", "hyper"])
    quiet = run_cli("diff", str(run), "--quiet", timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "using" not in quiet.stdout + quiet.stderr and "INFO" not in quiet.stderr
    verbose = run_cli("-v", "diff", str(run), "--quiet", timeout=120)
    assert verbose.returncode == 0, verbose.stderr
    assert "arm torch: using" in verbose.stderr

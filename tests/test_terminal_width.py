"""Terminal output fits an 80-column terminal: nothing wider, no arm label or number cut to "…"."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fsdpbench.launcher import print_summary


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

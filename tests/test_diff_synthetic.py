"""Synthetic analyses (hand-built metric tables with known collectives) and the diff on a fragmented case."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fsdpbench.analysis.diff import diff_analyses
from fsdpbench.report.diff_md import collective_lines

ALPHA_US = 40.0
BETA_US_PER_BYTE = 2e-4  # 5 GB/s


def synthetic_analysis(
    *,
    n_ranks: int = 2,
    layers: int = 6,
    params_per_layer: int = 10,
    per_param: bool = False,
    compute_us: float = 200_000.0,
    overlap_ratio: float = 0.5,
    free_us: float = 1_000.0,
    ops: dict[str, tuple[float, int]] | None = None,
    sync: dict[str, int] | None = None,
    rank_compute_skew: dict[int, float] | None = None,
    alpha_us: float = ALPHA_US,
    beta: float = BETA_US_PER_BYTE,
    noise: float = 0.0,
    seed: int = 0,
) -> dict:
    """An Analysis-JSON dict whose collectives follow ``alpha + beta * bytes`` exactly (plus noise).

    Each layer holds ``params_per_layer`` tensors of varied size; ``per_param`` issues one all-gather
    (forward and backward re-gather) and one reduce-scatter per tensor, otherwise one per layer (FSDP2).
    Comm time is the sum of the call durations; exposed comm = comm * (1 - overlap_ratio).
    """
    rng = np.random.default_rng(seed)
    sizes = np.array([4096 * (1 + (i * 7) % 13) * 64 for i in range(params_per_layer)], dtype=float)
    ranks = []
    for rank in range(n_ranks):
        rows = []
        t = 0.0
        for kind, passes in (("all_gather", 2), ("reduce_scatter", 1)):
            for _ in range(passes):
                for _layer in range(layers):
                    calls = sizes if per_param else np.array([sizes.sum()])
                    for nbytes in calls:
                        dur = (alpha_us + beta * nbytes) * (1 + noise * rng.standard_normal())
                        rows.append((kind, nbytes, t * 1e3, (t + dur) * 1e3))
                        t += dur
        events = pd.DataFrame(rows, columns=["type", "bytes", "start_ns", "end_ns"])
        dur_us = (events["end_ns"] - events["start_ns"]) / 1e3
        collectives = {
            kind: {
                "count": int((events["type"] == kind).sum()),
                "bytes": int(events.loc[events["type"] == kind, "bytes"].sum()),
                "time_us": float(dur_us[events["type"] == kind].sum()),
                "median_bytes": None,
                "bandwidth_gbps": None,
            }
            for kind in ("all_gather", "reduce_scatter")
        }
        comm = float(dur_us.sum())
        compute = compute_us * (1 + (rank_compute_skew or {}).get(rank, 0.0))
        overlapped = comm * overlap_ratio
        exposed = comm - overlapped
        op_rows = [
            {"op_type": k, "count": c, "total_us": us, "mean_us": us / c if c else None}
            for k, (us, c) in (ops or {"MatMul": (compute_us * 0.6, 100)}).items()
        ]
        ranks.append(
            {
                "rank": rank,
                "step": 3,
                "step_time_us": compute + exposed + free_us,
                "overlap_ratio": overlap_ratio,
                "compute_us": compute,
                "comm_us": comm,
                "overlapped_us": overlapped,
                "exposed_comm_us": exposed,
                "free_us": free_us,
                "kernel_time_us": compute + comm,
                "collectives": collectives,
                "ops": op_rows,
                "sync": {
                    "barrier": 0,
                    "launch_ffts": 0,
                    "device_synchronize": 0,
                    "stream_synchronize": 0,
                    "event_synchronize": 0,
                    "kernel_launch": 0,
                    **(sync or {}),
                },
                "steps": [],
                "collective_events": events,
            }
        )
    return {"schema_version": 1, "sources": ["synthetic"], "format": "kineto", "warnings": [], "ranks": ranks}


def fragmented_pair(noise: float = 0.0):
    base = synthetic_analysis(overlap_ratio=0.5)
    test = synthetic_analysis(per_param=True, overlap_ratio=0.5, noise=noise, seed=1)
    return base, test


def test_synthetic_fragmented_case_states_the_count_ratio_at_same_bytes():
    base, test = fragmented_pair()
    d = diff_analyses(base, test, base_label="torch", test_label="hyper")
    assert collective_lines(d) == [
        "AllGather 120 vs 12 (10.0×), same bytes",
        "ReduceScatter 60 vs 6 (10.0×), same bytes",
    ]
    assert d.findings[1].id == "fragmentation" and d.findings[1].severity == "high"


def test_fragmentation_estimate_matches_removing_calls_at_the_true_alpha():
    base, test = fragmented_pair()
    d = diff_analyses(base, test, base_label="torch", test_label="hyper", context={"num_layers": 6})
    assert d.fits["test"]["all_gather"].alpha_us == pytest.approx(ALPHA_US)
    assert d.fits["test"]["all_gather"].beta_us_per_byte == pytest.approx(BETA_US_PER_BYTE)
    assert d.fits["base"]["all_gather"].status == "same_size"  # one bucket size per layer: honest, not fitted
    est = d.finding("fragmentation").estimate
    removed_calls = (120 - 12) + (60 - 6)
    comm = test["ranks"][0]["comm_us"]
    comm_new = comm - removed_calls * ALPHA_US
    assert est.comm_delta_us == pytest.approx(comm_new - comm)
    exposed = test["ranks"][0]["exposed_comm_us"]
    assert est.exposed_comm_delta_us == pytest.approx(exposed * comm_new / comm - exposed)
    assert est.step_time_lower_bound_us == pytest.approx(max(test["ranks"][0]["compute_us"], comm_new))
    # one bucket per layer for 6 layers is FSDP2's 13 all-gathers / 7 reduce-scatters: one call more each
    per_layer = est.one_bucket_per_layer
    assert per_layer.target_counts == {"all_gather": 13, "reduce_scatter": 7}
    assert per_layer.comm_delta_us == pytest.approx(-(removed_calls - 2) * ALPHA_US)


def test_fits_with_noise_stay_close_to_the_true_parameters():
    base, test = fragmented_pair(noise=0.05)
    fit = diff_analyses(base, test).fits["test"]["all_gather"]
    assert fit.ok and fit.n == 240 and fit.r2 > 0.9
    assert fit.alpha_us == pytest.approx(ALPHA_US, rel=0.25)
    assert fit.beta_us_per_byte == pytest.approx(BETA_US_PER_BYTE, rel=0.05)

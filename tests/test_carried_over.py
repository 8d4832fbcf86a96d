"""Free time when the device lags the host: a step's window (host ProfilerStep span widened to the
device work it launched) also holds device work of other steps; that is "carried over", and free is
only the time the device ran nothing at all. Reference: interval unions computed by hand below."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.estimate import whatif

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
# (name, launch µs, device start µs, device end µs, stream); steps: #1 [0,100], #2 [100,200], #3 [200,300]
KERNELS = [
    ("A", 10, 40, 120, 7),  # step 1
    ("B", 20, 130, 150, 7),  # step 1, runs inside step 2's host window
    (NCCL, 30, 60, 140, 9),  # step 1
    ("D", 110, 150, 230, 7),  # step 2
    ("E", 120, 250, 260, 8),  # step 2
    ("F", 210, 310, 330, 7),  # step 3
]
# By hand (µs). All device work: A∪C∪B = [40,150], touching D [150,230] → [40,230]; E [250,260]; F [310,330].
# step 1: window [0,150] (150); own busy [40,150] = 110; all busy inside = 110 → carried 0, free 40.
# step 2: window [100,260] (160); own busy D+E = 90; all busy inside [100,230]+[250,260] = 140
#         → carried 140 − 90 = 50 (A, B, C after 100), free 160 − 140 = 20 ([230,250]).
# step 3: window [200,330] (130); own busy F = 20; all busy inside [200,230]+[250,260]+[310,330] = 60
#         → carried 40 (D, E), free 70.
# all steps: window [0,330] (330); busy 190 + 10 + 20 = 220, all of it own → carried 0, free 110.
EXPECTED = {1: (150, 110, 0, 40), 2: (160, 90, 50, 20), 3: (130, 20, 40, 70), None: (330, 220, 0, 110)}


def _trace(path: Path) -> Path:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{s}",
            "pid": 0,
            "tid": 1,
            "ts": 100.0 * (s - 1),
            "dur": 100.0,
        }
        for s in (1, 2, 3)
    ]
    for corr, (name, launch, start, end, stream) in enumerate(KERNELS, 1):
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 0,
                "tid": 1,
                "ts": float(launch),
                "dur": 1.0,
                "args": {"correlation": corr},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": float(start),
                "dur": float(end - start),
                "args": {"stream": stream, "correlation": corr},
            }
        )
    path.write_bytes(orjson.dumps({"traceEvents": ev}))
    return path


@pytest.fixture(scope="module")
def rank(tmp_path_factory):
    return analyze([_trace(tmp_path_factory.mktemp("lag") / "rank0.json")], workers=1).ranks[0]


@pytest.mark.parametrize("step", [1, 2, 3, None])
def test_free_is_only_time_the_device_ran_nothing_and_other_steps_work_is_carried_over(rank, step):
    m = rank if step is None else next(s for s in rank.steps if s.step == step)
    window, own_busy, carried, free = EXPECTED[step]
    assert m.step_time_us == window
    assert m.compute_us + m.comm_us - m.overlapped_us == own_busy
    assert m.carried_over_us == carried
    assert m.free_us == free
    assert m.to_dict()["carried_over_us"] == carried


def test_the_what_if_idle_term_scales_the_new_free_time(rank):
    """The regrouping estimate's idle term is −free × (share of calls removed): on step 2 it must use
    the 20 µs the device ran nothing, not the 70 µs that include 50 µs of step 1's work."""
    m = next(s for s in rank.steps if s.step == 2)
    est = whatif.estimate_regrouping(
        {"all_reduce": (4.0, 40.0)},
        {"all_reduce": 1.0},
        {
            "all_reduce": (
                "test",
                whatif.AlphaBetaFit(alpha_us=5.0, beta_us_per_byte=0.0, r2=1.0, n=4, status="ok"),
            )
        },
        step_time_us=m.step_time_us,
        compute_us=m.compute_us,
        comm_us=m.comm_us,
        exposed_comm_us=m.exposed_comm_us,
        free_us=m.free_us,
    )
    assert est.idle_delta_us == pytest.approx(-20.0 * (1 - 1 / 4))

"""Issue 10: what would fail or mislead on the first NPU/CUDA run, pinned on CPU.

Each test checks one fix against an independent reference: the raw profiler trace, ``torch.bincount``,
a hand-computed argument list, the installed torch's own c10d functions. A fake stands in for a
device library (torch_npu, fla) only where nothing else can.
"""

from __future__ import annotations

import gzip

import orjson
import pytest


def _raw_events(trace_path) -> list[dict]:
    return orjson.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]


# --------------------------------------------------------------------------------------------
# item 3: fsdpbench's bookkeeping stays out of the profiled step
# --------------------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(420)
def test_profiled_fsdp2_step_holds_no_all_reduce(profiled_ab_run):
    """FSDP2 on 1D meshes issues all-gathers and reduce-scatters only; the two metric all-reduces
    (MAX, SUM) belong to the bookkeeping after the profiled step (before the fix: 2 per rank)."""
    for arm in ("torch", "torch-prefetch1"):
        for rank in (0, 1):
            (trace,) = (profiled_ab_run / "profiles" / arm / f"rank{rank}").glob("*.json.gz")
            ops = [e["name"] for e in _raw_events(trace) if e.get("cat") == "cpu_op"]
            assert "c10d::_reduce_scatter_base_" in ops  # the trace holds the step's collectives
            assert not [n for n in ops if "allreduce" in n or "all_reduce" in n], (arm, rank)

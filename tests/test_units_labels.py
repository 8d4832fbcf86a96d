"""Units × phases from the labels each library version writes (issue 40, the smaller items): CUDA's
device-side copies of host ranges in the phases-only source, one optimizer rule for both trace sources,
torch 2.15's FSDP2 labels, FSDP2 internals a trace does not hold, ``replicate()`` traces, FSDP1 units by
nesting.

Every trace is built the way its library writes it (label strings copied from the cited source lines;
the reference is shared/reference/fsdp_ranges.md), and every compute and communication event's
(unit, phase) is checked against a table written by hand. CPU/gloo traces (times in µs): an operator
is placed at its own start on the training thread, a ``gloo:*`` worker span at the k-th ``c10d::*``
launch (docs/attribution.md "Which row an event belongs to").
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import orjson
import pytest

from fsdpbench.analysis.rank import attribution, phase_ranges, unit_ranges
from fsdpbench.trace.kineto import read_kineto
from helpers import SHARED

MAIN, WORKER, AUTOGRAD, STREAM = 100, 200, 300, 7
DIMS = {"Input Dims": [[16], [8]], "Input type": ["float", "float"]}
KINETO_FIXTURES = SHARED / "fixtures" / "kineto"


def _x(name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "cpu_op", **args) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def _r(name: str, ts: float, dur: float, tid: int = MAIN) -> dict:
    """A ``record_function`` range (Kineto: category ``user_annotation``)."""
    return _x(name, ts, dur, tid, cat="user_annotation")


def _launch(name: str, ts: float) -> dict:
    """A collective launch op on the training thread (its gloo span follows on the worker)."""
    return _x(name, ts, 1.0, **DIMS)


def _gloo(name: str, ts: float, dur: float) -> dict:
    return _r(name, ts, dur, tid=WORKER)


def _write(path: Path, events: list[dict]) -> Path:
    meta = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": WORKER, "args": {"name": "pt_gloo_runloop"}},
    ]
    path.write_bytes(orjson.dumps({"traceEvents": meta + events}))
    return path


def _places(path: Path) -> tuple[dict[tuple[str, float], tuple[str, str]], str, list[dict]]:
    """Per compute/communication event (name, start µs) its (unit, phase); the units' source; the rows."""
    trace = read_kineto(path)
    t = trace.table
    ranges = unit_ranges.find_ranges(t)
    placed = attribution.place(t, trace.mode, None, ranges)
    names = np.asarray(t.name.categories, dtype=object)[t.name.codes[placed.rows]]
    starts = t.start_ns[placed.rows] / 1000.0
    got = {
        (str(n), float(s)): (str(u), str(p))
        for n, s, u, p in zip(names, starts, placed.unit, placed.phase, strict=True)
    }
    return got, ranges.source, attribution.unit_phase_rows(t, trace.mode, None, ranges)


# ---- CUDA: device-side copies of host ranges are labels, never windows (DESIGN.md) ----------------------
def _kernel(name: str, ts: float, dur: float, corr: int) -> dict:
    return {
        **_x(name, ts, dur, tid=STREAM, cat="kernel"),
        "pid": 0,
        "args": {"stream": STREAM, "correlation": corr},
    }


def _cuda_launch(ts: float, corr: int, tid: int = MAIN) -> dict:
    return {**_x("cudaLaunchKernel", ts, 0.5, tid=tid, cat="cuda_runtime"), "args": {"correlation": corr}}


def _copy(name: str, ts: float, dur: float, ext: int) -> dict:
    """A host range's projection onto the stream, as Kineto writes it (PyTorch ≥ 1.12): category
    ``gpu_user_annotation``, the device's pid, the stream's tid, the span of the device work launched inside
    the host range, an ``External id`` and no correlation."""
    return {
        **_x(name, ts, dur, tid=STREAM, cat="gpu_user_annotation"),
        "pid": 0,
        "args": {"External id": ext},
    }


def test_cuda_copies_of_profiler_step_and_optimizer_ranges_are_not_windows(tmp_path):
    """A CUDA DDP-like step without unit ranges: forward kernels from the main thread, backward kernels
    from the autograd thread, a kernel the main thread launches after the backward started (a grad-norm
    before the optimizer), the optimizer's. The stream holds the copies of ``ProfilerStep#1`` and
    ``Optimizer.step#SGD.step``. Old code: the copy counted as a second step, took the backward ranges
    from the host step, whose forward window then ran to the step's end (the grad-norm kernel: forward)."""
    events = [
        _r("ProfilerStep#1", 0.0, 100.0),
        _cuda_launch(2.0, 1),
        _cuda_launch(10.0, 2),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 30.0, 10.0, tid=AUTOGRAD),
        _cuda_launch(31.0, 3, tid=AUTOGRAD),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 42.0, 8.0, tid=AUTOGRAD),
        _cuda_launch(43.0, 4, tid=AUTOGRAD),
        _cuda_launch(55.0, 5),  # main thread, after the backward began: no phase
        _r("Optimizer.step#SGD.step", 70.0, 10.0),
        _cuda_launch(71.0, 6),
        _kernel("gemm_fwd_a", 5.0, 4.0, 1),
        _kernel("gemm_fwd_b", 12.0, 5.0, 2),
        _kernel("gemm_bwd_a", 33.0, 6.0, 3),
        _kernel("gemm_bwd_b", 44.0, 5.0, 4),
        _kernel("norm_kernel", 56.0, 2.0, 5),
        _kernel("sgd_kernel", 72.0, 3.0, 6),
        _copy("ProfilerStep#1", 5.0, 70.0, 1),
        _copy("Optimizer.step#SGD.step", 72.0, 3.0, 2),
    ]
    got, source, _ = _places(_write(tmp_path / "rank0.json", events))
    assert source == "autograd/optimizer ranges"
    assert got == {
        ("gemm_fwd_a", 5.0): ("(all)", "forward"),
        ("gemm_fwd_b", 12.0): ("(all)", "forward"),
        ("gemm_bwd_a", 33.0): ("(all)", "backward"),
        ("gemm_bwd_b", 44.0): ("(all)", "backward"),
        ("norm_kernel", 56.0): ("(outside)", "(outside)"),
        ("sgd_kernel", 72.0): ("(all)", "optimizer"),
    }
    t = read_kineto(tmp_path / "rank0.json").table
    lane, start, end, phase = phase_ranges.phase_windows(t)
    lanes = [str(t.lane.categories[c]) for c in lane.tolist()]
    assert sorted(zip(phase, start.tolist(), end.tolist(), strict=True)) == [
        ("backward", 30_000, 50_000),
        ("forward", 0, 30_000),
        ("optimizer", 70_000, 80_000),
    ]
    assert not any(name.startswith("stream") for name in lanes), lanes


def test_a_real_cuda_traces_optimizer_copies_are_not_windows(shared_fixtures):
    """HTA's ns_resolution_trace (CUDA DDP, 5 steps) holds a ``gpu_user_annotation`` copy of each
    ``Optimizer.step#SGD.step`` on stream 7: the optimizer windows are exactly the host ranges of the raw
    JSON (``user_annotation``/``cpu_op`` ``Optimizer.step#``/``Optimizer.zero_grad#``), none on a stream."""
    path = next((KINETO_FIXTURES / "ns_resolution_trace").glob("*.json.gz"))
    raw = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    host = sorted(
        (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000))
        for e in raw
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith(("Optimizer.step#", "Optimizer.zero_grad#"))
        and e.get("cat") != "gpu_user_annotation"
    )
    copies = [e for e in raw if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("Optimizer.")]
    assert len(host) == 10 and len(copies) == 5  # the fixture holds both
    t = read_kineto(path).table
    lane, start, end, phase = phase_ranges.phase_windows(t)
    opt = [i for i, p in enumerate(phase) if p == "optimizer"]
    got = sorted((int(start[i]), int(end[i])) for i in opt)
    assert len(got) == len(host)  # old code: 15, the 5 copies on stream 7 as well
    # the reader's ns of these 1.7e18-ns stamps are float64 values (256 ns apart): equal within 1 µs
    assert np.abs(np.asarray(got) - np.asarray(host)).max() < 1000
    assert all(str(t.lane.categories[lane[i]]).startswith("thread") for i in range(len(phase)))


# ---- torch 2.15 FSDP2: FSDP::finalize_backward, no post_backward_accumulate; zero_grad is optimizer -----
def fsdp2_215(copy_in: bool = True) -> list[dict]:
    """One CPU/gloo step of torch 2.15.0 FSDP2, ``fully_shard`` on layers.0 and on the root (which holds
    the embedding and the head). Labels (2.15.0 ``_fully_shard/_fsdp_param_group.py``,
    ``_fsdp_state.py``): ``FSDP::pre_forward (<fqn>)`` … via ``_with_fqn`` (bare for the root's group),
    ``FSDP::all_gather``/``FSDP::all_gather_copy_out``, the ``fsdp::all_gather_copy_in`` op, no
    ``post_backward_accumulate`` (2.15 opens post-backward with ``post_backward_reshard``, :711),
    ``FSDP::post_backward_rs_wait ()`` for the root (literal parens, 2.12+), and the root's pending
    post-backward run inside ``FSDP::finalize_backward`` (``_fsdp_state.py:466``). ``copy_in=False``:
    torch_npu's builds for torch 2.8–2.10 replace the copy-in op at import: its work is plain aten ops."""
    ci = "fsdp::all_gather_copy_in" if copy_in else "aten::cat"
    return [
        _r("ProfilerStep#1", 0.0, 200.0),
        _r("Optimizer.zero_grad#AdamW.zero_grad", 1.0, 2.0),
        _x("aten::zero_", 1.5, 1.0),
        _r("FSDP::root_pre_forward", 4.0, 1.0),
        _r("FSDP::pre_forward", 5.0, 5.0),
        _r("FSDP::all_gather", 5.5, 3.0),
        _x(ci, 5.6, 1.0),
        _launch("c10d::_allgather_base_", 7.0),
        _r("FSDP::all_gather_copy_out", 8.6, 1.0),
        _x("aten::split_with_sizes_copy", 8.7, 0.5),
        _x("aten::embedding", 11.0, 4.0),
        _r("FSDP::pre_forward (layers.0)", 16.0, 4.0),
        _r("FSDP::all_gather (layers.0)", 16.5, 3.0),
        _x(ci, 16.6, 1.0),
        _launch("c10d::_allgather_base_", 18.0),
        _x("aten::mm", 21.0, 10.0),
        _r("FSDP::post_forward (layers.0)", 31.0, 2.0),
        _x("aten::mm", 34.0, 6.0),
        _r("FSDP::post_forward", 40.0, 2.0),
        _x("aten::nll_loss", 43.0, 2.0),
        _x("autograd::engine::evaluate_function: NllLossBackward0", 46.0, 2.0),
        _x("aten::nll_loss_backward", 46.2, 1.0),
        _r("FSDP::pre_backward", 49.0, 2.0),
        _x("aten::mm", 52.0, 6.0),
        _r("FSDP::pre_backward (layers.0)", 59.0, 4.0),
        _r("FSDP::all_gather (layers.0)", 59.5, 3.0),
        _x(ci, 59.6, 1.0),
        _launch("c10d::_allgather_base_", 61.0),
        _x("aten::mm", 64.0, 10.0),
        _r("FSDP::post_backward_reshard (layers.0)", 75.0, 1.0),
        _r("FSDP::post_backward_reduce (layers.0)", 77.0, 4.0),
        _launch("c10d::_reduce_scatter_base_", 78.0),
        _x("aten::embedding_dense_backward", 82.0, 4.0),
        _r("FSDP::finalize_backward", 90.0, 20.0),
        _r("FSDP::post_backward_reshard", 91.0, 1.0),
        _r("FSDP::post_backward_rs_wait ()", 93.0, 1.0),
        _r("FSDP::post_backward_reduce", 95.0, 5.0),
        _launch("c10d::_reduce_scatter_base_", 96.0),
        _x("aten::copy_", 102.0, 3.0),  # the sharded gradient's copy, after the reduce, in finalize_backward
        _r("Optimizer.step#AdamW.step", 120.0, 20.0),
        _x("aten::_fused_adamw_", 121.0, 15.0),
        _gloo("gloo:all_gather", 7.5, 5.0),
        _gloo("gloo:all_gather", 18.5, 4.0),
        _gloo("gloo:all_gather", 61.5, 3.0),
        _gloo("gloo:all_reduce", 78.5, 8.0),  # gloo runs a reduce-scatter as an all-reduce
        _gloo("gloo:all_reduce", 96.5, 6.0),
    ]


FSDP2_215_PLACES = {
    ("aten::zero_", 1.5): (
        "(all)",
        "optimizer",
    ),  # old: (outside) (the FSDP2 source took Optimizer.step# only)
    ("fsdp::all_gather_copy_in", 5.6): ("root", "forward"),
    ("aten::split_with_sizes_copy", 8.7): ("root", "forward"),
    ("aten::embedding", 11.0): ("root", "forward"),
    ("fsdp::all_gather_copy_in", 16.6): ("layers.0", "forward"),
    ("aten::mm", 21.0): ("layers.0", "forward"),
    ("aten::mm", 34.0): ("root", "forward"),
    ("aten::nll_loss", 43.0): ("(outside)", "(outside)"),
    ("aten::nll_loss_backward", 46.2): ("(outside)", "(outside)"),
    ("aten::mm", 52.0): ("root", "backward"),
    ("fsdp::all_gather_copy_in", 59.6): ("layers.0", "backward"),
    ("aten::mm", 64.0): ("layers.0", "backward"),
    ("aten::embedding_dense_backward", 82.0): ("root", "backward"),
    ("aten::copy_", 102.0): ("root", "backward"),  # old: (outside) (finalize_backward was not parsed)
    ("aten::_fused_adamw_", 121.0): ("(all)", "optimizer"),
    ("gloo:all_gather", 7.5): ("root", "forward"),
    ("gloo:all_gather", 18.5): ("layers.0", "forward"),
    ("gloo:all_gather", 61.5): ("layers.0", "backward"),
    ("gloo:all_reduce", 78.5): ("layers.0", "backward"),
    ("gloo:all_reduce", 96.5): ("root", "backward"),
}


def test_torch_215_fsdp2_labels_place_every_event(tmp_path):
    got, source, rows = _places(_write(tmp_path / "rank0.json", fsdp2_215()))
    assert source == "FSDP2 ranges"
    assert got == FSDP2_215_PLACES
    # every FSDP2 internal is in this trace: numbers in every row, none "not in this trace"
    assert all(all(part is not None for part in r["fsdp_internals"].values()) for r in rows)


def test_zero_grad_is_optimizer_work_in_both_sources(tmp_path):
    """One rule (phase_ranges.OPTIMIZER): the same zero_grad operator is the optimizer's whether the
    windows come from FSDP2's ranges or, with them taken out, from the autograd/optimizer ranges."""
    events = fsdp2_215()
    got_fsdp2, _, _ = _places(_write(tmp_path / "fsdp2.json", events))
    bare = [e for e in events if not e["name"].startswith("FSDP::")]
    got_phases, source, _ = _places(_write(tmp_path / "phases.json", bare))
    assert source == "autograd/optimizer ranges"
    for got in (got_fsdp2, got_phases):
        assert got[("aten::zero_", 1.5)] == ("(all)", "optimizer")
        assert got[("aten::_fused_adamw_", 121.0)] == ("(all)", "optimizer")


def test_fsdp2_internals_a_trace_does_not_hold_read_not_in_this_trace(tmp_path):
    """torch_npu's builds for torch 2.8–2.10 (v7.2.0/v7.3.x-pytorch2.8.0/2.9.0, v26.x-pytorch2.8.0–2.10.0)
    replace ``torch.ops.fsdp.all_gather_copy_in`` at ``import torch_npu``: no ``fsdp::all_gather_copy_in``
    op in the trace, so ``copy_in`` is null (not in this trace) in every row, not 0; the others stay."""
    got, _, rows = _places(_write(tmp_path / "rank0.json", fsdp2_215(copy_in=False)))
    assert all(r["fsdp_internals"]["copy_in"] is None for r in rows)
    by = {(r["unit"], r["phase"]): r["fsdp_internals"] for r in rows}
    assert by[("layers.0", "forward")]["all_gather"] == {"host_us": 3.0, "device_us": 4.0}
    assert by[("root", "forward")]["copy_out"]["host_us"] == pytest.approx(1.0)
    assert by[("layers.0", "backward")]["reduce"] == {"host_us": 4.0, "device_us": 8.0}
    # the windows are the same as with the op
    assert {k: v for k, v in got.items() if k[0] != "aten::cat"} == {
        k: v for k, v in FSDP2_215_PLACES.items() if k[0] != "fsdp::all_gather_copy_in"
    }


def test_torch_24_fsdp2_internals_without_ranges_read_not_in_this_trace(tmp_path):
    """torch 2.4.0 FSDP2 (``torch.distributed._composable.fsdp``) names no all-gather, copy-out or copy-in
    (its labels: ``_fsdp_param_group.py:276,284,300,308,311,337,374``, bare strings; ``FSDP::all_gather``
    and the ``fsdp::all_gather_copy_in`` op arrive in 2.5.0) but does name ``FSDP::post_backward_reduce``:
    all_gather, copy_out, copy_in and rs_wait are null in every row (old code: 0.000 though all-gathers ran),
    the reduce is read. Only the internals are checked here (2.4's unit windows: branch ``units``)."""
    events = [
        _r("ProfilerStep#1", 0.0, 100.0),
        _r("FSDP::root_pre_forward", 1.0, 1.0),
        _r("FSDP::pre_forward", 2.0, 4.0),
        _launch("c10d::_allgather_base_", 3.0),
        _x("aten::mm", 7.0, 10.0),
        _r("FSDP::post_forward", 18.0, 1.0),
        _r("FSDP::pre_backward", 20.0, 4.0),
        _launch("c10d::_allgather_base_", 21.0),
        _x("aten::mm", 25.0, 10.0),
        _r("FSDP::post_backward_accumulate", 36.0, 1.0),
        _r("FSDP::post_backward_reshard", 38.0, 1.0),
        _r("FSDP::post_backward_reduce", 40.0, 4.0),
        _launch("c10d::_reduce_scatter_base_", 41.0),
        _r("FSDP::root_post_backward_callback", 45.0, 2.0),
        _gloo("gloo:all_gather", 3.5, 2.0),
        _gloo("gloo:all_gather", 21.5, 2.0),
        _gloo("gloo:all_reduce", 41.5, 5.0),
    ]
    _, _, rows = _places(_write(tmp_path / "rank0.json", events))
    assert rows
    for r in rows:
        assert all(r["fsdp_internals"][k] is None for k in ("copy_in", "all_gather", "copy_out", "rs_wait"))
    assert sum(r["fsdp_internals"]["reduce"]["device_us"] for r in rows) == 5.0


# ---- replicate(): DDP on FSDP2's code writes FSDP2's labels --------------------------------------------
def replicate_213(finalize: str | None = None) -> list[dict]:
    """One CPU/gloo step of ``replicate()`` (torch 2.13 ``_composable/replicate_with_fsdp.py``) on layers.0
    and the root (embedding, head). Its groups are FSDPParamGroups on a replicate-only mesh, so the labels
    are FSDP2's (2.13 ``_fsdp_param_group.py:544,559,580,603,606,653,661``; ``_fsdp_state.py:145,397``);
    ``unshard`` never all-gathers (``:388-405``: world size 1), and the reduce all-reduces (``:662-666``).
    ``finalize``: torch 2.15's ``<state name>::finalize_backward`` closing the step (``Replicate`` there)."""
    events = [
        _r("ProfilerStep#1", 0.0, 100.0),
        _r("FSDP::root_pre_forward", 1.0, 1.0),
        _r("FSDP::pre_forward", 2.0, 1.0),
        _x("aten::embedding", 4.0, 3.0),
        _r("FSDP::pre_forward (layers.0)", 8.0, 1.0),
        _x("aten::mm", 10.0, 5.0),
        _r("FSDP::post_forward (layers.0)", 16.0, 1.0),
        _x("aten::mm", 18.0, 4.0),
        _r("FSDP::post_forward", 23.0, 1.0),
        _r("FSDP::pre_backward", 30.0, 1.0),
        _x("aten::mm", 32.0, 4.0),
        _r("FSDP::pre_backward (layers.0)", 37.0, 1.0),
        _x("aten::mm", 39.0, 6.0),
        _r("FSDP::post_backward_accumulate (layers.0)", 46.0, 1.0),
        _r("FSDP::post_backward_reshard (layers.0)", 48.0, 1.0),
        _r("FSDP::post_backward_reduce (layers.0)", 50.0, 4.0),
        _launch("c10d::allreduce_", 51.0),
        _x("aten::embedding_dense_backward", 55.0, 3.0),
        _r("FSDP::root_post_backward_callback", 60.0, 10.0),
        _r("FSDP::post_backward_accumulate", 61.0, 1.0),
        _r("FSDP::post_backward_reshard", 63.0, 1.0),
        _r("FSDP::post_backward_rs_wait ()", 64.0, 0.5),
        _r("FSDP::post_backward_reduce", 65.0, 4.0),
        _launch("c10d::allreduce_", 66.0),
        _r("Optimizer.step#SGD.step", 75.0, 10.0),
        _x("aten::_foreach_add_", 76.0, 5.0),
        _gloo("gloo:all_reduce", 51.5, 6.0),
        _gloo("gloo:all_reduce", 66.5, 5.0),
    ]
    if finalize:
        events.append(_r(f"{finalize}::finalize_backward", 71.0, 2.0))
    return events


REPLICATE_PLACES = {
    ("aten::embedding", 4.0): ("root", "forward"),
    ("aten::mm", 10.0): ("layers.0", "forward"),
    ("aten::mm", 18.0): ("root", "forward"),
    ("aten::mm", 32.0): ("root", "backward"),
    ("aten::mm", 39.0): ("layers.0", "backward"),
    ("aten::embedding_dense_backward", 55.0): ("root", "backward"),
    ("aten::_foreach_add_", 76.0): ("(all)", "optimizer"),
    ("gloo:all_reduce", 51.5): ("layers.0", "backward"),
    ("gloo:all_reduce", 66.5): ("root", "backward"),
}


@pytest.mark.parametrize("finalize", [None, "Replicate"])
def test_replicate_traces_are_named_so_and_keep_their_units(tmp_path, finalize):
    got, source, rows = _places(_write(tmp_path / "rank0.json", replicate_213(finalize)))
    assert source == "replicate() ranges"
    assert got == REPLICATE_PLACES
    # replicate() never all-gathers: those internals are not in the trace (null), the reduce is
    for r in rows:
        assert r["fsdp_internals"]["all_gather"] is None and r["fsdp_internals"]["copy_out"] is None
    assert {(r["unit"], r["phase"]): r["fsdp_internals"]["reduce"]["device_us"] for r in rows}[
        ("layers.0", "backward")
    ] == 6.0


def test_an_fsdp2_trace_is_not_named_replicate(tmp_path):
    _, source, _ = _places(_write(tmp_path / "rank0.json", fsdp2_215()))
    assert source == "FSDP2 ranges"


# ---- FSDP1: units by the nesting of FullyShardedDataParallel.forward ------------------------------------
def fsdp1_213(root_params: bool = True) -> list[dict]:
    """One CPU/gloo step of FSDP1 (``FullyShardedDataParallel`` on layers.0, layers.1 and the root, which
    holds the embedding and the head). Labels, the same in torch 2.4–2.15 (2.13
    ``fsdp/fully_sharded_data_parallel.py:838`` ``FullyShardedDataParallel.forward``, ``_runtime_utils.py:372,467,520``
    ``._pre_forward``/``._post_forward``/``._root_pre_forward``, ``:653`` ``._pre_backward_hook``, ``:722``
    ``._post_backward_hook``); backward hooks on the training thread (CPU). ``root_params=False``: the
    root holds no parameter (no flat parameter: no all-gather, no post-backward hook of its own)."""
    f = "FullyShardedDataParallel"
    events = [
        _r("ProfilerStep#1", 0.0, 200.0),
        _r(f"{f}.forward", 1.0, 60.0),
        _r(f"{f}._root_pre_forward", 1.5, 1.0),
        _r(f"{f}._pre_forward", 3.0, 4.0),
        _x("aten::embedding", 8.0, 3.0),
        _r(f"{f}.forward", 12.0, 15.0),
        _r(f"{f}._pre_forward", 12.5, 3.0),
        _launch("c10d::_allgather_base_", 13.0),
        _x("aten::mm", 16.0, 8.0),
        _r(f"{f}._post_forward", 25.0, 1.0),
        _r(f"{f}.forward", 28.0, 15.0),
        _r(f"{f}._pre_forward", 28.5, 3.0),
        _launch("c10d::_allgather_base_", 29.0),
        _x("aten::mm", 32.0, 8.0),
        _r(f"{f}._post_forward", 41.0, 1.0),
        _x("aten::mm", 45.0, 10.0),
        _r(f"{f}._post_forward", 56.0, 2.0),
        _x("aten::nll_loss", 62.0, 2.0),
        _x("autograd::engine::evaluate_function: NllLossBackward0", 65.0, 2.0),
        _x("aten::nll_loss_backward", 65.5, 1.0),
        _r(f"{f}._pre_backward_hook", 68.0, 2.0),
        _x("aten::mm", 71.0, 5.0),
        _r(f"{f}._pre_backward_hook", 77.0, 4.0),
        _launch("c10d::_allgather_base_", 78.0),
        _x("aten::mm", 82.0, 8.0),
        _r(f"{f}._post_backward_hook", 91.0, 4.0),
        _launch("c10d::_reduce_scatter_base_", 92.0),
        _r(f"{f}._pre_backward_hook", 96.0, 4.0),
        _launch("c10d::_allgather_base_", 97.0),
        _x("aten::mm", 101.0, 8.0),
        _r(f"{f}._post_backward_hook", 110.0, 4.0),
        _launch("c10d::_reduce_scatter_base_", 111.0),
        _x("aten::embedding_dense_backward", 115.0, 3.0),
        _r("Optimizer.step#SGD.step", 130.0, 10.0),
        _x("aten::_foreach_add_", 131.0, 5.0),
        _gloo("gloo:all_gather", 13.5, 2.0),
        _gloo("gloo:all_gather", 29.5, 2.0),
        _gloo("gloo:all_gather", 78.5, 2.0),
        _gloo("gloo:all_reduce", 92.5, 3.0),
        _gloo("gloo:all_gather", 97.5, 2.0),
        _gloo("gloo:all_reduce", 111.5, 3.0),
    ]
    if root_params:
        events += [
            _launch("c10d::_allgather_base_", 4.0),
            _gloo("gloo:all_gather", 4.5, 2.0),
            _r(f"{f}._post_backward_hook", 119.0, 4.0),
            _launch("c10d::_reduce_scatter_base_", 120.0),
            _gloo("gloo:all_reduce", 120.5, 3.0),
        ]
    return events


FSDP1_PLACES = {
    ("aten::embedding", 8.0): ("root", "forward"),
    ("aten::mm", 16.0): ("#0", "forward"),
    ("aten::mm", 32.0): ("#1", "forward"),
    ("aten::mm", 45.0): ("root", "forward"),
    ("aten::nll_loss", 62.0): ("(outside)", "(outside)"),
    ("aten::nll_loss_backward", 65.5): ("(outside)", "(outside)"),
    ("aten::mm", 71.0): (
        "root",
        "backward",
    ),  # the 1st pre-backward hook: the root's (its forward ended last)
    ("aten::mm", 82.0): ("#1", "backward"),
    ("aten::mm", 101.0): ("#0", "backward"),
    ("aten::embedding_dense_backward", 115.0): ("root", "backward"),
    ("aten::_foreach_add_", 131.0): ("(all)", "optimizer"),
    ("gloo:all_gather", 4.5): ("root", "forward"),
    ("gloo:all_gather", 13.5): ("#0", "forward"),
    ("gloo:all_gather", 29.5): ("#1", "forward"),
    ("gloo:all_gather", 78.5): ("#1", "backward"),
    ("gloo:all_reduce", 92.5): ("#1", "backward"),
    ("gloo:all_gather", 97.5): ("#0", "backward"),
    ("gloo:all_reduce", 111.5): ("#0", "backward"),
    ("gloo:all_reduce", 120.5): ("root", "backward"),
}


def test_fsdp1_units_are_numbered_by_the_nesting_of_their_forward_ranges(tmp_path):
    got, source, _ = _places(_write(tmp_path / "rank0.json", fsdp1_213()))
    assert source == "FSDP1 ranges (units by nesting)"
    assert got == FSDP1_PLACES


def test_fsdp1_root_without_parameters_closes_at_its_threads_last_hook(tmp_path):
    """No flat parameter on the root: its backward (opened by its pre-backward hook, the output's) ends
    with the last backward hook of the thread, #0's post-backward hook at 114 µs; after it, outside."""
    got, _, _ = _places(_write(tmp_path / "rank0.json", fsdp1_213(root_params=False)))
    want = {
        k: v
        for k, v in FSDP1_PLACES.items()
        if k not in {("gloo:all_gather", 4.5), ("gloo:all_reduce", 120.5)}
    }
    want[("aten::embedding_dense_backward", 115.0)] = ("(outside)", "(outside)")
    assert got == want


def test_fsdp1_hooks_that_do_not_match_the_forward_give_phases_only(tmp_path):
    """A pre-backward hook more than the forward has units (a hand-made mismatch): no FSDP1 units, the
    autograd/optimizer phases instead."""
    events = [*fsdp1_213(), _r("FullyShardedDataParallel._pre_backward_hook", 124.0, 1.0)]
    events += [_r("FullyShardedDataParallel._pre_backward_hook", 125.0, 1.0)]
    from fsdpbench.analysis.rank import fsdp1_units

    t = read_kineto(_write(tmp_path / "rank0.json", events)).table
    assert not len(fsdp1_units.fsdp1_ranges(t))
    assert unit_ranges.find_ranges(t).source == "autograd/optimizer ranges"


# ---- a real replicate() profile (torch 2.13, 2 gloo ranks) -----------------------------------------------
@pytest.fixture(scope="module")
def replicate_profiles(tmp_path_factory) -> Path:
    """tests/plain_replicate.py's profiles: one torchrun of 2 gloo ranks (~10 s of launch)."""
    import os
    import subprocess

    from helpers import REPO, torchrun_command

    out = tmp_path_factory.mktemp("plain_replicate")
    proc = subprocess.run(
        [*torchrun_command(2), str(REPO / "tests" / "plain_replicate.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.distributed
def test_a_real_replicate_profile_is_named_and_each_blocks_all_reduce_is_its_own(replicate_profiles):
    """replicate() writes FSDP2's labels: the analysis names the source ``replicate() ranges``, gives each
    block a forward and a backward row, and each block's backward holds the one all-reduce whose
    ``c10d::allreduce_`` launch the raw JSON has inside that block's window ([``FSDP::pre_backward
    (blocks.i)`` start, end of its last ``FSDP::post_backward_*``), the test's own reading); the trace
    holds no all-gather range, so those internals are null."""
    from helpers import raw_ns, raw_x_events, run_cli

    proc = run_cli("analyze", str(replicate_profiles), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(proc.stdout)["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        evs = raw_x_events(replicate_profiles / f"rank{r['rank']}.pt.trace.json")
        assert not any(e["name"].startswith("FSDP::all_gather") for e in evs)
        assert r["units_source"] == "replicate() ranges"
        rows = {(u["unit"], u["phase"]): u for u in r["units"]}
        launches = [raw_ns(e)[0] for e in evs if e["name"] == "c10d::allreduce_"]
        for block in ("blocks.0", "blocks.1", "blocks.2"):
            assert (block, "forward") in rows
            start = next(raw_ns(e)[0] for e in evs if e["name"] == f"FSDP::pre_backward ({block})")
            end = max(
                raw_ns(e)[1]
                for e in evs
                if e["name"].startswith("FSDP::post_backward_") and e["name"].endswith(f"({block})")
            )
            inside = sum(start <= s < end for s in launches)
            assert inside == 1
            assert rows[(block, "backward")]["collectives"]["all_reduce"]["count"] == inside
            internals = rows[(block, "backward")]["fsdp_internals"]
            assert internals["all_gather"] is None and internals["copy_in"] is None
            assert internals["reduce"]["device_us"] > 0

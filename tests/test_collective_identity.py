"""A collective is what the trace says it is: type, dtype, bytes in/out, process group and sequence
number from the collective's own args, its launching ``record_param_comms`` or ``nccl:<op>``
annotation, and the kernel name only as a last resort (docs/analysis-formats.md).

The traces here are built with the argument layouts of real traces (copied key for key; the source of
each is named on its layout), and every expectation is read from the raw JSON by the test's own plain
Python (:func:`_reference`), never from fsdpbench's output.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fsdpbench.analysis import analyze
from fsdpbench.trace.kineto import read_kineto

# Collective names as record_param_comms / kernels write them, and nccl:<op> annotation ops → type.
# Written here by hand (not fsdpbench's table) so that the expectations are independent.
TYPE_OF = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "_all_gather_base": "all_gather",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
}
ITEMSIZE = {"float": 4, "Float": 4, "int": 4, "BFloat16": 2}

# --- argument layouts, copied from real traces -------------------------------------------------

# PyTorch ~1.12 (2022): HolisticTraceAnalysis f4d0062 tests/data/trace_diff/test/test.json.gz — the
# record_param_comms op has no comm args, the nccl:<op> annotation has Input Dims/Input type, the kernel
# only its launch args; all-to-all runs as ncclKernel_SendRecv.
LAYOUT_2022 = {
    "rpc": lambda c: {
        "Trace name": "PyTorch Profiler",
        "Trace iteration": 0,
        "External id": 313,
        "Profiler Event Index": 312,
        "Module Hierarchy": "",
        "Call stack": "",
    },
    "ann": lambda c: {
        "Trace name": "PyTorch Profiler",
        "External id": 314,
        "Input Dims": [c["dims"]],
        "Input type": ["float"],
    },
    "kernel_args": lambda c: {"External id": 1931946, "queued": 0, "device": 1, "context": 1, "stream": 15},
}

# PyTorch ~2.1 (2024): HolisticTraceAnalysis f4d0062 tests/data/ns_resolution_trace/… — comm args on
# record_param_comms only, with "Process Group ID" (no name, description or sequence number).
LAYOUT_2024_ID = {
    "rpc": lambda c: {
        "External id": 2099,
        "Collective name": c["coll"],
        "dtype": "Float",
        "In msg nelems": c["nin"],
        "Global rank start": 0,
        "Group size": 2,
        "Process Group Ranks": "[0, 1]",
        "Out msg nelems": c["nout"],
        "Global rank stride": 1,
        "Process Group ID": 0,
        "Ev Idx": 50,
    },
    "ann": lambda c: {"External id": 2100, "Ev Idx": 51},
    "kernel_args": lambda c: {"External id": 869830, "queued": 0, "device": 0, "context": 1, "stream": 285},
}

# PyTorch ~2.3 (NCCL 2.17.1): HolisticTraceAnalysis f4d0062 tests/data/nccl_parser_config/nccl_data.json.gz
# — the same comm args on record_param_comms and on the kernel, with group name and description.
_GROUP_2024 = {
    "In split size": "[]",
    "Out split size": "[]",
    "Process Group Name": "0",
    "Process Group Description": "default_pg",
    "Process Group Ranks": "[0, 1]",
}
LAYOUT_2024_NAME = {
    "rpc": lambda c: {
        "External id": 2099,
        "Record function id": 1959,
        "Global rank stride": 1,
        "Out msg nelems": c["nout"],
        "Group size": 2,
        "Global rank start": 0,
        "In msg nelems": c["nin"],
        "dtype": "Float",
        "Collective name": c["coll"],
        **_GROUP_2024,
    },
    "ann": lambda c: {"External id": 2100, "Record function id": 1960, "Ev Idx": 51},
    "kernel_args": lambda c: {
        "External id": 12945,
        "stream": 40,
        "Collective name": c["coll"],
        "In msg nelems": c["nin"],
        "Out msg nelems": c["nout"],
        "Group size": 2,
        "dtype": "Float",
        **_GROUP_2024,
    },
}


# torch 2.13: the keys its Kineto writes (the strings next to "Process Group Ranks" in torch 2.13's
# libtorch_cpu.so: "Seq", "Comms Id", "Rank", …) on the layout of AMD-AGI/TraceLens 171dd74
# tests/traces/b200/eager_trace.json.gz (NCCL 2.27.5): kernel and record_param_comms both carry them.
def _args_2026(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "Collective name": c["coll"],
        "In msg nelems": c["nin"],
        "Out msg nelems": c["nout"],
        "Group size": 8,
        "dtype": "BFloat16",
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": c.get("pg", "3"),
        "Process Group Description": c.get("desc", "undefined"),
        "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
        "Seq": c["seq"],
        "Comms Id": 1000 + c["seq"],
    }


LAYOUT_2026 = {
    "rpc": lambda c: {"External id": 4802, "Record function id": 0, "Rank": 0, **_args_2026(c)},
    "ann": lambda c: {"External id": 4803, "Input type": ["c10::BFloat16"], "Input Dims": [[1, c["nin"]]]},
    "kernel_args": lambda c: {"External id": 4802, "stream": 7, **_args_2026(c)},
}

# RCCL 2.22.3 on MI300X: AMD-AGI/TraceLens 171dd74 tests/traces/mi300/resnet_act_checkpoint.json.gz —
# every collective is ncclDevKernel_Generic; the type is only in the kernel's args (or, without them,
# on the launching record_param_comms); launched by hipExtLaunchKernel.
_RCCL_GROUP = {
    "Group size": 8,
    "dtype": "BFloat16",
    "In split size": "[]",
    "Out split size": "[]",
    "Process Group Name": "0",
    "Process Group Description": "default_pg",
    "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
}
LAYOUT_RCCL = {
    "rpc": lambda c: {
        "External id": 1290,
        "Record function id": 0,
        "Collective name": c["coll"],
        "Rank": 0,
        "Out msg nelems": c["nout"],
        "Global rank stride": 1,
        "Global rank start": 0,
        "In msg nelems": c["nin"],
        **_RCCL_GROUP,
    },
    "ann": lambda c: {"External id": 1291, "Input type": ["c10::BFloat16"], "Input Dims": [[c["nin"]]]},
    "kernel_args": lambda c: {
        "External id": 47,
        "device": 2,
        "stream": 4,
        "kind": "Dispatch Kernel",
        **(
            {}
            if c.get("bare")
            else {
                "Collective name": c["coll"],
                "In msg nelems": c["nin"],
                "Out msg nelems": c["nout"],
                **_RCCL_GROUP,
            }
        ),
    },
    "launch": "hipExtLaunchKernel",
}


def _trace(layout: dict[str, Any], calls: list[dict[str, Any]], devices: int = 2) -> dict[str, Any]:
    """A one-step trace: per call, record_param_comms ⊃ nccl:<op> ⊃ the launch on the host thread, and the
    kernel on stream 7 with the launch's correlation id."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
         "dur": 1000.0 * (len(calls) + 1)},
    ]  # fmt: skip
    for k, c in enumerate(calls):
        t, corr = 1000.0 * k + 10.0, 5000 + k
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": t,
                   "dur": 60.0, "args": layout["rpc"](c)})  # fmt: skip
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"nccl:{c['op']}", "pid": 1, "tid": 1,
                   "ts": t + 5.0, "dur": 50.0, "args": layout["ann"](c)})  # fmt: skip
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": layout.get("launch", "cudaLaunchKernel"), "pid": 1,
                   "tid": 1, "ts": t + 10.0, "dur": 5.0, "args": {"correlation": corr}})  # fmt: skip
        ev.append({"ph": "X", "cat": "kernel", "name": c["kernel"], "pid": 0, "tid": 7, "ts": t + 100.0,
                   "dur": 300.0, "args": {**layout["kernel_args"](c), "correlation": corr}})  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "GPU"} for i in range(devices)],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
        "traceEvents": ev,
    }


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "rank0.json.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _reference(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel whose name starts with nccl, from the raw JSON: type, bytes, group, seq, in order of
    start. Own args first, then the record_param_comms and nccl:<op> around its launch."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e for e in ev if e["cat"] in ("cuda_runtime",)}
    out = []
    for k in sorted(
        (e for e in ev if e["cat"] == "kernel" and e["name"].startswith("nccl")), key=lambda e: e["ts"]
    ):
        a = k["args"]
        lau = launches[a["correlation"]]
        around = [
            e
            for e in ev
            if e["tid"] == lau["tid"]
            and e["ts"] <= lau["ts"]
            and e["ts"] + e["dur"] >= lau["ts"] + lau["dur"]
        ]
        rpc = next((e["args"] for e in around if e["name"] == "record_param_comms"), {})
        ann = next(e for e in around if e["name"].startswith("nccl:"))
        src = a if "Collective name" in a else rpc if "Collective name" in rpc else None
        if src is not None:
            ctype = TYPE_OF[src["Collective name"]]
            size = ITEMSIZE[src["dtype"]]
            nbytes = max(src["In msg nelems"], src["Out msg nelems"]) * size
            group = str(src.get("Process Group Name", src.get("Process Group ID")))
        else:
            ctype = TYPE_OF[ann["name"].split(":", 1)[1]]
            nbytes = math.prod(ann["args"]["Input Dims"][0]) * ITEMSIZE[ann["args"]["Input type"][0]]
            group = None
        seq = a.get("Seq", rpc.get("Seq"))
        out.append({"type": ctype, "bytes": float(nbytes), "group": group, "seq": -1 if seq is None else seq})
    return out


def _ours(path: Path) -> tuple[list[dict[str, Any]], Any]:
    res = analyze([path])
    ce = res.ranks[0].collective_events
    rows = [
        {"type": t, "bytes": float(b), "group": g, "seq": int(s)}
        for t, b, g, s in zip(ce["type"], ce["bytes"], ce["group"], ce["seq"], strict=True)
    ]
    return rows, res


CASES = {
    "2022_nccl_annotation": (
        LAYOUT_2022,
        [
            {"op": "all_to_all", "kernel": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
             "dims": [2, 1024, 34820]},
            {"op": "all_reduce", "kernel": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
             "dims": [45310188]},
            {"op": "all_to_all", "kernel": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
             "dims": [8, 1024, 8816]},
        ],
    ),
    "2024_process_group_id": (
        LAYOUT_2024_ID,
        [
            {"op": "all_reduce", "coll": "allreduce", "nin": 2049000, "nout": 2049000,
             "kernel": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"},
            {"op": "broadcast", "coll": "broadcast", "nin": 53120, "nout": 53120,
             "kernel": "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"},
        ],
    ),
    "2024_process_group_name": (
        LAYOUT_2024_NAME,
        [
            {"op": "all_reduce", "coll": "allreduce", "nin": 6637568, "nout": 6637568,
             "kernel": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"},
            {"op": "broadcast", "coll": "broadcast", "nin": 53120, "nout": 53120,
             "kernel": "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"},
        ],
    ),
    "2026_seq": (
        LAYOUT_2026,
        [
            {"op": "_all_gather_base", "coll": "_allgather_base", "nin": 25136, "nout": 201088, "seq": 7,
             "kernel": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
            {"op": "_reduce_scatter_base", "coll": "_reduce_scatter_base", "nin": 201088, "nout": 25136,
             "seq": 8, "kernel": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
            {"op": "all_reduce", "coll": "allreduce", "nin": 4096, "nout": 4096, "seq": 3, "pg": "5",
             "desc": "mesh_tp", "kernel": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"},
        ],
    ),
    "rccl_generic": (
        LAYOUT_RCCL,
        [
            *[{"op": "broadcast", "coll": "broadcast", "nin": 9600, "nout": 9600,
               "kernel": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"}] * 3,
            *[{"op": "all_reduce", "coll": "allreduce", "nin": 2873320, "nout": 2873320,
               "kernel": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"}] * 3,
            # a Generic kernel without args of its own: typed by its launching record_param_comms
            {"op": "all_reduce", "coll": "allreduce", "nin": 1024, "nout": 1024, "bare": True,
             "kernel": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"},
        ],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_collective_is_what_its_args_say(tmp_path, case):
    layout, calls = CASES[case]
    doc = _trace(layout, calls)
    ref = _reference(doc)
    ours, res = _ours(_write(tmp_path, doc))
    assert ours == ref
    rank = res.record().to_dict()["ranks"][0]
    want = Counter(r["type"] for r in ref)
    assert {t: s["count"] for t, s in rank["collectives"].items()} == dict(want)
    assert "other" not in rank["collectives"]  # the kernel name alone would say "other" for RCCL
    named = {r["group"] for r in ref} - {None}
    assert set(rank["groups"]) == named


def test_group_description_ranks_and_size_come_from_the_trace(tmp_path):
    doc = _trace(*CASES["2026_seq"])
    res = analyze([_write(tmp_path, doc)])
    groups = res.record().to_dict()["ranks"][0]["groups"]
    raw = {}
    for e in doc["traceEvents"]:
        a = e.get("args", {})
        if e.get("cat") == "kernel":
            raw[a["Process Group Name"]] = {
                "description": a["Process Group Description"],
                "ranks": json.loads(a["Process Group Ranks"]),
                "size": a["Group size"],
            }
    assert groups == raw
    ce = res.ranks[0].collective_events
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert ce["dtype"].tolist() == [k["args"]["dtype"] for k in kernels]
    assert ce["in_bytes"].tolist() == [k["args"]["In msg nelems"] * 2.0 for k in kernels]
    assert ce["out_bytes"].tolist() == [k["args"]["Out msg nelems"] * 2.0 for k in kernels]


def test_the_event_table_carries_group_and_seq(tmp_path):
    doc = _trace(*CASES["2026_seq"])
    table = read_kineto(_write(tmp_path, doc)).table
    comm = table.category.mask("comm") & table.device
    got = sorted(zip(table.group.strings()[comm].tolist(), table.seq[comm].tolist(), strict=True))
    want = sorted(
        (e["args"]["Process Group Name"], e["args"]["Seq"])
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel"
    )
    assert got == want
    host = ~table.device
    assert set(table.group.strings()[host].tolist()) == {""} and (table.seq[host] == -1).all()


def test_gloo_collectives_have_no_group_or_sequence_number():
    """gloo traces write neither (docs: ``null``): none is invented."""
    path = Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"
    raw = json.loads(path.read_text())
    assert not any(
        "Process Group Name" in e.get("args", {}) or "Seq" in e.get("args", {}) for e in raw["traceEvents"]
    )
    res = analyze([path])
    ce = res.ranks[0].collective_events
    assert len(ce) > 0
    assert ce["group"].isna().all() and (ce["seq"] == -1).all()
    assert res.record().to_dict()["ranks"][0]["groups"] == {}


def test_real_2022_trace_all_to_all_is_all_to_all_with_its_annotation_bytes(shared_fixtures):
    """HTA's trace_diff test trace (NCCL, PyTorch ~1.12): the SendRecv kernels launched by nccl:all_to_all
    are all-to-alls, sized by the annotation's Input Dims; counts and bytes read from the raw JSON."""
    path = shared_fixtures / "fixtures" / "kineto" / "trace_diff_test" / "test.json.gz"
    raw = json.loads(gzip.decompress(path.read_bytes()))
    ann = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"
           and str(e.get("name", "")).startswith("nccl:")]  # fmt: skip
    want: Counter[str] = Counter()
    want_bytes: Counter[str] = Counter()
    for e in ann:
        op = TYPE_OF[e["name"].split(":", 1)[1]]
        want[op] += 1
        want_bytes[op] += math.prod(e["args"]["Input Dims"][0]) * ITEMSIZE[e["args"]["Input type"][0]]
    assert want == {"all_to_all": 42, "all_reduce": 18}  # what this file holds
    got = analyze([path]).record().to_dict()["ranks"][0]["collectives"]
    assert {t: s["count"] for t, s in got.items()} == dict(want)
    assert {t: s["bytes"] for t, s in got.items()} == dict(want_bytes)


def _cpu_only(tmp_path: Path, devices: int) -> tuple[Path, dict[str, Any]]:
    """The layout of HTA f4d0062 tests/data/distributed_info_unavailable (a CPU-only profile of an NCCL
    job: deviceProperties lists 8 GPUs, record_param_comms ⊃ nccl:all_to_all, no kernels)."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 900.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 200.0, "dur": 50.0,
         "args": {"Trace name": "PyTorch Profiler", "External id": 292, "Profiler Event Index": 291}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "pid": 1, "tid": 1, "ts": 205.0,
         "dur": 40.0, "args": {"External id": 293, "Input Dims": [[8, 1024, 8816]], "Input type": ["float"]}},
    ]  # fmt: skip
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": i} for i in range(devices)], "traceEvents": ev}
    return _write(tmp_path, doc, "rank0.json"), doc


def test_cpu_only_profile_of_a_gpu_job_warns_and_counts_no_host_span_as_a_collective(tmp_path):
    path, doc = _cpu_only(tmp_path, devices=8)
    assert not any(e.get("cat") in ("kernel", "gpu_memcpy", "cuda_runtime") for e in doc["traceEvents"])
    res = analyze([path])
    rank = res.record().to_dict()["ranks"][0]
    assert rank["collectives"] == {} and rank["comm_us"] == 0.0
    assert any("device activity was not recorded" in w and "8 device(s)" in w for w in res.warnings)
    assert not any("no collectives found" in w for w in res.warnings)  # the warning above says why


def test_a_gloo_run_on_a_gpu_machine_is_still_a_gloo_run(tmp_path):
    """Kineto lists the machine's GPUs in deviceProperties even when the job ran gloo on the CPU."""
    doc = json.loads((Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json").read_text())
    doc["deviceProperties"] = [{"id": i} for i in range(8)]
    gloo = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("gloo:")]
    res = analyze([_write(tmp_path, doc, "rank1.json")])
    assert not any("device activity was not recorded" in w for w in res.warnings)
    got = res.record().to_dict()["ranks"][0]["collectives"]
    assert sum(s["count"] for s in got.values()) == len(gloo) == 1


def test_odd_identity_args_give_what_they_say_and_no_traceback(tmp_path, monkeypatch):
    """A hand-edited trace: a list as group size, a number as ranks, a string Seq, an unknown dtype. The
    typed and the orjson decoders agree, and each odd value is "not said", never a traceback."""
    from fsdpbench.trace import kineto_decode

    doc = _trace(*CASES["2026_seq"])
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["args"].update(
        {"Group size": [8], "Process Group Ranks": 7, "Seq": "7", "Process Group Name": "9"}
    )
    kernels[1]["args"]["dtype"] = "Float7"
    path = _write(tmp_path, doc)
    typed = read_kineto(path).table
    monkeypatch.setattr(kineto_decode, "_TYPED", (None, None))
    plain = read_kineto(path).table
    for table in (typed, plain):
        comm = table.category.mask("comm") & table.device
        assert table.seq[comm].tolist() == [-1, 8, 3]  # the string Seq is not a sequence number
        assert math.isnan(table.in_bytes[comm][1]) and math.isnan(table.bytes[comm][1])  # unknown dtype
    res = analyze([path])
    assert res.record().to_dict()["ranks"][0]["groups"]["9"] == {
        "description": "undefined",
        "ranks": "7",
        "size": None,
    }


def test_an_older_gloo_trace_without_worker_spans_on_a_gpu_machine_keeps_its_launches(tmp_path):
    """No gloo:* span and no distributedInfo, but c10d launches: the GPUs Kineto lists do not make it a
    GPU job (a gloo run on a GPU machine); its launches are its communication, as for any such trace."""
    doc = json.loads((Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json").read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("gloo:")]
    del doc["distributedInfo"]
    doc["deviceProperties"] = [{"id": i} for i in range(8)]
    launches = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("c10d::")]
    res = analyze([_write(tmp_path, doc, "rank1.json")])
    assert not any("device activity was not recorded" in w for w in res.warnings)
    got = res.record().to_dict()["ranks"][0]["collectives"]
    assert sum(s["count"] for s in got.values()) == len(launches) == 1


def test_real_2023_trace_each_kernel_takes_the_type_of_the_annotation_that_launched_it(shared_fixtures):
    """HTA's negative_queue trace (16-rank NCCL run): all 80 NCCL kernels are ncclKernel_SendRecv, launched
    by nccl:all_to_all, _reduce_scatter_base, all_reduce and _all_gather_base. Reference, from the raw
    JSON: per annotation, whether a runtime call inside it launched an NCCL kernel of the trace."""
    path = shared_fixtures / "fixtures" / "kineto" / "negative_queue_length_values_check" / "rank0.json.gz"
    raw = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    kernels = {
        e["args"]["correlation"] for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
    }
    launches = [
        e for e in ev if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in kernels
    ]
    want: Counter[str] = Counter()
    for a in ev:
        if a.get("cat") == "user_annotation" and a["name"].startswith("nccl:"):
            if any(r["tid"] == a["tid"] and a["ts"] <= r["ts"] <= a["ts"] + a["dur"] for r in launches):
                want[TYPE_OF[a["name"].split(":", 1)[1]]] += 1
    assert want == {"all_to_all": 45, "reduce_scatter": 10, "all_reduce": 10, "all_gather": 10}
    got = analyze([path]).record().to_dict()["ranks"][0]["collectives"]
    assert {t: s["count"] for t, s in got.items()} == dict(want)  # the 5 orphan kernels are left out

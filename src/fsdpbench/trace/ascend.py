"""Reader for torch_npu (Ascend PyTorch Profiler) output: one ``*_ascend_pt`` folder per rank.

Sources inside ``ASCEND_PROFILER_OUTPUT/``:

* ``kernel_details.csv``: the device tasks. Rows whose ``Accelerator Core`` is ``HCCL``
  are communication (op level, one row per collective), every other row is compute, as CANN's own
  "Overlap Analysis" counts them. Columns are looked up by name (they differ between versions),
  cells are stripped of the stray tabs/spaces torch_npu writes, and start times are parsed from
  their decimal text (µs since the epoch do not fit a double to the ns). Level0 exports write
  ``N/A`` as the op type of compute kernels: the type is then derived from the name
  (``aclnnMm_MatMulCommon_MatMulV2`` → ``MatMulV2``, ``Conv2D1`` → ``Conv2D``). A header-only file
  (no device task recorded) is a warning.
* ``trace_view.json``: host ``ProfilerStep#N`` windows, CANN API events (``Hccl@Launch_Ffts``,
  ``AscendCL@aclrtSynchronize*``, ``Node@launch``…) and Ascend Hardware ``BARRIER`` tasks for the
  sync and launch counts, HCCL message sizes; and, when kernel_details.csv is missing, the device
  tasks themselves: Ascend Hardware tasks of compute types (AI_CORE, AI_VECTOR_CORE, MIX_AIC/AIV,
  AI_CPU, DSA_SQE; HCCL's ``*AivKernel``/``*AicpuKernel`` excluded) on their streams, and the HCCL
  op-level lanes (``Group N Communication``) as communication: CANN's Overlap Analysis rule.
* ``step_trace_time.csv`` (optional): the profiler's own Computing / Communication /
  Communication(Not Overlapped) / Free per step, kept as a cross-check.

Without kernel_details.csv and trace_view.json the database export ``ascend_pytorch_profiler_<rank>.db``
is read instead (:mod:`fsdpbench.trace.ascend_db`) into the same table.

For both: a host sync call nested in one of the same kind on its thread (``Runtime@StreamSynchronize``
inside ``AscendCL@aclrtSynchronizeStream*``) is one sync; divide kernels on an HCCL stream are the
AVG half of the collective before them (torch_npu has no HCCL AVG) and get the op type
``RealDiv (HCCL AVG of reduce_scatter)``.

The rank comes from ``profiler_info_{rank}.json`` (its ``rank_id``, else the number in the name).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.ascend_comm import op_identity
from fsdpbench.trace.ascend_csv import find_column, read_csv, required_column, time_column
from fsdpbench.trace.ascend_db import (
    CSV_REFERENCE,
    STEP_TRACE_TIME_CSV,
    db_rank,
    find_db,
    read_tables,
    step_trace_time,
    summary_frame,
)
from fsdpbench.trace.ascend_launch import NO_LANE, link_rows, through_queue
from fsdpbench.trace.ascend_ops import op_type_from_name
from fsdpbench.trace.kineto_cpu import outermost
from fsdpbench.trace.rank import RankTrace
from fsdpbench.trace.table import (
    TASKS,
    Coded,
    assign_steps,
    collective_of,
    make_table,
    object_full,
    task_of,
    us_strings_to_ns,
    us_to_ns,
)

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def rank_of_folder(folder: Path) -> int | None:
    """Rank from ``profiler_info_{rank}.json`` (its ``rank_id``, else the file name), or None."""
    for f in sorted(folder.glob("profiler_info*.json")):
        m = _INFO_RE.match(f.name)
        try:
            info = orjson.loads(f.read_bytes())
            if isinstance(info, dict) and isinstance(info.get("rank_id"), int) and info["rank_id"] >= 0:
                return info["rank_id"]
        except (OSError, orjson.JSONDecodeError):
            pass
        if m:
            return int(m.group(1))
    return None


def _kernel_events(path: Path, warnings: list[str]) -> pd.DataFrame:
    df = read_csv(path, warnings)
    name = required_column(df, path, "Name", "Op Name")
    core = required_column(df, path, "Accelerator Core", "Task Type")
    start = time_column(
        required_column(df, path, "Start Time(us)", "Task Start Time(us)"), path, "Start Time(us)"
    )
    dur = time_column(required_column(df, path, "Duration(us)", "Task Duration(us)"), path, "Duration(us)")
    typ = find_column(df, path, "Type", "OP Type")
    if typ is None:
        typ = pd.Series("N/A", index=df.index)
    step = find_column(df, path, "Step Id", "Step ID")
    stream = find_column(df, path, "Stream ID")
    is_comm = (core == "HCCL") | name.str.match(r"^(hcom_|hccl_)")
    typ = _derive_missing_types(typ, name)
    steps = pd.to_numeric(step, errors="coerce").fillna(-1).astype(np.int64) if step is not None else -1
    lane = np.where(
        is_comm,
        "HCCL",
        "Stream " + (stream if stream is not None else pd.Series("?", index=df.index)).astype(str),
    )
    return pd.DataFrame(
        {
            "name": name,
            "category": np.where(is_comm, "comm", "compute"),
            "start_ns": start,
            "end_ns": start + dur,
            "lane": lane,
            "device": True,
            "op_type": typ,
            "step": steps,
        }
    )


_HCCL_DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "fp16": 2,
    "float16": 2,
    "bf16": 2,
    "bfp16": 2,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "fp64": 8,
    "uint64": 8,
    "uint32": 4,
}


def _hccl_bytes(args: dict) -> float:
    """Bytes of one HCCL op from its trace_view args (``count`` elements of ``data_type``)."""
    size = _HCCL_DTYPE_BYTES.get(str(args.get("data_type", "")).lower())
    try:
        return float(int(args["count"]) * size) if size else np.nan
    except (KeyError, TypeError, ValueError):
        return np.nan


# device task types that CANN's Overlap Analysis counts as compute (HCCL's own kernels excluded by name)
_COMPUTE_TASK_TYPES = {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE"}


def _frame(events: list[dict], category: str, lanes: list[str], device: bool, path: Path) -> pd.DataFrame:
    names = pd.Series([str(e.get("name", "")) for e in events], dtype=object)
    try:
        start = us_strings_to_ns(pd.Series([str(e.get("ts", "")) for e in events], dtype=object))
        dur = us_to_ns(np.array([float(e.get("dur", 0) or 0) for e in events], dtype=np.float64))
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"{path}: an event has a bad 'ts' or 'dur' ({exc})") from None
    return pd.DataFrame(
        {
            "name": names,
            "category": category,
            "start_ns": start,
            "end_ns": start + dur,
            "lane": lanes,
            "device": device,
            "op_type": names,
            "step": -1,
        }
    )


def _trace_view_events(
    path: Path,
    warnings: list[str],
    hccl_bytes: dict[str, float],
    hccl_streams: set[str] | None = None,
    layers: set[str] | None = None,
    launches: dict[tuple[str, int], tuple[str, int]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """From trace_view.json: host CANN/Python events and BARRIER tasks, the ``ProfilerStep#N``
    windows, and the device tasks (Ascend Hardware compute tasks, HCCL op-level communication);
    fills ``hccl_bytes`` (op name → bytes) from the HCCL op lanes, ``hccl_streams`` with the
    streams HCCL's tasks run on (``Stream 4``, from the ``stream id`` of its task-level lanes),
    ``layers`` with the process names that hold complete events (``CANN``, ``Ascend Hardware`` …) and
    ``launches`` with each device task's host operator (:func:`_flow_launches`)."""
    try:
        events = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); the file is truncated or corrupt") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise InputError(f"{path}: expected a JSON array of trace events")
    pnames: dict[object, str] = {}
    tnames: dict[tuple[object, object], str] = {}
    for e in events:
        if type(e) is dict and e.get("ph") == "M" and type(e.get("args")) is dict:
            if e.get("name") == "process_name":
                pnames[e.get("pid")] = str(e["args"].get("name", ""))
            elif e.get("name") == "thread_name":
                tnames[(e.get("pid"), e.get("tid"))] = str(e["args"].get("name", ""))
    keep, comp, comm = [], [], []
    for e in events:
        if type(e) is not dict or e.get("ph") != "X":
            continue
        pid, tid = e.get("pid"), e.get("tid")
        proc, thread = pnames.get(pid, ""), tnames.get((pid, tid), str(tid))
        if layers is not None:
            layers.add(proc)
        a = e.get("args") if type(e.get("args")) is dict else {}
        if proc in ("HCCL", "Communication") and "Communication" in thread:
            hccl_bytes[str(e.get("name", ""))] = _hccl_bytes(a)
            comm.append((e, f"HCCL {thread}"))
        elif (
            proc in ("HCCL", "Communication") and hccl_streams is not None and a.get("stream id") is not None
        ):
            hccl_streams.add(f"Stream {a['stream id']}")
        elif (
            proc == "Ascend Hardware"
            and a.get("Task Type") in _COMPUTE_TASK_TYPES
            and not str(e.get("name", "")).endswith(("AicpuKernel", "AivKernel"))
        ):
            comp.append((e, thread))
        if proc in ("Python", "CANN") or (proc == "Ascend Hardware" and e.get("name") == "BARRIER"):
            keep.append((e, f"{proc} {thread}"))
    parts = [
        _frame([e for e, _ in keep], "other", [lane for _, lane in keep], False, path),
        _frame([e for e, _ in comp], "compute", [lane for _, lane in comp], True, path),
        _frame([e for e, _ in comm], "comm", [lane for _, lane in comm], True, path),
    ]
    host, device = parts[0], pd.concat(parts[1:], ignore_index=True)
    if launches is not None:
        launches.update(_flow_launches(events, pnames, tnames, path))
    device["op_type"] = _derive_missing_types(pd.Series("N/A", index=device.index), device["name"])
    is_step = host["name"].str.match(_STEP_RE.pattern).to_numpy(dtype=bool)
    steps = pd.DataFrame(
        {
            "step": host["name"][is_step].str.extract(_STEP_RE.pattern)[0].astype(np.int64).to_numpy(),
            "start_ns": host["start_ns"].to_numpy()[is_step],
            "end_ns": host["end_ns"].to_numpy()[is_step],
        }
    ).sort_values("start_ns", ignore_index=True)
    return host, steps, device


def _flow_launches(
    events: list, pnames: dict[object, str], tnames: dict[tuple[object, object], str], path: Path
) -> dict[tuple[str, int], tuple[str, int]]:
    """(category, device task start ns) → (host lane, host start ns) of the operator that launched it:
    the ``async_npu`` flows of trace_view.json (``s`` at the operator on its thread, ``f`` at the
    task on an Ascend Hardware stream, ``compute``, or an HCCL lane, ``comm``), moved from a
    ``Dequeue@…`` range to its ``Enqueue`` by correlation id (:mod:`fsdpbench.trace.ascend_launch`).
    A device start with flows from two different host points is left out (ambiguous)."""
    starts: dict[object, tuple[str, str]] = {}
    ends: list[tuple[object, str, str]] = []
    enq: dict[object, tuple[str, str]] = {}
    deq: list[tuple[str, str, float, object]] = []
    wanted = ("async_npu", "enqueue", "dequeue")
    for e in events:
        if type(e) is not dict or (cat := e.get("cat")) not in wanted:
            continue
        ph, pid, tid = e.get("ph"), e.get("pid"), e.get("tid")
        if cat == "async_npu" and ph in ("s", "f"):
            if ph == "s":
                starts[e.get("id")] = (
                    f"{pnames.get(pid, '')} {tnames.get((pid, tid), str(tid))}",
                    str(e.get("ts")),
                )
            else:
                kind = "comm" if pnames.get(pid, "") in ("HCCL", "Communication") else "compute"
                ends.append((e.get("id"), kind, str(e.get("ts"))))
        elif cat in ("enqueue", "dequeue") and ph == "X" and type(e.get("args")) is dict:
            key = e["args"].get("correlation_id")
            lane = f"{pnames.get(pid, '')} {tnames.get((pid, tid), str(tid))}"
            if cat == "enqueue":
                enq[key] = (lane, str(e.get("ts")))
            else:
                deq.append((lane, str(e.get("ts")), float(e.get("dur", 0) or 0), key))
    pairs = [(starts[i], kind, ts) for i, kind, ts in ends if i in starts]
    if not pairs:
        return {}
    try:
        host_ns = us_strings_to_ns(pd.Series([h[1] for h, _, _ in pairs], dtype=object))
        dev_ns = us_strings_to_ns(pd.Series([ts for _, _, ts in pairs], dtype=object))
        enq_ns = us_strings_to_ns(pd.Series([ts for _, ts in enq.values()], dtype=object))
        deq_ns = us_strings_to_ns(pd.Series([d[1] for d in deq], dtype=object))
    except ValueError as exc:
        raise InputError(f"{path}: a flow or queue event has a bad 'ts' ({exc})") from None
    host_lane = np.array([h[0] for h, _, _ in pairs], dtype=object)
    dequeue = pd.DataFrame(
        {
            "lane": [d[0] for d in deq],
            "start_ns": deq_ns,
            "end_ns": deq_ns + us_to_ns(np.array([d[2] for d in deq], dtype=np.float64)),
            "key": [d[3] for d in deq],
        }
    )
    enqueue = {k: (lane, int(ns)) for (k, (lane, _)), ns in zip(enq.items(), enq_ns.tolist(), strict=True)}
    host_lane, host_ns = through_queue(host_lane, host_ns, dequeue, enqueue)
    out: dict[tuple[str, int], tuple[str, int]] = {}
    ambiguous: set[tuple[str, int]] = set()
    for (_, kind, _), d, lane, h in zip(
        pairs, dev_ns.tolist(), host_lane.tolist(), host_ns.tolist(), strict=True
    ):
        key = (kind, int(d))
        if out.get(key, (lane, h)) != (lane, h):
            ambiguous.add(key)
        out[key] = (lane, int(h))
    for key in ambiguous:
        del out[key]
    return out


def _cross_check(path: Path, warnings: list[str]) -> pd.DataFrame | None:
    try:
        df = read_csv(path, warnings)
    except InputError as exc:
        warnings.append(str(exc))
        return None
    out = summary_frame(df, path, warnings, STEP_TRACE_TIME_CSV)
    if out is None:
        return None
    if "Device_id" in df.columns:
        out.insert(0, "device_id", df["Device_id"].str.strip())
    return out.assign(reference=CSV_REFERENCE)


def _steps_by_time(kernels: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of device work with no launch record: the last step whose host window started before
    it (device work launched in step N runs after that step's host start)."""
    if not len(steps):
        return np.full(len(kernels), -1, dtype=np.int64)
    k = np.searchsorted(steps["start_ns"].to_numpy(), kernels["start_ns"].to_numpy(), side="right") - 1
    return np.where(k >= 0, steps["step"].to_numpy()[np.maximum(k, 0)], -1)


_SYNC_TASKS = ["barrier", "device_synchronize", "stream_synchronize", "event_synchronize"]


def _outer_only(task: np.ndarray, df: pd.DataFrame) -> np.ndarray:
    """Clear the task of host sync calls nested in a call of the same kind on the same thread: one
    ``aclrtSynchronizeStream`` runs ``Runtime@StreamSynchronize`` inside it, and is one sync, not two."""
    sel = np.flatnonzero(~df["device"].to_numpy(bool) & np.isin(task, _SYNC_TASKS))
    if sel.size < 2:
        return task
    group = np.full(len(df), "", dtype=object)  # spans nest only within one (thread, task kind)
    group[sel] = df["lane"].astype(str).to_numpy()[sel] + "\x00" + task[sel].astype(str)
    outer = outermost(sel, df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), group)
    out = task.copy()
    out[np.setdiff1d(sel, outer)] = ""
    return out


# torch_npu's ProcessGroupHCCL has no HCCL AVG: it reduces with SUM, then runs ``tensor.div_(world
# size)`` on the HCCL stream (getHcclReduceOp maps AVG to HCCL_REDUCE_SUM; the post-collective hook
# divides under an NPUStreamGuard of hcclStreams[0]; Ascend/pytorch ProcessGroupHCCL.cpp @ 9e73e708)
_DIV_TYPES = ("RealDiv", "Div", "Divs", "DivV2")
HCCL_AVG_LABEL = "{op} (HCCL AVG of {collective})"
"""Op type given to a divide kernel on an HCCL stream: the AVG half of the collective before it."""


def _label_hccl_avg(
    op_type: np.ndarray,
    category: np.ndarray,
    lane: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    collective: np.ndarray,
    hccl_streams: set[str],
    comm_stream: np.ndarray | None = None,
) -> np.ndarray:
    """Relabel divide kernels that run on an HCCL stream with the collective they complete: the
    last collective that ended before the kernel started (``RealDiv (HCCL AVG of reduce_scatter)``),
    on the same stream when ``comm_stream`` gives each collective's stream (db export; each process
    group has its own HCCL stream, so HSDP's reduce-scatters and all-reduces are told apart)."""
    avg = np.flatnonzero(
        (category == "compute") & np.isin(lane, list(hccl_streams)) & np.isin(op_type, _DIV_TYPES)
    )
    if not avg.size:
        return op_type
    out = op_type.copy()
    comm = np.flatnonzero(category == "comm")
    for stream in np.unique(lane[avg]):
        mine = avg[lane[avg] == stream]
        cand = comm
        if comm_stream is not None and (comm_stream[comm] == stream).any():
            cand = comm[comm_stream[comm] == stream]
        order = cand[np.argsort(end[cand], kind="stable")]
        k = np.searchsorted(end[order], start[mine], side="right") - 1
        for i, j in zip(mine, k, strict=True):  # a handful per collective, not per event of the trace
            out[i] = HCCL_AVG_LABEL.format(
                op=op_type[i], collective=collective[order[j]] if j >= 0 else "unknown"
            )
    return out


def _assemble(
    folder: Path,
    kernels: pd.DataFrame,
    host: pd.DataFrame | None,
    steps: pd.DataFrame,
    warnings: list[str],
    cross: pd.DataFrame | None,
    rank: int | None,
    hccl_streams: set[str] | None = None,
    recorded_tasks: tuple[str, ...] | None = None,
    op_identity: tuple[dict[str, tuple[str, int]], dict[str, int]] | None = None,
) -> RankTrace:
    """The event table of one rank from its device frame (``name, category, start_ns, end_ns, lane,
    device, op_type, step``, optional ``bytes``) and host frame (same columns). Divide kernels on
    ``hccl_streams`` are labelled as the AVG half of their collective (:data:`HCCL_AVG_LABEL`).
    ``recorded_tasks``: the sync/launch kinds the export can record (None: all). ``op_identity``:
    :func:`fsdpbench.trace.ascend_comm.op_identity` (each HCCL op's group and index, each group's size)."""
    if len(steps) and len(kernels) and (kernels["step"] < 0).all():
        kernels = kernels.assign(step=_steps_by_time(kernels, steps))
    if host is None:
        host = kernels.iloc[:0]
    if len(host):
        host = host.assign(
            step=assign_steps(
                host["start_ns"].to_numpy(np.int64),
                steps["start_ns"].to_numpy(np.int64),
                steps["end_ns"].to_numpy(np.int64),
                steps["step"].to_numpy(np.int64),
            )
        )
    if "launch_lane" in kernels.columns and len(host):  # int64 kept (NaN would make the ns floats)
        host = host.assign(launch_lane=NO_LANE, launch_ns=host["start_ns"].to_numpy(np.int64))
    df = pd.concat([kernels, host], ignore_index=True) if len(host) else kernels
    names = pd.Categorical(df["name"].astype(str))
    task = _outer_only(task_of(names), df)
    category = df["category"].to_numpy(dtype=object).copy()
    category[(category == "other") & np.isin(task, _SYNC_TASKS)] = "sync"
    comm = category == "comm"
    collective = object_full(len(df), "")
    collective[comm] = collective_of(names)[comm]
    nbytes = df["bytes"].to_numpy(np.float64) if "bytes" in df.columns else np.full(len(df), np.nan)
    lane = df["lane"].astype(str).to_numpy()
    start, end = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    op_type = df["op_type"].astype(str).to_numpy(dtype=object)
    if hccl_streams:
        comm_stream = (
            df["hccl_stream"].fillna("").astype(str).to_numpy() if "hccl_stream" in df.columns else None
        )
        op_type = _label_hccl_avg(op_type, category, lane, start, end, collective, hccl_streams, comm_stream)
    group, seq, groups = _op_groups(names, comm, op_identity)
    lanes = Coded.of(lane)
    launch_ns, launch_lane = _launch_columns(df, lanes, start)
    table = make_table(
        name=names,
        category=category,
        start_ns=start,
        end_ns=end,
        lane=lanes,
        device=df["device"].to_numpy(bool),
        collective=collective,
        nbytes=nbytes,
        op_type=op_type,
        task=task,
        step=df["step"].to_numpy(np.int64),
        group=group,
        seq=seq,
        launch_ns=launch_ns,
        launch_lane=launch_lane,
    )
    return RankTrace(
        rank=rank,
        source=str(folder),
        format="ascend",
        table=table,
        windows=steps,
        mode="device",
        warnings=warnings,
        cross_check=cross,
        recorded_tasks=recorded_tasks,
        groups=groups,
    )


def _launch_columns(df: pd.DataFrame, lanes: Coded, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``launch_ns``/``launch_lane`` of the table: the host operator linked to each device task
    (the frame's ``launch_lane``/``launch_ns`` columns, :mod:`fsdpbench.trace.ascend_launch`), else
    the event's own start and lane."""
    own_ns, own_lane = start.copy(), lanes.codes.astype(np.int32)
    if "launch_lane" not in df.columns:
        return own_ns, own_lane
    code = {c: i for i, c in enumerate(lanes.categories)}
    linked = df["launch_lane"].fillna(NO_LANE).astype(str).to_numpy()
    codes = np.array([code.get(c, -1) if c != NO_LANE else -1 for c in linked.tolist()], dtype=np.int32)
    ok = codes >= 0
    own_lane[ok] = codes[ok]
    own_ns[ok] = df["launch_ns"].to_numpy()[ok].astype(np.int64)
    return own_ns, own_lane


def _op_groups(
    names: pd.Categorical,
    comm: np.ndarray,
    op_identity: tuple[dict[str, tuple[str, int]], dict[str, int]] | None,
) -> tuple[np.ndarray | None, np.ndarray | None, dict[str, dict]]:
    """The ``group`` and ``seq`` columns of the communication events named in ``op_identity`` (None
    when it names none) and the ``RankTrace.groups`` of those groups (their size from the matrix)."""
    if not op_identity or not op_identity[0]:
        return None, None, {}
    ops, sizes = op_identity
    group = object_full(len(comm), "")
    seq = np.full(len(comm), -1, dtype=np.int64)
    cats = list(names.categories)
    known = [ops.get(c) for c in cats]
    codes = np.asarray(names.codes)
    for code in np.unique(codes[comm]).tolist():
        if known[code] is not None:
            here = comm & (codes == code)
            group[here], seq[here] = known[code]
    present = sorted({g for g in group[comm].tolist() if g})
    groups = {g: {"description": None, "ranks": None, "size": sizes.get(g)} for g in present}
    return group, seq, groups


def _derive_missing_types(typ: pd.Series, names: pd.Series) -> pd.Series:
    # a number is no op type: torch_npu writes ``0`` for the MemSet half of a kernel (``NonZero_MemSet``)
    missing = typ.isin(["N/A", "", "nan"]) | typ.str.fullmatch(r"\d+")
    if not missing.any():
        return typ
    uniq = names[missing].unique()
    derived = dict(zip(uniq, map(op_type_from_name, uniq), strict=True))
    return typ.where(~missing, names.map(derived))


HOST_RUNTIME_TASKS = tuple(t for t in TASKS if t != "barrier")
"""Task kinds read from the host runtime layer (CANN API events): launches and synchronise calls."""


def recorded_tasks(
    name: str, host_runtime: bool, device_tasks: bool, warnings: list[str]
) -> tuple[str, ...] | None:
    """The sync/launch kinds an export records (None: all): launches and synchronise calls only with
    the host runtime layer (CANN API events; a Level0 export has none), BARRIER only with the device
    task list. A missing layer is a warning, and its counts read "not recorded", never 0."""
    if host_runtime and device_tasks:
        return None
    if device_tasks and not host_runtime:
        warnings.append(
            f"{name}: the export has no host runtime layer (no CANN API events, as in a Level0 profile); "
            "launch and synchronise counts are not recorded"
        )
    return (("barrier",) if device_tasks else ()) + (HOST_RUNTIME_TASKS if host_runtime else ())


def _with_task_level_comm(
    cross: pd.DataFrame, dev: pd.DataFrame, tasks: pd.DataFrame, steps: pd.DataFrame
) -> pd.DataFrame:
    """``cross`` with, per step, communication and its exposed part as older torch_npu profilers
    measured them: the union of HCCL's own tasks (``comm_tasks_us``) rather than of whole operations,
    and that union minus compute (``exposed_comm_tasks_us``). When the profiler's figure equals these,
    the cross-check warning names that as the cause of a difference (docs/analysis-definitions.md)."""
    from fsdpbench.trace import intervals as iv

    task_step = _steps_by_time(tasks, steps) if len(steps) else np.full(len(tasks), -1)
    compute = dev[(dev["category"] == "compute").to_numpy()]
    comm_us, exposed_us = [], []
    for st in cross["step"].to_numpy():  # a handful of steps
        one = len(cross) == 1 or st < 0  # one row: the whole export
        t_sel = np.ones(len(tasks), bool) if one else task_step == st
        c_sel = np.ones(len(compute), bool) if one else (compute["step"] == st).to_numpy()
        t = iv.union(tasks["start_ns"].to_numpy()[t_sel], tasks["end_ns"].to_numpy()[t_sel])
        c = iv.union(compute["start_ns"].to_numpy()[c_sel], compute["end_ns"].to_numpy()[c_sel])
        comm_us.append(iv.length(t) / 1000.0)
        exposed_us.append((iv.length(t) - iv.intersection_length(t, c)) / 1000.0)
    return cross.assign(comm_tasks_us=comm_us, exposed_comm_tasks_us=exposed_us)


def _read_db(folder: Path, db: Path) -> RankTrace:
    """One rank of a torch_npu ``export_type=db`` profile (see :mod:`fsdpbench.trace.ascend_db`)."""
    tables = read_tables(db)
    warnings: list[str] = []
    steps = tables.steps
    compute, other, comm = tables.compute, tables.other_tasks, tables.comm
    hccl_kernel = compute["name"].str.endswith(("AicpuKernel", "AivKernel")).to_numpy(bool)
    dev = pd.concat(
        [
            pd.DataFrame(
                {
                    "name": compute["name"],
                    "category": np.where(hccl_kernel, "other", "compute"),
                    "start_ns": compute["start_ns"],
                    "end_ns": compute["end_ns"],
                    "lane": compute["lane"],
                    "op_type": _derive_missing_types(compute["op_type"], compute["name"]),
                    "connection": compute["connection"],
                }
            ),
            pd.DataFrame(
                {
                    "name": other["name"],
                    "category": "other",
                    "start_ns": other["start_ns"],
                    "end_ns": other["end_ns"],
                    "lane": other["lane"],
                    "op_type": other["name"],
                    "connection": other["connection"],
                }
            ),
            pd.DataFrame(
                {
                    "name": comm["name"],
                    "category": "comm",
                    "start_ns": comm["start_ns"],
                    "end_ns": comm["end_ns"],
                    "lane": comm["lane"],
                    "op_type": [op_type_from_name(n) for n in comm["name"]],
                    "connection": comm["connection"],
                    "hccl_stream": comm["hccl_stream"],
                    "bytes": [
                        _hccl_bytes({"data_type": d, "count": c})
                        for d, c in zip(comm["data_type"], comm["count"], strict=True)
                    ],
                }
            ),
        ],
        ignore_index=True,
    )
    # tasks that are neither compute nor communication are counted (BARRIER) but not timed: the text
    # export leaves them out of kernel_details.csv and CANN's Overlap Analysis out of its step span
    dev["device"] = (dev["category"] != "other").to_numpy()
    launch = dev["connection"].map(tables.launch_ns)
    step = np.full(len(dev), -1, dtype=np.int64)
    known = launch.notna().to_numpy()
    if len(steps):
        step[known] = assign_steps(
            launch[known].to_numpy(np.int64),
            steps["start_ns"].to_numpy(np.int64),
            steps["end_ns"].to_numpy(np.int64),
            steps["step"].to_numpy(np.int64),
        )
        step[~known] = _steps_by_time(dev[~known], steps)
    if tables.op_launch:
        linked = [tables.op_launch.get(int(c)) if pd.notna(c) else None for c in dev["connection"]]
        dev = dev.assign(
            launch_lane=[NO_LANE if x is None else x[0] for x in linked],
            launch_ns=np.array(
                [s if x is None else x[1] for x, s in zip(linked, dev["start_ns"].tolist(), strict=True)],
                np.int64,
            ),
        )
    dev = dev.drop(columns="connection").assign(step=step)
    host = tables.host.assign(category="other", device=False, op_type=tables.host["name"], step=-1)
    if not len(dev):
        warnings.append(
            f"{folder.name}: {db.name} has no device tasks (TASK is empty); nothing ran on the NPU"
        )
    analysis_db = db.parent / "analysis.db"
    cross = step_trace_time(analysis_db, warnings) if analysis_db.is_file() else None
    if cross is not None:
        cross = _with_task_level_comm(cross, dev, tables.comm_tasks, steps)
    rank = rank_of_folder(folder)
    for alt in (tables.rank, db_rank(db)):
        rank = alt if rank is None else rank
    recorded = recorded_tasks(folder.name, tables.cann_api_rows > 0, tables.task_rows > 0, warnings)
    return _assemble(
        folder, dev, host if len(host) else None, steps, warnings, cross, rank, tables.hccl_streams, recorded,
        op_identity(folder),
    )  # fmt: skip


def read_ascend(folder: str | Path) -> RankTrace:
    """Read one ``*_ascend_pt`` folder into a :class:`RankTrace`: the text export
    (``kernel_details.csv`` / ``trace_view.json``) when present, else the database export
    (``ascend_pytorch_profiler_<rank>.db``).

    Raises:
        InputError: no kernel_details.csv, trace_view.json or profiler database; a CSV missing a
            needed column, unparsable times, a corrupt trace_view.json or database.
    """
    folder = Path(folder)
    out = folder / OUTPUT_DIR
    kd, tv = out / "kernel_details.csv", out / "trace_view.json"
    if not kd.is_file() and not tv.is_file():
        db = find_db(out)
        if db is not None:
            return _read_db(folder, db)
        raise InputError(
            f"{folder}: none of {OUTPUT_DIR}/kernel_details.csv, trace_view.json or ascend_pytorch_profiler_<rank>.db; "
            "export the profile with torch_npu's tensorboard_trace_handler (export_type text or db) and analyse "
            "the *_ascend_pt folder"
        )
    warnings: list[str] = []
    hccl_bytes: dict[str, float] = {}
    hccl_streams: set[str] = set()
    empty_steps = pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}, dtype=np.int64)
    host, steps, tv_device = (None, empty_steps, None)
    layers: set[str] = set()
    launches: dict[tuple[str, int], tuple[str, int]] = {}
    if tv.is_file():
        host, steps, tv_device = _trace_view_events(tv, warnings, hccl_bytes, hccl_streams, layers, launches)
    else:
        warnings.append(
            f"{folder.name}: no {OUTPUT_DIR}/trace_view.json; sync and launch counts are unavailable"
        )
    kernels = _kernel_events(kd, warnings) if kd.is_file() else None
    if kernels is not None and not len(kernels):
        kernels = None
        warnings.append(
            f"{folder.name}: {OUTPUT_DIR}/kernel_details.csv has a header but no rows (no device task was "
            "recorded: the profiler's device parse failed or the profiled step ran nothing on the NPU); "
            + (
                "device tasks taken from trace_view.json"
                if tv_device is not None and len(tv_device)
                else "there is no device activity to analyse"
            )
        )
    elif kernels is None:
        warnings.append(
            f"{folder.name}: no {OUTPUT_DIR}/kernel_details.csv; device tasks taken from trace_view.json "
            "(op types derived from kernel names)"
        )
    if kernels is None:
        kernels = tv_device if tv_device is not None else _kernel_frame_empty()
    if len(kernels) and hccl_bytes:
        comm = (kernels["category"] == "comm").to_numpy()
        nbytes = np.full(len(kernels), np.nan)
        nbytes[comm] = kernels["name"][comm].map(hccl_bytes).to_numpy(dtype=np.float64)
        kernels = kernels.assign(bytes=nbytes)
    if launches and len(kernels):
        lane, time = link_rows(
            kernels["category"].to_numpy(object), kernels["start_ns"].to_numpy(np.int64), launches
        )
        kernels = kernels.assign(launch_lane=lane, launch_ns=time)
    stt = out / "step_trace_time.csv"
    cross = _cross_check(stt, warnings) if stt.is_file() else None
    # Syncs, launches and BARRIER tasks are all read from trace_view.json: without it none is recorded.
    recorded = recorded_tasks(folder.name, "CANN" in layers, "Ascend Hardware" in layers, warnings)
    return _assemble(
        folder, kernels, host, steps, warnings, cross, rank_of_folder(folder), hccl_streams, recorded,
        op_identity(folder),
    )  # fmt: skip


def _kernel_frame_empty() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": pd.Series([], dtype=object),
            "category": pd.Series([], dtype=object),
            "start_ns": np.array([], np.int64),
            "end_ns": np.array([], np.int64),
            "lane": pd.Series([], dtype=object),
            "device": np.array([], bool),
            "op_type": pd.Series([], dtype=object),
            "step": np.array([], np.int64),
        }
    )

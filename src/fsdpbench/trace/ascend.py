"""Reader for torch_npu (Ascend PyTorch Profiler) output: one ``*_ascend_pt`` folder per rank.

Sources inside ``ASCEND_PROFILER_OUTPUT/``:

* ``kernel_details.csv``: the device tasks. Rows whose ``Accelerator Core`` is ``HCCL``
  are communication (op level, one row per collective), every other row is compute, as CANN's own
  "Overlap Analysis" counts them. Columns are looked up by name (they differ between versions),
  cells are stripped of the stray tabs/spaces torch_npu writes, and start times are parsed from
  their decimal text (µs since the epoch do not fit a double to the ns). Level0 exports write
  ``N/A`` as the op type of compute kernels: the type is then derived from the name
  (``aclnnMm_MatMulCommon_MatMulV2`` → ``MatMulV2``).
* ``trace_view.json``: host ``ProfilerStep#N`` windows, CANN API events (``Hccl@Launch_Ffts``,
  ``AscendCL@aclrtSynchronize*``, ``Node@launch``…) and Ascend Hardware ``BARRIER`` tasks for the
  sync and launch counts, HCCL message sizes; and, when kernel_details.csv is missing, the device
  tasks themselves: Ascend Hardware tasks of compute types (AI_CORE, AI_VECTOR_CORE, MIX_AIC/AIV,
  AI_CPU, DSA_SQE; HCCL's ``*AivKernel``/``*AicpuKernel`` excluded) on their streams, and the HCCL
  op-level lanes (``Group N Communication``) as communication: CANN's Overlap Analysis rule.
* ``step_trace_time.csv`` (optional): the profiler's own Computing / Communication /
  Communication(Not Overlapped) / Free per step, kept as a cross-check.

The rank comes from ``profiler_info_{rank}.json`` (its ``rank_id``, else the number in the name).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.rank import RankTrace
from fsdpbench.trace.table import (
    assign_steps,
    build_table,
    collective_of,
    object_full,
    task_of,
    us_strings_to_ns,
    us_to_ns,
)

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_HCOM_TYPE = re.compile(r"^(hcom_[A-Za-z]+_)")
_TRAILING_NUM = re.compile(r"(_\d+)+$")


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise InputError(f"{path}: the file is empty; re-export the profile")
    try:
        df = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable CSV ({' '.join(str(exc).split())})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _column(df: pd.DataFrame, path: Path, *names: str) -> pd.Series | None:
    for n in names:
        if n in df.columns:
            return df[n].astype(str).str.strip().str.strip('"').str.strip()
    return None


def _required(df: pd.DataFrame, path: Path, *names: str) -> pd.Series:
    col = _column(df, path, *names)
    if col is None:
        raise InputError(
            f"{path}: missing column {names[0]!r} (columns found: {', '.join(df.columns[:12])}…); "
            "is this a torch_npu kernel_details.csv?"
        )
    return col


def _times(col: pd.Series, path: Path, what: str) -> np.ndarray:
    try:
        return us_strings_to_ns(col)
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{path}: column {what!r}: {exc}") from None


def op_type_from_name(name: str) -> str:
    """Op type of a kernel when the export has none: the last ``_`` part after dropping index suffixes."""
    m = _HCOM_TYPE.match(name)
    if m:
        return m.group(1)
    base = _TRAILING_NUM.sub("", name)
    return base.rsplit("_", 1)[-1] or name


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


def _kernel_events(path: Path) -> pd.DataFrame:
    df = _read_csv(path)
    name = _required(df, path, "Name", "Op Name")
    core = _required(df, path, "Accelerator Core", "Task Type")
    start = _times(_required(df, path, "Start Time(us)", "Task Start Time(us)"), path, "Start Time(us)")
    dur = _times(_required(df, path, "Duration(us)", "Task Duration(us)"), path, "Duration(us)")
    typ = _column(df, path, "Type", "OP Type")
    if typ is None:
        typ = pd.Series("N/A", index=df.index)
    step = _column(df, path, "Step Id", "Step ID")
    stream = _column(df, path, "Stream ID")
    is_comm = (core == "HCCL") | name.str.match(r"^(hcom_|hccl_)")
    missing = typ.isin(["N/A", "", "nan"])
    if missing.any():
        derived = pd.Series([op_type_from_name(n) for n in name[missing]], index=name[missing].index)
        typ = typ.where(~missing, derived)
    steps = pd.to_numeric(step, errors="coerce").fillna(-1).astype(np.int64) if step is not None else -1
    lane = np.where(
        is_comm, "HCCL", "Stream " + (stream if stream is not None else pd.Series("?", index=df.index)).astype(str)
    )
    return pd.DataFrame({
        "name": name, "category": np.where(is_comm, "comm", "compute"), "start_ns": start, "end_ns": start + dur,
        "lane": lane, "device": True, "op_type": typ, "step": steps,
    })  # fmt: skip


_HCCL_DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfp16": 2, "int8": 1,
                     "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "fp64": 8, "uint64": 8, "uint32": 4}


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
    return pd.DataFrame({
        "name": names, "category": category, "start_ns": start, "end_ns": start + dur, "lane": lanes,
        "device": device, "op_type": names, "step": -1,
    })  # fmt: skip


def _trace_view_events(
    path: Path, warnings: list[str], hccl_bytes: dict[str, float]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """From trace_view.json: host CANN/Python events and BARRIER tasks, the ``ProfilerStep#N``
    windows, and the device tasks (Ascend Hardware compute tasks, HCCL op-level communication);
    fills ``hccl_bytes`` (op name → bytes) from the HCCL op lanes."""
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
        a = e.get("args") if type(e.get("args")) is dict else {}
        if proc in ("HCCL", "Communication") and "Communication" in thread:
            hccl_bytes[str(e.get("name", ""))] = _hccl_bytes(a)
            comm.append((e, f"HCCL {thread}"))
        elif proc == "Ascend Hardware" and a.get("Task Type") in _COMPUTE_TASK_TYPES and not str(
            e.get("name", "")
        ).endswith(("AicpuKernel", "AivKernel")):
            comp.append((e, thread))
        if proc in ("Python", "CANN") or (proc == "Ascend Hardware" and e.get("name") == "BARRIER"):
            keep.append((e, f"{proc} {thread}"))
    parts = [
        _frame([e for e, _ in keep], "other", [lane for _, lane in keep], False, path),
        _frame([e for e, _ in comp], "compute", [lane for _, lane in comp], True, path),
        _frame([e for e, _ in comm], "comm", [lane for _, lane in comm], True, path),
    ]
    host, device = parts[0], pd.concat(parts[1:], ignore_index=True)
    device["op_type"] = [op_type_from_name(n) for n in device["name"]]
    is_step = host["name"].str.match(_STEP_RE.pattern).to_numpy(dtype=bool)
    steps = pd.DataFrame({
        "step": host["name"][is_step].str.extract(_STEP_RE.pattern)[0].astype(np.int64).to_numpy(),
        "start_ns": host["start_ns"].to_numpy()[is_step], "end_ns": host["end_ns"].to_numpy()[is_step],
    }).sort_values("start_ns", ignore_index=True)  # fmt: skip
    return host, steps, device


def _cross_check(path: Path, warnings: list[str]) -> pd.DataFrame | None:
    try:
        df = _read_csv(path)
    except InputError as exc:
        warnings.append(str(exc))
        return None
    need = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]
    if any(c not in df.columns for c in need):
        warnings.append(f"{path}: missing columns {[c for c in need if c not in df.columns]}; cross-check skipped")
        return None
    out = pd.DataFrame({
        "step": pd.to_numeric(df.get("Step", pd.Series("", index=df.index)), errors="coerce").fillna(-1).astype(np.int64),
        "compute_us": pd.to_numeric(df["Computing"], errors="coerce"),
        "comm_us": pd.to_numeric(df["Communication"], errors="coerce"),
        "exposed_comm_us": pd.to_numeric(df["Communication(Not Overlapped)"], errors="coerce"),
        "free_us": pd.to_numeric(df["Free"], errors="coerce"),
    })  # fmt: skip
    if "Device_id" in df.columns:
        out.insert(0, "device_id", df["Device_id"].str.strip())
    return out


def read_ascend(folder: str | Path) -> RankTrace:
    """Read one ``*_ascend_pt`` folder into a :class:`RankTrace`.

    Raises:
        InputError: neither ``kernel_details.csv`` nor ``trace_view.json``, a CSV missing a needed
            column, unparsable times, or a corrupt trace_view.json.
    """
    folder = Path(folder)
    out = folder / OUTPUT_DIR
    kd, tv = out / "kernel_details.csv", out / "trace_view.json"
    if not kd.is_file() and not tv.is_file():
        raise InputError(
            f"{folder}: neither {OUTPUT_DIR}/kernel_details.csv nor trace_view.json; export the profile with "
            "torch_npu's tensorboard_trace_handler (export_type text) and analyse the *_ascend_pt folder"
        )
    warnings: list[str] = []
    hccl_bytes: dict[str, float] = {}
    empty_steps = pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}, dtype=np.int64)
    host, steps, tv_device = (None, empty_steps, None)
    if tv.is_file():
        host, steps, tv_device = _trace_view_events(tv, warnings, hccl_bytes)
    else:
        warnings.append(f"{folder.name}: no {OUTPUT_DIR}/trace_view.json; sync and launch counts are unavailable")
    if kd.is_file():
        kernels = _kernel_events(kd)
    else:
        warnings.append(
            f"{folder.name}: no {OUTPUT_DIR}/kernel_details.csv; device tasks taken from trace_view.json "
            "(op types derived from kernel names)"
        )
        kernels = tv_device
    if len(steps) and (kernels["step"] < 0).all():
        # no Step Id column (or no device rows with one): device work launched in step N runs after
        # that step's host start
        k = np.searchsorted(steps["start_ns"].to_numpy(), kernels["start_ns"].to_numpy(), side="right") - 1
        kernels["step"] = np.where(k >= 0, steps["step"].to_numpy()[np.maximum(k, 0)], -1)
    if host is None:
        host = kernels.iloc[:0]
    if len(host):
        host["step"] = assign_steps(
            host["start_ns"].to_numpy(), steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy()
        )
    df = pd.concat([kernels, host], ignore_index=True) if len(host) else kernels
    names = pd.Categorical(df["name"])
    task = task_of(names)
    category = df["category"].to_numpy(dtype=object).copy()
    sync = (category == "other") & np.isin(task, ["barrier", "device_synchronize", "stream_synchronize", "event_synchronize"])
    category[sync] = "sync"
    comm = category == "comm"
    collective = object_full(len(df), "")
    collective[comm] = collective_of(names)[comm]
    nbytes = np.full(len(df), np.nan)
    if hccl_bytes:
        nbytes[comm] = df["name"][comm].map(hccl_bytes).to_numpy(dtype=np.float64)
    table = build_table(
        name=names, category=category, start_ns=df["start_ns"].to_numpy(np.int64),
        end_ns=df["end_ns"].to_numpy(np.int64), lane=df["lane"].astype(str).to_numpy(),
        device=df["device"].to_numpy(bool), collective=collective, nbytes=nbytes, op_type=df["op_type"].astype(str).to_numpy(),
        task=task, step=df["step"].to_numpy(np.int64),
    )  # fmt: skip
    stt = out / "step_trace_time.csv"
    cross = _cross_check(stt, warnings) if stt.is_file() else None
    return RankTrace(
        rank=rank_of_folder(folder), source=str(folder), format="ascend", events=table, steps=steps,
        mode="device", warnings=warnings, cross_check=cross,
    )  # fmt: skip

"""Reader for torch_npu's database export (``export_type=db``):
``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db``, one sqlite file per rank.

It builds the same event table as the text reader (:mod:`fsdpbench.trace.ascend`) from the raw
task tables, and never from the profiler's own summaries:

* ``TASK`` ⋈ ``COMPUTE_TASK_INFO`` (on ``globalTaskId``): compute kernels, with their name and op
  type (Level0 writes ``N/A`` types: then derived from the name as for the text export). HCCL's own
  ``*AivKernel`` / ``*AicpuKernel`` are not compute (CANN's Overlap Analysis rule).
* ``COMMUNICATION_OP``: one communication event per collective (op level, ``startNs``–``endNs``),
  with its size (``count`` × ``ENUM_HCCL_DATA_TYPE``), group, and the stream its tasks ran on
  (``COMMUNICATION_TASK_INFO.opId`` → ``TASK.streamId``).
* every other ``TASK`` row (``MEMCPY_ASYNC``, ``EVENT_RECORD``, ``BARRIER`` …, but not HCCL's own
  tasks in ``COMMUNICATION_TASK_INFO`` nor ``PROFILING_ENABLE/DISABLE``), named by its task type:
  counted (``BARRIER``) but not timed, like the text export, which leaves them out of
  kernel_details.csv, and CANN, which leaves them out of its step span.
* ``CANN_API`` (host; named ``<Level>@<api>`` as in trace_view.json: ``Hccl@Launch_Ffts``,
  ``Runtime@StreamSynchronize``, ``Node@launch`` …) and ``PYTORCH_API`` (host operators).
* ``STEP_TIME`` (else ``PYTORCH_API`` ``ProfilerStep#N``): the host step windows. A device task
  belongs to the step whose window holds the host call that launched it (``TASK.connectionId`` =
  ``CANN_API.connectionId``); a task with no launching call in the export gets the last step that
  started before it.

Timestamps are integer ns in the database: no conversion. The profiler's ``analysis.db``
``StepTraceTime``, when present, is kept as the cross-check (as ``step_trace_time.csv`` is for
the text export).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.ascend_launch import through_queue

# The profiler's per-step summary columns, ours -> theirs: analysis.db StepTraceTime and step_trace_time.csv.
STEP_TRACE_TIME_DB = {
    "step": "step",
    "compute_us": "computing",
    "comm_us": "communication",
    "exposed_comm_us": "communication_not_overlapped",
    "free_us": "free",
}
STEP_TRACE_TIME_CSV = {
    "step": "Step",
    "compute_us": "Computing",
    "comm_us": "Communication",
    "exposed_comm_us": "Communication(Not Overlapped)",
    "free_us": "Free",
}


def summary_frame(
    df: pd.DataFrame, source: Path, warnings: list[str], names: dict[str, str]
) -> pd.DataFrame | None:
    """The profiler's own per-step summary as ``step, compute_us, comm_us, exposed_comm_us, free_us``
    from ``df`` whose columns are named by ``names`` (a missing step column gives step -1); None, with a
    warning, when a time column is missing."""
    missing = [theirs for ours, theirs in names.items() if ours != "step" and theirs not in df.columns]
    if missing:
        warnings.append(f"{source}: missing columns {missing}; cross-check skipped")
        return None
    step = df.get(names["step"], pd.Series("", index=df.index))
    out = {"step": pd.to_numeric(step, errors="coerce").fillna(-1).astype(np.int64)}
    out.update(
        {ours: pd.to_numeric(df[theirs], errors="coerce") for ours, theirs in names.items() if ours != "step"}
    )
    return pd.DataFrame(out)


DB_REFERENCE = "analysis.db StepTraceTime"
CSV_REFERENCE = "step_trace_time.csv"
"""How the cross-check warnings name the profiler's own summary (the ``reference`` column)."""

DB_GLOB = "ascend_pytorch_profiler*.db"
_DB_RANK = re.compile(r"^ascend_pytorch_profiler_(\d+)\.db$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# ENUM_API_TYPE names → the "<Level>@" prefix trace_view.json writes for the same CANN events
_API_LEVEL = {
    "acl": "AscendCL",
    "runtime": "Runtime",
    "node": "Node",
    "model": "Model",
    "hccl": "Hccl",
    "communication": "Communication",
}
_NOT_WORK = ("PROFILING_ENABLE", "PROFILING_DISABLE")


def find_db(output_dir: Path) -> Path | None:
    """The rank's ``ascend_pytorch_profiler[_<rank>].db`` in ``ASCEND_PROFILER_OUTPUT``, or None."""
    found = sorted(output_dir.glob(DB_GLOB)) if output_dir.is_dir() else []
    if len(found) > 1:
        raise InputError(
            f"{output_dir}: {len(found)} profiler databases ({', '.join(p.name for p in found)}); "
            "one *_ascend_pt folder holds one rank: keep one database per folder"
        )
    return found[0] if found else None


def db_rank(db: Path) -> int | None:
    """Rank from the database's file name (``ascend_pytorch_profiler_<rank>.db``) or None."""
    m = _DB_RANK.match(db.name)
    return int(m.group(1)) if m else None


def _connect(db: Path) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise InputError(f"{db}: not a readable sqlite database ({exc}); re-export the profile") from None
    return con


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _query(con: sqlite3.Connection, db: Path, sql: str) -> pd.DataFrame:
    try:
        return pd.read_sql_query(sql, con)
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        raise InputError(
            f"{db}: cannot read ({' '.join(str(exc).split())}); is this a torch_npu db export?"
        ) from None


def _ns(col: pd.Series, db: Path, what: str) -> np.ndarray:
    """Integer ns from an INTEGER or TEXT column (PYTORCH_API stores its times as text)."""
    try:
        return pd.to_numeric(col, errors="raise").astype(np.int64).to_numpy()
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"{db}: {what}: not integer nanoseconds ({exc})") from None


@dataclass(frozen=True, kw_only=True)
class AscendDbTables:
    """The raw tables of one rank's database export that the reader needs (:func:`read_tables`), names
    resolved through ``STRING_IDS``, times in integer ns. The frames hold ``name, start_ns, end_ns,
    lane`` plus the columns named below."""

    compute: pd.DataFrame
    """``TASK`` ⋈ ``COMPUTE_TASK_INFO``: plus ``op_type, core, connection``."""
    comm: pd.DataFrame
    """``COMMUNICATION_OP``, one row per collective: plus ``connection, data_type, count, hccl_stream``."""
    other_tasks: pd.DataFrame
    """Every other ``TASK`` row (``BARRIER``, ``MEMCPY_ASYNC`` …), named by its task type: plus
    ``connection``."""
    host: pd.DataFrame
    """``CANN_API`` (``<Level>@<api>``) and ``PYTORCH_API`` host events."""
    steps: pd.DataFrame
    """``step, start_ns, end_ns``: the host step windows, by start."""
    launch_ns: pd.Series
    """Connection id → start of the launching ``CANN_API`` call."""
    op_launch: dict[int, tuple[str, int]]
    """Connection id of a device task or HCCL op → (lane, start) of the ``PYTORCH_API`` operator that
    launched it, moved from the dequeue thread to its enqueue (:mod:`fsdpbench.trace.ascend_launch`)."""
    rank: int | None
    """The rank ``RANK_DEVICE_MAP`` names (None when absent)."""
    hccl_streams: set[str]
    """The ``Stream <id>`` lanes HCCL's own tasks run on."""
    cann_api_rows: int
    """How many host runtime events ``CANN_API`` holds (0 without the table)."""
    task_rows: int
    """Rows of ``TASK``."""
    comm_tasks: pd.DataFrame
    """``start_ns, end_ns`` of HCCL's own tasks (the ``TASK`` rows of ``COMMUNICATION_TASK_INFO``)."""


@dataclass(frozen=True)
class _Db:
    """An open profiler db: its connection, path (for messages) and table names; ``STRING_IDS`` read
    on first use."""

    con: sqlite3.Connection
    path: Path
    have: set[str]

    def query(self, sql: str) -> pd.DataFrame:
        return _query(self.con, self.path, sql)

    @cached_property
    def strings(self) -> pd.Series:
        """``STRING_IDS``: id → string."""
        return self.query("SELECT id, value FROM STRING_IDS").set_index("id")["value"]

    def names(self, col: pd.Series) -> pd.Series:
        """String ids → their strings ("" where unknown)."""
        return col.map(self.strings).fillna("").astype(str)

    def enum(self, table: str, dtype: Any = object) -> pd.Series:
        """id → name of an ``ENUM_*`` table; empty where the db has none."""
        if table not in self.have:
            return pd.Series(dtype=dtype)
        return self.query(f"SELECT id, name FROM {table}").set_index("id")["name"]


@contextmanager
def open_db(db: Path) -> Iterator[_Db]:
    """The profiler db at ``db``, read-only, closed on leaving (``InputError`` when it is not sqlite)."""
    con = _connect(db)
    try:
        yield _Db(con, db, _tables(con))
    finally:
        con.close()


def read_tables(db: Path) -> AscendDbTables:
    """The raw tables the reader needs (:class:`AscendDbTables`), names resolved through ``STRING_IDS``.

    Raises:
        InputError: not a sqlite file, or no ``TASK`` / ``STRING_IDS`` table.
    """
    with open_db(db) as d:
        have = d.have
        missing = [t for t in ("TASK", "STRING_IDS") if t not in have]
        if missing:
            raise InputError(
                f"{db}: no table {' or '.join(missing)}; is this a torch_npu export_type=db profile "
                "(ascend_pytorch_profiler_<rank>.db)?"
            )
        task = d.query("SELECT startNs, endNs, connectionId, globalTaskId, taskType, streamId FROM TASK")
        task["task_type"] = d.names(task["taskType"])
        comm_tasks = (
            set(d.query("SELECT DISTINCT globalTaskId FROM COMMUNICATION_TASK_INFO")["globalTaskId"])
            if "COMMUNICATION_TASK_INFO" in have
            else set()
        )
        on_hccl = task["globalTaskId"].isin(comm_tasks)
        compute, other_tasks = _device_tasks(d, task, comm_tasks)
        comm = _comm_ops(d)
        host, launch_ns, cann_api_rows = _host_events(d)
        op_launch = _op_launch(d)
        steps = _steps(d, host)
        rank = None
        if "RANK_DEVICE_MAP" in have:
            rows = d.query("SELECT rankId FROM RANK_DEVICE_MAP")["rankId"]
            if len(rows) == 1 and pd.notna(rows.iloc[0]) and int(rows.iloc[0]) >= 0:
                rank = int(rows.iloc[0])
    steps = steps[steps["step"] >= 0].sort_values("start_ns", ignore_index=True)
    return AscendDbTables(
        compute=compute,
        comm=comm,
        other_tasks=other_tasks,
        host=host,
        steps=steps,
        launch_ns=launch_ns,
        op_launch=op_launch,
        rank=rank,
        hccl_streams={f"Stream {s_}" for s_ in task.loc[on_hccl, "streamId"].unique()},
        cann_api_rows=cann_api_rows,
        comm_tasks=pd.DataFrame(
            {
                "start_ns": _ns(task.loc[on_hccl, "startNs"], db, "TASK.startNs"),
                "end_ns": _ns(task.loc[on_hccl, "endNs"], db, "TASK.endNs"),
            }
        ),
        task_rows=len(task),
    )


def _device_tasks(d: _Db, task: pd.DataFrame, comm_tasks: set[Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(compute kernels: TASK joined with COMPUTE_TASK_INFO, the other device tasks that are work)."""
    if "COMPUTE_TASK_INFO" in d.have:
        cti = d.query("SELECT globalTaskId, name, opType, taskType AS coreType FROM COMPUTE_TASK_INFO")
    else:
        cti = pd.DataFrame(columns=["globalTaskId", "name", "opType", "coreType"])
    joined = task.merge(cti, on="globalTaskId", how="inner")
    compute = pd.DataFrame(
        {
            "name": d.names(joined["name"]),
            "op_type": d.names(joined["opType"]),
            "core": d.names(joined["coreType"]),
            "start_ns": _ns(joined["startNs"], d.path, "TASK.startNs"),
            "end_ns": _ns(joined["endNs"], d.path, "TASK.endNs"),
            "lane": "Stream " + joined["streamId"].astype(str),
            "connection": joined["connectionId"].to_numpy(),
        }
    )
    rest = ~task["globalTaskId"].isin(set(cti["globalTaskId"]) | comm_tasks) & ~task["task_type"].isin(
        _NOT_WORK
    )
    other = task[rest]
    other_tasks = pd.DataFrame(
        {
            "name": other["task_type"],
            "start_ns": _ns(other["startNs"], d.path, "TASK.startNs"),
            "end_ns": _ns(other["endNs"], d.path, "TASK.endNs"),
            "lane": "Stream " + other["streamId"].astype(str),
            "connection": other["connectionId"].to_numpy(),
        }
    )
    return compute, other_tasks


_COMM_COLUMNS = ["name", "start_ns", "end_ns", "lane", "connection", "data_type", "count", "hccl_stream"]


def _comm_ops(d: _Db) -> pd.DataFrame:
    """One row per HCCL operation (COMMUNICATION_OP), with its dtype, count and first task's stream."""
    if "COMMUNICATION_OP" not in d.have:
        return pd.DataFrame(columns=_COMM_COLUMNS)
    op = d.query(
        "SELECT opName, startNs, endNs, connectionId, groupName, dataType, count, opId FROM COMMUNICATION_OP"
    )
    dtypes = d.enum("ENUM_HCCL_DATA_TYPE")
    op_stream = (
        d.query(
            "SELECT i.opId, min(t.streamId) AS streamId FROM COMMUNICATION_TASK_INFO i "
            "JOIN TASK t USING (globalTaskId) GROUP BY i.opId"
        ).set_index("opId")["streamId"]
        if "COMMUNICATION_TASK_INFO" in d.have
        else pd.Series(dtype=np.int64)
    )
    stream = op["opId"].map(op_stream) if "opId" in op.columns else pd.Series(np.nan, index=op.index)
    return pd.DataFrame(
        {
            "name": d.names(op["opName"]),
            "start_ns": _ns(op["startNs"], d.path, "COMMUNICATION_OP.startNs"),
            "end_ns": _ns(op["endNs"], d.path, "COMMUNICATION_OP.endNs"),
            "lane": "HCCL " + d.names(op["groupName"]),
            "connection": op["connectionId"].to_numpy(),
            "data_type": op["dataType"].map(dtypes).fillna("").astype(str),
            "count": pd.to_numeric(op["count"], errors="coerce"),
            "hccl_stream": np.where(stream.notna(), "Stream " + stream.astype("Int64").astype(str), ""),
        }
    )


def _op_launch(d: _Db) -> dict[int, tuple[str, int]]:
    """Connection id → (``Python <globalTid>``, start ns) of the ``PYTORCH_API`` operator whose
    ``CONNECTION_IDS`` list holds it (the innermost, latest-starting one where several do); a point
    inside a ``Dequeue@…`` row is moved to the ``Enqueue`` row sharing its connection id. Empty
    without ``PYTORCH_API`` or ``CONNECTION_IDS``."""
    if not {"PYTORCH_API", "CONNECTION_IDS"} <= d.have:
        return {}
    rows = d.query(
        "SELECT p.startNs, p.endNs, p.globalTid, c.connectionId, p.name, p.type FROM PYTORCH_API p "
        "JOIN CONNECTION_IDS c ON c.id = p.connectionId"
    )
    if not len(rows):
        return {}
    rows = rows.assign(
        lane="Python " + rows["globalTid"].astype(str),
        start_ns=_ns(rows["startNs"], d.path, "PYTORCH_API.startNs"),
        end_ns=_ns(rows["endNs"], d.path, "PYTORCH_API.endNs"),
        api_name=d.names(rows["name"]),
    )
    queue_types = {k for k, v in d.enum("ENUM_API_TYPE").items() if str(v) == "queue"}
    is_queue = rows["type"].isin(queue_types) | (rows["api_name"] == "Enqueue")
    is_queue |= rows["api_name"].str.startswith("Dequeue@")
    ops = rows[~is_queue].sort_values("start_ns", kind="stable").drop_duplicates("connectionId", keep="last")
    enq = rows[is_queue & (rows["api_name"] == "Enqueue")].drop_duplicates("connectionId")
    deq = rows[is_queue & rows["api_name"].str.startswith("Dequeue@")]
    lane, start = through_queue(
        ops["lane"].to_numpy(object),
        ops["start_ns"].to_numpy(np.int64),
        pd.DataFrame(
            {
                "lane": deq["lane"].to_numpy(object),
                "start_ns": deq["start_ns"].to_numpy(np.int64),
                "end_ns": deq["end_ns"].to_numpy(np.int64),
                "key": deq["connectionId"].to_numpy(),
            }
        ),
        {
            int(k): (str(ln), int(st))
            for k, ln, st in zip(enq["connectionId"], enq["lane"], enq["start_ns"], strict=True)
        },
    )
    return {
        int(c): (str(ln), int(st))
        for c, ln, st in zip(ops["connectionId"].tolist(), lane, start, strict=True)
    }


def _host_events(d: _Db) -> tuple[pd.DataFrame, pd.Series, int]:
    """(host events: CANN_API as ``Level@name`` plus PYTORCH_API, each CANN call's start by its
    connection id, the number of CANN_API rows)."""
    host_parts = []
    cann_api_rows = 0
    launch_ns = pd.Series(dtype=np.int64)
    if "CANN_API" in d.have:
        api = d.query("SELECT startNs, endNs, type, globalTid, connectionId, name FROM CANN_API")
        levels = pd.Series(
            {k: _API_LEVEL.get(str(v), str(v).capitalize()) for k, v in d.enum("ENUM_API_TYPE").items()},
            dtype=object,
        )
        level = api["type"].map(levels).fillna("").astype(str)
        start = _ns(api["startNs"], d.path, "CANN_API.startNs")
        host_parts.append(
            pd.DataFrame(
                {
                    "name": level + "@" + d.names(api["name"]),
                    "start_ns": start,
                    "end_ns": _ns(api["endNs"], d.path, "CANN_API.endNs"),
                    "lane": "CANN " + api["globalTid"].astype(str),
                }
            )
        )
        cann_api_rows = len(api)
        launch_ns = pd.Series(start, index=api["connectionId"].to_numpy())
        launch_ns = launch_ns[~launch_ns.index.duplicated()]
    if "PYTORCH_API" in d.have:
        py = d.query("SELECT startNs, endNs, globalTid, name FROM PYTORCH_API")
        host_parts.append(
            pd.DataFrame(
                {
                    "name": d.names(py["name"]),
                    "start_ns": _ns(py["startNs"], d.path, "PYTORCH_API.startNs"),
                    "end_ns": _ns(py["endNs"], d.path, "PYTORCH_API.endNs"),
                    "lane": "Python " + py["globalTid"].astype(str),
                }
            )
        )
    host = (
        pd.concat(host_parts, ignore_index=True)
        if host_parts
        else pd.DataFrame(columns=["name", "start_ns", "end_ns", "lane"])
    )
    return host, launch_ns, cann_api_rows


def _steps(d: _Db, host: pd.DataFrame) -> pd.DataFrame:
    """The profiler's steps: STEP_TIME where the db has it, else the host's ``ProfilerStep#N`` ranges."""
    if "STEP_TIME" in d.have:
        st = d.query("SELECT id, startNs, endNs FROM STEP_TIME")
        return pd.DataFrame(
            {
                "step": pd.to_numeric(st["id"], errors="coerce").fillna(-1).astype(np.int64).to_numpy(),
                "start_ns": _ns(st["startNs"], d.path, "STEP_TIME.startNs"),
                "end_ns": _ns(st["endNs"], d.path, "STEP_TIME.endNs"),
            }
        )
    is_step = host["name"].astype(str).str.match(_STEP_RE.pattern)
    return pd.DataFrame(
        {
            "step": host["name"][is_step].str.extract(_STEP_RE.pattern)[0].astype(np.int64).to_numpy(),
            "start_ns": host["start_ns"][is_step].to_numpy(np.int64),
            "end_ns": host["end_ns"][is_step].to_numpy(np.int64),
        }
    )


def step_trace_time(analysis_db: Path, warnings: list[str]) -> pd.DataFrame | None:
    """The profiler's own per-step numbers from ``analysis.db`` ``StepTraceTime`` (µs), in the
    cross-check layout of :class:`~fsdpbench.trace.rank.RankTrace`; None (and a warning) when unreadable."""
    try:
        con = _connect(analysis_db)
    except InputError as exc:
        warnings.append(f"{exc}; cross-check skipped")
        return None
    try:
        if "StepTraceTime" not in _tables(con):
            return None
        df = pd.read_sql_query("SELECT * FROM StepTraceTime", con)
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        warnings.append(f"{analysis_db}: StepTraceTime unreadable ({exc}); cross-check skipped")
        return None
    finally:
        con.close()
    out = summary_frame(df, analysis_db, warnings, STEP_TRACE_TIME_DB)
    return None if out is None else out.assign(reference=DB_REFERENCE)

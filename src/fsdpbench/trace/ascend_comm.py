"""The Ascend profiler's own per-HCCL-op time split (msprof's communication analysis), per rank.

Text export: ``<rank>_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json``,
``{step: {"collective"|"p2p": {"<op>@<group>": {"Communication Time Info": {"Start Timestamp(us)",
"Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)", …}}}}}``
(the ``Total Op Info`` entry is the profiler's sum, not an op). Db export: ``analysis.db`` table
``CommAnalyzerTime`` (``hccl_op_name, group_name, start_timestamp`` µs, ``elapse_time, transit_time,
wait_time, synchronization_time, idle_time`` ms, ``step, type``). The profiler: elapse = transit + wait +
idle; synchronization (the wait before the first transfer, for the peers to be ready) is part of wait.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from fsdpbench.errors import InputError

OUTPUT = "ASCEND_PROFILER_OUTPUT"
TOTAL = "Total Op Info"
_TEXT_FIELDS = {
    "elapse_us": "Elapse Time(ms)",
    "transit_us": "Transit Time(ms)",
    "wait_us": "Wait Time(ms)",
    "synchronization_us": "Synchronization Time(ms)",
    "idle_us": "Idle Time(ms)",
}
_DB_FIELDS = {
    "elapse_us": "elapse_time",
    "transit_us": "transit_time",
    "wait_us": "wait_time",
    "synchronization_us": "synchronization_time",
    "idle_us": "idle_time",
}
SPLIT_FIELDS = tuple(_TEXT_FIELDS)


def _ms_to_us(v: Any) -> float | None:
    return None if v is None else float(v) * 1000.0


def read_text(path: Path) -> list[dict[str, Any]]:
    """The ops of one communication.json, by start."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read the profiler's communication analysis ({exc})") from None
    ops = []
    for step, kinds in (doc or {}).items():
        for kind, entries in (kinds or {}).items():
            for name, entry in (entries or {}).items():
                info = (entry or {}).get("Communication Time Info")
                if name == TOTAL or not info:
                    continue
                op, _, group = name.partition("@")
                ops.append(
                    {
                        "op": op,
                        "group": group or None,
                        "step": step,
                        "type": kind,
                        "start_us": info.get("Start Timestamp(us)"),
                        **{k: _ms_to_us(info.get(v)) for k, v in _TEXT_FIELDS.items()},
                    }
                )
    return sorted(ops, key=lambda o: (o["start_us"] is None, o["start_us"] or 0.0))


def read_db(path: Path) -> list[dict[str, Any]]:
    """The ops of one analysis.db's CommAnalyzerTime table, by start."""
    cols = ", ".join(["hccl_op_name", "group_name", "step", "type", "start_timestamp", *_DB_FIELDS.values()])
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = con.execute(f"SELECT {cols} FROM CommAnalyzerTime").fetchall()  # noqa: S608 - fixed names
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise InputError(f"{path}: cannot read CommAnalyzerTime ({exc})") from None
    ops = [
        {
            "op": r[0],
            "group": r[1],
            "step": r[2],
            "type": r[3],
            "start_us": None if r[4] is None else float(r[4]),
            **{k: _ms_to_us(v) for k, v in zip(_DB_FIELDS, r[5:], strict=True)},
        }
        for r in rows
    ]
    return sorted(ops, key=lambda o: (o["start_us"] is None, o["start_us"] or 0.0))


def read_rank(rank_dir: str | Path) -> tuple[Path | None, list[dict[str, Any]]]:
    """(the file read, its ops) for one ``*_ascend_pt`` folder: communication.json, else analysis.db;
    (None, []) when the export has neither."""
    out = Path(rank_dir) / OUTPUT
    text, db = out / "communication.json", out / "analysis.db"
    if text.is_file():
        return text, read_text(text)
    if db.is_file():
        return db, read_db(db)
    return None, []


_OP_INDEX = re.compile(r"^hcom_[A-Za-z]+__(\d+)_(\d+)")


def group_sizes(path: Path) -> dict[str, int]:
    """``{group: ranks}`` from one ``communication_matrix.json``: the distinct ranks at either end of
    the links (``"0-7"``: rank 0 to rank 7) of every op listed under the group (``<op>@<group>``); {}
    when the file cannot be read (the caller says what is missing)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    ends: dict[str, set[str]] = {}
    for kinds in (doc or {}).values():
        for entries in (kinds or {}).values():
            for name, links in (entries or {}).items():
                op, _, group = name.partition("@")
                if not group or not isinstance(links, dict):
                    continue
                mine = ends.setdefault(group, set())
                for link in links:
                    mine.update(x.strip() for x in str(link).split("-") if x.strip())
    return {g: len(r) for g, r in ends.items() if r}


def _db_group_sizes(path: Path) -> dict[str, int]:
    """``{group: ranks}`` from an ``analysis.db``'s ``CommAnalyzerMatrix`` (the distinct ``src_rank`` and
    ``dst_rank`` of the group's links); {} when the table cannot be read."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT group_name, src_rank, dst_rank FROM CommAnalyzerMatrix").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    ends: dict[str, set[str]] = {}
    for group, src, dst in rows:
        if group:
            ends.setdefault(str(group), set()).update(str(x).strip() for x in (src, dst) if x is not None)
    return {g: len(r) for g, r in ends.items() if r}


def op_identity(rank_dir: Path) -> tuple[dict[str, tuple[str, int]], dict[str, int]]:
    """The identity of each HCCL op of a ``*_ascend_pt`` folder's export: ``{op name: (group, index in
    the group)}`` from the file :func:`read_rank` reads (``communication.json``, ``<op>@<group>``, else
    ``analysis.db``'s ``CommAnalyzerTime``), so that :func:`profiler_split` pairs the ops named here; the
    index is the op name's number after the group's last digits (``hcom_broadcast__483_1`` of group
    ``…483``: 1; -1 when the name does not have that form). And ``{group: ranks}`` from
    ``communication_matrix.json``, else ``CommAnalyzerMatrix``. Empty where the files are absent or
    unreadable."""
    out_dir = Path(rank_dir) / OUTPUT
    matrix, db = out_dir / "communication_matrix.json", out_dir / "analysis.db"
    try:
        listed = read_rank(rank_dir)[1]
    except InputError:
        listed = []
    ops: dict[str, tuple[str, int]] = {}
    for o in listed:
        if o["group"]:
            key = _op_key(o)
            ops[str(o["op"])] = key if key is not None else (str(o["group"]), -1)
    sizes = group_sizes(matrix) if matrix.is_file() else _db_group_sizes(db) if db.is_file() else {}
    return ops, sizes


def _op_key(op: dict[str, Any]) -> tuple[str, int] | None:
    """(group, index in the group) of one op of :func:`read_text`/:func:`read_db`, as
    :func:`op_identity` gives the trace's collectives; None when its name does not say."""
    m = _OP_INDEX.match(str(op["op"]))
    if not m or not op["group"] or not str(op["group"]).endswith(m.group(1)):
        return None
    return str(op["group"]), int(m.group(2))


def profiler_split(
    ranks: list[int],
    sources: list[str],
    rows: list[dict[int, tuple[float, float]]],
    keys: list[list[tuple[Any, int]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The profiler's split beside fsdpbench's, per rank and per op.

    Args:
        ranks, sources: rank ids and their ``*_ascend_pt`` folders; rows: per rank, fsdpbench's
            (wait µs, transfer µs) by row of ``collective_events``; keys: per rank each row's (group,
            seq) (None, -1 where the trace does not say).
    Returns:
        (per-rank totals, per-op rows, warnings). An op is paired with the fsdpbench collective of the same
        name (the same group and index in it, :func:`op_identity`), else, when the rank has as many of
        each and the names do not say, with the one in the same start-order position. A rank's totals
        are over its paired ops (``paired`` of the ``ops`` listed), or over all of them when none pairs.
    """
    totals, per_op, warnings = [], [], []
    for rank, src, split, key in zip(ranks, sources, rows, keys, strict=True):
        path, ops = read_rank(src)
        if path is None:
            continue
        row_of = {(g, int(q)): j for j, (g, q) in enumerate(key) if g is not None and int(q) >= 0}
        found = [row_of.get(k) if (k := _op_key(o)) is not None else None for o in ops]
        if not any(j is not None for j in found) and len(ops) == len(key):
            found = list(range(len(ops)))  # names silent on both sides: start order
        paired = [j for j in found if j is not None]
        if not paired:
            warnings.append(
                f"rank {rank}: {path.name} lists {len(ops)} HCCL ops, the trace {len(key)} collectives, and "
                "their names do not pair them; the profiler's split is shown per rank only, over all its ops"
            )
        elif len(paired) < len(key):
            warnings.append(
                f"rank {rank}: {len(key) - len(paired)} of the trace's {len(key)} collectives are not in "
                f"{path.name}; the profiler's split covers the {len(paired)} paired"
            )
        counted = [o for o, j in zip(ops, found, strict=True) if j is not None] if paired else ops
        tot: dict[str, Any] = {"rank": rank, "file": str(path), "ops": len(ops), "paired": len(paired)}
        for k in SPLIT_FIELDS:
            tot[k] = sum(o[k] or 0.0 for o in counted)
        totals.append(tot)
        for o, j in zip(ops, found, strict=True):
            ours = split.get(j) if j is not None else None
            per_op.append(
                {
                    "rank": rank,
                    **o,
                    "fsdpbench_wait_us": None if ours is None else ours[0],
                    "fsdpbench_transfer_us": None if ours is None else ours[1],
                }
            )
    return totals, per_op, warnings

"""Units × phases on Ascend exports (issue 30 point 2): each device task placed through the host
operator torch_npu links to it (trace_view.json ``async_npu`` flows; the db's ``CONNECTION_IDS`` →
``PYTORCH_API``), so FSDP2's ``record_function`` ranges on the Python threads give units.

No public Ascend export with FSDP ranges exists (the real ones are AlexNet DDP), so the tests copy the
real Level1 text and Level2 db exports of Ascend/msinsight (``../shared/fixtures/ascend``) and add FSDP2
hook ranges to them, as torch_npu writes them (``cpu_op`` events on the Python threads; ``PYTORCH_API``
rows named through ``STRING_IDS``), around the operators the file itself says launched the tasks. The
expected rows come from a plain-Python reading of the raw files (flows / connection ids, the windows,
the first-started-owns-the-instant share rule), not from fsdpbench.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fsdpbench.analysis.pipeline import analyze
from fsdpbench.trace.ascend_launch import through_queue
from helpers import ASCEND_FIXTURES, run_cli

TEXT1 = ASCEND_FIXTURES / "msinsight_pt_text_level1"
DB2 = ASCEND_FIXTURES / "msinsight_pt_db_level2"


def _ns(us: str) -> int:
    return int(Decimal(us.strip()) * 1000)


def _plan(
    tasks: list[tuple[str, int, int, object, int | None]],
) -> list[tuple[object, int, int, str, str, str]]:
    """FSDP2 ranges around the operators that launched ``tasks`` (category, start, end, host thread, host
    time), per thread: the thread whose first launch comes first runs the forward (and, after the
    backward, the optimizer), the other the backward (the autograd thread). Returns (thread, start, end,
    range name, unit, phase) of each range added."""
    points: dict[object, list[int]] = defaultdict(list)
    for _, _, _, tid, t in tasks:
        if tid is not None:
            points[tid].append(t)
    (fwd_t, fwd_pts), (bwd_t, bwd_pts) = sorted(points.items(), key=lambda kv: min(kv[1]))
    fwd_pts, bwd_pts = sorted(set(fwd_pts)), sorted(set(bwd_pts))  # one operator can launch several tasks
    fwd = [p for p in fwd_pts if p < bwd_pts[0]]
    opt = [p for p in fwd_pts if p > bwd_pts[-1]]
    half_f, half_b = fwd[len(fwd) // 2], bwd_pts[len(bwd_pts) // 2]
    # the first operator of each pass runs in the root's window only (before the first unit opens)
    first_f, first_b = (fwd[0] + fwd[1]) // 2, (bwd_pts[0] + bwd_pts[1]) // 2
    return [
        (fwd_t, fwd[0] - 3000, fwd[0] - 2000, "FSDP::root_pre_forward", "root", "forward"),
        (fwd_t, first_f, first_f + 1, "FSDP::pre_forward (features)", "features", "forward"),
        (fwd_t, half_f - 200, half_f - 100, "FSDP::post_forward (features)", "features", "forward"),
        (fwd_t, half_f - 50, half_f - 10, "FSDP::pre_forward (classifier)", "classifier", "forward"),
        (fwd_t, fwd[-1] + 100, fwd[-1] + 200, "FSDP::post_forward (classifier)", "classifier", "forward"),
        (fwd_t, fwd[-1] + 300, fwd[-1] + 400, "FSDP::post_forward", "root", "forward"),
        (bwd_t, bwd_pts[0] - 3000, bwd_pts[0] - 2000, "FSDP::pre_backward", "root", "backward"),
        (bwd_t, first_b, first_b + 1, "FSDP::pre_backward (classifier)", "classifier", "backward"),
        (bwd_t, half_b - 200, half_b - 100, "FSDP::post_backward_reduce (classifier)", "classifier", "backward"),
        (bwd_t, half_b - 50, half_b - 10, "FSDP::pre_backward (features)", "features", "backward"),
        (bwd_t, bwd_pts[-1] + 100, bwd_pts[-1] + 200, "FSDP::post_backward_reduce (features)", "features", "backward"),
        (bwd_t, bwd_pts[-1] + 300, bwd_pts[-1] + 400, "FSDP::root_post_backward_callback", "root", "backward"),
        (fwd_t, opt[0] - 100, opt[-1] + 100, "Optimizer.step#SGD.step", "(all)", "optimizer"),
    ]  # fmt: skip


def _windows(plan) -> list[tuple[object, int, int, str, str]]:
    """The (thread, start, end, unit, phase) windows of the plan: a unit's pass from its first range's
    start to its last range's end (the root's from root_pre_forward / pre_backward to its last)."""
    spans: dict[tuple[object, str, str], list[int]] = {}
    for thread, start, end, _, unit, phase in plan:
        s = spans.setdefault((thread, unit, phase), [start, end])
        s[0], s[1] = min(s[0], start), max(s[1], end)
    return [(t, s, e, u, p) for (t, u, p), (s, e) in spans.items()]


def _place(windows, thread, t: int) -> tuple[str, str]:
    """The innermost window (latest start: they nest) on ``thread`` holding ``t``."""
    inside = [w for w in windows if w[0] == thread and w[1] <= t < w[2]]
    if not inside:
        return ("(outside)", "(outside)")
    w = max(inside, key=lambda w: w[1])
    return (w[3], w[4])


def _expected(tasks: list[tuple[str, int, int, object, int | None]], windows) -> dict:
    """Per (unit, phase) compute and comm µs of ``tasks`` (category, start, end, host thread, host
    time): each instant of a category's union to the task that started first (ties: file order)."""
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: {"compute": 0.0, "comm": 0.0})
    for cat in ("compute", "comm"):
        reach = None
        mine = sorted((t for t in tasks if t[0] == cat), key=lambda t: t[1])
        for _, start, end, thread, host in mine:
            share = max(0, end - max(start, reach if reach is not None else start))
            reach = end if reach is None else max(reach, end)
            key = _place(windows, thread, host) if host is not None else ("(outside)", "(outside)")
            out[key][cat] += share / 1000
    return out


def _text_copy(tmp_path: Path) -> tuple[Path, dict[int, dict]]:
    """The Level1 text export with FSDP2 ranges added; per rank the expected rows."""
    run = tmp_path / "text"
    shutil.copytree(TEXT1, run, ignore=shutil.ignore_patterns(".*"))
    expected = {}
    for rank in (0, 1):
        out = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        events = json.loads((out / "trace_view.json").read_text())
        procs = {
            e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
        }
        starts = {e["id"]: e for e in events if e.get("cat") == "async_npu" and e["ph"] == "s"}
        flows = {}  # (category, device start ns) → (host tid, host ns)
        for e in events:
            if e.get("cat") == "async_npu" and e["ph"] == "f" and e["id"] in starts:
                cat = "comm" if procs[e["pid"]] == "HCCL" else "compute"
                flows[(cat, _ns(e["ts"]))] = (starts[e["id"]]["tid"], _ns(starts[e["id"]]["ts"]))
        assert all(procs[s["pid"]] == "Python" for s in starts.values())  # no Dequeue hop in this export
        tasks = []
        with open(out / "kernel_details.csv", newline="") as f:
            for row in csv.DictReader(f):
                cat = "comm" if row["Accelerator Core"].strip() == "HCCL" else "compute"
                start = _ns(row["Start Time(us)"])
                end = start + int(round(float(row["Duration(us)"]) * 1000))
                # kernel_details.csv and trace_view.json round one start 1 ns apart
                link = flows.get((cat, start)) or flows.get((cat, start + 1)) or flows.get((cat, start - 1))
                tasks.append((cat, start, end, *(link or (None, None))))
        plan = _plan(tasks)
        pid = next(p for p, n in procs.items() if n == "Python")
        for tid, start, end, name, _, _ in plan:
            events.append(
                {
                    "ph": "X",
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": f"{start // 1000}.{start % 1000:03d}",
                    "dur": (end - start) / 1000,
                    "cat": "cpu_op",
                    "args": {"Sequence number": -1, "Fwd thread id": 0},
                }
            )
        (out / "trace_view.json").write_text(json.dumps(events))
        windows = _windows(plan)
        expected[rank] = (_expected(tasks, windows), {w[3] for w in windows}, tasks, windows)
    return run, expected


def _db_copy(tmp_path: Path) -> tuple[Path, dict[int, dict]]:
    """The Level2 db export with FSDP2 ranges added to PYTORCH_API; per rank the expected rows."""
    run = tmp_path / "db"
    shutil.copytree(DB2, run, ignore=shutil.ignore_patterns(".*"))
    expected = {}
    for rank in (0, 1):
        db = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
        with sqlite3.connect(db) as con:
            names = dict(con.execute("SELECT id, value FROM STRING_IDS"))
            queue = {i for i, n in con.execute("SELECT id, name FROM ENUM_API_TYPE") if n == "queue"}
            ops: dict[int, tuple[int, int]] = {}  # connection id → (thread, start) of the innermost op
            for start, tid, cid, typ in con.execute(
                "SELECT p.startNs, p.globalTid, c.connectionId, p.type FROM PYTORCH_API p "
                "JOIN CONNECTION_IDS c ON c.id = p.connectionId"
            ):
                if typ not in queue and (cid not in ops or int(start) > ops[cid][1]):
                    ops[cid] = (tid, int(start))
            tasks = [
                ("compute", s, e, *ops.get(c, (None, None)))
                for s, e, c, n in con.execute(
                    "SELECT t.startNs, t.endNs, t.connectionId, i.name FROM TASK t "
                    "JOIN COMPUTE_TASK_INFO i ON i.globalTaskId = t.globalTaskId"
                )
                if not names[n].endswith(("AicpuKernel", "AivKernel"))
            ]
            tasks += [
                ("comm", s, e, *ops.get(c, (None, None)))
                for s, e, c in con.execute("SELECT startNs, endNs, connectionId FROM COMMUNICATION_OP")
            ]
            plan = _plan(tasks)
            next_id = max(names) + 1
            op_type = next(i for i, n in con.execute("SELECT id, name FROM ENUM_API_TYPE") if n == "op")
            for k, (tid, start, end, name, _, _) in enumerate(plan):
                con.execute("INSERT INTO STRING_IDS (id, value) VALUES (?, ?)", (next_id + k, name))
                con.execute(
                    "INSERT INTO PYTORCH_API (startNs, endNs, globalTid, connectionId, name, type) "
                    "VALUES (?, ?, ?, NULL, ?, ?)",
                    (str(start), str(end), tid, next_id + k, op_type),
                )
        con.close()
        windows = _windows(plan)
        expected[rank] = (_expected(tasks, windows), {w[3] for w in windows}, tasks, windows)
    return run, expected


@pytest.mark.parametrize("export", ["text", "db"])
def test_ascend_fsdp2_ranges_give_units(tmp_path, shared_fixtures, export):
    run, expected = (_text_copy if export == "text" else _db_copy)(tmp_path)
    res = analyze([run], workers=1)
    assert res.format == "ascend"
    for r in res.ranks:
        want, units, tasks, windows = expected[r.rank]
        # a DDP export (all-reduces, no all-gather) with FSDP2's hook ranges added is what replicate() writes
        assert r.units_source == "replicate() ranges"
        got = {(u["unit"], u["phase"]): u for u in r.units}
        # every unit's forward and backward row, and the optimizer's
        for unit in units - {"(all)"}:
            assert {(unit, "forward"), (unit, "backward")} <= set(got)
        assert ("(all)", "optimizer") in got
        # a row per window, and (outside) where something ran outside every window
        places = {k for k, v in want.items() if v["compute"] or v["comm"]}
        assert set(got) == places
        assert {("root", "forward"), ("root", "backward")} <= places
        for key, row in got.items():
            v = want.get(key, {"compute": 0.0, "comm": 0.0})
            assert row["compute_us"] == pytest.approx(v["compute"], abs=1e-3), key
            assert row["comm_us"] == pytest.approx(v["comm"], abs=1e-3), key
        # the collectives: counted where the HCCL op's host operator was
        n_comm = defaultdict(int)
        for cat, _, _, tid, t in tasks:
            if cat == "comm":
                n_comm[_place(windows, tid, t)] += 1
        got_comm = {k: sum(c["count"] for c in u["collectives"].values()) for k, u in got.items()}
        assert {k: v for k, v in got_comm.items() if v} == dict(n_comm)
        assert all(k[1] == "backward" for k in n_comm)  # DDP's all-reduces, launched on the autograd thread


def test_through_queue_moves_dequeue_points_to_their_enqueue():
    """A launch point inside a Dequeue@ range (the task queue's thread) moves to the Enqueue of the same
    correlation; points elsewhere, and in a dequeue with no enqueue, stay."""
    lane = np.array(["deq", "deq", "main", "deq"], dtype=object)
    time = np.array([105, 130, 105, 300], dtype=np.int64)
    dequeue = pd.DataFrame(
        {
            "lane": ["deq", "deq", "deq"],
            "start_ns": [100, 125, 290],
            "end_ns": [110, 140, 310],
            "key": [7, 8, 9],
        }
    )
    enqueue = {7: ("main", 50), 8: ("autograd", 60)}
    new_lane, new_time = through_queue(lane, time, dequeue, enqueue)
    assert new_lane.tolist() == ["main", "autograd", "main", "deq"]
    assert new_time.tolist() == [50, 60, 105, 300]


def test_ascend_export_without_links_has_no_units(tmp_path, shared_fixtures):
    """Without the profiler's links (the async_npu flows taken out of the text export) every task would
    be (outside): no units, source none, rather than rows that place nothing."""
    run = tmp_path / "text"
    shutil.copytree(TEXT1, run, ignore=shutil.ignore_patterns(".*"))
    for rank in (0, 1):
        tv = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        events = json.loads(tv.read_text())
        tv.write_text(json.dumps([e for e in events if e.get("cat") != "async_npu"]))
    res = analyze([run], workers=1)
    assert [(r.units, r.units_source) for r in res.ranks] == [(None, "none"), (None, "none")]


def test_diff_of_two_ascend_exports_names_places(tmp_path, shared_fixtures):
    """The text and the db export (two runs) with FSDP2 ranges: ``fsdpbench diff`` compares them place
    by place; each side's comm per (unit, phase) is the mean over its ranks of the plain reading's."""
    base, want_base = _text_copy(tmp_path)
    test, want_test = _db_copy(tmp_path)
    out = tmp_path / "diff.json"
    proc = run_cli("diff", str(base), str(test), "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    places = {(p["unit"], p["phase"]): p for p in json.loads(out.read_text())["places"]}
    assert {(u, "backward") for u in ("root", "features", "classifier")} <= set(places)
    for side, want in (("base", want_base), ("test", want_test)):
        for key, p in places.items():
            mean = sum(w[0].get(key, {"comm": 0.0})["comm"] for w in want.values()) / len(want)
            assert p[side]["comm_us"] == pytest.approx(mean, abs=1e-3), (side, key)

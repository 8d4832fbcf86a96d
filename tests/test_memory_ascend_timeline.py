"""Memory timeline of an Ascend export joined with fsdpbench's ranges (``analysis.rank.ascend_memory_timeline``).

References: the real torch_npu exports' memory_record.csv / MEMORY_RECORD and operator_memory.csv / OP_MEMORY
read here with csv / sqlite3 / Decimal; a hand-built export (text and db, in the real files' column layouts
and the real db's table schemas, both read from the shared fixtures) whose peak, (phase, unit) and in-range
allocations are computed by hand below.
"""

from __future__ import annotations

import csv
import sqlite3
import sys
import types
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import derived
from fsdpbench.analysis.rank.ascend_memory_timeline import (
    ascend_step_timeline,
    read_db,
    read_export,
    read_text,
)
from fsdpbench.errors import InputError
from fsdpbench.results import run_folder
from helpers import ASCEND_FIXTURES, ascend_output

TEXT = ASCEND_FIXTURES / "msinsight_pt_text_level1"
DB = ASCEND_FIXTURES / "msinsight_pt_db_level2"
MiB = 2**20


# ---------------------------------------------------------------- the real exports


@pytest.mark.parametrize("rank", [0, 1])
def test_real_text_export_peak_and_live_blocks(shared_fixtures, rank):
    out = ascend_output(TEXT, rank)
    with open(out / "memory_record.csv", newline="") as f:
        pta = [r for r in csv.DictReader(f) if r["Component"] == "PTA"]
    top = max(pta, key=lambda r: Decimal(r["Total Allocated(MB)"]))
    peak_bytes = int(Decimal(top["Total Allocated(MB)"]) * MiB)
    t_peak = Decimal(top["Timestamp(us)"].strip())
    with open(out / "operator_memory.csv", newline="") as f:
        all_ops = list(csv.DictReader(f))
    # operator_memory lists GE's blocks too: PTA's are those whose allocation time and total match a PTA row
    pta_points = {(Decimal(r["Timestamp(us)"].strip()), Decimal(r["Total Allocated(MB)"])) for r in pta}
    ops = [
        r
        for r in all_ops
        if (Decimal(r["Allocation Time(us)"].strip()), Decimal(r["Allocation Total Allocated(MB)"]))
        in pta_points
    ]
    assert 0 < len(ops) < len(all_ops)
    live = [
        r
        for r in ops
        if Decimal(r["Allocation Time(us)"].strip()) <= t_peak
        and (not r["Release Time(us)"].strip() or Decimal(r["Release Time(us)"].strip()) > t_peak)
    ]
    live_bytes = sum(int(Decimal(r["Size(KB)"]) * 1024) for r in live)

    tl = ascend_step_timeline(read_export(out.parent))
    assert tl["source"] == "ascend_text" and tl["component"] == "PTA"
    assert tl["peak"]["bytes"] == peak_bytes
    assert tl["peak"]["reserved_bytes"] == int(Decimal(top["Total Reserved(MB)"]) * MiB)
    assert tl["n_events"] == len(pta) and tl["n_blocks"] == len(ops)
    assert tl["peak"]["blocks_live"] == len(live)
    # no fsdpbench ranges in this AlexNet export: every live block is outside them
    assert tl["ranges"] == [] and tl["peak"]["phase"] is None
    assert tl["peak"]["in_step_bytes"] == live_bytes
    assert tl["peak"]["in_step_by_category"]["outside_ranges"] == live_bytes
    assert tl["live_at_start_bytes"] == {"other": peak_bytes - live_bytes}
    assert max(tl["allocated_bytes"]) == peak_bytes


@pytest.mark.parametrize("rank", [0, 1])
def test_real_db_export_peak_and_live_blocks(shared_fixtures, rank):
    out = ascend_output(DB, rank)
    con = sqlite3.connect(out / f"ascend_pytorch_profiler_{rank}.db")
    pta = con.execute("SELECT id FROM STRING_IDS WHERE value = 'PTA'").fetchone()[0]
    peak_bytes, t_peak, reserved = con.execute(
        "SELECT totalAllocated, timestamp, totalReserved FROM MEMORY_RECORD WHERE component = ? "
        "ORDER BY totalAllocated DESC, timestamp LIMIT 1",
        (pta,),
    ).fetchone()
    pta_blocks = (
        "FROM OP_MEMORY o WHERE EXISTS (SELECT 1 FROM MEMORY_RECORD m WHERE m.component = ? "
        "AND m.timestamp = o.allocationTime AND m.totalAllocated = o.allocationTotalAllocated)"
    )
    n_blocks = con.execute(f"SELECT count(*) {pta_blocks}", (pta,)).fetchone()[0]
    n_live, live_bytes = con.execute(
        f"SELECT count(*), sum(size) {pta_blocks} AND o.allocationTime <= ? "
        "AND (o.releaseTime IS NULL OR o.releaseTime > ?)",
        (pta, t_peak, t_peak),
    ).fetchone()
    n_pta = con.execute("SELECT count(*) FROM MEMORY_RECORD WHERE component = ?", (pta,)).fetchone()[0]
    con.close()

    tl = ascend_step_timeline(read_export(out.parent))
    assert tl["source"] == "ascend_db" and tl["n_events"] == n_pta and tl["n_blocks"] == n_blocks
    assert tl["peak"]["bytes"] == peak_bytes and tl["peak"]["reserved_bytes"] == reserved
    assert tl["peak"]["blocks_live"] == n_live and tl["peak"]["in_step_bytes"] == live_bytes
    assert tl["live_at_start_bytes"] == {"other": peak_bytes - live_bytes}


# ---------------------------------------------------------------- a hand-built export

B_US = Decimal("1736408883600000.000")  # epoch µs of the export's time 0
RANGES = [  # (name, start µs, end µs) from B_US
    ("fsdpbench::forward::root", "10.000", "400.000"),
    ("fsdpbench::forward::layers.0", "20.000", "150.000"),
    ("fsdpbench::c10d::all_gather::group=0::index=0", "25.000", "30.000"),
    ("fsdpbench::backward::root", "410.000", "900.000"),
    ("fsdpbench::backward::layers.0", "500.000", "800.000"),
    ("fsdpbench::optimizer", "950.000", "1000.000"),
]
BLOCKS = [  # (operator, KB, alloc µs, release µs or None)
    ("aten::empty", 256, "5.000", None),  # E: before every range, never freed
    ("c10d::allgather", 1024, "26.500", "140.000"),  # A: inside the collective, freed before the peak
    ("c10d::allgather", 128, "28.000", None),  # F: inside the collective (nested in forward layers.0)
    ("aten::mm", 2048, "60.250", None),  # B: forward of layers.0
    ("aten::add", 512, "300.001", "850.000"),  # C: forward of root (after layers.0), freed after the peak
    ("aten::mm", 4096, "600.000", "700.000"),  # D: backward of layers.0 — the peak is its allocation
]
GE_BLOCK = ("cann::trans_TransData_1", 8192, "600.000", None)  # GE's (total 900 MiB): never in PTA's figures
BEFORE_MIB = Decimal(100)  # allocated before the window
LIVE = {"parameters": 60 * MiB, "optimizer_states": 30 * MiB}  # the worker's categories


def _pta_rows() -> list[tuple[Decimal, Decimal]]:
    """(time µs, allocated MiB) after each allocation and release, in time order."""
    events = [(Decimal(a), Decimal(kb) / 1024) for _, kb, a, _ in BLOCKS]
    events += [(Decimal(r), -Decimal(kb) / 1024) for _, kb, _, r in BLOCKS if r]
    total, rows = BEFORE_MIB, []
    for t, d in sorted(events):
        total += d
        rows.append((t, total))
    return rows


def _total_after(alloc_us: str) -> Decimal:
    """PTA's allocated MiB in the record of an allocation (each allocation has its own time here)."""
    return dict(_pta_rows())[Decimal(alloc_us)]


def _header(path: Path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f))


def _write_csv(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    lines = [",".join(header)] + [",".join(r.get(c, "") for c in header) for r in rows]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())


def _text_export(root: Path) -> Path:
    """An ``*_ascend_pt`` folder in the real text export's column layout (headers copied from it; times as
    ``<µs>\\t`` like torch_npu writes them)."""
    out = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    real = ascend_output(TEXT, 0)
    rec = []
    for t, mib in _pta_rows():
        ts = f"{B_US + t}\t"
        rec.append(
            {
                "Component": "PTA",
                "Timestamp(us)": ts,
                "Total Allocated(MB)": str(mib),
                "Total Reserved(MB)": "200.0",
                "Total Active(MB)": str(mib),
                "Device Type": "NPU:0",
            }
        )
        # GE / PTA+GE / APP rows far above PTA: never the PTA peak
        rec.append(
            {
                "Component": "GE",
                "Timestamp(us)": ts,
                "Total Allocated(MB)": "900.0",
                "Total Reserved(MB)": "900.0",
                "Device Type": "NPU:0",
            }
        )
        rec.append(
            {"Component": "APP", "Timestamp(us)": ts, "Total Reserved(MB)": "4000.0", "Device Type": "NPU:0"}
        )
    _write_csv(out / "memory_record.csv", _header(real / "memory_record.csv"), rec)
    ops = [
        {
            "Name": n,
            "Size(KB)": str(kb),
            "Allocation Time(us)": f"{B_US + Decimal(a)}\t",
            "Release Time(us)": f"{B_US + Decimal(r)}\t" if r else "",
            "Device Type": "NPU:0",
            "Allocation Total Allocated(MB)": str(_total_after(a) if n != GE_BLOCK[0] else Decimal(900)),
        }
        for n, kb, a, r in [*BLOCKS, GE_BLOCK]
    ]
    _write_csv(out / "operator_memory.csv", _header(real / "operator_memory.csv"), ops)
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Python"}},
        {
            "ph": "X",
            "name": "ProfilerStep#3",
            "pid": 7,
            "tid": 7,
            "ts": f"{B_US}",
            "dur": 1100.0,
            "cat": "cpu_op",
        },
        {
            "ph": "X",
            "name": "aten::mm",
            "pid": 7,
            "tid": 7,
            "ts": f"{B_US + 60}",
            "dur": 1.0,
            "cat": "cpu_op",
        },
    ] + [
        {
            "ph": "X",
            "name": n,
            "pid": 7,
            "tid": 7,
            "ts": f"{B_US + Decimal(s)}",
            "dur": float(Decimal(e) - Decimal(s)),
            "cat": "cpu_op",
        }
        for n, s, e in RANGES
    ]
    (out / "trace_view.json").write_bytes(orjson.dumps(events))
    return out.parent


def _db_export(root: Path) -> Path:
    """The same export as a db, with the real db's CREATE TABLE statements."""
    out = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    real = sqlite3.connect(ascend_output(DB, 0) / "ascend_pytorch_profiler_0.db")
    tables = ("STRING_IDS", "MEMORY_RECORD", "OP_MEMORY", "PYTORCH_API")
    schema = [
        real.execute("SELECT sql FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0] for t in tables
    ]
    real.close()
    con = sqlite3.connect(out / "ascend_pytorch_profiler_0.db")
    for sql in schema:
        con.execute(sql)
    names = [
        "PTA",
        "GE",
        "ProfilerStep#3",
        *sorted({n for n, *_ in [*BLOCKS, GE_BLOCK]}),
        *(n for n, *_ in RANGES),
    ]
    sid = {n: i for i, n in enumerate(names)}
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, n) for n, i in sid.items()])

    def ns(us: str | Decimal) -> int:
        return int((B_US + Decimal(us)) * 1000)

    for t, mib in _pta_rows():
        con.execute(
            "INSERT INTO MEMORY_RECORD VALUES (?,?,?,?,?,?,?)",
            (sid["PTA"], ns(t), int(mib * MiB), 200 * MiB, int(mib * MiB), 1, 0),
        )
        con.execute(
            "INSERT INTO MEMORY_RECORD VALUES (?,?,?,?,?,?,?)",
            (sid["GE"], ns(t), 900 * MiB, 900 * MiB, 0, 1, 0),
        )
    for n, kb, a, r in [*BLOCKS, GE_BLOCK]:
        total = _total_after(a) if n != GE_BLOCK[0] else Decimal(900)
        con.execute(
            "INSERT INTO OP_MEMORY (name, size, allocationTime, releaseTime, allocationTotalAllocated, deviceId) "
            "VALUES (?,?,?,?,?,?)",
            (sid[n], kb * 1024, ns(a), ns(r) if r else None, int(total * MiB), 0),
        )
    api = [("ProfilerStep#3", "0", "1100"), *RANGES]
    for n, s, e in api:  # PYTORCH_API stores its times as text
        con.execute(
            "INSERT INTO PYTORCH_API (startNs, endNs, globalTid, name, type) VALUES (?,?,?,?,?)",
            (str(ns(s)), str(ns(e)), 7, sid[n], 50001),
        )
    con.commit()
    con.close()
    return out.parent


def test_hand_built_export_peak_phase_unit_and_in_range_allocations(shared_fixtures, tmp_path):
    tl = ascend_step_timeline(read_export(_text_export(tmp_path)), LIVE)
    # by hand: 100 + 0.25 (E) + 1 (A) + 0.125 (F) + 2 (B) − 1 (A) + 0.5 (C) + 4 (D) = 106.875 MiB at 600 µs
    peak = tl["peak"]
    assert peak["bytes"] == int(Decimal("106.875") * MiB)
    assert peak["t_us"] == pytest.approx(590.0)  # µs from the first range (forward::root at 10 µs)
    assert (peak["phase"], peak["unit"], peak["collective"]) == ("backward", "layers.0", None)
    assert peak["reserved_bytes"] == 200 * MiB
    # live at the peak: E, F, B, C, D (A was freed at 140 µs; the GE block is not PTA's)
    assert peak["blocks_live"] == 5 and tl["n_blocks"] == 6
    assert peak["in_step_by_category"] == {
        "forward_allocations": 2 * MiB + 512 * 1024,  # B (layers.0) + C (root)
        "backward_allocations": 4 * MiB,  # D
        "optimizer_allocations": 0,
        "communication_buffers": 128 * 1024,  # F, made inside the all-gather's range
        "outside_ranges": 256 * 1024,  # E
    }
    assert peak["in_step_by_range"] == [
        {"phase": "backward", "unit": "layers.0", "bytes": 4 * MiB},
        {"phase": "forward", "unit": "layers.0", "bytes": 2 * MiB + 128 * 1024},  # B + F (nested in it)
        {"phase": "forward", "unit": "root", "bytes": 512 * 1024},
        {"phase": None, "unit": None, "bytes": 256 * 1024},
    ]
    in_step = int(Decimal("6.875") * MiB)
    assert peak["in_step_bytes"] == in_step
    assert tl["live_at_start_bytes"] == {**LIVE, "other": int(Decimal("106.875") * MiB) - in_step - 90 * MiB}
    assert peak["live_at_start_bytes"] == 100 * MiB
    assert [(r["phase"], r["unit"]) for r in tl["ranges"]] == [
        ("forward", "root"),
        ("forward", "layers.0"),
        ("backward", "root"),
        ("backward", "layers.0"),
        ("optimizer", None),
    ]
    assert tl["ranges"][1]["start_us"] == pytest.approx(10.0) and tl["ranges"][1]["end_us"] == pytest.approx(
        140.0
    )
    assert tl["t_us"][0] == pytest.approx(-5.0)  # E's record, before the first range
    assert tl["end_bytes"] == int(Decimal("102.375") * MiB)
    assert len(tl["allocated_bytes"]) == len(tl["reserved_bytes"]) == 9


def test_text_and_db_of_the_same_export_agree(shared_fixtures, tmp_path):
    text = ascend_step_timeline(read_text(_text_export(tmp_path / "t") / "ASCEND_PROFILER_OUTPUT"), LIVE)
    db = ascend_step_timeline(
        read_db(_db_export(tmp_path / "d") / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"), LIVE
    )
    assert (text.pop("source"), db.pop("source")) == ("ascend_text", "ascend_db")
    assert text == db


def test_component_choice_and_clear_errors(shared_fixtures, tmp_path):
    folder = _text_export(tmp_path)
    ge = ascend_step_timeline(read_export(folder, component="GE"))
    assert ge["component"] == "GE" and ge["peak"]["bytes"] == 900 * MiB
    with pytest.raises(InputError, match="APP records reserved bytes only"):
        read_export(folder, component="APP")
    with pytest.raises(InputError, match="no PTA\\+GE rows"):
        read_export(folder, component="PTA+GE")
    with pytest.raises(InputError, match="memory_record.csv or ascend_pytorch_profiler"):
        read_export(tmp_path / "nothing_ascend_pt")
    (folder / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv").write_text("Name,Size(KB)\r\nx,1\r\n")
    with pytest.raises(InputError, match="no column Allocation Time"):
        read_export(folder)


# ---------------------------------------------------------------- run folder, rank choice, report


def _run_with_npu_memory_step(tmp_path: Path, ranks: tuple[int, ...]) -> Path:
    run = tmp_path / "run"
    for rank in ranks:
        npu_dir = run_folder.memory_step_npu_dir(run, "a", rank)
        _text_export(npu_dir)
        (npu_dir / "rank0_ascend_pt").rename(npu_dir / f"host_{rank}_ascend_pt")
        run_folder.write_json(run_folder.memory_step_files(run, "a", rank)[1], {"live_at_start_bytes": LIVE})
    return run


def test_run_folder_reads_the_npu_memory_step_and_chooses_the_rank(shared_fixtures, tmp_path):
    run = _run_with_npu_memory_step(tmp_path, (0, 1))
    tl = derived.memory_timelines(run, ["a", "b"], rank=1)
    assert list(tl) == ["a"] and tl["a"]["rank"] == 1 and tl["a"]["source"] == "ascend_text"
    assert tl["a"]["peak"]["bytes"] == int(Decimal("106.875") * MiB)
    summary = {"arms": {"a": {"memory_timeline": {"rank": 0, "x": 1}}, "b": {}}}
    assert derived.memory_timelines_of_rank(run, summary, 0)["a"] == {"rank": 0, "x": 1}
    assert derived.memory_timelines_of_rank(run, summary, 1)["a"]["rank"] == 1
    with pytest.raises(
        InputError, match="no arm recorded a memory step of rank 5 \\(ranks recorded: 0, 1\\)"
    ):
        derived.memory_timelines_of_rank(run, summary, 5)
    # a memory step whose torch_npu profile was never parsed is an error entry, not a crash
    run_folder.memory_step_npu_dir(run, "b", 0).mkdir(parents=True)
    assert "was not parsed" in derived.memory_timelines(run, ["b"], rank=0)["b"]["error"]


def test_report_draws_an_ascend_timeline_and_the_diff_takes_it(shared_fixtures, tmp_path):
    from fsdpbench.analysis.compare.diff import diff_analyses
    from fsdpbench.report.blocks import Figure
    from fsdpbench.report.load import RunData
    from fsdpbench.report.profile import _memory_timeline
    from fsdpbench.results.summary import Summary
    from helpers import analysis

    tl = {**ascend_step_timeline(read_export(_text_export(tmp_path)), LIVE), "rank": 0}
    data = RunData(tmp_path, summary=Summary.from_dict({"arms": {"a": {"memory_timeline": tl}}}))
    figs = [b for b in _memory_timeline(data, ["a"]) if isinstance(b, Figure)]
    assert len(figs) == 1
    assert "a — memory step, rank 0, ascend_text PTA" in figs[0].svg and "reserved" in figs[0].svg
    assert "Peak 106.88 MiB in backward of layers.0" in figs[0].caption
    assert "memory_record.csv / operator_memory.csv" in figs[0].caption
    other = {**tl, "peak": {**tl["peak"], "bytes": tl["peak"]["bytes"] + 8 * MiB}}
    other["peak"]["in_step_by_category"] = {
        **tl["peak"]["in_step_by_category"],
        "backward_allocations": 12 * MiB,
    }
    context = {
        "peak_memory": {"a": [tl["peak"]["bytes"], "m"], "b": [other["peak"]["bytes"], "m"]},
        "memory_timeline": {"a": tl, "b": other},
    }
    d = diff_analyses(analysis(), analysis(), base_label="a", test_label="b", context=context).to_dict()
    assert d["memory_timeline"]["difference"]["delta_bytes"] == 8 * MiB
    assert d["memory_timeline"]["difference"]["category"] == "backward_allocations"


def test_npu_memory_step_profiler_records_memory(monkeypatch, tmp_path):
    """The worker's NPU memory step asks torch_npu for profile_memory with CPU + NPU activity and no schedule
    (a stand-in module records the call: CPU cannot run torch_npu)."""
    from fsdpbench.run import profiling

    calls = {}

    def handler(d, worker_name, analyse_flag=True):
        calls["handler"] = (d, worker_name, analyse_flag)
        return "handler"

    prof = types.SimpleNamespace(
        _ExperimentalConfig=lambda **k: ("exp", k),
        ProfilerLevel=types.SimpleNamespace(Level1="L1"),
        AiCMetrics=types.SimpleNamespace(PipeUtilization="pipe"),
        ProfilerActivity=types.SimpleNamespace(CPU="cpu", NPU="npu"),
        tensorboard_trace_handler=handler,
        profile=lambda **k: calls.setdefault("profile", k),
    )
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(profiler=prof))
    out = run_folder.memory_step_npu_dir(tmp_path, "a", 3)
    profiling.npu_memory_profiler(out, 3)
    assert calls["profile"]["profile_memory"] is True
    assert calls["profile"]["activities"] == ["cpu", "npu"] and "schedule" not in calls["profile"]
    assert calls["profile"]["on_trace_ready"] == "handler"
    assert calls["handler"] == (str(out), "rank3", False) and out.is_dir()


def test_memory_rank_applies_to_a_run_dir_only(tmp_path):
    import argparse

    from fsdpbench.commands import diff as diff_cmd
    from fsdpbench.errors import ConfigError

    parser = argparse.ArgumentParser()
    diff_cmd.add_arguments(parser)
    args = parser.parse_args([str(tmp_path / "a"), str(tmp_path / "b"), "--memory-rank", "1"])
    with pytest.raises(ConfigError, match="--memory-rank applies to a RUN_DIR"):
        diff_cmd.main(args)
    assert parser.parse_args([str(tmp_path)]).memory_rank == 0

"""Real traces, round 3 (issue 34): a partial group says so, a broken row is named, no silent fallback
window, the Ascend group read from the profiler's own files, ops paired by name, one clock and one
matching rule for waits and stragglers.

Input: ranks 0 and 1 of an 8-rank HCCL group, a torch_npu Level1 text export without trace_view.json from
Ascend/msinsight's server test data (tests/fixtures/ascend_server_2rank, see its PROVENANCE.md). Every
expected value is read from the raw files here, with plain ``csv``/``json``; times as ``Decimal`` (µs
since the epoch do not fit a double to the ns).
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import orjson
import pytest

from fsdpbench import cli
from fsdpbench.analysis import analyze
from fsdpbench.trace.synthetic import make_trace, write_trace

FIXTURE = Path(__file__).parent / "fixtures" / "ascend_server_2rank"
GLOO_MIN = Path(__file__).parent / "fixtures" / "traces" / "gloo_min.json"
OUT = "ASCEND_PROFILER_OUTPUT"


def _export(tmp_path: Path) -> Path:
    """A writable copy of the export (the analysis writes its caches beside the ranks)."""
    shutil.copytree(FIXTURE, tmp_path / "export")
    return tmp_path / "export"


def _raw_rows(rank: int) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and (line, fields) of every record of the rank's kernel_details.csv."""
    with open(FIXTURE / f"test_rank_{rank}" / OUT / "kernel_details.csv", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [(reader.line_num, r) for r in reader]


def _good_rows(rank: int) -> list[dict[str, str]]:
    header, rows = _raw_rows(rank)
    return [dict(zip(header, r, strict=True)) for _, r in rows if len(r) == len(header)]


def _comm_ops(rank: int) -> dict[str, dict]:
    """``{op name: {"group", **Communication Time Info}}`` of the rank's communication.json."""
    doc = json.loads((FIXTURE / f"test_rank_{rank}" / OUT / "communication.json").read_text())
    out = {}
    for kinds in doc.values():
        for entries in kinds.values():
            for name, entry in entries.items():
                if "@" in name:
                    op, group = name.split("@")
                    out[op] = {"group": group, **entry["Communication Time Info"]}
    return out


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    root = _export(tmp_path_factory.mktemp("round3"))
    return analyze([root], workers=1)


def test_the_group_and_its_size_come_from_the_profilers_files_and_a_partial_group_says_so(result, capsys):
    ops = _comm_ops(0)
    groups = {ops[r["Name"]]["group"] for r in _good_rows(0) if r["Accelerator Core"] == "HCCL"}
    assert len(groups) == 1
    (group,) = groups
    matrix = json.loads((FIXTURE / "test_rank_0" / OUT / "communication_matrix.json").read_text())
    ends = set()
    for kinds in matrix.values():
        for entries in kinds.values():
            for name, links in entries.items():
                if name.endswith("@" + group):
                    ends |= {x for link in links for x in link.split("-")}
    assert len(ends) == 8  # links 0-0 … 0-7
    assert list(result.ranks[0].by_group) == [group] and list(result.ranks[1].by_group) == [group]
    assert result.process_groups[group]["size"] == len(ends)
    assert result.process_groups[group]["ranks"] == [0, 1]
    assert result.process_groups[group]["kind"] == "unknown"  # two of eight: no layout to tell
    assert result.waits["partial_groups"] == [{"group": group, "analysed": [0, 1], "size": len(ends)}]
    assert result.waits["match"] == "group_seq"  # the group and the op's index in it, from its name
    said = f"2 of {len(ends)} ranks of group {group}: the last arrival may be outside"
    assert f"waits and stragglers cover {said}" in result.warnings  # the diff shows the warnings too
    from rich.console import Console

    from fsdpbench.report.terminal.analyze import render_analysis

    console = Console(width=80, record=True)
    render_analysis(result, console=console)
    text = " ".join(console.export_text().split())
    assert f"matched by group_seq; {said})" in text  # the waits table's title
    skew = result.collective_skew_us[0]
    assert f"stragglers by collective start skew: rank 0 (+{skew:.1f} µs) ({said})" in text
    assert f"0,1 of {len(ends)}" in text  # the group table's ranks column


def test_a_row_with_a_field_missing_is_named_and_left_out(result):
    header, rows = _raw_rows(0)
    bad = [(line, r) for line, r in rows if len(r) != len(header)]
    assert [(line, len(r), r[header.index("Name")]) for line, r in bad] == [(17, 31, "FlashAttentionScore")]
    said = [w for w in result.warnings if "fields where the header has" in w]
    assert said == [
        f"{result.ranks[0].source}/{OUT}/kernel_details.csv line 17: 31 fields where the header has 32 "
        "(FlashAttentionScore); the row is left out (its columns cannot be told apart)"
    ]
    fa = [float(r["Duration(us)"]) for r in _good_rows(0) if r["Type"] == "FlashAttentionScore"]
    got = {row["op_type"]: row for row in result.ranks[0].ops}["FlashAttentionScore"]
    assert got["count"] == len(fa) == 3
    assert got["total_us"] == pytest.approx(sum(fa), abs=1e-3)


def test_an_op_type_written_as_a_number_is_taken_from_the_name(result):
    typed_zero = [r["Name"] for r in _good_rows(0) if r["Type"] == "0"]
    assert typed_zero == ["NonZero_MemSet", "NonZero_MemSet"]
    types = {row["op_type"]: row["count"] for row in result.ranks[0].ops}
    assert "0" not in types and types["MemSet"] == len(typed_zero)


def test_a_step_without_a_host_range_names_its_fallback_window(result):
    for rank in (0, 1):
        rows = _good_rows(rank)
        start = min(Decimal(r["Start Time(us)"]) for r in rows)
        end = max(Decimal(r["Start Time(us)"]) + Decimal(r["Duration(us)"]) for r in rows)
        step = {r["Step Id"] for r in rows}.pop()
        assert result.ranks[rank].step_time_us == pytest.approx(float(end - start), abs=1e-3)
        assert (
            f"rank {rank} step {step}: no host ProfilerStep#{step} range (no trace_view.json): the step's "
            f"window is the span of its device tasks ({float(end - start) / 1000:.3f} ms), without the host time "
            "before the first and after the last"
        ) in result.warnings


def test_a_kineto_trace_without_profiler_steps_warns_that_it_is_analysed_whole(tmp_path):
    doc = orjson.loads(GLOO_MIN.read_bytes())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name")).startswith("ProfilerStep#")]
    (tmp_path / "rank1.json").write_bytes(orjson.dumps(doc))
    res = analyze([tmp_path / "rank1.json"], workers=1)
    said = [w for w in res.warnings if "has no ProfilerStep# range" in w]
    assert said == [
        f"rank 1: rank1.json has no ProfilerStep# range: the whole trace is analysed as one step, its window "
        f"the span of its device work ({res.ranks[0].step_time_us / 1000:.3f} ms)"
    ]


def test_the_profilers_ops_are_paired_with_the_trace_by_name(result):
    for rank in (0, 1):
        ops = _comm_ops(rank)
        hccl = [r["Name"] for r in _good_rows(rank) if r["Accelerator Core"] == "HCCL"]
        assert set(hccl) <= set(ops)
        total = next(p for p in result.waits["profiler"] if p["rank"] == rank)
        assert (total["ops"], total["paired"]) == (len(ops), len(hccl))
        sync = sum(float(ops[n]["Synchronization Time(ms)"]) * 1000 for n in hccl)
        assert total["synchronization_us"] == pytest.approx(sync, abs=1e-6)
        mine = {o["op"]: o for o in result.waits["profiler_ops"] if o["rank"] == rank}
        assert {n for n, o in mine.items() if o["fsdpbench_wait_us"] is not None} == set(hccl)
    assert not any("shown per rank only" in w for w in result.warnings)


def _ns(us: str) -> int:
    """µs text as integer ns (a 4th decimal rounds half up, as the profiler's own ns would)."""
    return int((Decimal(us) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _broadcasts(rank: int) -> dict[str, tuple[int, int]]:
    """``{name: (start ns, end ns)}`` of the rank's broadcast rows."""
    return {
        r["Name"]: (_ns(r["Start Time(us)"]), _ns(r["Start Time(us)"]) + _ns(r["Duration(us)"]))
        for r in _good_rows(rank)
        if r["Type"] == "hcom_broadcast_"
    }


def test_waits_and_stragglers_share_one_clock_and_one_match(result):
    """Both ranks hold the two broadcasts (names in both files). Rank 1's clock offset: the median of
    the end differences (to the ns, half to even), kept within causality; each instance's arrival gap on
    that clock; transfer from the last arrival to the last end."""
    b0, b1 = _broadcasts(0), _broadcasts(1)
    shared = sorted(set(b0) & set(b1))
    assert len(shared) == 2
    offset = statistics.median(b1[k][1] - b0[k][1] for k in shared)
    lo = max(b1[k][0] - b0[k][1] for k in shared)
    hi = min(b1[k][1] - b0[k][0] for k in shared)
    offset = round(min(max(offset, lo), hi))
    late0 = [max(b0[k][0] - (b1[k][0] - offset), 0) for k in shared]
    late1 = [max((b1[k][0] - offset) - b0[k][0], 0) for k in shared]
    assert result.waits["ranks"][1]["clock_offset_us"] == offset / 1000
    assert result.collective_skew_us == {
        0: statistics.median(late0) / 1000,
        1: statistics.median(late1) / 1000,
    }
    assert result.stragglers == [{"rank": 0, "skew_us": statistics.median(late0) / 1000}]
    # over every instance, sized or not (the sizes are unknown here)
    transfer = sum(max(b0[k][1], b1[k][1] - offset) - max(b0[k][0], b1[k][0] - offset) for k in shared)
    bw = result.waits["bandwidth"]["broadcast"]
    assert (bw["count"], bw["sized"], bw["algbw_gbps"]) == (2, 0, None)
    assert bw["transfer_us"] == transfer / 1000


def test_a_rank_whose_clock_is_offset_is_no_straggler(tmp_path):
    """Rank 1 runs the same work on a clock 50 µs ahead: every collective starts and ends 50 µs later by
    its clock. Aligned on the collectives' ends, nobody is late (the raw clocks made rank 1 a straggler)."""
    for rank in (0, 1):
        doc = make_trace(rank=0, world_size=2, device_events=300, seed=3, skew_ns=50_000 * rank)
        doc["distributedInfo"]["rank"] = rank
        write_trace(tmp_path / f"rank{rank}.json", doc)
    res = analyze([tmp_path], workers=1)
    assert res.waits["ranks"][1]["clock_offset_us"] == pytest.approx(50.0, abs=1e-3)
    assert res.collective_skew_us == {0: 0.0, 1: 0.0}
    assert res.stragglers == []


def test_a_kineto_trace_naming_no_group_takes_its_size_from_distributed_info(tmp_path):
    from fsdpbench.analysis.crossrank.groups import WORLD_SIZE_RULE

    doc = make_trace(rank=1, world_size=2, device_events=200, seed=1)
    for e in doc["traceEvents"]:
        for k in [k for k in e.get("args", {}) if k.startswith("Process Group")]:
            del e["args"][k]
    write_trace(tmp_path / "rank1.json", doc)
    res = analyze([tmp_path / "rank1.json"], workers=1)
    world = doc["distributedInfo"]["world_size"]
    assert res.ranks[0].groups == {} and res.ranks[0].world_size == world  # no group invented
    assert res.process_groups == {
        "?": {"kind": "world", "ranks": list(range(world)), "rule": WORLD_SIZE_RULE, "size": world}
    }
    assert res.record().to_dict()["ranks"][0]["world_size"] == world


def test_the_terminal_says_which_profiler_ops_its_rows_cover(tmp_path, capsys):
    root = _export(tmp_path)
    assert cli.main(["analyze", str(root), "--no-cache"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    n0, n1 = len(_comm_ops(0)), len(_comm_ops(1))
    assert f"rank 0: 4 of its {n0} ops, rank 1: 2 of its {n1} ops" in out


# ---- diff and the terminal (issue 34, point 6) -----------------------------------------------------
DDP = Path(__file__).parent / "fixtures" / "hta_ddp_step" / "rank1_step4.json.gz"


def _raw_kernels(cats: tuple[str, ...] = ("kernel",)) -> dict[str, float]:
    """Σ duration (µs) per device-event name of the DDP step (events of ``cats``), read with plain
    ``gzip``/``json``."""
    import gzip

    totals: dict[str, float] = {}
    for e in json.loads(gzip.decompress(DDP.read_bytes()))["traceEvents"]:
        if e.get("cat") in cats:
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"]
    return totals


def _column(text: str, title: str, end: str) -> list[str]:
    """The first column's cells of the table titled ``title`` (up to the line starting with ``end``)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    cells = []
    for line in lines[start + 4 :]:
        if line.startswith(("└", end)):
            break
        cells.append(line.split("│")[1].strip())
    return cells


def _source_of(short: str, names: list[str]) -> list[str]:
    """The names a shortened cell can stand for: same head and tail around its "…" (a ``#k`` tag
    dropped)."""
    cell = short.rsplit("#", 1)[0] if "…" in short and short.rsplit("#", 1)[-1].isdigit() else short
    if "…" not in cell:
        return [n for n in names if n == cell]
    head, tail = cell.split("…")
    return [n for n in names if n.startswith(head) and n.endswith(tail)]


def test_distinct_kernels_keep_distinct_short_names_at_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    shutil.copy(DDP, tmp_path / "rank1.json.gz")
    assert cli.main(["analyze", str(tmp_path / "rank1.json.gz")]) == 0
    cells = _column(capsys.readouterr().out, "Top 15 op types", "ms: total")
    # the op table: compute, memcpy and memset, one row per name (the NCCL kernels are communication)
    totals = _raw_kernels(("kernel", "gpu_memcpy", "gpu_memset"))
    top = sorted((n for n in totals if not n.startswith("nccl")), key=lambda n: -totals[n])[:15]
    assert len(cells) == 15 and len(set(cells)) == 15
    # each cell stands for its own kernel: the raw name of the same rank, and only that one when a
    # second kernel of the top 15 shares its head and tail (then a #k tag tells them apart)
    for cell, name in zip(cells, top, strict=True):
        assert name in _source_of(cell, top)
    clashing = [c for c in cells if len(_source_of(c, top)) > 1]
    assert all(c.rsplit("#", 1)[-1].isdigit() for c in clashing)


def test_diff_advice_fits_a_trace_with_all_reduce_only(tmp_path, capsys):
    names = _raw_kernels()
    assert any("AllReduce" in n for n in names) and not any("AllGather" in n for n in names)
    for side in ("base", "test"):
        shutil.copy(DDP, tmp_path / f"{side}.json.gz")
    out = tmp_path / "d.json"
    args = [str(tmp_path / "base.json.gz"), str(tmp_path / "test.json.gz"), "--json", str(out), "--quiet"]
    assert cli.main(["diff", *args]) == 0
    found = [f for f in json.loads(out.read_text())["findings"] if f["id"] == "low_overlap"]
    assert found  # no overlap at all: 404 all-reduces fully exposed
    for f in found:
        assert "issues all_reduce and no all_gather, so layer prefetch does not apply" in f["action"]
        assert "prefetch=" not in f["action"]


def test_diff_warnings_name_their_source_once_and_types_are_spelt_as_analyze_spells_them(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")
    root = _export(tmp_path)
    assert cli.main(["diff", str(root / "test_rank_0"), str(root / "test_rank_1"), "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "test_rank_0: test_rank_0:" not in text and "test_rank_1: test_rank_1:" not in text
    assert f"warning: test_rank_0: no {OUT}/trace_view.json; sync and launch counts are unavailable" in text
    # the HCCL op types of rank 0's rows, as analyze names them (hcom_allGather_ → all_gather)
    raw = {r["Type"] for r in _good_rows(0) if r["Accelerator Core"] == "HCCL"}
    assert raw == {"hcom_broadcast_", "hcom_allReduce_", "hcom_allGather_"}
    spelt = {"hcom_broadcast_": "broadcast", "hcom_allReduce_": "all_reduce", "hcom_allGather_": "all_gather"}
    cells = _column(text, "collectives (calls per rank)", "calls")
    assert sorted(cells) == sorted(spelt[t] for t in raw)


# ---- phases on any trace (issue 34, point 7) -------------------------------------------------------
def test_phases_come_from_the_autograd_thread_and_the_optimizer_ranges(tmp_path):
    """One step of HTA's DDP trace (no fsdpbench range, no FSDP2 range). Reference, plain Python on the
    raw JSON: the windows of docs/attribution.md (backward: first to last autograd-engine range per
    thread; forward: the step's start to the backward's; optimizer: Optimizer.step#/zero_grad#, the
    innermost wins), each device event placed by its launching runtime call (correlation id), and a
    phase's compute = Σ of its events' shares of the compute union (the first-started event owns each
    instant)."""
    import gzip

    shutil.copy(DDP, tmp_path / "rank1.json.gz")
    events = json.loads(gzip.decompress(DDP.read_bytes()))["traceEvents"]
    (step,) = [e for e in events if str(e.get("name")).startswith("ProfilerStep#")]
    bwd = [e for e in events if str(e.get("name")).startswith("autograd::engine::evaluate_function: ")]
    windows = []  # (tid, start, end, phase), in painting order: start, the longer first
    for tid in {e["tid"] for e in bwd}:
        mine = [e for e in bwd if e["tid"] == tid]
        windows.append((tid, min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine), "backward"))
    windows.append((step["tid"], step["ts"], min(e["ts"] for e in bwd), "forward"))
    for e in events:
        if str(e.get("name")).startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            windows.append((e["tid"], e["ts"], e["ts"] + e["dur"], "optimizer"))
    windows.sort(key=lambda w: (w[1], -(w[2] - w[1])))
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}

    def phase_of(e: dict) -> str:
        launch = runtime[e["args"]["correlation"]]
        inside = [w for w in windows if w[0] == launch["tid"] and w[1] <= launch["ts"] < w[2]]
        return inside[-1][3] if inside else "(outside)"

    kernels = [e for e in events if e.get("cat") == "kernel"]  # copies and memsets are neither
    comm = [e for e in kernels if e["name"].startswith("nccl")]
    compute = sorted((e for e in kernels if not e["name"].startswith("nccl")), key=lambda e: e["ts"])
    expected: dict[str, float] = {}
    reach = float("-inf")
    for e in compute:
        share = e["ts"] + e["dur"] - max(e["ts"], reach)
        reach = max(reach, e["ts"] + e["dur"])
        expected[phase_of(e)] = expected.get(phase_of(e), 0.0) + max(share, 0.0)
    assert {phase_of(e) for e in comm} == {"backward"} and len(comm) == 404

    res = analyze([tmp_path / "rank1.json.gz"], workers=1)
    (r,) = res.ranks
    assert r.units_source == "autograd/optimizer ranges"
    got = {row["phase"]: row for row in r.units}
    assert set(got) == set(expected) == {"forward", "backward", "optimizer"}
    assert {row["unit"] for row in r.units} == {"(all)"}
    for phase, us in expected.items():
        assert got[phase]["compute_us"] == pytest.approx(us, abs=1e-3), phase
    assert got["backward"]["collectives"]["all_reduce"]["count"] == len(comm)
    assert got["backward"]["comm_us"] == pytest.approx(r.comm_us, abs=1e-3)
    assert sum(row["compute_us"] for row in r.units) == pytest.approx(r.compute_us, abs=1e-3)


def test_the_diffs_op_table_keeps_distinct_names_at_80_columns(
    tmp_path, capsys, monkeypatch, shared_fixtures
):
    """The DDP step against HTA's ns_resolution trace: two cudnn batch-norm kernels differ only in the
    middle of their names, so no cut at 80 columns tells them apart; each then carries its tag."""
    import gzip

    monkeypatch.setenv("COLUMNS", "80")
    other = next((shared_fixtures / "fixtures" / "kineto" / "ns_resolution_trace").glob("*.json.gz"))
    shutil.copy(DDP, tmp_path / "ddp.json.gz")
    shutil.copy(other, tmp_path / "ns.json.gz")
    assert cli.main(["diff", str(tmp_path / "ns.json.gz"), str(tmp_path / "ddp.json.gz")]) == 0
    cells = _column(capsys.readouterr().out, "kernel time by op type", "kernel time (mean")
    names = set(_raw_kernels(("kernel", "gpu_memcpy", "gpu_memset")))
    names |= {
        e["name"] for e in json.loads(gzip.decompress(other.read_bytes()))["traceEvents"] if "name" in e
    }
    assert len(cells) == len(set(cells)) == 10
    assert all(_source_of(c, sorted(names)) for c in cells)  # each the head and tail of a real name
    tagged = sorted(c for c in cells if c.rsplit("#", 1)[-1].isdigit())
    assert [c[-2:] for c in tagged] == ["#1", "#2"] and tagged[0][:-2] == tagged[1][:-2]
    assert len(_source_of(tagged[0], sorted(names))) > 1  # a head and tail that two kernels share


def test_a_db_export_reads_its_groups_from_analysis_db(tmp_path, shared_fixtures):
    """msinsight's db export (ranks 0 and 1): the groups from CommAnalyzerTime, their size from
    CommAnalyzerMatrix (the distinct ends of the group's links), read here with plain sqlite."""
    import sqlite3

    src = shared_fixtures / "fixtures" / "ascend" / "msinsight_pt_db_level2"
    shutil.copytree(src, tmp_path / "db")
    db = src / "rank0_ascend_pt" / OUT / "analysis.db"
    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        groups = {g for (g,) in con.execute("SELECT DISTINCT group_name FROM CommAnalyzerTime")}
        links = con.execute("SELECT group_name, src_rank, dst_rank FROM CommAnalyzerMatrix").fetchall()
    finally:
        con.close()
    (group,) = groups
    size = len({x for g, a, b in links if g == group for x in (a, b)})
    assert size == 8
    res = analyze([tmp_path / "db"], workers=1)
    assert res.process_groups[group]["size"] == size
    assert res.waits["match"] == "group_seq"
    assert res.waits["partial_groups"] == [{"group": group, "analysed": [0, 1], "size": size}]
    assert all(p["paired"] == p["ops"] for p in res.waits["profiler"])


def test_a_row_with_a_field_too_many_is_named_and_left_out(tmp_path):
    """A hand-made copy of rank 1's kernel_details.csv (the real header) whose third row has one field
    too many: named by line and left out, where pandas alone would stop at it."""
    root = _export(tmp_path)
    csv_path = root / "test_rank_1" / OUT / "kernel_details.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    lines[3] = lines[3].rstrip("\r\n") + ",extra\n"
    csv_path.write_text("".join(lines))
    header, rows = next(csv.reader([lines[0]])), list(csv.reader(lines[1:]))
    name = rows[2][header.index("Name")]
    res = analyze([root / "test_rank_1"], workers=1)
    assert (
        f"{csv_path} line 4: {len(header) + 1} fields where the header has {len(header)} ({name}); the row is "
        "left out (its columns cannot be told apart)"
    ) in res.warnings
    kept = [r for i, r in enumerate(rows) if i != 2]
    compute = [r for r in kept if r[header.index("Accelerator Core")] != "HCCL"]  # the op table's rows
    assert sum(row["count"] for row in res.ranks[0].ops) == len(compute)
    assert sum(res.ranks[0].collectives[t]["count"] for t in res.ranks[0].collectives) == len(kept) - len(
        compute
    )

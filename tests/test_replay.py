"""The step replay (analysis/crossrank/replay.py, docs/replay.md) against independent references: a hand-built 3-rank
CPU/gloo trace whose critical path, slacks and what-ifs are worked out by hand below; identity replay and
clock invariance on profiled CPU/gloo runs (2 ranks: the session's A/B run; 4 ranks: the clean arm of the
session's known-delay A/B, conftest's ``delay_ab_run``), each collective's replayed end checked against its gloo
span's end read from the raw trace; a hand-built sleep where a unit's range opens, charged to that unit."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from helpers import cuda_event, replay_of, run_cli, write_cuda_rank

# ------------------------------------------------------------------------------------------ hand-built
# Times in µs after T0 (each rank's ProfilerStep#1 starts at T0). Per rank: compute A [0, a), the launch
# of all_reduce #1 [a, a+1), its gloo span from a+1 (launch latency 1) to the end of the transfer; the
# thread blocks (no operator) until then; a host gap h; compute B; the launch of all_reduce #2 [.., +1);
# blocking again; compute C; the step ends with C.
#   rank 0: a=100, h=0,  b=20, c=30
#   rank 1: a=50,  h=0,  b=60, c=10
#   rank 2: a=70,  h=50, b=20, c=27
# all_reduce #1: arrivals 101, 51, 71: last rank 0, transfer 10 → all end at 111.
# all_reduce #2: rank 0 arrives 111+20+1 = 132, rank 1 111+60+1 = 172, rank 2 111+50+20+1 = 182: last rank 2
#   (a different rank than #1), transfer 10 → all end at 192. C: rank 0 ends 222, rank 1 202, rank 2 219.
# Critical path from 222 back: C_0 (30) ← transfer #2 on rank 0 (10) ← last arrival rank 2: launch latency
# (1) ← B_2 (20) ← host gap of rank 2 (50) ← transfer #1 on rank 2 (10) ← last arrival rank 0: launch
# latency (1) ← A_0 (100) ← rank 0's step start. Σ = 222.
# Places: layers.0 forward = [0, 111), layers.1 forward = [111, 192), layers.1 backward = [192, end).
T0 = 1_000.0
HAND = {0: (100, 0, 20, 30), 1: (50, 0, 60, 10), 2: (70, 50, 20, 27)}
E1, E2 = 111.0, 192.0
EXPECTED_CRITICAL = {
    (0, "layers.0", "forward", "compute"): 100.0,
    (2, "layers.1", "forward", "host_gap"): 50.0,
    (0, "layers.1", "backward", "compute"): 30.0,
    (2, "layers.1", "forward", "compute"): 20.0,
    (2, "layers.0", "forward", "transfer"): 10.0,
    (0, "layers.1", "forward", "transfer"): 10.0,
    (0, "layers.0", "forward", "launch"): 1.0,
    (2, "layers.1", "forward", "launch"): 1.0,
}
# Slack (deadline 222): C_1 [192, 202) 20; C_2 [192, 219) 3 (near-critical: < 2 % of 222 = 4.44);
# B_1 [111, 171): its arrival at #2 may come as late as 182 - 1 → B_1 may end at 181: 10;
# A_1 [0, 50): arrival at #1 may be as late as 101 - 1 → 50; A_2 [0, 70): 30; B_0 [111, 131): 181 - 131 = 50.
EXPECTED_SLACK = {
    (1, "layers.1", "backward", "compute"): 20.0,
    (2, "layers.1", "backward", "compute"): 3.0,
    (1, "layers.1", "forward", "compute"): 10.0,
    (1, "layers.0", "forward", "compute"): 50.0,
    (2, "layers.0", "forward", "compute"): 30.0,
    (0, "layers.1", "forward", "compute"): 50.0,
}


def _x(name: str, ts: float, dur: float, tid: int = 100, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": T0 + ts, "dur": dur}


def _hand_rank(rank: int) -> dict:
    a, h, b, c = HAND[rank]
    arrive1 = a + 1
    b0 = E1 + h
    launch2 = b0 + b
    end = E2 + c
    ann = "user_annotation"
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 1,
            "tid": 200,
            "args": {"name": "thread 200 (pt_gloo_runloop)"},
        },
        _x("ProfilerStep#1", 0, end, cat=ann),
        _x("fsdpbench::forward::layers.0", 0, E1, cat=ann),
        _x("aten::mm", 0, a),
        _x("c10d::allreduce_", a, 1),
        _x("gloo:all_reduce", arrive1, E1 - arrive1, tid=200, cat=ann),
        _x("fsdpbench::forward::layers.1", E1, E2 - E1, cat=ann),
        _x("aten::mm", b0, b),
        _x("c10d::allreduce_", launch2, 1),
        _x("gloo:all_reduce", launch2 + 1, E2 - launch2 - 1, tid=200, cat=ann),
        _x("fsdpbench::backward::layers.1", E2, c, cat=ann),
        _x("aten::mm", E2, c),
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 3},
        "traceEvents": ev,
    }


@pytest.fixture(scope="module")
def hand_traces(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hand3")
    for r in HAND:
        (out / f"rank{r}.trace.json").write_text(json.dumps(_hand_rank(r)))
    return out


_replay = replay_of


def test_hand_built_identity_path_and_slack(hand_traces):
    rp = _replay([hand_traces])
    steps = {r["rank"]: (r["measured_us"], r["replayed_us"]) for r in rp["ranks"]}
    assert steps == {0: (222.0, 222.0), 1: (202.0, 202.0), 2: (219.0, 219.0)}
    assert rp["error_pct"] == {"median": 0.0, "max": 0.0}
    assert rp["unexplained_slack_us"] == 0.0
    got = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["us"] for x in rp["critical"]}
    assert got == pytest.approx(EXPECTED_CRITICAL)
    assert [x["us"] for x in rp["critical"]] == sorted((x["us"] for x in rp["critical"]), reverse=True)
    assert sum(got.values()) == pytest.approx(rp["figure"]["step_us"]) == pytest.approx(222.0)
    slack = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["slack_us"] for x in rp["slack"]}
    for key, value in EXPECTED_SLACK.items():
        assert slack[key] == pytest.approx(value), key
    for key in EXPECTED_CRITICAL:
        assert slack[key] == 0.0
    near = {(x["rank"], x["unit"], x["phase"], x["kind"]) for x in rp["near_critical"]}
    assert (2, "layers.1", "backward", "compute") in near
    assert not near & set(EXPECTED_CRITICAL)
    assert all(x["slack_us"] < 0.02 * 222 for x in rp["near_critical"])
    # the rendezvous: #1's last arrival is rank 0, #2's rank 2, transfers start there
    rv = rp["figure"]["rendezvous"]
    assert [x["last_rank"] for x in rv] == [0, 2]
    assert [x["transfer_start_us"] for x in rv] == [101.0, 182.0]
    assert [x["transfer_end_us"] for x in rv] == [111.0, 192.0]
    by_phase = {p["phase"]: p["us"] for p in rp["by_phase"]}
    assert by_phase == pytest.approx({"forward": 192.0, "backward": 30.0})


def test_hand_built_what_ifs(hand_traces):
    # halving every all_reduce: #1 ends at 106, #2 arrivals 127, 167, 177 → ends 182; C_0 → 212
    # removing rank 2's 50 µs host gap: #2 arrivals 132, 172, 132 → rank 1 now last: 172 + 10 + 30 = 212,
    #   10 µs saved, not 50 (the others' slack masks the rest)
    # a 40 µs delay on rank 1 at layers.1 forward: #2 arrives 212 → ends 222, C_0 ends 252
    rp = _replay(
        [hand_traces],
        "scale:all_reduce:0.5",
        "delay:2:layers.1:forward:-0.05",
        "delay:1:layers.1:forward:0.04",
    )
    pred = [w["predicted_step_us"] for w in rp["what_if"]]
    assert pred == pytest.approx([212.0, 212.0, 252.0])
    assert all(w["source"] == "replay" for w in rp["what_if"])
    changed = {
        (c["rank"], c["unit"], c["phase"], c["kind"]): c["delta_us"] for c in rp["what_if"][1]["changed"]
    }
    assert changed[(2, "layers.1", "forward", "host_gap")] == pytest.approx(-50.0)


def test_bad_edit_is_a_clear_error(hand_traces):
    proc = run_cli("analyze", str(hand_traces), "--what-if", "scale:all_gather")
    assert proc.returncode != 0
    assert "--what-if 'scale:all_gather'" in proc.stderr
    proc = run_cli("analyze", str(hand_traces), "--what-if", "delay:7:layers.0:forward:5")
    assert proc.returncode != 0 and "no rank 7" in proc.stderr


def test_critical_path_cli_and_perfetto_trace(hand_traces, tmp_path):
    out = tmp_path / "r.json"
    trace = tmp_path / "replay.perfetto.json"
    proc = run_cli(
        "analyze", str(hand_traces), "--critical-path", "--replay-trace", str(trace), "--json", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Critical path per phase" in proc.stdout and "Top places on the critical path" in proc.stdout
    # the place that determines the step first: rank 2's layers.1 forward, 50 µs beyond the others (0.050 ms)
    first = proc.stdout.index("Which place determines the step")
    assert first < proc.stdout.index("Critical path per phase")
    rows = [line.split("│")[1:5] for line in proc.stdout[first:].splitlines() if line.startswith("│")][:3]
    assert [[c.strip() for c in r] for r in rows] == [
        ["2", "layers.1", "forward", "0.050"],
        ["0", "layers.0", "forward", "0.040"],
        ["0", "layers.1", "backward", "0.011"],
    ]
    doc = json.loads(trace.read_text())["traceEvents"]
    flows = [e for e in doc if e.get("cat") == "critical_path"]
    assert flows[0]["ph"] == "s" and flows[-1]["ph"] == "f"
    tasks = [e for e in doc if e.get("ph") == "X"]
    assert {e["args"]["kind"] for e in tasks} >= {"compute", "transfer", "host_gap"}
    on = sum(e["dur"] for e in tasks if e["args"]["on_path"])
    assert on == pytest.approx(222.0 - 2.0)  # the path's tasks; the two launch latencies are edges
    assert json.loads(out.read_text())["replay"]["error_pct"]["max"] == 0.0


# ------------------------------------------------------------------------------------------ profiled runs
def _gloo_ends(path: Path) -> list[int]:
    """Plain-Python reading of a Kineto CPU trace: the ends (ns) of its top-level gloo:* spans by start."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    spans = [e for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("gloo:")]
    spans.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    top, reach = [], {}
    for e in spans:
        if e["ts"] >= reach.get(e["tid"], -1.0):
            top.append(e)
            reach[e["tid"]] = e["ts"] + e["dur"]
    top.sort(key=lambda e: e["ts"])
    return [round(e["ts"] * 1000) + round(e["dur"] * 1000) for e in top]


def _check_identity(folder: Path) -> dict:
    from fsdpbench.analysis import analyze

    res = analyze([str(folder)], workers=1)
    rp = res.replay
    assert rp is not None, res.replay_note
    errs = [abs(r["replayed_us"] - r["measured_us"]) / r["measured_us"] for r in rp["ranks"]]
    assert statistics.median(errs) <= 0.02 and max(errs) <= 0.05, rp["ranks"]
    step_ns = rp["figure"]["step_us"] * 1000
    total = sum(r["measured_us"] for r in rp["ranks"])
    assert rp["unexplained_slack_us"] <= 0.05 * total
    assert rp["queue_gap_us"] == 0.0  # gloo spans follow their launch or their worker thread: no gap kept
    g, s, _ = res._replay
    for i, gr in enumerate(g.graphs):
        src = next(Path(r.source) for r in res.ranks if r.rank == gr.rank)
        raw = _gloo_ends(src)
        window = [e for e in raw if gr.ws_ns <= e <= gr.we_ns + 1]
        mine = sorted(int(x) for x in gr.c_end.tolist())
        assert mine == window
        replayed = s.end[gr.c_xfer + g.offset[i]] + g.offset_ns[i]  # back on the rank's own clock
        measured = gr.c_end
        assert (abs(replayed - measured) <= 0.01 * step_ns).all()
    return rp


def test_identity_replay_two_ranks(profiled_ab_run):
    for arm in sorted((profiled_ab_run / "profiles").iterdir()):
        _check_identity(arm)


@pytest.fixture(scope="module")
def four_rank_run(delay_ab_run) -> Path:
    """A profiled 4-rank gloo run: the session's known-delay A/B (conftest's ``delay_ab_run``, tiny, 2
    layers), whose clean arm ``torch`` these checks read."""
    return delay_ab_run


def test_identity_replay_four_ranks(four_rank_run):
    rp = _check_identity(four_rank_run / "profiles" / "torch")
    assert len(rp["ranks"]) == 4


def _shifted_copy(src: Path, dst: Path, shifts_us: dict[int, float]) -> None:
    for f in sorted(src.rglob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        rank = doc["distributedInfo"]["rank"]
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + shifts_us[rank]
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(out, "wt") as fh:
            json.dump(doc, fh)


def test_clock_invariance(four_rank_run, tmp_path):
    from fsdpbench.analysis import analyze

    src = four_rank_run / "profiles" / "torch"
    shifts = {0: 0.0, 1: -17_000.0, 2: 4_000.0, 3: 19_500.0}  # µs
    _shifted_copy(src, tmp_path / "shifted", shifts)
    a = analyze([str(src)], workers=1).replay
    b = analyze([str(tmp_path / "shifted")], workers=1).replay
    assert b["figure"]["step_us"] == pytest.approx(a["figure"]["step_us"], rel=1e-3)
    for x, y in zip(a["ranks"], b["ranks"], strict=True):
        assert y["replayed_us"] == pytest.approx(x["replayed_us"], rel=1e-3)
    ca = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["us"] for x in a["critical"]}
    cb = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["us"] for x in b["critical"]}
    assert ca.keys() == cb.keys()
    step = a["figure"]["step_us"]
    for k, v in ca.items():
        assert abs(cb[k] - v) <= 1e-3 * step, k
    path_a = [(p[0], p[1]) for p in a["figure"]["path"]]
    path_b = [(p[0], p[1]) for p in b["figure"]["path"]]
    assert path_a == path_b


# A hand-built CUDA step (µs after T0): the training thread launches kernel_1..3 onto stream 7 at 1, 4 and 7
# (2 µs calls), then blocks in cudaDeviceSynchronize [10, 190); the step is [0, 200). kernel_1 [20, 120): the
# stream was idle at its launch (launch latency 19); kernel_2 [125, 155) and kernel_3 [157, 187) were
# launched while the stream was busy and start 5 and 2 µs after their stream's previous kernel: queue gaps.
# Path from 200: host gap [190, 200) 10 ← the sync's 3 µs after kernel_3 ← kernel_3 30 ← gap 2 ← kernel_2 30
# ← gap 5 ← kernel_1 100 ← launch latency 19 ← host gap [0, 1) 1 = 200. scale:compute:0.5: kernel_1
# [20, 70), kernel_2 starts 70 + 5 (the gap is fixed) [75, 90), kernel_3 [92, 107), the sync ends 110, the
# step 120. scale:queue_gap:0: 200 - 7 = 193.
def _cuda_hand(folder: Path) -> Path:
    ev = [
        cuda_event("ProfilerStep#1", 0, 200, "user_annotation"),
        cuda_event("cudaDeviceSynchronize", 10, 180, "cuda_runtime", correlation=99),
    ]
    for c, (launch, start, dur) in enumerate([(1, 20, 100), (4, 125, 30), (7, 157, 30)], start=1):
        ev.append(cuda_event("cudaLaunchKernel", launch, 2, "cuda_runtime", correlation=c))
        ev.append(
            cuda_event(f"kernel_{c}", start, dur, "kernel", tid=7, pid=0, correlation=c, stream=7, device=0)
        )
    return write_cuda_rank(folder, ev)


def test_queue_gap_by_hand(tmp_path):
    rp = _replay([_cuda_hand(tmp_path / "cuda")], "scale:compute:0.5", "scale:queue_gap:0")
    assert rp["ranks"][0]["measured_us"] == 200.0 and rp["ranks"][0]["replayed_us"] == 200.0
    assert rp["unexplained_slack_us"] == 0.0  # before the queue_gap edge: 7 µs, replayed 193
    assert rp["queue_gap_us"] == 7.0
    kinds = {x["kind"]: x["us"] for x in rp["critical"]}
    assert kinds == {"compute": 160.0, "launch": 19.0, "host_gap": 11.0, "queue_gap": 7.0, "sync": 3.0}
    # an edge's latency on the path: slack 0 there, as a launch latency's
    assert [x["slack_us"] for x in rp["slack"] if x["kind"] == "queue_gap"] == [0.0]
    predicted = {w["edit"]: w["predicted_step_us"] for w in rp["what_if"]}
    assert predicted == {"scale:compute:0.5": 120.0, "scale:queue_gap:0": 193.0}


def test_replay_says_what_it_cannot_explain():
    rp = _replay([Path(__file__).parent / "fixtures" / "ascend_server_2rank"])
    assert rp["error_pct"]["max"] > 50.0
    assert rp["unexplained_slack_us"] > 0.5 * sum(r["measured_us"] for r in rp["ranks"])
    # 2 of the HCCL group's 8 ranks: the collectives' part is said apart from the rest
    split = rp["unexplained_slack_split_us"]
    assert split["peers_outside"] > 0 and split["collectives"] == 0.0
    assert sum(split.values()) == pytest.approx(rp["unexplained_slack_us"], abs=1e-3)


def test_regroup_and_prefetch_edits_replay(four_rank_run):
    """The regroup and prefetch edits replay on a real 4-rank profile and say what they did (their accuracy is
    the calibration's to judge: docs/replay.md)."""
    rp = _replay([four_rank_run / "profiles" / "torch"], "regroup:all:unit", "prefetch:layers.1:1")
    regroup, prefetch = rp["what_if"]
    assert regroup["source"] == prefetch["source"] == "replay"
    # the merged collectives are priced by the α–β fit of this run's own transfers, which on a loaded box can price
    # one above its members (α = 12 ms, β = 0 for the reduce-scatters of one CI run: +1.7 % on the step); the
    # edit's numbers are checked by hand in test_regroup_by_hand, its accuracy by the calibration
    assert regroup["predicted_step_us"] > 0 and "α + β·bytes" in regroup["note"]
    assert "collectives merged into" in regroup["note"]
    assert "extra memory kept live" in prefetch["note"] and "MiB per rank" in prefetch["note"]
    assert prefetch["predicted_step_us"] > 0


# ------------------------------------------------------------------------------------------ regroup by hand
# Two ranks, three all_reduces in layers.0's forward, issued one after the other (each launch waits for the
# previous one: gloo blocks), of 1000, 2000 and 4000 floats (4, 8, 16 kB) taking 14, 18 and 26 µs: exactly
# α + β·bytes with α = 10 µs, β = 0.001 µs/B. Rank 0 computes 100 µs first, rank 1 60; #1: arrivals 101, 61
# → ends 115; #2 launched at 115, arrives 116, ends 134; #3 launched at 134, arrives 135, ends 161; then C
# (layers.0 backward): rank 0 10 µs → 171, rank 1 30 µs → 191.
# regroup:all_reduce:unit merges the three into one of 10 + 0.001 × 28,000 = 38 µs, launched by one call: the
# merged-away members' launch calls (1 µs each) go, and the threads no longer block between members. Rank 0
# launches all three at 100 (the last call 100 → 101), each arriving 1 µs after its launch point: 101; rank 1
# at 61. The merged transfer starts at the last arrival, 101, ends 139: C_0 139 → 149, C_1 → 169.
SIZES = (1000, 2000, 4000)
XFER = (14, 18, 26)


def _regroup_rank(rank: int) -> dict:
    a, c = (100, 10) if rank == 0 else (60, 30)
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 1,
            "tid": 200,
            "args": {"name": "thread 200 (pt_gloo_runloop)"},
        },
        _x("aten::mm", 0, a),
    ]
    launch, arrive = a, a + 1
    last = {0: 101}  # the last arrival of each all_reduce (rank 0 first, then both at once)
    end = 0
    for k, (n, x) in enumerate(zip(SIZES, XFER, strict=True)):
        start = last.get(k, arrive)
        end = start + x
        op = _x("c10d::allreduce_", launch, 1)
        op["args"] = {"Input Dims": [[n]], "Input type": ["float"]}
        ev += [op, _x("gloo:all_reduce", arrive, end - arrive, tid=200, cat="user_annotation")]
        launch, arrive = end, end + 1
    ev += [_x("fsdpbench::backward::layers.0", end, c, cat="user_annotation"), _x("aten::mm", end, c)]
    ev += [
        _x("ProfilerStep#1", 0, end + c, cat="user_annotation"),
        _x("fsdpbench::forward::layers.0", 0, end, cat="user_annotation"),
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_regroup_by_hand(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_regroup_rank(r)))
    rp = _replay([tmp_path], "regroup:all_reduce:unit")
    assert {r["rank"]: r["measured_us"] for r in rp["ranks"]} == {0: 171.0, 1: 191.0}
    assert rp["error_pct"]["max"] == 0.0
    w = rp["what_if"][0]
    assert w["predicted_step_us"] == pytest.approx(169.0)
    assert "3 all_reduce collectives merged into 1" in w["note"]
    assert "launch calls removed (0.0 ms per rank)" in w["note"]  # 2 µs per rank
    assert "10.0 µs" in w["note"]


# ------------------------------------------------------------------------------------------ a sleep where a range opens
# Two ranks; rank 1 sleeps where a unit's range opens, as fsdpbench's delay= does (tests/test_delay_truth.py): in
# forward in the host gap before layers.1's first operator (the gap [90, 150) starts before the range opens at
# 100), in backward inside autograd's hook node [181, 227) (the range opens at 186, 5 µs into it; the node is no
# operator to the replay: host gap). Per rank (µs after T0): mm [0, 90); forward layers.0 = [0, 100), layers.1 =
# [100, 181); backward layers.1 = [186, 268), ending with mm [258, 268).
#   rank 0: mm [100, 120), launch [120, 121), arrives 121; hook [181, 187), mm [187, 207), launch, arrives 208
#   rank 1: mm [150, 170), launch [170, 171), arrives 171; hook [181, 227), mm [227, 247), launch, arrives 248
# all_reduce #1: last arrival rank 1 (171), 10 µs → 181; #2: last rank 1 (248), 10 µs → 258; the last mm → 268.
# Critical path through rank 1 up to #2: mm 90 (layers.0 fwd) ← gap [90, 100) 10 (layers.0 fwd) ← sleep
# [100, 150) 50 (layers.1 fwd, host gap) ← mm 20, latency 1, transfer 10 (layers.1 fwd) ← [181, 186) 5 (in no
# range) ← hook [186, 227) 41 (layers.1 bwd, host gap) ← mm 20, latency 1, transfer 10 (layers.1 bwd).
# Before the cut at the range starts: 60 µs of host gap at layers.0 forward and 46 outside, none in layers.1.
# Removing the forward sleep: rank 1 arrives at #1 at 121 with rank 0 → ends 131; backward: rank 0 arrives
# 131 + 6 + 20 + 1 = 158, rank 1 131 + 5 + 41 + 20 + 1 = 198 → 208, step 218: −50. Removing 40 µs of rank 1's
# host gap at layers.1 backward: #2's arrivals 208 and 208 → 218, step 228: −40.
def _sleep_rank(rank: int) -> dict:
    mm1, hook_end = (100, 187) if rank == 0 else (150, 227)
    ann = "user_annotation"
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 200, "args": {"name": "thread 200 (pt_gloo_runloop)"}},
        _x("ProfilerStep#1", 0, 268, cat=ann),
        _x("fsdpbench::forward::layers.0", 0, 100, cat=ann),
        _x("aten::mm", 0, 90),
        _x("fsdpbench::forward::layers.1", 100, 81, cat=ann),
        _x("aten::mm", mm1, 20),
        _x("c10d::allreduce_", mm1 + 20, 1),
        _x("gloo:all_reduce", mm1 + 21, 181 - mm1 - 21, tid=200, cat=ann),
        _x("autograd::engine::evaluate_function: BackwardHookFunctionBackward", 181, hook_end - 181),
        _x("fsdpbench::backward::layers.1", 186, 82, cat=ann),
        _x("aten::mm", hook_end, 20),
        _x("c10d::allreduce_", hook_end + 20, 1),
        _x("gloo:all_reduce", hook_end + 21, 258 - hook_end - 21, tid=200, cat=ann),
        _x("aten::mm", 258, 10),
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_a_sleep_where_a_range_opens_is_charged_to_that_range(tmp_path):
    """The host task that runs across a range's start is cut there (replay_graph.py): the sleep is the unit's, so
    the critical path names it and "remove the delay" finds it (before the cut: no host gap at layers.1 on the
    path, and the removals found none to remove)."""
    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_sleep_rank(r)))
    fwd, bwd = "delay:1:layers.1:forward:-0.05", "delay:1:layers.1:backward:-0.04"
    rp = _replay([tmp_path], fwd, bwd)
    assert rp["figure"]["step_us"] == pytest.approx(268.0)
    crit = {(c["rank"], c["unit"], c["phase"], c["kind"]): c["us"] for c in rp["critical"]}
    assert crit[(1, "layers.0", "forward", "compute")] == pytest.approx(90.0)
    assert crit[(1, "layers.0", "forward", "host_gap")] == pytest.approx(10.0)
    assert crit[(1, "layers.1", "forward", "host_gap")] == pytest.approx(50.0)
    assert crit[(1, "layers.1", "backward", "host_gap")] == pytest.approx(41.0)
    assert crit[(1, "layers.1", "backward", "compute")] == pytest.approx(20.0)
    predicted = {w["edit"]: w["predicted_step_us"] for w in rp["what_if"]}
    assert predicted[fwd] == pytest.approx(218.0)
    assert predicted[bwd] == pytest.approx(228.0)


def test_terminal_shows_the_queue_gaps(tmp_path):
    proc = run_cli("analyze", str(_cuda_hand(tmp_path / "cuda")), "--critical-path", "--replay-trace",
                   str(tmp_path / "r.perfetto.json"), "--no-cache")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "unexplained slack 0.000 ms; 0.007 ms of queue gaps kept as lane latencies" in text
    assert "queue_gap" in text  # a column of the path per phase


# ------------------------------------------------------------------------------------------ which place determines the step
# The hand-built 3-rank step above, per (rank, unit, phase) on the path; per segment (cut at the rank's arrivals
# at the place's collectives) and kind: the rank's task time there, the median of the other two ranks' in the
# same segment, and the path's time (waits left out). Each place here has one collective: segment 0 before
# its arrival, segment 1 (the transfer) after.
#   (2, layers.1, forward): segment 0: host gap 50 vs median(0, 0) = 0, on the path 50 → 50; compute 20 vs
#     median(20, 60) = 40 → 0; launch call 1 vs 1 → 0; segment 1: transfer 10 vs 10 → 0. Excess 50 (own 81,
#     peers 0+40+1+10 = 51).
#   (0, layers.0, forward): compute 100 vs median(50, 70) = 60, on the path 100 → 40; the rest equal → 40.
#   (0, layers.1, backward): compute 30 vs median(10, 27) = 18.5, on the path 30 → 11.5.
#   (0, layers.1, forward) and (2, layers.0, forward): only their transfers (10, as every rank's) on the path → 0.
# The largest (rank, unit, phase, kind) on the path is rank 0's compute at layers.0 (100 µs, EXPECTED_CRITICAL);
# the place that holds the others up most is rank 2's host gap at layers.1 forward. ``critical_us`` is the
# place's time in ``critical`` (with the path's 1 µs launch latencies, which are edges, not tasks).
EXPECTED_EXCESS = [
    ((2, "layers.1", "forward"), 50.0, 71.0, 81.0, 51.0),
    ((0, "layers.0", "forward"), 40.0, 101.0, 111.0, 71.0),
    ((0, "layers.1", "backward"), 11.5, 30.0, 30.0, 18.5),
    ((0, "layers.1", "forward"), 0.0, 10.0, 31.0, 76.0),
    ((2, "layers.0", "forward"), 0.0, 10.0, 81.0, 86.0),
]


def test_hand_built_place_that_determines_the_step(hand_traces):
    rp = _replay([hand_traces])
    got = [
        ((x["rank"], x["unit"], x["phase"]), x["excess_us"], x["critical_us"], x["own_us"], x["peers_us"])
        for x in rp["critical_excess"]
    ]
    assert [g[0] for g in got] == [e[0] for e in EXPECTED_EXCESS]
    for g, e in zip(got, EXPECTED_EXCESS, strict=True):
        assert g[1:] == pytest.approx(e[1:]), g[0]
    # every place with time on the path is listed once, with all its kinds' time
    on_path: dict[tuple, float] = {}
    for c in rp["critical"]:
        on_path[(c["rank"], c["unit"], c["phase"])] = (
            on_path.get((c["rank"], c["unit"], c["phase"]), 0.0) + c["us"]
        )
    assert {g[0]: g[2] for g in got} == pytest.approx(on_path)


def test_one_rank_has_no_peers_its_excess_is_its_tasks_time_on_the_path(hand_traces, tmp_path):
    """Rank 0 of the hand-built step alone: nothing to compare with, so a place's excess is its tasks' time on
    the path: layers.0 forward 100 compute + 10 transfer = 110 (the 1 µs launch latency is an edge of the
    path, counted in ``critical`` but no task); layers.1 forward 20 compute + 60 transfer (alone, #2's gloo
    span from rank 0's own arrival at 132 to 192 is all transfer) = 80; layers.1 backward 30."""
    (tmp_path / "rank0.trace.json").write_text((hand_traces / "rank0.trace.json").read_text())
    rp = _replay([tmp_path])
    got = {(x["rank"], x["unit"], x["phase"]): x["excess_us"] for x in rp["critical_excess"]}
    assert got == pytest.approx(
        {
            (0, "layers.0", "forward"): 110.0,
            (0, "layers.1", "forward"): 80.0,
            (0, "layers.1", "backward"): 30.0,
        }
    )
    assert all(x["peers_us"] == 0.0 for x in rp["critical_excess"])


# Segments, not whole places: 2 ranks, one place (layers.0 forward, [0, 122)), two all-reduces.
#   rank 0: host gap [0, 30) (a sleep where the range opens), compute [30, 40), launch #1 [40, 41), transfer
#     #1 [41, 51), compute [51, 61), launch #2 [61, 62), waits, transfer #2 [102, 112), compute [112, 122).
#   rank 1: compute [0, 10), launch #1 [10, 11), waits, transfer #1 [41, 51), host gap [51, 91), compute
#     [91, 101), launch #2 [101, 102), transfer #2 [102, 112), compute [112, 122).
# #1: last arrival rank 0 at 41; #2: rank 1 at 102. Path from 122: rank 0's compute (10) ← transfer #2 (10) ←
# rank 1's launch latency (1) ← its launch call (1), compute (10), host gap (40) ← transfer #1 (10) ← rank
# 0's launch latency (1) ← its launch call (1), compute (10), host gap (30). Whole place: rank 0 has 30 µs of
# host gap against rank 1's 40 (excess 0), rank 1 40 against 30 (10). Per segment: rank 0's segment 0 has
# host gap 30 against 0 → 30; rank 1's segment 1 host gap 40 against 0 → 40 (compute, launch calls and
# transfers equal). Both are what removing each gap saves (30: #1 then ends at 21 for rank 1's chain, the
# step at 92; 40: #2's arrivals both at 62, the step at 82).
SEG = {
    0: [("gap", 0, 30), ("aten::mm", 30, 10), ("c10d::allreduce_", 40, 1), ("gloo:all_reduce", 41, 10),
        ("aten::mm", 51, 10), ("c10d::allreduce_", 61, 1), ("gloo:all_reduce", 62, 50), ("aten::mm", 112, 10)],
    1: [("aten::mm", 0, 10), ("c10d::allreduce_", 10, 1), ("gloo:all_reduce", 11, 40), ("gap", 51, 40),
        ("aten::mm", 91, 10), ("c10d::allreduce_", 101, 1), ("gloo:all_reduce", 102, 10), ("aten::mm", 112, 10)],
}  # fmt: skip


def _seg_rank(rank: int) -> dict:
    ann = "user_annotation"
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 200, "args": {"name": "thread 200 (pt_gloo_runloop)"}},
        _x("ProfilerStep#1", 0, 122, cat=ann),
        _x("fsdpbench::forward::layers.0", 0, 122, cat=ann),
    ]  # fmt: skip
    for name, ts, dur in SEG[rank]:
        if name.startswith("gloo:"):
            ev.append(_x(name, ts, dur, tid=200, cat=ann))
        elif name != "gap":
            ev.append(_x(name, ts, dur))
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_excess_is_compared_segment_by_segment(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_seg_rank(r)))
    rp = _replay([tmp_path], "delay:0:layers.0:forward:-0.03", "delay:1:layers.0:forward:-0.04")
    assert rp["figure"]["step_us"] == pytest.approx(122.0)
    got = {(x["rank"], x["unit"], x["phase"]): x["excess_us"] for x in rp["critical_excess"]}
    assert got == pytest.approx({(1, "layers.0", "forward"): 40.0, (0, "layers.0", "forward"): 30.0})
    assert [x["rank"] for x in rp["critical_excess"]] == [1, 0]
    assert [w["predicted_step_us"] for w in rp["what_if"]] == pytest.approx([92.0, 82.0])


# ------------------------------------------------------------------------------------------ remove is add's inverse
def _two_gap_rank(rank: int) -> dict:
    """2 ranks, one place (layers.0 forward): rank 0 computes 100 µs; rank 1 has a 10 µs host gap where the
    range opens, 20 µs compute, a 60 µs host gap, 10 µs compute; both then all-reduce (10 µs) and compute
    10 µs outside the range."""
    ann = "user_annotation"
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 200, "args": {"name": "thread 200 (pt_gloo_runloop)"}},
        _x("ProfilerStep#1", 0, 121, cat=ann),
        _x("fsdpbench::forward::layers.0", 0, 111, cat=ann),
        *([_x("aten::mm", 0, 100)] if rank == 0 else [_x("aten::mm", 10, 20), _x("aten::mm", 90, 10)]),
        _x("c10d::allreduce_", 100, 1),
        _x("gloo:all_reduce", 101, 10, tid=200, cat=ann),
        _x("aten::mm", 111, 10),
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def test_removing_a_delay_takes_it_where_adding_puts_it(tmp_path):
    """ "add" puts a delay in the place's first host gap (where a delay at the start of a unit's phase
    sleeps); "remove" takes host time from there first, so removing what was added gives back the very
    graph, not a graph with the place's longest gap (here 60 µs) shortened instead."""
    import numpy as np

    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.crossrank import replay

    for r in (0, 1):
        (tmp_path / f"rank{r}.trace.json").write_text(json.dumps(_two_gap_rank(r)))
    res = analyze([str(tmp_path)], workers=1)
    g = res._replay[0]
    added = replay.apply_edit(g, replay.parse_edit("delay:1:layers.0:forward:0.04"))
    assert int(added.dur.sum() - g.dur.sum()) == 40_000
    back = replay.apply_edit(added, replay.parse_edit("delay:1:layers.0:forward:-0.04"))
    assert np.array_equal(back.dur, g.dur)


def test_segments_on_a_long_step_with_many_places():
    """The joined graph keeps places as int32; a segment key is place × span + start in ns, which passes
    int32's range on any step longer than ~2 s / places (here 1.5 s and 12 places). Segments against a
    plain count: a task's segment is the number of its rank's arrivals at its place that start no later."""
    from types import SimpleNamespace

    import numpy as np

    from fsdpbench.analysis.crossrank.replay_excess import _segments

    rng = np.random.default_rng(3)
    n = 400
    place = rng.integers(0, 12, n).astype(np.int32)
    meas = rng.integers(0, 1_500_000_000, n).astype(np.int64)
    rank = np.zeros(n, dtype=np.int32)
    arrivals = [int(i) for i in rng.choice(n, 40, replace=False)]
    g = SimpleNamespace(
        place=place, meas=meas, rank=rank, dur=np.ones(n), rendezvous=[{"arrivals": arrivals}]
    )
    got = _segments(g)
    want = [sum(1 for a in arrivals if place[a] == place[t] and meas[a] <= meas[t]) for t in range(n)]
    assert got.tolist() == want


@pytest.mark.parametrize("name", ["hta_ddp_step", "ascend_level0"])
def test_the_graph_cache_gives_back_every_array_with_its_queue_gaps(name):
    """The replay graph's cache (``to_bytes``) stores a kept queue gap as its difference from its edge's
    destination start − source end (0 where the gap was taken from those very times); ``from_bytes`` gives
    back every array exactly, the gaps included."""
    import dataclasses

    import numpy as np

    from fsdpbench.analysis import analyze
    from fsdpbench.analysis.crossrank import replay_graph as RG
    from fsdpbench.analysis.crossrank import replay_pack
    from fsdpbench.analysis.crossrank.replay_schedule import _rank_graph

    res = analyze([str(Path(__file__).parent / "fixtures" / name)], workers=1)
    for r in res.ranks:
        g = _rank_graph(r)  # built again from the rank's trace (the replay released the worker's)
        qg = g.ekind == RG.K_QUEUE_GAP
        assert qg.any() and (g.ew[qg] > 0).all() and (g.ew[qg] < RG.QUEUE_GAP_NS).all()
        back = replay_pack.from_bytes(replay_pack.to_bytes(g))
        for f in dataclasses.fields(g):
            a, b = getattr(g, f.name), getattr(back, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f.name
            else:
                assert a == b, f.name

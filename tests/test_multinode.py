"""Several nodes without a shared filesystem: node 0's run folder gets every node's files through the
collect step, node 0 decides what runs, launch ports follow the plan, a failure names its first cause,
and the two nodes train as one world (losses against unsharded training, tests/reference.py).

The two "nodes" are two ``fsdpbench run`` processes on this machine with separate ``--out`` folders,
meeting on loopback (one rank each). References: the files each node wrote (hashed here), the fault
injected by the test itself, and torchrun's own report text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fsdpbench.config import RunConfig
from fsdpbench.errors import ConfigError
from fsdpbench.results import run_folder
from fsdpbench.run import collect, failures, summarize
from fsdpbench.run.launcher import launch_plan, plan_ports, torchrun_command
from helpers import FAKE_LAUNCH_FILES, run_cli
from reference import LR, SEQ, reference_training

NODE_ARGS = [
    "run",
    "--arm",
    "torch",
    "--nnodes",
    "2",
    "--nproc",
    "1",
    "--seq-len",
    str(SEQ),
    "--lr",
    str(LR),
    "--warmup",
    "0",
    "--steps",
    "2",
    "--profile",
    "--timeout",
    "60",
    "--no-report",
]
KILL_RANK1_ROUND0 = "kill:torch:0:1:0"

# torchrun 2.13's report of a rank killed by SIGKILL (node 1) and of its peer's gloo error (node 0)
TORCHRUN_KILLED = """\
E1203 22:07:12.249000 9601 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) \
local_rank: 0 (pid: 9672) of binary: /usr/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=====================================================
w.py FAILED
-----------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
-----------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_22:07:12
  host      : node1
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 9672)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 9672
=====================================================
"""
GLOO_ERROR = {
    "rank": 0,
    "type": "RuntimeError",
    "message": "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer",
    "oom": False,
    "time": 1.0,  # earlier than the kill is observed: gloo sees the closed socket at once
    "traceback": "Traceback...\nRuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [127.0.0.1]:45474",
}


# --------------------------------------------------------------------------------------------
# first cause (no launch)
# --------------------------------------------------------------------------------------------


def test_a_signal_death_outranks_an_earlier_collective_transport_error(tmp_path):
    run_folder.write_json(tmp_path / "error_rank0.json", GLOO_ERROR)
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "torchrun.log").write_text(TORCHRUN_KILLED)
    found = failures.launch_failures(tmp_path, node=0)
    assert [(f.rank, f.node, f.kind) for f in found] == [(1, 1, "signal"), (0, 0, "collective")]
    assert (found[0].signal, found[0].signal_name, found[0].exit_code) == (9, "SIGKILL", -9)
    message = failures.explain(tmp_path, 1, nodes=True)
    first, _, rest = message.partition(" — then, as consequences: ")
    assert first == "rank 1 (node 1) was killed by signal 9 (SIGKILL)"
    assert rest.startswith("rank 0 (node 0) RuntimeError (Connection closed by peer")


def test_time_breaks_ties_and_torchruns_sigterm_of_survivors_comes_last(tmp_path):
    for rank, when in ((2, 5.0), (3, 4.0)):
        run_folder.write_json(
            tmp_path / f"error_rank{rank}.json",
            {"rank": rank, "type": "ValueError", "message": f"bad {rank}", "time": when},
        )
    terminated = TORCHRUN_KILLED.replace("-9 (pid: 9672)  (SIGKILL)", "-15 (pid: 9672)  (SIGTERM)").replace(
        "Signal 9 (SIGKILL)", "Signal 15 (SIGTERM)"
    )
    (tmp_path / "torchrun.log").write_text(terminated)
    found = failures.launch_failures(tmp_path)
    assert [(f.rank, f.kind) for f in found] == [(3, "exception"), (2, "exception"), (1, "terminated")]
    record = failures.failure_record(tmp_path)
    assert record["first_cause"]["rank"] == 3 and record["first_cause"]["message"] == "bad 3"
    assert [c["rank"] for c in record["consequences"]] == [2, 1]


def test_the_exception_is_named_by_its_last_traceback_line():
    tb = "Traceback (most recent call last):\n  File x\nKeyError: 'layers.0.weight'\n"
    assert failures._last_line({"type": "KeyError", "message": "x", "traceback": tb}) == "'layers.0.weight'"


# --------------------------------------------------------------------------------------------
# coordinates and the collect step's pure parts
# --------------------------------------------------------------------------------------------


def _two_node_config(node: int, **more) -> RunConfig:
    overrides = {
        "arms": "torch,torch:prefetch=1",
        "nnodes": 2,
        "node_rank": node,
        "rounds": 2,
        "profile": True,
        "separate_profile": True,
    }
    return RunConfig.from_sources(env={}, overrides={"rdzv_endpoint": "10.0.0.1:29400", **overrides, **more})


def test_launch_ports_come_from_the_plan_not_from_what_a_node_ran():
    order = [
        {"round": 0, "arm": "a"},
        {"round": 0, "arm": "b"},
        {"round": 1, "arm": "b"},
        {"round": 1, "arm": "a"},
    ]
    plan = launch_plan(order, ["a", "b"], profile=True)
    ports = {key: plan_ports(29400, plan, *key) for key in plan}
    assert ports[("a", 0)] == (29401, 29402) and ports[("b", run_folder.PROFILE_ROUND)] == (29411, 29412)
    used = [p for pair in ports.values() for p in pair]
    assert len(set(used)) == len(used) and 29400 not in used  # the base is the plan step's
    # a resume that runs only ("b", 1) uses the same port as the full run did
    assert plan_ports(29400, plan, "b", 1) == ports[("b", 1)]


def test_master_port_with_several_nodes_binds_to_the_rendezvous_host(tmp_path):
    cfg = _two_node_config(1, master_port=31000)
    cmd = torchrun_command(cfg, tmp_path / "s.json", tmp_path / "logs", None)
    assert "--rdzv-endpoint=10.0.0.1:31000" in cmd and not any("127.0.0.1" in c for c in cmd)
    with pytest.raises(ConfigError, match="--nnodes > 1 needs --rdzv-endpoint"):
        RunConfig.from_sources(env={}, overrides={"arms": "torch", "nnodes": 2, "master_port": 31000})


def test_collect_header_leaves_a_too_large_file_in_place_and_hashes_the_rest(tmp_path):
    small, big = tmp_path / "small.log", tmp_path / "big.json.gz"
    small.write_bytes(b"x" * 10)
    big.write_bytes(os.urandom(100))
    header = collect._header(
        {
            "node": 1,
            "max_bytes": 50,
            "files": [[str(small), "a/small.log"], [str(big), "profiles/t/rank1/big"]],
        }
    )
    assert header["files"] == [
        {
            "source": str(small),
            "path": "a/small.log",
            "bytes": 10,
            "sha256": hashlib.sha256(b"x" * 10).hexdigest(),
        }
    ]
    assert [(e["path"], e["bytes"]) for e in header["left_in_place"]] == [("profiles/t/rank1/big", 100)]
    with pytest.raises(ValueError, match="outside the run folder"):
        collect._safe_destination(tmp_path, "../etc/passwd")


# --------------------------------------------------------------------------------------------
# two nodes on one machine: a killed rank, then --resume
# --------------------------------------------------------------------------------------------


def _free_port_range(n: int) -> int:
    """A base port whose next ``n`` ports are all free on loopback right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


def _both_nodes(
    per_node: list[list[str]], envs: list[dict[str, str]], timeout: float
) -> list[tuple[int, str]]:
    """Run ``python -m fsdpbench ARGS`` for node 0 and node 1 at once; (rc, stderr+stdout) of each."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fsdpbench", *args],
            env={**os.environ, "OMP_NUM_THREADS": "1", **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for args, env in zip(per_node, envs, strict=True)
    ]
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
        return [(p.returncode, out) for p, out in zip(procs, outputs, strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Run 1: rank 1 (node 1) is SIGKILLed in round 0. Node 1 is then made to believe round 0 succeeded
    (its status.json says rc 0), and both nodes resume. Returns the folders and both runs' outputs."""
    tmp = tmp_path_factory.mktemp("two_nodes")
    rdzv = ["--rdzv-endpoint", f"127.0.0.1:{_free_port_range(8)}"]
    first = _both_nodes(
        [[*NODE_ARGS, *rdzv, "--node-rank", str(k), "--out", str(tmp / f"node{k}")] for k in (0, 1)],
        [{}, {"FSDPBENCH_FAULT": KILL_RANK1_ROUND0}],
        timeout=150,
    )
    run0, run1 = (next((tmp / f"node{k}").glob("run_*")) for k in (0, 1))
    first_summary = orjson.loads((run0 / run_folder.SUMMARY).read_bytes())
    status1 = run_folder.launch_dir(run1, "torch", 0) / run_folder.STATUS
    run_folder.write_json(status1, {**orjson.loads(status1.read_bytes()), "rc": 0, "error": None})
    resumed = _both_nodes(
        [["run", "--resume", str(run), "--no-report"] for run in (run0, run1)], [{}, {}], timeout=200
    )
    return {"first": first, "first_summary": first_summary, "resumed": resumed, "run0": run0, "run1": run1}


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ": error: " in ln]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_a_killed_rank_is_named_as_the_first_cause_on_every_node(two_nodes):
    for rc, output in two_nodes["first"]:
        assert rc != 0 and "Traceback" not in output, output
        cause = _error_line(output).split("round 0: ", 1)[1]
        assert cause.startswith(
            "rank 1 (node 1) was killed by signal 9 (SIGKILL) — then, as consequences: rank 0"
        )
    (failure,) = two_nodes["first_summary"]["failures"]
    first = failure["first_cause"]
    assert (first["rank"], first["node"], first["signal"], first["signal_name"]) == (1, 1, 9, "SIGKILL")
    assert [c["rank"] for c in failure["consequences"]] == [0] and failure["resolved"] is False
    # node 1's own torchrun report reached node 0 (the launch folder was set aside by the resume)
    (failed,) = (two_nodes["run0"] / "launches" / "torch").glob("round0.failed_*")
    assert "exitcode  : -9" in (failed / "node1" / run_folder.LAUNCH_LOG).read_text()
    # node 1 keeps node 0's verdict, not its own partial view
    (failed1,) = (two_nodes["run1"] / "launches" / "torch").glob("round0.failed_*")
    status1 = orjson.loads((failed1 / run_folder.STATUS).read_bytes())
    assert (
        status1["failure"]["first_cause"]["rank"] == 1 and status1["failure"]["consequences"][0]["rank"] == 0
    )


def _tree_hashes(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.relative_to(folder).parts[0] not in skip
    }


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_after_resume_node_0_holds_every_ranks_files_byte_for_byte(two_nodes):
    run0, run1 = two_nodes["run0"], two_nodes["run1"]
    assert [rc for rc, _ in two_nodes["resumed"]] == [0, 0], two_nodes["resumed"]
    # node 1 followed node 0's to-do list: it reran round 0 although its own status said rc 0
    assert list((run1 / "launches" / "torch").glob("round0.failed_*"))
    steps = [orjson.loads(ln) for ln in (run0 / run_folder.STEPS).read_bytes().splitlines()]
    # round 0: 2 timed steps, then the profiler's warm-up step and the profiled one (no profile launch)
    assert sorted((s["round"], s["step"], s["kind"]) for s in steps) == [
        (0, 0, "timed"),
        (0, 1, "timed"),
        (0, 2, "profile"),
        (0, 3, "profile"),
    ]
    # the two nodes trained as one world of 2 ranks: losses of unsharded training on the same batches
    ref_losses, _ = reference_training(rows=2, steps=2)
    ours = [s for s in steps if s["kind"] == "timed"]
    assert [s["world_size"] for s in steps] == [2] * 4
    assert [s["loss"] for s in ours] == pytest.approx(ref_losses, abs=1e-6)
    assert sorted(p.name for p in (run0 / "profiles" / "torch").iterdir()) == ["rank0", "rank1"]
    # node 1 analysed rank 1 where its trace is and sent the compact result, byte for byte, not the trace
    theirs = _tree_hashes(run1 / "profiles" / "torch" / "rank1")
    (trace,) = [name for name in theirs if name.endswith(".json.gz")]
    result = trace + ".fsdpbench-rank"
    got = [p for p in (run0 / "profiles" / "torch" / "rank1").rglob("*") if p.is_file()]
    assert [p.name for p in got] == [result]
    assert _tree_hashes(run0 / "profiles" / "torch" / "rank1") == {result: theirs[result]}
    # node 1's logs, environment and spec, under node1/
    sent = _tree_hashes(
        run1 / "launches" / "torch" / "round0", skip=("collect", "collect.json", "status.json")
    )
    assert "environment_node1.json" in sent and "torchrun.log" in sent
    assert _tree_hashes(run0 / "launches" / "torch" / "round0" / "node1") == sent
    summary = orjson.loads((run0 / run_folder.SUMMARY).read_bytes())
    assert summary["missing"] == [] and [f["resolved"] for f in summary["failures"]] == [True]
    trace_bytes = (run1 / "profiles" / "torch" / "rank1" / trace).stat().st_size
    assert summary["collected"]["nodes"] == [1] and summary["collected"]["left_in_place"] == [
        {"node": 1, "path": f"profiles/torch/rank1/{trace}", "bytes": trace_bytes, "why": collect.TRACE_KEPT}
    ]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_node_0_joins_from_node_1s_compact_result_as_from_its_trace(two_nodes, tmp_path):
    """analysis.json from rank 0's trace + rank 1's compact result (what node 0 holds) is byte-identical to
    analysis.json from both traces on one node; the bytes shipped for rank 1 are at most 10 % of its trace."""
    from fsdpbench.analysis.derived import ensure_analysis

    run0, run1 = two_nodes["run0"], two_nodes["run1"]
    (trace,) = (run1 / "profiles" / "torch" / "rank1").glob("*.json.gz")
    sent = orjson.loads((run_folder.launch_dir(run0, "torch", 0) / collect.COLLECT_RESULT).read_bytes())
    shipped = sum(f["bytes"] for f in sent["nodes"]["1"]["files"] if f["path"].startswith("profiles/"))
    assert 0 < shipped <= 0.10 * trace.stat().st_size, (shipped, trace.stat().st_size)
    run = tmp_path / "run"
    shutil.copytree(run0, run)  # one folder for both analyses: the same paths in both files
    (run / run_folder.ANALYSIS).unlink(missing_ok=True)
    ensure_analysis(run, ["torch"])
    joined = (run / run_folder.ANALYSIS).read_bytes()
    assert orjson.loads(joined)["torch"]["replay"] is not None
    # node 0's report, with rank 1's trace on its node: every part but rank 1's lane in the all-ranks figure
    report = run_cli("report", str(run))
    assert report.returncode == 0, report.stderr
    assert "no all-ranks timeline" not in (run / "report.md").read_text()
    # every trace on one node: rank 1's trace where its compact result was, no compact result read
    for result in (run / "profiles").rglob("*.fsdpbench-rank"):
        result.unlink()
    shutil.copy2(trace, run / "profiles" / "torch" / "rank1" / trace.name)
    (run / run_folder.ANALYSIS).unlink()
    ensure_analysis(run, ["torch"])
    assert (run / run_folder.ANALYSIS).read_bytes() == joined


# --------------------------------------------------------------------------------------------
# per-node checks and summary fields (no launch: torchrun replaced by a script)
# --------------------------------------------------------------------------------------------


def test_node_1_checks_its_own_ranks_ascend_output_from_its_own_environment(tmp_path, monkeypatch):
    """With --device auto, node 1 has no environment.json (rank 0's): its own environment_node1.json says
    npu, so it checks that its ranks 2 and 3 were parsed, and reports the failure to node 0."""
    import json

    from fsdpbench.errors import LaunchError
    from fsdpbench.run import launcher

    out = "profiles/torch/rank{r}/rank{r}_1_ascend_pt/ASCEND_PROFILER_OUTPUT/"
    files = {
        "{ldir}/environment_node1.json": '{"device_type": "npu"}',
        out.format(r=2) + "trace_view.json": "{}",
    }
    monkeypatch.setattr(
        launcher,
        "torchrun_command",
        lambda cfg, spec, logs, port, python=None: [
            sys.executable,
            "-c",
            FAKE_LAUNCH_FILES,
            str(spec),
            json.dumps(files),
        ],
    )
    reports = []

    def collect_step(self, arm, round_, ldir, rc, error, timed_out):
        reports.append(error)
        return error, None  # node 0 agrees with node 1's report

    monkeypatch.setattr(launcher.Run, "_collect", collect_step)
    cfg = _two_node_config(1, arms="torch", rounds=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = launcher.Run(cfg, run_dir, {"launches": [], "profiles": {}, "environment": None, "order": []}, None)
    with pytest.raises(
        LaunchError, match="rank 2: kernel_details.csv; rank 3: kernel_details.csv, trace_view"
    ):
        run.launch("torch", run_folder.PROFILE_ROUND, None)
    assert reports and "rank 2: kernel_details.csv" in reports[0] and "rank 0" not in reports[0]


def test_summary_names_files_left_on_their_node_and_whether_a_failure_was_resolved():
    manifest = {
        "config": {"nnodes": 2, "nproc": 1, "seed": 0},
        "arms": [{"label": "torch"}],
        "order": [{"arm": "torch", "round": 0}],
        "profiles": {},
        "failures": [{"arm": "torch", "round": 0, "kind": "timed", "error": "x", "first_cause": None}],
        "collected": [
            {
                "arm": "torch",
                "round": 0,
                "node": 1,
                "files": 3,
                "bytes": 30,
                "failed_check": [],
                "left_in_place": [],
            },
            {
                "arm": "torch",
                "round": -1,
                "node": 1,
                "files": 2,
                "bytes": 20,
                "failed_check": ["launches/torch/profile/node1/torchrun.log"],
                "left_in_place": [{"path": "profiles/torch/rank1/big.json.gz", "bytes": 99, "why": "larger"}],
            },
        ],
    }
    summary = summarize.build_summary(manifest, [], done={("torch", 0)})
    assert summary["collected"] == {
        "nodes": [1],
        "files": 5,
        "bytes": 50,
        "failed_check": [{"node": 1, "path": "launches/torch/profile/node1/torchrun.log"}],
        "left_in_place": [
            {"node": 1, "path": "profiles/torch/rank1/big.json.gz", "bytes": 99, "why": "larger"}
        ],
    }
    assert [f["resolved"] for f in summary["failures"]] == [True]
    assert summarize.build_summary(manifest, [], done=set())["failures"][0]["resolved"] is False
    assert summarize.build_summary({**manifest, "config": {"nnodes": 1, "nproc": 1}}, [])["collected"] is None


def test_node_0_sends_its_to_do_list_unless_a_node_runs_another_plan():
    spec = {"fingerprint": "abc", "todo": [["torch", 0], ["torch", -1]]}
    same = [{"node": 0, "fingerprint": "abc"}, {"node": 1, "fingerprint": "abc"}]
    assert collect._plan_result(spec, same) == {"todo": [["torch", 0], ["torch", -1]], "error": None}
    other = [{"node": 0, "fingerprint": "abc"}, {"node": 1, "fingerprint": "xyz"}]
    result = collect._plan_result(spec, other)
    assert result["todo"] == [] and result["error"].startswith("node(s) 1 run a different plan than node 0")


def test_files_to_send_map_node_ks_launch_files_under_node_k_and_its_ranks_profiles_in_place(tmp_path):
    run_dir = tmp_path / "run"
    ldir = run_folder.launch_dir(run_dir, "torch", run_folder.PROFILE_ROUND)
    for rel in (
        "torchrun.log",
        "logs/x/attempt_0/2/stderr.log",
        "collect/spec.json",
        "collect.json",
        "discarded_profiles/rank2/old.json.gz",
    ):
        (ldir / rel).parent.mkdir(parents=True, exist_ok=True)
        (ldir / rel).write_text(rel)
    for rank in (1, 2, 3):  # rank 1 is another node's
        (run_dir / f"profiles/torch/rank{rank}").mkdir(parents=True)
        (run_dir / f"profiles/torch/rank{rank}/t.json.gz").write_text("t")
    pairs = collect.files_to_send(run_dir, ldir, 1, range(2, 4), "torch", profile=True)
    assert sorted(dest for _, dest in pairs) == [
        "launches/torch/profile/node1/logs/x/attempt_0/2/stderr.log",
        "launches/torch/profile/node1/torchrun.log",
        "profiles/torch/rank2/t.json.gz",
        "profiles/torch/rank3/t.json.gz",
    ]


def test_a_rank_analysed_on_its_node_sends_its_compact_result_and_keeps_its_trace(tmp_path):
    run_dir = tmp_path / "run"
    ldir = run_folder.launch_dir(run_dir, "torch", 0)
    ldir.mkdir(parents=True)
    for rank in (2, 3):
        folder = run_dir / f"profiles/torch/rank{rank}"
        folder.mkdir(parents=True)
        (folder / "t.json.gz").write_bytes(b"x" * 1000)
        (folder / ".t.json.gz.fsdpbench.npz").write_bytes(b"cache")
    (run_dir / "profiles/torch/rank2/t.json.gz.fsdpbench-rank").write_bytes(b"r" * 50)  # rank 3: not analysed
    pairs = collect.files_to_send(run_dir, ldir, 1, range(2, 4), "torch", profile=True)
    assert sorted(dest for _, dest in pairs) == [
        "profiles/torch/rank2/t.json.gz.fsdpbench-rank",
        "profiles/torch/rank3/t.json.gz",
    ]
    assert collect.raw_profile_files(run_dir, range(2, 4), "torch", profile=True) == [
        {"path": "profiles/torch/rank2/t.json.gz", "bytes": 1000, "why": collect.TRACE_KEPT}
    ]

"""A sweep on several nodes: node 0 decides which cells run (skip / start / resume) and the other nodes
follow its list, never their own folders (which hold no steps). The plan step between the nodes is
faked (``agree``) and ``run_ab`` stands in; the expected lists are worked out by hand from the folders
the test builds."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from fsdpbench.errors import ConfigError, LaunchError
from fsdpbench.run import launcher
from fsdpbench.run.sweep import (
    SWEEP_PLAN_DIR,
    find_run_dir,
    load_sweep,
    run_status,
    run_sweep,
    sweep_fingerprint,
)
from helpers import TINY_SWEEP, FakeRunAb, write_sweep_file

TWO_NODES = TINY_SWEEP.replace(
    'device = "cpu"', 'device = "cpu"\nnnodes = 2\nrdzv_endpoint = "127.0.0.1:29400"'
)
CELLS = ["a-s64", "a-s128", "b-l2", "b-l4"]


class FollowerRunAb:
    """``run_ab`` on node 1: its folder gets a manifest and a summary of nothing (its steps are on node
    0), and it fails where node 0's verdict fails (``crash_once``)."""

    def __init__(self, crash_once: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, Path | None]] = []
        self.crash_once = set(crash_once)

    def __call__(self, cfg, *, resume=None, console=None, command=None) -> Path:
        assert cfg.node_rank == 1 and cfg.nnodes == 2
        self.calls.append((cfg.name, resume))
        run = resume or Path(cfg.out) / f"{cfg.name}_{time.strftime('%Y%m%d_%H%M%S')}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "manifest.json").write_bytes(orjson.dumps({"name": cfg.name, "config": cfg.to_dict()}))
        (run / "summary.json").write_bytes(orjson.dumps({"arms": {}, "missing": []}))
        if cfg.name in self.crash_once:
            self.crash_once.discard(cfg.name)
            raise LaunchError(f"{cfg.name}: rank 1 crashed")
        return run


class FakePlanStep:
    """Both ends of the plan step: node 0's call keeps its list and fingerprint; a later node's call
    checks that it runs the same sweep and gets node 0's list (as ``collect.py``'s plan op does)."""

    def __init__(self) -> None:
        self.sent: list | None = None
        self.fingerprint: str | None = None
        self.calls: list[tuple[int, Path, list]] = []

    def __call__(self, cfg, folder, fingerprint, todo):
        self.calls.append((cfg.node_rank, folder, todo))
        if cfg.node_rank == 0:
            self.sent, self.fingerprint = todo, fingerprint
            return todo
        if fingerprint != self.fingerprint:
            raise LaunchError("node(s) 1 run a different plan than node 0")
        return self.sent


def _nodes(tmp_path: Path, text: str = TWO_NODES):
    path = write_sweep_file(tmp_path, text)
    return load_sweep(path, out=tmp_path / "n0", node_rank=0), load_sweep(
        path, out=tmp_path / "n1", node_rank=1
    )


def test_node1_follows_node0s_cells_not_its_own_folders(tmp_path):
    node0, node1 = _nodes(tmp_path)
    plan = FakePlanStep()
    # first pass: a-s128 fails on both nodes (node 0's verdict), everything else finishes
    run_sweep(node0, run_ab=FakeRunAb(crash_once={"a-s128"}), agree=plan, write_index=False)
    assert plan.sent == [[c, "start"] for c in CELLS]
    follower = FollowerRunAb(crash_once={"a-s128"})
    cells = run_sweep(node1, run_ab=follower, agree=plan, write_index=False)
    assert [name for name, _ in follower.calls] == CELLS
    assert {c.name: c.status for c in cells} == {
        "a-s64": "done",
        "a-s128": "failed",
        "b-l2": "done",
        "b-l4": "done",
    }

    # node 1's own folders hold no steps: on its own it would resume every cell
    assert [run_status(find_run_dir(node1.tree, c)) for c in CELLS] == ["partial"] * 4
    # node 0 starts b-l4 afresh (its folder is gone) while node 1 still has one
    for stale in node0.tree.glob("b-l4_*"):
        for f in stale.iterdir():
            f.unlink()
        stale.rmdir()

    time.sleep(1.1)  # a new run folder gets a later timestamp
    node0, node1 = _nodes(tmp_path)
    leader = FakeRunAb()
    run_sweep(node0, run_ab=leader, agree=plan, write_index=False)
    # by hand: a-s64 and b-l2 done on node 0, a-s128 partial there, b-l4 without a folder
    assert plan.sent == [["a-s64", "skip"], ["a-s128", "resume"], ["b-l2", "skip"], ["b-l4", "start"]]
    assert leader.calls == [("a-s128", find_run_dir(node0.tree, "a-s128")), ("b-l4", None)]
    follower = FollowerRunAb()
    own_partial = find_run_dir(node1.tree, "a-s128")
    cells = run_sweep(node1, run_ab=follower, agree=plan, write_index=False)
    assert follower.calls == [("a-s128", own_partial), ("b-l4", None)]  # its own folder; b-l4 afresh
    assert all(c.status == "done" for c in cells)
    state = orjson.loads((node1.tree / "sweep.json").read_bytes())
    assert [c["node0_action"] for c in state["cells"]] == ["skip", "resume", "skip", "start"]
    assert [c["status"] for c in state["cells"]] == ["done"] * 4
    # a third pass: node 0 skips everything, so does node 1 (recorded as done), running nothing
    run_sweep(
        load_sweep(write_sweep_file(tmp_path, TWO_NODES), out=tmp_path / "n0", node_rank=0),
        run_ab=FakeRunAb(),
        agree=plan,
        write_index=False,
    )
    assert plan.sent == [[c, "skip"] for c in CELLS]
    follower = FollowerRunAb()
    run_sweep(
        load_sweep(write_sweep_file(tmp_path, TWO_NODES), out=tmp_path / "n1", node_rank=1),
        run_ab=follower,
        agree=plan,
        write_index=False,
    )
    state = orjson.loads((node1.tree / "sweep.json").read_bytes())
    assert follower.calls == [] and [c["status"] for c in state["cells"]] == ["done"] * 4
    # the plan step's folder is each node's own tree
    assert {(node, folder) for node, folder, _ in plan.calls} == {
        (0, node0.tree / SWEEP_PLAN_DIR),
        (1, node1.tree / SWEEP_PLAN_DIR),
    }


def test_nodes_started_with_different_sweeps_stop_before_any_cell(tmp_path):
    node0, node1 = _nodes(tmp_path)
    assert sweep_fingerprint(node0.cells) == sweep_fingerprint(node1.cells)  # node_rank and out may differ
    other = load_sweep(
        write_sweep_file(tmp_path, TWO_NODES.replace("rounds = 2", "rounds = 3"), "other.toml"),
        out=tmp_path / "n1",
        node_rank=1,
    )
    assert sweep_fingerprint(other.cells) != sweep_fingerprint(node0.cells)
    plan = FakePlanStep()
    run_sweep(node0, run_ab=FakeRunAb(), agree=plan, write_index=False, only="a-*")
    follower = FollowerRunAb()
    with pytest.raises(LaunchError, match="different plan"):  # --only is part of what must agree
        run_sweep(node1, run_ab=follower, agree=plan, write_index=False)
    assert follower.calls == []


def test_one_node_cells_run_on_node0_only_and_node_ranks_must_agree(tmp_path):
    mixed = TWO_NODES + '\n[[experiment]]\nname = "solo"\nseq_len = 64\nlayers = 2\nrounds = 1\nnnodes = 1\n'
    node0, node1 = _nodes(tmp_path, mixed)
    solo = next(c for c in node1.cells if c.name == "solo")
    assert solo.config.node_rank == 0  # --node-rank applies to multi-node cells only
    plan = FakePlanStep()
    leader = FakeRunAb()
    run_sweep(node0, run_ab=leader, agree=plan, write_index=False)
    assert "solo" in [name for name, _ in leader.calls]
    follower = FollowerRunAb()
    run_sweep(node1, run_ab=follower, agree=plan, write_index=False)
    assert [name for name, _ in follower.calls] == CELLS
    bad = TWO_NODES + '\n[[experiment]]\nname = "four"\nseq_len = 64\nlayers = 2\nnnodes = 4\n'
    with pytest.raises(ConfigError, match="differ"):
        run_sweep(
            load_sweep(write_sweep_file(tmp_path, bad), out=tmp_path / "n2", node_rank=1),
            run_ab=FollowerRunAb(),
            agree=plan,
        )


def test_node0_decides_runs_the_plan_op_on_the_base_port(tmp_path, monkeypatch):
    """``launcher.node0_decides`` (what ``run_sweep`` uses for real): the collect step's plan op with
    this node's list and fingerprint on the rendezvous base port; node 0's answer is returned."""
    (node1, *_) = [load_sweep(write_sweep_file(tmp_path, TWO_NODES), out=tmp_path / "n1", node_rank=1)]
    cfg = node1.cells[0].config
    seen = {}

    def fake_step(cfg_, folder, spec, port):
        seen.update(spec=spec, port=port, folder=folder)
        return {"todo": [["a-s64", "skip"]], "error": None}

    monkeypatch.setattr(launcher, "collect_step", fake_step)
    assert launcher.node0_decides(cfg, tmp_path / ".plan", "f" * 64, [["a-s64", "start"]]) == [
        ["a-s64", "skip"]
    ]
    assert seen["port"] == 29400 and seen["spec"]["op"] == "plan" and seen["spec"]["node"] == 1
    assert seen["spec"]["todo"] == [["a-s64", "start"]] and seen["spec"]["fingerprint"] == "f" * 64
    monkeypatch.setattr(
        launcher, "collect_step", lambda *a: {"todo": [], "error": "node(s) 1 run a different plan"}
    )
    with pytest.raises(LaunchError, match="different plan"):
        launcher.node0_decides(cfg, tmp_path / ".plan", "f" * 64, [])
    monkeypatch.setattr(
        launcher, "collect_step", lambda *a: "the collect step with the other nodes failed (x)"
    )
    with pytest.raises(LaunchError, match="node 1 could not get the plan from node 0"):
        launcher.node0_decides(cfg, tmp_path / ".plan", "f" * 64, [])

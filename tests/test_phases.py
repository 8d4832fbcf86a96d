"""Phase times (forward, backward, optimizer, remainder) of every step: where the marks sit, that the device
path adds no synchronisation inside the step, the summary's medians and comparisons, and a real 2-rank run.

References: fake clocks and a fake device module whose readings are set here (hand computation), raw
steps.jsonl / summary.json read with orjson, medians computed with the standard library.
"""

from __future__ import annotations

import gzip
import io
import math
import statistics
import types

import orjson
import pytest
import torch
import torch.distributed as dist

from fsdpbench.backends import get_backend
from fsdpbench.config import RunConfig, preset_tiny
from fsdpbench.results import run_folder
from fsdpbench.run import summarize
from fsdpbench.run.worker import StepRunner, build_sharded_model, make_optimizer, run_steps
from helpers import run_manifest
from phase_checks import PHASE_NAMES, assert_phase_split


@pytest.fixture
def one_rank_gloo(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class LoggedClock:
    """Returns the given readings in order and logs each read under ``name`` in the shared ``log``."""

    def __init__(self, name: str, readings: list[float], log: list[str]) -> None:
        self.name, self.readings, self.log = name, list(readings), log

    def __call__(self) -> float:
        self.log.append(self.name)
        return self.readings.pop(0)


def _runner(tmp_path, log: list[str], device_type: str = "cpu", **kwargs) -> tuple[StepRunner, RunConfig]:
    """A one-rank torch-arm runner whose forward, backward and optimizer step log themselves in ``log``."""
    cfg = RunConfig.from_sources(
        env={},
        overrides={"arms": "torch", "nproc": 1, "layers": 1, "seq_len": 16, "warmup": 1, "steps": 2},
    )
    arm = cfg.arms[0]
    backend = get_backend("torch")
    model = build_sharded_model(cfg, arm, backend, backend.init_mesh("cpu", (1,)), torch.device("cpu"))
    model, optimizer = backend.make_training(model, lambda params: make_optimizer(cfg, params))
    model.register_forward_pre_hook(lambda *a: log.append("forward_start"))
    model.register_forward_hook(lambda *a: log.append("forward_end"))
    backward, step = backend.backward, backend.optimizer_step
    backend.backward = lambda loss: (log.append("backward"), backward(loss))[1]  # type: ignore[method-assign]
    backend.optimizer_step = lambda opt: (log.append("optimizer"), step(opt))[1]  # type: ignore[method-assign]
    runner = StepRunner(
        cfg=cfg,
        arm=arm,
        backend=backend,
        model=model,
        optimizer=optimizer,
        device_type=device_type,
        device=torch.device("cpu"),
        rank=0,
        world=1,
        replicas=1,
        round_=0,
        steps_path=tmp_path / run_folder.STEPS,
        **kwargs,
    )
    return runner, cfg


def _records(tmp_path) -> list[dict]:
    return [orjson.loads(line) for line in (tmp_path / run_folder.STEPS).read_bytes().splitlines()]


ONE_STEP = [
    "step",
    "mark",
    "forward_start",
    "forward_end",
    "mark",
    "backward",
    "mark",
    "optimizer",
    "mark",
    "step",
]


@pytest.mark.timeout(120)
def test_cpu_phases_are_host_clock_differences_at_the_phase_boundaries(tmp_path, one_rank_gloo):
    log: list[str] = []
    # binary-exact readings: step 250 ms; forward 62.5, backward 125, optimizer 31.25 → remainder 31.25
    step_clock = LoggedClock("step", [10.0, 10.25] * 3, log)
    phase_clock = LoggedClock("mark", [10.0, 10.0625, 10.1875, 10.21875] * 3, log)
    runner, cfg = _runner(tmp_path, log, clock=step_clock, phase_clock=phase_clock)
    run_steps(runner, cfg.warmup + cfg.steps)
    assert log == ONE_STEP * 3  # each mark sits between the step's clock reads, at its phase boundary
    records = _records(tmp_path)
    for rec in records:
        assert (
            rec["time_ms"] == 250.0 and rec["rank_time_ms"] == [250.0] and rec["phase_clock"] == "host_clock"
        )
        assert rec["phases_ms"] == {
            "forward": [62.5],
            "backward": [125.0],
            "optimizer": [31.25],
            "remainder": [250.0 - 62.5 - 125.0 - 31.25],
        }


@pytest.mark.timeout(120)
def test_phase_times_off_leaves_the_step_record_as_before(tmp_path, one_rank_gloo):
    log: list[str] = []
    runner, cfg = _runner(tmp_path, log, phase_times=False)
    run_steps(runner, 2)
    assert all("phases_ms" not in r and "rank_time_ms" not in r for r in _records(tmp_path))


class FakeEvent:
    """A timing event on a fake device: ``record`` stamps the next device time from ``device_times``."""

    def __init__(self, module: FakeDeviceModule, enable_timing: bool = False) -> None:
        assert enable_timing
        self.module, self.stamp = module, None

    def record(self, stream=None) -> None:
        assert stream is None  # the current (compute) stream
        self.module.log.append("record")
        self.stamp = self.module.device_times.pop(0)

    def elapsed_time(self, end: FakeEvent) -> float:
        self.module.log.append("read")
        return end.stamp - self.stamp


class FakeDeviceModule:
    """What ``torch.get_device_module("cuda")`` gives the worker: logs synchronize, event records and reads."""

    def __init__(self, device_times: list[float], log: list[str]) -> None:
        self.device_times, self.log = list(device_times), log
        self.Event = lambda enable_timing=False: FakeEvent(self, enable_timing)

    def synchronize(self) -> None:
        self.log.append("synchronize")

    def reset_peak_memory_stats(self) -> None:
        pass

    def max_memory_allocated(self) -> int:
        return 1

    def max_memory_reserved(self) -> int:
        return 2


@pytest.mark.timeout(120)
def test_device_events_are_recorded_without_synchronising_inside_the_step(
    tmp_path, one_rank_gloo, monkeypatch
):
    log: list[str] = []
    # device ms at the four marks of each step: forward 7, backward 20, optimizer 3
    fake = FakeDeviceModule([100.0, 107.0, 127.0, 130.0] * 3, log)
    real = torch.get_device_module
    monkeypatch.setattr(torch, "get_device_module", lambda d=None: fake if str(d) == "cuda" else real(d))
    step_clock = LoggedClock("step", [1.0, 1.0390625] * 3, log)  # 39.0625 ms per step
    runner, cfg = _runner(tmp_path, log, device_type="cuda", clock=step_clock)
    run_steps(runner, cfg.warmup + cfg.steps)
    reads = [i for i, e in enumerate(log) if e == "step"]
    assert len(reads) == 6
    for begin, stop in zip(reads[::2], reads[1::2], strict=True):
        assert log[begin - 1] == "synchronize" and log[stop - 1] == "synchronize"  # the step's own two syncs
        inside = log[begin + 1 : stop - 1]
        assert "synchronize" not in inside and "read" not in inside, inside  # nothing waits for the device
        assert [e for e in inside if e != "forward_end"] == [
            "record",
            "forward_start",
            "record",
            "backward",
            "record",
            "optimizer",
            "record",
        ]
        assert log[stop + 1 : stop + 4] == ["read"] * 3  # read right after the step, before the bookkeeping
    for rec in _records(tmp_path):
        assert rec["phase_clock"] == "device_events" and rec["time_ms"] == 39.0625
        assert rec["phases_ms"] == {
            "forward": [7.0],
            "backward": [20.0],
            "optimizer": [3.0],
            "remainder": [39.0625 - 30.0],
        }


# -------------------------------------------------------------------------------- summary (synthetic)


def _record(arm, rnd, step, per_rank: dict[str, list[float]], kind="timed"):
    ranks = [math.fsum(per_rank[p][r] for p in PHASE_NAMES) for r in range(2)]
    return {
        "arm": arm,
        "round": rnd,
        "step": step,
        "kind": kind,
        "time_ms": max(ranks),
        "loss": 5.0 - 0.1 * step,
        "grad_norm": 1.0,
        "tokens": 512,
        "mem_allocated_bytes": None,
        "mem_reserved_bytes": None,
        "world_size": 2,
        "rank_time_ms": ranks,
        "phases_ms": per_rank,
        "phase_clock": "host_clock",
    }


def _arm_steps(arm, rnd, forwards, scale=1.0):
    """Three timed steps (and a warmup one that must not count) with the given per-rank forwards."""
    out = [_record(arm, rnd, 0, {p: [999.0, 999.0] for p in PHASE_NAMES}, kind="warmup")]
    for i, fwd in enumerate(forwards, start=1):
        out.append(
            _record(
                arm,
                rnd,
                i,
                {
                    "forward": fwd,
                    "backward": [100.0 * scale + i, 101.0 * scale],
                    "optimizer": [5.0, 6.0 + i],
                    "remainder": [1.0, 0.5],
                },
            )
        )
    return out


def test_summary_phase_medians_match_a_hand_computation_from_the_records():
    steps = (
        _arm_steps("torch", 0, [[10, 12], [11, 9], [14, 10]])
        + _arm_steps("torch", 1, [[20, 21], [22, 20], [19, 18]])
        + _arm_steps("hyper", 0, [[10, 10], [10, 10], [10, 10]], scale=1.5)
        + _arm_steps("hyper", 1, [[11, 11], [11, 11], [11, 11]], scale=1.5)
    )
    s = summarize.build_summary(run_manifest(("torch", "hyper"), 2), steps)
    torch_phases = s["arms"]["torch"]["phases"]
    # forward, slowest rank per step: round 0 [12, 11, 14] → 12, round 1 [21, 22, 19] → 21; median 16.5
    assert [r["max_over_ranks"]["forward"] for r in torch_phases["rounds"]] == [12, 21]
    assert torch_phases["max_over_ranks"]["forward"] == 16.5
    # rank 0's own: round 0 [10, 11, 14] → 11, round 1 [20, 22, 19] → 20; median 15.5
    assert torch_phases["rank0"]["forward"] == 15.5
    assert torch_phases["clock"] == "host_clock"
    for arm in ("torch", "hyper"):
        entry = s["arms"][arm]["phases"]
        for phase in PHASE_NAMES:  # every phase against the standard library on the raw records
            for view, pick in (("max_over_ranks", max), ("rank0", lambda v: v[0])):
                per_round = [
                    statistics.median(
                        pick(r["phases_ms"][phase])
                        for r in steps
                        if (r["arm"], r["round"], r["kind"]) == (arm, k, "timed")
                    )
                    for k in (0, 1)
                ]
                assert entry[view][phase] == pytest.approx(statistics.median(per_round)), (arm, view, phase)
    comp = s["comparisons"][0]["phases"]
    backward = comp["backward"]
    # backward, slowest rank: torch max(100 + i, 101) → [101, 102, 103] → 102 in both rounds;
    # hyper max(150 + i, 151.5) → [151.5, 152, 153] → 152
    assert backward["ratio"] == pytest.approx(152 / 102)
    # two rounds: no interval yet (a paired t needs 3), so no verdict either way
    assert not backward["significant"] and backward["verdict"].startswith(
        "backward: cannot tell yet whether hyper differs from torch: ratio 1.490 from 2 rounds per arm"
    )
    steps += _arm_steps("torch", 2, [[10, 12]] * 3) + _arm_steps("hyper", 2, [[10, 10]] * 3, scale=1.5)
    three = summarize.build_summary(run_manifest(("torch", "hyper"), 3), steps)["comparisons"][0]["phases"]
    # the same backward ratio in every round: the paired spread is 0, the interval the ratio itself
    assert three["backward"]["ci95"] == pytest.approx([152 / 102, 152 / 102])
    assert three["backward"]["significant"] and three["backward"]["verdict"].startswith(
        "backward: hyper is 1.49× slower than torch (+49.0%; 95 % CI (paired t, 3 rounds) "
    )
    assert set(comp) == {"forward", "backward", "optimizer"}


def test_one_round_per_arm_gives_phase_verdicts_that_cannot_tell_yet():
    steps = _arm_steps("torch", 0, [[10, 12]] * 3) + _arm_steps("hyper", 0, [[20, 20]] * 3, scale=2)
    s = summarize.build_summary(run_manifest(("torch", "hyper"), 1), steps)
    for phase, c in s["comparisons"][0]["phases"].items():
        assert c["ci95"] is None
        assert c["verdict"].startswith(f"{phase}: cannot tell yet whether hyper differs from torch"), c


def test_summary_of_records_without_phase_times_has_none():
    steps = _arm_steps("torch", 0, [[10, 12]]) + _arm_steps("hyper", 0, [[10, 12]])
    for rec in steps:
        del rec["phases_ms"]
    s = summarize.build_summary(run_manifest(("torch", "hyper"), 1), steps)
    assert s["arms"]["torch"]["phases"] is None and s["comparisons"][0]["phases"] is None


# ------------------------------------------------------------------------------ a real 2-rank run


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_real_two_rank_run_phases_sum_to_each_ranks_step_and_summary_medians(profiled_ab_run):
    steps = [orjson.loads(line) for line in (profiled_ab_run / "steps.jsonl").read_bytes().splitlines()]
    assert_phase_split(steps, world=2)  # warmup, timed and profiled steps alike
    summary = orjson.loads((profiled_ab_run / "summary.json").read_bytes())
    for arm, entry in summary["arms"].items():
        timed = [r for r in steps if r["arm"] == arm and r["kind"] == "timed"]
        for phase in PHASE_NAMES:
            by_round = {}
            for r in timed:
                by_round.setdefault(r["round"], []).append(r)
            want_max = statistics.median(
                statistics.median(max(r["phases_ms"][phase]) for r in rs) for rs in by_round.values()
            )
            want_r0 = statistics.median(
                statistics.median(r["phases_ms"][phase][0] for r in rs) for rs in by_round.values()
            )
            assert entry["phases"]["max_over_ranks"][phase] == pytest.approx(want_max, rel=1e-12)
            assert entry["phases"]["rank0"][phase] == pytest.approx(want_r0, rel=1e-12)
    from rich.console import Console

    from fsdpbench.report.terminal.summary import print_phase_table
    from fsdpbench.results import phases

    console = Console(file=io.StringIO(), width=200)
    print_phase_table(console, summary)
    phases.print_phase_verdicts(console, summary)
    text = console.file.getvalue()
    first = next(iter(summary["arms"]))
    assert f"{summary['arms'][first]['phases']['max_over_ranks']['backward']:.1f}" in text
    assert "backward: cannot tell yet whether" in text  # one round per arm


def test_report_phase_section_shows_medians_and_each_phase_ci(tmp_path):
    from fsdpbench.report.phases import phase_section
    from fsdpbench.results.summary import Summary

    steps = (
        _arm_steps("torch", 0, [[10, 12]] * 3)
        + _arm_steps("torch", 1, [[11, 12]] * 3)
        + _arm_steps("hyper", 0, [[20, 20]] * 3, scale=2)
        + _arm_steps("hyper", 1, [[21, 20]] * 3, scale=2)
        + _arm_steps("torch", 2, [[10, 13]] * 3)
        + _arm_steps("hyper", 2, [[22, 20]] * 3, scale=2)
    )
    summary = summarize.build_summary(run_manifest(("torch", "hyper"), 3), steps)
    data = types.SimpleNamespace(
        summary=Summary.from_dict(summary)
    )  # the one field of a loaded run the section reads
    blocks = phase_section(data)  # type: ignore[arg-type]
    tables = [b for b in blocks if hasattr(b, "rows")]
    arm_rows, comp_rows = tables[0].rows, tables[1].rows
    assert arm_rows[0][:3] == ["torch", "slowest rank", "12.0"]  # forward: max(10, 12) every step
    assert [r[1] for r in comp_rows] == ["forward", "backward", "optimizer"]
    forward = summary["comparisons"][0]["phases"]["forward"]
    assert comp_rows[0][3] == f"{forward['ci95'][0]:.3f} – {forward['ci95'][1]:.3f}"


# ------------------------------------------------------------- named ranges in the profiled step


def _rank0_trace_events(run_dir, arm: str) -> list[dict]:
    (path,) = (
        p for p in (run_dir / "profiles" / arm / "rank0").glob("*.json*") if not p.name.startswith(".")
    )
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)["traceEvents"]


def _inside(inner: dict, outer: dict) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_profiled_step_names_units_phases_and_collectives(profiled_ab_run):
    """On the real 2-rank profile (the profiler's own trace, read here): one forward and one backward
    range per layer and for the root, one optimizer range, FSDP2's own spans of each layer inside that
    layer's ranges, and every c10d collective named with its group and a per-group index 0, 1, 2, ..."""
    layers = preset_tiny().num_hidden_layers
    units = [f"layers.{i}" for i in range(layers)] + ["root"]
    for arm in ("torch", "torch-prefetch1"):
        events = [e for e in _rank0_trace_events(profiled_ab_run, arm) if e.get("ph") == "X"]
        ours = [e for e in events if e["name"].startswith("fsdpbench::")]
        by_name: dict[str, list[dict]] = {}
        for e in ours:
            by_name.setdefault(e["name"], []).append(e)
        for unit in units:
            assert len(by_name.get(f"fsdpbench::forward::{unit}", [])) == 1, (arm, unit)
            assert len(by_name.get(f"fsdpbench::backward::{unit}", [])) == 1, (arm, unit)
        assert len(by_name["fsdpbench::optimizer"]) == 1
        (step,) = [e for e in events if e["name"].startswith("ProfilerStep#")]
        assert all(_inside(e, step) for e in ours), arm
        root_bwd = by_name["fsdpbench::backward::root"][0]
        for i in range(layers):
            fwd, bwd = (
                by_name[f"fsdpbench::forward::layers.{i}"][0],
                by_name[f"fsdpbench::backward::layers.{i}"][0],
            )
            assert _inside(bwd, root_bwd)
            for e in events:  # FSDP2's own spans of this layer land in this layer's ranges
                if e["name"] == f"FSDP::pre_forward (model.layers.{i})":
                    assert _inside(e, fwd), (arm, e)
                if e["name"] in (
                    f"FSDP::pre_backward (model.layers.{i})",
                    f"FSDP::post_backward_reduce (model.layers.{i})",
                ):
                    assert _inside(e, bwd), (arm, e)
        callback = [e for e in events if e["name"] == "FSDP::root_post_backward_callback"]
        assert callback and all(_inside(e, root_bwd) for e in callback)
        layer_bwd = [by_name[f"fsdpbench::backward::layers.{i}"][0] for i in range(layers)]
        assert not any(_inside(c, b) for c in callback for b in layer_bwd)  # the root's, not a layer's
        # collectives: group + per-group index, numbered 0.. in launch (= start) order per group
        colls = sorted((e for e in ours if e["name"].startswith("fsdpbench::c10d::")), key=lambda e: e["ts"])
        kinds: dict[str, int] = {}
        per_group: dict[str, list[int]] = {}
        for e in colls:
            _, _, kind, group, index = e["name"].split("::")
            kinds[kind] = kinds.get(kind, 0) + 1
            per_group.setdefault(group, []).append(int(index.removeprefix("index=")))
            assert group.startswith("group=") and group != "group=?", e["name"]
            assert any(_inside(e, u) for u in ours if not u["name"].startswith("fsdpbench::c10d::")), e[
                "name"
            ]
        assert all(v == list(range(len(v))) for v in per_group.values()), per_group
        assert kinds == {"all_gather": 2 * layers + 1, "reduce_scatter": layers + 1}, (arm, kinds)

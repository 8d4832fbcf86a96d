"""The ``delay=RANK/UNIT/PHASE/MS`` arm option (issue 39 point 5): parsing with clear errors, the manifest,
and where the sleep lands in a step (without torchrun: one process, the tiny model unsharded).

References: the arm text written by hand; the number of sleeps counted by a fake sleep; where the sleep
sits read from the profiler's own Chrome trace (plain JSON, not fsdpbench's reader).
"""

from __future__ import annotations

import json

import pytest
import torch

from fsdpbench.config import RunConfig, parse_arms, preset_tiny
from fsdpbench.config.arms import Delay, parse_arm
from fsdpbench.errors import ConfigError

# ------------------------------------------------------------------------------------ parsing


def test_a_delay_is_parsed_into_its_rank_unit_phase_and_ms_and_names_the_arm():
    arm = parse_arm("torch:delay=2/layers.1/backward/40")
    assert arm.delays() == [Delay(rank=2, unit="layers.1", phase="backward", ms=40.0)]
    assert arm.delay == ["2/layers.1/backward/40"]
    assert arm.label == "torch-delay2-layers.1-backward-40ms"
    assert "/" not in arm.label  # the label names folders


@pytest.mark.parametrize(
    "spec",
    [
        "torch:delay=2/layers.1/backward/50:delay=1/layers.1/backward/20",  # repeated
        "torch:delay=2/layers.1/backward/50+1/layers.1/backward/20",  # joined by +
        "torch:delay=2/layers.01/backward/50.0+1/layers.1/backward/2e1",  # spelled differently
    ],
)
def test_several_delays_in_one_arm_are_kept_in_order(spec):
    arm = parse_arm(spec)
    assert [(d.rank, d.unit, d.phase, d.ms) for d in arm.delays()] == [
        (2, "layers.1", "backward", 50.0),
        (1, "layers.1", "backward", 20.0),
    ]
    assert arm.delay == ["2/layers.1/backward/50", "1/layers.1/backward/20"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("torch:delay=2/layers.1/sideways/4", "PHASE must be forward or backward, got 'sideways'"),
        ("torch:delay=x/layers.1/forward/4", "RANK must be an integer >= 0, got 'x'"),
        ("torch:delay=2/layer1/forward/4", "UNIT must be a decoder layer layers.<i> (from 0) or root"),
        ("torch:delay=2/layers.1/forward/-4", "MS must be a number of milliseconds > 0, got '-4'"),
        ("torch:delay=2/layers.1/forward/0", "MS must be a number of milliseconds > 0, got '0'"),
        ("torch:delay=2/layers.1/forward", "is not delay=RANK/UNIT/PHASE/MS"),
        ("torch:delay=2/layers.1/forward/4:delay=2/layers.1/forward/5", "two delays at rank 2, layers.1"),
    ],
)
def test_a_malformed_delay_is_refused_naming_the_arm_and_what_is_wrong(spec, message):
    with pytest.raises(ConfigError, match="arm 'torch' option delay") as err:
        parse_arm(spec)
    assert message in str(err.value)


def test_a_delay_outside_the_world_or_the_model_is_refused_before_launch():
    with pytest.raises(ConfigError, match=r"names rank 3, but the world has 2 ranks \(0..1\)"):
        RunConfig.from_sources(env={}, overrides={"arms": "torch,torch:delay=3/layers.1/forward/5"})
    with pytest.raises(ConfigError, match=r"names layers.4, but the model has 4 decoder layers"):
        RunConfig.from_sources(env={}, overrides={"arms": "torch,torch:delay=1/layers.4/forward/5"})
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch,torch:delay=1/root/backward/5", "nproc": 2}
    )
    assert cfg.arms[1].delay == ["1/root/backward/5"]


def test_the_manifest_records_the_delays_and_only_on_a_delayed_arm():
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch,torch:delay=1/layers.1/backward/50+0/layers.1/backward/20"}
    )
    arms = cfg.to_dict()["arms"]
    assert "delay" not in arms[0]  # manifests of arms without a delay are unchanged
    assert arms[1]["delay"] == ["1/layers.1/backward/50", "0/layers.1/backward/20"]
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again.arms[1].delays() == cfg.arms[1].delays()
    assert again.arms[1].label == cfg.arms[1].label


def test_a_shared_delay_from_a_config_file_comes_before_an_arms_own():
    (arm,) = parse_arms("torch:delay=1/layers.0/forward/3", shared={"delay": "0/layers.1/forward/2"})
    assert arm.delay == ["0/layers.1/forward/2", "1/layers.0/forward/3"]


# ------------------------------------------------------------------------------------ in a step


def _tiny_model() -> torch.nn.Module:
    from fsdpbench.model import build_model

    torch.manual_seed(0)
    model = build_model(preset_tiny(), device="cpu")
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return model


def _step(model: torch.nn.Module, ids: torch.Tensor, delays=None) -> None:
    loss = model(ids, labels=ids).loss
    if delays is not None:
        delays.root_backward()  # what StepRunner.train does at the start of the backward call
    loss.backward()


def test_every_step_sleeps_once_per_delay_of_this_rank_and_no_other_ranks():
    """Plain steps (timed steps carry no other hooks): each delay of this rank sleeps once per step at its
    unit and phase; another rank's delays never sleep here."""
    from fsdpbench.run.delays import UnitDelays
    from fsdpbench.run.profile_marks import decoder_units

    model = _tiny_model()
    ids = torch.randint(0, preset_tiny().vocab_size, (1, 16))
    arm = parse_arm(
        "torch:delay=1/layers.2/backward/7+1/layers.0/forward/3+1/root/backward/2+0/layers.1/forward/5"
    )
    slept: list[float] = []
    delays = UnitDelays(arm.delays(), rank=1, sleep=slept.append)
    delays.install(model, decoder_units(model))
    for _ in range(3):
        _step(model, ids, delays)
    assert delays.slept == [("layers.0", "forward"), ("root", "backward"), ("layers.2", "backward")] * 3
    assert slept == [0.003, 0.002, 0.007] * 3
    delays.remove()
    _step(model, ids, delays)  # the hooks are gone; only the root's call (made by the step) remains
    assert delays.slept[9:] == [("root", "backward")]


def test_a_delay_refuses_a_unit_the_model_does_not_have():
    from fsdpbench.run.delays import UnitDelays
    from fsdpbench.run.profile_marks import decoder_units

    model = _tiny_model()
    delays = UnitDelays([Delay(rank=0, unit="layers.9", phase="forward", ms=1.0)], rank=0)
    with pytest.raises(
        ConfigError, match=r"delay=0/layers.9/forward/1 on rank 0: the model has no unit layers.9"
    ):
        delays.install(model, decoder_units(model))


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_in_the_profiled_step_the_sleep_opens_the_units_range(tmp_path, phase):
    """With fsdpbench's ranges installed after the delay (as run_steps does), the sleep sits at the start
    of the unit's phase range: the profiler's own trace shows the range starting, then nothing on that
    thread for the delay, then the unit's first op."""
    from torch.profiler import ProfilerActivity, profile

    from fsdpbench.run.delays import UnitDelays
    from fsdpbench.run.profile_marks import ProfileMarks, decoder_units

    delay_ms = 40.0
    model = _tiny_model()
    ids = torch.randint(0, preset_tiny().vocab_size, (1, 16))
    delays = UnitDelays([Delay(rank=0, unit="layers.1", phase=phase, ms=delay_ms)], rank=0)
    delays.install(model, decoder_units(model))
    marks = ProfileMarks(model, decoder_units(model))
    marks.install({})
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = model(ids, labels=ids).loss
            with marks.backward():
                loss.backward()
    finally:
        marks.uninstall()
        delays.remove()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    (rng,) = [e for e in events if e["name"] == f"fsdpbench::{phase}::layers.1"]
    start, end = float(rng["ts"]), float(rng["ts"]) + float(rng["dur"])
    inside = sorted(
        float(e["ts"])
        for e in events
        if e["tid"] == rng["tid"] and start < float(e["ts"]) < end and e.get("cat") == "cpu_op"
    )
    assert inside, "no operator inside the range"
    assert inside[0] - start >= delay_ms * 1e3 * 0.95  # the first op comes after the sleep
    assert rng["dur"] >= delay_ms * 1e3


@pytest.fixture
def gloo_world_of_one(monkeypatch):
    import torch.distributed as dist

    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
    }.items():
        monkeypatch.setenv(name, value)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("backend_name", ["torch", "fsdp1"])
def test_each_backend_with_units_sleeps_at_the_delayed_units(gloo_world_of_one, backend_name):
    """The delays hook the units each backend's wrapped model exposes (``decoder_units``): a forward and a
    backward delay of rank 0 each sleep once per step, through the backend's own step calls. (deepspeed
    passes the same check but takes minutes in one process here; hyper is not installed.)"""
    import functools

    from fsdpbench.backends import get_backend
    from fsdpbench.run.delays import UnitDelays
    from fsdpbench.run.profile_marks import decoder_units
    from fsdpbench.run.worker import build_sharded_model, make_optimizer

    spec = f"{backend_name}:delay=0/layers.2/forward/1+0/layers.1/backward/2+1/layers.0/forward/3"
    cfg = RunConfig.from_sources(env={}, overrides={"arms": spec, "nproc": 2, "seq_len": 32})
    arm = cfg.arms[0]
    backend = get_backend(backend_name)
    backend.setup("cpu")
    model = build_sharded_model(cfg, arm, backend, backend.init_mesh("cpu", (1,)), torch.device("cpu"))
    model, optimizer = backend.make_training(model, functools.partial(make_optimizer, cfg))
    slept: list[float] = []
    delays = UnitDelays(arm.delays(), rank=0, sleep=slept.append)
    delays.install(model, decoder_units(model))
    ids = torch.randint(0, cfg.model.vocab_size, (1, 32))
    try:
        for _ in range(2):
            loss = model(ids, labels=ids).loss
            backend.backward(loss)
            backend.optimizer_step(optimizer)
    finally:
        delays.remove()
        backend.close()
    assert delays.slept == [("layers.2", "forward"), ("layers.1", "backward")] * 2
    assert slept == [0.001, 0.002] * 2

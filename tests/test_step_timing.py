"""StepRunner's step timing, in process, on a one-rank gloo group with a fake clock.

The recorded ``time_ms`` must be exactly the clock's difference across ``train`` (×1000), with the
clock read twice per step and nowhere else: a hand computation is the reference.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from fsdpbench.backends import get_backend
from fsdpbench.config import RunConfig
from fsdpbench.results import run_folder
from fsdpbench.run.worker import StepRunner, build_sharded_model, make_optimizer, run_steps


class FakeClock:
    """Returns the given readings in order and counts the reads."""

    def __init__(self, readings: list[float]) -> None:
        self.readings = list(readings)
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.readings.pop(0)


@pytest.fixture
def one_rank_gloo(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_recorded_step_times_are_the_clock_differences(tmp_path, one_rank_gloo):
    cfg = RunConfig.from_sources(
        env={},
        overrides={"arms": "torch", "nproc": 1, "layers": 1, "seq_len": 16, "warmup": 1, "steps": 2},
    )
    arm = cfg.arms[0]
    backend = get_backend("torch")
    model = build_sharded_model(cfg, arm, backend, backend.init_mesh("cpu", (1,)), torch.device("cpu"))
    model, optimizer = backend.make_training(model, lambda params: make_optimizer(cfg, params))
    # (start, end) per step, binary-exact: the differences are 0.25 s, 0.5 s and 0.125 s
    clock = FakeClock([10.0, 10.25, 20.0, 20.5, 30.0, 30.125])
    runner = StepRunner(
        cfg=cfg,
        arm=arm,
        backend=backend,
        model=model,
        optimizer=optimizer,
        device_type="cpu",
        device=torch.device("cpu"),
        rank=0,
        world=1,
        replicas=1,
        round_=0,
        steps_path=tmp_path / run_folder.STEPS,
        clock=clock,
    )
    run_steps(runner, cfg.warmup + cfg.steps)
    records = [json.loads(line) for line in (tmp_path / run_folder.STEPS).read_text().splitlines()]
    assert [r["time_ms"] for r in records] == [250.0, 500.0, 125.0]
    assert [r["kind"] for r in records] == ["warmup", "timed", "timed"]
    assert clock.reads == 6 and not clock.readings  # two reads per step, no other reader
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in records)

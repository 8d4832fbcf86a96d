"""RunConfig resolution (preset → TOML → env names → flags), arm parsing and every bad option."""

from __future__ import annotations

from pathlib import Path

import pytest

import fsdpbench.config as config
from fsdpbench.config import RunConfig, parse_arms
from fsdpbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_hyper(monkeypatch):
    monkeypatch.setattr(config.arms, "hyper_available", lambda: False)
    monkeypatch.setattr(config.arms, "deepspeed_available", lambda: False)


@pytest.fixture
def with_hyper(monkeypatch):
    monkeypatch.setattr(config.arms, "hyper_available", lambda: True)
    monkeypatch.setattr(config.arms, "deepspeed_available", lambda: True)


def test_default_arms_are_fsdp2_vs_fsdp1_without_optional_libraries(no_hyper):
    cfg = RunConfig.from_sources(env={})
    assert [a.label for a in cfg.arms] == ["torch", "fsdp1"]
    assert (cfg.preset, cfg.nproc, cfg.rounds, cfg.warmup, cfg.steps) == ("tiny", 2, 3, 2, 8)


def test_default_arms_add_deepspeed_and_hyper_when_importable(with_hyper):
    assert [a.label for a in RunConfig.from_sources(env={}).arms] == ["torch", "fsdp1", "deepspeed", "hyper"]


def test_arm_items_override_shared_flags(no_hyper):
    cfg = RunConfig.from_sources(env={}, overrides={"arms": "torch,torch:prefetch=2:mesh=1x2", "prefetch": 1})
    assert [(a.prefetch, a.mesh) for a in cfg.arms] == [(1, ""), (2, "1x2")]
    assert [a.label for a in cfg.arms] == ["torch-prefetch1", "torch-prefetch2-mesh1x2"]


def test_duplicate_arms_get_unique_labels():
    assert [a.label for a in parse_arms("torch,torch")] == ["torch", "torch-2"]


def test_toml_then_env_then_flags_later_wins(tmp_path, no_hyper):
    toml = tmp_path / "c.toml"
    toml.write_text(
        'seq_len = 64\nlayers = 3\nrounds = 5\narms = ["torch"]\n[arm]\nprefetch = 2\n[model]\nhidden_size = 128\n'
    )
    cfg = RunConfig.from_sources(str(toml), env={})
    assert (
        cfg.seq_len,
        cfg.model.num_hidden_layers,
        cfg.rounds,
        cfg.arms[0].prefetch,
        cfg.model.hidden_size,
    ) == (64, 3, 5, 2, 128)
    env = {"SEQ_LEN": "96", "NUM_LAYERS": "2", "ENABLE_PROFILER": "1", "PREFETCH": "1"}
    cfg = RunConfig.from_sources(str(toml), env=env)
    assert (cfg.seq_len, cfg.model.num_hidden_layers, cfg.profile, cfg.arms[0].prefetch) == (96, 2, True, 1)
    cfg = RunConfig.from_sources(str(toml), env=env, overrides={"seq_len": 32, "layers": 1, "prefetch": 0})
    assert (cfg.seq_len, cfg.model.num_hidden_layers, cfg.arms[0].prefetch) == (32, 1, 0)


def test_to_dict_round_trips(no_hyper):
    cfg = RunConfig.from_sources(
        env={}, overrides={"arms": "torch:ac=full,torch:mesh=1x2", "layers": 2, "seed": 7}
    )
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("study-*-*.toml")))
def test_study_configs_resolve_to_8_npus_full_shape(name, with_hyper):
    cfg = RunConfig.from_sources(str(REPO / "configs" / name), env={})
    assert cfg.world_size == 8 and cfg.device == "npu" and cfg.model.hidden_size == 2048
    assert [a.backend for a in cfg.arms] == ["torch", "hyper"]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"arms": "jax"}, "unknown backend 'jax'"),
        ({"arms": "torch:depth=2"}, "unknown option 'depth'"),
        ({"arms": "torch:prefetch=two"}, "prefetch='two'; use default, none or a depth N >= 0"),
        ({"arms": "torch:prefetch"}, "is not key=value"),
        ({"arms": "torch", "mesh": "3"}, "covers 3 ranks but the world size is 2"),
        ({"arms": "torch:mesh=2x2"}, "covers 4 ranks"),
        ({"arms": "torch:mesh=2y2"}, "is not N or RxS"),
        ({"arms": "torch", "layers": 0}, "--layers must be >= 1"),
        ({"arms": "torch", "seq_len": 0}, "seq_len must be an integer >= 1"),
        ({"arms": "torch", "seq_len": "long"}, "expects int"),
        ({"arms": "torch", "steps": 0}, "--steps must be an integer >= 1"),
        (
            {"arms": "torch", "profile_step": 0},
            "--profile-step must be an integer >= 1 (step 0 creates the NCCL/HCCL",
        ),
        ({"arms": "torch", "profile_steps": 0}, "--profile-steps must be an integer >= 1, got 0"),
        ({"arms": "torch", "device": "tpu"}, "--device 'tpu'"),
        ({"arms": "torch", "nnodes": 2}, "--nnodes > 1 needs --rdzv-endpoint"),
        ({"arms": "torch", "nnodes": 2, "master_port": 29500}, "--nnodes > 1 needs --rdzv-endpoint"),
        ({"arms": "torch", "nnodes": 2, "rdzv_endpoint": "n0:65530"}, "choose a base port of at most 65527"),
        ({"arms": "torch", "rdzv_endpoint": "nohost"}, "is not HOST:PORT"),
        ({"arms": "torch:comm_fusion=true"}, "comm_fusion applies to the hyper backend only"),
        ({"arms": "hyper"}, "needs hyper_parallel, which is not installed"),
        ({"arms": "torch", "bogus": 1}, "unknown option 'bogus'"),
    ],
)
def test_bad_option_names_the_problem(overrides, needle, no_hyper):
    with pytest.raises(ConfigError, match=None) as err:
        RunConfig.from_sources(env={}, overrides=overrides)
    assert needle in str(err.value)


def test_bad_toml_names_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("seq_len = = 3\n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        RunConfig.from_sources(str(bad), env={})
    with pytest.raises(ConfigError, match="no such file"):
        RunConfig.from_sources(str(tmp_path / "missing.toml"), env={})


@pytest.mark.parametrize(
    ("toml_text", "needle"),
    [
        ('order = "random"\n', "--order 'random'; choose one of: alternate, shuffle"),
        ('optimizer = "lamb"\n', "--optimizer 'lamb'; choose one of: sgd, adamw"),
        ('ac = "some"\n', "option ac 'some'; choose one of: off, full"),
        ('param_dtype = "fp8"\n', "option param_dtype 'fp8'; choose one of: float32, bfloat16, float16"),
        ("profile = 2\n", "--profile expects bool, got 2"),
    ],
)
def test_closed_choices_are_checked_when_read(tmp_path, no_hyper, toml_text, needle):
    """A TOML value outside a ``Literal`` choice fails in one line naming the option and every allowed value."""
    path = tmp_path / "c.toml"
    path.write_text('arms = ["torch"]\n' + toml_text)
    with pytest.raises(ConfigError, match=None) as err:
        RunConfig.from_sources(str(path), env={})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_arm_spec_choice_names_the_spec_and_the_values():
    with pytest.raises(ConfigError, match=r"arm 'torch:ac=half' option ac 'half'; choose one of: off, full"):
        parse_arms("torch:ac=half")

"""``RunConfig``: everything one ``fsdpbench run``/``ab`` needs, resolved from its sources.

Values are resolved in this order (later wins): preset → TOML file → study environment names
(``SEQ_LEN``, ``NUM_LAYERS``, ``ENABLE_PROFILER``, ``PREFETCH``, ``PROFILE_RANKS``) → command-line flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, get_args

from fsdpbench.config.arms import (
    ARM_OPTION_FIELDS,
    ARM_TYPES,
    OPTIONAL_BACKENDS,
    Arm,
    default_arm_specs,
    parse_arms,
)
from fsdpbench.config.model import ModelConfig, model_fields, model_preset, preset_tiny
from fsdpbench.config.ranks import profiled_ranks
from fsdpbench.config.types import Device, Dtype, Optimizer, OptimizerImpl, Order, coerce, field_types
from fsdpbench.errors import ConfigError
from fsdpbench.records import Record

DEVICES: tuple[str, ...] = get_args(Device)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
ORDERS: tuple[str, ...] = get_args(Order)
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
ACCELERATORS = ("cuda", "npu")
"""Device types on which an arm's param_dtype defaults to ``device_param_dtype`` (bfloat16)."""
AUTO = "auto"
"""``--rounds auto`` (``rounds = "auto"`` in a TOML file)."""
AUTO_MIN_ROUNDS = 4
"""Rounds per arm before ``--rounds auto`` first looks: its group-sequential test's first look
(``results.sequential.FIRST_LOOK``; docs/methodology.md says why not 3)."""
ENV_NAMES = {
    "SEQ_LEN": "seq_len",
    "NUM_LAYERS": "layers",
    "ENABLE_PROFILER": "profile",
    "PREFETCH": "prefetch",
    "PROFILE_RANKS": "profile_ranks",
}
"""The original study's environment names and the option each one sets (a default below flags)."""


@dataclass(kw_only=True)
class RunConfig(Record):
    """Everything one ``fsdpbench run``/``ab`` needs; ``to_dict()`` is what the manifest records (its
    ``config``), ``from_dict`` reads it back (``--resume``, the worker), each field's type checked and
    keys this version does not know dropped; then ``validate`` runs as for a config built here."""

    name: str = "ab"
    """Results folder prefix: ``<out>/<name>_<YYYYmmdd_HHMMSS>``."""
    arms: list[Arm] = dataclasses.field(default_factory=list)
    """The arms, in order; the first is the base of every comparison."""
    preset: str = "tiny"
    model: ModelConfig = dataclasses.field(default_factory=preset_tiny)
    """The resolved model shape (preset, then ``[model]`` overrides, then ``layers``)."""
    seq_len: int = 256
    batch_size: int = 1
    """Sequences per rank per step."""
    rounds: int = 3
    """Timed launches per arm (fresh processes each), interleaved across arms. With ``rounds_auto``: the
    rounds planned so far (``AUTO_MIN_ROUNDS`` to start with; the launcher adds one at a time)."""
    rounds_auto: bool = False
    """``--rounds auto``: add interleaved rounds until every comparison's group-sequential CI excludes 1 or
    is narrower than ``ci_target`` %, or a limit is reached (``run.rounds``, docs/methodology.md)."""
    ci_target: float = 2.0
    """``--rounds auto``: a comparison whose 95% CI holds 1 and is narrower than this (% of the ratio)
    stops with "no difference larger than X %"."""
    max_rounds: int = 16
    """``--rounds auto``: at most this many rounds per arm; the group-sequential boundaries are computed for it."""
    max_time: float = 0.0
    """``--rounds auto``: add no round that would end past this many seconds of launches, judged by the last
    round's time (0 = no limit)."""
    warmup: int = 2
    """Untimed steps at the start of every launch."""
    steps: int = 8
    """Timed steps per launch."""
    nproc: int = 2
    """Ranks per node."""
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    """``host:port`` of node 0 for multi-node runs (static rendezvous); empty = loopback."""
    master_port: int = 0
    """One node: the rendezvous port on loopback (0 = a free port per launch). Several nodes: replaces
    the port of ``rdzv_endpoint`` (the base port; each launch's is derived from the plan)."""
    collect_traces: bool = False
    """Several nodes: the collect step sends each rank's profiler trace to node 0 too; by default each node
    sends its ranks' compact results (``analyze --ranks-only``) and keeps the traces."""
    device: Device = "auto"
    profile: bool = False
    """Profile one step per arm: after the timed steps of the arm's first round (excluded from the
    statistics), or in a launch of its own with ``separate_profile``."""
    separate_profile: bool = False
    """Profile in one extra launch per arm instead of after the first round's timed steps."""
    profile_step: int = 3
    """Step index (0-based, within a separate profiling launch) that the profiler records; ≥ 1."""
    profile_steps: int = 1
    """Consecutive steps the profiler records (``--profile-steps``; ≥ 1): the first is the one a profiled
    round or ``profile_step`` records with 1, the others follow it. With more than one, each recorded step but
    the last holds its own bookkeeping after its training (docs/methodology.md)."""
    profile_ranges: bool = True
    """fsdpbench's own ranges in the profiled step (``--no-ranges`` leaves them out, so the units come from
    the implementation's own ranges, e.g. FSDP2's: docs/attribution.md "Sources of units")."""
    profile_ranks: str = "all"
    """Which ranks run the profiler in the profiled step (and the memory step): ``all``, ranks and ranges
    (``0-7``, ``0,8,16``) or ``per-node:K`` (``config.ranks``); the others train the same steps unprofiled.
    The manifest's ``profiled_ranks`` lists them; the analysis treats the others as not seen."""
    out: str = "results"
    seed: int = 0
    """Seeds the initial weights and the synthetic tokens (identical for every arm and round)."""
    optimizer: Optimizer = "sgd"
    lr: float = 1e-3
    optimizer_impl: OptimizerImpl = "foreach"
    """``foreach`` (batched ``torch._foreach_*`` kernels) or ``per-parameter`` for every arm, passed to the
    optimizer explicitly: left unset, PyTorch picks per parameter type and device, so arms differ
    (hyper's DTensor is not in ``torch.optim.optimizer._foreach_supported_types``)."""
    device_param_dtype: Dtype = "bfloat16"
    """param_dtype of every arm that does not set one, when the ranks run on NPU or GPU (on CPU: float32).
    An arm's own ``param_dtype=`` (or ``--param-dtype``) always wins."""
    param_dtype_set: list[str] = dataclasses.field(default_factory=list)
    """Labels of the arms whose param_dtype was given (arm spec, TOML or ``--param-dtype``); filled by
    ``from_sources``: the others take ``device_param_dtype`` on NPU/GPU."""
    order: Order = "alternate"
    """``alternate`` (A B, B A, ...) or ``shuffle`` (a seeded permutation, then its reverse, in each pair of
    rounds); both are balanced at every even number of rounds (the verdict's crossover estimate removes a
    first-in-round effect at odd ones)."""
    timeout: float = 900.0
    """Seconds one launch may take before its whole process group is killed."""
    ascend_parse_timeout: float = 1800.0
    """Seconds one rank folder's offline Ascend (msprof) parse may take before it is killed."""
    report: bool = True
    """Write the report at the end (``--no-report`` turns it off)."""
    parity_steps: int = 4
    """Leading steps whose losses must agree across arms."""
    count_collectives: bool = False
    """Debug: count collectives per step by wrapping ``torch.distributed`` (adds a ``collectives`` field)."""
    dump_params: bool = False
    """Debug: rank 0 saves the final full parameters of each launch to ``final_params.pt``."""

    def __post_init__(self) -> None:
        if not self.arms:
            self.arms = parse_arms(default_arm_specs())
        self.validate()

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def profiled_ranks(self) -> list[int]:
        """The global ranks ``profile_ranks`` names (``config.ranks.profiled_ranks``)."""
        return profiled_ranks(self.profile_ranks, self.world_size, self.nproc)

    @property
    def separate_launches(self) -> bool:
        """Whether the profile of each arm takes a launch of its own (``--separate-profile``)."""
        return self.profile and self.separate_profile

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the option, its value and what to use instead."""
        self.model.validate()
        self.model.validate_seq_len(self.seq_len)
        counts = {
            "rounds": 1,
            "steps": 1,
            "nproc": 1,
            "nnodes": 1,
            "batch_size": 1,
            "warmup": 0,
            "node_rank": 0,
            "profile_step": 1,
            "profile_steps": 1,
            "master_port": 0,
            "parity_steps": 0,
        }
        why = {"profile_step": " (step 0 creates the NCCL/HCCL communicators and warms the caches)"}
        for name, low in counts.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be an integer >= {low}{why.get(name, '')}, got {value!r}"
                )
        if self.rounds_auto:
            if self.max_rounds < AUTO_MIN_ROUNDS:
                raise ConfigError(
                    f"--max-rounds must be >= {AUTO_MIN_ROUNDS} with --rounds auto (the first check needs "
                    f"{AUTO_MIN_ROUNDS} rounds per arm), got {self.max_rounds!r}"
                )
            if not self.ci_target > 0:
                raise ConfigError(f"--ci-target must be > 0 (% of the ratio), got {self.ci_target!r}")
            if self.nnodes > 1:
                raise ConfigError(
                    "--rounds auto runs on one node only (the other nodes do not see the step times to decide); "
                    "give --rounds N"
                )
            if self.max_time < 0:
                raise ConfigError(f"--max-time must be >= 0 seconds (0 = no limit), got {self.max_time!r}")
        if self.node_rank >= self.nnodes:
            raise ConfigError(f"--node-rank {self.node_rank} must be < --nnodes {self.nnodes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError(
                "--nnodes > 1 needs --rdzv-endpoint HOST:PORT, node 0's address as every node reaches it "
                "(127.0.0.1 only when all nodes share this machine); --master-port then overrides its port"
            )
        if self.rdzv_endpoint:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT")
            # the plan step, then a launch and a collect step per launch (launcher.plan_ports)
            base, span = (
                self.master_port or int(port),
                2
                + 2
                * (max(self.rounds, self.max_rounds if self.rounds_auto else 0) + int(self.separate_launches))
                * len(self.arms),
            )
            if base + span > 65535:
                raise ConfigError(
                    f"rendezvous port {base}: this run uses ports {base}..{base + span} (the plan step, then "
                    f"two per launch); choose a base port of at most {65535 - span}"
                )
        for name, allowed in (
            ("device", DEVICES),
            ("optimizer", OPTIMIZERS),
            ("order", ORDERS),
            ("optimizer_impl", OPTIMIZER_IMPLS),
            ("device_param_dtype", ("float32", "bfloat16", "float16")),
        ):
            if getattr(self, name) not in allowed:
                flag = name.replace("_", "-")
                raise ConfigError(f"--{flag} {getattr(self, name)!r}; choose one of: {', '.join(allowed)}")
        self.profiled_ranks  # noqa: B018 - raises ConfigError naming --profile-ranks on a bad spec
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if not self.timeout > 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got {self.timeout}")
        if not self.ascend_parse_timeout > 0:
            raise ConfigError(f"--ascend-parse-timeout must be > 0 seconds, got {self.ascend_parse_timeout}")
        if not self.name or any(c in self.name for c in "/\\ "):
            raise ConfigError(f"--name {self.name!r} must be non-empty, without slashes or spaces")
        labels = [a.label for a in self.arms]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"arm labels must be unique, got {labels}")
        for arm in self.arms:
            arm.mesh_shape(self.world_size)
            for d in arm.delays():
                if d.rank >= self.world_size:
                    raise ConfigError(
                        f"arm {arm.label!r}: delay={d.spec()} names rank {d.rank}, but the world has "
                        f"{self.world_size} ranks (0..{self.world_size - 1})"
                    )
                if d.layer is not None and d.layer >= self.model.num_hidden_layers:
                    raise ConfigError(
                        f"arm {arm.label!r}: delay={d.spec()} names {d.unit}, but the model has "
                        f"{self.model.num_hidden_layers} decoder layers (layers.0..layers."
                        f"{self.model.num_hidden_layers - 1}) or root"
                    )
            optional = OPTIONAL_BACKENDS.get(arm.backend)
            if optional and not arm.python and not optional[0]():  # python= arms: probed in their interpreter
                raise ConfigError(f"arm {arm.label!r} needs {optional[1]}, or drop the {arm.backend} arm")

    def param_dtype_for(self, arm: Arm, device_type: str) -> str:
        """The parameter dtype ``arm`` runs with on ``device_type``: its own when it set one, else
        ``device_param_dtype`` on NPU/GPU and float32 on CPU."""
        if arm.label in self.param_dtype_set or device_type not in ACCELERATORS:
            return arm.param_dtype
        return self.device_param_dtype

    @classmethod
    def from_sources(
        cls,
        toml_path: str | None = None,
        env: dict[str, str] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> RunConfig:
        """Resolve preset → TOML file → study environment names → ``overrides`` (later wins).

        Args:
            toml_path: a TOML file with run fields at the top level (``arms`` a list or a comma
                string), shared arm options (``prefetch``, ``mesh``, ...) at the top level or in an
                ``[arm]`` table, ``layers``, and model field overrides in a ``[model]`` table.
            env: environment to read ``SEQ_LEN``, ``NUM_LAYERS``, ``ENABLE_PROFILER``, ``PREFETCH``,
                ``PROFILE_RANKS`` from
                (``os.environ`` when None; pass ``{}`` to ignore it).
            overrides: the same keys as the TOML top level (e.g. parsed command-line flags); ``None``
                values are ignored.
        """
        import os

        merged: dict[str, Any] = {}
        model_overrides: dict[str, Any] = {}
        if toml_path:
            data = read_toml(toml_path)
            model_overrides.update(data.pop("model", {}) or {})
            merged.update(data.pop("arm", {}) or {})
            merged.update(data)
        for env_name, key in ENV_NAMES.items():
            value = (os.environ if env is None else env).get(env_name)
            if value not in (None, ""):
                merged[key] = value
        for key, value in (overrides or {}).items():
            if key == "model" and value:
                model_overrides.update(value)
            elif value is not None:
                merged[key] = value
        return cls._build(merged, model_overrides, source=str(toml_path) if toml_path else "options")

    @classmethod
    def _build(cls, merged: dict[str, Any], model_overrides: dict[str, Any], source: str) -> RunConfig:
        fields = field_types(cls)
        shared: dict[str, Any] = {}
        values: dict[str, Any] = {}
        arms_spec = merged.pop("arms", None)
        layers = merged.pop("layers", None)
        preset = str(merged.pop("preset", "tiny"))
        for key, value in merged.items():
            key = key.replace("-", "_")
            if key == "rounds" and isinstance(value, str) and value.strip().lower() == AUTO:
                values["rounds_auto"], values["rounds"] = True, AUTO_MIN_ROUNDS
                continue
            if key == "profile_ranks" and isinstance(value, list | int) and not isinstance(value, bool):
                value = ",".join(map(str, value)) if isinstance(value, list) else str(value)  # TOML [0, 8]
            if key in ARM_OPTION_FIELDS and key != "label":
                shared[key] = coerce(value, ARM_TYPES[key], f"option {key}")
            elif key in fields and key not in ("model", "arms", "preset", "param_dtype_set"):
                values[key] = coerce(value, fields[key], f"--{key.replace('_', '-')}")
            else:
                raise ConfigError(f"{source}: unknown option {key!r}")
        model = model_preset(preset)
        mfields = model_fields()
        typed: dict[str, Any] = {}
        for key, value in model_overrides.items():
            if key not in mfields:
                raise ConfigError(f"{source}: unknown model field {key!r}")
            typed[key] = coerce(value, mfields[key], f"model.{key}")
        if layers is not None:
            typed["num_hidden_layers"] = coerce(layers, int, "--layers")
            if typed["num_hidden_layers"] < 1:
                raise ConfigError(f"--layers must be >= 1, got {layers!r}")
        model = model.replace(**typed) if typed else model
        specs = arms_spec if arms_spec else default_arm_specs()
        arms = parse_arms(specs, shared)
        specs = specs.split(",") if isinstance(specs, str) else list(specs)
        specs = [s for s in specs if s.strip()]
        values["param_dtype_set"] = [
            arm.label
            for arm, spec in zip(arms, specs, strict=True)
            if "param_dtype" in shared or _sets_param_dtype(spec)
        ]
        return cls(arms=arms, preset=preset, model=model, **values)


def _sets_param_dtype(spec: str) -> bool:
    """Whether the arm spec ``BACKEND[:key=value...]`` sets param_dtype itself."""
    keys = [item.partition("=")[0].strip().replace("-", "_") for item in spec.split(":")[1:]]
    return "param_dtype" in keys


def read_toml(path: str) -> dict[str, Any]:
    """Load a TOML file, or raise a one-line ``ConfigError`` naming it (missing, or not valid TOML)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None

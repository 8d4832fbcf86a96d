"""Configuration dataclasses: the model shape, one arm, and a whole run.

Torch-free on purpose: the CLI, the launcher and the analysis side import this module.
Values are resolved in this order (later wins): preset → TOML file → study environment names
(``SEQ_LEN``, ``NUM_LAYERS``, ``ENABLE_PROFILER``, ``PREFETCH``) → command-line flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fsdpbench.errors import ConfigError

# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ModelConfig:
    """Shape of the Qwen3.5-MoE text model (field names follow transformers' ``Qwen3_5MoeTextConfig``).

    Defaults are Qwen3.5-35B-A3B exactly (reference/qwen35_arch.md §1).
    """

    vocab_size: int = 248320
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    full_attention_interval: int = 4
    """Layer i is full attention iff (i + 1) % interval == 0; the others are Gated DeltaNet."""
    # gated full attention
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    # Gated DeltaNet
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    gdn_chunk_size: int = 64
    """Chunk length of the chunked Gated DeltaNet; sequences are padded up to a multiple internally."""
    # MoE (every layer)
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    norm_topk_prob: bool = True
    # misc
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    loss_chunk_size: int = 2048
    """Tokens per chunk of the chunked cross-entropy (full fp32 logits never exist at once)."""

    @property
    def layer_types(self) -> list[str]:
        """``"full_attention"`` or ``"linear_attention"`` per layer (transformers' names)."""
        k = self.full_attention_interval
        return [
            "full_attention" if (i + 1) % k == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]

    def validate(self) -> None:
        """Raise ``ConfigError`` (a ``ValueError``) naming the field and the rule it breaks."""
        positive = [
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "full_attention_interval",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            "gdn_chunk_size",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "loss_chunk_size",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be an integer >= 1, got {value!r}")
        if self.shared_expert_intermediate_size < 0:
            raise ConfigError(
                f"model.shared_expert_intermediate_size must be >= 0 (0 = no shared expert), "
                f"got {self.shared_expert_intermediate_size}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"model.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"model.num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})"
            )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ConfigError(
                f"model.linear_num_value_heads ({self.linear_num_value_heads}) must be a multiple of "
                f"model.linear_num_key_heads ({self.linear_num_key_heads})"
            )
        if self.num_experts_per_tok > self.num_experts:
            raise ConfigError(
                f"model.num_experts_per_tok ({self.num_experts_per_tok}) must be <= "
                f"model.num_experts ({self.num_experts})"
            )
        for name in ("rms_norm_eps", "rope_theta", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name} must be a number > 0, got {value!r}")
        rotary = int(self.head_dim * self.partial_rotary_factor)
        if not 0.0 < self.partial_rotary_factor <= 1.0 or rotary % 2:
            raise ConfigError(
                f"model.partial_rotary_factor ({self.partial_rotary_factor}) × head_dim ({self.head_dim}) "
                f"must give an even number of rotary dims in (0, head_dim]"
            )

    def validate_seq_len(self, seq_len: int) -> None:
        """Refuse a sequence length the model cannot take, naming the rule.

        Any length >= 1 works: the chunked Gated DeltaNet pads internally to a multiple of
        ``gdn_chunk_size`` (padding sits after the last token, so it cannot change any output).
        """
        if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
            raise ConfigError(f"seq_len must be an integer >= 1 (any length works), got {seq_len!r}")

    def replace(self, **overrides: Any) -> ModelConfig:
        """A copy with ``overrides`` applied and validated."""
        cfg = dataclasses.replace(self, **overrides)
        cfg.validate()
        return cfg


def preset_full() -> ModelConfig:
    """Qwen3.5-35B-A3B text model: 40 layers, 34,660,610,688 parameters."""
    return ModelConfig()


def preset_tiny() -> ModelConfig:
    """Every structural feature of the full model at a size that trains in well under a second on CPU.

    4 layers ([GDN ×3, attention]), hidden 64, 4 query / 2 KV heads × 16 (4 rotary dims), GDN 4 key /
    8 value heads × 16, conv 4, 8 experts top-2 of size 32, shared expert 32, vocab 512, GDN chunk 16,
    loss chunk 256: 410,560 parameters. Every parameter's dim 0 divides 2, 4 and 8 except the 1-row
    ``shared_expert_gate``, which sharding plans handle like the full model's. One fwd+bwd step of
    batch 1 × seq 256 takes ~30-50 ms on one CPU core.
    """
    return ModelConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        gdn_chunk_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        loss_chunk_size=256,
    )


PRESETS = {"full": preset_full, "tiny": preset_tiny}


def model_preset(name: str) -> ModelConfig:
    """Look up a preset by name, or raise a ``ConfigError`` listing the known ones."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


def model_fields() -> dict[str, dataclasses.Field]:
    """The overridable fields of ``ModelConfig`` by name."""
    return {f.name: f for f in dataclasses.fields(ModelConfig)}


def coerce(value: Any, annotation: Any, what: str) -> Any:
    """Turn a TOML/CLI value into the field's type, or raise a ``ConfigError`` naming ``what``."""
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    kind = kind.replace(" ", "")
    try:
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind.startswith("int"):
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("str"):
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} expects {kind.split('|')[0]}, got {value!r}") from None
    return value


# --------------------------------------------------------------------------------------------
# Arms: one FSDP backend plus its options
# --------------------------------------------------------------------------------------------

BACKENDS = ("torch", "fsdp1", "deepspeed", "hyper")
DTYPES = ("float32", "bfloat16", "float16")
DEEPSPEED_KNOBS: dict[str, str] = {
    "reduce_bucket_size": "int",
    "stage3_prefetch_bucket_size": "int",
    "stage3_max_live_parameters": "int",
    "stage3_max_reuse_distance": "int",
    "stage3_param_persistence_threshold": "int",
    "sub_group_size": "int",
    "overlap_comm": "bool",
    "contiguous_gradients": "bool",
    "reduce_scatter": "bool",
}
"""DeepSpeed ZeRO-3 knobs a ``deepspeed`` arm may set (``zero_optimization`` keys), with their types."""
BACKEND_OPTIONS: dict[str, dict[str, str]] = {"deepspeed": DEEPSPEED_KNOBS}
"""Backend-specific arm options by backend (allow-lists); they go to ``Arm.backend_options``."""


@dataclass(kw_only=True)
class Arm:
    """One FSDP implementation plus its options. The same option names hold for every backend."""

    backend: str
    """``torch`` (PyTorch FSDP2 ``fully_shard``), ``fsdp1`` (PyTorch ``FullyShardedDataParallel``),
    ``deepspeed`` (DeepSpeed ZeRO stage 3) or ``hyper`` (hyper_parallel ``fully_shard``, Torch backend)."""
    prefetch: int = 0
    """Explicit forward+backward layer prefetch depth; 0 = none."""
    reshard_after_forward: bool = True
    """Always a bool: the two libraries read ``None`` differently."""
    mesh: str = ""
    """``N`` (1D FSDP over N ranks) or ``RxS`` (HSDP, replicate × shard); empty = 1D over the world."""
    param_dtype: str = "float32"
    reduce_dtype: str = "float32"
    comm_fusion: bool = False
    """hyper only: fuse per-parameter collectives. A clear error where the installed library cannot."""
    ac: str = "off"
    """Activation checkpointing: ``off`` or ``full`` (every decoder layer)."""
    python: str = ""
    """Interpreter that runs this arm's ranks (another venv); empty = the launcher's own."""
    backend_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The backend's own knobs (``BACKEND_OPTIONS``), e.g. DeepSpeed's ``reduce_bucket_size``."""
    label: str = ""
    """Unique name of the arm in results and reports (derived from the spec when empty)."""

    def __post_init__(self) -> None:
        self.validate()
        if not self.label:
            self.label = self.default_label()

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the option and the allowed values."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r}; choose one of: {', '.join(BACKENDS)}")
        if self.prefetch < 0:
            raise ConfigError(f"arm option prefetch must be >= 0, got {self.prefetch}")
        for name in ("param_dtype", "reduce_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(
                    f"arm option {name}={getattr(self, name)!r}; choose one of: {', '.join(DTYPES)}"
                )
        if self.ac not in ("off", "full"):
            raise ConfigError(f"arm option ac={self.ac!r}; choose off or full")
        if self.comm_fusion and self.backend != "hyper":
            raise ConfigError("arm option comm_fusion applies to the hyper backend only")
        if self.mesh:
            parse_mesh(self.mesh)
        allowed = BACKEND_OPTIONS.get(self.backend, {})
        for key in self.backend_options:
            if key not in allowed:
                known = f"known: {', '.join(allowed)}" if allowed else f"the {self.backend} backend has none"
                raise ConfigError(
                    f"arm option {key!r} is not an option of the {self.backend} backend ({known})"
                )
        self._validate_backend_rules()

    def _validate_backend_rules(self) -> None:
        """Refuse option combinations a backend has no faithful equivalent for."""
        what = f"arm {self.label or self.backend!r}"
        if self.backend == "fsdp1":
            if self.prefetch > 1:
                raise ConfigError(
                    f"{what}: prefetch={self.prefetch}, but FSDP1 prefetches at most one unit ahead "
                    "(forward_prefetch + BACKWARD_PRE); use prefetch=0 or 1 for the fsdp1 arm"
                )
            if self.mesh and len(parse_mesh(self.mesh)) == 2 and parse_mesh(self.mesh)[1] == 1:
                raise ConfigError(
                    f"{what}: mesh {self.mesh} has shard size 1; FSDP1's HYBRID_SHARD then silently becomes "
                    "NO_SHARD and the replicas drift apart; use a shard size of at least 2 (RxS with S >= 2)"
                )
        if self.backend == "deepspeed":
            if self.mesh and len(parse_mesh(self.mesh)) == 2:
                raise ConfigError(
                    f"{what}: mesh {self.mesh} asks for HSDP, which DeepSpeed ZeRO-3 has no equivalent of in "
                    "current releases (MiCS was removed); use a 1-D mesh for the deepspeed arm"
                )
            if "float16" in (self.param_dtype, self.reduce_dtype):
                raise ConfigError(
                    f"{what}: float16 needs DeepSpeed's loss scaling, which no other arm has; "
                    "use bfloat16 or float32 for the deepspeed arm"
                )
            if self.param_dtype == "float32" and self.reduce_dtype != "float32":
                raise ConfigError(
                    f"{what}: reduce_dtype={self.reduce_dtype} with float32 parameters has no DeepSpeed "
                    "equivalent (its communication dtype follows bf16 mode); use param_dtype=bfloat16 or "
                    "reduce_dtype=float32"
                )

    def default_label(self) -> str:
        parts = [self.backend]
        defaults = {f.name: f.default for f in dataclasses.fields(Arm)}
        for name in (
            "prefetch",
            "reshard_after_forward",
            "mesh",
            "param_dtype",
            "reduce_dtype",
            "comm_fusion",
            "ac",
        ):
            value = getattr(self, name)
            if value != defaults[name]:
                short = {
                    "reshard_after_forward": "raf",
                    "param_dtype": "pdt",
                    "reduce_dtype": "rdt",
                    "comm_fusion": "fusion",
                }.get(name, name)
                text = (
                    {True: "1", False: "0"}.get(value, str(value)) if isinstance(value, bool) else str(value)
                )
                parts.append(f"{short}{text.replace('bfloat16', 'bf16').replace('float', 'fp')}")
        parts += [f"{k}{_short_value(v)}" for k, v in sorted(self.backend_options.items())]
        if self.python:
            parts.append(interpreter_env_name(self.python))
        return "-".join(parts)

    def options(self) -> dict[str, Any]:
        """The options as a plain dict (for manifests and the worker's command line)."""
        return dataclasses.asdict(self)

    def mesh_shape(self, world_size: int) -> tuple[int, ...]:
        """The mesh as a tuple for ``world_size`` ranks; raise if it does not cover the world exactly."""
        shape = parse_mesh(self.mesh) if self.mesh else (world_size,)
        total = 1
        for n in shape:
            total *= n
        if total != world_size:
            raise ConfigError(
                f"mesh {self.mesh or world_size!r} of arm {self.label!r} covers {total} ranks but the world "
                f"size is {world_size}; use --mesh {world_size} or RxS with R×S = {world_size}"
            )
        return shape


ARM_OPTION_FIELDS = (
    "prefetch",
    "reshard_after_forward",
    "mesh",
    "param_dtype",
    "reduce_dtype",
    "comm_fusion",
    "ac",
    "python",
    "label",
)


def _short_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:g}" if isinstance(value, float) else str(value)


def interpreter_env_name(python: str) -> str:
    """A short name for an interpreter path: its environment folder (``/x/venvA/bin/python`` → ``venvA``)."""
    from pathlib import PurePath

    path = PurePath(python)
    return (path.parent.parent.name if path.parent.name == "bin" else path.parent.name) or path.name


def coerce_backend_option(value: Any, kind: str, what: str) -> Any:
    """Like ``coerce``, but integers may be written as ``5e7``."""
    if kind == "int" and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"{what} expects int, got {value!r}") from None
        if not number.is_integer():
            raise ConfigError(f"{what} expects int, got {value!r}")
        return int(number)
    return coerce(value, kind, what)


def parse_mesh(text: str | int) -> tuple[int, ...]:
    """``"8"`` → ``(8,)``; ``"2x4"`` → ``(2, 4)`` (replicate × shard)."""
    parts = str(text).lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"mesh {text!r} is not N or RxS (e.g. 8 or 2x4)") from None
    if len(shape) > 2 or any(n < 1 for n in shape):
        raise ConfigError(f"mesh {text!r} is not N or RxS with positive integers (e.g. 8 or 2x4)")
    return shape


def parse_arm(spec: str, shared: dict[str, Any] | None = None) -> Arm:
    """Parse ``BACKEND[:key=value...]`` (e.g. ``hyper:prefetch=2:mesh=2x4``) on top of ``shared`` options."""
    backend, *items = [s.strip() for s in spec.strip().split(":")]
    values: dict[str, Any] = dict(shared or {})
    fields = {f.name: f for f in dataclasses.fields(Arm)}
    for item in items:
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"arm {spec!r}: option {item!r} is not key=value")
        own = BACKEND_OPTIONS.get(backend, {})
        if key in own:
            knobs = values.setdefault("backend_options", {})
            knobs[key] = coerce_backend_option(raw.strip(), own[key], f"arm {spec!r} option {key}")
            continue
        if key not in ARM_OPTION_FIELDS:
            known = ", ".join([*ARM_OPTION_FIELDS, *own])
            raise ConfigError(f"arm {spec!r}: unknown option {key!r}; known: {known}")
        values[key] = coerce(raw.strip(), fields[key].type, f"arm {spec!r} option {key}")
    if "backend_options" in values:
        values["backend_options"] = dict(values["backend_options"])
    return Arm(backend=backend, **values)


def parse_arms(text: str | list[str], shared: dict[str, Any] | None = None) -> list[Arm]:
    """Parse a comma-separated list of arm specs; labels are made unique."""
    specs = text.split(",") if isinstance(text, str) else list(text)
    arms = [parse_arm(s, shared) for s in specs if s.strip()]
    if not arms:
        raise ConfigError("no arms given; e.g. --arms torch,hyper:prefetch=1")
    seen: dict[str, int] = {}
    for arm in arms:
        if arm.label in seen:
            seen[arm.label] += 1
            arm.label = f"{arm.label}-{seen[arm.label]}"
        else:
            seen[arm.label] = 1
    return arms


# --------------------------------------------------------------------------------------------
# Run
# --------------------------------------------------------------------------------------------

DEVICES = ("auto", "cpu", "cuda", "npu")
OPTIMIZERS = ("sgd", "adamw")
ORDERS = ("alternate", "shuffle")
ENV_NAMES = {
    "SEQ_LEN": "seq_len",
    "NUM_LAYERS": "layers",
    "ENABLE_PROFILER": "profile",
    "PREFETCH": "prefetch",
}
"""The original study's environment names and the option each one sets (a default below flags)."""


def hyper_available() -> bool:
    """Whether hyper_parallel is importable, found without importing it (its import patches torch)."""
    import importlib.util

    return importlib.util.find_spec("hyper_parallel") is not None


def deepspeed_available() -> bool:
    """Whether deepspeed is importable, found without importing it (its import probes accelerators)."""
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


OPTIONAL_BACKENDS: dict[str, tuple[Any, str]] = {
    "deepspeed": (
        lambda: deepspeed_available(),
        "deepspeed, which is not installed; pip install deepspeed (or pip install 'fsdpbench[deepspeed]')",
    ),
    "hyper": (
        lambda: hyper_available(),
        "hyper_parallel, which is not installed; install it from its repository "
        "(pip install --no-deps -e <hyper-parallel checkout>; pip install pyyaml)",
    ),
}
"""Backends whose library is optional: (is it importable here?, what the error says is missing)."""


def default_arm_specs() -> list[str]:
    """FSDP2 (the base) vs FSDP1, both in every torch; plus deepspeed and hyper when importable."""
    return ["torch", "fsdp1"] + [name for name, (available, _) in OPTIONAL_BACKENDS.items() if available()]


@dataclass(kw_only=True)
class RunConfig:
    """Everything one ``fsdpbench run``/``ab`` needs; ``to_dict()`` is what the manifest records."""

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
    """Timed launches per arm (fresh processes each), interleaved across arms."""
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
    """Rendezvous port on loopback; 0 = a free port per launch (single node only)."""
    device: str = "auto"
    profile: bool = False
    """Add one profiling launch per arm (never mixed with the timed rounds)."""
    profile_step: int = 3
    """Step index (0-based, within the profiling launch) that the profiler records; ≥ 1."""
    out: str = "results"
    seed: int = 0
    """Seeds the initial weights and the synthetic tokens (identical for every arm and round)."""
    optimizer: str = "sgd"
    lr: float = 1e-3
    order: str = "alternate"
    """``alternate`` (A B, B A, ...) or ``shuffle`` (a seeded permutation per round)."""
    timeout: float = 900.0
    """Seconds one launch may take before its whole process group is killed."""
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
        if self.node_rank >= self.nnodes:
            raise ConfigError(f"--node-rank {self.node_rank} must be < --nnodes {self.nnodes}")
        if self.nnodes > 1 and not (self.rdzv_endpoint or self.master_port):
            raise ConfigError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (or --master-port on loopback)")
        if self.rdzv_endpoint:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT")
        for name, allowed in (("device", DEVICES), ("optimizer", OPTIMIZERS), ("order", ORDERS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"--{name} {getattr(self, name)!r}; choose one of: {', '.join(allowed)}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if not self.timeout > 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got {self.timeout}")
        if not self.name or any(c in self.name for c in "/\\ "):
            raise ConfigError(f"--name {self.name!r} must be non-empty, without slashes or spaces")
        labels = [a.label for a in self.arms]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"arm labels must be unique, got {labels}")
        for arm in self.arms:
            arm.mesh_shape(self.world_size)
            optional = OPTIONAL_BACKENDS.get(arm.backend)
            if optional and not arm.python and not optional[0]():  # python= arms: probed in their interpreter
                raise ConfigError(f"arm {arm.label!r} needs {optional[1]}, or drop the {arm.backend} arm")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict; ``from_dict`` inverts it."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["arms"] = [a.options() for a in self.arms]
        out["model"] = dataclasses.asdict(self.model)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Rebuild a config written by ``to_dict`` (e.g. from a manifest, for ``--resume``)."""
        values = dict(data)
        values["arms"] = [Arm(**a) for a in values.get("arms", [])]
        values["model"] = ModelConfig(**values.get("model", {}))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

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
            env: environment to read ``SEQ_LEN``, ``NUM_LAYERS``, ``ENABLE_PROFILER``, ``PREFETCH`` from
                (``os.environ`` when None; pass ``{}`` to ignore it).
            overrides: the same keys as the TOML top level (e.g. parsed command-line flags); ``None``
                values are ignored.
        """
        import os

        merged: dict[str, Any] = {}
        model_overrides: dict[str, Any] = {}
        if toml_path:
            data = _read_toml(toml_path)
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
        fields = {f.name: f for f in dataclasses.fields(cls)}
        arm_fields = {f.name: f for f in dataclasses.fields(Arm)}
        shared: dict[str, Any] = {}
        values: dict[str, Any] = {}
        arms_spec = merged.pop("arms", None)
        layers = merged.pop("layers", None)
        preset = str(merged.pop("preset", "tiny"))
        for key, value in merged.items():
            key = key.replace("-", "_")
            if key in ARM_OPTION_FIELDS and key != "label":
                shared[key] = coerce(value, arm_fields[key].type, f"option {key}")
            elif key in fields and key not in ("model", "arms", "preset"):
                values[key] = coerce(value, fields[key].type, f"option {key}")
            else:
                raise ConfigError(f"{source}: unknown option {key!r}")
        model = model_preset(preset)
        mfields = model_fields()
        typed: dict[str, Any] = {}
        for key, value in model_overrides.items():
            if key not in mfields:
                raise ConfigError(f"{source}: unknown model field {key!r}")
            typed[key] = coerce(value, mfields[key].type, f"model.{key}")
        if layers is not None:
            typed["num_hidden_layers"] = coerce(layers, "int", "--layers")
            if typed["num_hidden_layers"] < 1:
                raise ConfigError(f"--layers must be >= 1, got {layers!r}")
        model = model.replace(**typed) if typed else model
        arms = parse_arms(arms_spec if arms_spec else default_arm_specs(), shared)
        return cls(arms=arms, preset=preset, model=model, **values)


def _read_toml(path: str) -> dict[str, Any]:
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

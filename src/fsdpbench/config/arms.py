"""Arms: one FSDP implementation plus its options, their parsing (``BACKEND[:key=value...]``) and
which optional libraries are importable here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from fsdpbench.config.types import Ac, Backend, Dtype, coerce, field_types
from fsdpbench.errors import ConfigError
from fsdpbench.records import Record

Unit = Literal["layer", "module"]
BACKENDS: tuple[str, ...] = get_args(Backend)
DTYPES: tuple[str, ...] = get_args(Dtype)
DEEPSPEED_KNOBS: dict[str, type] = {
    "reduce_bucket_size": int,
    "stage3_prefetch_bucket_size": int,
    "stage3_max_live_parameters": int,
    "stage3_max_reuse_distance": int,
    "stage3_param_persistence_threshold": int,
    "sub_group_size": int,
    "overlap_comm": bool,
    "contiguous_gradients": bool,
    "reduce_scatter": bool,
}
"""DeepSpeed ZeRO-3 knobs a ``deepspeed`` arm may set (``zero_optimization`` keys), with their types."""
BACKEND_OPTIONS: dict[str, dict[str, type]] = {"deepspeed": DEEPSPEED_KNOBS}
"""Backend-specific arm options by backend (allow-lists); they go to ``Arm.backend_options``."""
FsdpChoice = Literal["auto", "upstream", "npu"]
MemCache = Literal["off", "on"]
Depth = int | Literal["default", "none"]
"""A prefetch setting of one direction: the library's own default, none at all, or N units/layers ahead."""
PLAN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "torch": ("module", "mesh", "reshard_after_forward", "mp_policy", "shard_placement_fn"),
    "hyper": ("module", "mesh", "reshard_after_forward", "mp_policy", "shard_placement_fn", "device"),
    "fsdp1": (
        "module",
        "process_group",
        "sharding_strategy",
        "auto_wrap_policy",
        "backward_prefetch",
        "mixed_precision",
        "param_init_fn",
        "device_id",
        "forward_prefetch",
        "limit_all_gathers",
        "use_orig_params",
        "device_mesh",
    ),
}
"""Keywords of each backend's sharding call that the plan (or another arm option) sets: ``kw.`` refuses them."""
SHARDING_CALLS: dict[str, str] = {
    "torch": "torch.distributed.fsdp.fully_shard",
    "hyper": "hyper_parallel.core.fully_shard.fully_shard",
    "fsdp1": "torch.distributed.fsdp.FullyShardedDataParallel",
}
"""The function whose signature ``kw.`` options are checked against (torch_npu's ``fully_shard`` takes
``*args, **kwargs`` and passes them on to torch's, so the torch arm is checked against torch's)."""
BACKEND_SET_ENV: dict[str, dict[str, str]] = {"hyper": {"HYPER_PARALLEL_PLATFORM": "torch"}}
"""Variables a backend's worker always sets (``env.`` may not set another value)."""
DELAY_PHASES: tuple[str, ...] = ("forward", "backward")
"""The phases a ``delay=`` can sit at: each unit's forward and backward (docs/phases.md)."""
ROOT_UNIT = "root"
"""The root unit's name (the model itself, around the decoder layers), as the profiled step's ranges name it."""


@dataclass(frozen=True, slots=True)
class Delay:
    """One ``delay=RANK/UNIT/PHASE/MS``: rank ``rank`` sleeps ``ms`` on the host at the start of ``unit``'s
    ``phase`` in every timed and profiled step of the arm (``run/delays.py``)."""

    rank: int
    unit: str
    """``layers.<i>`` (a decoder layer, counted from 0) or ``root``."""
    phase: str
    """``forward`` or ``backward``."""
    ms: float

    @property
    def place(self) -> tuple[int, str, str]:
        """(rank, unit, phase)."""
        return self.rank, self.unit, self.phase

    @property
    def layer(self) -> int | None:
        """The decoder layer index of a ``layers.<i>`` unit; None for the root."""
        return None if self.unit == ROOT_UNIT else int(self.unit.split(".", 1)[1])

    def spec(self) -> str:
        """The canonical text ``RANK/UNIT/PHASE/MS`` (MS with ``%g``)."""
        return f"{self.rank}/{self.unit}/{self.phase}/{self.ms:g}"

    @classmethod
    def parse(cls, text: str, what: str = "arm option delay") -> Delay:
        """Parse ``RANK/UNIT/PHASE/MS`` (e.g. ``2/layers.1/backward/40``); ``ConfigError`` naming ``what``."""
        parts = [p.strip() for p in str(text).strip().split("/")]
        form = "delay=RANK/UNIT/PHASE/MS, e.g. delay=2/layers.1/backward/40"
        if len(parts) != 4:
            raise ConfigError(f"{what} {text!r} is not {form}")
        rank, unit, phase, ms = parts
        if not rank.isdigit():
            raise ConfigError(f"{what} {text!r}: RANK must be an integer >= 0, got {rank!r} ({form})")
        index = unit.split(".", 1)[1] if unit.startswith("layers.") else ""
        if unit != ROOT_UNIT and not index.isdigit():
            raise ConfigError(
                f"{what} {text!r}: UNIT must be a decoder layer layers.<i> (from 0) or root, got {unit!r}"
            )
        if phase not in DELAY_PHASES:
            raise ConfigError(f"{what} {text!r}: PHASE must be forward or backward, got {phase!r}")
        try:
            value = float(ms)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"{what} {text!r}: MS must be a number of milliseconds > 0, got {ms!r}")
        unit = ROOT_UNIT if unit == ROOT_UNIT else f"layers.{int(index)}"
        return cls(rank=int(rank), unit=unit, phase=phase, ms=value)


def parse_delays(items: Any, what: str = "arm option delay") -> list[Delay]:
    """The delays of an arm from its ``delay`` value(s): a list of specs, each ``RANK/UNIT/PHASE/MS`` or
    several joined by ``+``. ``ConfigError`` when one is malformed or two share a (rank, unit, phase)."""
    texts = [items] if isinstance(items, str) else list(items or [])
    delays = [Delay.parse(t, what) for text in texts for t in str(text).split("+") if t.strip()]
    seen: set[tuple[int, str, str]] = set()
    for d in delays:
        if d.place in seen:
            raise ConfigError(
                f"{what}: two delays at rank {d.rank}, {d.unit}, {d.phase}; give one delay per place "
                "(their sum, if that is what you mean)"
            )
        seen.add(d.place)
    return delays


@dataclass(kw_only=True)
class Arm(Record):
    """One FSDP implementation plus its options. The same option names hold for every backend."""

    _omit_if_empty: ClassVar[frozenset[str]] = frozenset({"delay"})

    backend: Backend
    """``torch`` (PyTorch FSDP2 ``fully_shard``), ``fsdp1`` (PyTorch ``FullyShardedDataParallel``),
    ``deepspeed`` (DeepSpeed ZeRO stage 3) or ``hyper`` (hyper_parallel ``fully_shard``, Torch backend)."""
    prefetch: int | str = 0
    """Prefetch of both directions: N >= 1 layers ahead, ``default`` (the library's own), ``none`` (no
    prefetch at all), or 0: no explicit prefetch set by fsdpbench, as before per-direction options
    existed (FSDP2 and hyper: the library default; fsdp1 and deepspeed: none). Stored as 0 or N; the
    words go to ``fwd_prefetch``/``bwd_prefetch``."""
    fwd_prefetch: str = ""
    """Forward prefetch (``default``, ``none`` or N >= 1); empty = from ``prefetch``."""
    bwd_prefetch: str = ""
    """Backward prefetch (``default``, ``none`` or N >= 1); empty = from ``prefetch``."""
    fsdp: FsdpChoice = "auto"
    """torch only: which ``fully_shard`` runs. ``auto``: torch_npu's
    (``torch_npu.distributed.fsdp.fully_shard``) on NPU when torch_npu has it, else upstream;
    ``upstream``: ``torch.distributed.fsdp.fully_shard`` everywhere; ``npu``: torch_npu's or an error."""
    mem_cache: MemCache = "off"
    """torch with torch_npu's ``fully_shard`` only: ``on`` sets torch_npu's ``_use_mem_cache`` on every shard
    unit (its cache of all-gather/reduce-scatter buffers); ``off`` (default) leaves torch_npu's default."""
    reshard_after_forward: bool = True
    """Always a bool: the two libraries read ``None`` differently."""
    unit: Unit = "layer"
    """Shard-unit granularity: ``layer`` (each decoder layer, then the root) or ``module`` (every module
    that directly holds parameters, then the layers, then the root; backends/plan.py). Not ``deepspeed``."""
    mesh: str = ""
    """``N`` (1D FSDP over N ranks) or ``RxS`` (HSDP, replicate × shard); empty = 1D over the world."""
    param_dtype: Dtype = "float32"
    reduce_dtype: Dtype = "float32"
    comm_fusion: bool = False
    """hyper only: fuse per-parameter collectives. A clear error where the installed library cannot."""
    ac: Ac = "off"
    """Activation checkpointing: ``off`` or ``full`` (every decoder layer)."""
    python: str = ""
    """Interpreter that runs this arm's ranks (another venv); empty = the launcher's own."""
    backend_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The backend's own knobs (``BACKEND_OPTIONS``), e.g. DeepSpeed's ``reduce_bucket_size``."""
    kw: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``kw.NAME=VALUE``: keywords passed to every call of the arm's sharding function (text until the
    launcher types them from the signature in the arm's interpreter: ``interpreters.type_keywords``)."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    """``env.NAME=VALUE``: environment variables of this arm's launches only (they win over the shell's
    and over the launcher's defaults; see docs/arms.md)."""
    delay: list[str] = dataclasses.field(default_factory=list)
    """``delay=RANK/UNIT/PHASE/MS`` (repeatable, or several joined by ``+``): rank RANK sleeps MS ms on the
    host at the start of UNIT's PHASE in every timed and profiled step (``run/delays.py``; docs/arms.md).
    Stored as canonical ``RANK/UNIT/PHASE/MS`` texts; written to the manifest only when set."""
    label: str = ""
    """Unique name of the arm in results and reports (derived from the spec when empty)."""

    def __post_init__(self) -> None:
        self._normalize_prefetch()
        what = f"arm {self.label or self.backend!r} option delay"
        self.delay = [d.spec() for d in parse_delays(self.delay, what)]
        self.validate()
        if not self.label:
            self.label = self.default_label()

    def _normalize_prefetch(self) -> None:
        """``prefetch`` as 0 or N; its words (``default``/``none``) into the unset direction options."""
        what = f"arm {self.label or self.backend!r}"
        if isinstance(self.prefetch, str):
            text = self.prefetch.strip().lower()
            if text in ("default", "none"):
                self.fwd_prefetch = self.fwd_prefetch or text
                self.bwd_prefetch = self.bwd_prefetch or text
                self.prefetch = 0
            else:
                try:
                    self.prefetch = int(text)
                except ValueError:
                    raise ConfigError(
                        f"{what}: prefetch={self.prefetch!r}; use default, none or a depth N >= 0"
                    ) from None
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise ConfigError(
                f"{what}: prefetch must be default, none or a depth N >= 0, got {self.prefetch!r}"
            )
        for name in ("fwd_prefetch", "bwd_prefetch"):
            value = getattr(self, name)
            text = str(value).strip().lower() if not isinstance(value, bool) else "?"
            if text in ("", "default", "none") or (text.isdigit() and int(text) >= 1):
                setattr(self, name, str(int(text)) if text.isdigit() else text)
            elif text == "0":
                raise ConfigError(
                    f"{what}: {name}=0 is ambiguous; write none (no prefetch at all) or default "
                    "(the library's own)"
                )
            else:
                raise ConfigError(f"{what}: {name}={value!r}; use default, none or a depth N >= 1")

    def delays(self) -> list[Delay]:
        """The arm's delays, parsed (``Delay``); empty for an arm without ``delay=``."""
        return parse_delays(self.delay)

    def prefetch_directions(self) -> tuple[Depth, Depth]:
        """(forward, backward) prefetch as run: ``"default"``, ``"none"`` or a depth N >= 1."""

        def depth(text: str) -> Depth:
            return int(text) if text.isdigit() else text  # type: ignore[return-value]

        if self.prefetch:
            base: tuple[Depth, Depth] = (int(self.prefetch), int(self.prefetch))
        else:
            base = PREFETCH_ZERO[self.backend]
        return (
            depth(self.fwd_prefetch) if self.fwd_prefetch else base[0],
            depth(self.bwd_prefetch) if self.bwd_prefetch else base[1],
        )

    def _validate_kw_env(self) -> None:
        what = f"arm {self.label or self.backend!r}"
        if self.kw and self.backend not in SHARDING_CALLS:
            raise ConfigError(
                f"{what}: kw.{next(iter(self.kw))}: the {self.backend} arm has no sharding call to pass "
                f"keywords to; use its own knobs ({', '.join(BACKEND_OPTIONS.get(self.backend, {}))})"
            )
        for key in self.kw:
            if not key.isidentifier():
                raise ConfigError(f"{what}: kw.{key} is not a keyword name")
            if key in PLAN_KEYWORDS.get(self.backend, ()):
                raise ConfigError(
                    f"{what}: kw.{key} is set by fsdpbench's sharding plan (or another arm option) and cannot "
                    f"be passed; the plan sets {', '.join(PLAN_KEYWORDS[self.backend])}"
                )
        if self.comm_fusion and "comm_fusion" in self.kw:
            raise ConfigError(f"{what}: comm_fusion is set twice (comm_fusion and kw.comm_fusion); keep one")
        for key, value in self.env.items():
            if not key or not (key.replace("_", "a").isalnum() and not key[0].isdigit()):
                raise ConfigError(f"{what}: env.{key} is not an environment variable name")
            forced = BACKEND_SET_ENV.get(self.backend, {}).get(key)
            if forced is not None and value != forced:
                raise ConfigError(
                    f"{what}: env.{key}={value}, but the {self.backend} arm always runs with {key}={forced}; "
                    f"drop env.{key}"
                )

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the option and the allowed values."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r}; choose one of: {', '.join(BACKENDS)}")
        if self.fsdp not in get_args(FsdpChoice):
            raise ConfigError(
                f"arm option fsdp={self.fsdp!r}; choose one of: {', '.join(get_args(FsdpChoice))}"
            )
        if self.fsdp != "auto" and self.backend != "torch":
            raise ConfigError(f"arm option fsdp={self.fsdp} applies to the torch backend only")
        if self.mem_cache not in get_args(MemCache):
            raise ConfigError(f"arm option mem_cache={self.mem_cache!r}; choose on or off")
        if self.mem_cache == "on" and (self.backend != "torch" or self.fsdp == "upstream"):
            raise ConfigError(
                "arm option mem_cache=on is torch_npu's FSDP2 buffer cache: it applies to the torch backend "
                "with fsdp=auto (on NPU) or fsdp=npu only"
            )
        self._validate_kw_env()
        for name in ("param_dtype", "reduce_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(
                    f"arm option {name}={getattr(self, name)!r}; choose one of: {', '.join(DTYPES)}"
                )
        if self.ac not in get_args(Ac):
            raise ConfigError(f"arm option ac={self.ac!r}; choose one of: {', '.join(get_args(Ac))}")
        if self.unit not in get_args(Unit):
            raise ConfigError(f"arm option unit={self.unit!r}; choose one of: {', '.join(get_args(Unit))}")
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
        forward, backward = self.prefetch_directions()
        if self.backend == "fsdp1":
            for name, value in (
                ("prefetch", self.prefetch),
                ("fwd_prefetch", forward),
                ("bwd_prefetch", backward),
            ):
                if isinstance(value, int) and value > 1:
                    raise ConfigError(
                        f"{what}: {name}={value}, but FSDP1 prefetches at most one unit ahead per direction "
                        "(forward_prefetch, BACKWARD_PRE); use 0, 1, none or default for the fsdp1 arm"
                    )
            if self.mesh and len(parse_mesh(self.mesh)) == 2 and parse_mesh(self.mesh)[1] == 1:
                raise ConfigError(
                    f"{what}: mesh {self.mesh} has shard size 1; FSDP1's HYBRID_SHARD then silently becomes "
                    "NO_SHARD and the replicas drift apart; use a shard size of at least 2 (RxS with S >= 2)"
                )
        if self.backend == "deepspeed":
            if forward != backward:
                raise ConfigError(
                    f"{what}: fwd_prefetch={forward} and bwd_prefetch={backward}, but DeepSpeed ZeRO-3 has one "
                    "prefetch bucket for both directions; set prefetch=default|none|N for the deepspeed arm"
                )
            if self.unit != "layer":
                raise ConfigError(
                    f"{what}: unit={self.unit}, but DeepSpeed ZeRO-3 has no wrapping knob (it gathers per module "
                    "as modules run; its granularity is stage3_prefetch_bucket_size); drop unit for the deepspeed arm"
                )
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
        same = self.fwd_prefetch == self.bwd_prefetch and not self.prefetch
        for name in ARM_OPTION_FIELDS:
            if name in ("python", "label"):  # the interpreter is named below; the label is what this builds
                continue
            if name == "delay":  # a folder name: no slashes (rank, unit, phase, ms joined by dashes)
                parts += [f"delay{d.rank}-{d.unit}-{d.phase}-{d.ms:g}ms" for d in self.delays()]
                continue
            value = getattr(self, name)
            if name == "fwd_prefetch" and same and value:
                parts.append(f"prefetch{value}")  # prefetch=none|default, both directions
                continue
            if name == "bwd_prefetch" and same:
                continue
            if value != defaults[name]:
                short = {
                    "fsdp": "",
                    "mem_cache": "memcache",
                    "fwd_prefetch": "fwd",
                    "bwd_prefetch": "bwd",
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
        """The options as a plain dict (for manifests and the worker's command line): ``to_dict()``."""
        return self.to_dict()

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
    "fwd_prefetch",
    "bwd_prefetch",
    "fsdp",
    "mem_cache",
    "reshard_after_forward",
    "unit",
    "mesh",
    "param_dtype",
    "reduce_dtype",
    "comm_fusion",
    "ac",
    "python",
    "delay",
    "label",
)


ARM_TYPES: dict[str, Any] = field_types(Arm)
"""Each ``Arm`` field's type (``Literal`` for the closed choices), for ``coerce``."""
PREFETCH_ZERO: dict[str, tuple[Depth, Depth]] = {
    "torch": ("default", "default"),
    "hyper": ("default", "default"),
    "fsdp1": ("none", "none"),
    "deepspeed": ("none", "none"),
}
"""(forward, backward) of ``prefetch=0``: no explicit prefetch set by fsdpbench, as it always meant.
For FSDP2 that is its default (an implicit one-unit backward prefetch); hyper_parallel's default is no
prefetch; the fsdp1 and deepspeed arms turned theirs off (FSDP1's default prefetches one unit backward,
DeepSpeed's a 5e7-element bucket)."""


def prefetch_statement(backend: str, forward: Depth, backward: Depth) -> dict[str, str]:
    """What an arm's prefetch setting does, in words: ``{"forward": ..., "backward": ...}``."""
    if backend == "deepspeed":  # one bucket for both directions (forward == backward, see validate)
        text = {
            "default": "DeepSpeed default (bucket of 5e7 elements, overlap_comm on for ZeRO-3)",
            "none": "none (stage3_prefetch_bucket_size 0, overlap_comm off)",
        }.get(str(forward), f"bucket of {forward} x the largest layer's parameters, overlap_comm on")
        return {"forward": text, "backward": text}
    if backend == "fsdp1":
        fwd = {
            "default": "none (forward_prefetch=False, FSDP1 default)",
            "none": "none (forward_prefetch=False)",
        }.get(str(forward), "1 unit (forward_prefetch=True)")
        bwd = {
            "default": "1 unit (BACKWARD_PRE, FSDP1 default)",
            "none": "none (backward_prefetch=None)",
        }.get(str(backward), "1 unit (BACKWARD_PRE)")
        return {"forward": fwd, "backward": bwd}
    if backend == "hyper":

        def hyper(depth: Depth, where: str) -> str:
            if depth == "default":
                return "none (hyper_parallel default: no implicit prefetch)"
            return "none" if depth == "none" else f"explicit {depth} layer(s) {where}"

        return {"forward": hyper(forward, "ahead"), "backward": hyper(backward, "back")}
    fwd = {
        "default": "none (FSDP2 default: no forward prefetch)",
        "none": "none",
    }.get(str(forward), f"explicit {forward} layer(s) ahead")
    bwd = {
        "default": "implicit 1 unit (FSDP2 default)",
        "none": "none (each unit prefetches only itself)",
    }.get(str(backward), f"explicit {backward} layer(s) back (root: implicit 1)")
    return {"forward": fwd, "backward": bwd}


PREFETCH_DEFAULT_UNITS: dict[str, tuple[int | None, int | None]] = {
    "torch": (0, 1),
    "hyper": (0, 0),
    "fsdp1": (0, 1),
    "deepspeed": (None, None),
}
"""How many units ahead each library's own default (``default``) prefetches, (forward, backward), as
``prefetch_statement`` words it; ``None``: not in units (DeepSpeed's default is a bucket of elements)."""


def prefetch_units(backend: str | None, direction: int, depth: Depth) -> int | None:
    """Units ahead a prefetch setting fetches in one direction (0 = forward, 1 = backward): ``none`` → 0,
    N → N, ``default`` → the library's default (``PREFETCH_DEFAULT_UNITS``; 0 for an unknown backend, what
    ``prefetch=0`` meant before per-direction options); ``None`` where it is not a number of units."""
    if depth == "none":
        return 0
    if isinstance(depth, int):
        return depth
    if backend is None:
        return 0
    return PREFETCH_DEFAULT_UNITS.get(backend, (None, None))[direction]


def manifest_prefetch(arm: Mapping[str, Any] | None) -> tuple[Depth, Depth] | None:
    """(forward, backward) prefetch of a manifest arm dict as run (``Arm.prefetch_directions``); manifests
    from before ``fwd_prefetch``/``bwd_prefetch`` hold ``prefetch`` only. ``None`` when the dict has no
    prefetch option or its options do not form a valid arm."""
    arm = arm or {}
    if not any(k in arm for k in ("prefetch", "fwd_prefetch", "bwd_prefetch")):
        return None
    backend = arm.get("backend")
    options = {k: arm[k] for k in ("prefetch", "fwd_prefetch", "bwd_prefetch") if arm.get(k) is not None}
    try:  # an arm dict without a backend (hand-written) resolves as the torch arm: 0 → the library default
        return Arm(backend=backend or "torch", label="prefetch", **options).prefetch_directions()
    except (ConfigError, TypeError, ValueError):
        return None


def _short_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:g}" if isinstance(value, float) else str(value)


def interpreter_env_name(python: str) -> str:
    """A short name for an interpreter path: its environment folder (``/x/venvA/bin/python`` → ``venvA``)."""
    from pathlib import PurePath

    path = PurePath(python)
    return (path.parent.parent.name if path.parent.name == "bin" else path.parent.name) or path.name


def coerce_backend_option(value: Any, kind: type, what: str) -> Any:
    """Like ``coerce``, but integers may be written as ``5e7``."""
    if kind is int and isinstance(value, str):
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
    for item in items:
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"arm {spec!r}: option {item!r} is not key=value")
        prefix, dot, name = key.strip().partition(".")
        if dot and prefix in ("kw", "env"):  # kw.NAME / env.NAME: the name as written
            values[prefix] = {**values.get(prefix, {}), name.strip(): raw.strip()}
            continue
        key = key.strip().replace("-", "_")
        if key == "delay":  # repeatable: each delay= adds its delays (a shared one comes first)
            prior = values.get("delay") or []
            values["delay"] = [*([prior] if isinstance(prior, str) else prior), raw.strip()]
            continue
        own = BACKEND_OPTIONS.get(backend, {})
        if key in own:
            knobs = values.setdefault("backend_options", {})
            knobs[key] = coerce_backend_option(raw.strip(), own[key], f"arm {spec!r} option {key}")
            continue
        if key not in ARM_OPTION_FIELDS:
            known = ", ".join([*ARM_OPTION_FIELDS, *own, "kw.NAME", "env.NAME"])
            raise ConfigError(f"arm {spec!r}: unknown option {key!r}; known: {known}")
        values[key] = coerce(raw.strip(), ARM_TYPES[key], f"arm {spec!r} option {key}")
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

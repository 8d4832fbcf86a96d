"""Configuration: the model shape (``model``), one arm (``arms``) and a whole run (``run``).

Torch-free on purpose: the CLI, the launcher and the analysis side import this package. The closed
choices are ``Literal`` types in ``types``; every public name is re-exported here.
"""

from fsdpbench.config.arms import (
    ARM_OPTION_FIELDS,
    ARM_TYPES,
    BACKEND_OPTIONS,
    BACKENDS,
    DEEPSPEED_KNOBS,
    DTYPES,
    OPTIONAL_BACKENDS,
    Arm,
    coerce_backend_option,
    deepspeed_available,
    default_arm_specs,
    hyper_available,
    interpreter_env_name,
    parse_arm,
    parse_arms,
    parse_mesh,
)
from fsdpbench.config.model import PRESETS, ModelConfig, model_fields, model_preset, preset_full, preset_tiny
from fsdpbench.config.run import (
    ACCELERATORS,
    DEVICES,
    ENV_NAMES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    ORDERS,
    RunConfig,
    read_toml,
)
from fsdpbench.config.types import Ac, Backend, Device, Dtype, Optimizer, Order, coerce, field_types

__all__ = [
    "ACCELERATORS",
    "OPTIMIZER_IMPLS",
    "ARM_OPTION_FIELDS",
    "ARM_TYPES",
    "BACKENDS",
    "BACKEND_OPTIONS",
    "DEEPSPEED_KNOBS",
    "DEVICES",
    "DTYPES",
    "ENV_NAMES",
    "OPTIMIZERS",
    "OPTIONAL_BACKENDS",
    "ORDERS",
    "PRESETS",
    "Ac",
    "Arm",
    "Backend",
    "Device",
    "Dtype",
    "ModelConfig",
    "Optimizer",
    "Order",
    "RunConfig",
    "coerce",
    "coerce_backend_option",
    "deepspeed_available",
    "default_arm_specs",
    "field_types",
    "hyper_available",
    "interpreter_env_name",
    "model_fields",
    "model_preset",
    "parse_arm",
    "parse_arms",
    "parse_mesh",
    "preset_full",
    "preset_tiny",
    "read_toml",
]

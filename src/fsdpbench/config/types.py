"""The closed choices of the configuration as ``Literal`` types, and ``coerce``: TOML/CLI text → a field's type."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal, get_args, get_origin

from fsdpbench.errors import ConfigError

Backend = Literal["torch", "fsdp1", "deepspeed", "hyper"]
Dtype = Literal["float32", "bfloat16", "float16"]
Ac = Literal["off", "full"]
Device = Literal["auto", "cpu", "cuda", "npu"]
Optimizer = Literal["sgd", "adamw"]
Order = Literal["alternate", "shuffle"]
OptimizerImpl = Literal["foreach", "per-parameter"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of every field of the dataclass ``cls`` (its annotations are strings)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def coerce(value: Any, kind: Any, what: str) -> Any:
    """Turn a TOML/CLI value into ``kind`` (``bool``, ``int``, ``float``, ``str`` or a ``Literal``).

    Other kinds (lists, dicts, dataclasses) are returned unchanged. Raises a one-line ``ConfigError``
    naming ``what`` and, for a ``Literal``, the allowed values.
    """
    if get_origin(kind) is Literal:
        allowed = get_args(kind)
        text = value if isinstance(value, str) else str(value)
        if text not in allowed:
            raise ConfigError(f"{what} {value!r}; choose one of: {', '.join(map(str, allowed))}")
        return text
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        if kind is str:
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} expects {kind.__name__}, got {value!r}") from None
    return value

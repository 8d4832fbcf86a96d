"""Typed JSON records that read and write themselves: one encode and one decode for every file kind.

A record is a dataclass deriving from ``Record``. ``to_dict`` gives its JSON object (fields in
declaration order, nested records as objects, tuples as lists, the fields named in ``_omit_if_none``
left out while None); ``from_dict`` and ``decode`` read one back through msgspec, which checks every
field's type and names the field that is wrong (``$.arms.torch.median_ms: expected float | null, got
str``). A key the object lacks takes the field's default (records give every field one, so a file
written before a field existed still reads); keys this version does not know are dropped.

The file's keys are the record's fields. What a file holds but the record computes (a ratio, a delta)
is a property named in ``_keys``: written, and computed again on reading. What a record holds but the
file does not (a row's rank, told by the pair it sits in) is set in ``__post_init__``, which msgspec
calls after decoding as the constructor does; a ``ValueError`` raised there is an error naming the
record's place in the file.
Torch-free; imports nothing of fsdpbench but its errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import orjson

from fsdpbench.errors import InputError

if TYPE_CHECKING:
    import msgspec

R = TypeVar("R")
JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
"""orjson's options for the indented JSON every run folder file is written in."""


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else ``None``.

    The one check of numbers read from JSON (summary, analysis and diff files), applied where JSON enters:
    the analysis reading an Analysis dict, the findings, the report.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class Record:
    """Base of the JSON records: ``to_dict`` and ``from_dict`` for every dataclass deriving from it."""

    __slots__ = ()
    _keys: ClassVar[tuple[str, ...]] = ()
    """The keys written, in order, when they are not the fields': a property among them is written (and
    computed again on reading: msgspec drops keys that are no field)."""
    _written_from: ClassVar[Mapping[str, str]] = {}
    """Computed keys written from an attribute of another name (the key's own name is a method's:
    ``PlaceRow.delta(key)`` and its ``delta`` object); only ever a computed key: read, it is dropped."""
    _omit_if_none: ClassVar[frozenset[str]] = frozenset()
    """Keys left out of ``to_dict`` while None (keys the file has only written when set)."""
    _omit_if_empty: ClassVar[frozenset[str]] = frozenset()
    """Keys left out of ``to_dict`` while None, ``{}``, ``[]`` or ``()`` (written only when they hold something)."""
    _omit_empty: ClassVar[bool] = False
    """Leave out every key whose value is None, ``{}`` or ``[]``."""
    _schema_version: ClassVar[int | None] = None
    """The ``schema_version`` a JSON object must carry for ``from_dict``, checked before any field (a file
    of another version is that one error, not a field's); None: no version key."""

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object, key for key as the file holds it."""
        keys = self._keys or tuple(f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]
        out = {}
        for key in keys:
            value = getattr(self, self._written_from.get(key, key))
            if value is None and key in self._omit_if_none:
                continue
            if (self._omit_empty or key in self._omit_if_empty) and _empty(value):
                continue
            out[key] = _plain(value)
        return out

    @classmethod
    def from_dict(cls: type[R], data: Any, what: str = "", at: str = "$") -> R:
        """The record of a decoded JSON object; ``InputError`` naming ``what`` and the bad field (its path
        under ``at``, where the object sits in its file: ``$.findings[2]``)."""
        what = what or cls.__name__
        version = cls._schema_version  # type: ignore[attr-defined]
        if version is not None and isinstance(data, Mapping) and data.get("schema_version") != version:
            raise InputError(
                f"{what}: {at}.schema_version is {data.get('schema_version')!r}: this fsdpbench reads "
                f"{version}; write the file again with this fsdpbench"
            )
        return convert(data, cls, what=what, at=at)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, dict | list | tuple) and not value)


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _error(what: str, exc: msgspec.ValidationError, at: str = "$", data: Any = None) -> InputError:
    """``what: $.path: message`` from msgspec's "Message - at `$.path`" (the path put under ``at``; a
    mapping's key, ``[...]`` in msgspec's path, named where ``data`` shows which one it is)."""
    message, _, path = str(exc).partition(" - at ")
    message = message[:1].lower() + message[1:]
    path = path.strip("`")[1:]
    if "[...]" in path and data is not None:
        got = message.rpartition("got `")[2].rstrip("`") if "got `" in message else None
        path = _named_keys(data, _PATH_STEP.findall(path), got) or path
    return InputError(f"{what}: {at + path}: {message}")


_PATH_STEP = re.compile(r"\.[^.\[]+|\[[^\]]*\]")
_JSON_TYPE = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    type(None): "null",
    dict: "object",
    list: "array",
}


def _named_keys(data: Any, steps: list[str], got: str | None) -> str | None:
    """The path ``steps`` (``.name``, ``[3]``, ``[...]``) down ``data`` with each ``[...]`` replaced by the one
    key that leads to a value msgspec ``got`` (its JSON type; any value when None); None when not one key does."""
    if not steps:
        return "" if got is None or _JSON_TYPE.get(type(data)) == got else None
    step, rest = steps[0], steps[1:]
    if step == "[...]":
        if not isinstance(data, dict):
            return None
        found = [(key, _named_keys(value, rest, got)) for key, value in data.items()]
        found = [(key, tail) for key, tail in found if tail is not None]
        if len(found) != 1:
            return None
        key, tail = found[0]
        return (f".{key}" if str(key).isidentifier() else f"[{json.dumps(key)}]") + tail
    if (
        step.startswith("[")
        and isinstance(data, list)
        and step[1:-1].isdigit()
        and int(step[1:-1]) < len(data)
    ):
        tail = _named_keys(data[int(step[1:-1])], rest, got)
    elif step.startswith(".") and isinstance(data, dict) and step[1:] in data:
        tail = _named_keys(data[step[1:]], rest, got)
    else:
        return None
    return None if tail is None else step + tail


def convert(data: Any, type: type[R], what: str, at: str = "$") -> R:
    """``data`` (decoded JSON) as a ``type``; ``InputError`` naming ``what`` and the field when it is not."""
    import msgspec  # here: a cached ``analyze`` writes records but never decodes one (msgspec ~15 ms)

    try:
        return msgspec.convert(data, type)
    except msgspec.ValidationError as exc:
        raise _error(what, exc, at, data) from None


def read_bytes(path: str | Path, what: str | None = None) -> bytes:
    """The bytes of the file at ``path``: ``InputError`` naming it (``what``, default the path) when it is
    missing or cannot be read."""
    what = what or str(path)
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what}: no such file") from None
    except OSError as exc:
        raise InputError(f"{what}: cannot be read ({exc.strerror})") from None


def decode(source: bytes | str | Path, type: type[R], what: str | None = None) -> R:
    """A file (its path) or its bytes as a ``type``: ``InputError`` naming the file (``what``, default the
    path) and the field when it is missing, not JSON or not such a record."""
    if isinstance(source, bytes):
        blob, what = source, what or type.__name__
    else:
        what = what or str(source)
        blob = read_bytes(source, what)
    import msgspec

    try:
        return msgspec.json.decode(blob, type=type)
    except msgspec.ValidationError as exc:
        raise _error(what, exc, data=orjson.loads(blob)) from None  # valid JSON: its keys name the path
    except msgspec.DecodeError as exc:
        raise InputError(f"{what}: not valid JSON ({exc}); rerun the command that wrote it") from None


def encode(record: Record) -> bytes:
    """The record as the indented JSON every run folder file is written in."""
    return orjson.dumps(record.to_dict(), option=JSON_OPTIONS)

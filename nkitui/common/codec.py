"""One codec for nkitui's records: frozen dataclasses <-> strict JSON, driven by the type hints.

    data = encode(record)                      # dicts, lists, str, int, float, bool, None
    record = decode(RunResult, data)           # CodecError("seed_results[0].kernel_s: expected a number, got 'x'")
    data = encode_versioned(record, "nkitui.run-result", 2)
    record = decode_versioned(RunResult, data, "nkitui.run-result", 2, migrations={1: upgrade_v1})

    @dataclass(frozen=True)
    class Pair(Record):                        # record.to_dict() / Pair.from_dict(d): the same codec
        rel_l2: float
        _codec_computed: ClassVar = ("ratio",)  # properties written out too (for readers of the JSON)

Types it understands: dataclasses (fields by name; a missing field takes its default, or is an
error when it has none; unknown keys are ignored, or refused with strict=True), `X | None`, unions
(tried in order), tuple[X, ...], tuple[X, Y], list[X], dict[str, X], Literal[...], str, int, float,
bool, Path, Any, and classes with an adapter (`register_adapter(PerfRecord, to_json, from_json)`:
a record owned elsewhere that has its own versioned JSON). Floats are strict JSON: NaN and
infinities travel as "nan", "inf", "-inf"; numpy scalars and arrays encode as numbers and lists.
Every error names the field by its path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, Union

JSON = Any
_ADAPTERS: dict[type, tuple[Callable[[Any], JSON], Callable[[JSON], Any]]] = {}


def register_adapter(cls: type, to_json: Callable[[Any], JSON], from_json: Callable[[JSON], Any]) -> None:
    """Encode and decode `cls` with its own functions (a record with its own JSON, owned elsewhere)."""
    _ADAPTERS[cls] = (to_json, from_json)


class Record:
    """Mixin for dataclass records: `to_dict()` / `from_dict()` through the one codec.

    `_codec_computed`: names of properties written out beside the fields (read back as nothing: they
    are recomputed); `_codec_omit`: fields left out of the JSON (they take their defaults on reading)."""

    _codec_computed: ClassVar[tuple[str, ...]] = ()
    _codec_omit: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, JSON]:
        encoded = encode(self)
        assert isinstance(encoded, dict)  # a dataclass record always encodes to an object
        return encoded

    @classmethod
    def from_dict(cls, data: JSON, where: str = "") -> Self:
        record: Self = decode(cls, data, where)
        return record

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "+inf": math.inf}


class CodecError(ValueError):
    """The data does not fit the record; the message names the field by its path."""


# -- encoding -------------------------------------------------------------------------------------
def encode(value: Any) -> JSON:
    adapter = _ADAPTERS.get(type(value))
    if adapter is not None:
        return adapter[0](value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        omit = getattr(value, "_codec_omit", ())
        out = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)
               if (f.init or f.repr) and f.name not in omit}
        for name in getattr(value, "_codec_computed", ()):
            out[name] = encode(getattr(value, name))
        return out
    if isinstance(value, float):  # numpy float64 too
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(value)
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy here
        return encode(value.tolist())
    raise CodecError(f"cannot encode a {type(value).__name__} as JSON")


def encode_versioned(value: Any, schema: str, version: int) -> dict[str, JSON]:
    return {"schema": schema, "schema_version": version, **encode(value)}


# -- decoding -------------------------------------------------------------------------------------
@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 256:  # repr of a huge int is slow, or refused past 4300 digits
        return f"int of {value.bit_length()} bits"
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _at(where: str) -> str:
    return where or "the record"


def decode(tp: Any, value: JSON, where: str = "", *, strict: bool = False) -> Any:
    """`value` (decoded JSON) as an instance of `tp`."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        errors = []
        for arg in others:
            try:
                return decode(arg, value, where, strict=strict)
            except CodecError as exc:
                errors.append(str(exc))
        if len(others) == 1:
            raise CodecError(errors[0])
        raise CodecError(f"{_at(where)}: {_describe(value)} fits none of {', '.join(_name(a) for a in others)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise CodecError(f"{_at(where)}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, list):
            raise CodecError(f"{_at(where)}: expected a list, got {_describe(value)}")
        args = typing.get_args(tp)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise CodecError(f"{_at(where)}: expected {len(args)} items, got {len(value)}")
            return tuple(decode(a, v, f"{where}[{i}]", strict=strict) for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [decode(item, v, f"{where}[{i}]", strict=strict) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else (origin or list)(items)
    if origin in (dict, Mapping) or tp is dict or origin is typing.get_origin(Mapping[str, int]):
        if not isinstance(value, dict):
            raise CodecError(f"{_at(where)}: expected a table (JSON object), got {_describe(value)}")
        args = typing.get_args(tp)
        item = args[1] if len(args) == 2 else Any
        return {str(k): decode(item, v, f"{where}.{k}" if where else str(k), strict=strict) for k, v in value.items()}
    if isinstance(tp, type) and tp in _ADAPTERS:
        try:
            return _ADAPTERS[tp][1](value)
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"{_at(where)}: not a valid {tp.__name__}: {exc}") from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, where, strict)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CodecError(f"{_at(where)}: expected a number, got {_describe(value)}")
        if isinstance(value, str):
            if value.lower() not in NON_FINITE:
                raise CodecError(f"{_at(where)}: expected a number, got {_describe(value)}")
            return NON_FINITE[value.lower()]
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits: JSON allows it, a float cannot hold it
            raise CodecError(f"{_at(where)}: {_describe(value)} is too large for a number") from None
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise CodecError(f"{_at(where)}: expected a whole number, got {_describe(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise CodecError(f"{_at(where)}: expected true or false, got {_describe(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise CodecError(f"{_at(where)}: expected text, got {_describe(value)}")
        return value
    if tp is Path:
        if not isinstance(value, str):
            raise CodecError(f"{_at(where)}: expected a path, got {_describe(value)}")
        return Path(value)
    if tp is type(None):
        if value is not None:
            raise CodecError(f"{_at(where)}: expected null, got {_describe(value)}")
        return None
    raise CodecError(f"{_at(where)}: the codec cannot decode the type {_name(tp)}")


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _decode_dataclass(cls: type, value: JSON, where: str, strict: bool) -> Any:
    if not isinstance(value, dict):
        raise CodecError(f"{_at(where)}: expected a table (JSON object) for {cls.__name__}, got {_describe(value)}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    if strict:
        computed = set(getattr(cls, "_codec_computed", ()))
        unknown = [k for k in value if k not in fields and k not in computed]
        if unknown:
            raise CodecError(f"{_at(where)}: unknown field(s) {', '.join(map(repr, unknown))} for {cls.__name__} "
                             f"(known: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        path = f"{where}.{name}" if where else name
        if name in value:
            kwargs[name] = decode(hints[name], value[name], path, strict=strict)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CodecError(f"{path}: required field is missing")
    return cls(**kwargs)


def decode_versioned(
    cls: type,
    data: JSON,
    schema: str,
    version: int,
    *,
    migrations: Mapping[int, Callable[[dict[str, JSON]], dict[str, JSON]]] | None = None,
    what: str = "record",
    strict: bool = False,
) -> Any:
    """A versioned record: `schema` must match; an older version is upgraded step by step through
    `migrations` (version -> function giving the next version's dict); a newer one is refused."""
    if not isinstance(data, dict):
        raise CodecError(f"a {what} must be a JSON object")
    found, got = data.get("schema"), data.get("schema_version")
    if found != schema:
        raise CodecError(f"not an nkitui {what} (schema {found!r}, expected {schema!r})")
    if not isinstance(got, int) or isinstance(got, bool):
        raise CodecError(f"{what} has no valid schema_version (got {got!r})")
    if got > version:
        raise CodecError(f"{what} schema version {got} is newer than this nkitui reads ({version}); upgrade nkitui to read it")
    body = {k: v for k, v in data.items() if k not in ("schema", "schema_version")}
    while got < version:
        step = (migrations or {}).get(got)
        if step is None:
            raise CodecError(f"{what} schema version {got} is not supported (this nkitui reads {version}); it was "
                             "written by an incompatible nkitui")
        body = step(body)
        got += 1
    return decode(cls, body, strict=strict)

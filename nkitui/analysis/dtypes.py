"""Element types as the analysis sees them: canonical names and how much precision each keeps."""

from __future__ import annotations

# Canonical name -> explicit mantissa bits (precision). Integer types are treated as exact.
_MANTISSA_BITS: dict[str, int] = {
    "float32": 23,
    "float32r": 23,
    "tfloat32": 10,
    "float16": 10,
    "bfloat16": 7,
    "float8_e4m3": 3,
    "float8_e4m3fn": 3,
    "float8_e5m2": 2,
    "float8_e8m0fnu": 0,
    "float8_e5m2_x4": 2,
    "float8_e4m3fn_x4": 3,
    "float4_e2m1fn_x4": 1,
}

_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "single": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "tf32": "tfloat32",
    "bool_": "bool",
    "fp8_e4m3": "float8_e4m3",
    "fp8_e5m2": "float8_e5m2",
    "float64": "float64",
    "double": "float64",
}

INTEGER_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"})
FLOAT_TYPES = frozenset(_MANTISSA_BITS) | {"float64"}


def canonical(name: str | None) -> str | None:
    """Canonical dtype name for `name` (e.g. "bf16" -> "bfloat16"), or None if it is not a dtype."""
    if name is None:
        return None
    name = _ALIASES.get(name, name)
    if name in FLOAT_TYPES or name in INTEGER_TYPES:
        return name
    return None


def mantissa_bits(name: str | None) -> int | None:
    if name == "float64":
        return 52
    return _MANTISSA_BITS.get(name or "")


def is_float(name: str | None) -> bool:
    return name in FLOAT_TYPES


def is_low_precision(name: str | None) -> bool:
    """bf16, fp16, fp8 and fp4 types: fewer mantissa bits than fp32/tf32."""
    bits = mantissa_bits(name)
    return bits is not None and bits <= 10 and name != "tfloat32"


def is_fp32(name: str | None) -> bool:
    return name in ("float32", "float32r")


def lower_precision(a: str | None, b: str | None) -> bool:
    """True when float type `a` keeps fewer mantissa bits than float type `b`."""
    bits_a, bits_b = mantissa_bits(a), mantissa_bits(b)
    return bits_a is not None and bits_b is not None and bits_a < bits_b

"""Facts about floating-point formats the numerics checks need: unit roundoff, correct rounding
to a narrow format, and ULP distance measured on the format's bit pattern.

Formats are named as in task manifests (``float32``, ``bfloat16``, ``float8_e4m3`` ...), plus
``tfloat32`` (fp32 storage with a 10-bit mantissa, as TensorE/Tensor Cores use it) and
``float64``. bf16 and fp8 come from ml_dtypes, imported the first time one of them is asked for
(it costs about half a second of CPU, which a float32-only task need not pay).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkitui.task.dtypes import canonical_dtype_name, dtype_name, numpy_dtype


@dataclass(frozen=True)
class FloatFormat:
    name: str
    mantissa_bits: int  # explicit fraction bits
    storage: np.dtype  # numpy dtype that holds the values
    max: float
    smallest_normal: float
    smallest_subnormal: float
    has_inf: bool

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-(p) with p = mantissa_bits + 1: the largest relative error of one RNE rounding."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next value: one ULP at 1.0."""
        return 2.0 ** -self.mantissa_bits


def _from_finfo(name: str, dtype: np.dtype, has_inf: bool = True) -> FloatFormat:
    if dtype.kind == "V":  # an ml_dtypes type: numpy's finfo does not know it
        import ml_dtypes

        fi: Any = ml_dtypes.finfo(dtype)  # (ml_dtypes has no annotations: [tool.mypy] untyped_calls_exclude)
    else:
        fi = np.finfo(dtype)
    return FloatFormat(
        name=name,
        mantissa_bits=int(fi.nmant),
        storage=np.dtype(dtype),
        max=float(fi.max),
        smallest_normal=float(fi.smallest_normal),
        smallest_subnormal=float(fi.smallest_subnormal),
        has_inf=has_inf,
    )


_NARROW = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")


class _Formats(Mapping[str, FloatFormat]):
    """Every format by name; the ml_dtypes ones are built on first use."""

    def __init__(self) -> None:
        self._known: dict[str, FloatFormat] = {
            "float64": _from_finfo("float64", np.dtype(np.float64)),
            "float32": _from_finfo("float32", np.dtype(np.float32)),
            "float16": _from_finfo("float16", np.dtype(np.float16)),
            "tfloat32": FloatFormat(
                name="tfloat32",
                mantissa_bits=10,
                storage=np.dtype(np.float32),
                max=float(np.finfo(np.float32).max),
                smallest_normal=float(np.finfo(np.float32).smallest_normal),
                smallest_subnormal=2.0**-136,
                has_inf=True,
            ),
        }
        self._narrow_loaded = False

    def _load_narrow(self) -> None:
        if self._narrow_loaded:
            return
        import ml_dtypes

        self._known.update({
            "bfloat16": _from_finfo("bfloat16", np.dtype(ml_dtypes.bfloat16)),
            "float8_e4m3": _from_finfo("float8_e4m3", np.dtype(ml_dtypes.float8_e4m3)),
            "float8_e4m3fn": _from_finfo("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), has_inf=False),
            "float8_e5m2": _from_finfo("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2)),
        })
        self._narrow_loaded = True

    def __getitem__(self, name: str) -> FloatFormat:
        if name in _NARROW:
            self._load_narrow()
        return self._known[name]

    def __contains__(self, name: object) -> bool:
        return name in self._known or name in _NARROW

    def __iter__(self) -> Iterator[str]:
        self._load_narrow()
        return iter(self._known)

    def __len__(self) -> int:
        self._load_narrow()
        return len(self._known)


_FORMATS = _Formats()

_EXTRA_ALIASES = {"tf32": "tfloat32", "fp64": "float64", "double": "float64", "fp8_e4m3": "float8_e4m3",
                  "fp8_e5m2": "float8_e5m2", "fp8_e4m3fn": "float8_e4m3fn"}


def format_name(dtype: str | np.dtype | type) -> str:
    """Canonical name of a dtype given as a manifest name, alias or numpy dtype."""
    if isinstance(dtype, str):
        name = _EXTRA_ALIASES.get(dtype, dtype)
        if name in _FORMATS:
            return name
        canonical = canonical_dtype_name(name)
        if canonical is not None:
            return canonical
        try:
            return dtype_name(np.dtype(name))
        except TypeError as exc:
            raise ValueError(
                f"unknown dtype {dtype!r}: use float32, float16, bfloat16, float8_e4m3, float8_e4m3fn, "
                "float8_e5m2, tfloat32, float64 or an integer type"
            ) from exc
    name = dtype_name(np.dtype(dtype))
    return "float64" if name == "float64" else name


def is_float_format(dtype: str | np.dtype | type) -> bool:
    return format_name(dtype) in _FORMATS


def float_format(dtype: str | np.dtype | type) -> FloatFormat:
    name = format_name(dtype)
    if name not in _FORMATS:
        raise ValueError(f"{name} is not a floating-point format")
    return _FORMATS[name]


def unit_roundoff(dtype: str | np.dtype | type) -> float:
    """Unit roundoff of a float format; 0 for integer types (their arithmetic is exact)."""
    name = format_name(dtype)
    return _FORMATS[name].unit_roundoff if name in _FORMATS else 0.0


def storage_dtype(dtype: str | np.dtype | type) -> np.dtype:
    name = format_name(dtype)
    if name in _FORMATS:
        return _FORMATS[name].storage
    return numpy_dtype(name)


def _round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: truncate, then set the last bit if anything was lost.

    A later RNE rounding to a format with at least two fewer mantissa bits is then correct,
    which a plain float64 -> float32 -> bf16 chain (ml_dtypes' path) is not near ties.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)
    finite = np.isfinite(x)
    overshoot = finite & (np.abs(y.astype(np.float64)) > np.abs(x))
    y = np.where(overshoot, np.nextafter(y, np.float32(0)), y)
    inexact = finite & (y.astype(np.float64) != x)
    bits = y.view(np.uint32).copy()
    bits[inexact] |= np.uint32(1)
    return bits.view(np.float32)


def _round_tf32(x32: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x32)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0x0FFF + lsb) & 0xFFFFE000).astype(np.uint32)
    out = np.where(finite, rounded, bits.astype(np.uint32))
    return out.view(np.float32)


def round_to(x: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Values of `x` correctly rounded (nearest even) to `dtype`, returned as float64."""
    name = format_name(dtype)
    x = np.asarray(x, dtype=np.float64)
    if name == "float64":
        return x
    if name == "float32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32).astype(np.float64)
    if name == "tfloat32":
        with np.errstate(over="ignore"):
            return _round_tf32(x.astype(np.float32)).astype(np.float64)
    if name in _FORMATS:
        with np.errstate(over="ignore", invalid="ignore"):
            return _round_to_odd_f32(x).astype(_FORMATS[name].storage).astype(np.float64)
    dt = numpy_dtype(name)
    if dt.kind == "b":
        as_bool: np.ndarray = (x != 0).astype(np.float64)  # ndarray's != is typed Any
        return as_bool
    info = np.iinfo(dt)
    clipped: np.ndarray = np.clip(np.rint(x), info.min, info.max)
    return clipped


def stored(values: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """`values` correctly rounded to the float format `dtype`, in its storage dtype (tf32: float32)."""
    fmt = float_format(dtype)
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt.name == "float64":
            return x
        if fmt.name == "float32":
            return x.astype(np.float32)
        if fmt.name == "tfloat32":
            return _round_tf32(x.astype(np.float32))
        return _round_to_odd_f32(x).astype(fmt.storage)


def _keys_of_stored(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Ordered integer keys of values already in `fmt`'s storage: the magnitude bits, negated for
    negative values, so +0 and -0 both give 0. Same integer width as the format."""
    values = np.ascontiguousarray(values)
    itemsize = values.dtype.itemsize
    signed_of: dict[int, type[np.signedinteger[Any]]] = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
    signed = signed_of[itemsize]
    bits = values.view(signed)
    sign = bits >> (8 * itemsize - 1)  # 0 for positive values, -1 (all ones) for negative ones
    magnitude = bits & np.iinfo(signed).max
    if fmt.name == "tfloat32":  # the 13 low mantissa bits are not part of a tf32 value
        magnitude >>= 13
    # (m ^ -1) - (-1) = -m: two's-complement negation without a branch or a mask
    np.bitwise_xor(magnitude, sign, out=magnitude)
    np.subtract(magnitude, sign, out=magnitude)
    keys: np.ndarray = magnitude
    return keys


def ordered_keys(values: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Integers that count representable values of `dtype`: adjacent values differ by 1.

    +0 and -0 both map to 0, so a step across zero counts the subnormals on both sides.
    `values` are rounded to `dtype` first. NaN maps to an arbitrary key; mask it yourself.
    """
    fmt = float_format(dtype)
    return _keys_of_stored(stored(values, fmt.name), fmt).astype(np.int64)


@dataclass(frozen=True)
class KeyedValues:
    """Values rounded to a float format, as ordered keys (what ULP distances are measured on).

    `stored` holds the rounded values in the format's storage dtype; `special` the rounded values
    as float32 or float64 when some are NaN or infinite, so the non-finite rules can be applied
    (None when every rounded value is finite).
    """

    fmt: FloatFormat
    keys: np.ndarray
    special: np.ndarray | None
    stored: np.ndarray

    def same_as(self, other: "KeyedValues") -> np.ndarray:
        """Where the two rounded values are identical: same value and same sign (+0 is not -0);
        NaN is never identical to anything (it compares unequal)."""
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[self.stored.dtype.itemsize]
        same: np.ndarray = self.stored.view(width) == other.stored.view(width)
        for side in (self.special, other.special):
            if side is not None:
                same &= ~np.isnan(side)
        return same


def keyed(values: np.ndarray, dtype: str | np.dtype | type) -> KeyedValues:
    """`values` rounded to `dtype` and keyed, once, for several ULP distances against them."""
    fmt = float_format(dtype)
    s = stored(values, fmt.name)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on NaN
        finite = np.isfinite(s)
        special = None
        if not finite.all():
            special = s if s.dtype in (np.float32, np.float64) else s.astype(np.float32)
    return KeyedValues(fmt, _keys_of_stored(s, fmt), special, s)


def ulp_distance_keyed(actual: KeyedValues, expected: KeyedValues) -> np.ndarray:
    """ULP distance between two keyed arrays of the same format (see `ulp_distance`)."""
    if actual.fmt.name != expected.fmt.name:
        raise ValueError(f"ULP distance between {actual.fmt.name} and {expected.fmt.name} values")
    ka, kb = actual.keys, expected.keys
    if ka.dtype.itemsize < 8:  # narrow keys: the difference is exact in float64
        dist = np.asarray(ka, dtype=np.float64)
        dist = dist - kb if dist is ka else np.subtract(dist, kb, out=dist)
    else:
        dist = np.asarray((ka - kb).astype(np.float64))
    np.abs(dist, out=dist)
    if actual.special is None and expected.special is None:
        return dist
    ra = actual.special if actual.special is not None else np.zeros(ka.shape)
    rb = expected.special if expected.special is not None else np.zeros(kb.shape)
    nan_a, nan_b = np.isnan(ra), np.isnan(rb)
    inf_a, inf_b = np.isinf(ra), np.isinf(rb)
    dist = np.where(nan_a | nan_b, np.where(nan_a & nan_b, 0.0, np.inf), dist)
    either_inf = (inf_a | inf_b) & ~(nan_a | nan_b)
    same_inf = inf_a & inf_b & (np.sign(ra) == np.sign(rb))
    return np.where(either_inf, np.where(same_inf, 0.0, np.inf), dist)


def ulp_distance(actual: np.ndarray, expected: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Number of `dtype` values between actual and expected after rounding both to `dtype`.

    float64 result: 0 where both are NaN or the same infinity, inf where exactly one side is NaN,
    or an infinity meets a finite value / the opposite infinity.
    """
    fmt = float_format(dtype)
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    a, b = np.broadcast_arrays(a, b)
    return ulp_distance_keyed(keyed(a, fmt.name), keyed(b, fmt.name))


def spacing(x: np.ndarray, dtype: str | np.dtype | type) -> np.ndarray:
    """Size of one ULP of `dtype` at |x| (the gap above |x| rounded to `dtype`), as float64."""
    fmt = float_format(dtype)
    mag = np.maximum(np.abs(np.asarray(x, dtype=np.float64)), fmt.smallest_normal)
    if fmt.name == "float64":  # gaps below 2^-1022 are float64 subnormals: no exponent-field shortcut
        _, exponent = np.frexp(mag)  # mag = m * 2^exponent, m in [0.5, 1): floor(log2 mag) = exponent - 1
        gap = np.ldexp(1.0, exponent - 1 - fmt.mantissa_bits)
    else:
        # 2^(floor(log2 mag) - mantissa_bits), built directly in the float64 exponent field (mag is
        # a positive normal float64, and so is the gap for every narrower format)
        biased = (np.ascontiguousarray(mag).view(np.int64) >> 52) - fmt.mantissa_bits
        gap = (biased << 52).view(np.float64)
    if not np.isfinite(mag).all():  # the gap of inf is inf, of NaN NaN
        gap = np.where(np.isfinite(mag), gap, mag)
    at_least_subnormal: np.ndarray = np.maximum(gap, fmt.smallest_subnormal)
    return at_least_subnormal

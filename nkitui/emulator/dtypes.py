"""NKI data types, storage, rounding and the legacy type-promotion rules.

Storage uses numpy and ml_dtypes: bf16/fp8 values are stored in their own format, so every write
rounds from fp32 with round-to-nearest-even (ml_dtypes' conversion). The bf16/fp8 (and MX) types are
made the first time one is asked for, by attribute (`dtypes.bfloat16`), by name or by the numpy dtype
of an array (`load_narrow`): importing ml_dtypes costs about 0.65 s of CPU (numpy registers its ufunc
loops one by one), which every evaluator and kernel process of a float32 task paid for nothing. tfloat32 is stored in 4-byte
float32 cells whose mantissa is rounded to 10 bits. Integer destinations of fp32 math round half
to even, saturate to the type's range and map NaN to 0 (the hardware rule is not documented).
With `precise=False` every float tensor is stored as float32, so no rounding happens at all.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import DTypeLike, NDArray

# a numpy dtype of any scalar type (named here because DType's field `np` hides the module in its class body)
NpDtype = np.dtype[Any]


@dataclass(frozen=True, slots=True, eq=False)
class DType:
    name: str  # canonical NKI name: "float32", "bfloat16", "float8_e4m3", "int32", "bool_", ...
    np: NpDtype  # storage dtype in precise mode
    itemsize: int  # bytes on the device
    kind: str  # "f" float, "i" signed int, "u" unsigned int, "b" bool
    rank: int  # float width rank used by promotion (fp8 1, fp16/bf16 2, tf32 3, fp32 4)
    public: object  # the object exposed as nl.<name> (legacy: numpy types / dtypes)
    host: NpDtype | None = None  # numpy dtype of host arrays of this type when it differs from `np` (MX x4)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iub"

    def __repr__(self) -> str:
        return f"DType({self.name})"


def _mk(name: str, npdt: DTypeLike, kind: str, rank: int, public: object,
        itemsize: int | None = None) -> DType:
    storage = np.dtype(npdt)
    return DType(name, storage, itemsize or storage.itemsize, kind, rank, public)


float32 = _mk("float32", np.float32, "f", 4, np.float32)
tfloat32 = _mk("tfloat32", np.float32, "f", 3, np.dtype("|V4"))
float16 = _mk("float16", np.float16, "f", 2, np.float16)
# made by load_narrow() (module __getattr__ for `dtypes.bfloat16`); declared here for the type checker
bfloat16: DType
float8_e4m3: DType
float8_e4m3fn: DType
float8_e5m2: DType
int8 = _mk("int8", np.int8, "i", 0, np.int8)
int16 = _mk("int16", np.int16, "i", 0, np.int16)
int32 = _mk("int32", np.int32, "i", 0, np.int32)
uint8 = _mk("uint8", np.uint8, "u", 0, np.uint8)
uint16 = _mk("uint16", np.uint16, "u", 0, np.uint16)
uint32 = _mk("uint32", np.uint32, "u", 0, np.uint32)
bool_ = _mk("bool_", np.bool_, "b", 0, np.bool_)

_EAGER = (float32, tfloat32, float16, int8, int16, int32, uint8, uint16, uint32, bool_)

_BY_NAME: dict[str, DType] = {d.name: d for d in _EAGER}
_BY_NAME.update({
    "bool": bool_, "fp32": float32, "float": float32, "fp16": float16, "half": float16,
    "tf32": tfloat32, "|V4": tfloat32, "V4": tfloat32, "void32": tfloat32,
})
_BY_HOST: dict[NpDtype, DType] = {}  # host dtypes of front-end types (structured numpy dtypes for MX x4)
_CACHE: dict[object, DType] = {}

# -- the types that come from ml_dtypes, made on first use ---------------------------------------------
NARROW = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")  # (name, rank) below
_NARROW_RANK = {"bfloat16": 2, "float8_e4m3": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
_NARROW_ALIASES = {"bf16": "bfloat16", "fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2"}
# every name load_narrow() makes resolvable (the MX types come from nkitui.emulator.mx_dtypes)
LAZY_NAMES = frozenset((*NARROW, *_NARROW_ALIASES, "float8_e8m0fnu", "float4_e2m1fn", "float8_e4m3fn_x4",
                        "float8_e5m2_x4", "float4_e2m1fn_x4"))
_narrow_loaded = False
_narrow_lock = threading.RLock()  # kernel[2] runs its cores in threads: one set of objects, made once
_BF16_NP: NpDtype | None = None


def load_narrow() -> None:
    """Import ml_dtypes and make the bf16/fp8 and MX types (once; a no-op after)."""
    global _narrow_loaded, _BF16_NP
    if _narrow_loaded:
        return
    with _narrow_lock:
        if _narrow_loaded:
            return
        import ml_dtypes

        made = {}
        for name in NARROW:
            scalar = getattr(ml_dtypes, name)
            made[name] = _mk(name, scalar, "f", _NARROW_RANK[name], np.dtype(scalar))
        globals().update(made)
        _BY_NAME.update(made)
        _BY_NAME.update({alias: made[name] for alias, name in _NARROW_ALIASES.items()})
        _BF16_NP = made["bfloat16"].np
        from nkitui.emulator import mx_dtypes

        mx_dtypes.make_types()  # registers them (register() below)
        _CACHE.clear()
        _narrow_loaded = True


def __getattr__(name: str) -> DType:
    """`dtypes.bfloat16` and the other narrow types: made on first use (load_narrow)."""
    if name in NARROW:
        load_narrow()
        return cast(DType, globals()[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DtypeError(TypeError):
    pass


def dtype_of(obj: object) -> DType:
    """Resolve any dtype spelling (DType, numpy type/dtype, ml_dtypes type, nl constant, string)."""
    if type(obj) is DType:
        return obj
    try:
        return _CACHE[obj]
    except (KeyError, TypeError):
        pass
    found = _resolve(obj)
    try:
        _CACHE[obj] = found
    except TypeError:
        pass
    return found


def _resolve(obj: object) -> DType:
    inner = getattr(obj, "nki_dtype", None)  # objects such as nl.fp32 that stand for a dtype
    if inner is not None:
        return dtype_of(inner)
    if isinstance(obj, str):
        if obj in LAZY_NAMES:
            load_narrow()
        d = _BY_NAME.get(obj)
        if d is not None:
            return d
    try:
        npdt = np.dtype(cast(DTypeLike, obj))  # any object: numpy says whether it names a dtype (TypeError if not)
    except TypeError:
        raise DtypeError(f"{obj!r} is not a data type: use an nl dtype such as nl.float32 or nl.bfloat16") from None
    if npdt.names is not None or npdt.name in LAZY_NAMES or (npdt.kind == "V" and npdt.itemsize != 4):
        load_narrow()  # an ml_dtypes type or an MX host type: whoever made it has imported ml_dtypes
    if npdt.names is not None:
        d = _BY_HOST.get(npdt)
        if d is not None:
            return d
    if npdt.kind == "V" and npdt.itemsize == 4:
        return tfloat32
    d = _BY_NAME.get(npdt.name)
    if d is None:
        raise DtypeError(f"data type {npdt.name} is not supported by NKI (no 64-bit or complex types)")
    return d


def register(d: DType, *aliases: str) -> None:
    """Make a front end's extra dtype (e.g. the `nki` namespace's MX types) resolvable by its name
    (and, when numpy knows it, by its numpy dtype, or by its host dtype `d.host`)."""
    if d.host is not None:
        _BY_HOST[d.host] = d
    for name in (d.name, *aliases):
        _BY_NAME[name] = d
    _CACHE.clear()


def storage_dtype(d: DType, precise: bool) -> NpDtype:
    return d.np if (precise or not d.is_float) else np.dtype(np.float32)


# ---------------------------------------------------------------------------------------------
# Conversions


_INT_RANGE = {
    np.dtype(np.int8): (-128, 127), np.dtype(np.int16): (-32768, 32767),
    np.dtype(np.int32): (-2147483648, 2147483647), np.dtype(np.uint8): (0, 255),
    np.dtype(np.uint16): (0, 65535), np.dtype(np.uint32): (0, 4294967295),
}


def round_tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 values to tfloat32 (10 mantissa bits) with round-to-nearest-even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    lsb = (u >> 13) & 1
    r = ((u + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).astype(np.uint32)
    return np.where(finite, r, u).view(np.float32)


def convert(values: np.ndarray, target: np.dtype, dtype: DType | None = None) -> np.ndarray:
    """Convert computed values (usually fp32) to a storage dtype with NKI's rounding rules."""
    kind = target.kind
    if kind == "f" or kind == "V" or (target.type.__module__ == "ml_dtypes"):
        if dtype is tfloat32 and target == np.float32:
            return round_tf32(values)
        return values.astype(target, copy=False)
    if kind == "b":
        nonzero: NDArray[np.bool_] = values != 0  # numpy's stubs type an array comparison as Any
        return nonzero
    vk = values.dtype.kind
    if vk in "iu":
        lo, hi = _INT_RANGE[target]
        if values.dtype.itemsize > target.itemsize or vk != kind:
            clipped: np.ndarray = np.clip(values, lo, hi).astype(target)  # Any in numpy's stubs for this overload
            return clipped
        return values.astype(target, copy=False)
    if vk == "b":
        return values.astype(target)
    # float -> integer truncates toward zero (then saturates; NaN -> 0). Undocumented by AWS; chosen
    # because AWS's own tested nki-samples kernel (resize_nearest_fixed_dma_kernel) computes
    # `nl.floor(int32_tile / w, dtype=nl.int32)`, whose int32 quotient must not round up
    lo, hi = _INT_RANGE[target]
    v = np.trunc(np.asarray(values, dtype=np.float64))
    v = np.nan_to_num(v, nan=0.0, posinf=hi, neginf=lo)
    return np.clip(v, lo, hi).astype(target)


# fp32 value of every bit pattern of the 1- and 2-byte float formats: a table look-up converts 4-10x
# faster than ml_dtypes' element-wise cast (the conversion of every bf16/fp8 operand was the largest
# single cost of emulating nki-library's MoE kernels), with the same bits
_F32_TABLES: dict[np.dtype, tuple[np.ndarray, type]] = {}


def _f32_table(d: np.dtype) -> tuple[np.ndarray, type] | None:
    t = _F32_TABLES.get(d)
    if t is None and d.itemsize in (1, 2) and (d.kind == "V" or d == np.float16):  # ml_dtypes' formats: kind "V"
        ut = np.uint8 if d.itemsize == 1 else np.uint16
        t = _F32_TABLES[d] = (np.arange(1 << (8 * d.itemsize), dtype=ut).view(d).astype(np.float32), ut)
    return t


def to_f32(values: np.ndarray) -> np.ndarray:
    """`values` as float32, a new array unless they already are (bit-exact with `astype`)."""
    d = values.dtype
    if d == np.float32:
        return values
    if d.kind == "V":  # an ml_dtypes format: its types are made (this module's bf16 check needs them)
        load_narrow()
    if d == _BF16_NP:  # bf16 is the top half of an fp32: widen the bits
        u = values.view(np.uint16).astype(np.uint32)
        u <<= 16
        return u.view(np.float32)
    table = _f32_table(d) if d.itemsize <= 2 else None
    if table is not None:
        return np.take(table[0], values.view(table[1]))
    return values.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Legacy type promotion (nki-spec.md §2.6)


def _widen_int(a: DType, b: DType) -> DType:
    if a.kind == "b":
        a = uint8
    if b.kind == "b":
        b = uint8
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if u.itemsize < s.itemsize:
        return s
    wider = {1: int16, 2: int32}.get(u.itemsize)
    return wider if wider is not None else float32  # (int32, uint32) -> float32: no int64 on device


def promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if a.is_float and not b.is_float:
        return a
    if b.is_float and not a.is_float:
        return b
    if not a.is_float:
        return _widen_int(a, b)
    if a.rank != b.rank:
        return a if a.rank > b.rank else b
    if a.rank == 2:  # fp16 with bf16
        return float32
    if a.rank == 1:  # two fp8 flavours (made by load_narrow, as bf16 was)
        return _BY_NAME["bfloat16"]
    return a


def scalar_dtype(value: object) -> DType:
    """Weak Python scalars infer the widest type (bool->uint8, int->int32, float->float32)."""
    if isinstance(value, (bool, np.bool_)):
        return uint8
    if isinstance(value, (int, np.integer)):
        if isinstance(value, np.generic):
            return dtype_of(value.dtype)
        return int32
    if isinstance(value, np.generic):
        return dtype_of(value.dtype)
    return float32

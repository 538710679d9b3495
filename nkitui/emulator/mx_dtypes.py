"""MX (OCP microscaling) data types of NeuronCore-v4, as engine facts.

The packed x4 types hold four low-precision values per element (see `engine/mx.py` for the bit
layout), the scale type `float8_e8m0fnu` and unpacked `float4_e2m1fn` come from ml_dtypes. They
live here, below both front ends, because the engine's `nc_matmul_mx` / `quantize_mx` decode and
encode them; the `nki` namespace exposes them as `nl.float8_e4m3fn_x4`, ... (`newns/dtypes.py`).
They are made with the bf16/fp8 types, the first time one is asked for (`dtypes.load_narrow`, which
calls `make_types` here and registers them with `nkitui.emulator.dtypes`): ml_dtypes costs about
0.65 s of CPU to import.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from numpy.typing import DTypeLike

from nkitui.emulator import dtypes as _dt


class PackedDType:
    """An MX packed dtype (`nl.float8_e4m3fn_x4`, ...): four low-precision values per element."""

    __slots__ = ("name", "element", "element_bits", "container", "dtype", "nki_dtype")

    def __init__(self, name: str, element: DTypeLike, element_bits: int, container: DTypeLike) -> None:
        self.name = name
        self.element = np.dtype(element)  # ml_dtypes type of one packed value
        self.element_bits = element_bits
        self.container = np.dtype(container)  # numpy cell type holding one packed element
        # the host numpy dtype (np.dtype(nl.float8_e4m3fn_x4) reads this attribute)
        self.dtype = np.dtype([(f"{name}.{i}", np.uint8) for i in range(self.container.itemsize)])
        self.nki_dtype: _dt.DType | None = None  # the engine DType, set below

    @property
    def itemsize(self) -> int:
        return self.container.itemsize

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, str):
            return other == self.name
        if isinstance(other, np.dtype):
            return other == self.dtype
        return getattr(other, "nki_dtype", None) is self.nki_dtype and self.nki_dtype is not None

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


def _packed(name: str, element: DTypeLike, bits: int, container: DTypeLike) -> _dt.DType:
    public = PackedDType(name, element, bits, container)
    d = _dt.DType(name, np.dtype(container), np.dtype(container).itemsize, "u", 0, public, public.dtype)
    public.nki_dtype = d
    _dt.register(d)
    return d


# made by make_types() (module __getattr__ for `mx_dtypes.PACKED`, ...); declared for the type checker
float8_e4m3fn_x4_dt: _dt.DType
float8_e5m2_x4_dt: _dt.DType
float4_e2m1fn_x4_dt: _dt.DType
PACKED: tuple[_dt.DType, ...]
float8_e8m0fnu_dt: _dt.DType
float4_e2m1fn_dt: _dt.DType
_MADE = ("float8_e4m3fn_x4_dt", "float8_e5m2_x4_dt", "float4_e2m1fn_x4_dt", "PACKED", "float8_e8m0fnu_dt",
         "float4_e2m1fn_dt")


def make_types() -> None:
    """Make and register the MX types; called once, by `dtypes.load_narrow` (under its lock)."""
    import ml_dtypes

    packed = (_packed("float8_e4m3fn_x4", ml_dtypes.float8_e4m3fn, 8, np.uint32),
              _packed("float8_e5m2_x4", ml_dtypes.float8_e5m2, 8, np.uint32),
              _packed("float4_e2m1fn_x4", ml_dtypes.float4_e2m1fn, 4, np.uint16))
    e8m0 = _dt.DType("float8_e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu), 1, "f", 1, np.dtype(ml_dtypes.float8_e8m0fnu))
    e2m1 = _dt.DType("float4_e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn), 1, "f", 1, np.dtype(ml_dtypes.float4_e2m1fn))
    _dt.register(e8m0)
    _dt.register(e2m1)
    globals().update(float8_e4m3fn_x4_dt=packed[0], float8_e5m2_x4_dt=packed[1], float4_e2m1fn_x4_dt=packed[2],
                     PACKED=packed, float8_e8m0fnu_dt=e8m0, float4_e2m1fn_dt=e2m1)


def __getattr__(name: str) -> object:
    """The MX types: made on first use, with the bf16/fp8 types (`dtypes.load_narrow`)."""
    if name in _MADE:
        _dt.load_narrow()
        return cast(object, globals()[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_packed(d: _dt.DType) -> bool:
    return isinstance(d.public, PackedDType)  # only _packed makes a DType whose public object is one

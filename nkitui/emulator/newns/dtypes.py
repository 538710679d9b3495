"""Data types of the `nki` namespace (also the `nki.dtype` module).

Standard types are numpy dtypes (`nl.float32 == np.dtype("float32")`), so they compare equal to
numpy types, to their names as strings (`nl.bfloat16 == "bfloat16"`) and to the `.dtype` of
tensors, and `str()` gives the NKI name. The MX types are new here:

* `float8_e4m3fn_x4`, `float8_e5m2_x4`: 32-bit elements packing four fp8 values (byte j holds
  value j, little-endian), stored as uint32 cells;
* `float4_e2m1fn_x4`: 16-bit elements packing four fp4 values (nibble j holds value j, low nibble
  first), stored as uint16 cells;
* `float8_e8m0fnu`: the MX scale type (2**(e - 127), 0xFF is NaN) and `float4_e2m1fn` (unpacked),
  both through ml_dtypes.

On the host an MX type is a numpy dtype too (`np.zeros(shape, nl.float8_e4m3fn_x4)`, as the SDK's
types are): a structured dtype of one byte field per byte of the element (`float8_e4m3fn_x4.0` ..
`.3`), so arrays keep their MX identity between host and kernel, `.view(np.uint32)` /
`.view(np.uint16)` gives the raw cells, and `astype(np.float32)` refuses (unpack with
`neuron_dtypes.static_cast` / `nkitui.emulator.newns.mxhost.host_cast`). Kernel arguments of these
dtypes become x4 tensors and x4 outputs come back with them.

Packed tensors hold raw bits: DMA and same-dtype copies move them bit-exactly; only
`nc_matmul_mx` / `quantize_mx` (engine/mx.py) decode or encode them.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from numpy.typing import DTypeLike

from nkitui.emulator import dtypes as _dt
from nkitui.emulator import mx_dtypes as _mx
# the MX types are engine facts, re-exported here (`x as x`); the instances are made on first use
# (module __getattr__ below: importing ml_dtypes costs about 0.65 s of CPU)
from nkitui.emulator.mx_dtypes import PackedDType as PackedDType
from nkitui.emulator.mx_dtypes import is_packed as is_packed


# -- the public constants (nl.<name>) --------------------------------------------------------------
float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
tfloat32 = cast("np.dtype[Any]", _dt.tfloat32.public)  # the engine exposes tf32 as a 4-byte void dtype
# made on first use (module __getattr__); declared here for the type checker
bfloat16: np.dtype[Any]
float8_e4m3: np.dtype[Any]
float8_e4m3fn: np.dtype[Any]
float8_e5m2: np.dtype[Any]
float8_e8m0fnu: np.dtype[Any]
float4_e2m1fn: np.dtype[Any]
float8_e4m3fn_x4: PackedDType
float8_e5m2_x4: PackedDType
float4_e2m1fn_x4: PackedDType
PACKED: tuple[_dt.DType, ...]
float8_e4m3fn_x4_dt: _dt.DType
float8_e5m2_x4_dt: _dt.DType
float4_e2m1fn_x4_dt: _dt.DType
float8_e8m0fnu_dt: _dt.DType
float4_e2m1fn_dt: _dt.DType
LAZY_PUBLIC = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn",
                "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")
_LAZY_MX = ("PACKED", "float8_e4m3fn_x4_dt", "float8_e5m2_x4_dt", "float4_e2m1fn_x4_dt", "float8_e8m0fnu_dt",
            "float4_e2m1fn_dt")


def __getattr__(name: str) -> object:
    """The bf16/fp8 and MX constants, made the first time one is asked for (`dtypes.load_narrow`)."""
    if name in LAZY_PUBLIC:
        value = _dt.dtype_of(name).public
    elif name in _LAZY_MX:
        value = getattr(_mx, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY_PUBLIC, *_LAZY_MX})
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)

ALL_NAMES = ("float32", "float16", "bfloat16", "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
             "float8_e8m0fnu", "float4_e2m1fn", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4",
             "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_")


def resolve(dtype: object) -> _dt.DType:
    """Any dtype spelling (nl constant, numpy type, name) -> the engine DType."""
    return _dt.dtype_of(dtype)


def public(d: _dt.DType) -> np.dtype[Any] | PackedDType:
    """What `tensor.dtype` returns for a tensor of engine dtype `d` in the `nki` namespace."""
    pub = d.public
    if isinstance(pub, PackedDType):
        return pub
    if d is _dt.tfloat32:
        return tfloat32
    # DType.public is an object (numpy types in the legacy namespace); every other type's is a numpy dtype or type
    return np.dtype(cast("DTypeLike", pub))

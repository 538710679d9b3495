"""Stand-in for `neuron_dtypes`, the Neuron SDK's (proprietary) numpy dtype package, written from its
observable behaviour in the suites that import it (nki-library's tests): host-side casts between
numpy, bf16/fp8 and the MX packed types, and a few dtype queries. Nothing here is copied.

* `static_cast(array, dtype)`: the value cast, rounding to nearest even (through ml_dtypes), float to
  integer truncating like C++'s static_cast. MX packed types (`float8_e4m3fn_x4`, `float8_e5m2_x4`,
  `float4_e2m1fn_x4`): casting [..., 4F] values to an x4 type packs each 4 consecutive values of the
  last axis into one element ([..., F]); casting an x4 array to any other type unpacks ([..., 4F]);
* `sizeinbytes(dtype)`, `finfo(dtype)` (`.dtype`, `.max`, ...), `is_float_type(dtype)`;
* the dtypes themselves (the same objects as `nki.language`'s).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nkitui.emulator.newns import dtypes as _nd
from nkitui.emulator.newns import mxhost as _mx

bfloat16 = _nd.bfloat16
bfloat = bfloat16
float32 = _nd.float32
float16 = _nd.float16
tfloat32 = _nd.tfloat32
float8_e4m3 = _nd.float8_e4m3
float8_e4m3fn = _nd.float8_e4m3fn
float8_e5m2 = _nd.float8_e5m2
float8_e8m0fnu = _nd.float8_e8m0fnu
float4_e2m1fn = _nd.float4_e2m1fn
float8_e4m3fn_x4 = _nd.float8_e4m3fn_x4
float8_e5m2_x4 = _nd.float8_e5m2_x4
float4_e2m1fn_x4 = _nd.float4_e2m1fn_x4
int8, int16, int32, uint8, uint16, uint32 = _nd.int8, _nd.int16, _nd.int32, _nd.uint8, _nd.uint16, _nd.uint32


def static_cast(array, dtype):
    return _mx.host_cast(array, dtype)


def sizeinbytes(dtype) -> int:
    return _nd.resolve(dtype).itemsize


def is_float_type(dtype) -> bool:
    d = _nd.resolve(dtype)
    return d.kind == "f" and not _nd.is_packed(d)


def finfo(dtype):
    d = _nd.resolve(dtype)
    if _nd.is_packed(d):
        raise ValueError(f"finfo: {d.name} is a packed MX type; ask for its element type")
    np_dtype = np.dtype(d.np) if d.kind == "f" else None
    if np_dtype is None:
        raise ValueError(f"finfo: {d.name} is not a floating-point type")
    return ml_dtypes.finfo(np_dtype) if np_dtype.kind == "V" else np.finfo(np_dtype)

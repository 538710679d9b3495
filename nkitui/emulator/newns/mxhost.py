"""Host-side casts for the `nki` namespace, MX packed types included (the `neuron_dtypes.static_cast`
behaviour that nki-library's tests rely on).

`host_cast(array, dtype)`:
* to an MX x4 type: the last axis holds 4F values; each 4 consecutive values are rounded to the
  element type (nearest even) and packed into one x4 element ([..., 4F] -> [..., F]);
* from an MX x4 array to any other type: unpacked first ([..., F] -> [..., 4F] values);
* otherwise the value cast: floats round to nearest even (ml_dtypes), floats to integers truncate
  toward zero as C++'s static_cast does.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nkitui.emulator import dtypes as _dt
from nkitui.emulator.engine import mx as _mx
from nkitui.emulator.mx_dtypes import PackedDType, is_packed
from nkitui.emulator.newns import dtypes as _nd


def packed_of(array: object) -> _dt.DType | None:
    """The MX packed type an array carries, or None."""
    d = getattr(array, "dtype", None)
    if d is None:
        return None
    try:
        r = _nd.resolve(d)
    except Exception:  # any dtype the emulator does not know is not MX
        return None
    return r if is_packed(r) else None


def _host(d: _dt.DType) -> np.dtype[Any]:
    return getattr(d, "host", None) or d.np


def host_cast(array: ArrayLike, dtype: object) -> NDArray[Any]:
    target = _nd.resolve(dtype)
    arr = np.asarray(array)
    source = packed_of(arr)
    if source is not None:
        if target is source:
            return arr.copy().view(_host(source))
        packed = cast(PackedDType, source.public)  # a packed type's public object is its PackedDType
        values = _mx.unpack(arr.view(source.np), packed)  # [..., F, 4] fp32
        arr = values.reshape(values.shape[:-2] + (values.shape[-2] * 4,))
    if is_packed(target):
        if arr.shape[-1] % 4:
            raise ValueError(f"static_cast to {target.name}: the last dimension ({arr.shape[-1]}) must be a "
                             "multiple of 4 (four values per packed element)")
        values = arr.astype(np.float32).reshape(arr.shape[:-1] + (arr.shape[-1] // 4, 4))
        return _mx.pack(values, cast(PackedDType, target.public)).view(_host(target))
    if target is _dt.tfloat32:
        return _dt.round_tf32(arr.astype(np.float32))
    return arr.astype(target.np)

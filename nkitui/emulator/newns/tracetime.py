"""`nki.tensor`: trace-time (compile-time) constant tensors for `nl.shared_constant`.

They are numpy arrays (arithmetic works like numpy); `nl.shared_constant(t, dtype=...)` embeds one
in shared HBM. `NkiTensor` (the device tensor class) is exported here as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsInt

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from nkitui.emulator.newns.dtypes import resolve as _resolve
from nkitui.emulator.newns.tensor import NkiTensor  # noqa: F401


# dtype: any dtype spelling nki.dtype resolves (nl constant, numpy type, name); shape: what numpy takes
_Shape = int | Sequence[int]


class TraceTimeTensor(np.ndarray[Any, np.dtype[Any]]):
    """A compile-time constant: a numpy array."""

    def __new__(cls, arr: ArrayLike) -> "TraceTimeTensor":
        return np.asarray(arr).view(cls)


def _np(dtype: object) -> DTypeLike:
    return np.float32 if dtype is None else _resolve(dtype).np


def zeros(shape: _Shape, dtype: object = None) -> TraceTimeTensor:
    return TraceTimeTensor(np.zeros(shape, dtype=_np(dtype)))


def ones(shape: _Shape, dtype: object = None) -> TraceTimeTensor:
    return TraceTimeTensor(np.ones(shape, dtype=_np(dtype)))


def full(shape: _Shape, fill_value: ArrayLike, dtype: object = None) -> TraceTimeTensor:
    return TraceTimeTensor(np.full(shape, fill_value, dtype=_np(dtype)))


def identity(n: SupportsInt, dtype: object = None) -> TraceTimeTensor:
    return TraceTimeTensor(np.eye(int(n), dtype=_np(dtype)))


def arange(start: float, stop: float | None = None, step: float = 1, dtype: object = None) -> TraceTimeTensor:
    if stop is None:
        start, stop = 0, start
    return TraceTimeTensor(np.arange(start, stop, step, dtype=_np(dtype) if dtype is not None else None))


def array(data: ArrayLike, dtype: object = None) -> TraceTimeTensor:
    return TraceTimeTensor(np.asarray(data, dtype=_np(dtype) if dtype is not None else None))

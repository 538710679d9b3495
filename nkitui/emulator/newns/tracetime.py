"""`nki.tensor`: trace-time (compile-time) constant tensors for `nl.shared_constant`.

They are numpy arrays (arithmetic works like numpy); `nl.shared_constant(t, dtype=...)` embeds one
in shared HBM. `NkiTensor` (the device tensor class) is exported here as well.
"""

from __future__ import annotations

import numpy as np

from nkitui.emulator.newns.dtypes import resolve as _resolve
from nkitui.emulator.newns.tensor import NkiTensor  # noqa: F401


class TraceTimeTensor(np.ndarray):
    """A compile-time constant: a numpy array."""

    def __new__(cls, arr):
        return np.asarray(arr).view(cls)


def _np(dtype):
    return np.float32 if dtype is None else _resolve(dtype).np


def zeros(shape, dtype=None) -> TraceTimeTensor:
    return TraceTimeTensor(np.zeros(shape, dtype=_np(dtype)))


def ones(shape, dtype=None) -> TraceTimeTensor:
    return TraceTimeTensor(np.ones(shape, dtype=_np(dtype)))


def full(shape, fill_value, dtype=None) -> TraceTimeTensor:
    return TraceTimeTensor(np.full(shape, fill_value, dtype=_np(dtype)))


def identity(n, dtype=None) -> TraceTimeTensor:
    return TraceTimeTensor(np.eye(int(n), dtype=_np(dtype)))


def arange(start, stop=None, step=1, dtype=None) -> TraceTimeTensor:
    if stop is None:
        start, stop = 0, start
    return TraceTimeTensor(np.arange(start, stop, step, dtype=_np(dtype) if dtype is not None else None))


def array(data, dtype=None) -> TraceTimeTensor:
    return TraceTimeTensor(np.asarray(data, dtype=_np(dtype) if dtype is not None else None))

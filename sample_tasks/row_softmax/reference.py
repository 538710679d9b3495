"""Numpy reference for row_softmax: max-subtracted softmax over the last axis, in float64."""

import numpy as np


def row_softmax(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)

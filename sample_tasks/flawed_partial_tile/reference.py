"""Numpy reference for log_softmax over the last axis, in float64."""

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    m = x64.max(axis=-1, keepdims=True)
    return x64 - m - np.log(np.exp(x64 - m).sum(axis=-1, keepdims=True))

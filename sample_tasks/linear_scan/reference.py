"""Numpy reference for linear_scan: the recurrence stepped sequentially in float64."""

import numpy as np


def linear_scan(a: np.ndarray, b: np.ndarray, h0: np.ndarray) -> np.ndarray:
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    h = np.empty(a64.shape, dtype=np.float64)
    state = h0.astype(np.float64)
    for t in range(a64.shape[1]):
        state = a64[:, t] * state + b64[:, t]
        h[:, t] = state
    return h

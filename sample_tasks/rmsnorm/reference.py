"""Numpy reference for rmsnorm, in float64."""

import numpy as np


def rmsnorm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean_sq = np.mean(x64 * x64, axis=-1, keepdims=True)
    return x64 / np.sqrt(mean_sq + eps) * gamma.astype(np.float64)

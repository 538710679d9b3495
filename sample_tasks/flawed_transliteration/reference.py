"""Numpy reference for bias_gelu: GELU with the tanh approximation, in float64."""

import numpy as np


def bias_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64) + bias.astype(np.float64)
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))

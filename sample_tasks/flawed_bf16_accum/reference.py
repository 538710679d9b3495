"""Numpy reference for matmul_bf16_f32out: the exact product of the bf16 inputs, in float64."""

import numpy as np


def matmul_bf16_f32out(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)

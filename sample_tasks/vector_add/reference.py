"""Numpy reference for vector_add: the exact sum, computed in float64.

The sum of two float32 values is exact in float64, so the kernel's correctly rounded float32 result
must be within one float32 ULP of this.
"""

import numpy as np


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) + b.astype(np.float64)

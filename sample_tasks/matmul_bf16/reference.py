"""Numpy reference for matmul_bf16: the exact product of the bf16 inputs, in float64.

The inputs arrive as bf16 (ml_dtypes); upcasting them to float64 is exact, and a float64 matmul of
K=1024 terms is far more accurate than the fp32 PSUM accumulation it is compared with.
"""

import numpy as np


def matmul_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)

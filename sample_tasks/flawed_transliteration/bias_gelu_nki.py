"""NKI port of bias_gelu.cu: y = gelu_tanh(x + bias) (legacy neuronxcc.nki namespace, trn2).

Follows the CUDA kernel's structure step by step so the two can be compared line by line:
the block loop over rows, the warp of 32 lanes striding across the columns, and the same
arithmetic sequence for the tanh approximation of GELU.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

WARP = 32  # lanes per CUDA warp: columns handled per step
SQRT_2_OVER_PI = 0.7978845608028654
GELU_COEFF = 0.044715


@nki.jit
def bias_gelu_kernel(x, bias):
    n_rows, n_cols = x.shape
    y = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)
    bias_row = bias.reshape((1, n_cols))

    for row in nl.sequential_range(n_rows):  # blockIdx.x
        for step in nl.sequential_range(n_cols // WARP):  # c = threadIdx.x + step * blockDim.x
            cols = nl.ds(step * WARP, WARP)
            v = nl.load(x[nl.ds(row, 1), cols])
            b = nl.load(bias_row[0:1, cols])
            v = nl.add(v, b)

            v3 = nl.multiply(v, v)
            v3 = nl.multiply(v3, v)
            inner = nl.multiply(v3, GELU_COEFF)
            inner = nl.add(v, inner)
            inner = nl.multiply(inner, SQRT_2_OVER_PI)
            t = nl.tanh(inner)
            t = nl.add(t, 1.0)
            out = nl.multiply(v, 0.5)
            out = nl.multiply(out, t)

            nl.store(y[nl.ds(row, 1), cols], value=out)

    return y

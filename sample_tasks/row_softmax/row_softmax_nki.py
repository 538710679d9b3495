"""NKI port of row_softmax.cu: softmax over the last axis of a [rows, cols] float32 matrix (legacy
neuronxcc.nki namespace, trn2).

CUDA gives each row to a warp and reduces with shuffles. Here 128 rows sit on the 128 partitions of a
tile and the whole row lies along the free axis, so every reduction is a free-axis reduction that one
engine instruction does for all 128 rows at once:

  VectorE  tensor_reduce      -max per row (negate=True gives the bias for the next step)
  ScalarE  activation_reduce  exp(x - max) and its row sum in the same pass
  VectorE  reciprocal         1 / sum (the more precise reciprocal; only 1 element per partition)
  VectorE  tensor_scalar      exp * (1/sum), broadcast along the free axis

Requires rows to be a multiple of 128 (the task uses 384 x 1000).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def row_softmax_kernel(x):
    n_rows, n_cols = x.shape
    P = nl.tile_size.pmax
    assert n_rows % P == 0, "rows must be a multiple of 128"

    y = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)

    # Row tiles are independent: affine_range lets the compiler overlap the load of one tile with
    # the compute and store of the previous one.
    for t in nl.affine_range(n_rows // P):
        rows = nl.ds(t * P, P)
        x_tile = nl.load(x[rows, :])

        neg_max = nisa.tensor_reduce(op=nl.max, data=x_tile, axis=(1,), negate=True, keepdims=True)

        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        exp_tile = nisa.activation_reduce(op=nl.exp, data=x_tile, bias=neg_max,
                                          reduce_op=nl.add, reduce_res=row_sum)

        inv_sum = nisa.reciprocal(row_sum)
        y_tile = nisa.tensor_scalar(data=exp_tile, op0=nl.multiply, operand0=inv_sum, dtype=x.dtype)
        nl.store(y[rows, :], value=y_tile)

    return y

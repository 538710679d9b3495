"""NKI port of log_softmax.cu: y = x - max - log(sum(exp(x - max))) per row (legacy neuronxcc.nki
namespace, trn2).

Rows on the partitions, 128 per tile; the row lives along the free axis, so the CUDA block
reductions become free-axis reductions:
  VectorE  tensor_reduce      -max per row
  ScalarE  activation_reduce  exp(x - max) with its row sum (the exponentials themselves are unused)
  ScalarE  activation(log)    log(sum)
  VectorE  tensor_tensor      shift = -max - log(sum), one value per row
  VectorE  tensor_scalar      y = x + shift
The row count need not be a multiple of 128: the last tile is masked to the rows that exist.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def log_softmax_kernel(x):
    n_rows, n_cols = x.shape
    P = nl.tile_size.pmax
    y = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(n_cols)[None, :]
    last_row = n_rows - 1  # index of the final row

    for t in nl.affine_range((n_rows + P - 1) // P):
        in_bounds = t * P + i_p < last_row
        x_tile = nl.load(x[t * P + i_p, i_f], mask=in_bounds)

        neg_max = nisa.tensor_reduce(op=nl.max, data=x_tile, axis=(1,), negate=True,
                                     keepdims=True, mask=in_bounds)
        sum_exp = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(op=nl.exp, data=x_tile, bias=neg_max, reduce_op=nl.add,
                               reduce_res=sum_exp, mask=in_bounds)
        log_sum = nisa.activation(op=nl.log, data=sum_exp, mask=in_bounds)
        shift = nisa.tensor_tensor(neg_max, log_sum, op=nl.subtract, mask=in_bounds)

        y_tile = nisa.tensor_scalar(data=x_tile, op0=nl.add, operand0=shift, mask=in_bounds,
                                    dtype=x.dtype)
        nl.store(y[t * P + i_p, i_f], value=y_tile, mask=in_bounds)

    return y

"""NKI port of rmsnorm.cu: y = x * rsqrt(mean(x^2) + eps) * gamma over the hidden axis (legacy
neuronxcc.nki namespace, trn2).

Rows go on the partitions (128 per tile) and the hidden axis along the free dimension, so the CUDA
block reduction becomes one free-axis reduction fused into the squaring activation. The row count
need not be a multiple of 128: the last tile is partial and every instruction on it is masked to the
rows that exist (the task uses 300 rows: tiles of 128, 128 and 44).

Per tile:
  ScalarE  activation_reduce    x^2 and its row sum in one pass
  ScalarE  activation(rsqrt)    rsqrt(sum * (1/hidden) + eps): scale and bias fused, one value per row
  VectorE  scalar_tensor_tensor (x * 1/rms) * gamma   (per-row scalar, then per-column gamma)

gamma is loaded once and broadcast to all 128 partitions before the row loop.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def rmsnorm_kernel(x, gamma, eps):
    n_rows, hidden = x.shape
    P = nl.tile_size.pmax
    assert gamma.shape == (hidden,), "gamma must have one weight per hidden element"

    y = nl.ndarray((n_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(hidden)[None, :]

    # One weight row, replicated across the partitions once for every tile below.
    g_row = nl.load(gamma.reshape((1, hidden)))
    g_tile = nl.broadcast_to(g_row, shape=(P, hidden))
    eps_tile = nl.full((P, 1), eps, dtype=nl.float32, buffer=nl.sbuf)  # activation bias operand

    n_tiles = (n_rows + P - 1) // P
    for t in nl.affine_range(n_tiles):
        valid = t * P + i_p < n_rows  # masks off the rows past the end in the last tile

        x_tile = nl.load(x[t * P + i_p, i_f], mask=valid)

        sum_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(op=nl.square, data=x_tile, reduce_op=nl.add, reduce_res=sum_sq,
                               mask=valid)
        inv_rms = nisa.activation(op=nl.rsqrt, data=sum_sq, scale=1.0 / hidden, bias=eps_tile,
                                  mask=valid)

        y_tile = nisa.scalar_tensor_tensor(data=x_tile, op0=nl.multiply, operand0=inv_rms,
                                           op1=nl.multiply, operand1=g_tile, mask=valid,
                                           dtype=x.dtype)
        nl.store(y[t * P + i_p, i_f], value=y_tile, mask=valid)

    return y

"""NKI port of layernorm.cu: y = (x - mean) * rsqrt(var + eps) * gamma + beta over the last axis
(legacy neuronxcc.nki namespace, trn2).

The CUDA kernel's two block reductions (mean, then variance of the centred values) become one pass
of VectorE batch-norm statistics: `bn_stats` summarises up to 512 elements per partition (count,
mean and count*variance of the even and of the odd elements) and `bn_aggr` merges the groups into
the row mean and (biased) variance, all in fp32, without a second read of the row. The hidden
axis (1536) is split into 3 chunks of 512.

rstd = rsqrt(var + eps) is one ScalarE activation (eps enters as its bias operand). Normalisation and
the affine transform take two VectorE instructions:
  scalar_tensor_tensor  (x - mean) * gamma         per-row scalar, then per-column gamma
  scalar_tensor_tensor  (...) * rstd + beta        per-row scalar, then per-column beta

Rows go on the partitions; 320 rows give tiles of 128, 128 and 64 (the last is masked).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

BN_STATS_FMAX = 512  # most elements per partition one bn_stats instruction accepts
BN_STATS_DIM = 6  # values bn_stats writes per partition


@nki.jit
def layernorm_kernel(x, gamma, beta, eps):
    n_rows, hidden = x.shape
    P = nl.tile_size.pmax
    n_chunks = (hidden + BN_STATS_FMAX - 1) // BN_STATS_FMAX
    assert hidden % n_chunks == 0, "hidden must split into equal bn_stats chunks"
    chunk = hidden // n_chunks

    y = nl.ndarray((n_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)

    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(hidden)[None, :]

    g_tile = nl.broadcast_to(nl.load(gamma.reshape((1, hidden))), shape=(P, hidden))
    b_tile = nl.broadcast_to(nl.load(beta.reshape((1, hidden))), shape=(P, hidden))
    eps_tile = nl.full((P, 1), eps, dtype=nl.float32, buffer=nl.sbuf)  # activation bias operand

    for t in nl.affine_range((n_rows + P - 1) // P):
        valid = t * P + i_p < n_rows
        x_tile = nl.load(x[t * P + i_p, i_f], mask=valid)

        stats = nl.ndarray((P, n_chunks * BN_STATS_DIM), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(n_chunks):
            stats[:, nl.ds(c * BN_STATS_DIM, BN_STATS_DIM)] = nisa.bn_stats(
                x_tile[:, nl.ds(c * chunk, chunk)], mask=valid, dtype=nl.float32)
        mean_var = nisa.bn_aggr(stats, mask=valid, dtype=nl.float32)  # [:, 0] mean, [:, 1] var
        mean = mean_var[:, 0:1]
        var = mean_var[:, 1:2]

        rstd = nisa.activation(op=nl.rsqrt, data=var, bias=eps_tile, mask=valid)

        centred = nisa.scalar_tensor_tensor(data=x_tile, op0=nl.subtract, operand0=mean,
                                            op1=nl.multiply, operand1=g_tile, mask=valid)
        y_tile = nisa.scalar_tensor_tensor(data=centred, op0=nl.multiply, operand0=rstd,
                                           op1=nl.add, operand1=b_tile, mask=valid,
                                           dtype=x.dtype)
        nl.store(y[t * P + i_p, i_f], value=y_tile, mask=valid)

    return y

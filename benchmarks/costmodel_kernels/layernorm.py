"""Two LayerNorm kernels, written by us for cost-model calibration from the description of AWS's
LayerNorm tutorial (nki-spec.md §9.3, source [L-LN]); fp32, legacy namespace.

y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta over the last axis of x [rows, cols]. Rows go
on the partitions, 128 per tile (the last tile masked); gamma and beta are loaded once as one-row
tiles and broadcast across partitions.

1. `v1` - `nl` operations only: mean with `nl.mean`, the variance as mean(x^2) - mean^2, then the
          shift and the scale as two whole-tile operations with `nl.rsqrt` of the variance;
2. `v2` - `nisa.bn_stats` over 512-column chunks and `nisa.bn_aggr` for mean and variance, then one
          `nisa.tensor_scalar` for shift and scale together.

Import after `nkitui.emulator.install()` (or on a host with the Neuron SDK).
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

P = 128
STATS_CHUNK = 512  # bn_stats free-size limit


def _affine_params(gamma, beta, cols):
    g = nl.load(gamma.reshape((1, cols))[0:1, 0:cols])
    b = nl.load(beta.reshape((1, cols))[0:1, 0:cols])
    return g.broadcast_to((P, cols)), b.broadcast_to((P, cols))


@nki.jit
def layernorm_v1(x, eps, gamma, beta):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all, b_all = _affine_params(gamma, beta, cols)
    ip = nl.arange(P)[:, None]
    jf = nl.arange(cols)[None, :]
    for t in nl.affine_range(math.ceil(rows / P)):
        valid = t * P + ip < rows
        tile = nl.load(x[t * P + ip, jf], mask=valid)
        mu = nl.mean(tile, axis=1)
        var = nl.mean(nl.square(tile), axis=1) - mu * mu
        centred = tile - mu
        normed = centred * nl.rsqrt(var + eps)
        nl.store(out[t * P + ip, jf], value=normed * g_all + b_all, mask=valid)
    return out


@nki.jit
def layernorm_v2(x, eps, gamma, beta):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g_all, b_all = _affine_params(gamma, beta, cols)
    ip = nl.arange(P)[:, None]
    jf = nl.arange(cols)[None, :]
    chunks = math.ceil(cols / STATS_CHUNK)
    jc = nl.arange(STATS_CHUNK)[None, :]
    j6 = nl.arange(6)[None, :]
    for t in nl.affine_range(math.ceil(rows / P)):
        valid = t * P + ip < rows
        tile = nl.load(x[t * P + ip, jf], mask=valid)
        stats = nl.ndarray((P, 6 * chunks), dtype=np.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            stats[ip, c * 6 + j6] = nisa.bn_stats(tile[ip, c * STATS_CHUNK + jc],
                                                  mask=(c * STATS_CHUNK + jc < cols), dtype=np.float32)
        moments = nisa.bn_aggr(stats)
        inv_std = nl.rsqrt(moments[ip, 1] + eps)
        normed = nisa.tensor_scalar(data=tile, op0=np.subtract, operand0=moments[ip, 0],
                                    op1=np.multiply, operand1=inv_std)
        nl.store(out[t * P + ip, jf], value=normed * g_all + b_all, mask=valid)
    return out


KERNELS = {"v1": layernorm_v1, "v2": layernorm_v2}


def reference(x, eps, gamma, beta):
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)

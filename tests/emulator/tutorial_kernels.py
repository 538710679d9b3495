"""Kernels written in the style of AWS's legacy (neuronxcc.nki) tutorials and samples.

Our own implementations from the tutorial descriptions in nki-spec.md, used to check that such
kernels run unchanged on the emulator. Each comes with a numpy golden in test_tutorial_kernels.py
(matmul_tiled: in test_vertical_slice.py).
"""

from __future__ import annotations

import math

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim

PMAX = nl.tile_size.pmax


# -- tensor addition: 2-D SPMD grid, each program adds one [128, 512] tile --------------------------
@nki.jit
def add_tiles(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    row0 = nl.program_id(0) * 128
    col0 = nl.program_id(1) * 512
    a_tile = nl.load(a_input[row0:row0 + 128, col0:col0 + 512])
    b_tile = nl.load(b_input[row0:row0 + 128, col0:col0 + 512])
    nl.store(c_output[row0:row0 + 128, col0:col0 + 512], value=a_tile + b_tile)
    return c_output


def add_tiles_spmd(a_input, b_input):
    """Host launcher: one program per tile (grid from the input shape)."""
    grid = (a_input.shape[0] // 128, a_input.shape[1] // 512)
    return add_tiles[grid](a_input, b_input)


# -- transpose of the matrices packed in each partition's row ------------------------------------------
@nki.jit
def transpose_packed(src, rows_cols):
    n_rows, n_cols = rows_cols
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    packed = nl.load(src)
    p, r, c = nl.mgrid[0:src.shape[0], 0:n_rows, 0:n_cols]
    swapped = nl.ndarray((src.shape[0], n_rows * n_cols), dtype=src.dtype, buffer=nl.sbuf)
    swapped[p, c * n_rows + r] = nl.copy(packed[p, r * n_cols + c])
    nl.store(dst, value=swapped)
    return dst


# -- 2-D average pooling, output passed in as an argument (baremetal style) --------------------------
def avg_pool2d(image, pooled, window):
    channels, height, width = image.shape
    ch = nl.arange(channels)[:, None, None]
    hh = nl.arange(height)[None, :, None]
    ww = nl.arange(width)[None, None, :]
    staged = nl.ndarray((channels, height, width), dtype=image.dtype, buffer=nl.sbuf)
    staged[...] = nl.load(image[ch, hh, ww])
    c5, ho, hi, wo, wi = nl.mgrid[0:channels, 0:height // window, 0:window, 0:width // window, 0:window]
    windows = staged[c5, ho * window + hi, wo * window + wi]
    summed = nl.sum(windows, axis=[2, 4])
    averaged = nl.multiply(summed, 1.0 / (window * window), dtype=image.dtype)
    oc, oh, ow = nl.mgrid[0:channels, 0:height // window, 0:width // window]
    nl.store(pooled[oc, oh, ow], value=averaged)


# -- RMSNorm with a partial last tile (masks) ---------------------------------------------------------
@nki.jit
def rms_norm(x, weight):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n_rows, hidden = x.shape
    row = nl.arange(PMAX)[:, None]
    col = nl.arange(hidden)[None, :]
    w_row = nl.load(weight.reshape((1, hidden))[nl.arange(1)[:, None], col])
    w_all = w_row.broadcast_to((PMAX, hidden))
    for t in nl.affine_range(math.ceil(n_rows / PMAX)):
        live = t * PMAX + row < n_rows
        x_tile = nl.load(x[t * PMAX + row, col], mask=live)
        sq_sum = nl.sum(nl.square(x_tile, mask=live), axis=[1], mask=live)
        inv_rms = nl.rsqrt(sq_sum / hidden, mask=live)
        scaled = nl.multiply(x_tile, inv_rms, mask=live)
        y = nl.multiply(scaled, w_all, mask=live)
        nl.store(out[t * PMAX + row, col], value=y, mask=live)
    return out


# -- LayerNorm: nl version (mean / variance with nl ops) ------------------------------------------------
@nki.jit
def layer_norm_nl(x, gamma, beta, eps):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n_rows, n_cols = x.shape
    i_row, i_col, i_one = nl.mgrid[0:PMAX, 0:n_cols, 0:1]
    g = nl.load(gamma.reshape((1, n_cols))[i_one, i_col]).broadcast_to((PMAX, n_cols))
    b = nl.load(beta.reshape((1, n_cols))[i_one, i_col]).broadcast_to((PMAX, n_cols))
    for t in nl.affine_range(math.ceil(n_rows / PMAX)):
        rows = t * PMAX + i_row
        xt = nl.load(x[rows, i_col], mask=(rows < n_rows))
        mu = nl.mean(xt, axis=1)
        centered = xt - mu
        var = nl.mean(nl.square(centered), axis=1)
        normed = centered * nl.rsqrt(var + eps)
        nl.store(out[rows, i_col], value=normed * g + b, mask=(rows < n_rows))
    return out


# -- LayerNorm: ISA version (bn_stats / bn_aggr + one fused tensor_scalar) -------------------------------
@nki.jit
def layer_norm_bn(x, gamma, beta, eps):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n_rows, n_cols = x.shape
    chunk = nl.tile_size.bn_stats_fmax
    n_chunks = math.ceil(n_cols / chunk)
    i_row, i_col, i_one = nl.mgrid[0:PMAX, 0:n_cols, 0:1]
    g = nl.load(gamma.reshape((1, n_cols))[i_one, i_col]).broadcast_to((PMAX, n_cols))
    b = nl.load(beta.reshape((1, n_cols))[i_one, i_col]).broadcast_to((PMAX, n_cols))
    i_chunk, i_stat = nl.mgrid[0:chunk, 0:6]
    for t in nl.affine_range(math.ceil(n_rows / PMAX)):
        rows = t * PMAX + i_row
        xt = nl.load(x[rows, i_col], mask=(rows < n_rows))
        stats = nl.ndarray((PMAX, 6 * n_chunks), dtype=nl.float32)
        for c in nl.affine_range(n_chunks):
            stats[i_row, c * 6 + i_stat] = nisa.bn_stats(xt[i_row, c * chunk + i_chunk],
                                                         mask=(c * chunk + i_chunk < n_cols), dtype=nl.float32)
        mean_var = nisa.bn_aggr(stats)
        mean = mean_var[i_row, 0]
        rstd = nl.rsqrt(mean_var[i_row, 1] + eps)
        normed = nisa.tensor_scalar(data=xt, op0=np.subtract, operand0=mean, op1=np.multiply, operand1=rstd)
        nl.store(out[rows, i_col], value=normed * g + b, mask=(rows < n_rows))
    return out


# -- row softmax with nl reductions --------------------------------------------------------------------
@nki.jit
def softmax_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n_rows, n_cols = x.shape
    i_p = nl.arange(PMAX)[:, None]
    i_f = nl.arange(n_cols)[None, :]
    for t in nl.affine_range(math.ceil(n_rows / PMAX)):
        ok = t * PMAX + i_p < n_rows
        xt = nl.load(x[t * PMAX + i_p, i_f], mask=ok)
        row_max = nl.max(xt, axis=[1], keepdims=True, mask=ok)
        e = nl.exp(nl.subtract(xt, row_max, mask=ok), mask=ok)
        denom = nl.sum(e, axis=[1], keepdims=True, mask=ok)
        nl.store(out[t * PMAX + i_p, i_f], value=e * nl.reciprocal(denom, mask=ok), mask=ok)
    return out


# -- the matmul tutorial's first kernel: M tile 128, N tile 512, K tile 128, PSUM accumulation ---------
@nki.jit
def matmul_tiled(lhsT, rhs):
    """lhsT.T @ rhs, both operand tiles loaded inside the K loop (also timed by benchmarks/emulator.py)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(a, b)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result


# -- tiled matmul with blocking, sequential K blocks and SBUF accumulation ----------------------------
@nki.jit
def matmul_blocked(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // TN):
        acc = nl.zeros((M // TM, par_dim(TM), TN), dtype=nl.float32, buffer=nl.sbuf)
        for kb in nl.sequential_range(K // (2 * TK)):  # K in blocks of two tiles
            rhs_tiles = nl.ndarray((2, par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            lhs_tiles = nl.ndarray((2, par_dim(TK), M), dtype=lhsT.dtype, buffer=nl.sbuf)
            for kk in nl.affine_range(2):
                k0 = (kb * 2 + kk) * TK
                rhs_tiles[kk] = nl.load(rhs[k0:k0 + TK, n * TN:(n + 1) * TN])
                lhs_tiles[kk] = nl.load(lhsT[k0:k0 + TK, 0:M])
            for m in nl.affine_range(M // TM):
                part = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                for kk in nl.affine_range(2):
                    part += nisa.nc_matmul(lhs_tiles[kk, :, m * TM:(m + 1) * TM], rhs_tiles[kk])
                acc[m] += part
        for m in nl.affine_range(M // TM):
            nl.store(result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl.copy(acc[m], dtype=result.dtype))
    return result


# -- fused attention (small head dim): softmax(Q K^T * scale) V, optional causal mask -------------------
@nki.jit
def attention(q, k, v, causal=False):
    seq, d = q.shape
    n_t = seq // PMAX
    out = nl.ndarray((seq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    scale = 1.0 / math.sqrt(d)
    qT = nl.ndarray((n_t, par_dim(d), PMAX), dtype=nl.bfloat16)
    kT = nl.ndarray((n_t, par_dim(d), PMAX), dtype=nl.bfloat16)
    v_sb = nl.ndarray((n_t, par_dim(PMAX), d), dtype=nl.bfloat16)
    for t in nl.affine_range(n_t):
        qT[t] = nl.load_transpose2d(q[t * PMAX:(t + 1) * PMAX, :], dtype=nl.bfloat16)
        kT[t] = nl.load_transpose2d(k[t * PMAX:(t + 1) * PMAX, :], dtype=nl.bfloat16)
        v_sb[t] = nl.load(v[t * PMAX:(t + 1) * PMAX, :], dtype=nl.bfloat16)
    i_q, i_k = nl.mgrid[0:PMAX, 0:PMAX]
    for qt in nl.affine_range(n_t):
        scores = nl.ndarray((par_dim(PMAX), seq), dtype=nl.float32)
        for kt in nl.affine_range(n_t):
            s_psum = nisa.nc_matmul(qT[qt], kT[kt])
            if causal:
                scores[i_q, kt * PMAX + i_k] = nisa.affine_select(
                    pred=(qt * PMAX + i_q >= kt * PMAX + i_k), on_true_tile=s_psum, on_false_value=-30000.0,
                    dtype=nl.float32)
            else:
                scores[i_q, kt * PMAX + i_k] = nl.copy(s_psum, dtype=nl.float32)
        neg_max = nisa.tensor_reduce(np.max, data=scores, axis=(1,), negate=True)
        row_sum = nl.ndarray((PMAX, 1), dtype=nl.float32)
        probs = nisa.activation(op=nl.exp, data=scores, bias=nl.multiply(neg_max, scale), scale=scale,
                                reduce_op=nl.add, reduce_res=row_sum)
        probs_bf = nl.copy(probs, dtype=nl.bfloat16)
        o_psum = nl.zeros((PMAX, d), dtype=nl.float32, buffer=nl.psum)
        for kt in nl.affine_range(n_t):
            pT = nl.copy(nisa.nc_transpose(probs_bf[:, kt * PMAX:(kt + 1) * PMAX]), dtype=nl.bfloat16)
            o_psum += nisa.nc_matmul(pT, v_sb[kt])
        o_tile = nisa.tensor_scalar(o_psum, np.multiply, nisa.reciprocal(row_sum), dtype=q.dtype)
        nl.store(out[qt * PMAX:(qt + 1) * PMAX, :], value=o_tile)
    return out


# -- fused Mamba selective scan ------------------------------------------------------------------------
@nki.jit
def mamba_scan(delta, u, A, B, C):
    """out[b, c, t] = sum_s C[b,s,t] * h_s[c,t],  h_s[c,t] = exp(delta*A[c,s]) * h_s[c,t-1] + delta*u*B[b,s,t]."""
    batch, channels, seq = delta.shape
    states = A.shape[1]
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    chunk = min(seq, 512)
    for bi in nl.affine_range(batch):
        for ct in nl.affine_range(channels // PMAX):
            c0 = ct * PMAX
            acc = nl.zeros((par_dim(PMAX), seq), dtype=nl.float32)
            d_t = nl.load(delta[bi, c0:c0 + PMAX, :])
            du = nisa.tensor_tensor(d_t, nl.load(u[bi, c0:c0 + PMAX, :]), op=nl.multiply)
            for s in nl.affine_range(states):
                a_col = nl.load(A[c0:c0 + PMAX, s])
                carry = nl.zeros((PMAX, 1), dtype=nl.float32)
                for j in nl.sequential_range(seq // chunk):
                    f0 = j * chunk
                    decay = nisa.activation(op=nl.exp, data=d_t[:, f0:f0 + chunk], scale=a_col)
                    b_row = nl.load(B[bi, s:s + 1, f0:f0 + chunk]).broadcast_to((PMAX, chunk))
                    drive = nisa.tensor_tensor(du[:, f0:f0 + chunk], b_row, op=nl.multiply)
                    h = nisa.tensor_tensor_scan(decay, drive, initial=carry, op0=np.multiply, op1=np.add)
                    carry[...] = h[:, chunk - 1]
                    c_row = nl.load(C[bi, s:s + 1, f0:f0 + chunk]).broadcast_to((PMAX, chunk))
                    acc[:, f0:f0 + chunk] += nisa.tensor_tensor(h, c_row, op=nl.multiply)
            nl.store(out[bi, c0:c0 + PMAX, :], value=acc)
    return out

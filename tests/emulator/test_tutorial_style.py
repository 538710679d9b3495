"""Legacy (neuronxcc.nki) kernels in the exact calling style of AWS's tutorials and nki-samples.

tutorial_kernels.py already covers the algorithms; these kernels reproduce the idioms those files
use that the simplified versions do not: an un-staged `nl.load` of a 3-D tensor reduced through a
5-D advanced-index view and divided by an int, `t[...] = op(t, ...)` self-assignments, unmasked
instructions on the unused rows of a partial tile, `tile / tile` broadcasting, the mean-of-squares
variance trick, `nl.spmd_dim(n, nl.nc(2))` grids, `from neuronxcc import nki`, `nki.isa.*` reached
through the `nki` module, `initial=0` scans, PSUM tiles written by `t[...] = ...`, 3-D `par_dim`
accumulators updated with `+=`, and the Stable Diffusion fused attention (affine_select on a PSUM
view, transposed loads scaled on the fly, `(1.0 / t).broadcast_to(...)`, a transposed store).
Each is compared as its authors compare it (exact where they use `==`, else their allclose).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki as nki_from_package
from neuronxcc.nki.language import par_dim
import neuronxcc.nki.typing as nt
from neuronxcc.nki.typing import tensor

BF16 = ml_dtypes.bfloat16


# -- average pooling: load the whole image, reduce a 5-D window view, divide by the window area -----
@nki.jit
def avgpool(image, size):
    chans, rows, cols = image.shape
    pooled = nl.ndarray((chans, rows // size, cols // size), dtype=image.dtype, buffer=nl.shared_hbm)
    c, wr, r, wc, col = nl.mgrid[0:chans, 0:rows // size, 0:size, 0:cols // size, 0:size]
    staged: tensor[chans, rows, cols] = nl.load(image)
    result: tensor[chans, rows // size, cols // size] = nl.sum(
        staged[c, size * wr + r, size * wc + col], axis=[2, 4]) / (size * size)
    nl.store(pooled, value=result)
    return pooled


def test_avgpool_fp16_matches_exactly():
    image = np.arange(3 * 8 * 12, dtype=np.float16).reshape(3, 8, 12)
    out = avgpool(image, 2)
    golden = np.nanmean(image.reshape(3, 4, 2, 6, 2), axis=(2, 4))
    assert out.dtype == np.float16
    assert (out == golden).all()


# -- RMSNorm: unmasked square/sum/rsqrt on the partial tile, masked self-assignment ----------------
@nki.jit
def rmsnorm_tutorial(x, g):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.arange(128)[:, None]
    one = nl.arange(1)[:, None]
    cols = nl.arange(x.shape[1])[None, :]
    g_tile = nl.load(g.reshape((1, g.shape[0]))[one, cols])
    for i in nl.affine_range(math.ceil(x.shape[0] / 128)):
        x_tile = nl.load(x[i * 128 + rows, cols], mask=(i * 128 + rows < x.shape[0]))
        mean_sq = nl.sum(nl.square(x_tile), axis=[1]) / x.shape[1]
        y = nl.multiply(x_tile, nl.rsqrt(mean_sq))
        g_rows = g_tile.broadcast_to((128, g.shape[0]))
        y[...] = nl.multiply(y, g_rows, mask=(i * 128 + rows < x.shape[0]))
        nl.store(out[i * 128 + rows, cols], value=y, mask=(i * 128 + rows < x.shape[0]))
    return out


def test_rmsnorm_tutorial_partial_tile(rng):
    x = rng.random((200, 384)).astype(np.float32)
    g = rng.random(384).astype(np.float32)
    out = rmsnorm_tutorial(x, g)
    golden = x * (1.0 / np.sqrt(np.mean(x * x, axis=1).reshape(-1, 1))) * g
    assert np.allclose(golden, out, atol=1e-4, rtol=1e-2)
    assert np.abs(out - golden).max() < 1e-5


# -- LayerNorm v1: var = mean(x^2) - mean^2, nl ops only ---------------------------------------------
@nki.jit
def layernorm_nl_variance_trick(x, eps, gamma, beta):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    i_one = nl.arange(1)[:, None]
    g = nl.load(gamma.reshape((1, gamma.shape[0]))[i_one, i_f]).broadcast_to((nl.tile_size.pmax, gamma.shape[0]))
    b = nl.load(beta.reshape((1, beta.shape[0]))[i_one, i_f]).broadcast_to((nl.tile_size.pmax, beta.shape[0]))
    for t in nl.affine_range(math.ceil(x.shape[0] / nl.tile_size.pmax)):
        live = t * nl.tile_size.pmax + i_p < x.shape[0]
        xt = nl.load(x[t * nl.tile_size.pmax + i_p, i_f], mask=live)
        mean = nl.mean(xt, axis=1)
        var = nl.mean(nl.square(xt), axis=1) - mean * mean
        normed = (xt - mean) * nl.rsqrt(var + eps)
        nl.store(out[t * nl.tile_size.pmax + i_p, i_f], value=normed * g + b, mask=live)
    return out


def test_layernorm_variance_trick(rng):
    x = rng.random((160, 256)).astype(np.float32)
    gamma, beta = rng.random(256).astype(np.float32), rng.random(256).astype(np.float32)
    out = layernorm_nl_variance_trick(x, 1e-5, gamma, beta)
    x64 = x.astype(np.float64)
    golden = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(out, golden, atol=1e-3, rtol=1e-3)


# -- softmax: unmasked exp, no keepdims on the sum, tile / tile --------------------------------------
@nki.jit
def softmax_tutorial(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:a.shape[1]]
    for i in nl.affine_range(math.ceil(a.shape[0] / 128)):
        live = i * 128 + ix < a.shape[0]
        tile = nl.load(a[i * 128 + ix, iy], mask=live)
        peak = nl.max(tile, axis=[1], keepdims=True, mask=live)
        numerator = nl.exp(nl.subtract(tile, peak, mask=live))
        denominator = nl.sum(numerator, axis=[1])
        nl.store(out[i * 128 + ix, iy], value=numerator / denominator, mask=live)
    return out


def test_softmax_tutorial_partial_tile(rng):
    a = rng.standard_normal((150, 200)).astype(np.float32)
    out = softmax_tutorial(a)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# -- SPMD add over two NeuronCores; matmul SPMD with the package-level import ----------------------
@nki.jit
def add_tile(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r0, c0 = nl.program_id(0) * 128, nl.program_id(1) * 512
    a_t = nl.load(a[r0:r0 + 128, c0:c0 + 512])
    b_t = nl.load(b[r0:r0 + 128, c0:c0 + 512])
    nl.store(c[r0:r0 + 128, c0:c0 + 512], value=a_t + b_t)
    return c


def test_spmd_add_over_two_cores(rng):
    a = rng.random((512, 1024)).astype(np.float16)
    b = rng.random((512, 1024)).astype(np.float16)
    out = add_tile[nl.spmd_dim(a.shape[0] // 256, nl.nc(2)), a.shape[1] // 512](a, b)
    assert np.allclose(a + b, out, atol=1e-4, rtol=1e-2)


@nki_from_package.jit
def matmul_spmd(a_t, b):
    k, m = a_t.shape
    _, n = b.shape
    result = nl.ndarray((m, n), dtype=a_t.dtype, buffer=nl.shared_hbm)
    i_m = nl.program_id(0) * 128
    i_n = nl.program_id(1) * 512
    a_tile = nl.load(a_t[0:128, i_m:i_m + 128])
    b_tile = nl.load(b[0:128, i_n:i_n + 512])
    psum = nisa.nc_matmul(a_tile, b_tile)
    nl.store(result[i_m:i_m + 128, i_n:i_n + 512], value=nl.copy(psum, dtype=result.dtype))
    return result


def test_matmul_spmd_grid_bf16(rng):
    a_t = rng.random((128, 512)).astype(BF16)
    b = rng.random((128, 1024)).astype(BF16)
    out = matmul_spmd[4, 2](a_t, b)
    golden = a_t.astype(np.float32).T @ b.astype(np.float32)
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float32), golden, rtol=1e-2, atol=1e-2)


# -- fused mamba: v1 (3-D par_dim accumulator, initial=0) and v3 (chunked scan, PSUM staging) -------
@nki.jit
def mamba_per_state(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    n_tiles = channels // 128
    for bi in nl.affine_range(batch):
        acc = nl.zeros((n_tiles, nl.par_dim(128), seq), dtype=delta.dtype)
        for s in nl.affine_range(A.shape[1]):
            for ct in nl.affine_range(n_tiles):
                c0 = ct * 128
                d_i = nl.load(delta[bi, c0:c0 + 128, 0:seq])
                a_i = nl.load(A[c0:c0 + 128, s])
                decay = nisa.activation(op=nl.exp, data=d_i, scale=a_i)
                u_i = nl.load(u[bi, c0:c0 + 128, 0:seq])
                b_row = nl.load(B[bi, s:s + 1, 0:seq])
                du = nisa.tensor_tensor(d_i, u_i, op=nl.multiply)
                drive = nisa.tensor_tensor(du, b_row.broadcast_to((128, seq)), op=nl.multiply)
                h = nki.isa.tensor_tensor_scan(decay, drive, initial=0, op0=np.multiply, op1=np.add)
                c_row = nl.load(C[bi, s:s + 1, 0:seq])
                acc[ct, 0:128, 0:seq] += nisa.tensor_tensor(h, c_row.broadcast_to((128, seq)), op=nl.multiply)
        for ct in nl.affine_range(n_tiles):
            nl.store(out[bi, ct * 128:(ct + 1) * 128, 0:seq], acc[ct, 0:128, 0:seq])
    return out


@nki.jit
def mamba_chunked(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    chunk = 512
    for bi in nl.affine_range(batch):
        for ct in nl.affine_range(channels // 128):
            c0 = ct * 128
            acc = nl.zeros((nl.par_dim(128), seq), dtype=delta.dtype)
            d_i = nl.load(delta[bi, c0:c0 + 128, 0:seq])
            u_i = nl.load(u[bi, c0:c0 + 128, 0:seq])
            for s in nl.affine_range(A.shape[1]):
                a_i = nl.load(A[c0:c0 + 128, s])
                carry = nl.zeros((128, 1), dtype=d_i.dtype)
                for j in nl.static_range(seq // chunk):
                    f0 = j * chunk
                    decay = nisa.activation(op=nl.exp, data=d_i[0:128, f0:f0 + chunk], scale=a_i)
                    b_row = nl.load(B[bi, s:s + 1, f0:f0 + chunk])
                    du = nisa.tensor_tensor(d_i[0:128, f0:f0 + chunk], u_i[0:128, f0:f0 + chunk], op=nl.multiply)
                    drive = nisa.tensor_tensor(du, b_row.broadcast_to((128, chunk)), op=nl.multiply)
                    h = nki.isa.tensor_tensor_scan(decay, drive, initial=carry, op0=np.multiply, op1=np.add)
                    carry[...] = h[0:128, chunk - 1]
                    c_row = nl.load(C[bi, s:s + 1, f0:f0 + chunk])
                    staged = nl.ndarray((128, chunk), dtype=delta.dtype, buffer=nl.psum)
                    staged[...] = nisa.tensor_tensor(h, c_row.broadcast_to((128, chunk)), op=nl.multiply)
                    acc[0:128, f0:f0 + chunk] += staged
            nl.store(out[bi, c0:c0 + 128, 0:seq], acc[0:128, 0:seq])
    return out


def test_mamba_versions_agree_exactly_and_match_numpy(rng):
    batch, channels, seq, states = 1, 256, 1024, 2
    delta = rng.random((batch, channels, seq)).astype(np.float32) * 0.1
    u = rng.random((batch, channels, seq)).astype(np.float32)
    A = -rng.random((channels, states)).astype(np.float32)
    B = rng.random((batch, states, seq)).astype(np.float32)
    C = rng.random((batch, states, seq)).astype(np.float32)
    v1 = mamba_per_state(delta, u, A, B, C)
    v3 = mamba_chunked(delta, u, A, B, C)
    assert np.all(v3 == v1)  # the authors' check between versions
    golden = np.zeros((batch, channels, seq))
    for s in range(states):
        decay = np.exp(delta[0].astype(np.float64) * A[:, s:s + 1])
        drive = delta[0].astype(np.float64) * u[0] * B[0, s]
        h = np.zeros(channels)
        for t in range(seq):
            h = decay[:, t] * h + drive[:, t]
            golden[0, :, t] += h * C[0, s, t]
    np.testing.assert_allclose(v1, golden, rtol=1e-4, atol=1e-4)


# -- Stable Diffusion fused self-attention (small head dim, bf16 TensorE, fp32 accumulation) --------
@nki.jit
def sd_attention(q_ref, k_ref, v_ref, use_causal_mask=False):
    kernel_dtype = q_ref.dtype
    pe_dt = nl.bfloat16
    seqlen, d_head = q_ref.shape
    out_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    scale = 0.125
    n_tiles, tsz = seqlen // 128, 128

    v_all = nl.ndarray((par_dim(tsz), n_tiles, d_head), dtype=pe_dt)
    for t in nl.affine_range(n_tiles):
        ip, jf = nl.mgrid[0:tsz, 0:d_head]
        v_all[ip, t, jf] = nl.load(v_ref[t * tsz + ip, jf], dtype=pe_dt)

    q_all = nl.ndarray((n_tiles, par_dim(d_head), tsz), dtype=pe_dt)
    k_all = nl.ndarray((n_tiles, par_dim(d_head), tsz), dtype=pe_dt)
    ip_t, if_t = nl.mgrid[0:d_head, 0:tsz]
    for t in nl.affine_range(n_tiles):
        rows, cols = nl.mgrid[0:tsz, 0:d_head]
        q_all[t, ip_t, if_t] = nl.load_transpose2d(q_ref[t * tsz + rows, cols], dtype=pe_dt) * scale
        k_all[t, ip_t, if_t] = nl.load_transpose2d(k_ref[t * tsz + rows, cols], dtype=pe_dt)

    for qt in nl.affine_range(n_tiles):
        scores = nl.ndarray((par_dim(tsz), seqlen), dtype=kernel_dtype)
        neg_max = nl.ndarray((par_dim(tsz), n_tiles), dtype=kernel_dtype)
        ip_m, if_m = nl.mgrid[0:tsz, 0:n_tiles]
        for kt in nl.affine_range(n_tiles):
            qk = nl.zeros((par_dim(tsz), tsz), dtype=np.float32, buffer=nl.psum)
            ip_s, if_s = nl.mgrid[0:tsz, 0:tsz]
            qk[ip_s, if_s] += nisa.nc_matmul(moving=k_all[kt, ip_t, if_t], stationary=q_all[qt, ip_t, if_t])
            if use_causal_mask:
                scores[ip_s, kt * tsz + if_s] = nisa.affine_select(
                    pred=(qt * tsz + ip_s >= kt * tsz + if_s), on_true_tile=qk[ip_s, if_s],
                    on_false_value=-9984.0, dtype=kernel_dtype)
            else:
                scores[ip_s, kt * tsz + if_s] = nl.copy(qk[ip_s, if_s], dtype=kernel_dtype)
            neg_max[ip_m, kt] = nisa.tensor_reduce(np.max, data=scores[ip_s, kt * tsz + if_s], axis=(1,),
                                                   dtype=kernel_dtype, negate=True)
        row_bias = nisa.tensor_reduce(np.min, data=neg_max[ip_m, if_m], axis=(1,), dtype=kernel_dtype,
                                      negate=False)

        ip_a, if_a = nl.mgrid[0:tsz, 0:seqlen]
        ip_d, if_d = nl.mgrid[0:tsz, 0:d_head]
        probs = nl.ndarray((par_dim(tsz), seqlen), dtype=pe_dt)
        divisor = nl.ndarray((par_dim(tsz), d_head), dtype=kernel_dtype)
        exps = nisa.activation(np.exp, data=scores[ip_a, if_a], bias=row_bias, scale=1.0)
        sums = nisa.tensor_reduce(np.add, data=exps, axis=(1,), dtype=kernel_dtype)
        probs[ip_a, if_a] = nl.copy(exps, dtype=pe_dt)
        divisor[ip_d, if_d] = nl.copy((1.0 / sums).broadcast_to((tsz, d_head)), dtype=kernel_dtype)

        probs_t = nl.ndarray((par_dim(tsz), n_tiles, tsz), dtype=pe_dt)
        out_psum = nl.zeros((par_dim(d_head), tsz), dtype=np.float32, buffer=nl.psum)
        ip_pt, if_pt = nl.mgrid[0:tsz, 0:tsz]
        for kt in nl.affine_range(n_tiles):
            probs_t[ip_pt, kt, if_pt] = nisa.nc_transpose(probs[ip_pt, kt * tsz + if_pt])
        ip_o, if_o = nl.mgrid[0:d_head, 0:tsz]
        for kt in nl.affine_range(n_tiles):
            ip_v, if_v = nl.mgrid[0:tsz, 0:d_head]
            out_psum[ip_o, if_o] += nisa.nc_matmul(moving=probs_t[ip_pt, kt, if_pt], stationary=v_all[ip_v, kt, if_v])
        out_sb = nl.copy(out_psum[ip_o, if_o], dtype=kernel_dtype)
        scaled = out_sb * nisa.nc_transpose(divisor[ip_d, if_d])
        nl.store(out_ref[qt * tsz + if_o, ip_o], value=scaled)
    return out_ref


def _softmax_attention(q, k, v, causal):
    s = (q.astype(np.float64) * 0.125) @ k.T.astype(np.float64)
    if causal:
        s = np.where(np.tril(np.ones(s.shape)) > 0, s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


def test_sd_attention_authors_tolerance(rng):
    seqlen, d_head = 512, 64
    q, k, v = (rng.random((seqlen, d_head)).astype(np.float32) for _ in range(3))
    out = sd_attention(q, k, v)
    assert np.allclose(out, _softmax_attention(q, k, v, False), atol=1e-5, rtol=1e-3)


def test_sd_attention_causal(rng):
    seqlen, d_head = 256, 64
    q, k, v = (rng.random((seqlen, d_head)).astype(np.float32) for _ in range(3))
    out = sd_attention(q, k, v, use_causal_mask=True)
    golden = _softmax_attention(q, k, v, True)
    # The authors only check the unmasked kernel; early causal rows average a few bf16 values, so
    # their error is one bf16 rounding (~2e-3 relative), not the averaged-out 1e-5.
    np.testing.assert_allclose(out, golden, atol=1e-2, rtol=1e-2)
    assert np.abs(out - golden)[seqlen // 2:].max() < 1e-3


# -- rotary embedding: HBM views by int index, a jit sub-kernel writing a caller's SBUF tile ---------
@nki.jit
def _rotate_into(q_tile, k_tile, cos_tile, sin_tile, output_tile):
    half = q_tile.shape[-1] // 2
    for slot, x in ((0, q_tile), (1, k_tile)):
        output_tile[slot, :, :] = x * cos_tile
        output_tile[slot, :, :half] = output_tile[slot, :, :half] + (-1 * x[:, half:] * sin_tile[:, :half])
        output_tile[slot, :, half:] = output_tile[slot, :, half:] + (x[:, :half] * sin_tile[:, half:])


@nki.jit
def rotary(q, k, cos, sin):
    b, h = nl.program_id(axis=0), nl.program_id(axis=1)
    seq_len = q.shape[2]
    output = nl.ndarray([2] + list(q.shape), dtype=q.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(q.shape[-1])[None, :]
    for s in nl.affine_range(0, (seq_len + 127) // 128):
        rows = s * nl.tile_size.pmax + i_p
        q_view, k_view, cos_view, sin_view = q[b, h], k[b, h], cos[b], sin[b]
        q_tile = nl.load(q_view[rows, i_f], mask=(rows < seq_len))
        k_tile = nl.load(k_view[rows, i_f], mask=(rows < seq_len))
        out_tile = nl.ndarray([2] + [nl.par_dim(k_tile.shape[0]), k_tile.shape[1]], dtype=k_tile.dtype,
                              buffer=nl.sbuf)
        cos_tile = nl.load(cos_view[rows, i_f], mask=(rows < seq_len))
        sin_tile = nl.load(sin_view[rows, i_f], mask=(rows < seq_len))
        _rotate_into(q_tile, k_tile, cos_tile, sin_tile, out_tile)
        out_q, out_k = output[0, b, h], output[1, b, h]
        nl.store(out_q[rows, i_f], out_tile[0, :, :], mask=(rows < seq_len))
        nl.store(out_k[rows, i_f], out_tile[1, :, :], mask=(rows < seq_len))
    return output


def test_rotary_grid_over_batch_and_heads(rng):
    bs, nh, sl, hd = 2, 3, 200, 64
    q = rng.standard_normal((bs, nh, sl, hd)).astype(np.float32)
    k = rng.standard_normal((bs, nh, sl, hd)).astype(np.float32)
    inv_freq = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
    freqs = np.arange(sl)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos = np.broadcast_to(np.cos(emb), (bs, sl, hd)).astype(np.float32)
    sin = np.broadcast_to(np.sin(emb), (bs, sl, hd)).astype(np.float32)
    out = rotary[bs, nh](q, k, cos, sin)

    def rotate_half(x):
        return np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)

    c, s = cos[:, None], sin[:, None]
    np.testing.assert_allclose(out[0], q * c + rotate_half(q) * s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], k * c + rotate_half(k) * s, rtol=1e-5, atol=1e-5)


# -- flash attention forward (nki-samples reference style): trace-mode helpers, online softmax ------
@dataclass(frozen=True)
class FlashCfg:
    seq_tile_size: int = 512
    training: bool = True


@nki.jit(mode="trace")
def _transpose_probs(p_t, p, large):
    for i in nl.affine_range(large // 512):
        staged = nl.ndarray((par_dim(128), 512), buffer=nl.psum, dtype=np.float32)
        for j in nl.affine_range(4):
            staged[:, nl.ds(j * 128, 128)] = nisa.nc_transpose(p[:, nl.ds(i * 512 + j * 128, 128)])
        p_t[:, nl.ds(i * 512, 512)] = nl.copy(staged, dtype=p_t.dtype)


@nki.jit(mode="trace")
def _flash_core(q_tile, k, v, o_buf, l_buf, m_buf, q_idx, k_large_idx, kernel_dtype, acc_type,
                cfg: FlashCfg, use_causal_mask, sliding_window=-1):
    large = cfg.seq_tile_size
    scores = nl.ndarray((par_dim(128), large), buffer=nl.sbuf, dtype=acc_type)
    tile_max = nl.ndarray((par_dim(128), large // 512), dtype=acc_type)
    for k_i in nl.affine_range(large // 512):
        cols = nl.ds(k_i * 512, 512)
        qk = nl.ndarray((par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
        needed = (not use_causal_mask) or q_idx * 128 + 127 >= k_large_idx * large + k_i * 512
        if needed:
            qk[:, :] = nl.matmul(q_tile, k[:, cols], transpose_x=True)
        else:
            qk[:, :] = 0
        if use_causal_mask:
            i_q, i_k = nl.mgrid[0:128, 0:512]
            scores[:, cols] = nisa.affine_select(pred=(q_idx * 128 + i_q >= k_large_idx * large + k_i * 512 + i_k),
                                                 on_true_tile=qk, on_false_value=nl.fp32.min, dtype=acc_type)
            if sliding_window > 0:  # per-tile Python-bool mask: tiles right of the diagonal are left alone
                diagonal_and_left = (q_idx + 1) * 128 > k_large_idx * large + k_i * 512
                scores[:, cols] = nisa.affine_select(
                    pred=(k_large_idx * large + k_i * 512 + i_k > q_idx * 128 + i_q - sliding_window),
                    on_true_tile=scores[:, cols], on_false_value=nl.fp32.min, dtype=acc_type,
                    mask=diagonal_and_left)
        else:
            scores[:, cols] = nl.copy(qk, dtype=acc_type)
        tile_max[:, k_i] = nisa.tensor_reduce(np.max, scores[:, cols], axis=(1,), dtype=acc_type, negate=False)
    new_max = nisa.tensor_reduce(np.max, tile_max[:, :], axis=(1,), dtype=acc_type, negate=False)

    m_prev = nl.copy(m_buf[:, 0])
    m_buf[:, 0] = nl.maximum(m_prev, new_max)
    m_cur = m_buf[:, 0]
    alpha = nisa.activation(np.exp, m_cur, bias=m_prev, scale=-1.0)
    o_scaled = nl.ndarray((par_dim(128), o_buf.shape[-1]), dtype=o_buf.dtype)
    o_scaled[...] = nl.multiply(o_buf[:, :], alpha)

    red = large // 2
    p = nl.ndarray((par_dim(128), large), dtype=kernel_dtype)
    partial = nl.ndarray((par_dim(128), large // red), dtype=acc_type)
    for r in nl.affine_range(large // red):
        sl = nl.ds(r * red, red)
        p[:, sl] = nisa.activation_reduce(np.exp, scores[:, sl], bias=-1 * m_cur, scale=1.0, reduce_op=nl.add,
                                          reduce_res=partial[:, r], dtype=kernel_dtype)
    row_sum = nl.sum(partial, axis=1, dtype=acc_type)
    p_t = nl.ndarray((par_dim(128), large), dtype=kernel_dtype)
    _transpose_probs(p_t=p_t, p=p, large=large)
    pv = nl.zeros((par_dim(128), o_buf.shape[-1]), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
    for k_i in nl.affine_range(large // 128):
        pv[:, :] += nl.matmul(p_t[:, nl.ds(k_i * 128, 128)], v[k_i, :, :], transpose_x=True)
    o_buf[:, :] = nl.add(o_scaled, pv)
    e = nisa.activation(nl.exp, m_cur, bias=l_buf[:, 0], scale=-1.0)
    l_buf[:, 0] = nl.add(m_cur, nisa.activation(nl.log, e, bias=row_sum))


@nki_from_package.jit
def flash_fwd(q, k, v, softmax_scale=None, use_causal_mask=True, sliding_window=-1, mixed_precision=True,
              config=None):
    config = config or FlashCfg()
    use_causal_mask = True if sliding_window > 0 else use_causal_mask
    b, h, d, seqlen_q = q.shape
    seqlen_k = k.shape[-1]
    kernel_dtype = nl.bfloat16 if mixed_precision else q.dtype
    acc_type = np.dtype(np.float32) if mixed_precision else kernel_dtype
    o = nl.ndarray((b, h, seqlen_q, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((b, h, nl.tile_size.pmax, seqlen_q // nl.tile_size.pmax), dtype=acc_type, buffer=nl.shared_hbm)
    assert nl.program_ndim() == 2
    batch_id, head_id = nl.program_id(axis=0), nl.program_id(axis=1)
    softmax_scale = softmax_scale or (1.0 / (d ** 0.5))
    n_tile_q = seqlen_q // 128
    large = config.seq_tile_size
    assert nisa.get_nc_version() >= nisa.nc_version.gen2

    l_buf = nl.full((par_dim(128), n_tile_q), fill_value=nl.fp32.min, dtype=acc_type, buffer=nl.sbuf,
                    lazy_initialization=False)
    o_buf = nl.zeros((n_tile_q, par_dim(128), d), dtype=acc_type, buffer=nl.sbuf, lazy_initialization=False)
    m_buf = nl.full((n_tile_q, par_dim(128), 1), fill_value=nl.fp32.min, dtype=acc_type, buffer=nl.sbuf,
                    lazy_initialization=False)
    for j in nl.sequential_range(0, seqlen_k // large):
        k_tile = nl.ndarray((par_dim(d), large), dtype=kernel_dtype)
        v_tile = nl.ndarray((large // 128, par_dim(128), d), dtype=kernel_dtype)
        k_tile[:, :] = nl.load(k[batch_id, head_id, :, nl.ds(j * large, large)])
        v_hbm = v[batch_id, head_id]
        for v_i in nl.affine_range(large // 128):
            v_tile[v_i, :, :] = nl.load(v_hbm[nl.ds(j * large + 128 * v_i, 128), :], dtype=v_tile.dtype)
        for i in nl.affine_range(n_tile_q):
            if (not use_causal_mask) or i * 128 + 127 >= j * large:
                q_tile = nl.ndarray((d, 128), dtype=kernel_dtype)
                q_sb = nl.load(q[batch_id, head_id][:, nl.ds(i * 128, 128)], dtype=kernel_dtype)
                q_tile[:, :] = q_sb * softmax_scale
                _flash_core(q_tile=q_tile, k=k_tile, v=v_tile, o_buf=o_buf[i], l_buf=l_buf[:, i], m_buf=m_buf[i],
                            q_idx=i, k_large_idx=j, kernel_dtype=kernel_dtype, acc_type=acc_type, cfg=config,
                            use_causal_mask=use_causal_mask, sliding_window=sliding_window)
    for i in nl.affine_range(n_tile_q):
        scale = nisa.activation(np.exp, l_buf[:, i], bias=m_buf[i, :, :], scale=-1.0)
        nl.store(o[batch_id, head_id, nl.ds(i * 128, 128), :], nl.multiply(o_buf[i, :, :], scale, dtype=kernel_dtype))
    nl.store(lse[batch_id, head_id, :, :], l_buf[:, :])
    return o, lse


@pytest.mark.parametrize(("causal", "window", "tile"), [(False, -1, 512), (True, -1, 512), (True, 100, 1024)],
                         ids=["full", "causal", "sliding_window"])
def test_flash_attention_forward(causal, window, tile, rng):
    b, h, d, sq, sk = 1, 2, 64, 256, 1024
    q = rng.standard_normal((b, h, d, sq)).astype(np.float32)
    k = rng.standard_normal((b, h, d, sk)).astype(np.float32)
    v = rng.standard_normal((b, h, sk, d)).astype(np.float32)
    o, lse = flash_fwd[b, h](q, k, v, use_causal_mask=causal, sliding_window=window,
                             config=FlashCfg(seq_tile_size=tile))
    s = np.einsum("bhdq,bhdk->bhqk", q.astype(np.float64), k) / np.sqrt(d)
    q_pos, k_pos = np.arange(sq)[:, None], np.arange(sk)[None, :]
    if causal:
        s = np.where(k_pos <= q_pos, s, -np.inf)
    if window > 0:
        s = np.where(k_pos > q_pos - window, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    golden = (p / p.sum(-1, keepdims=True)) @ v
    golden_lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    np.testing.assert_allclose(o, golden, atol=1e-2, rtol=1e-2)  # bf16 TensorE, fp32 softmax
    # lse is stored as [b, h, 128 partitions, seq tiles]: row i*128 + p at [p, i]
    np.testing.assert_allclose(lse, golden_lse.reshape(b, h, sq // 128, 128).transpose(0, 1, 3, 2), atol=1e-2)


# -- max pooling (indexing guide): 3-D arange load into a list-shaped tile, 5-D window view ----------
@nki_from_package.jit
def maxpool(image, size):
    chans, rows, cols = image.shape
    pooled = nl.ndarray((chans, rows // size, cols // size), dtype=image.dtype, buffer=nl.shared_hbm)
    i_c = nl.arange(chans)[:, None, None]
    i_r, i_w = nl.arange(rows)[None, :, None], nl.arange(cols)[None, None, :]
    i_ro, i_wo = nl.arange(rows // size)[None, :, None], nl.arange(cols // size)[None, None, :]
    w0 = nl.arange(chans)[:, None, None, None, None]
    w1 = nl.arange(rows // size)[None, :, None, None, None]
    w2 = nl.arange(size)[None, None, :, None, None]
    w3 = nl.arange(cols // size)[None, None, None, :, None]
    w4 = nl.arange(size)[None, None, None, None, :]
    staged = nl.ndarray([chans, rows, cols], dtype=image.dtype)
    staged[:, :, :] = nl.load(image[i_c, i_r, i_w])
    peak = nl.max(staged[w0, size * w1 + w2, size * w3 + w4], axis=[2, 4])
    nl.store(pooled[i_c, i_ro, i_wo], value=peak)
    return pooled


def test_maxpool_bf16_exact(rng):
    image = rng.standard_normal((5, 6, 9)).astype(BF16)
    out = maxpool(image, 3)
    np.testing.assert_array_equal(out, image.reshape(5, 2, 3, 3, 3).max(axis=(2, 4)))


# -- vision kernels (nki-samples reference style) -----------------------------------------------------
@nki_from_package.jit
def select_and_scatter(operand, source):
    """3x3 windows, stride 2, padding 1: scatter-add each source value to its window's first max."""
    n, c, hh, ww = operand.shape
    _, _, sh, sw = source.shape
    dtype = operand.dtype
    out = nl.ndarray((n, c, hh, ww), dtype=dtype, buffer=nl.shared_hbm)
    p = 128
    for ib in nl.affine_range(n // 2):
        chosen = nl.ndarray((par_dim(p), sh, sw, 3, 3), dtype=nl.uint8, buffer=nl.sbuf)
        padded = nl.full((par_dim(p), hh + 2, ww + 2), dtype=dtype, buffer=nl.sbuf, fill_value=nl.finfo(dtype).min)
        for half in nl.affine_range(2):  # two images side by side on partitions 0-63 and 64-127
            padded[half * 64:(half + 1) * 64, 1:hh + 1, 1:ww + 1] = nl.load(operand[2 * ib + half, 0:64, 0:hh, 0:ww],
                                                                          dtype=dtype)
        for ik in nl.affine_range(sh):
            win = nl.mgrid[0:p, 0:sw, 0:3, 0:3]
            windows: nt.tensor[p, sw, 3, 3] = nl.copy(padded[win.p, 2 * ik + win.y, 2 * win.x + win.z])
            peak: nt.tensor[p, sw, 1, 1] = nl.max(windows, axis=[2, 3], dtype=dtype, keepdims=True)
            is_peak: nt.tensor[p, sw, 3, 3] = nl.equal(peak, windows, dtype=nl.int8)
            order: nt.tensor[p, sw, 3, 3] = nisa.iota(3 * win.y + win.z, dtype=nl.uint32)
            ranked = nl.where(is_peak, order, 9, dtype=nl.uint32)
            first: nt.tensor[p, sw, 1, 1] = nl.min(ranked, axis=[2, 3], dtype=nl.uint32, keepdims=True)
            chosen[0:p, ik, 0:sw, 0:3, 0:3] = nl.equal(first, order, dtype=nl.uint8)
        src = nl.ndarray((par_dim(p), sh, sw), dtype=dtype, buffer=nl.sbuf)
        for half in nl.affine_range(2):
            src[half * 64:(half + 1) * 64, 0:sh, 0:sw] = nl.load(source[2 * ib + half, 0:64, 0:sh, 0:sw], dtype=dtype)
        spill = nl.ndarray((3, 3, par_dim(p), hh, ww), dtype=dtype, buffer=nl.private_hbm)
        for iq in nl.affine_range(3):
            for ih in nl.affine_range(3):
                g = nl.mgrid[0:p, 0:sh, 0:sw]
                scattered = nl.zeros((par_dim(p), hh + 2, ww + 2), dtype=dtype, buffer=nl.sbuf)
                scattered[g.p, 2 * g.x + iq, 2 * g.y + ih] = nl.multiply(src, chosen[g.p, g.x, g.y, iq, ih], dtype=dtype)
                nl.store(spill[iq, ih, 0:p, 0:hh, 0:ww], value=scattered[0:p, 1:hh + 1, 1:ww + 1])
        total = nl.zeros((par_dim(p), hh, ww), dtype=dtype, buffer=nl.sbuf, name="total")
        for iq in nl.affine_range(3):
            for ih in nl.affine_range(3):
                part: nt.tensor[p, hh, ww] = nl.load(spill[iq, ih, 0:p, 0:hh, 0:ww])
                total += part
        for half in nl.affine_range(2):
            nl.store(out[2 * ib + half, 0:64, 0:hh, 0:ww], value=total[half * 64:(half + 1) * 64, 0:hh, 0:ww])
    return out


def _select_and_scatter_ref(operand, source):
    n, c, hh, ww = operand.shape
    padded = np.full((n, c, hh + 2, ww + 2), -np.inf)
    padded[:, :, 1:-1, 1:-1] = operand
    out = np.zeros_like(padded)
    for i in range(source.shape[2]):
        for j in range(source.shape[3]):
            win = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(n, c, 9)
            k = win.argmax(axis=-1)  # first max in row-major window order
            np.add.at(out, (np.arange(n)[:, None], np.arange(c)[None, :], 2 * i + k // 3, 2 * j + k % 3),
                      source[:, :, i, j])
    return out[:, :, 1:-1, 1:-1]


def test_select_and_scatter(rng):
    operand = rng.standard_normal((2, 64, 8, 8)).astype(np.float32)
    source = rng.standard_normal((2, 64, 4, 4)).astype(np.float32)
    out = select_and_scatter(operand, source)
    np.testing.assert_allclose(out, _select_and_scatter_ref(operand, source), rtol=1e-6, atol=1e-6)


@nki_from_package.jit
def resize_nearest(data, out_shape):
    in_b, in_h, in_w, in_c = data.shape
    out_b, out_h, out_w, out_c = out_shape
    out = nl.ndarray(out_shape, dtype=data.dtype, buffer=nl.shared_hbm)
    rows = np.floor(np.fromfunction(lambda i, _: i * (in_h / out_h), (out_h, out_w), dtype=np.float32))
    cols = np.floor(np.fromfunction(lambda _, j: j * (in_w / out_w), (out_h, out_w), dtype=np.float32))
    src_of = (rows * in_w + cols).astype(np.int32).flatten()
    flat_in = data.reshape(shape=(in_b, in_h * in_w, in_c))
    flat_out = out.reshape(shape=(out_b, out_h * out_w, out_c))
    b_idx, c_idx = nl.mgrid[0:in_b, 0:out_c]
    for i in nl.static_range(len(src_of)):
        pixel = nl.load(flat_in[b_idx, src_of[i], c_idx])
        nl.store(flat_out[b_idx, i, c_idx], value=pixel)
    return out


def test_resize_nearest_non_integer_scale(rng):
    data = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    out = resize_nearest(data, (2, 9, 7, 3))
    rows = np.floor(np.arange(9) * np.float32(5 / 9)).astype(int)
    cols = np.floor(np.arange(7) * np.float32(4 / 7)).astype(int)
    np.testing.assert_array_equal(out, data[:, rows][:, :, cols])


# -- allocated fused RMSNorm + QKV projection (nki-samples reference style: mod_alloc buffers,
#    identity-matmul transposes into a multi-tile PSUM buffer, masked weight loads) -----------------
@nki_from_package.jit
def allocated_rmsnorm_qkv(hidden, weights, norm_dtype=nl.float32, eps=1e-6):
    batch, seqlen, dim = hidden.shape
    _, head_dim = weights.shape
    out = nl.ndarray((batch, seqlen, head_dim), dtype=hidden.dtype, buffer=nl.shared_hbm)
    pmax, fmax = nl.tile_size.pmax, nl.tile_size.psum_fmax
    ix, iy = nl.mgrid[0:pmax, 0:dim]
    sq, wide = nl.mgrid[0:pmax, 0:pmax], nl.mgrid[0:pmax, 0:fmax]
    n_k, n_t, n_pairs = math.ceil(dim / pmax), math.ceil(dim / fmax), math.ceil(math.ceil(seqlen / pmax) / 2)
    ident_hbm = nl.shared_constant(np.identity(n=128, dtype=np.int8), dtype=hidden.dtype)
    ident = nl.ndarray((par_dim(pmax), 128), dtype=weights.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    ident[sq.p, sq.x] = nl.load(ident_hbm, dtype=weights.dtype)
    zero_bias = nl.ndarray((par_dim(pmax), 1), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=256))
    zero_bias[...] = 0
    for b in nl.affine_range(batch):
        w_sb = nl.ndarray((n_k, par_dim(pmax), fmax), dtype=weights.dtype,
                          buffer=ncc.sbuf.mod_alloc(base_addr=4096, num_free_tiles=(n_k,)))
        for m in nl.affine_range(n_k):
            w_sb[m, wide.p, wide.x] = nl.load(weights[m * pmax + wide.p, wide.x],
                                              mask=(m * pmax + wide.p < dim) & (wide.x < head_dim))
        for i in nl.affine_range(n_pairs):
            x_bufs = nl.ndarray((2, par_dim(pmax), dim), dtype=hidden.dtype,
                                buffer=ncc.sbuf.mod_alloc(base_addr=16384, num_free_tiles=(2,)))
            for g in nl.affine_range(2):
                rows = (2 * i + g) * pmax
                x_bufs[g] = nl.load(hidden[b, rows + ix, iy], mask=rows + ix < seqlen)
                act = nl.ndarray((par_dim(pmax), dim), dtype=norm_dtype, buffer=ncc.sbuf.mod_alloc(base_addr=32768))
                ssum = nl.ndarray((par_dim(pmax), 1), dtype=norm_dtype, buffer=ncc.sbuf.mod_alloc(base_addr=40960))
                normed = nl.ndarray((par_dim(pmax), dim), dtype=weights.dtype,
                                    buffer=ncc.sbuf.mod_alloc(base_addr=41984))
                res_sb = nl.ndarray((par_dim(pmax), fmax), dtype=weights.dtype,
                                    buffer=ncc.sbuf.mod_alloc(base_addr=49152))
                act[...] = nisa.activation_reduce(op=nl.square, data=x_bufs[g], reduce_op=np.add,
                                                  reduce_res=ssum[...], bias=zero_bias[...])
                ssum[...] = nisa.tensor_scalar(ssum[...], np.multiply, 1 / dim, op1=np.add, operand1=eps)
                ssum[...] = nisa.activation(op=nl.rsqrt, data=ssum[...], bias=zero_bias[...])
                pe_dtype = weights.dtype if nisa.get_nc_version() >= nisa.nc_version.gen3 else np.float32
                t_psum = nl.ndarray((n_t, par_dim(pmax), 4 * pmax), dtype=pe_dtype,
                                    buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
                for m in nl.affine_range(n_t):
                    normed[wide.p, m * fmax + wide.x] = nl.multiply(x_bufs[g, wide.p, m * fmax + wide.x], ssum[...],
                                                                  dtype=weights.dtype)
                    for j in nl.affine_range(4):
                        t_psum[m, sq.p, j * pmax + sq.x] = nisa.nc_matmul(normed[sq.p, (m * 4 + j) * pmax + sq.x],
                                                                          ident[...], is_transpose=True)
                    normed[wide.p, m * 4 * pmax + wide.x] = nl.copy(t_psum[m], dtype=hidden.dtype)
                acc = nl.ndarray((1, par_dim(pmax), fmax), dtype=nl.float32,
                                 buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
                for m in nl.affine_range(n_k):
                    acc[0] += nisa.nc_matmul(normed[sq.p, m * pmax + sq.x], w_sb[m, wide.p, wide.x])
                res_sb[...] = nl.copy(acc[0], dtype=out.dtype)
                nl.store(out[b, rows + wide.p, wide.x], value=res_sb,
                         mask=(rows + wide.p < seqlen) & (wide.x < head_dim))
    return out


def test_allocated_fused_rmsnorm_qkv_bf16(rng):
    hidden = rng.standard_normal((1, 200, 512)).astype(BF16)
    weights = (rng.standard_normal((512, 384)) / 16).astype(BF16)
    out = allocated_rmsnorm_qkv(hidden, weights)
    h = hidden.astype(np.float64)
    golden = (h / np.sqrt((h ** 2).mean(-1, keepdims=True) + 1e-6)) @ weights.astype(np.float64)
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float64), golden, atol=5e-2, rtol=2e-2)


# -- allocated SD attention (nki-samples reference style): hand-placed SBUF/PSUM buffers, two
#    interleaved q tiles, PSUM `+=` into an nl.ndarray, tensor_scalar_reduce into a 3-D view --------
def _bank(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


@nki_from_package.jit
def allocated_sd_attention(q_ref, k_ref, v_ref):
    """(softmax(q^T k) v)^T per batch; q, k: [bs, d, seq]; v: [bs, seq, d]; out: [bs, d, seq]."""
    acc_dt, pe_dt = np.float32, nl.bfloat16
    bs, d, seqlen = q_ref.shape
    out_ref = nl.ndarray((bs, d, seqlen), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    addr = 0
    i0, i1 = nl.mgrid[0:128, 0:128]
    ident_hbm = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.bfloat16)
    ident = nl.ndarray((par_dim(128), 128), dtype=pe_dt, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
    addr += 128 * 2
    ident[i0, i1] = nl.load(ident_hbm)
    ident32 = nl.ndarray((par_dim(128), 128), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
    addr += 128 * 4
    ident32[i0, i1] = nl.load(ident_hbm)
    b = nl.program_id(axis=0)
    n_q, n_k, n_v, red = seqlen // 128, seqlen // 512, seqlen // 128, 1024

    v_sb = nl.ndarray((n_v, par_dim(128), d), dtype=pe_dt, buffer=ncc.sbuf.mod_alloc(base_addr=addr, num_free_tiles=(n_v,)))
    addr += n_v * d * 2
    for t in nl.affine_range(n_v):
        ip, jf = nl.mgrid[0:128, 0:d]
        v_sb[t, ip, jf] = nl.load(v_ref[b, t * 128 + ip, jf], dtype=pe_dt)
    q_sb = nl.ndarray((n_q, par_dim(d), 128), dtype=pe_dt, buffer=ncc.sbuf.mod_alloc(base_addr=addr, num_free_tiles=(n_q,)))
    addr += n_q * 128 * 2
    ip_q, if_q = nl.mgrid[0:d, 0:128]
    for t in nl.affine_range(n_q):
        q_sb[t, ip_q, if_q] = nl.load(q_ref[b, ip_q, t * 128 + if_q], dtype=pe_dt)
        q_sb[t, ip_q, if_q] = nl.multiply(q_sb[t, ip_q, if_q], 0.125)
    k_sb = nl.ndarray((n_k, par_dim(d), 512), dtype=pe_dt, buffer=ncc.sbuf.mod_alloc(base_addr=addr, num_free_tiles=(n_k,)))
    addr += n_k * 512 * 2
    ip_k, if_k = nl.mgrid[0:d, 0:512]
    for t in nl.affine_range(n_k):
        k_sb[t, ip_k, if_k] = nl.load(k_ref[b, ip_k, t * 512 + if_k], dtype=pe_dt)

    for qt in nl.affine_range(n_q // 2):
        scores = nl.ndarray((2, par_dim(128), seqlen), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=addr, num_free_tiles=(1,)))
        exps = nl.ndarray((2, par_dim(128), seqlen), dtype=pe_dt,
                          buffer=ncc.sbuf.mod_alloc(base_addr=addr + seqlen * 4, num_free_tiles=(2,)))
        probs_t = nl.ndarray((2, par_dim(128), seqlen), dtype=pe_dt, name="probs_t",
                             buffer=ncc.sbuf.mod_alloc(base_addr=addr + seqlen * 8, num_free_tiles=(2,)))
        small = addr + seqlen * 12
        divisor = nl.ndarray((2, par_dim(128), d), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small, num_free_tiles=(2,)))
        recip_b = nl.ndarray((2, par_dim(128), d), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 1024, num_free_tiles=(2,)))
        o_sb = nl.ndarray((2, par_dim(d), 128), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 2048, num_free_tiles=(2,)))
        o_div = nl.ndarray((2, par_dim(128), d), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 3072, num_free_tiles=(2,)))
        part_max = nl.ndarray((2, par_dim(128), n_k), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 4096, num_free_tiles=(2,)))
        part_sum = nl.ndarray((2, par_dim(128), seqlen // red), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 4160, num_free_tiles=(2,)))
        neg_max = nl.ndarray((2, par_dim(128), 1), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 4224, num_free_tiles=(2,)))
        total = nl.ndarray((2, par_dim(128), 1), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 4240, num_free_tiles=(2,)))
        recip = nl.ndarray((2, par_dim(128), 1), dtype=acc_dt, buffer=ncc.sbuf.mod_alloc(base_addr=small + 4256, num_free_tiles=(2,)))

        qk_psum = nl.ndarray((2, n_k, par_dim(128), 512), dtype=np.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 2)))
        tp_psum = nl.ndarray((2, n_k, par_dim(128), 512), dtype=np.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=4, num_bank_tiles=(2, 2)))
        o_psum = nl.ndarray((2, par_dim(d), 128), dtype=np.float32,
                            buffer=ncc.psum.alloc(functools.partial(_bank, bank_map={(0,): 0, (1,): 1})))
        div_psum = nl.ndarray((2, par_dim(128), d), dtype=np.float32,
                              buffer=ncc.psum.alloc(functools.partial(_bank, bank_map={(0,): 2, (1,): 3})))
        for g in nl.affine_range(2):
            ip_m, if_m = nl.mgrid[0:128, 0:n_k]
            for kt in nl.affine_range(n_k):
                ip_s, if_s = nl.mgrid[0:128, 0:512]
                qk_psum[g, kt, ip_s, if_s] = nisa.nc_matmul(moving=k_sb[kt, ip_k, if_k], stationary=q_sb[qt * 2 + g, ip_q, if_q])
                scores[g, ip_s, kt * 512 + if_s] = nisa.tensor_scalar_reduce(
                    data=qk_psum[g, kt, ip_s, if_s], op0=np.multiply, operand0=1.0, reduce_op=np.max,
                    reduce_res=part_max[g, ip_m, kt], dtype=acc_dt)
            neg_max[g, ip_m, 0] = nisa.tensor_reduce(np.max, data=part_max[g, ip_m, if_m], axis=(1,), dtype=acc_dt,
                                                     negate=True)
            ip_a, if_a = nl.mgrid[0:128, 0:seqlen]
            ip_d, if_d = nl.mgrid[0:128, 0:d]
            _, if_r = nl.mgrid[0:1, 0:red]
            for r in nl.affine_range(seqlen // red):
                exps[g, ip_a, r * red + if_r] = nisa.activation_reduce(
                    np.exp, data=scores[g, ip_a, r * red + if_r], reduce_op=np.sum, reduce_res=part_sum[g, ip_a, r],
                    bias=neg_max[g, ip_m, 0], scale=1.0)
            total[g, ip_a, 0] = nisa.tensor_reduce(np.add, data=part_sum[g, :, :], axis=(1,), dtype=acc_dt)
            recip[g, ip_a, 0] = nl.divide(1.0, total[g, ip_a, 0])
            recip_b[g, ip_a, if_d] = recip[g, ip_a, 0].broadcast_to((128, d))
            divisor[g, ip_d, if_d] = nl.copy(recip_b[g, ip_a, if_d], dtype=acc_dt)
            ip_t, if_t = nl.mgrid[0:128, 0:128]
            for vt in nl.affine_range(n_v // 4):
                for off in nl.affine_range(4):
                    tp_psum[g, vt, ip_t, off * 128 + if_t] = nisa.nc_matmul(
                        exps[g, ip_t, (vt * 4 + off) * 128 + if_t], ident)
                _, if_b = nl.mgrid[0:1, 0:512]
                probs_t[g, ip_t, vt * 512 + if_b] = nl.copy(tp_psum[g, vt, ip_t, if_b])
            ip_o, if_o = nl.mgrid[0:d, 0:128]
            for vt in nl.affine_range(n_v):
                ip_v, if_v = nl.mgrid[0:128, 0:d]
                o_psum[g, ip_o, if_o] += nisa.nc_matmul(moving=probs_t[g, ip_t, vt * 128 + if_t],
                                                        stationary=v_sb[vt, ip_v, if_v])
            o_sb[g, ip_o, if_o] = nisa.tensor_copy(o_psum[g, ip_o, if_o], dtype=acc_dt, engine=nisa.vector_engine)
            div_psum[g, ip_d, if_d] = nisa.nc_matmul(divisor[g, ip_d, if_d], ident32)
            o_div[g, ip_d, if_d] = o_sb[g, :, :] * div_psum[g, ip_d, if_d]
            nl.store(out_ref[b, ip_o, (qt * 2 + g) * 128 + if_o], value=o_div[g, :, :])
    return out_ref


def test_allocated_sd_attention(rng):
    bs, d, seqlen = 1, 128, 1024
    q = rng.random((bs, d, seqlen)).astype(np.float32)
    k = rng.random((bs, d, seqlen)).astype(np.float32)
    v = rng.random((bs, seqlen, d)).astype(np.float32)
    out = allocated_sd_attention[bs](q, k, v)
    s = (q[0].T.astype(np.float64) * 0.125) @ k[0]
    p = np.exp(s - s.max(1, keepdims=True))
    golden = ((p / p.sum(1, keepdims=True)) @ v[0]).T
    np.testing.assert_allclose(out[0], golden, atol=1e-5, rtol=1e-3)  # the SD attention authors' check


# -- bilinear 2x upsampling (nki-samples contributed style): 5-D arange index grids combining
#    several axes per subscript, masks over a partial partition tile, reshaped HBM in and out ------
@nki_from_package.jit
def upsample_bilinear_2x(src):
    n, c, hs, ws = src.shape
    hd, wd = 2 * hs, 2 * ws
    flat = src.reshape((n * c, hs, ws))
    dst = nl.ndarray([n * c, hd, wd], dtype=src.dtype, buffer=nl.shared_hbm)
    q, e = 0.25, 0.75
    for p in nl.affine_range(math.ceil(n * c / 128)):
        rows = p * 128 + nl.arange(128)[:, None, None]
        x = nl.load(flat[rows, nl.arange(0, hs)[None, :, None], nl.arange(ws)[None, None, :]], mask=(rows < n * c))
        out = nl.ndarray([128, hd, wd], dtype=src.dtype, buffer=nl.sbuf)
        # interior: output (2i+1+a, 2j+1+b) mixes source rows i, i+1 and columns j, j+1
        ip = nl.arange(128)[:, None, None, None, None]
        a = nl.arange(2)[None, :, None, None, None]
        b = nl.arange(2)[None, None, :, None, None]
        i = nl.arange(hs - 1)[None, None, None, :, None]
        j = nl.arange(ws - 1)[None, None, None, None, :]
        near_h, far_h = i + a, i + (-1 * a + 1)
        near_w, far_w = j + b, j + (-1 * b + 1)
        out[ip, 2 * i + 1 + a, 2 * j + 1 + b] = (
            e * e * x[ip, near_h, near_w] + e * q * x[ip, near_h, far_w]
            + q * e * x[ip, far_h, near_w] + q * q * x[ip, far_h, far_w])
        # top/bottom rows (corners excluded) and left/right columns
        ip4 = nl.arange(128)[:, None, None, None]
        b4, a4 = nl.arange(2)[None, :, None, None], nl.arange(2)[None, None, :, None]
        j4, i4 = nl.arange(ws - 1)[None, None, None, :], nl.arange(hs - 1)[None, None, None, :]
        edge_r = (hs - 1) * a4
        out[ip4, (hd - 1) * a4, 2 * j4 + 1 + b4] = e * x[ip4, edge_r, j4 + b4] + q * x[ip4, edge_r, j4 + (-1 * b4 + 1)]
        edge_c = (ws - 1) * a4
        out[ip4, 2 * i4 + 1 + b4, (wd - 1) * a4] = e * x[ip4, i4 + b4, edge_c] + q * x[ip4, i4 + (-1 * b4 + 1), edge_c]
        ip3 = nl.arange(128)[:, None, None]
        cr, cc = nl.arange(2)[None, None, :], nl.arange(2)[None, :, None]
        out[ip3, (hd - 1) * cr, (wd - 1) * cc] = x[ip3, (hs - 1) * cr, (ws - 1) * cc]
        nl.store(dst[rows, nl.arange(hd)[None, :, None], nl.arange(wd)[None, None, :]], value=out,
                 mask=(rows < n * c))
    return dst.reshape((n, c, hd, wd))


def _upsample_ref(x):
    def axis(v, ax):
        v = np.moveaxis(v, ax, -1)
        prev = np.concatenate([v[..., :1], v[..., :-1]], axis=-1)
        nxt = np.concatenate([v[..., 1:], v[..., -1:]], axis=-1)
        out = np.empty(v.shape[:-1] + (2 * v.shape[-1],))
        out[..., 0::2] = 0.25 * prev + 0.75 * v
        out[..., 1::2] = 0.75 * v + 0.25 * nxt
        return np.moveaxis(out, -1, ax)
    return axis(axis(x.astype(np.float64), 2), 3)


def test_bilinear_upsample_baremetal(nki, rng):
    src = rng.random((2, 50, 6, 9)).astype(np.float32)
    out = nki.baremetal()(upsample_bilinear_2x)(src)
    assert out.shape == (2, 50, 12, 18)
    np.testing.assert_allclose(out, _upsample_ref(src), atol=1e-4, rtol=1e-2)
    np.testing.assert_allclose(out, _upsample_ref(src), atol=1e-6)


# -- fp8 double-row matmul (nki-samples reference style): per-row fp8_e4m3 quantization, in-place
#    nc_transpose of fp8 tiles, (K, 2, M) x (K, 2, N) double-row matmuls, SBUF dequantization -------
@nki_from_package.jit
def double_row_matmul(lhs, rhs_q, rhs_scale, TILES_K=2):
    M, K = lhs.shape
    N = rhs_q.shape[1] // 2
    TM, TK, TN = 128, 128, 512
    BLOCK_K = TK * TILES_K
    result = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        acc = nl.zeros((TM, N), dtype=lhs.dtype, buffer=nl.sbuf)
        for k in nl.sequential_range(K // BLOCK_K):
            g = nl.mgrid[0:TM, 0:BLOCK_K]
            block = nl.load(lhs[m * TM + g.p, k * BLOCK_K + g.x])
            scale = nl.ndarray((nl.par_dim(TM), 1), dtype=lhs.dtype, buffer=nl.sbuf)
            scale[...] = nisa.tensor_reduce(nl.max, nl.abs(block), axis=[1])
            scale[...] = nl.divide(scale, 240)
            q = nl.ndarray((nl.par_dim(TM), BLOCK_K), dtype=nl.float8_e4m3, buffer=nl.sbuf)
            q[...] = nl.divide(block, scale)
            for kt in nl.affine_range(TILES_K):  # K onto partitions, tile by tile, in place
                q[:, kt * TM:(kt + 1) * TM] = nisa.nc_transpose(q[:, kt * TM:(kt + 1) * TM])
            part = nl.zeros((TM, N), dtype=lhs.dtype, buffer=nl.sbuf)
            r = nl.mgrid[0:TK, 0:2 * N]
            rhs_tiles = nl.ndarray((TILES_K // 2, nl.par_dim(TK), 2 * N), dtype=rhs_q.dtype)
            for kr in nl.affine_range(TILES_K // 2):
                rhs_tiles[kr] = nl.load(rhs_q[(k * TILES_K // 2 + kr) * TK + r.p, r.x])
            for bn in nl.affine_range(N // TN):
                res = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                for kk in nl.affine_range(TILES_K // 2):
                    i_k, i_t, i_m = nl.mgrid[0:TK, 0:2, 0:TM]
                    stat = q[i_k, kk * 2 * TM + i_t * TM + i_m]
                    assert stat.shape == (TK, 2, TM)
                    i_k, i_t, i_n = nl.mgrid[0:TK, 0:2, 0:TN]
                    mov = rhs_tiles[kk, i_k, 2 * bn * TN + i_t * TN + i_n]
                    assert mov.shape == (TK, 2, TN)
                    res[...] += nisa.nc_matmul(stat, mov, perf_mode="double_row_gen3")
                o = nl.mgrid[0:TM, 0:TN]
                part[o.p, bn * TN + o.x] += res[...]
            acc[...] += nisa.tensor_tensor(part, scale, nl.multiply)
        rs = nl.load(rhs_scale)
        out = nl.mgrid[0:TM, 0:N]
        nl.store(result[m * TM + out.p, out.x], value=nisa.tensor_tensor(acc, rs, nl.multiply))
    return result


def test_fp8_double_row_matmul(rng):
    M, K, N = 128, 512, 512
    lhs = rng.standard_normal((M, K)).astype(np.float32)
    rhs = rng.standard_normal((K, N)).astype(np.float32)
    col_scale = np.abs(rhs).max(axis=0, keepdims=True) / 240
    rhs_q = (rhs / col_scale).astype(ml_dtypes.float8_e4m3)
    # two K tiles side by side per row: row kr*128 + i holds rhs rows (2kr)*128 + i and (2kr+1)*128 + i
    rhs_pairs = rhs_q.reshape(K // 256, 2, 128, N).transpose(0, 2, 1, 3).reshape(K // 2, 2 * N)
    out = double_row_matmul(lhs, rhs_pairs, np.broadcast_to(col_scale, (128, N)).astype(np.float32).copy())
    # the same quantization in numpy: per row and 256-wide K block, scale max|x| / 240, x / scale
    # rounded to fp8_e4m3; each block's product is dequantized by its own scale
    quantized = np.zeros((M, N))
    for k0 in range(0, K, 256):
        blk = lhs[:, k0:k0 + 256]
        row_scale = (np.abs(blk).max(axis=1, keepdims=True) / np.float32(240)).astype(np.float32)
        blk_q = (blk / row_scale).astype(ml_dtypes.float8_e4m3).astype(np.float64)
        quantized += (blk_q @ rhs_q[k0:k0 + 256].astype(np.float64)) * row_scale
    quantized *= col_scale
    np.testing.assert_allclose(out, quantized, rtol=1e-4, atol=1e-3 * np.abs(quantized).max())
    exact = lhs.astype(np.float64) @ rhs  # and fp8 on both sides stays within a few % of the exact product
    assert np.abs(out - exact).max() < 0.1 * np.abs(exact).max()

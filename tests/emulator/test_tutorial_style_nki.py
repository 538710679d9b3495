"""New-namespace (`import nki`) kernels in the calling style of AWS's current tutorials and of the
open-source NKI kernel library, run unchanged and compared as their authors compare them.

tests/emulator/newns covers the instructions one by one and three twin kernels; these reproduce the
idioms of whole tutorial/library kernels: tiles allocated with `nl.ndarray(..., buffer=nl.sbuf)` and
filled by destination-passing ISA calls, PSUM tiles allocated per output tile and accumulated by
`nc_matmul(dst=...)` (accumulate=None), the blocked matmul that accumulates PSUM into 3-D SBUF
tiles and stores a reshaped view, the attention tutorial's versions (nl.matmul/nl.transpose,
nc_transpose into PSUM, `tensor_reduce(dst=t[:, nl.ds(i, 1)], ...)`, scratch `shared_hbm` tensors,
ScalarE exp with a bias and `reduce_cmd.reset_reduce` into a column view, bf16 probabilities), the
library's cumsum (tensor_tensor_scan with a carried initial column over partial tiles) and
cascaded max (max8 / nc_find_index8 against an `.ap()` broadcast, an affine_select identity, an
`is_transpose` matmul, iota patterns, `.ap()` DMAs at an offset), and launches through
`nki.simulate`, `nki.cpu_simulate(kernel)[lnc](**kwargs)` and `kernel[2]`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa.constants import reduce_cmd

BF16 = ml_dtypes.bfloat16


# -- tensor addition tutorial: explicit SBUF tiles, DMA in, tensor_tensor, DMA out -----------------
@nki.jit(platform_target="trn1")
def tensor_add(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    M, N = a_input.shape
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            a_tile = nl.ndarray(shape=(128, 512), dtype=a_input.dtype, buffer=nl.sbuf)
            b_tile = nl.ndarray(shape=(128, 512), dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile, src=a_input[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512])
            nisa.dma_copy(dst=b_tile, src=b_input[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512])
            c_tile = nl.ndarray(shape=(128, 512), dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=c_output[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=c_tile)
    return c_output


def test_tensor_add_tutorial(rng):
    a = rng.random((256, 1024)).astype(np.float16)
    b = rng.random((256, 1024)).astype(np.float16)
    out = tensor_add(a, b)
    assert tensor_add.last_run.options["target"] == "trn1"
    assert np.allclose(a + b, out, atol=1e-4, rtol=1e-2)


# -- the nki.simulate quick start: nl.load / nl.add / nl.store -----------------------------------
@nki.jit
def add_kernel(a_ptr, b_ptr):
    result = nl.add(nl.load(a_ptr), nl.load(b_ptr))
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=result)
    return out


def test_simulate_quick_start(rng):
    a = rng.random((128, 512)).astype(np.float32)
    b = rng.random((128, 512)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(add_kernel)(a, b), a + b, rtol=1e-5)


# -- matmul tutorial: basic (64-row PSUM tile) and fully optimized (blocked, SBUF accumulation) -----
@nki.jit
def matmul_basic(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhs_tile = nl.ndarray(lhsT.shape, dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_tile = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhs_tile, src=lhsT)
    nisa.dma_copy(dst=rhs_tile, src=rhs)
    result_psum = nl.ndarray(result.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(result_psum, lhs_tile, rhs_tile)
    result_sbuf = nl.ndarray(result_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result_sbuf, src=result_psum)
    nisa.dma_copy(dst=result, src=result_sbuf)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M, TILE_K, TILE_N = (nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax,
                              nl.tile_size.gemm_moving_fmax)
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BLOCK_N):
        n0 = n * BLOCK_N
        acc_tiles = []
        for m in nl.affine_range(M // BLOCK_M):
            for mt in nl.affine_range(TILES_IN_BLOCK_M):
                acc = nl.ndarray(shape=(TILE_M, TILES_IN_BLOCK_N, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
                nisa.memset(dst=acc, value=0.0)
                acc_tiles.append(acc)
        for k in nl.sequential_range(K // BLOCK_K):
            rhs_tiles = nl.ndarray(shape=(TILE_K, TILES_IN_BLOCK_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for kt in range(TILES_IN_BLOCK_K):
                k0 = (k * TILES_IN_BLOCK_K + kt) * TILE_K
                nisa.dma_copy(dst=rhs_tiles[0:TILE_K, kt, 0:BLOCK_N], src=rhs[k0:k0 + TILE_K, n0:n0 + BLOCK_N])
            for m in nl.affine_range(M // BLOCK_M):
                lhsT_tiles = nl.ndarray(shape=(TILE_K, TILES_IN_BLOCK_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                for kt in nl.affine_range(TILES_IN_BLOCK_K):
                    k0 = (k * TILES_IN_BLOCK_K + kt) * TILE_K
                    nisa.dma_copy(dst=lhsT_tiles[0:TILE_K, kt, 0:BLOCK_M],
                                  src=lhsT[k0:k0 + TILE_K, m * BLOCK_M:(m + 1) * BLOCK_M])
                for nt in nl.affine_range(TILES_IN_BLOCK_N):
                    for mt in nl.affine_range(TILES_IN_BLOCK_M):
                        part = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=part,
                                           stationary=lhsT_tiles[0:TILE_K, kt, mt * TILE_M:(mt + 1) * TILE_M],
                                           moving=rhs_tiles[0:TILE_K, kt, nt * TILE_N:(nt + 1) * TILE_N])
                        acc = acc_tiles[m * TILES_IN_BLOCK_M + mt]
                        nisa.tensor_tensor(dst=acc[0:TILE_M, nt, 0:TILE_N], data1=acc[0:TILE_M, nt, 0:TILE_N],
                                           data2=part, op=nl.add)
        for i, acc in enumerate(acc_tiles):
            flat = acc.reshape((TILE_M, BLOCK_N))
            nisa.dma_copy(dst=result[i * TILE_M:(i + 1) * TILE_M, n0:n0 + BLOCK_N], src=flat[0:TILE_M, 0:BLOCK_N])
    return result


def test_matmul_basic_64_rows(rng):
    lhsT = rng.random((128, 64)).astype(BF16)
    rhs = rng.random((128, 512)).astype(BF16)
    out = matmul_basic(lhsT, rhs)
    golden = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    assert np.allclose(out.astype(np.float32), golden, atol=1e-4, rtol=1e-2)


def test_matmul_blocked_sbuf_accumulation(rng):
    lhsT = rng.random((512, 256)).astype(BF16)
    rhs = rng.random((512, 1024)).astype(BF16)
    out = matmul_blocked(lhsT, rhs)
    golden = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    assert out.dtype == BF16
    assert np.allclose(out.astype(np.float32), golden, atol=1e-4, rtol=1e-2)


# -- attention tutorial (q, k, v given as [d_head, seqlen]) -------------------------------------------
def attention_ref(q, k, v):
    qk = q.astype(np.float64).T @ k.astype(np.float64)
    e = np.exp(qk - qk.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v.astype(np.float64).T


@nki.jit
def attn_language(q, k, v):
    d_head, seqlen = q.shape
    out = nl.ndarray((seqlen, d_head), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(q), nl.load(k), nl.load(v)
    qk_psum = nl.matmul(x=q_sb, y=k_sb, transpose_x=True)
    qk = nl.ndarray(qk_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=qk, src=qk_psum)
    shifted = nl.ndarray(qk.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=shifted, data=qk, op0=nl.subtract, operand0=nl.max(qk, axis=1, keepdims=True))
    e = nl.exp(shifted)
    inv = nl.reciprocal(nl.sum(e, axis=1, keepdims=True))
    scores = nl.ndarray(e.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scores, data=e, op0=nl.multiply, operand0=inv)
    v_t_psum = nl.transpose(v_sb)
    v_t = nl.ndarray(v_t_psum.shape, dtype=v_sb.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=v_t, src=v_t_psum)
    scores_t_psum = nl.transpose(scores)
    scores_t = nl.ndarray(scores_t_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=scores_t, src=scores_t_psum)
    o_psum = nl.matmul(scores_t, v_t, transpose_x=True)
    o = nl.ndarray(o_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=o_psum)
    nl.store(dst=out, value=o)
    return out


def softmax_rows_isa(x):
    """A helper in the tutorial's style: softmax of an SBUF tile with ISA calls only."""
    rows, cols = x.shape
    neg_max = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=x, axis=1, negate=True)
    e = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=x, bias=neg_max, reduce_op=nl.add, reduce_res=total)
    inv = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=total)
    probs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=probs, data=e, op0=nl.multiply, operand0=inv)
    return probs


@nki.jit
def attn_isa(q, k, v):
    d_head, seqlen = q.shape
    out = nl.ndarray((seqlen, d_head), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_sb, src=q)
    k_sb = nl.ndarray(k.shape, dtype=k.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k)
    v_sb = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v_sb, src=v)
    qk = nl.ndarray((seqlen, seqlen), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=qk, stationary=q_sb, moving=k_sb)
    qk_sb = nl.ndarray(qk.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=qk_sb, src=qk)
    scores = softmax_rows_isa(qk_sb)
    scores_t_psum = nl.ndarray((seqlen, seqlen), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=scores_t_psum, data=scores)
    scores_t = nl.ndarray(scores_t_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=scores_t, src=scores_t_psum)
    v_t_psum = nl.ndarray((seqlen, d_head), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=v_t_psum, data=v_sb)
    v_t = nl.ndarray(v_t_psum.shape, dtype=v_sb.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=v_t, src=v_t_psum)
    o_psum = nl.ndarray((seqlen, d_head), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=o_psum, stationary=scores_t, moving=v_t)
    o = nl.ndarray(o_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=o_psum)
    nisa.dma_copy(dst=out, src=o)
    return out


@nki.jit
def attn_hbm_scratch(q, k, v):
    """Every softmax stage round-trips through shared_hbm scratch tensors (the tutorial's v3)."""
    d_head, seqlen = q.shape
    P, FM, FS = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax, nl.tile_size.gemm_stationary_fmax
    out = nl.ndarray((seqlen, d_head), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(q), nl.load(k), nl.load(v)
    qk = nl.ndarray((seqlen // P, seqlen // FM, P, FM), dtype=nl.float32, buffer=nl.shared_hbm)
    for iq in nl.affine_range(seqlen // FS):
        for ik in nl.affine_range(seqlen // FM):
            qk_psum = nl.ndarray((P, FM), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=qk_psum, stationary=q_sb[0:P, nl.ds(iq * FS, FS)], moving=k_sb[0:P, nl.ds(ik * FM, FM)])
            qk_sb = nl.ndarray((P, FM), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=qk_sb, src=qk_psum)
            nisa.dma_copy(dst=qk[iq, ik, :, :], src=qk_sb)
    row_max = nl.ndarray((P, seqlen // P), dtype=nl.float32, buffer=nl.sbuf)
    for iq in nl.affine_range(seqlen // P):
        part_max = nl.ndarray((P, seqlen // FM), dtype=nl.float32, buffer=nl.sbuf)
        for ik in nl.affine_range(seqlen // FM):
            t = nl.ndarray((P, FM), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=qk[iq, ik, :, :])
            nisa.tensor_reduce(dst=part_max[:, nl.ds(ik, 1)], op=nl.maximum, data=t, axis=(1,))
        nisa.tensor_reduce(dst=row_max[:, nl.ds(iq, 1)], op=nl.maximum, data=part_max[:, :], axis=(1,))
    exp_rows = nl.ndarray((seqlen // P, P, seqlen), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((P, seqlen // P), dtype=nl.float32, buffer=nl.sbuf)
    for iq in nl.affine_range(seqlen // P):
        shifted = nl.ndarray((P, seqlen), dtype=nl.float32, buffer=nl.sbuf)
        for ik in nl.affine_range(seqlen // FM):
            t = nl.ndarray((P, FM), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=qk[iq, ik, :, :])
            nisa.tensor_scalar(dst=shifted[:, nl.ds(ik * FM, FM)], data=t, op0=nl.subtract,
                               operand0=row_max[:, nl.ds(iq, 1)])
        e = nl.ndarray((P, seqlen), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[:, :], op=nl.exp, data=shifted)
        nisa.tensor_reduce(dst=sums[:, nl.ds(iq, 1)], op=nl.add, data=e, axis=(1,))
        nl.store(exp_rows[iq], e[:, :])
    inv = nl.ndarray(sums.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=sums)
    v_t = nl.ndarray((seqlen // P, P, d_head), dtype=nl.float32, buffer=nl.shared_hbm)
    for ik in nl.affine_range(seqlen // P):
        v_psum_t = nl.ndarray((P, d_head), dtype=v_sb.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=v_psum_t, data=v_sb[:, nl.ds(ik * P, P)])
        v_sb_t = nl.ndarray((P, d_head), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=v_sb_t[:, :], src=v_psum_t)
        nl.store(v_t[ik], v_sb_t[:, :])
    for iq in nl.affine_range(seqlen // P):
        o_psum = nl.zeros((P, P), dtype=nl.float32, buffer=nl.psum)
        for ik in nl.affine_range(seqlen // P):
            probs = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=probs, data=nl.load(exp_rows[iq, :, nl.ds(ik * P, P)]), op0=nl.multiply,
                               operand0=inv[:, iq])
            p_t = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=p_t, data=probs)
            p_t_sb = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=p_t_sb[:, :], src=p_t)
            nisa.nc_matmul(dst=o_psum, stationary=p_t_sb, moving=nl.load(v_t[ik, :, :]))
        o = nl.ndarray((P, d_head), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=o_psum)
        nl.store(dst=out[nl.ds(iq * P, P), :], value=o[:, :])
    return out


@nki.jit
def attn_fused(q, k, v, prob_dtype=nl.float32):
    """Loop-fused attention: ScalarE exp with a bias and a reset_reduce row sum per PSUM tile,
    deferred division (the tutorial's v6; v7 with prob_dtype=bfloat16)."""
    d_head, seqlen = q.shape
    P, FM, FS = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax, nl.tile_size.gemm_stationary_fmax
    out = nl.ndarray((seqlen, d_head), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(q), nl.load(k), nl.load(v)
    v_sb_t = nl.ndarray((P, seqlen // P, P), dtype=prob_dtype, buffer=nl.sbuf)
    for ik in nl.affine_range(seqlen // P):
        v_psum_t = nl.ndarray((P, d_head), dtype=v_sb.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=v_psum_t, data=v_sb[:, nl.ds(ik * P, P)])
        nisa.tensor_copy(dst=v_sb_t[:, ik, :], src=v_psum_t)
    n_kv = seqlen // FM
    for iq in nl.affine_range(seqlen // FS):
        qk_tiles = [nl.ndarray((P, FM), dtype=nl.float32, buffer=nl.psum) for _ in range(n_kv)]
        for ik in range(n_kv):
            nisa.nc_matmul(dst=qk_tiles[ik], stationary=q_sb[0:P, nl.ds(iq * FS, FS)],
                           moving=k_sb[0:P, nl.ds(ik * FM, FM)])
        part_max = nl.ndarray((P, n_kv), dtype=nl.float32, buffer=nl.sbuf)
        for ik in range(n_kv):
            nisa.tensor_reduce(dst=part_max[:, nl.ds(ik, 1)], op=nl.maximum, data=qk_tiles[ik], axis=(1,))
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[:, :], op=nl.maximum, data=part_max[:, :], axis=(1,), negate=True)
        exp_row = nl.ndarray((P, seqlen), dtype=prob_dtype, buffer=nl.sbuf)
        part_sum = nl.ndarray((P, n_kv), dtype=nl.float32, buffer=nl.sbuf)
        for ik in range(n_kv):
            nisa.activation(dst=exp_row[:, nl.ds(ik * FM, FM)], op=nl.exp, data=qk_tiles[ik], bias=neg_max,
                            reduce_op=nl.add, reduce_res=part_sum[:, nl.ds(ik, 1)],
                            reduce_cmd=reduce_cmd.reset_reduce)
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=part_sum, axis=(1,))
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        exp_t = nl.ndarray((P, seqlen // P, P), dtype=prob_dtype, buffer=nl.sbuf)
        for ik in nl.affine_range(seqlen // P):
            t_psum = nl.ndarray((P, P), dtype=prob_dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=t_psum, data=exp_row[:, nl.ds(ik * P, P)])
            nisa.tensor_copy(dst=exp_t[:, ik, :], src=t_psum)
        o_psum = nl.zeros((P, P), dtype=nl.float32, buffer=nl.psum)
        for ik in nl.affine_range(seqlen // P):
            nisa.nc_matmul(dst=o_psum, stationary=exp_t[:, ik, :], moving=v_sb_t[:, ik, :])
        o = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=o_psum, op0=nl.multiply, operand0=inv)
        nl.store(dst=out[nl.ds(iq * P, P), :], value=o[:, :])
    return out


@pytest.mark.parametrize(("kernel", "seqlen", "kwargs"), [
    (attn_language, 128, {}),
    (attn_isa, 128, {}),
    (attn_hbm_scratch, 512, {}),
    (attn_fused, 512, {}),
    (attn_fused, 512, {"prob_dtype": nl.bfloat16}),
], ids=["v1_language", "v2_isa", "v3_hbm_scratch", "v6_fused", "v7_bf16_probs"])
def test_attention_tutorial_versions(kernel, seqlen, kwargs, rng):
    q, k, v = (rng.random((128, seqlen)).astype(np.float32) for _ in range(3))
    out = kernel(q, k, v, **kwargs)
    golden = attention_ref(q, k, v)
    assert np.allclose(out, golden, atol=1e-2, rtol=1e-2)
    if not kwargs:  # all-fp32 versions are far tighter than the authors' bound
        assert np.abs(out - golden).max() < 1e-4


# -- nki-library cumsum: tensor_tensor_scan over free tiles with a carried column ------------------
class Tiles:
    """A library-style tiled range: (start_offset, size) of each tile, the last one partial."""

    def __init__(self, total: int, tile: int) -> None:
        self.total, self.tile = total, tile

    def __iter__(self):
        for start in range(0, self.total, self.tile):
            yield _Tile(start, min(self.tile, self.total - start))


class _Tile:
    def __init__(self, start_offset: int, size: int) -> None:
        self.start_offset, self.size = start_offset, size


@nki.jit
def cumsum(x, axis: int = -1, f_tile: int = 512):
    assert axis in (-1, len(x.shape) - 1)
    outer = 1
    for dim in x.shape[:-1]:
        outer *= dim
    last = x.shape[-1]
    x_2d = x.reshape((outer, last))
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    y_2d = y.reshape((outer, last))
    n_f = (last + f_tile - 1) // f_tile
    for p in Tiles(outer, 128):
        init = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=init, value=0.0)
        ones = nl.ndarray((128, f_tile), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        for f in nl.sequential_range(n_f):
            f0 = f * f_tile
            fs = min(f0 + f_tile, last) - f0
            data = nl.ndarray((128, f_tile), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=data[0:p.size, 0:fs], src=x_2d[p.start_offset:p.start_offset + p.size, f0:f0 + fs])
            res = nl.ndarray((128, f_tile), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=res[0:p.size, 0:fs], data0=ones[0:p.size, 0:fs], data1=data[0:p.size, 0:fs],
                                    initial=init[0:p.size, 0:1], op0=nl.multiply, op1=nl.add)
            nisa.dma_copy(dst=y_2d[p.start_offset:p.start_offset + p.size, f0:f0 + fs], src=res[0:p.size, 0:fs])
            if f + 1 < n_f:
                nisa.tensor_copy(dst=init[0:p.size, 0:1], src=res[0:p.size, fs - 1:fs])
    return y


def test_library_cumsum_partial_tiles(rng):
    x = rng.random((2, 100, 1200)).astype(np.float32)
    out = cumsum(x)
    golden = np.cumsum(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(out, golden, atol=1e-2, rtol=1e-5)
    # the scan accumulates in fp32, step by step, carrying across the 512-wide free tiles
    np.testing.assert_array_equal(out, np.cumsum(x, axis=-1, dtype=np.float32))


# -- nki-library style max with index: max8 / nc_find_index8, affine_select identity, PE transpose --
@nki.jit
def row_max_with_index(x):
    """Per row of x [R <= 128, V]: the max and its first index, written as [1, R] rows of HBM."""
    rows, vocab = x.shape
    data = nl.ndarray((rows, vocab), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=x)
    top8 = nl.ndarray((rows, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.max8(dst=top8, src=data)
    peak = nl.ndarray((rows, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(op=nl.maximum, data=data[nl.ds(0, rows), nl.ds(0, vocab)], dst=peak[...], axis=1)
    same = nl.ndarray((rows, 1), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=same, data1=peak, data2=top8[:, 0:1], op=nl.equal)
    where = nl.ndarray((rows, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(data=data[:, :], vals=peak.ap([[1, rows], [0, 8]]), dst=where[...])
    # identity by affine_select: keep 1.0 where column == partition
    ident = nl.ndarray((rows, rows), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ident, value=1.0)
    nisa.affine_select(dst=ident[...], pattern=[[1, rows]], channel_multiplier=-1, cmp_op=nl.equal,
                       on_true_tile=ident[nl.ds(0, rows), nl.ds(0, rows)], on_false_value=0.0)
    idx_f = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(src=where[:, 0:1], dst=idx_f)
    idx_t = nl.ndarray((1, rows), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=idx_t[...], stationary=idx_f, moving=ident, is_transpose=True)
    peak_t = nl.ndarray((1, rows), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=peak_t, stationary=peak[:, 0:1], moving=ident, is_transpose=True)
    # a base offset per row from iota: [0, 0, ...] plus the row's start in a flat [R * V] view
    base = nl.ndarray((1, rows), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.iota(pattern=[[0, 1], [vocab, rows]], dst=base)
    flat_idx = nl.ndarray((1, rows), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=flat_idx, data1=idx_t, data2=base, op=nl.add)
    values = nl.ndarray((1, rows), dtype=x.dtype, buffer=nl.shared_hbm, name="max_values")
    indices = nl.ndarray((1, 2 * rows), dtype=nl.uint32, buffer=nl.shared_hbm, name="max_indices")
    peak_sb = nl.ndarray((1, rows), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=peak_sb, src=peak_t)
    nisa.dma_copy(dst=values.ap([[rows, 1], [1, rows]]), src=peak_sb.ap([[rows, 1], [1, rows]]))
    idx_sb = nl.ndarray((1, rows), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=idx_sb, src=idx_t)
    nisa.dma_copy(dst=indices.ap([[2 * rows, 1], [1, rows]], offset=0), src=idx_sb)
    nisa.dma_copy(dst=indices.ap([[2 * rows, 1], [1, rows]], offset=rows), src=flat_idx)
    sanity = nl.ndarray((rows, 1), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=sanity, src=same)
    return values, indices, sanity


def test_library_row_max_with_index(rng):
    rows, vocab = 96, 640
    x = rng.permutation(rows * vocab).reshape(rows, vocab).astype(np.float32)  # distinct: one argmax
    values, indices, sanity = row_max_with_index(x)
    np.testing.assert_array_equal(values[0], x.max(axis=1))
    np.testing.assert_array_equal(indices[0, :rows], x.argmax(axis=1))
    np.testing.assert_array_equal(indices[0, rows:], x.argmax(axis=1) + vocab * np.arange(rows))
    assert sanity.all()


# -- LNC=2 launches: rows split across the two cores of a logical core ------------------------------
@nki.jit
def rmsnorm_sharded(x, g, eps=1e-6):
    rows, hidden = x.shape
    n_prg, prg = nl.num_programs(0), nl.program_id(0)
    per_core = rows // n_prg
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="rmsnorm_out")
    w = nl.ndarray((128, hidden), dtype=g.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=g.reshape((1, hidden)).ap([[0, 128], [1, hidden]]))
    for t in range(per_core // 128):
        r0 = prg * per_core + t * 128
        xt = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r0:r0 + 128, :])
        sq = nl.ndarray((128, hidden), dtype=nl.float32, buffer=nl.sbuf)
        ssum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=ssum)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ssum, op0=nl.multiply, operand0=1.0 / hidden, op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        y = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=xt, op0=nl.multiply, operand0=rstd, op1=nl.multiply, operand1=w)
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=y)
    return out


@pytest.mark.parametrize("launch", ["cpu_simulate_kwargs", "grid"])
def test_rmsnorm_lnc2(launch, rng):
    x = rng.standard_normal((512, 256)).astype(np.float32)
    g = rng.random(256).astype(np.float32)
    if launch == "grid":
        out = rmsnorm_sharded[2](x, g)
    else:
        out = nki.cpu_simulate(rmsnorm_sharded)[2](x=x, g=g)
    golden = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(out, golden, rtol=1e-5, atol=1e-5)


# -- average pooling tutorial (nki): a 5-D .ap() view of the SBUF image, nl.sum over the window ------
@nki.jit
def avgpool_ap(in_tensor, pool_size):
    chans, rows, cols = in_tensor.shape
    out_tensor = nl.ndarray((chans, rows // pool_size, cols // pool_size), dtype=in_tensor.dtype,
                            buffer=nl.shared_hbm)
    image = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=image, src=in_tensor)
    windows = image.ap([
        [rows * cols, chans],
        [pool_size * cols, rows // pool_size],
        [pool_size, cols // pool_size],
        [cols, pool_size],
        [1, pool_size],
    ])
    sums = nl.sum(windows, axis=[3, 4])
    pooled = nl.ndarray(sums.shape, dtype=sums.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=pooled, data=sums, op0=nl.multiply, operand0=1.0 / (pool_size * pool_size))
    nisa.dma_copy(dst=out_tensor, src=pooled)
    return out_tensor


def test_avgpool_access_pattern_fp16_exact():
    image = np.arange(4 * 6 * 10, dtype=np.float16).reshape(4, 6, 10)
    out = avgpool_ap(image, 2)
    golden = np.nanmean(image.reshape(4, 3, 2, 5, 2), axis=(2, 4))
    assert (out == golden).all()


# -- nki-library RoPE: 4-D SBUF tiles (d_head on partitions), strided-view relayout by DMA or by a
#    permutation matmul, cos/sin broadcast over heads through a zero-stride access pattern ----------
class StridedView(nl.NKIObject):
    """A library-style view (shape, element strides, offset) turned into `.ap()` on demand."""

    def __init__(self, base, shape=None, strides=None, offset=0):
        self.base = base
        self.shape = tuple(base.shape) if shape is None else tuple(shape)
        if strides is None:
            acc, rev = 1, []
            for n in reversed(self.shape):
                rev.append(acc)
                acc *= n
            strides = tuple(reversed(rev))
        self.strides, self.offset = tuple(strides), offset

    def slice(self, dim, start, end, step=1):
        shape, strides = list(self.shape), list(self.strides)
        shape[dim] = (min(end, self.shape[dim]) - start + step - 1) // step
        strides[dim] *= step
        return StridedView(self.base, shape, strides, self.offset + self.strides[dim] * start)

    def expand_dim(self, dim):
        return StridedView(self.base, self.shape[:dim] + (1,) + self.shape[dim:],
                           self.strides[:dim] + (0,) + self.strides[dim:], self.offset)

    def broadcast(self, dim, size):
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return StridedView(self.base, shape, strides, self.offset)

    def get_view(self):
        return self.base.ap(pattern=[(s, n) for s, n in zip(self.strides, self.shape)], offset=self.offset)


def _rope_sbuf(x_sb, cos_sb, sin_sb, out_sb):
    d_head, B, H, S = out_sb.shape
    half = d_head // 2
    odd = nl.ndarray((half, B, H, S), dtype=x_sb.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=odd, src=x_sb[half:, :, :, :])  # to partition 0 for the tensor_tensor below
    prods = [nl.ndarray((half, B, H, S), dtype=x_sb.dtype, buffer=nl.sbuf) for _ in range(4)]
    cos_b = StridedView(cos_sb).expand_dim(2).broadcast(dim=2, size=H).get_view()
    sin_b = StridedView(sin_sb).expand_dim(2).broadcast(dim=2, size=H).get_view()
    nisa.tensor_tensor(prods[0], x_sb[:half, :, :, :], cos_b, nl.multiply)
    nisa.tensor_tensor(prods[1], odd[:half, :, :, :], cos_b, nl.multiply)
    nisa.tensor_tensor(prods[2], x_sb[:half, :, :, :], sin_b, nl.multiply)
    nisa.tensor_tensor(prods[3], odd[:half, :, :, :], sin_b, nl.multiply)
    nisa.tensor_tensor(out_sb[:half, :, :, :], prods[0], prods[3], nl.subtract)
    nisa.tensor_tensor(out_sb[half:, :, :, :], prods[1], prods[2], nl.add)


def _interleave_matrix(d_head, dtype):
    """P with P @ [e0, e1, ..., o0, o1, ...] = [e0, o0, e1, o1, ...], read out of an identity."""
    ident_hbm = nl.shared_constant(nki.tensor.identity(d_head, nl.float32))
    ident = nl.ndarray((d_head, d_head), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ident, src=ident_hbm)
    perm = nl.ndarray((d_head, d_head), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=perm.reshape((d_head, 2, d_head // 2)),
                     src=ident.ap(pattern=[[d_head, d_head], [1, 2], [2, d_head // 2]]), engine=nisa.scalar_engine)
    return perm


@nki.jit
def rope(x_in, cos, sin, interleaved=False, relayout_in_sbuf=False):
    d_head, B, H, S = x_in.shape
    half = d_head // 2
    x_sb = nl.ndarray((d_head, B, H, S), dtype=x_in.dtype, buffer=nl.sbuf)
    by_dma = interleaved and not relayout_in_sbuf
    if by_dma:
        for part, start in ((slice(0, half), 0), (slice(half, d_head), 1)):
            nisa.dma_copy(dst=x_sb[part, :, :, :],
                          src=StridedView(x_in).slice(dim=0, start=start, end=d_head, step=2).get_view())
    else:
        nisa.dma_copy(dst=x_sb, src=x_in[:, :, :, 0:S])
    perm = None
    if interleaved and relayout_in_sbuf:  # P^T @ x: interleaved -> contiguous
        perm = _interleave_matrix(d_head, x_in.dtype)
        x_psum = nl.ndarray((d_head, B * H * S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=x_psum, stationary=perm, moving=x_sb.reshape((d_head, B * H * S)))
        x_sb = nl.ndarray(x_sb.shape, dtype=x_in.dtype, buffer=nl.sbuf)
        nisa.activation(dst=x_sb, op=nl.copy, data=x_psum.reshape((d_head, B, H, S)))
    cos_sb = nl.ndarray((half, B, S), dtype=cos.dtype, buffer=nl.sbuf)
    sin_sb = nl.ndarray((half, B, S), dtype=sin.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=cos_sb, src=cos[:, :, 0:S])
    nisa.dma_copy(dst=sin_sb, src=sin[:, :, 0:S])
    out_sb = nl.ndarray(x_sb.shape, dtype=x_in.dtype, buffer=nl.sbuf)
    _rope_sbuf(x_sb, cos_sb, sin_sb, out_sb)
    if perm is not None:  # P @ out: contiguous -> interleaved (stationary is P^T)
        perm_t_psum = nl.ndarray((d_head, d_head), dtype=perm.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=perm_t_psum, data=perm)
        perm_t = nl.ndarray((d_head, d_head), dtype=perm.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=perm_t, src=perm_t_psum, engine=nisa.scalar_engine)
        o_psum = nl.ndarray((d_head, B * H * S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=o_psum, stationary=perm_t, moving=out_sb.reshape((d_head, B * H * S)))
        nisa.activation(dst=out_sb, op=nl.copy, data=o_psum.reshape((d_head, B, H, S)))
    x_out = nl.ndarray(x_in.shape, dtype=x_in.dtype, buffer=nl.shared_hbm)
    if by_dma:
        for part, start in ((slice(0, half), 0), (slice(half, d_head), 1)):
            nisa.dma_copy(dst=StridedView(x_out).slice(dim=0, start=start, end=d_head, step=2).get_view(),
                          src=out_sb[part, :, :, :])
    else:
        nisa.dma_copy(dst=x_out[:, :, :, 0:S], src=out_sb)
    return x_out


def _rope_ref(x, cos, sin, interleaved):
    half = x.shape[0] // 2
    if interleaved:
        even, odd = x[0::2], x[1::2]
    else:
        even, odd = x[:half], x[half:]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    out_even, out_odd = even * c - odd * s, odd * c + even * s
    out = np.empty_like(x)
    if interleaved:
        out[0::2], out[1::2] = out_even, out_odd
    else:
        out[:half], out[half:] = out_even, out_odd
    return out


@pytest.mark.parametrize(("interleaved", "in_sbuf"), [(False, False), (True, False), (True, True)],
                         ids=["contiguous", "interleaved_dma", "interleaved_matmul"])
def test_library_rope_layouts(interleaved, in_sbuf, rng):
    d_head, B, H, S = 64, 2, 3, 40
    x = rng.standard_normal((d_head, B, H, S)).astype(np.float32)
    ang = rng.random((d_head // 2, B, S)).astype(np.float32) * 3
    cos, sin = np.cos(ang), np.sin(ang)
    out = rope(x, cos, sin, interleaved=interleaved, relayout_in_sbuf=in_sbuf)
    np.testing.assert_allclose(out, _rope_ref(x.astype(np.float64), cos, sin, interleaved), rtol=1e-5, atol=1e-5)


# -- stride-1 max pooling (nki-samples, NKI 0.6 style): an overlapping HBM .ap() read (neighbouring
#    partitions share rows) and an overlapping 4-D SBUF window view reduced by nl.max ---------------
@nki.jit
def maxpool_stride1(in_tensor, k):
    h_in, w_in = in_tensor.shape
    h_out, w_out = h_in - (k - 1), w_in - (k - 1)
    out = nl.ndarray((h_out, w_out), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    for t in range((h_out + 127) // 128):
        row0 = t * 128
        rows = min(128, h_out - row0)
        tile = nl.ndarray((rows, k, w_in), dtype=in_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=in_tensor.ap(pattern=[[w_in, rows], [w_in, k], [1, w_in]], offset=row0 * w_in))
        windows = tile.ap(pattern=[[k * w_in, rows], [1, w_out], [w_in, k], [1, k]], offset=0)
        nisa.dma_copy(dst=out[row0:row0 + rows, 0:w_out], src=nl.max(windows, axis=[2, 3]))
    return out


@pytest.mark.parametrize(("h", "w", "k", "dtype"), [(131, 37, 3, np.float32), (7, 8, 3, np.float16),
                                                    (40, 33, 1, BF16)])
def test_maxpool_stride1_exact(h, w, k, dtype, rng):
    x = rng.standard_normal((h, w)).astype(np.float32).astype(dtype)
    out = nki.simulate(maxpool_stride1)(x, k)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), (k, k))
    assert np.array_equal(out.astype(np.float32), windows.max(axis=(2, 3)))  # the authors' exact check


# -- nki-library cross entropy: online log-sum-exp over vocabulary chunks, positions sharded over the
#    LNC cores, 1-D HBM tensors, the target logit gathered with .ap(scalar_offset=<SBUF element>) ------
def _sharding():
    ndim = nl.program_ndim()
    return (nl.num_programs(axes=0), nl.program_id(axis=0)) if ndim != 0 else (1, 0)


@nki.jit(platform_target="trn2")
def cross_entropy(logits, targets, per_batch: int = 16, chunk: int = 256, dtype: nki.dtype = nl.bfloat16):
    n_pos, vocab = logits.shape
    n_cores, core = _sharding()
    loss = nl.ndarray((n_pos,), dtype=dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((n_pos,), dtype=dtype, buffer=nl.shared_hbm)
    nominal = n_pos // n_cores
    first = core * nominal
    mine = n_pos - first if core == n_cores - 1 else nominal
    tgt_mine, loss_mine, lse_mine = (t[nl.ds(first, mine)] for t in (targets, loss, lse))
    tgt = nl.ndarray((per_batch, 1), dtype=nl.int32, buffer=nl.sbuf)
    m, d = (nl.ndarray((per_batch, 1), dtype=dtype, buffer=nl.sbuf) for _ in range(2))
    m_new = nl.ndarray((per_batch, 1), dtype=nl.float32, buffer=nl.sbuf)
    part = nl.ndarray((per_batch, chunk), dtype=dtype, buffer=nl.sbuf)
    e = nl.ndarray((per_batch, chunk), dtype=dtype, buffer=nl.sbuf)
    tmp = [nl.ndarray((per_batch, 1), dtype=dtype, buffer=nl.sbuf) for _ in range(6)]
    cmax, diff, corr, dcorr, esum, picked = tmp
    for b in range((mine + per_batch - 1) // per_batch):
        b0 = b * per_batch
        rows = min(per_batch, mine - b0)
        nisa.memset(dst=m, value=-float("inf"), name=f"init_m_{b}")
        nisa.memset(dst=d, value=0.0, name=f"init_d_{b}")
        nisa.dma_copy(dst=tgt[0:rows], src=tgt_mine[b0:b0 + rows], name=f"targets_{b}")
        for c in range((vocab + chunk - 1) // chunk):
            c0, c1 = c * chunk, min((c + 1) * chunk, vocab)
            if c1 - c0 < chunk:
                nisa.memset(dst=part, value=-float("inf"))
            nisa.dma_copy(dst=part[0:rows, 0:c1 - c0], src=logits[first + b0:first + b0 + rows, c0:c1])
            nisa.tensor_reduce(op=nl.maximum, data=part, dst=cmax, axis=1)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=cmax, op=nl.maximum)
            nisa.tensor_tensor(dst=diff, data1=m, data2=m_new, op=nl.subtract)
            nisa.activation(op=nl.exp, data=diff, dst=corr)
            nisa.tensor_tensor(dst=dcorr, data1=d, data2=corr, op=nl.multiply)
            nisa.tensor_scalar(dst=e, data=part, op0=nl.subtract, operand0=m_new)
            nisa.activation(op=nl.exp, data=e, dst=e)
            nisa.tensor_reduce(op=nl.add, data=e, dst=esum, axis=1)
            nisa.tensor_tensor(dst=d, data1=dcorr, data2=esum, op=nl.add)
            nisa.tensor_copy(src=m_new, dst=m)
        logd = nl.ndarray((per_batch, 1), dtype=dtype, buffer=nl.sbuf)
        nisa.activation(op=nl.log, data=d, dst=logd)
        out_lse = nl.ndarray((per_batch, 1), dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out_lse, data1=m, data2=logd, op=nl.add)
        for i in range(rows):
            pos = first + b0 + i
            nisa.dma_copy(dst=picked[i:i + 1, :],
                          src=logits.ap(pattern=[[vocab, 1], [1, 1]], offset=pos * vocab,
                                        scalar_offset=tgt.ap(pattern=[[1, 1], [1, 1]], offset=i), indirect_dim=1))
        out_loss = nl.ndarray((per_batch, 1), dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out_loss, data1=out_lse, data2=picked, op=nl.subtract)
        nisa.dma_copy(dst=lse_mine[b0:b0 + rows], src=out_lse[0:rows, 0])
        nisa.dma_copy(dst=loss_mine[b0:b0 + rows], src=out_loss[0:rows, 0])
    return loss, lse


@pytest.mark.parametrize(("lnc", "dtype", "tol"), [(1, nl.float32, 1e-5), (2, nl.float32, 1e-5),
                                                   (2, nl.bfloat16, 2e-2)])
def test_library_cross_entropy(lnc, dtype, tol, rng):
    n_pos, vocab = 37, 700
    logits = (rng.standard_normal((n_pos, vocab)) * 3).astype(np.float32)
    targets = rng.integers(0, vocab, n_pos).astype(np.int32)
    kernel = cross_entropy[lnc] if lnc > 1 else cross_entropy
    loss, lse = kernel(logits, targets, dtype=dtype)
    x = logits.astype(np.float64)
    golden_lse = x.max(1) + np.log(np.exp(x - x.max(1, keepdims=True)).sum(1))
    golden_loss = golden_lse - x[np.arange(n_pos), targets]
    np.testing.assert_allclose(lse.astype(np.float64), golden_lse, rtol=tol, atol=tol)
    np.testing.assert_allclose(loss.astype(np.float64), golden_loss, rtol=tol, atol=tol * 10)

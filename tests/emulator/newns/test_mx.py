"""MX on trn3: packed x4 types, nc_matmul_mx with e8m0 block scales, quantize_mx; gated to NC-v4.

The goldens here decode the packed bits and the scales independently of the emulator (ml_dtypes
for fp8 / fp4, 2**(e - 127) for the scale bytes) and multiply in float64.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator

F32 = np.float32


def _pack_fp8(vals: np.ndarray, dtype) -> np.ndarray:
    """[P, 4F] values -> [P, F] uint32 (value j of a group in byte j)."""
    return np.ascontiguousarray(vals.astype(dtype)).view(np.uint8).reshape(vals.shape[0], -1, 4).copy().view(
        np.uint32)[..., 0]


def _pack_fp4(vals: np.ndarray) -> np.ndarray:
    """[P, 4F] values -> [P, 2F] uint8 bytes (two fp4 per byte, low nibble first)."""
    nib = np.ascontiguousarray(vals.astype(ml_dtypes.float4_e2m1fn)).view(np.uint8) & 0xF
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)


def _dequant(vals: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """values [K, 4F] and contiguous scales [K/8, F] -> float64 [K, 4F]."""
    s = np.ldexp(1.0, scale.astype(np.int64) - 127)
    return vals.astype(np.float64) * np.repeat(np.repeat(s, 8, axis=0), 4, axis=1)


def _mx_data(rng, K, F, dtype, vmax):
    vals = (rng.uniform(-vmax, vmax, size=(K, 4 * F))).astype(dtype).astype(np.float64)
    scale = rng.integers(120, 130, size=(K // 8, F)).astype(np.uint8)
    return vals, scale


def _golden(sv, ss, mv, ms):
    s = _dequant(sv, ss).reshape(sv.shape[0], -1, 4)  # [K, M, 4]
    m = _dequant(mv, ms).reshape(mv.shape[0], -1, 4)  # [K, N, 4]
    return np.einsum("kmq,knq->mn", s, m)


def _scatter_scales(data_sb, scale_hbm):
    """Contiguous scales [P/8, F] in HBM -> SBUF in the hardware layout (quadrant q's rows at
    partitions 32q .. 32q+3)."""
    P = data_sb.shape[0]
    sp, sf = scale_hbm.shape
    sb = nl.ndarray((P, sf), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=sb, value=0)
    for q in range(sp // 4):
        nisa.dma_copy(dst=sb.ap(pattern=[[sf, 4], [1, sf]], offset=32 * q * sf),
                      src=scale_hbm.ap(pattern=[[sf, 4], [1, sf]], offset=4 * q * sf))
    return sb


@nki.jit(platform_target="trn3")
def mx_matmul(st_bits, st_scale, mv_bits, mv_scale, mx_dtype):
    K = st_scale.shape[0] * 8
    M = st_scale.shape[1]
    N = mv_scale.shape[1]
    st = nl.ndarray((K, M), dtype=mx_dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=st_bits.ap(pattern=[[M, K], [1, M]], offset=0, dtype=mx_dtype))
    mv = nl.ndarray((K, N), dtype=mx_dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=mv_bits.ap(pattern=[[N, K], [1, N]], offset=0, dtype=mx_dtype))
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=st, moving=mv, stationary_scale=_scatter_scales(st, st_scale),
                      moving_scale=_scatter_scales(mv, mv_scale))
    sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=sb)
    return out


@pytest.mark.parametrize(("name", "dtype", "vmax"), [("fp8_e5m2", ml_dtypes.float8_e5m2, 1000.0),
                                                    ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn, 400.0)])
def test_nc_matmul_mx_fp8_matches_a_dequantised_golden(rng, name, dtype, vmax):
    K, M, N = 128, 128, 256
    sv, ss = _mx_data(rng, K, M, dtype, vmax)
    mv, ms = _mx_data(rng, K, N, dtype, vmax)
    x4 = nl.float8_e5m2_x4 if name == "fp8_e5m2" else nl.float8_e4m3fn_x4
    out = mx_matmul(_pack_fp8(sv, dtype), ss, _pack_fp8(mv, dtype), ms, x4)
    ref = _golden(sv, ss, mv, ms)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


def test_nc_matmul_mx_fp4_packed_two_per_byte(rng):
    K, M, N = 64, 32, 128
    sv, ss = _mx_data(rng, K, M, ml_dtypes.float4_e2m1fn, 6.0)
    mv, ms = _mx_data(rng, K, N, ml_dtypes.float4_e2m1fn, 6.0)
    out = mx_matmul(_pack_fp4(sv), ss, _pack_fp4(mv), ms, nl.float4_e2m1fn_x4)
    ref = _golden(sv, ss, mv, ms)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


def _quantize_golden(x: np.ndarray, emax: int, vmax: float, dtype):
    """Per 8x4 group: scale byte = max fp32 exponent - emax; values / 2**(scale-127), clamped."""
    P, F4 = x.shape
    g = x.astype(F32).reshape(P // 8, 8, F4 // 4, 4)
    exp = (g.view(np.uint32) >> 23) & 0xFF
    e = np.clip(exp.max(axis=(1, 3)).astype(np.int64) - emax, 0, 254)
    q = np.clip(g / np.ldexp(np.float32(1), e - 127)[:, None, :, None].astype(F32), -vmax, vmax)
    return q.reshape(P, F4).astype(dtype), e.astype(np.uint8)


def test_quantize_mx_then_matmul_mx(rng):
    @nki.jit(platform_target="trn3")
    def k(x, st_bits, st_scale):
        P, F4 = x.shape
        src = nl.ndarray((P, F4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        q = nl.ndarray((P, F4 // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        qs = nl.ndarray((P, F4 // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=qs, value=0)
        nisa.quantize_mx(dst=q, src=src, dst_scale=qs)
        st = nl.ndarray((P, st_scale.shape[1]), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=st_bits.ap(pattern=[[st_scale.shape[1], P], [1, st_scale.shape[1]]], offset=0,
                                             dtype=nl.float8_e4m3fn_x4))
        ps = nl.ndarray((st_scale.shape[1], F4 // 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(ps, st, q, _scatter_scales(st, st_scale), qs)
        outs = []
        for t in (q, qs):
            o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=t)
            outs.append(o)
        sb = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=ps)
        o = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=sb)
        return tuple(outs) + (o,)

    P, F4, M = 64, 64, 16
    x = (rng.standard_normal((P, F4)) * np.exp2(rng.integers(-6, 6, size=(P, F4)))).astype(ml_dtypes.bfloat16)
    sv, ss = _mx_data(rng, P, M, ml_dtypes.float8_e4m3fn, 400.0)
    q_bits, q_scale, out = k(x, _pack_fp8(sv, ml_dtypes.float8_e4m3fn), ss)
    gq, ge = _quantize_golden(x, 8, 448.0, ml_dtypes.float8_e4m3fn)
    assert q_bits.dtype == nl.float8_e4m3fn_x4  # packed outputs keep their MX type; .view gives raw cells
    assert np.array_equal(q_bits.view(np.uint32), _pack_fp8(gq, ml_dtypes.float8_e4m3fn))
    rows = np.arange(P // 8)
    rows = (rows // 4) * 32 + rows % 4  # hardware layout of the scale rows
    assert np.array_equal(q_scale[rows], ge)
    ref = _golden(sv, ss, gq.astype(np.float64), ge)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


def test_mx_instructions_need_trn3(rng):
    @nki.jit
    def k(x):
        src = nl.ndarray((32, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        q = nl.ndarray((32, 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        qs = nl.ndarray((4, 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=src, dst_scale=qs)
        return x

    x = np.zeros((32, 16), ml_dtypes.bfloat16)
    with pytest.raises(emulator.EngineOpError, match="needs NeuronCore-v4 \\(trn3\\); the target is trn2"):
        k(x)
    with emulator.options(target="trn3"):
        k(x)


def test_packed_types_memset_only_zero_and_no_dma_cast():
    @nki.jit(platform_target="trn3")
    def bad_memset():
        q = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.memset(dst=q, value=1)
        return None

    with pytest.raises(nki.isa.NkiValidationError, match="can only be set to 0"):
        bad_memset()

    @nki.jit(platform_target="trn3")
    def bad_cast(a):
        q = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=q, src=a)
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="not cast by DMA"):
        bad_cast(np.zeros((32, 4), F32))


def test_packed_dtype_objects():
    assert str(nl.float4_e2m1fn_x4) == "float4_e2m1fn_x4" and nl.float4_e2m1fn_x4.itemsize == 2
    assert nl.float8_e5m2_x4 == "float8_e5m2_x4" and nl.float8_e5m2_x4 != nl.float8_e4m3fn_x4
    assert {nl.float8_e4m3fn_x4: 4}[nl.float8_e4m3fn_x4] == 4

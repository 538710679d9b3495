"""MX x4 types on the host (issue #19, cause 3): `nl.float8_e4m3fn_x4` & co. are numpy dtypes, host
casts pack and unpack them, and MX arrays pass between host and kernel with their type (before:
the kernel saw uint16/uint32 and `nc_matmul_mx` refused "must be an MX x4 type, got uint16")."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui.emulator.newns.mxhost import host_cast
from tests.emulator.newns.tile_io import load as _load

F32 = np.float32
X4_TYPES = [(nl.float8_e4m3fn_x4, ml_dtypes.float8_e4m3fn, np.uint32),
            (nl.float8_e5m2_x4, ml_dtypes.float8_e5m2, np.uint32),
            (nl.float4_e2m1fn_x4, ml_dtypes.float4_e2m1fn, np.uint16)]


@pytest.mark.parametrize("x4, element, cell", X4_TYPES)
def test_x4_types_are_numpy_dtypes(x4, element, cell):
    a = np.zeros((2, 3), dtype=x4)
    assert a.dtype == x4 and x4 == a.dtype and a.dtype.itemsize == np.dtype(cell).itemsize
    assert a.view(cell).shape == (2, 3) and not a.view(cell).any()
    with pytest.raises(TypeError):  # packed values are not numbers: unpack them first
        a.astype(np.float32)


@pytest.mark.parametrize("x4, element, cell", X4_TYPES)
def test_host_cast_packs_four_consecutive_values(rng, x4, element, cell):
    vals = rng.uniform(-4, 4, size=(3, 16)).astype(element).astype(F32)  # exactly representable
    packed = host_cast(vals, x4)
    assert packed.shape == (3, 4) and packed.dtype == x4
    assert np.array_equal(host_cast(packed, np.float32), vals)
    assert np.array_equal(host_cast(packed, element).astype(F32), vals)
    codes = np.ascontiguousarray(vals.astype(element)).view(np.uint8).reshape(3, 4, 4).astype(np.uint64)
    bits = packed.view(cell).astype(np.uint64)
    width = 8 if cell is np.uint32 else 4  # value j in byte j (fp8) / nibble j (fp4), little end first
    mask = (1 << width) - 1
    for j in range(4):
        assert np.array_equal((bits >> (width * j)) & mask, codes[..., j] & mask)


def test_host_cast_rejects_a_last_dimension_not_divisible_by_4():
    with pytest.raises(ValueError, match="multiple of 4"):
        host_cast(np.zeros((2, 6), F32), nl.float8_e5m2_x4)


def test_mx_arrays_keep_their_type_through_a_kernel(rng):
    @nki.jit
    def k(x):
        assert x.dtype == nl.float8_e5m2_x4
        t = _load(x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = host_cast(rng.uniform(-2, 2, size=(4, 32)).astype(F32), nl.float8_e5m2_x4)
    y = k(x)
    assert y.dtype == nl.float8_e5m2_x4 and np.array_equal(y.view(np.uint32), x.view(np.uint32))


def test_typed_mx_arguments_feed_nc_matmul_mx_directly(rng):
    K, M, N = 32, 4, 8

    @nki.jit(platform_target="trn3")
    def k(st_x4, mv_x4, scale):
        st, mv = _load(st_x4), _load(mv_x4)  # no .view(): the arguments are x4 tensors
        ss, ms = _load(scale[:, 0:M]), _load(scale[:, 0:N])
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=ps, stationary=st, moving=mv, stationary_scale=ss, moving_scale=ms)
        sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=ps)
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sb)
        return out

    sv = rng.uniform(-6, 6, size=(K, 4 * M)).astype(ml_dtypes.float4_e2m1fn).astype(F32)
    mv = rng.uniform(-6, 6, size=(K, 4 * N)).astype(ml_dtypes.float4_e2m1fn).astype(F32)
    scale = np.full((K // 8, max(M, N)), 127, dtype=np.uint8)  # 2**0 for every group
    got = k(host_cast(sv, nl.float4_e2m1fn_x4), host_cast(mv, nl.float4_e2m1fn_x4), scale)
    expect = np.einsum("kmq,knq->mn", sv.reshape(K, M, 4).astype(np.float64), mv.reshape(K, N, 4))
    assert np.allclose(got, expect, rtol=1e-6, atol=1e-6)

"""Numerical semantics: rounding, fp32 compute, PSUM accumulation, sentinels, precision switch, masks."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.emulator import engine

BF16 = ml_dtypes.bfloat16
F32 = np.float32


@nki.jit
def add_into(a, b, out_dtype):
    out = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b), dtype=out_dtype))
    return out


def test_bf16_results_round_to_nearest_even():
    a = np.array([[1.0, 1.0, 1.0, 256.0]], dtype=F32)
    b = np.array([[2 ** -8, 3 * 2 ** -8, 2 ** -7 + 2 ** -9, 1.0]], dtype=F32)  # ties and a non-tie
    out = add_into(a, b, nl.bfloat16)
    assert out.dtype == BF16
    np.testing.assert_array_equal(out.astype(F32), [[1.0, 1.015625, 1.0078125, 256.0]])
    np.testing.assert_array_equal(out, (a + b).astype(BF16))


def test_compute_happens_in_fp32_then_rounds_once(rng):
    a = rng.standard_normal((64, 64)).astype(BF16)
    b = rng.standard_normal((64, 64)).astype(BF16)
    out = add_into(a, b, nl.bfloat16)
    np.testing.assert_array_equal(out, (a.astype(F32) + b.astype(F32)).astype(BF16))


def test_precise_false_keeps_fp32():
    a = np.array([[1.0]], dtype=BF16)
    b = np.array([[2 ** -10]], dtype=BF16)
    rounded = add_into(a, b, nl.bfloat16)
    with emulator.options(precise=False):
        exact = add_into(a, b, nl.bfloat16)
    assert rounded.astype(F32)[0, 0] == 1.0
    assert exact.dtype == F32 and exact[0, 0] == 1.0 + 2 ** -10


def test_matmul_accumulates_bf16_products_in_fp32(rng):
    @nki.jit
    def mm(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(4):
            acc += nisa.nc_matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
        nl.store(out, acc)
        return out

    a = rng.standard_normal((512, 128)).astype(BF16)
    b = rng.standard_normal((512, 512)).astype(BF16)
    golden = a.astype(np.float64).T @ b.astype(np.float64)  # bf16 products are exact in fp32
    got = mm(a, b)
    assert got.dtype == F32
    np.testing.assert_allclose(got, golden, rtol=1e-5, atol=1e-4)


def test_tfloat32_and_fp8_storage_round():
    @nki.jit
    def k(x):
        t32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        f8 = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
        tile = nl.load(x)
        tf = nl.copy(tile, dtype=nl.tfloat32)
        nl.store(t32, nl.copy(tf, dtype=nl.float32))
        nl.store(f8, nl.copy(tile, dtype=nl.float8_e4m3))
        return t32, f8

    x = np.array([[1 + 2 ** -11, 1 + 3 * 2 ** -11, 3.3, 100.0]], dtype=F32)
    t32, f8 = k(x)
    np.testing.assert_array_equal(t32[0, :2], [1.0, 1 + 2 ** -9])  # 10-bit mantissa, ties to even
    np.testing.assert_array_equal(f8, x.astype(ml_dtypes.float8_e4m3))


def test_uninitialised_reads_are_nan_and_int_sentinel():
    @nki.jit
    def k():
        f = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        i = nl.ndarray((4, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(f, nl.add(nl.ndarray((4, 4), dtype=nl.float32), 1.0))
        nl.store(i, nl.ndarray((4, 4), dtype=nl.int32))
        return f, i

    f, i = k()
    assert np.isnan(f).all()
    assert (i == 4).all()


def test_nan_and_inf_propagate_without_python_warnings():
    x = np.array([[np.nan, 1.0, 0.0, -1.0]], dtype=F32)

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.divide(nl.exp(nl.load(x)), nl.load(x)))
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = k(x)
    assert np.isnan(out[0, 0]) and out[0, 1] == pytest.approx(np.e) and np.isposinf(out[0, 2])


def test_integer_arithmetic_is_fp32_on_vector_and_exact_on_gpsimd():
    big = np.array([[16777217, 2 ** 30 + 1]], dtype=np.int32)
    one = np.ones((1, 2), dtype=np.int32)

    @nki.jit
    def k(a, b):
        vec = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        gps = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(vec, nisa.tensor_tensor(x, y, op=np.add, engine=nisa.vector_engine))
        nl.store(gps, nisa.tensor_tensor(x, y, op=np.add))
        return vec, gps

    vec, gps = k(big, one)
    np.testing.assert_array_equal(gps, big + 1)
    np.testing.assert_array_equal(vec, (big.astype(F32) + F32(1)).astype(np.int64).astype(np.int32))
    assert (vec != big + 1).any()  # the fp32 datapath loses precision above 2^24, as on hardware


def test_float_to_int_truncates_toward_zero_and_saturates():
    """Undocumented by AWS; AWS's tested nki-samples resize kernel needs `floor(int32 / w)` to
    truncate (see tests/emulator/test_peer_regressions.py), so conversions truncate toward zero."""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.int8, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.load(x), dtype=nl.int8))
        return out

    x = np.array([[0.5, 1.5, 2.5, -0.5, 1.9, -1.7, 300.0, -300.0, np.nan]], dtype=F32)
    np.testing.assert_array_equal(k(x), [[0, 1, 2, 0, 1, -1, 127, -128, 0]])


def test_non_box_mask_writes_only_selected_elements(rng):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:32, 0:32]
        base = nl.zeros((32, 32), dtype=nl.float32)
        t = nl.load(x)
        base[i_p, i_f] = nl.exp(t, mask=(i_p >= i_f))
        nl.store(out, base)
        return out

    x = rng.standard_normal((32, 32)).astype(F32)
    np.testing.assert_allclose(k(x), np.where(np.tril(np.ones((32, 32))) > 0, np.exp(x), 0), rtol=1e-6)


def test_masked_reduction_ignores_masked_out_elements(rng):
    @nki.jit
    def k(x):
        out = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:16, 0:40]
        s = nl.ndarray((16, 1), dtype=nl.float32)
        s[...] = 0.0
        t = nl.load(x)
        s[...] = nl.sum(t, axis=[1], keepdims=True, mask=(i_f < 10))
        nl.store(out, s)
        return out

    x = rng.random((16, 40)).astype(F32)
    np.testing.assert_allclose(k(x)[:, 0], x[:, :10].sum(1), rtol=1e-6)


@pytest.mark.parametrize("target,spreads", [("trn1", True), ("trn2", False)])
def test_tensor_engine_transpose_nan_behaviour(target, spreads):
    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_transpose(nl.load(x), engine=nisa.tensor_engine))
        return out

    x = np.arange(64 * 48, dtype=F32).reshape(64, 48)
    x[3, 5] = np.nan
    with emulator.options(target=target):
        out = k(x)
    assert np.isnan(out[5, 3])
    assert bool(np.isnan(out[5]).sum() > 1) is spreads  # NC-v2: matmul with identity spreads NaN
    if not spreads:
        np.testing.assert_array_equal(np.nan_to_num(out), np.nan_to_num(x.T))


def test_engine_matmul_accumulate_none_zones():
    """The engine semantics the new-namespace front end uses: accumulate=None overwrites on the first
    matmul into a zone and accumulates afterwards; a non-matmul write ends the zone."""
    seen = []

    @nki.jit
    def k(a, b):
        sa, sb = nl.load(a), nl.load(b)
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        engine.nc_matmul(acc, sa, sb, accumulate=None)
        engine.nc_matmul(acc, sa, sb, accumulate=None)
        seen.append(acc.read_f32().copy())
        engine.memset(acc, 0.0)
        engine.nc_matmul(acc, sa, sb, accumulate=None)
        seen.append(acc.read_f32().copy())

    a = np.eye(8, dtype=F32)
    b = np.arange(64, dtype=F32).reshape(8, 8)
    k(a, b)
    np.testing.assert_array_equal(seen[0], 2 * b)
    np.testing.assert_array_equal(seen[1], b)

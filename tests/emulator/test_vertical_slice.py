"""End-to-end smoke tests of the first slice: install, jit, load/store, masks, matmul, SPMD, trace."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nkitui import emulator
from tests.emulator.tutorial_kernels import matmul_tiled


def test_tensor_add_kernel_matches_numpy(nki, nl, rng):
    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
        return out

    a = rng.random((128, 512), dtype=np.float32)
    b = rng.random((128, 512), dtype=np.float32)
    np.testing.assert_array_equal(add(a, b), a + b)


def test_tiled_bf16_matmul_accumulates_in_psum(rng):
    a = rng.random((256, 256)).astype(ml_dtypes.bfloat16)
    b = rng.random((256, 1024)).astype(ml_dtypes.bfloat16)
    with emulator.trace() as tr:
        out = matmul_tiled(a, b)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=1e-4)
    matmuls = [i for i in tr if i.opcode == "nc_matmul"]
    assert len(matmuls) == 2 * 2 * 2
    assert all(i.meta["accumulate"] and i.out_mem == "psum" for i in matmuls)
    assert matmuls[0].flops == 2 * 128 * 128 * 512
    assert "diagnostics" not in tr.meta  # PSUM += is an accumulation, not a C15 hazard


def test_masked_partial_last_tile(nki, nl):
    @nki.jit
    def exp_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        n, f = x.shape
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(f)[None, :]
        for t in nl.affine_range((n + 127) // 128):
            tile = nl.load(x[t * 128 + i_p, i_f], mask=(t * 128 + i_p < n))
            nl.store(out[t * 128 + i_p, i_f], value=nl.exp(tile), mask=(t * 128 + i_p < n))
        return out

    x = np.linspace(-2, 2, 250 * 64, dtype=np.float32).reshape(250, 64)
    np.testing.assert_allclose(exp_rows(x), np.exp(x), rtol=1e-6)


def test_spmd_grid_and_program_ids(nki, nl):
    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        ip, jf = nl.mgrid[0:128, 0:256]
        ta = nl.load(a[i * 128 + ip, j * 256 + jf])
        tb = nl.load(b[i * 128 + ip, j * 256 + jf])
        nl.store(out[i * 128 + ip, j * 256 + jf], ta + tb)
        return out

    a = np.arange(256 * 512, dtype=np.float16).reshape(256, 512) / 1000
    b = np.ones((256, 512), dtype=np.float16)
    with emulator.trace() as tr:
        out = add[2, 2](a, b)
    np.testing.assert_array_equal(out, a + b)
    assert {i.program for i in tr} == {(0, 0), (0, 1), (1, 0), (1, 1)}

"""Legacy/new twins of the same algorithm run on one engine: bit-identical results (and both
close to a float64 reference), the same instruction sequence in the trace."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nkitui import emulator
from tests.emulator.newns import twin_kernels as tk


def _both(legacy, new, *args):
    with emulator.trace() as tl:
        a = legacy(*args)
    with emulator.trace() as tn:
        b = new(*args)
    return a, b, tl, tn


def _opcodes(tr, skip=()):
    return [(i.engine, i.opcode) for i in tr.instructions if i.opcode not in skip]


def test_rmsnorm_twins_are_identical(rng):
    x = rng.standard_normal((256, 384)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(384).astype(ml_dtypes.bfloat16)
    a, b, tl, tn = _both(tk.rmsnorm_legacy, tk.rmsnorm_new, x, w, 1e-6)
    assert a.dtype == b.dtype == ml_dtypes.bfloat16
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert np.allclose(b.astype(np.float64), tk.rmsnorm_ref(x, w, 1e-6), rtol=2e-2, atol=2e-2)
    assert _opcodes(tl) == _opcodes(tn)


def test_tiled_matmul_twins_are_identical(rng):
    lhsT = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    a, b, tl, tn = _both(tk.matmul_legacy, tk.matmul_new, lhsT, rhs)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    assert np.allclose(b.astype(np.float64), ref, rtol=1e-2, atol=1e-1)
    mm = lambda tr: [i.meta["K"] for i in tr.instructions if i.opcode == "nc_matmul"]  # noqa: E731
    assert mm(tl) == mm(tn) and len(mm(tn)) == 2 * 2 * 2


def test_mamba_scan_twins_are_identical(rng):
    Ch, L, S = 128, 256, 4
    delta = (rng.random((Ch, L)) * 0.1).astype(np.float32)
    u = rng.standard_normal((Ch, L)).astype(np.float32)
    A = -rng.random((Ch, S)).astype(np.float32)
    B = rng.standard_normal((S, L)).astype(np.float32)
    C_ = rng.standard_normal((S, L)).astype(np.float32)
    a, b, tl, tn = _both(tk.mamba_legacy, tk.mamba_new, delta, u, A, B, C_)
    assert np.array_equal(a, b)
    assert np.allclose(b, tk.mamba_ref(delta, u, A, B, C_), rtol=1e-4, atol=1e-4)
    scans = lambda tr: sum(i.opcode == "tensor_tensor_scan" for i in tr.instructions)  # noqa: E731
    assert scans(tl) == scans(tn) == S


@pytest.mark.parametrize("S", [256, 512])
def test_attention_twins_are_identical(rng, S):
    d = 64
    qT = rng.standard_normal((d, S)).astype(ml_dtypes.bfloat16)
    kT = rng.standard_normal((d, S)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((S, d)).astype(ml_dtypes.bfloat16)
    scale = 1.0 / np.sqrt(d)
    a, b, tl, tn = _both(tk.attention_legacy, tk.attention_new, qT, kT, v, scale)
    assert np.array_equal(a, b)
    assert np.allclose(b, tk.attention_ref(qT, kT, v, scale), rtol=2e-2, atol=2e-2)
    # the legacy nl.zeros PSUM accumulator adds a memset; accumulate=None needs none
    assert _opcodes(tl, skip=("memset",)) == _opcodes(tn)

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


@pytest.mark.parametrize("axis", [(1,), (2,), (1, 2)])
def test_mean_and_var_twins_issue_the_same_instructions(rng, axis):
    """nl.mean / nl.var are one lowering (emulator/lowering.py) called by both front ends: the same
    values, opcodes, bytes and api names, also when the mean keeps a free dim and broadcasts back."""
    x = rng.standard_normal((128, 6, 10)).astype(ml_dtypes.bfloat16)
    (ma, va), (mb, vb), tl, tn = _both(tk.moments_legacy(axis), tk.moments_new(axis), x)
    assert np.array_equal(ma, mb) and np.array_equal(va, vb)
    x64 = x.astype(np.float64)
    assert np.allclose(mb, x64.mean(axis=axis, keepdims=True), atol=1e-5)
    assert np.allclose(vb, x64.var(axis=axis, keepdims=True), atol=1e-4)
    row = lambda tr: [(i.engine, i.opcode, i.bytes_read, i.bytes_written, i.meta.get("api"))  # noqa: E731
                      for i in tr.instructions]
    assert row(tl) == row(tn)
    assert [i.meta["api"] for i in tn.instructions if i.engine != "dma"] == [
        "nl.mean", "nl.mean", "nl.mean", "nl.mean",  # the mean: reduce, scale (then var's own mean)
        "nl.var", "nl.var", "nl.mean", "nl.mean"]


def test_binary_dispatch_and_store_sources_are_shared(rng):
    """nl binary ops pick tensor_scalar / partition broadcast / tensor_tensor by one rule
    (lowering.binary) and nl.store reads a PSUM tile through the same inserted copy
    (lowering.store_source) in both namespaces."""
    x = rng.standard_normal((64, 96)).astype(np.float32)
    col = rng.standard_normal((64, 1)).astype(np.float32)
    row = rng.standard_normal((1, 96)).astype(np.float32)
    a, b, tl, tn = _both(tk.binary_legacy, tk.binary_new, x, col, row)
    assert np.array_equal(a, b)
    assert np.array_equal(b[0], x - col) and np.allclose(b[1], 2 * (row + x))
    row_of = lambda tr: [(i.engine, i.opcode, i.meta.get("api")) for i in tr.instructions]  # noqa: E731
    assert row_of(tl) == row_of(tn)
    assert [r for r in row_of(tn) if r[0] != "dma"] == [
        ("vector", "tensor_scalar", "nl.subtract"),  # (P, 1) operand
        ("tensor", "nc_matmul", "partition broadcast"), ("vector", "tensor_tensor", "nl.add"),  # (1, F) operand
        ("vector", "tensor_scalar", "nl.multiply"),  # 2.0 * tile
        ("tensor", "nc_matmul", "nl.matmul"), ("vector", "tensor_copy", "nl.store (psum->sbuf)")]


def test_transpose_and_matmul_placement_are_one_lowering(rng):
    """nl.transpose and nl.matmul's operands (a PSUM input copied to SBUF, marked `inserted`; x
    transposed by TensorE) are lowered once (lowering.transpose / matmul_operands) for both
    namespaces: the same values and the same instructions."""
    x = rng.standard_normal((64, 96)).astype(np.float32)
    y = rng.standard_normal((96, 64)).astype(np.float32)
    (a, am), (b, bm), tl, tn = _both(tk.transposes_legacy, tk.transposes_new, x, y)
    assert np.array_equal(a, b) and np.array_equal(am, bm)
    np.testing.assert_array_equal(b[0], x.T)
    np.testing.assert_array_equal(b[1], x.T)
    np.testing.assert_allclose(bm, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-3)
    row_of = lambda tr: [(i.engine, i.opcode, i.meta.get("api"), i.meta.get("inserted"))  # noqa: E731
                         for i in tr.instructions]
    assert row_of(tl) == row_of(tn)
    inserted = [r[2] for r in row_of(tn) if r[3] == "psum->sbuf"]
    assert inserted == ["nl.transpose (x psum->sbuf, inserted by the compiler)"] * 3 + [
        "nl.matmul (y psum->sbuf, inserted by the compiler)"]

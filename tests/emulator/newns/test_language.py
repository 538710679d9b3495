"""nki.language (0.3+): the convenience wrappers over nki.isa, creation helpers, plain-Python and
run-time loops with registers, and the single-device collectives."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.collectives as ncoll
import nki.isa as nisa
import nki.language as nl
import nki.tensor as ntensor
from nkitui import emulator

F32 = np.float32


def test_load_compute_store_wrappers(rng):
    @nki.jit
    def k(a, b, w):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        s = nl.add(nl.multiply(x, 2.0), y)  # scalar and tile operands
        e = nl.exp(nl.subtract(s, nl.max(s, axis=1, keepdims=True)))  # (P,1) operand -> tensor_scalar
        r = nl.multiply(e, nl.load(w))  # (1, F) operand -> partition broadcast on TensorE
        nl.store(out, r)
        return out

    a, b = rng.random((64, 32)).astype(F32), rng.random((64, 32)).astype(F32)
    w = rng.random((1, 32)).astype(F32)
    s = a * 2 + b
    assert np.allclose(k(a, b, w), np.exp(s - s.max(1, keepdims=True)) * w, rtol=1e-6)


def test_matmul_transpose_softmax_rms_norm(rng):
    @nki.jit
    def k(x, y, w):
        X, Y = nl.load(x), nl.load(y)
        mm_t = nl.copy(nl.matmul(X, Y, transpose_x=True))  # X.T @ Y
        mm = nl.copy(nl.matmul(nl.copy(nl.transpose(X)), Y))  # x @ y with x = X.T: matmul transposes x on TensorE
        sm = nl.softmax(Y)
        rn = nl.rms_norm(Y, nl.load(w), axis=1, n=y.shape[1], epsilon=1e-5)
        outs = []
        for t in (mm_t, mm, sm, rn):
            o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            nl.store(o, t)
            outs.append(o)
        return tuple(outs)

    x = rng.standard_normal((64, 32)).astype(F32)
    y = rng.standard_normal((64, 48)).astype(F32)
    w = rng.random((1, 48)).astype(F32)
    mm_t, mm, sm, rn = k(x, y, w)
    assert np.allclose(mm_t, x.T @ y, rtol=1e-5, atol=1e-5)
    assert np.allclose(mm, x.T @ y, rtol=1e-5, atol=1e-5)
    e = np.exp(y - y.max(1, keepdims=True))
    assert np.allclose(sm, e / e.sum(1, keepdims=True), rtol=1e-5)
    assert np.allclose(rn, y / np.sqrt((y * y).mean(1, keepdims=True) + 1e-5) * w, rtol=1e-5)


def test_reductions_where_sin_rsqrt_and_casts(rng):
    @nki.jit
    def k(a):
        x = nl.load(a)
        outs = [nl.sum(x, axis=1), nl.mean(x, axis=1), nl.var(x, axis=1), nl.where(nl.greater(x, 0.5), x, 0.0),
                nl.sin(nl.multiply(x, 20.0)), nl.rsqrt(nl.add(x, 1.0)), nl.copy(x, dtype=nl.bfloat16)]
        res = []
        for t in outs:
            o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            nl.store(o, t)
            res.append(o)
        return tuple(res)

    a = rng.random((16, 40)).astype(F32)
    s, m, v, w, sn, rs, bf = k(a)
    assert np.allclose(s[:, 0], a.sum(1), rtol=1e-6)
    assert np.allclose(m[:, 0], a.mean(1), rtol=1e-6)
    assert np.allclose(v[:, 0], a.var(1), rtol=1e-4)
    assert np.array_equal(w, np.where(a > 0.5, a, 0))
    assert np.allclose(sn, np.sin(a * 20), atol=1e-4)  # nl.sin reduces the range first (20 rad works)
    assert np.allclose(rs, 1 / np.sqrt(a + 1), rtol=1e-6)
    assert bf.dtype == ml_dtypes.bfloat16 and np.array_equal(bf, a.astype(ml_dtypes.bfloat16))


def test_creation_helpers_and_shared_constants():
    @nki.jit
    def k():
        z = nl.zeros((8, 4), dtype=nl.float32)
        f = nl.full((8, 4), 2.5, dtype=nl.float32)
        c = nl.shared_constant(ntensor.arange(0, 32, 1, dtype=nl.int32).reshape(8, 4), dtype=nl.float32)
        eye = nl.shared_identity_matrix(8, dtype=nl.bfloat16)  # an SBUF tile (NKI 0.4+ docs)
        assert eye.buffer == nl.sbuf
        outs = []
        for t in (z, f, eye):
            o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=t)
            outs.append(o)
        return outs[0], outs[1], c, outs[2]

    z, f, c, eye = k()
    assert not z.any() and (f == 2.5).all()
    assert np.array_equal(c, np.arange(32, dtype=F32).reshape(8, 4))
    assert eye.dtype == ml_dtypes.bfloat16 and np.array_equal(eye, np.eye(8))


def test_hbm_tensors_cannot_be_created_with_values():
    @nki.jit
    def k():
        return nl.zeros((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)

    with pytest.raises(emulator.KernelArgumentError, match="cannot create an HBM tensor"):
        k()


def test_loops_are_plain_python():
    count = {}

    @nki.jit
    def k(a):
        val = 0
        for _ in nl.affine_range(8):
            val += 1
        count["affine"] = val
        count["static"] = sum(1 for _ in nl.static_range(2, 10, 2))
        count["sequential"] = list(nl.sequential_range(3))
        return a

    k(np.zeros(2, F32))
    assert count == {"affine": 8, "static": 4, "sequential": [0, 1, 2]}


def test_fori_loop_with_a_register_bound_and_register_offsets(rng):
    @nki.jit
    def k(a, n_in):
        F = a.shape[1]
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        zero = nl.zeros((1, F), dtype=a.dtype)
        for r in range(a.shape[0]):
            nisa.dma_copy(dst=out[r:r + 1, :], src=zero)
        ub = nisa.register_alloc()
        nsb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=nsb, src=n_in)
        nisa.register_load(ub, nsb)

        def body(i):
            row = nl.ndarray((1, F), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=a.ap(pattern=[[F, 1], [1, F]], offset=0, scalar_offset=i, indirect_dim=0))
            nisa.dma_copy(dst=out[nl.ds(i, 1), :], src=row)

        nl.fori_loop(0, ub, body)
        return out

    a = rng.random((6, 8)).astype(F32)
    out = k(a, np.array([[4]], np.int32))
    assert np.array_equal(out[:4], a[:4]) and not out[4:].any()


def test_while_loop_counts_down_through_sbuf():
    @nki.jit
    def k(start):
        cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cnt, src=start)
        total = nl.zeros((1, 1), dtype=nl.int32)
        reg = nisa.register_alloc(cnt)

        def body(r):
            nisa.tensor_scalar(dst=total, data=total, op0=nl.add, operand0=1.0)
            nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1.0)
            nxt = nisa.register_alloc()
            nisa.register_load(nxt, cnt)
            return nxt

        nl.while_loop(reg, body)
        back = nisa.register_alloc(5)
        nisa.register_move(back, reg)
        stored = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(stored, back)
        outs = []
        for t in (total, stored):
            o = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=t)
            outs.append(o)
        return tuple(outs)

    total, stored = k(np.array([[5]], np.int32))
    assert total[0, 0] == 5 and stored[0, 0] == 5


def test_dynamic_range_yields_registers():
    seen = []

    @nki.jit
    def k(a):
        for i in nl.dynamic_range(2, 5):
            seen.append((type(i).__name__, int(i)))
        return a

    k(np.zeros(2, F32))
    assert seen == [("VirtualRegister", 2), ("VirtualRegister", 3), ("VirtualRegister", 4)]


def test_single_device_collectives(rng):
    @nki.jit
    def k(a):
        g = ncoll.ReplicaGroup([[0]])
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ncoll.all_reduce(srcs=[a], dsts=[out], replica_group=g, op=nl.add)
        assert ncoll.rank_id() == 0
        return out

    a = rng.random((4, 8)).astype(F32)
    assert np.array_equal(k(a), a)

    @nki.jit
    def multi(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ncoll.all_gather(srcs=[a], dsts=[out], replica_group=ncoll.ReplicaGroup([[0, 1]]), collective_dim=0)
        return out

    with pytest.raises(emulator.UnsupportedError, match=r"names rank\(s\) \[1\].*nki.multi_rank_simulate"):
        multi(a)  # a single-rank launch; several ranks run through nki.multi_rank_simulate

"""One small kernel per nki.isa instruction, written in the NKI 0.3+ style (destination first, no
masks), each checked against a numpy golden."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa.constants import oob_mode
from tests.emulator.newns.tile_io import load as _load, store as _store

F32 = np.float32


# -- data movement -------------------------------------------------------------------------------------
def test_dma_copy_casts_through_fp32_and_rounds_to_bf16(rng):
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)  # destination first, positionally
        return out

    a = rng.standard_normal((128, 96)).astype(F32)
    out = k(a)
    assert out.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out, a.astype(ml_dtypes.bfloat16))


def test_dma_copy_dst_rmw_op_adds_into_hbm(rng):
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=_load(a))
        nisa.dma_copy(dst=out, src=_load(b), dst_rmw_op=nl.add)
        return out

    a, b = rng.random((64, 32)).astype(F32), rng.random((64, 32)).astype(F32)
    assert np.allclose(k(a, b), a + b, rtol=0, atol=1e-7)


def test_indirect_gather_with_vector_offset_and_oob_skip(rng):
    @nki.jit
    def k(data, idx_in):
        P, F = idx_in.shape[0], data.shape[1]
        idx = _load(idx_in)
        dst = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-1.0)
        nisa.dma_copy(dst=dst, src=data.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0),
                      oob_mode=oob_mode.skip)
        return _store(dst)

    data = rng.random((40, 16)).astype(F32)
    idx = np.array([[3], [39], [0], [50], [7]] * 4, dtype=np.uint32)
    out = k(data, idx)
    for p, i in enumerate(idx[:, 0]):
        assert np.array_equal(out[p], data[i] if i < 40 else np.full(16, -1, F32))


def test_indirect_gather_out_of_bounds_is_an_error_by_default():
    @nki.jit
    def k(data, idx_in):
        idx = _load(idx_in)
        dst = nl.ndarray((2, 4), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=data.ap(pattern=[[4, 2], [1, 4]], vector_offset=idx, indirect_dim=0))
        return _store(dst)

    with pytest.raises(nki.isa.NkiValidationError, match="out-of-bound"):
        k(np.zeros((3, 4), F32), np.array([[0], [9]], dtype=np.uint32))


def test_indirect_scatter_with_vector_offset(rng):
    @nki.jit
    def k(src_data, idx_in, base):
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=_load(base))
        P, F = src_data.shape
        nisa.dma_copy(dst=out.ap(pattern=[[F, P], [1, F]], vector_offset=_load(idx_in), indirect_dim=0),
                      src=_load(src_data))
        return out

    src = rng.random((4, 8)).astype(F32)
    base = np.zeros((10, 8), F32)
    idx = np.array([[9], [2], [5], [0]], dtype=np.uint32)
    expect = base.copy()
    expect[idx[:, 0]] = src
    assert np.array_equal(k(src, idx, base), expect)


def test_dma_compute_scatter_add(rng):
    @nki.jit
    def k(vals, idx_in, base):
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=_load(base))
        P, F = vals.shape
        rows = out.ap(pattern=[[F, P], [1, F]], vector_offset=_load(idx_in), indirect_dim=0)
        nisa.dma_compute(dst=rows, srcs=[rows, _load(vals)], reduce_op=nl.add)
        return out

    vals = rng.random((3, 4)).astype(F32)
    base = rng.random((6, 4)).astype(F32)
    idx = np.array([[5], [1], [3]], dtype=np.uint32)
    expect = base.copy()
    expect[idx[:, 0]] += vals
    assert np.allclose(k(vals, idx, base), expect, rtol=0, atol=1e-7)


def test_dma_transpose_2d(rng):
    @nki.jit
    def k(a):
        t = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        return _store(t)

    a = rng.random((64, 32)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(k(a), a.T)


def test_dma_transpose_wants_the_exact_transposed_shape():
    @nki.jit
    def k(a):
        t = nl.ndarray((32, 2, 32), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="exactly the transposed source shape"):
        k(np.zeros((64, 32), ml_dtypes.bfloat16))


def test_dma_copy_cannot_read_psum():
    @nki.jit
    def k(a):
        ps = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=ps, value=0.0)
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=ps)
        return out

    with pytest.raises(nki.isa.NkiValidationError, match="DMA cannot access PSUM"):
        k(np.zeros(1, F32))


def test_tensor_copy_bit_exact_and_casting(rng):
    @nki.jit
    def k(a):
        x = _load(a)
        same = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=same, src=x, engine=nisa.gpsimd_engine)
        half = nl.ndarray(a.shape, dtype=nl.float16, buffer=nl.sbuf)
        nisa.tensor_copy(half, x)
        return _store(same), _store(half)

    a = rng.integers(-2**31, 2**31 - 1, size=(16, 8)).astype(np.int32)
    same, half = k(a)
    assert np.array_equal(same, a)  # bit exact (no fp32 round trip)
    with np.errstate(over="ignore"):  # int32 beyond fp16's range becomes inf, as on the device
        assert np.array_equal(half, a.astype(F32).astype(np.float16))


def test_memset_value_must_match_the_dtype():
    @nki.jit
    def ok():
        t = nl.ndarray((8, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=3)
        f = nl.ndarray((8, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=f, value=0)
        return _store(t), _store(f)

    a, b = ok()
    assert (a == 3).all() and (b == 0).all()

    @nki.jit
    def bad():
        t = nl.ndarray((8, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.5)
        return _store(t)

    with pytest.raises(nki.isa.NkiValidationError, match="value type must match"):
        bad()


def test_iota_pattern_offset_and_channel_multiplier():
    @nki.jit
    def k():
        t = nl.ndarray((4, 2, 3), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[10, 2], [1, 3]], offset=5, channel_multiplier=100)
        return _store(t)

    p, a, b = np.meshgrid(np.arange(4), np.arange(2), np.arange(3), indexing="ij")
    assert np.array_equal(k(), 5 + 100 * p + 10 * a + b)


# -- VectorE / ScalarE ------------------------------------------------------------------------------------
def test_tensor_tensor_ops(rng):
    @nki.jit
    def k(a, b):
        x, y = _load(a), _load(b)
        r = []
        for op in (nl.add, nl.subtract, nl.multiply, nl.maximum, nl.divide):
            o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=o, data1=x, data2=y, op=op)
            r.append(_store(o))
        return tuple(r)

    a, b = rng.random((32, 20)).astype(F32) + 0.5, rng.random((32, 20)).astype(F32) + 0.5
    got = k(a, b)
    for g, e in zip(got, (a + b, a - b, a * b, np.maximum(a, b), a / b)):
        assert np.array_equal(g, e.astype(F32))


def test_tensor_tensor_operands_follow_the_documented_rule(rng):
    """nki.isa.tensor_tensor: the two tiles have the same partitions and the same number of elements
    per partition (any shapes); a (P, 1) operand is not broadcast (the legacy namespace's
    exception, engine.tensor_tensor_operands, needs evidence this namespace lacks)."""
    import nkitui.emulator as emulator

    @nki.jit
    def k(a, b):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=_load(a), data2=_load(b), op=nl.subtract)
        return _store(o)

    a = rng.random((32, 4, 5)).astype(F32)
    b = rng.random((32, 20)).astype(F32)
    assert np.array_equal(k(a, b), a - b.reshape(a.shape))  # same elements per partition, another shape
    with pytest.raises(emulator.OperandShapeError,
                       match=r"elements per partition \(use tensor_scalar to broadcast a \(P, 1\) operand\) at "
                             r"test_conformance_isa.py:\d+"):
        k(a.reshape(32, 20), b[:, :1].copy())
    with pytest.raises(emulator.OperandShapeError, match=r"data1 \(32, 20\) and data2 \(32, 10\)"):
        k(a.reshape(32, 20), b[:, :10].copy())


def test_tensor_tensor_int32_defaults_to_exact_gpsimd_math():
    @nki.jit
    def k(a, b):
        o = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=_load(a), data2=_load(b), op=nl.add)
        return _store(o)

    a = np.full((4, 4), 2**25 + 1, np.int32)
    b = np.ones((4, 4), np.int32)
    assert np.array_equal(k(a, b), a + b)  # exact above 2**24


def test_tensor_scalar_two_ops_vector_operand_and_reverse(rng):
    @nki.jit
    def k(a, s):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=_load(a), op0=nl.subtract, operand0=_load(s), reverse0=True,
                           op1=nl.multiply, operand1=3.0)
        return _store(o)

    a, s = rng.random((16, 8)).astype(F32), rng.random((16, 1)).astype(F32)
    assert np.allclose(k(a, s), (s - a) * 3, rtol=1e-6)


def test_tensor_scalar_operand_tiles_must_be_fp32():
    @nki.jit
    def k(a, s):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=_load(a), op0=nl.add, operand0=_load(s))
        return _store(o)

    with pytest.raises(nki.isa.NkiValidationError, match="operand0 must be float32"):
        k(np.zeros((4, 4), F32), np.zeros((4, 1), ml_dtypes.bfloat16))


def test_scalar_tensor_tensor(rng):
    @nki.jit
    def k(a, b):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=o, data=_load(a), op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=_load(b))
        return _store(o)

    a, b = rng.random((8, 8)).astype(F32), rng.random((8, 8)).astype(F32)
    assert np.array_equal(k(a, b), (a * F32(2) + b).astype(F32))


def test_tensor_scalar_reduce_accumulates_across_calls_with_reduce_cmd(rng):
    @nki.jit
    def k(a, b):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        r1 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        r2 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=o, data=_load(a), op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                                  reduce_res=r1)
        nisa.tensor_scalar_reduce(dst=o, data=_load(b), op0=nl.multiply, operand0=1.0, reduce_op=nl.add,
                                  reduce_res=r2, reduce_cmd=nisa.reduce_cmd.reduce)
        return _store(r1), _store(r2)

    a, b = rng.random((8, 16)).astype(F32), rng.random((8, 16)).astype(F32)
    r1, r2 = k(a, b)
    assert np.allclose(r1[:, 0], (2 * a).sum(1), rtol=1e-6)
    assert np.allclose(r2[:, 0], (2 * a).sum(1) + b.sum(1), rtol=1e-6)


def test_tensor_scalar_cumulative(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=o, src=_load(a), op0=nl.multiply, op1=nl.add, imm0=2.0)
        return _store(o)

    a = rng.random((8, 12)).astype(F32)
    assert np.allclose(k(a), np.cumsum(2 * a, axis=1), rtol=1e-5)


def test_tensor_reduce_axes_keepdims_negate(rng):
    @nki.jit
    def k(a):
        x = _load(a)
        s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=x, axis=(1, 2))
        m = nl.ndarray((a.shape[0], a.shape[1], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=m, op=nl.maximum, data=x, axis=2, keepdims=True, negate=True)
        return _store(s), _store(m)

    a = rng.random((16, 3, 5)).astype(F32)
    s, m = k(a)
    assert np.allclose(s[:, 0], a.sum(axis=(1, 2)), rtol=1e-6)
    assert np.array_equal(m, -a.max(axis=2, keepdims=True))


def test_tensor_partition_reduce(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=o, op=nl.maximum, data=_load(a))
        return _store(o)

    a = rng.random((32, 10)).astype(F32)
    assert np.array_equal(k(a), a.max(axis=0, keepdims=True))


def test_tensor_tensor_scan_with_tile_initial(rng):
    @nki.jit
    def k(a, b, h0):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=o, data0=_load(a), data1=_load(b), initial=_load(h0), op0=nl.multiply,
                                op1=nl.add)
        return _store(o)

    a, b, h0 = rng.random((8, 20)).astype(F32), rng.random((8, 20)).astype(F32), rng.random((8, 1)).astype(F32)
    h = h0[:, 0].copy()
    expect = np.empty_like(a)
    for t in range(20):
        h = (a[:, t] * h + b[:, t]).astype(F32)
        expect[:, t] = h
    assert np.array_equal(k(a, b, h0), expect)


def test_activation_with_scale_bias_and_reduce(rng):
    @nki.jit
    def k(a, bias):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=o, op=nl.exp, data=_load(a), bias=_load(bias), scale=0.5, reduce_op=nl.add,
                        reduce_res=s)
        return _store(o), _store(s)

    a, bias = rng.random((16, 24)).astype(F32), rng.random((16, 1)).astype(F32)
    o, s = k(a, bias)
    e = np.exp(a * F32(0.5) + bias)
    assert np.allclose(o, e, rtol=1e-6)
    assert np.allclose(s[:, 0], e.sum(1), rtol=1e-5)


def test_activation_reduce(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=o, op=nl.square, data=_load(a), reduce_op=nl.add, reduce_res=s)
        return _store(s)

    a = rng.standard_normal((16, 30)).astype(F32)
    assert np.allclose(k(a)[:, 0], (a * a).sum(1), rtol=1e-5)


def test_reciprocal_and_nl_wrappers_as_ops(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=o, data=_load(a))
        return _store(o)

    a = rng.random((8, 8)).astype(F32) + 1
    assert np.array_equal(k(a), (F32(1) / a).astype(F32))


def test_affine_select_causal_mask(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        # keep where p - j >= 0 (causal), else -1e9
        nisa.affine_select(dst=o, pattern=[[-1, a.shape[1]]], channel_multiplier=1, on_true_tile=_load(a),
                           on_false_value=-1e9, cmp_op=nl.greater_equal)
        return _store(o)

    a = rng.random((16, 16)).astype(F32)
    p, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    assert np.array_equal(k(a), np.where(p - j >= 0, a, F32(-1e9)))


def test_range_select_and_select_reduce(rng):
    @nki.jit
    def k(a, lo, hi, pred):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=o, on_true_tile=_load(a), comp_op0=nl.greater_equal, comp_op1=nl.less,
                          bound0=_load(lo), bound1=_load(hi), reduce_res=m)
        s = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=s, predicate=_load(pred), on_true=_load(a), on_false=0.0)
        return _store(o), _store(m), _store(s)

    a = rng.random((8, 10)).astype(F32)
    lo = np.full((8, 1), 2, F32)
    hi = np.full((8, 1), 6, F32)
    pred = (rng.random((8, 10)) > 0.5).astype(np.uint8)
    o, m, s = k(a, lo, hi, pred)
    keep = (np.arange(10) >= 2) & (np.arange(10) < 6)
    exp = np.where(keep, a, np.finfo(F32).min)
    assert np.array_equal(o, exp)
    assert np.array_equal(m[:, 0], exp.max(1))
    assert np.array_equal(s, np.where(pred != 0, a, 0))


@pytest.mark.parametrize("which", ["range_select", "select_reduce"])
def test_range_and_select_reduce_name_a_reduce_op_that_does_not_reduce(rng, which):
    # nl.divide has no reduction: the kernel's error says so (it was a TypeError from inside the emulator)
    @nki.jit
    def k(a, lo, hi, pred):
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if which == "range_select":
            nisa.range_select(dst=o, on_true_tile=_load(a), comp_op0=nl.greater_equal, comp_op1=nl.less,
                              bound0=_load(lo), bound1=_load(hi), reduce_res=m, reduce_op=nl.divide)
        else:
            nisa.select_reduce(dst=o, predicate=_load(pred), on_true=_load(a), on_false=0.0, reduce_res=m,
                               reduce_op=nl.divide)
        return _store(m)

    a = rng.random((8, 10)).astype(F32)
    bound = np.full((8, 1), 2, F32)
    with pytest.raises(nki.isa.NkiValidationError, match="divide is not a reduction operator"):
        k(a, bound, bound, np.ones((8, 10), np.uint8))


def test_bn_stats_and_bn_aggr(rng):
    @nki.jit
    def k(a):
        x = _load(a)
        st = nl.ndarray((a.shape[0], 12), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=st[:, 0:6], data=x[:, 0:512])
        nisa.bn_stats(dst=st[:, 6:12], data=x[:, 512:1024])
        mv = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=st)
        return _store(mv)

    a = rng.standard_normal((32, 1024)).astype(F32) + 3
    mv = k(a)
    assert np.allclose(mv[:, 0], a.mean(1), rtol=1e-5)
    assert np.allclose(mv[:, 1], a.var(1), rtol=1e-4)


def test_dropout_extremes(rng):
    @nki.jit
    def k(a):
        x = _load(a)
        keep = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        drop = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=keep, data=x, prob=0.0)
        nisa.dropout(dst=drop, data=x, prob=1.0)
        return _store(keep), _store(drop)

    a = rng.random((8, 8)).astype(F32)
    keep, drop = k(a)
    assert np.array_equal(keep, a) and not drop.any()


def test_max8_find_index8_match_replace8(rng):
    @nki.jit
    def k(a):
        x = _load(a)
        top = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=top, src=x)
        idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=idx, data=x, vals=top)
        rep = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        idx2 = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=rep, data=x, vals=top, imm=-1.0, dst_idx=idx2)
        return _store(top), _store(idx), _store(rep), _store(idx2)

    a = rng.permutation(16 * 40).reshape(16, 40).astype(F32)
    top, idx, rep, idx2 = k(a)
    order = np.argsort(-a, axis=1)[:, :8]
    assert np.array_equal(top, np.take_along_axis(a, order, 1))
    assert np.array_equal(idx, order) and np.array_equal(idx2, order)
    expect = a.copy()
    np.put_along_axis(expect, order, -1.0, 1)
    assert np.array_equal(rep, expect)


def test_nc_stream_shuffle_within_quadrants(rng):
    @nki.jit
    def k(a):
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=o, value=0.0)
        mask = [31 - i for i in range(31)] + [255]
        nisa.nc_stream_shuffle(dst=o, src=_load(a), shuffle_mask=mask)
        return _store(o)

    a = rng.random((64, 4)).astype(F32)
    out = k(a)
    for q in range(2):
        for i in range(31):
            assert np.array_equal(out[32 * q + i], a[32 * q + 31 - i])
        assert not out[32 * q + 31].any()  # 255: left unchanged


def test_nc_transpose_tensor_and_vector_engines(rng):
    @nki.jit
    def k(a, b):
        ps = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=_load(a))
        v = nl.ndarray((b.shape[1], b.shape[0]), dtype=b.dtype, buffer=nl.sbuf)
        nisa.nc_transpose(dst=v, data=_load(b), engine=nisa.vector_engine)
        return _store(ps), _store(v)

    a = rng.random((128, 96)).astype(F32)
    b = rng.random((32, 16)).astype(F32)
    ta, tb = k(a, b)
    assert np.array_equal(ta, a.T) and np.array_equal(tb, b.T)


def test_nc_matmul_accumulate_none_true_false(rng):
    @nki.jit
    def k(x, y):
        X, Y = _load(x), _load(y)
        auto = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.psum)
        for _ in range(3):  # accumulate=None: the first write overwrites, the rest accumulate
            nisa.nc_matmul(auto, X, Y)
        fresh = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(fresh, X, Y, accumulate=False)
        nisa.nc_matmul(fresh, X, Y, accumulate=True)
        nisa.nc_matmul(fresh, X, Y, accumulate=False)  # overwrites again
        return _store(auto), _store(fresh)

    x = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    ref = x.astype(F32).T.astype(np.float64) @ y.astype(F32)
    auto, fresh = k(x, y)
    assert np.allclose(auto, 3 * ref, rtol=1e-5, atol=1e-4)
    assert np.allclose(fresh, ref, rtol=1e-5, atol=1e-4)


def test_nc_matmul_is_transpose_keeps_the_dtype(rng):
    @nki.jit
    def k(a, ident):
        ps = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.psum)
        nisa.nc_matmul(ps, _load(a), _load(ident), is_transpose=True)
        return _store(ps)

    a = rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(k(a, np.eye(32, dtype=ml_dtypes.bfloat16)), a.T)


def test_nc_n_gather_and_nonzero_with_count(rng):
    @nki.jit
    def k(a, idx, z):
        g = nl.ndarray(idx.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=g, data=_load(a), indices=_load(idx))
        nz = nl.ndarray((z.shape[0], z.shape[1] + 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=nz, value=0)
        nisa.nonzero_with_count(dst=nz, src=_load(z), index_offset=16, padding_val=-1)
        return _store(g), _store(nz)

    a = rng.random((16, 20)).astype(F32)
    idx = rng.integers(0, 20, size=(16, 7)).astype(np.uint32)
    z = np.zeros((32, 8), np.int32)
    z[0] = [0, 1, 1, 0, 0, 1, 0, 0]
    z[16] = [2, 0, 0, 0, 0, 0, 0, 3]
    g, nz = k(a, idx, z)
    assert np.array_equal(g, np.take_along_axis(a, idx.astype(np.int64), 1))
    assert nz[0].tolist() == [17, 18, 21, -1, -1, -1, -1, -1, 3]
    assert nz[16].tolist() == [16, 23, -1, -1, -1, -1, -1, -1, 2]
    assert not nz[1].any()  # partitions other than 0, 16, ... are not written


def test_tensor_copy_predicated(rng):
    @nki.jit
    def k(a, pred):
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=o, value=-5.0)
        nisa.tensor_copy_predicated(dst=o, src=_load(a), predicate=_load(pred))
        return _store(o)

    a = rng.random((8, 8)).astype(F32)
    pred = (rng.random((8, 8)) > 0.5).astype(np.uint8)
    assert np.array_equal(k(a, pred), np.where(pred != 0, a, F32(-5)))


def test_removed_apis_and_masks_raise_clear_errors():
    @nki.jit
    def masked(a):
        t = _load(a)
        nisa.tensor_copy(dst=t, src=t, mask=object())
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="mask= was removed in NKI 0.3"):
        masked(np.zeros((4, 4), F32))

    @nki.jit
    def wrong_dtype(a):
        t = _load(a)
        nisa.tensor_copy(dst=t, src=t, dtype=nl.bfloat16)
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="the output dtype is dst's"):
        wrong_dtype(np.zeros((4, 4), F32))

    @nki.jit
    def removed(a):
        nisa.tensor_copy_dynamic_src(_load(a))
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="removed in NKI 0.4"):
        removed(np.zeros((4, 4), F32))

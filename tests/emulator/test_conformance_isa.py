"""One small kernel per nki.isa instruction (legacy return style), each against a numpy golden."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator

F32 = np.float32


def _out(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def test_nc_matmul_contracts_over_partitions(rng):
    @nki.jit
    def k(a, b):
        out = _out((64, 200))
        nl.store(out, nisa.nc_matmul(nl.load(a), nl.load(b)))
        return out

    a = rng.standard_normal((96, 64)).astype(F32)
    b = rng.standard_normal((96, 200)).astype(F32)
    np.testing.assert_allclose(k(a, b), a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_nc_matmul_is_transpose_is_bit_exact(rng):
    @nki.jit
    def k(a):
        out = _out((48, 32), nl.bfloat16)
        eye = nl.load(nl.shared_identity_matrix(32, dtype=nl.bfloat16))
        nl.store(out, nisa.nc_matmul(nl.load(a), eye, is_transpose=True))
        return out

    a = rng.standard_normal((32, 48)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(k(a), a.T)


@pytest.mark.parametrize("engine", ["tensor", "vector"])
def test_nc_transpose(engine, rng):
    @nki.jit
    def k(a):
        out = _out((a.shape[1], a.shape[0]))
        eng = nisa.tensor_engine if engine == "tensor" else nisa.vector_engine
        nl.store(out, nisa.nc_transpose(nl.load(a), engine=eng))
        return out

    a = rng.standard_normal((32, 24) if engine == "vector" else (128, 100)).astype(F32)
    with emulator.trace() as tr:
        np.testing.assert_array_equal(k(a), a.T)
    assert [i.engine for i in tr if i.opcode == "nc_transpose"] == [engine]


def test_activation_scale_bias_and_reduce(rng):
    @nki.jit
    def k(x, s, b):
        out = _out(x.shape)
        red = _out((x.shape[0], 1))
        acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        y = nisa.activation(op=nl.tanh, data=nl.load(x), scale=nl.load(s), bias=nl.load(b), reduce_op=nl.add,
                            reduce_res=acc)
        nl.store(out, y)
        nl.store(red, acc)
        return out, red

    x = rng.standard_normal((128, 300)).astype(F32)
    s = rng.random((128, 1)).astype(F32)
    b = rng.random((128, 1)).astype(F32)
    y, r = k(x, s, b)
    golden = np.tanh(x.astype(np.float64) * s + b)
    np.testing.assert_allclose(y, golden, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r[:, 0], golden.sum(1), rtol=1e-5)


def test_activation_reduce(rng):
    @nki.jit
    def k(x):
        out = _out(x.shape)
        sums = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        y = nisa.activation_reduce(op=np.square, data=nl.load(x), reduce_op=np.add, reduce_res=sums, scale=2.0)
        nl.store(out, y)
        red = _out((x.shape[0], 1))
        nl.store(red, sums)
        return out, red

    x = rng.standard_normal((64, 100)).astype(F32)
    y, r = k(x)
    np.testing.assert_allclose(y, (2 * x) ** 2, rtol=1e-6)
    np.testing.assert_allclose(r[:, 0], ((2 * x.astype(np.float64)) ** 2).sum(1), rtol=1e-5)


BINARY_GOLDENS = {
    np.add: np.add, np.subtract: np.subtract, np.multiply: np.multiply, np.divide: np.divide,
    np.maximum: np.maximum, np.minimum: np.minimum, nl.power: np.power,
    nl.greater: lambda a, b: (a > b).astype(F32), nl.less_equal: lambda a, b: (a <= b).astype(F32),
    nl.equal: lambda a, b: (a == b).astype(F32),
}


@pytest.mark.parametrize("op", list(BINARY_GOLDENS), ids=lambda o: getattr(o, "__name__", str(o)))
def test_tensor_tensor_ops(op, rng):
    @nki.jit
    def k(a, b):
        out = _out(a.shape)
        nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=op, dtype=nl.float32))
        return out

    a = rng.random((128, 64)).astype(F32) + 0.5
    b = rng.random((128, 64)).astype(F32) + 0.5
    b[0, :4] = a[0, :4]
    np.testing.assert_allclose(k(a, b), BINARY_GOLDENS[op](a, b), rtol=1e-6)


def test_tensor_tensor_bitwise_on_integers():
    @nki.jit
    def k(a, b):
        out = _out(a.shape, nl.int32)
        x, y = nl.load(a), nl.load(b)
        nl.store(out, nisa.tensor_tensor(nisa.tensor_tensor(x, y, op=np.bitwise_and), y, op=nl.bitwise_xor))
        return out

    a = np.arange(128 * 8, dtype=np.int32).reshape(128, 8) * 7919
    b = np.full((128, 8), 0x0F0F0F0F, dtype=np.int32)
    np.testing.assert_array_equal(k(a, b), (a & b) ^ b)


def test_tensor_scalar_two_ops_and_reverse(rng):
    @nki.jit
    def k(x, v):
        out = _out(x.shape)
        vec = nl.load(v)
        y = nisa.tensor_scalar(nl.load(x), np.subtract, vec, reverse0=True, op1=np.multiply, operand1=3.0)
        nl.store(out, y)
        return out

    x = rng.random((128, 40)).astype(F32)
    v = rng.random((128, 1)).astype(F32)
    np.testing.assert_allclose(k(x, v), (v - x) * 3.0, rtol=1e-6)


@pytest.mark.parametrize("keepdims", [False, True])
def test_tensor_reduce_axis_keepdims_negate(keepdims, rng):
    @nki.jit
    def k(x):
        out = _out((128, 4, 1) if keepdims else (128, 4))
        nl.store(out, nisa.tensor_reduce(np.max, nl.load(x), axis=(2,), negate=True, keepdims=keepdims))
        return out

    x = rng.standard_normal((128, 4, 30)).astype(F32)
    np.testing.assert_array_equal(k(x), -x.max(axis=2, keepdims=keepdims))


def test_tensor_reduce_multiple_axes(rng):
    @nki.jit
    def k(x):
        out = _out((128, 1))
        nl.store(out, nisa.tensor_reduce(np.add, nl.load(x), axis=[1, 2]))
        return out

    x = rng.standard_normal((128, 4, 30)).astype(F32)
    np.testing.assert_allclose(k(x)[:, 0], x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


def test_tensor_copy_bit_exact_and_cast():
    @nki.jit
    def k(a):
        same = _out(a.shape, nl.int32)
        cast = _out(a.shape, nl.float32)
        t = nl.load(a)
        nl.store(same, nisa.tensor_copy(t, engine=nisa.gpsimd_engine))
        nl.store(cast, nisa.tensor_copy(t, dtype=nl.float32))
        return same, cast

    a = np.array([[2**31 - 1, -(2**31), 16777217, 3]] * 4, dtype=np.int32)
    same, cast = k(a)
    np.testing.assert_array_equal(same, a)  # same dtype: bit-exact, even above 2^24
    np.testing.assert_array_equal(cast, a.astype(np.float32))


def test_iota_affine_expression():
    @nki.jit
    def k():
        out = _out((128, 64), nl.int32)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        nl.store(out, nisa.iota(i_p * 64 + 2 * i_f + 5, dtype=nl.int32))
        return out

    p, f = np.mgrid[0:128, 0:64]
    np.testing.assert_array_equal(k(), p * 64 + 2 * f + 5)


def test_iota_of_mgrid_components_is_dense():
    """nl.mgrid components are dense grids (numpy.mgrid): an iota over two of four axes still
    fills the whole (p, x, y, z) tile, as the vision samples' select-and-scatter expects."""
    @nki.jit
    def k():
        out = _out((4, 2, 3, 3), nl.uint32)
        w = nl.mgrid[0:4, 0:2, 0:3, 0:3]
        nl.store(out, nisa.iota(3 * w.y + w.z, dtype=nl.uint32))
        return out

    np.testing.assert_array_equal(k(), np.broadcast_to(np.arange(9).reshape(1, 1, 3, 3), (4, 2, 3, 3)))


def test_memset_and_engine_choice():
    @nki.jit
    def k():
        out = _out((64, 32), nl.bfloat16)
        nl.store(out, nisa.memset((64, 32), 1.5, dtype=nl.bfloat16, engine=nisa.gpsimd_engine))
        return out

    with emulator.trace() as tr:
        out = k()
    np.testing.assert_array_equal(out, np.full((64, 32), 1.5, dtype=ml_dtypes.bfloat16))
    assert tr.instructions[0].engine == "gpsimd" and tr.instructions[0].opcode == "memset"


def test_affine_select_causal_mask(rng):
    @nki.jit
    def k(x):
        out = _out(x.shape)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        nl.store(out, nisa.affine_select(pred=(i_p >= i_f), on_true_tile=nl.load(x), on_false_value=-1e4))
        return out

    x = rng.standard_normal((128, 128)).astype(F32)
    np.testing.assert_array_equal(k(x), np.where(np.tril(np.ones((128, 128))) > 0, x, F32(-1e4)))


def test_bn_stats_and_bn_aggr(rng):
    @nki.jit
    def k(x):
        out = _out((128, 2))
        t = nl.load(x)
        stats = nl.ndarray((128, 12), dtype=nl.float32)
        stats[:, 0:6] = nisa.bn_stats(t[:, 0:512])
        stats[:, 6:12] = nisa.bn_stats(t[:, 512:900])
        nl.store(out, nisa.bn_aggr(stats))
        return out

    x = rng.standard_normal((128, 900)).astype(F32) * 3 + 1
    mv = k(x)
    np.testing.assert_allclose(mv[:, 0], x.astype(np.float64).mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mv[:, 1], x.astype(np.float64).var(1), rtol=1e-4)


def test_tensor_tensor_scan_with_tile_initial(rng):
    @nki.jit
    def k(a, b, h0):
        out = _out(a.shape)
        nl.store(out, nisa.tensor_tensor_scan(nl.load(a), nl.load(b), initial=nl.load(h0), op0=np.multiply,
                                              op1=np.add))
        return out

    a = rng.random((32, 50)).astype(F32)
    b = rng.random((32, 50)).astype(F32)
    h0 = rng.random((32, 1)).astype(F32)
    golden = np.empty((32, 50))
    h = h0[:, 0].astype(np.float64)
    for i in range(50):
        h = a[:, i] * h + b[:, i]
        golden[:, i] = h
    np.testing.assert_allclose(k(a, b, h0), golden, rtol=1e-5)


def test_dma_copy_hbm_to_sbuf_and_rmw(rng):
    @nki.jit
    def k(a, b):
        out = _out(a.shape)
        t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        nisa.dma_copy(dst=out, src=b, dst_rmw_op=np.add)
        return out

    a = rng.random((64, 32)).astype(F32)
    b = rng.random((64, 32)).astype(F32)
    np.testing.assert_allclose(k(a, b), a + b, rtol=1e-6)


def test_dma_copy_skips_out_of_bounds_indirect_rows():
    @nki.jit
    def k(table, idx):
        out = _out((4, 8))
        t = nl.zeros((4, 8), dtype=nl.float32)
        ids = nl.load(idx)
        nisa.dma_copy(dst=t, src=table[ids[nl.arange(4)[:, None], 0], nl.arange(8)[None, :]],
                      oob_mode=nisa.oob_mode.skip)
        nl.store(out, t)
        return out

    table = np.arange(10 * 8, dtype=F32).reshape(10, 8)
    idx = np.array([[3], [11], [0], [9]], dtype=np.int32)
    got = k(table, idx)
    np.testing.assert_array_equal(got[[0, 2, 3]], table[[3, 0, 9]])
    np.testing.assert_array_equal(got[1], np.zeros(8))


def test_reciprocal(rng):
    @nki.jit
    def k(x):
        out = _out(x.shape)
        nl.store(out, nisa.reciprocal(nl.load(x)))
        return out

    x = rng.random((16, 16)).astype(F32) + 0.1
    np.testing.assert_allclose(k(x), 1 / x, rtol=1e-6)


def test_scalar_tensor_tensor(rng):
    @nki.jit
    def k(x, y):
        out = _out(x.shape)
        nl.store(out, nisa.scalar_tensor_tensor(data=nl.load(x), op0=np.multiply, operand0=2.0, op1=np.subtract,
                                                operand1=nl.load(y), reverse1=True))
        return out

    x = rng.random((32, 64)).astype(F32)
    y = rng.random((32, 64)).astype(F32)
    np.testing.assert_allclose(k(x, y), y - 2 * x, rtol=1e-6)


def test_tensor_scalar_reduce(rng):
    @nki.jit
    def k(x):
        out = _out(x.shape)
        red = _out((x.shape[0], 1))
        acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        nl.store(out, nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.add, operand0=1.0, reduce_op=np.max,
                                                reduce_res=acc))
        nl.store(red, acc)
        return out, red

    x = rng.standard_normal((32, 64)).astype(F32)
    y, r = k(x)
    np.testing.assert_allclose(y, x + 1)
    np.testing.assert_allclose(r[:, 0], (x + 1).max(1))


def test_tensor_partition_reduce(rng):
    @nki.jit
    def k(x):
        out = _out((1, x.shape[1]))
        nl.store(out, nisa.tensor_partition_reduce(np.add, nl.load(x)))
        return out

    x = rng.random((64, 16)).astype(F32)
    np.testing.assert_allclose(k(x)[0], x.astype(np.float64).sum(0), rtol=1e-5)


def test_max8_find_index8_match_replace8(rng):
    @nki.jit
    def k(x):
        top = _out((16, 8))
        idx = _out((16, 8), nl.uint32)
        rep = _out(x.shape)
        t = nl.load(x)
        m = nisa.max8(src=t)
        nl.store(top, m)
        nl.store(idx, nisa.nc_find_index8(data=t, vals=m))
        nl.store(rep, nisa.nc_match_replace8(data=t, vals=m, imm=-1.0))
        return top, idx, rep

    x = rng.permutation(16 * 40).astype(F32).reshape(16, 40)
    top, idx, rep = k(x)
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(top, -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_array_equal(idx, order)
    golden = x.copy()
    np.put_along_axis(golden, order, -1.0, axis=1)
    np.testing.assert_array_equal(rep, golden)


def test_tensor_copy_predicated(rng):
    @nki.jit
    def k(x, pred):
        out = _out(x.shape)
        dst = nl.zeros(x.shape, dtype=nl.float32)
        nisa.tensor_copy_predicated(src=nl.load(x), predicate=nl.load(pred), dst=dst)
        nl.store(out, dst)
        return out

    x = rng.random((8, 16)).astype(F32)
    pred = (rng.random((8, 16)) > 0.5).astype(np.uint8)
    np.testing.assert_array_equal(k(x, pred), np.where(pred > 0, x, 0))


def test_range_select_with_max_reduce(rng):
    @nki.jit
    def k(x, lo, hi):
        out = _out(x.shape)
        red = _out((x.shape[0], 1))
        acc = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        y = nisa.range_select(on_true_tile=nl.load(x), comp_op0=np.greater_equal, comp_op1=np.less,
                              bound0=nl.load(lo), bound1=nl.load(hi), reduce_res=acc, reduce_op=np.max)
        nl.store(out, y)
        nl.store(red, acc)
        return out, red

    x = rng.standard_normal((8, 32)).astype(F32)
    lo = np.full((8, 1), 4, F32)
    hi = np.full((8, 1), 10, F32)
    y, r = k(x, lo, hi)
    keep = (np.arange(32) >= 4) & (np.arange(32) < 10)
    golden = np.where(keep, x, np.finfo(F32).min)
    np.testing.assert_array_equal(y, golden)
    np.testing.assert_array_equal(r[:, 0], golden.max(1))


def test_select_reduce(rng):
    @nki.jit
    def k(x, pred):
        out = _out(x.shape)
        dst = nl.ndarray(x.shape, dtype=nl.float32)
        nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(x), on_false=0.0)
        nl.store(out, dst)
        return out

    x = rng.random((8, 16)).astype(F32)
    pred = (rng.random((8, 16)) > 0.5).astype(np.uint8)
    np.testing.assert_array_equal(k(x, pred), np.where(pred > 0, x, 0))


def test_nc_stream_shuffle():
    @nki.jit
    def k(x):
        out = _out(x.shape)
        dst = nl.zeros(x.shape, dtype=nl.float32)
        nisa.nc_stream_shuffle(src=nl.load(x), dst=dst, shuffle_mask=list(range(31, -1, -1)))
        nl.store(out, dst)
        return out

    x = np.arange(32 * 4, dtype=F32).reshape(32, 4)
    np.testing.assert_array_equal(k(x), x[::-1])


def test_dropout_extremes(rng):
    @nki.jit
    def k(x):
        keep = _out(x.shape)
        drop = _out(x.shape)
        t = nl.load(x)
        nl.store(keep, nisa.dropout(t, 0.0))
        nl.store(drop, nisa.dropout(t, 1.0))
        return keep, drop

    x = rng.random((16, 16)).astype(F32)
    keep, drop = k(x)
    np.testing.assert_array_equal(keep, x)
    np.testing.assert_array_equal(drop, np.zeros_like(x))


def test_dma_transpose(rng):
    @nki.jit
    def k(x):
        out = _out((x.shape[1], x.shape[0]), nl.bfloat16)
        nl.store(out, nisa.dma_transpose(x))
        return out

    x = rng.random((16, 64)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(k(x), x.T)


@pytest.mark.parametrize("target,version", [("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_get_nc_version_follows_target(target, version):
    seen = []

    @nki.jit
    def k():
        seen.append(int(nisa.get_nc_version()))

    with emulator.options(target=target):
        k()
    assert seen == [version]


def test_nc_matmul_double_row_fp8():
    @nki.jit
    def k(a, b):
        out = _out((a.shape[2], b.shape[2]))
        nl.store(out, nisa.nc_matmul(nl.load(a), nl.load(b), perf_mode="double_row"))
        return out

    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 2, 16)).astype(ml_dtypes.float8_e5m2)
    b = rng.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e5m2)
    golden = np.einsum("kli,klj->ij", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(k(a, b), golden, rtol=1e-5, atol=1e-4)


def test_tensor_scalar_cumulative_running_sum():
    @nki.jit
    def k(x):
        out = _out(x.shape)
        dst = nl.ndarray(x.shape, dtype=nl.float32)
        nisa.tensor_scalar_cumulative(src=nl.load(x), dst=dst, op0=np.multiply, op1=np.add, imm0=2.0,
                                      reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(out, dst)
        return out

    x = np.arange(24, dtype=F32).reshape(4, 6)
    np.testing.assert_allclose(k(x), np.cumsum(2 * x, axis=1))


def test_psum_accumulation_opens_on_unwritten_cells():
    """`psum += nc_matmul(...)` onto an nl.ndarray PSUM tile that nothing wrote yet starts the
    accumulation group (AWS's allocated kernels rely on it), block by block; cells a non-matmul
    instruction wrote are accumulated onto."""
    @nki.jit
    def k(a, b):
        out = _out((2, 8, 16))
        acc = nl.ndarray((2, nl.par_dim(8), 16), dtype=nl.float32, buffer=nl.psum)
        at, bt = nl.load(a), nl.load(b)
        acc[0] += nisa.nc_matmul(at, bt)
        acc[0] += nisa.nc_matmul(at, bt)     # second matmul of block 0's group accumulates
        acc[1, :, 0:8] = nl.full((8, 8), 1.0, dtype=nl.float32)  # half of block 1 set by a memset
        acc[1] += nisa.nc_matmul(at, bt)     # block 1: onto 1.0 where set, from zero elsewhere
        for blk in nl.affine_range(2):
            nl.store(out[blk], nl.copy(acc[blk]))
        return out

    rng = np.random.default_rng(5)
    a, b = rng.random((4, 8)).astype(F32), rng.random((4, 16)).astype(F32)
    out = k(a, b)
    prod = a.T.astype(np.float64) @ b
    np.testing.assert_allclose(out[0], 2 * prod, rtol=1e-6)
    np.testing.assert_allclose(out[1][:, :8], 1 + prod[:, :8], rtol=1e-6)
    np.testing.assert_allclose(out[1][:, 8:], prod[:, 8:], rtol=1e-6)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_transpose_mode_matmul_keeps_nan_in_place_from_trn2(target):
    """nc_matmul(is_transpose=True) moves data like nc_transpose: on trn1 (a real matmul with the
    identity) a NaN spreads along its output row, from trn2 it stays in its own element."""
    @nki.jit
    def k(a):
        out = _out((4, 4))
        i_p, i_f = nl.mgrid[0:4, 0:4]
        ident = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        ident[...] = nisa.iota(i_p - i_f, dtype=nl.float32)
        eye = nisa.tensor_scalar(ident, np.equal, 0.0, dtype=nl.float32)
        nl.store(out, nl.copy(nisa.nc_matmul(nl.load(a), eye, is_transpose=True)))
        return out

    a = np.arange(16, dtype=F32).reshape(4, 4)
    a[1, 2] = np.nan
    with emulator.options(target=target):
        out = k(a)
    if target == "trn1":
        assert np.isnan(out[2]).all() and not np.isnan(np.delete(out, 2, axis=0)).any()
    else:
        expected = a.T.copy()
        np.testing.assert_array_equal(out, expected)  # NaN only at [2, 1]


def test_tensor_tensor_broadcasts_a_per_partition_operand_along_the_free_dims():
    """Legacy nisa.tensor_tensor reads a (P, 1) operand through a zero-stride free access pattern
    (AWS's double-row matmul sample dequantizes (P, F) tiles by (P, 1) scales this way)."""
    @nki.jit
    def k(a, s):
        out1, out2 = _out(a.shape), _out(a.shape)
        at, st = nl.load(a), nl.load(s)
        nl.store(out1, nisa.tensor_tensor(at, st, nl.multiply))
        nl.store(out2, nisa.tensor_tensor(st, at, nl.subtract))
        return out1, out2

    a = np.arange(24, dtype=F32).reshape(4, 6)
    s = np.array([[1.0], [2.0], [3.0], [4.0]], dtype=F32)
    out1, out2 = k(a, s)
    np.testing.assert_array_equal(out1, a * s)
    np.testing.assert_array_equal(out2, s - a)

    @nki.jit
    def bad(a, b):
        return nisa.tensor_tensor(nl.load(a), nl.load(b), nl.add)

    with pytest.raises(emulator.OperandShapeError, match=r"elements per partition.*test_conformance_isa.py:\d+"):
        bad(a, np.ones((4, 3), F32))

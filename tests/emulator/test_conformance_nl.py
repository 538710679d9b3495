"""One small kernel per nki.language API (legacy), each against a numpy golden."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.emulator.alu import erf as _erf

F32 = np.float32


def _out(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    nl.exp: np.exp, nl.log: np.log, nl.tanh: np.tanh, nl.sigmoid: _sigmoid, nl.relu: lambda x: np.maximum(x, 0),
    nl.gelu: lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    nl.gelu_apprx_tanh: lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    nl.silu: lambda x: x * _sigmoid(x), nl.softplus: lambda x: np.log1p(np.exp(x)),
    nl.mish: lambda x: x * np.tanh(np.log1p(np.exp(x))), nl.erf: _erf, nl.square: np.square, nl.sqrt: np.sqrt,
    nl.rsqrt: lambda x: 1 / np.sqrt(x), nl.reciprocal: lambda x: 1 / x, nl.abs: np.abs, nl.negative: np.negative,
    nl.sign: np.sign, nl.sin: np.sin, nl.cos: np.cos, nl.arctan: np.arctan, nl.ceil: np.ceil, nl.floor: np.floor,
    nl.trunc: np.trunc,
}


@pytest.mark.parametrize("fn", list(UNARY), ids=lambda f: f.__name__)
def test_unary_math(fn, rng):
    @nki.jit
    def k(x):
        out = _out(x.shape)
        nl.store(out, fn(nl.load(x)))
        return out

    x = (rng.random((64, 48)).astype(F32) * 2 + 0.05) * (1 if fn in (nl.log, nl.sqrt, nl.rsqrt) else 1.3)
    if fn not in (nl.log, nl.sqrt, nl.rsqrt):
        x = x - 1.3
    np.testing.assert_allclose(k(x), UNARY[fn](x.astype(np.float64)), rtol=2e-6, atol=1e-6)


BINARY = {
    nl.add: np.add, nl.subtract: np.subtract, nl.multiply: np.multiply, nl.divide: np.divide,
    nl.maximum: np.maximum, nl.minimum: np.minimum, nl.power: np.power, nl.fmod: np.fmod, nl.mod: np.mod,
}


@pytest.mark.parametrize("fn", list(BINARY), ids=lambda f: f.__name__)
def test_binary_tile_tile_and_scalar(fn, rng):
    @nki.jit
    def k(a, b):
        tt = _out(a.shape)
        ts = _out(a.shape)
        st = _out(a.shape)
        x, y = nl.load(a), nl.load(b)
        nl.store(tt, fn(x, y))
        nl.store(ts, fn(x, 1.5))
        nl.store(st, fn(2.5, y))
        return tt, ts, st

    a = rng.random((32, 40)).astype(F32) + 0.5
    b = rng.random((32, 40)).astype(F32) + 0.5
    tt, ts, st = k(a, b)
    g = BINARY[fn]
    np.testing.assert_allclose(tt, g(a, b), rtol=1e-6)
    np.testing.assert_allclose(ts, g(a, F32(1.5)), rtol=1e-6)
    np.testing.assert_allclose(st, g(F32(2.5), b), rtol=1e-6)


def test_comparisons_return_bool_tiles(rng):
    @nki.jit
    def k(a, b):
        outs = [_out(a.shape, nl.uint8) for _ in range(6)]
        x, y = nl.load(a), nl.load(b)
        for o, r in zip(outs, (nl.equal(x, y), nl.not_equal(x, y), nl.less(x, y), nl.less_equal(x, y),
                               nl.greater(x, y), nl.greater_equal(x, y))):
            assert r.dtype == nl.bool_
            nl.store(o, r)
        return tuple(outs)

    a = rng.integers(0, 3, (16, 16)).astype(F32)
    b = rng.integers(0, 3, (16, 16)).astype(F32)
    got = k(a, b)
    for g, ref in zip(got, (a == b, a != b, a < b, a <= b, a > b, a >= b)):
        np.testing.assert_array_equal(g, ref.astype(np.uint8))


def test_bitwise_shift_invert_logical():
    @nki.jit
    def k(a):
        o1, o2, o3, o4 = (_out(a.shape, nl.int32) for _ in range(4))
        x = nl.load(a)
        nl.store(o1, nl.left_shift(x, 3))
        nl.store(o2, nl.right_shift(nl.bitwise_or(x, 256), 2))
        nl.store(o3, nl.invert(x))
        nl.store(o4, nl.logical_and(x, nl.logical_not(nl.equal(x, 5)), dtype=nl.int32))
        return o1, o2, o3, o4

    a = np.arange(64, dtype=np.int32).reshape(8, 8)
    o1, o2, o3, o4 = k(a)
    np.testing.assert_array_equal(o1, a << 3)
    np.testing.assert_array_equal(o2, (a | 256) >> 2)
    np.testing.assert_array_equal(o3, ~a)
    np.testing.assert_array_equal(o4, ((a != 0) & (a != 5)).astype(np.int32))


@pytest.mark.parametrize("name,golden", [
    ("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean), ("prod", np.prod), ("var", np.var),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, golden, keepdims, rng):
    fn = getattr(nl, name)

    @nki.jit
    def k(x):
        out = _out((32, 1))
        kwargs = {} if name == "var" else {"keepdims": keepdims}
        nl.store(out, fn(nl.load(x), axis=[1], **kwargs))
        return out

    x = (rng.random((32, 20)).astype(F32) + 0.5)
    np.testing.assert_allclose(k(x)[:, 0], golden(x.astype(np.float64), axis=1), rtol=2e-5)


def test_all_reduction():
    @nki.jit
    def k(x):
        out = _out((4, 1), nl.uint8)
        nl.store(out, nl.all(nl.load(x), axis=[1]))
        return out

    x = np.array([[1, 1, 1], [1, 0, 1], [2, 3, 4], [0, 0, 0]], dtype=F32)
    np.testing.assert_array_equal(k(x)[:, 0], [1, 0, 1, 0])


@pytest.mark.parametrize("transpose_x", [True, False])
def test_matmul(transpose_x, rng):
    @nki.jit
    def k(x, y):
        out = _out((64, 256))
        acc = nl.zeros((64, 256), dtype=nl.float32, buffer=nl.psum)
        acc += nl.matmul(nl.load(x), nl.load(y), transpose_x=transpose_x)
        nl.store(out, acc)
        return out

    y = rng.standard_normal((96, 256)).astype(F32)
    if transpose_x:
        x = rng.standard_normal((96, 64)).astype(F32)
        golden = x.T.astype(np.float64) @ y
    else:
        x = rng.standard_normal((64, 96)).astype(F32)
        golden = x.astype(np.float64) @ y
    with emulator.trace() as tr:
        got = k(x, y)
    np.testing.assert_allclose(got, golden, rtol=1e-5, atol=1e-4)
    assert any(i.opcode == "nc_transpose" for i in tr) is (not transpose_x)


def test_transpose_and_copy(rng):
    @nki.jit
    def k(x):
        out = _out((x.shape[1], x.shape[0]), nl.bfloat16)
        nl.store(out, nl.copy(nl.transpose(nl.load(x)), dtype=nl.bfloat16))
        return out

    x = rng.standard_normal((100, 60)).astype(F32)
    np.testing.assert_array_equal(k(x), x.T.astype(ml_dtypes.bfloat16))


def test_load_transpose2d(rng):
    @nki.jit
    def k(x):
        out = _out((x.shape[1], x.shape[0]))
        nl.store(out, nl.load_transpose2d(x))
        return out

    x = rng.standard_normal((100, 60)).astype(F32)
    with emulator.trace() as tr:
        np.testing.assert_array_equal(k(x), x.T)
    assert tr.instructions[0].opcode == "dma_transpose"


def test_creation_helpers():
    @nki.jit
    def k(a):
        o1, o2, o3, o4 = (_out((16, 8)) for _ in range(4))
        nl.store(o1, nl.zeros((16, 8), dtype=nl.float32))
        nl.store(o2, nl.ones((16, 8), dtype=nl.float32))
        nl.store(o3, nl.full((16, 8), 7.25, dtype=nl.float32))
        t = nl.load(a)
        z = nl.zeros_like(t)
        z[...] = t
        nl.store(o4, z)
        return o1, o2, o3, o4

    a = np.arange(128, dtype=F32).reshape(16, 8)
    o1, o2, o3, o4 = k(a)
    assert (o1 == 0).all() and (o2 == 1).all() and (o3 == 7.25).all()
    np.testing.assert_array_equal(o4, a)


def test_empty_like_and_ndarray_start_as_nan():
    @nki.jit
    def k(a):
        out = _out(a.shape)
        fresh = nl.empty_like(nl.load(a))
        nl.store(out, fresh)
        return out

    assert np.isnan(k(np.ones((8, 8), F32))).all()


def test_where_and_broadcast_to(rng):
    @nki.jit
    def k(c, x, row):
        out = _out(x.shape)
        wide = nl.broadcast_to(nl.load(row), shape=x.shape)
        nl.store(out, nl.where(nl.load(c), nl.load(x), wide))
        return out

    c = (rng.random((32, 16)) > 0.5).astype(np.uint8)
    x = rng.random((32, 16)).astype(F32)
    row = rng.random((1, 16)).astype(F32)
    np.testing.assert_array_equal(k(c, x, row), np.where(c > 0, x, row))


def test_partition_broadcast_in_binary_op(rng):
    @nki.jit
    def k(x, row):
        out = _out(x.shape)
        nl.store(out, nl.add(nl.load(x), nl.load(row)))
        return out

    x = rng.random((64, 16)).astype(F32)
    row = rng.random((1, 16)).astype(F32)
    with emulator.trace() as tr:
        np.testing.assert_allclose(k(x, row), x + row)
    assert any(i.meta.get("purpose") == "partition_broadcast" for i in tr)


def test_softmax_and_rms_norm(rng):
    @nki.jit
    def k(x, w):
        sm = _out(x.shape)
        rn = _out(x.shape)
        t = nl.load(x)
        nl.store(sm, nl.softmax(t, axis=1))
        nl.store(rn, nl.rms_norm(t, nl.load(w), axis=1, n=x.shape[1]))
        return sm, rn

    x = rng.standard_normal((32, 50)).astype(F32)
    w = rng.random((1, 50)).astype(F32)
    sm, rn = k(x, w)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rn, x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * w,
                               rtol=1e-5)


def test_gather_flattened():
    @nki.jit
    def k(data, idx):
        out = _out(idx.shape)
        nl.store(out, nl.gather_flattened(nl.load(data), nl.load(idx)))
        return out

    data = np.arange(4 * 6, dtype=F32).reshape(4, 6)
    idx = np.array([[0, 5], [1, 1], [3, 2], [5, 0]], dtype=np.uint32)
    np.testing.assert_array_equal(k(data, idx), np.take_along_axis(data, idx.astype(np.int64), axis=1))


def test_atomic_rmw_indirect_add():
    @nki.jit
    def k(table, idx, vals):
        ids = nl.load(idx)
        i_f = nl.arange(table.shape[1])[None, :]
        nl.atomic_rmw(table[ids[nl.arange(3)[:, None], 0], i_f], value=nl.load(vals), op=np.add)

    table = np.zeros((5, 4), F32)
    k(table, np.array([[1], [3], [4]], np.int32), np.ones((3, 4), F32))
    np.testing.assert_array_equal(table.sum(1), [0, 4, 0, 4, 4])


def test_loop_reduce_accumulates_across_iterations(rng):
    @nki.jit
    def k(x):
        out = _out((16, 8))
        acc = nl.zeros((16, 8), dtype=nl.float32)
        for i in nl.affine_range(4):
            acc = nl.loop_reduce(nl.load(x[i]), op=np.add, loop_indices=[i], dtype=nl.float32)
        nl.store(out, acc)
        return out

    x = rng.random((4, 16, 8)).astype(F32)
    np.testing.assert_allclose(k(x), x.sum(0), rtol=1e-6)


def test_rand_dropout_and_seed_are_reproducible():
    @nki.jit
    def k():
        out = _out((8, 8))
        nl.random_seed(7)
        nl.store(out, nl.dropout(nl.rand((8, 8)), 0.5))
        return out

    a, b = k(), k()
    np.testing.assert_array_equal(a, b)
    assert 0 < (a == 0).sum() < 64 and (a < 1).all()


def test_shared_constant_and_device_print(capsys):
    @nki.jit
    def k():
        out = _out((2, 3))
        t = nl.load(nl.shared_constant(np.arange(6, dtype=F32).reshape(2, 3)))
        nl.device_print("tile=", t)
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(k(), np.arange(6).reshape(2, 3))
    assert "tile=" in capsys.readouterr().out


def test_expand_dims_ds_and_block_dims(rng):
    @nki.jit
    def k(x):
        out = _out((2, 16, 8))
        blocks = nl.ndarray((2, nl.par_dim(16), 8), dtype=nl.float32)
        for b in nl.affine_range(2):
            blocks[b] = nl.load(x[nl.ds(b * 16, 16), :])
        for b in nl.affine_range(2):
            e = nl.expand_dims(blocks[b], 2)
            assert e.shape == (16, 8, 1)
            nl.store(out[b], value=blocks[b])
        return out

    x = rng.random((32, 8)).astype(F32)
    np.testing.assert_array_equal(k(x), x.reshape(2, 16, 8))


def test_tile_size_and_static_cast():
    assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512
    assert nl.tile_size.bn_stats_fmax == 512 and nl.tile_size.psum_fmax == 512
    with emulator.options(target="trn1"):
        assert nl.tile_size.total_available_sbuf_size == 176 * 1024
    x = np.array([1.0, 1.00390625, 1.01171875], dtype=F32)  # halfway cases round to even in bf16
    y = nl.static_cast(x, nl.bfloat16)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(F32), [1.0, 1.0, 1.015625])


def test_program_queries_and_spmd_dims():
    seen = []

    @nki.jit
    def k():
        seen.append((nl.program_id(0), nl.program_id(1), nl.num_programs(), nl.num_programs(1), nl.program_ndim()))

    k[nl.spmd_dim(nl.nc(2), 1), 3]()
    assert seen == [(0, j, 6, 3, 2) for j in range(3)] + [(1, j, 6, 3, 2) for j in range(3)]
    assert math.prod((2, 3)) == len(seen)


def test_tensor_operators(rng):
    @nki.jit
    def k(a, b):
        out = _out(a.shape)
        x, y = nl.load(a), nl.load(b)
        nl.store(out, (x + y) * 2 - y / 4 + (-x) ** 2)
        return out

    a = rng.random((16, 16)).astype(F32)
    b = rng.random((16, 16)).astype(F32)
    np.testing.assert_allclose(k(a, b), (a + b) * 2 - b / 4 + a ** 2, rtol=1e-6)


def test_numpy_ufuncs_as_ops_and_on_tiles(rng):
    @nki.jit
    def k(a):
        out = _out(a.shape)
        t = nl.load(a)
        y = nisa.tensor_scalar(np.exp(t), np.multiply, 2.0, op1=np.add, operand1=1.0)
        nl.store(out, y)
        return out

    a = rng.random((8, 8)).astype(F32)
    np.testing.assert_allclose(k(a), np.exp(a) * 2 + 1, rtol=1e-6)


def test_dynamic_offsets_from_an_index_tile(rng):
    @nki.jit
    def k(x, offsets):
        out = _out((32, offsets.shape[1]))
        data = nl.load(x)
        offs = nl.load(offsets)
        ip, iz = nl.mgrid[0:32, 0:1]
        gathered = nl.ndarray((32, offsets.shape[1]), dtype=nl.float32)
        for j in nl.affine_range(offsets.shape[1]):
            gathered[ip, j] = nisa.tensor_copy_dynamic_src(data[ip, offs[0, j] + iz])
        nl.store(out, gathered)
        return out

    x = rng.random((32, 100)).astype(F32)
    offsets = np.array([[7, 3, 99, 0, 42]], dtype=np.int32)
    np.testing.assert_array_equal(k(x, offsets), x[:, offsets[0]])


def test_view_reinterprets_whole_tensors():
    @nki.jit
    def k(x):
        out = _out((4, 8), nl.uint16)
        nl.store(out, nl.load(x.view(nl.uint16)))
        return out

    x = np.arange(16, dtype=F32).reshape(4, 4)
    np.testing.assert_array_equal(k(x), x.view(np.uint16))


def test_nc_arithmetic_in_launch_grids():
    seen = []

    @nki.jit
    def k():
        seen.append((nl.program_id(0), nl.program_id(1)))

    k[nl.nc(2) * 2, 2]()
    k[2 * nl.nc(2), 1]()
    assert len(seen) == 8 + 4 and seen[:3] == [(0, 0), (0, 1), (1, 0)]


@nki.jit
def _assign_masked(a, flag):
    out = _out(a.shape)
    t = nl.load(a)
    t[...] = nl.add(t, 1.0, mask=flag)          # self-assignment of a masked-off instruction
    r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r[...] = nl.copy(t)
    r[:, 0:2] = nl.multiply(t[:, 0:2], 5.0, mask=flag)  # into a view of another tile
    nl.store(out, value=r)
    return out


@pytest.mark.parametrize("flag", [True, False])
def test_assigning_a_python_bool_masked_instruction(flag):
    """`t[...] = op(..., mask=<python bool>)` (flash attention's per-tile masks): False writes nothing."""
    a = np.arange(8, dtype=F32).reshape(2, 4)
    out = _assign_masked(a, flag)
    golden = a + 1 if flag else a.copy()
    if flag:
        golden[:, 0:2] *= 5
    np.testing.assert_array_equal(out, golden)


def test_grid_index_dims_follow_the_grid_like_numpy():
    """`t[w.p, 2 * i + w.y, 2 * w.x + w.z]` over an mgrid (p, x, y, z) is a (p, x, y, z) tile (NumPy
    advanced indexing orders the result by the broadcast grid), so axis=[2, 3] reduces the window."""
    @nki.jit
    def k(a):
        out = _out((4, 2, 1, 1))
        t = nl.load(a)
        w = nl.mgrid[0:4, 0:2, 0:3, 0:3]
        windows = nl.copy(t[w.p, 1 + w.y, 2 * w.x + w.z])
        assert windows.shape == (4, 2, 3, 3)
        nl.store(out, nl.max(windows, axis=[2, 3], keepdims=True))
        return out

    a = np.random.default_rng(3).standard_normal((4, 5, 6)).astype(F32)
    golden = np.stack([a[:, 1:4, 2 * x:2 * x + 3].max(axis=(1, 2)) for x in range(2)], axis=1)
    np.testing.assert_array_equal(k(a)[:, :, 0, 0], golden)


def test_reshape_with_shape_keyword_and_where_shape_error():
    @nki.jit
    def k(a):
        flat = a.reshape(shape=(a.shape[0], a.shape[1] * a.shape[2]))
        out = _out(flat.shape)
        nl.store(out, nl.load(flat))
        return out

    a = np.arange(24, dtype=F32).reshape(2, 3, 4)
    np.testing.assert_array_equal(k(a), a.reshape(2, 12))

    @nki.jit
    def bad(a):
        t = nl.load(a)
        return nl.where(t > 0, t[:, 0:3], 0.0)

    with pytest.raises(emulator.OperandShapeError, match=r"nl.where: .*do not broadcast.*test_conformance_nl.py:\d+"):
        bad(np.ones((4, 4), F32))

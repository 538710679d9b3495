"""The engine API a second front end builds on: destination-first instructions on plain Tensors,
views made with basic_index / compose / gather_index, launched through Frontend + Kernel."""

from __future__ import annotations

import numpy as np

from nkitui import emulator
from nkitui.emulator import engine
from nkitui.emulator.launch import Frontend, Kernel
from nkitui.emulator.runtime import current
from nkitui.emulator.tensor import DynSlice, Tensor

PLAIN = Frontend("test-frontend", Tensor)
F32 = np.float32


def sbuf(shape, dtype="float32") -> Tensor:
    return current().tile(shape, dtype, "sbuf")


def test_destination_first_kernel_on_the_engine(rng):
    def body(a, b, out):
        run = current()
        ta, tb = sbuf(a.shape), sbuf(b.shape)
        engine.dma_copy(ta, a)
        engine.dma_copy(tb, b)
        acc = run.tile((64, 256), "float32", "psum")
        for k in range(2):
            rows = DynSlice(k * 64, 64)
            engine.nc_matmul(acc, ta.basic_index((rows, slice(None))), tb.basic_index((rows, slice(None))),
                             accumulate=None)
        res = sbuf((64, 256), "bfloat16")
        engine.activation(res, "relu", acc, scale=0.5)
        engine.dma_copy(out, res)

    a = rng.standard_normal((128, 64)).astype(F32)
    b = rng.standard_normal((128, 256)).astype(F32)
    out = np.zeros((64, 256), np.float32)
    with emulator.trace() as tr:
        Kernel(body, PLAIN)(a, b, out)
    golden = np.maximum(0.5 * (a.T.astype(np.float64) @ b), 0)
    np.testing.assert_allclose(out, golden, rtol=1e-2, atol=1e-2)  # bf16 intermediate
    assert [i.opcode for i in tr] == ["dma_copy", "dma_copy", "nc_matmul", "nc_matmul", "activation", "dma_copy"]


def test_compose_builds_strided_and_permuted_views():
    def body(x, out):
        t = sbuf((8, 12))
        engine.dma_copy(t, x)
        # every other column, as an .ap()-style strided view: (8, 6)
        strided = t.compose([("r", 0, 1, 8, 0), ("r", 1, 2, 6, 1)], (8, 6))
        engine.tensor_copy(out_tile := sbuf((8, 6)), strided)
        engine.dma_copy(out, out_tile)

    x = np.arange(96, dtype=F32).reshape(8, 12)
    out = np.zeros((8, 6), F32)
    Kernel(body, PLAIN)(x, out)
    np.testing.assert_array_equal(out, x[:, 1::2])


def test_gather_index_for_indirect_rows():
    def body(table, out):
        rows = np.array([[5], [0], [3]])
        cols = np.arange(4)[None, :]
        view = table.gather_index((rows, cols), (3, 4))
        t = sbuf((3, 4))
        engine.dma_copy(t, view)
        engine.dma_copy(out, t)

    table = np.arange(24, dtype=F32).reshape(6, 4)
    out = np.zeros((3, 4), F32)
    Kernel(body, PLAIN)(table, out)
    np.testing.assert_array_equal(out, table[[5, 0, 3]])


def test_engine_ops_accept_op_names_and_numpy_ufuncs():
    def body(x, out):
        t = sbuf(x.shape)
        engine.dma_copy(t, x)
        r = sbuf(x.shape)
        engine.tensor_scalar(r, t, "multiply", 3.0, op1=np.add, operand1=1.0)
        m = sbuf((x.shape[0], 1))
        engine.tensor_reduce(m, np.maximum, r, axis=1)
        engine.dma_copy(out, m)

    x = np.arange(12, dtype=F32).reshape(3, 4)
    out = np.zeros((3, 1), F32)
    Kernel(body, PLAIN)(x, out)
    np.testing.assert_array_equal(out[:, 0], (x * 3 + 1).max(1))

"""Round 9 of the per-instruction fast paths (issue #19, "the emulator benchmark ratios do not get worse"): each
shortcut computes what the code it replaces computed. A tile's store is an item assignment where it was
np.copyto(casting="unsafe"); the legacy default engine skips engine_name(); a mask plan knows whether it leaves
cells unwritten; Storage sets its geometry per memory; the trace's kernel line skips the recorder's own frames;
DMA metadata is built only for a trace; bounds and the HBM access box are built without calls."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

from nkitui import emulator
from nkitui.emulator import dtypes, memory
from nkitui.emulator.frontend_common import engine_name
from nkitui.emulator.legacy.indexing import NO_MASK, SKIP, plan_mask
from nkitui.emulator.tensor import Tensor
from nkitui.emulator.trace import Access
from tests.helpers.emulator_session import install_for_session

install_for_session()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

F32 = np.float32


# -- the store: an item assignment, bit for bit np.copyto(casting="unsafe") ----------------------------------------
_EDGES = np.array([np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -0.0, 65520.0, 448.0, 464.0, 57344.0, 1.0 + 2**-8,
                   1.0 + 3 * 2**-9, -1.5, 2.5, 300.7, -300.7, 1e10, -1e10], dtype=F32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2", "tfloat32", "int32",
                                   "int8", "uint8", "int16", "uint16", "uint32"])
def test_a_result_tile_holds_what_copyto_would_have_stored(dtype):
    """Every storage dtype: fp32 results with NaN, infinities, overflow, ties, negatives into unsigned; one
    broadcast from a (128, 1) column. The emulator's store against np.copyto on the storage dtype."""
    d = dtypes.dtype_of(dtype)
    sd = dtypes.storage_dtype(d, False)
    rng = np.random.default_rng(3)
    vals = rng.standard_normal((128, 19)).astype(F32) * 300
    vals[0] = _EDGES
    vals[1] = -_EDGES
    for values in (vals, vals[:, :1]):  # a full tile, and a column broadcast over the free dim
        st = memory.Storage("t", "sbuf", (128, 19), d, np.empty((128, 19), sd))
        t = Tensor.whole(st)
        with np.errstate(all="ignore"):
            vin = dtypes.convert(values, sd) if sd.kind in "iub" else values  # as Tensor.write converts ints
            t.write(values)
            want = np.empty((128, 19), sd)
            np.copyto(want, dtypes.round_tf32(vin) if st.lossy else vin, casting="unsafe")
        assert st.data.tobytes() == want.tobytes()


def test_a_bf16_chain_rounds_to_nearest_even_per_instruction():
    @nki.jit
    def chain(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.load(x)
        u = nisa.tensor_scalar(t, np.multiply, 1.0 + 2**-9, dtype=nl.bfloat16)
        u = nisa.tensor_scalar(u, np.add, 2**-8, dtype=nl.bfloat16)
        nl.store(out, u)
        return out

    x = np.random.default_rng(5).standard_normal((128, 64)).astype(F32)
    got = np.asarray(chain(x)).astype(ml_dtypes.bfloat16)
    step = (x * F32(1.0 + 2**-9)).astype(ml_dtypes.bfloat16)
    want = (step.astype(F32) + F32(2**-8)).astype(ml_dtypes.bfloat16)
    assert got.tobytes() == want.tobytes()


# -- the legacy default engine --------------------------------------------------------------------------------------
def one_scalar_op(x, eng):
    @nki.jit
    def kernel(x):  # (the engine by closure: a kernel argument would become a tensor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, nisa.tensor_scalar(t, np.add, 1.0, engine=eng))
        return out

    return kernel(x)


@pytest.mark.parametrize("eng", [0, np.int64(0), nisa.engine.unknown, nisa.vector_engine, nisa.gpsimd_engine,
                                 nisa.scalar_engine, "gpsimd", ""])
def test_the_engine_a_legacy_tensor_scalar_runs_on_is_what_engine_name_says(eng):
    x = np.ones((128, 4), F32)
    with emulator.options(target="trn2"), emulator.trace() as tr:
        y = one_scalar_op(x, eng)
    ts = [i for i in tr.instructions if i.opcode == "tensor_scalar"]
    assert len(ts) == 1 and ts[0].engine == (engine_name(eng) or "vector")
    assert np.array_equal(np.asarray(y), x + 1)


def test_the_default_engine_is_the_vector_engine_and_a_wrong_one_still_fails():
    with emulator.trace() as tr:
        one_scalar_op(np.ones((128, 4), F32), 0)
    assert [i.engine for i in tr.instructions if i.opcode == "tensor_scalar"] == ["vector"]
    with pytest.raises(Exception, match="NeuronCore-v3"), emulator.options(target="trn1"):
        one_scalar_op(np.ones((128, 4), F32), nisa.scalar_engine)


# -- mask plans -----------------------------------------------------------------------------------------------------
def test_a_mask_plan_is_partial_exactly_when_it_leaves_cells_unwritten():
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]

    @nki.jit
    def plans(x):
        made.extend([plan_mask(None, (128, 64)), plan_mask(True, (128, 64)), plan_mask(False, (128, 64)),
                     plan_mask(i_p < 64, (128, 64)), plan_mask((i_p < 64) & (i_f < 32), (128, 64)),
                     plan_mask(i_p + i_f < 100, (128, 64))])
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    made: list = []
    plans(np.zeros((128, 64), F32))
    assert made[0] is NO_MASK and made[2] is SKIP
    for p in made + [NO_MASK, SKIP]:
        assert p.partial == (p.box is not None or p.where is not None or p.skip)
    assert [p.partial for p in made] == [False, False, True, True, True, True]


def test_a_masked_result_keeps_its_sentinels_where_the_mask_is_off():
    i_p = nl.arange(128)[:, None]

    @nki.jit
    def masked(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, nisa.tensor_scalar(t, np.add, 1.0, mask=i_p < 64))
        return out

    y = np.asarray(masked(np.zeros((128, 4), F32)))
    assert np.array_equal(y[:64], np.ones((64, 4), F32)) and np.isnan(y[64:]).all()  # NaN: never written


# -- Storage geometry -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("memory_, shape, pax, want", [
    ("hbm", (256, 512), 0, (-1, 256 * 512 * 2, 1)),
    ("hbm", (7,), 0, (-1, 14, 1)),
    ("sbuf", (128, 512), 0, (0, 1024, 1)),
    ("sbuf", (0, 512), 0, (0, 0, 1)),
    ("sbuf", (128, 4, 8), 0, (0, 64, 1)),
    ("sbuf", (3, 5, 128, 16), 2, (2, 32 * 15, 15)),
    ("psum", (128, 512), 0, (0, 1024, 1)),
    ("psum", (4, 128, 256), 1, (1, 2048, 4)),
    ("shared_hbm", (4, 4), 0, (-1, 32, 1)),
])
def test_a_storage_geometry_by_memory(memory_, shape, pax, want):
    st = memory.Storage("s", memory_, shape, dtypes.dtype_of("bfloat16"), None, pax, loop_depth=3)
    assert (st.partition_dim, st.bytes_per_partition, st.blocks) == want
    assert st.loop_depth == 3 and memory.Storage("s", memory_, shape, dtypes.dtype_of("bfloat16"), None, pax).loop_depth == 0


def test_a_fresh_tile_records_the_loop_depth_it_was_made_at():
    depths = []

    @nki.jit
    def nested(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        depths.append(t.storage.loop_depth)
        for i in nl.affine_range(1):
            for j in nl.sequential_range(1):
                depths.append(nisa.tensor_scalar(t, np.add, 1.0).storage.loop_depth)
        nl.store(out, t)
        return out

    nested(np.zeros((128, 4), F32))
    assert depths == [0, 2]


# -- bounds and access boxes ----------------------------------------------------------------------------------------
def test_bounds_of_views_with_negative_zero_and_positive_steps():
    st = memory.Storage("h", "hbm", (16, 20), dtypes.dtype_of("float32"), None)
    view = Tensor(st, ((10, -2, 3, 0), (4, 1, 5, 1)), (3, 5))
    assert view.bounds() == ((6, 10), (4, 8))
    assert Tensor(st, ((3, 0, 4, 0), (0, 1, 0, 1)), (4, 0)).bounds() == ((3, 3), (0, -1))
    view.check_bounds("t")  # in bounds
    with pytest.raises(Exception, match=r"on dimension 1: index range \[18, 22\] exceeds dimension size 20"):
        Tensor(st, ((0, 1, 2, 0), (18, 1, 5, 1)), (2, 5)).check_bounds("t")
    with pytest.raises(Exception, match=r"on dimension 0: index range \[-2, 2\] exceeds dimension size 16"):
        Tensor(st, ((2, -2, 3, 0), (0, 1, 5, 1)), (3, 5)).check_bounds("t")


def test_the_hbm_access_box_is_an_access():
    st = memory.Storage("h", "hbm", (16, 20), dtypes.dtype_of("float32"), None)
    box = Tensor(st, ((2, 1, 4, 0), (4, 1, 5, 1)), (4, 5)).access()
    assert type(box) is Access and box == Access(st.id, "hbm", 2, 6, 16, 36)
    assert box.memory == "hbm" and box.b1 == 36 and hash(box) == hash(Access(st.id, "hbm", 2, 6, 16, 36))


# -- the trace: kernel lines and DMA metadata -----------------------------------------------------------------------
def _line_of(fn, marker: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(src) if marker in line)


@nki.jit
def traced(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)  # LOAD
    u = nisa.tensor_scalar(t, np.add, 1.0)  # TS
    acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)  # ZEROS
    acc += nisa.nc_matmul(t[:, 0:128], u[:, 0:128])  # MM
    nl.store(out, nl.copy(u, dtype=nl.bfloat16))  # STORE
    return out


def test_every_traced_instruction_keeps_its_kernel_line():
    x = np.ones((128, 128), F32)
    with emulator.trace() as tr:
        traced(x)
    by_op = {}
    for ins in tr.instructions:
        by_op.setdefault(ins.opcode, []).append(ins)
    base = "test_hot_path_round9.py"
    assert all(i.file == base for i in tr.instructions)
    assert [i.line for i in by_op["tensor_scalar"]] == [_line_of(traced, "# TS")]
    assert [i.line for i in by_op["nc_matmul"]] == [_line_of(traced, "# MM")]
    dmas = [i.line for i in tr.instructions if i.engine == "dma"]
    assert dmas == [_line_of(traced, "# LOAD"), _line_of(traced, "# STORE")]


def test_traced_dma_metadata_and_an_untraced_run_agree():
    x = np.random.default_rng(2).standard_normal((128, 128)).astype(F32)
    with emulator.trace() as tr:
        traced_y = np.asarray(traced(x))
    plain_y = np.asarray(traced(x))
    assert traced_y.tobytes() == plain_y.tobytes()
    load, store = [i for i in tr.instructions if i.engine == "dma"]
    assert load.meta["api"] == "nl.load" and load.meta["src"] == "hbm" and load.meta["dst"] == "sbuf"
    assert "cast" not in load.meta and load.meta["contiguous_bytes"] == 128 * 128 * 4  # one contiguous run
    assert store.meta["src"] == "sbuf" and store.meta["dst"] == "hbm" and "queue" in store.meta
    assert traced.last_run.instructions == len(tr.instructions)


def test_a_kernel_line_is_found_from_a_short_stack():
    from nkitui.emulator.errors import kernel_frame

    assert kernel_frame(10_000) is None  # more frames skipped than the stack has: no kernel frame, no error
    assert kernel_frame() is not None  # from a test, the first frame outside the emulator is this one

"""Valid legacy code that the emulator used to reject or compute wrongly (issue #19).

Each case is a small kernel of our own in the calling style of the upstream code that exposed it
(aws-neuron/nki-samples at 8370e11); the docstrings say which sample and which documented rule.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator

BF16 = ml_dtypes.bfloat16
F32 = np.float32


def _inserted_copies(tr):
    return [i for i in tr.instructions if i.meta.get("inserted") == "psum->sbuf"]


# -- TensorE operands in PSUM: the compiler inserts the copy --------------------------------------
@nki.jit
def transpose_then_nc_matmul(a, b):
    """flash_attn_bwd style: `psum += nc_matmul(nc_transpose(x), y)`, the transpose result in PSUM."""
    out = nl.ndarray((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a_t = nisa.nc_transpose(nl.load(a))  # (M, K) -> (K, M), TensorE: the result is in PSUM
    acc = nl.zeros((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(a_t, nl.load(b))  # stationary (K, M) = a^T: acc = a @ b
    nl.store(out, acc)
    return out


def test_nc_matmul_stationary_in_psum_gets_a_compiler_copy(rng):
    a = rng.standard_normal((64, 128)).astype(BF16)
    b = rng.standard_normal((128, 96)).astype(BF16)
    with emulator.trace() as tr:
        out = transpose_then_nc_matmul(a, b)
    np.testing.assert_allclose(out, a.astype(F32) @ b.astype(F32), rtol=1e-5, atol=1e-5)
    (copy,) = _inserted_copies(tr)
    assert copy.engine == "vector" and copy.opcode == "tensor_copy" and copy.in_mems == ("psum",)


@nki.jit
def nl_matmul_of_transpose(a, b):
    """The high-level API places its operands: `nl.matmul(nl.transpose(x), y, transpose_x=True)`."""
    out = nl.ndarray((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.matmul(nl.transpose(nl.load(a)), nl.load(b), transpose_x=True)))
    return out


def test_nl_matmul_operand_from_nl_transpose(rng):
    a = rng.standard_normal((32, 128)).astype(F32)
    b = rng.standard_normal((128, 64)).astype(F32)
    with emulator.trace() as tr:
        out = nl_matmul_of_transpose(a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert len(_inserted_copies(tr)) == 1


# -- a matmul masked off entirely does not accumulate ---------------------------------------------
@nki.jit
def masked_tile_matmul(a, b, rows):
    """allocated_fused_linear style: `psum += nc_matmul(..., mask=(i * 128 < rows))` where the
    mask is a Python bool that is False for tiles past the end."""
    out = nl.ndarray((128, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(2):
        acc += nisa.nc_matmul(nl.load(a[i * 128:(i + 1) * 128, :]), nl.load(b[i * 128:(i + 1) * 128, :]),
                              mask=(i * 128 < rows))
    nl.store(out, acc)
    return out


def test_fully_masked_matmul_accumulates_nothing(rng):
    a = rng.standard_normal((256, 128)).astype(F32)
    b = rng.standard_normal((256, 64)).astype(F32)
    out = masked_tile_matmul(a, b, 128)  # the second tile is masked off
    np.testing.assert_allclose(out, a[:128].T @ b[:128], rtol=1e-4, atol=1e-4)


# -- float -> int conversion: resize_nearest's floor(int32 / w) -----------------------------------
@nki.jit
def row_of_flat_index(n, w):
    """vision.resize_nearest_fixed_dma_kernel computes `nl.floor(pos_int32 / w, dtype=nl.int32)`:
    the int32 quotient (type promotion keeps int32) must truncate, not round to nearest."""
    out = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    pos = nisa.iota(nl.arange(n)[:, None], dtype=nl.int32)
    nl.store(out, nl.floor(pos / w, dtype=nl.int32))
    return out


def test_int32_quotient_truncates_like_the_upstream_resize_kernel():
    np.testing.assert_array_equal(row_of_flat_index(128, 38)[:, 0], np.arange(128) // 38)


# -- masks decide which index values are used ------------------------------------------------------
@nki.jit
def masked_gather(table, idx, valid):
    """resize_nearest style: `nl.load(t[b, index_tile, f], mask=rows_valid)`; the rows the mask
    turns off hold index values past the end of the table."""
    out = nl.ndarray((128, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    index = nl.load(idx)
    rows = nl.zeros((128, table.shape[1]), dtype=table.dtype)
    rows[i_p, i_f] = nl.load(table[index, i_f], mask=(i_p < valid))
    nl.store(out, rows)
    return out


def test_masked_off_rows_index_values_are_not_bounds_checked(rng):
    table = rng.standard_normal((50, 16)).astype(F32)
    idx = np.full((128, 1), 1000, dtype=np.int32)  # out of range on the masked-off rows
    idx[:40, 0] = rng.integers(0, 50, 40)
    out = masked_gather(table, idx, 40)
    np.testing.assert_array_equal(out[:40], table[idx[:40, 0]])
    np.testing.assert_array_equal(out[40:], 0)


@nki.jit
def sparse_masked_gather(table, idx):
    """The same with a mask that is not a box (every other row)."""
    out = nl.ndarray((128, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    index = nl.load(idx)
    rows = nl.zeros((128, table.shape[1]), dtype=table.dtype)
    rows[i_p, i_f] = nl.load(table[index, i_f], mask=(i_p % 2 == 0))
    nl.store(out, rows)
    return out


def test_non_box_mask_index_values_are_not_bounds_checked(rng):
    table = rng.standard_normal((50, 16)).astype(F32)
    idx = np.full((128, 1), -7, dtype=np.int32)
    idx[::2, 0] = rng.integers(0, 50, 64)
    out = sparse_masked_gather(table, idx)
    np.testing.assert_array_equal(out[::2], table[idx[::2, 0]])
    np.testing.assert_array_equal(out[1::2], 0)


def test_unmasked_out_of_range_index_is_still_an_error(rng):
    table = rng.standard_normal((50, 16)).astype(F32)
    idx = np.full((128, 1), 1000, dtype=np.int32)
    try:
        masked_gather(table, idx, 41)
    except emulator.OutOfBoundsError as e:
        assert "index range [1000, 1000] exceeds dimension size 50" in str(e)
    else:
        raise AssertionError("an unmasked out-of-range gather index must be reported")


# -- nl.loop_reduce into a subscripted accumulator --------------------------------------------------
@nki.jit
def loop_reduce_into_view(x):
    """flash_attn_bwd reduces dq over K tiles with `acc[i, j, :, :] = nl.loop_reduce(...)` spread
    over several lines: the target view is the accumulator (docs: the destination tile is also the
    rhs input to op), so every iteration adds, none overwrites."""
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), 64), dtype=nl.float32)
    for i in nl.affine_range(2):
        for k in nl.affine_range(3):
            part = nl.load(x[i, k])
            acc[i, :, :] = nl.loop_reduce(
                part, op=np.add, loop_indices=(k,),
                dtype=nl.float32)
    for i in nl.affine_range(2):
        nl.store(out[i], acc[i])
    return out


def test_loop_reduce_accumulates_into_a_subscripted_target(rng):
    x = rng.standard_normal((2, 3, 128, 64)).astype(F32)
    np.testing.assert_allclose(loop_reduce_into_view(x), x.sum(axis=1), rtol=1e-5, atol=1e-5)


# -- storing one element of an HBM tensor ----------------------------------------------------------
@nki.jit
def store_scalars(x):
    """flash_attn_bwd stores each head's dsinks into `out[b, h]` (a single element)."""
    out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    for h in nl.affine_range(4):
        nl.store(out[0, h], value=nl.load(x[h:h + 1, 0:1]))
    return out


def test_store_into_a_single_hbm_element():
    x = np.arange(8, dtype=F32).reshape(4, 2)
    np.testing.assert_array_equal(store_scalars(x), [[0, 2, 4, 6]])


# -- SBUF capacity of block-dimension tensors: per block, as the compiler allocates ----------------
@nki.jit
def blocks_one_after_another(x):
    """A (32, 7, par_dim(128), 1024) fp32 buffer is 896 KiB per partition in all, but each block is
    loaded, used and stored before the next: the compiler needs one block's 4 KiB at a time."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((32, 7, nl.par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(32):
        for j in nl.affine_range(7):
            buf[i, j, :, :] = nl.load(x[i, j])
            nl.store(out[i, j], value=nl.exp(buf[i, j, :, :]))
    return out


@nki.jit
def blocks_all_live(x):
    """The same buffer filled completely before any block is read: every block is live at once."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((32, 7, nl.par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf, name="buf")
    for i in nl.affine_range(32):
        for j in nl.affine_range(7):
            buf[i, j, :, :] = nl.load(x[i, j])
    for i in nl.affine_range(32):
        for j in nl.affine_range(7):
            nl.store(out[i, j], value=buf[i, j, :, :])
    return out


def test_block_dimension_tensor_counts_its_live_blocks_only():
    x = emulator.ShapeDtype((32, 7, 128, 1024), "float32")
    with emulator.options(target="trn2", capacity="error", execute=False):
        blocks_one_after_another(x)
    # one 4 KiB block and the exp result tile beside it
    assert blocks_one_after_another.last_run.sbuf_peak_bytes == 2 * 4096


def test_block_dimension_tensor_whose_blocks_are_all_live_still_overflows():
    x = emulator.ShapeDtype((32, 7, 128, 1024), "float32")
    with emulator.options(target="trn2", capacity="strict", execute=False):
        with pytest.raises(emulator.CapacityError, match=r"SBUF capacity exceeded: 'buf\[") as info:
            blocks_all_live(x)
    assert "4096 B per partition" in str(info.value)


# -- host memory: a kernel the host cannot hold fails with what it needs ---------------------------
def test_a_tensor_larger_than_the_host_fails_with_the_bytes_it_needs():
    @nki.jit
    def huge(x):
        scratch = nl.ndarray((1 << 20, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm, name="scratch")  # 4 TiB
        nl.store(scratch[0:128, 0:4], value=nl.load(x))
        return scratch

    with pytest.raises(emulator.HostMemoryError, match=r"SHARED_HBM|HBM tensor 'scratch' .* needs 4096.00 GiB") as info:
        huge(np.ones((128, 4), F32))
    assert isinstance(info.value, MemoryError) and "shape-only" in str(info.value)


def test_host_memory_check_uses_what_the_host_has(monkeypatch):
    from nkitui.emulator import memory

    monkeypatch.setattr(memory, "HOST_CHECK_BYTES", 1 << 16)
    monkeypatch.setattr(memory, "host_available_bytes", lambda: 1 << 17)  # 128 KiB "available"

    @nki.jit
    def k(x):
        out = nl.ndarray((512, 512), dtype=nl.float32, buffer=nl.shared_hbm, name="out")  # 1 MiB
        nl.store(out[0:128, :], value=nl.load(x))
        return out

    with pytest.raises(emulator.HostMemoryError, match=r"'out' \(512, 512\) float32 needs 1 MiB .* only 128 KiB"):
        k(np.ones((128, 512), F32))
    monkeypatch.setattr(memory, "host_available_bytes", lambda: 1 << 30)
    assert k(np.ones((128, 512), F32)).shape == (512, 512)


# -- direct allocation in a loop body the tracer runs once ---------------------------------------
@nki.jit
def bump_allocated_in_a_loop(x):
    """nki-samples' allocated_attention (small head) style: a `cur_addr` advanced after every
    `mod_alloc` inside an `affine_range` body. The compiler traces the body once, so every iteration
    has the first iteration's addresses; the emulator runs the body per iteration and its Python
    `cur_addr` goes on growing, here past trn2's 208 KiB by the 8th iteration."""
    import neuronxcc.nki.compiler as ncc

    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cur_addr = 0
    for i in nl.affine_range(x.shape[0]):
        buf = nl.ndarray((2, nl.par_dim(128), 4096), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=cur_addr, num_free_tiles=(1,)))
        cur_addr += 4096 * 4  # 16 KiB per iteration of the Python loop
        buf[0] = nl.load(x[i])
        nl.store(out[i], value=buf[0])
    return out


def test_direct_allocation_addresses_advanced_in_a_traced_once_loop_are_not_refused():
    x = np.arange(16 * 128 * 4096, dtype=F32).reshape(16, 128, 4096) % 251
    with emulator.options(target="trn2"), emulator.trace() as tr, \
            pytest.warns(emulator.NKIEmulatorWarning, match="loop the compiler traces once"):
        np.testing.assert_array_equal(bump_allocated_in_a_loop(x), x)
    assert [d["rule"] for d in tr.meta["diagnostics"]] == ["note"]


def test_direct_allocation_past_the_usable_sbuf_in_a_loops_first_iteration_is_still_refused():
    # the first iteration is what the compiler sees: a placement that does not fit there is an error
    x = np.zeros((2, 128, 4096), F32)
    with emulator.options(target="trn1"), pytest.raises(emulator.CapacityError, match="direct allocation"):
        _placed_high(x)


@nki.jit
def _placed_high(x):
    import neuronxcc.nki.compiler as ncc

    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0]):
        buf = nl.ndarray((nl.par_dim(128), 4096), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=170 * 1024, num_free_tiles=(1,)))
        buf[...] = nl.load(x[i])
        nl.store(out[i], value=buf)
    return out

"""NkiTensor views: indexing rules, reshape / permute / broadcast / view(dtype), `.ap()` access
patterns, explicit `address=` placement, and the errors they raise (with the kernel's line)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui.emulator import OutOfBoundsError, PartitionDimError, PsumBankError
from tests.emulator.newns.tile_io import load as _load, store as _store

F32 = np.float32


def test_indexing_rules_partition_kept_free_dropped_hbm_numpy():
    shapes = {}

    @nki.jit
    def k(h):
        t = nl.ndarray((64, 64, 64), dtype=nl.float32, buffer=nl.sbuf)
        shapes["t[0,0,10]"] = t[0, 0, 10].shape
        shapes["t[:,0,:]"] = t[:, 0, :].shape
        shapes["t[:,:,::2]"] = t[:, :, ::2].shape
        shapes["t[0,...]"] = t[0, ...].shape
        shapes["t[nl.ds(8,16)]"] = t[nl.ds(8, 16)].shape
        shapes["h[3]"] = h[3].shape
        shapes["h[1:3, 5]"] = h[1:3, 5].shape
        return h

    k(np.zeros((4, 8), F32))
    assert shapes == {"t[0,0,10]": (1, 1), "t[:,0,:]": (64, 64), "t[:,:,::2]": (64, 64, 32), "t[0,...]": (1, 64, 64),
                      "t[nl.ds(8,16)]": (16, 64, 64), "h[3]": (8,), "h[1:3, 5]": (2,)}


def test_reshape_permute_broadcast_expand_squeeze_roundtrip(rng):
    @nki.jit
    def k(a, row):
        x = _load(a)  # (128, 64)
        p = x.reshape((128, 4, 16)).permute((0, 2, 1))  # (128, 16, 4)
        o = nl.ndarray((128, 16, 4), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=p)
        r = _load(row)  # (128, 1)
        b = nl.ndarray((128, 2, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=r.expand_dim(2).broadcast(1, 2).broadcast(2, 8))
        s = b[:, 0:1, :].squeeze_dim(1)
        sq = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sq, src=s)
        return _store(o), _store(sq)

    a = rng.random((128, 64)).astype(F32)
    row = rng.random((128, 1)).astype(F32)
    o, sq = k(a, row)
    assert np.array_equal(o, a.reshape(128, 4, 16).transpose(0, 2, 1))
    assert np.array_equal(sq, np.broadcast_to(row, (128, 8)))


def test_hbm_reshape_and_flatten_dims(rng):
    @nki.jit
    def k(v):
        rows = v.reshape((v.shape[0] // 32, 32))
        t = _load(rows[2:6, :])
        f = t.reshape((4, 4, 8)).flatten_dims(1, 2)
        o = nl.ndarray((4, 32), dtype=v.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=f)
        return _store(o)

    v = rng.random(256).astype(F32)
    assert np.array_equal(k(v), v.reshape(8, 32)[2:6])


def test_view_dtype_reinterprets_bytes(rng):
    @nki.jit
    def k(a):
        x = _load(a)  # (16, 8) float32
        u = x.view(nl.uint8)  # (16, 32)
        o = nl.ndarray(u.shape, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=u)
        return _store(o)

    a = rng.random((16, 8)).astype(F32)
    assert np.array_equal(k(a), a.view(np.uint8))


def test_ap_sbuf_strided_interleave_and_hbm_transpose(rng):
    @nki.jit
    def k(a):
        x = _load(a)  # (32, 4*8): four tiles of 8 side by side
        o = nl.ndarray((32, 8, 4), dtype=a.dtype, buffer=nl.sbuf)
        # read one element of each tile in turn: the MX interleave
        nisa.tensor_copy(dst=o, src=x.ap(pattern=[[32, 32], [1, 8], [8, 4]], offset=0))
        t = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[1, a.shape[1]], [a.shape[1], a.shape[0]]], offset=0))
        return _store(o), _store(t)

    a = rng.random((32, 32)).astype(F32)
    o, t = k(a)
    assert np.array_equal(o, a.reshape(32, 4, 8).transpose(0, 2, 1))
    assert np.array_equal(t, a.T)


def test_ap_with_scalar_offset_register_and_dtype(rng):
    @nki.jit
    def k(a, off):
        r = nisa.register_alloc()
        nisa.register_load(r, _load(off))
        t = nl.ndarray((4, 16), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[16, 4], [1, 16]], offset=0, scalar_offset=r, indirect_dim=0))
        b = nl.ndarray((4, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=t.ap(pattern=[[32, 4], [1, 32]], offset=0, dtype=nl.bfloat16))
        return _store(t), _store(b)

    a = rng.random((10, 16)).astype(F32)
    t, b = k(a, np.array([[3]], np.int32))
    assert np.array_equal(t, a[3:7])
    assert np.array_equal(b.view(np.uint16), a[3:7].view(np.uint16).reshape(4, 32))


def test_ap_partition_access_must_be_contiguous():
    @nki.jit
    def k(a):
        t = _load(a)
        t.ap(pattern=[[64, 8], [1, 32]], offset=0)
        return a

    with pytest.raises(PartitionDimError, match="partition access must be contiguous") as e:
        k(np.zeros((16, 32), F32))
    assert e.value.file == "test_views.py"


def test_explicit_addresses_alias_like_the_hardware(rng):
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
        u = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096 + 128))
        nisa.dma_copy(dst=t, src=a)
        nisa.memset(dst=u, value=7.0)  # overlaps columns 32..63 of t
        return _store(t)

    a = rng.random((128, 64)).astype(F32)
    out = k(a)
    assert np.array_equal(out[:, :32], a[:, :32]) and (out[:, 32:] == 7).all()


def test_psum_address_must_start_at_a_bank_boundary():
    @nki.jit
    def k(a):
        nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum, address=(0, 1024))
        return a

    with pytest.raises(PsumBankError, match="bank boundary"):
        k(np.zeros(1, F32))


def test_multi_bank_psum_tensor_indexed_bank_by_bank(rng):
    @nki.jit
    def k(x, y):
        ps = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.psum)
        X, Y = _load(x), _load(y)
        for b in range(4):
            nisa.nc_matmul(ps[:, b * 512:(b + 1) * 512], X, Y[:, b * 512:(b + 1) * 512])
        o = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        return _store(o)

    x = rng.standard_normal((128, 128)).astype(F32)
    y = rng.standard_normal((128, 2048)).astype(F32)
    assert np.allclose(k(x, y), x.T @ y, rtol=1e-4, atol=1e-3)


def test_out_of_bounds_slices_name_the_tensor_and_line():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, name="tile")
        nisa.dma_copy(dst=t[:, 0:65], src=a)
        return a

    with pytest.raises(OutOfBoundsError, match="tensor 'tile' on dimension 1") as e:
        k(np.zeros((128, 65), F32))
    assert e.value.file == "test_views.py" and e.value.line > 0


def test_tensor_assignment_is_not_part_of_the_namespace():
    @nki.jit
    def k(a):
        t = _load(a)
        t[0:4, :] = t[4:8, :]
        return a

    with pytest.raises(nki.isa.NkiValidationError, match="tensor assignment"):
        k(np.zeros((8, 4), F32))


def test_tensor_attributes():
    seen = {}

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 4, 16), dtype=nl.bfloat16, buffer=nl.sbuf, name="t")
        v = t[:, 1:3, ::2]
        seen.update(shape=v.shape, dtype=v.dtype, buffer=v.buffer, strides=v.strides, offset=v.offset,
                    pattern=v.get_pattern(), contiguous=v.is_contiguous(), whole=t.is_contiguous(),
                    hbm=a.buffer, ndim=v.ndim)
        return a

    k(np.zeros((2, 2), F32))
    assert seen["shape"] == (128, 2, 8) and seen["dtype"] == nl.bfloat16 == ml_dtypes.bfloat16
    assert seen["buffer"] == nl.sbuf and seen["hbm"] == nl.shared_hbm
    assert seen["strides"] == (64, 16, 2) and seen["offset"] == 16
    assert seen["pattern"] == [[64, 128], [16, 2], [2, 8]]
    assert seen["contiguous"] is False and seen["whole"] is True and seen["ndim"] == 3


@pytest.mark.parametrize("pattern, message", [("p a) -> p a", "'\\)' without '\\('"),
                                              ("p a b -> p (a b", "'\\(' without '\\)'")])
def test_rearrange_with_unbalanced_parentheses_says_so(pattern, message):
    # a stray ')' used to fail inside the parser (TypeError: 'NoneType' object is not iterable) and an
    # unclosed '(' dropped its axes, so the error blamed the axis count
    @nki.jit
    def k(a):
        _load(a).rearrange(pattern)
        return a

    with pytest.raises(nki.isa.NkiValidationError, match=f"rearrange: {message}"):
        k(np.zeros((8, 4), F32))

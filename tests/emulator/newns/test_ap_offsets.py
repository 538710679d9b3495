"""`.ap()` dynamic offsets (issue #19, cause 4: wrong numbers before): `scalar_offset` and
`vector_offset` move along the *tensor's* dimension `indirect_dim` (its stride), not along the
pattern's k-th step; and a pattern that leaves the tensor is only an error when an instruction
uses it (`dma_copy(oob_mode=skip)` drops what lies outside).

Docs (nki/deep-dives/nki-aps.rst): scalar_offset gives "the location to start the access in terms
of number of elements on the indirect_dim"; nki-library's attention_block_tkg relies on "the DMA
engine scales token_indices[b] by d_head (stride of indirect_dim=0)" with a pattern step of 1."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui.emulator import OutOfBoundsError
from tests.emulator.newns.tile_io import load as _load

F32 = np.float32


def _scalar(v) -> np.ndarray:
    return np.array([[v]], dtype=np.int32)


def test_scalar_offset_moves_by_the_tensors_dimension_stride_not_the_patterns_step():
    # (4, 2, 8) data; the pattern reads 2 rows of 8 (step 8); index 1 on dimension 0 is x[1]
    @nki.jit
    def k(x, i):
        t = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 2], [1, 8]], offset=0, scalar_offset=_load(i), indirect_dim=0))
        out = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(64, dtype=F32).reshape(4, 2, 8)
    for i in range(4):
        assert np.array_equal(k(x, _scalar(i)), x[i])


def test_scalar_offset_on_a_dimension_the_pattern_does_not_have():
    # nki-library's transposed K-cache update: K_cache (B, d, S), write S_tkg columns at `start`
    B, D, S, T = 2, 4, 16, 3

    @nki.jit
    def k(cache_in, new, starts):
        cache = nl.ndarray(cache_in.shape, dtype=cache_in.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=cache, src=cache_in)
        pos = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        for b in range(B):
            nisa.dma_copy(dst=pos, src=starts[b])
            nisa.dma_copy(dst=cache.ap(pattern=[[S, D], [1, T]], offset=b * D * S, scalar_offset=pos, indirect_dim=2),
                          src=new[:, nl.ds(b * T, T)])
        return cache

    cache = np.zeros((B, D, S), F32)
    new = np.arange(D * B * T, dtype=F32).reshape(D, B * T) + 1
    starts = np.array([[5], [11]], dtype=np.uint32)
    expect = cache.copy()
    for b in range(B):
        expect[b, :, starts[b, 0]:starts[b, 0] + T] = new[:, b * T:(b + 1) * T]
    assert np.array_equal(k(cache, new, starts), expect)


def test_scalar_offset_on_chip_free_dimension():
    @nki.jit
    def k(x, i):
        t = nl.ndarray((4, 3, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        sel = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sel, src=t.ap(pattern=[[24, 4], [1, 8]], offset=0, scalar_offset=_load(i), indirect_dim=1))
        out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sel)
        return out

    x = np.arange(96, dtype=F32).reshape(4, 3, 8)
    assert np.array_equal(k(x, _scalar(2)), x[:, 2, :])


def test_vector_offset_scales_indices_by_the_tensors_stride():
    # router_topk style: scatter one value per partition into a flat (T*E,) tensor; the pattern's
    # step on the indirect axis (7 here) is not used, the 1-D tensor's stride (1) is
    P, E = 4, 6

    @nki.jit
    def k(vals, idx):
        out = nl.ndarray((P * E,), dtype=vals.dtype, buffer=nl.shared_hbm)
        zero = nl.ndarray((1, P * E), dtype=vals.dtype, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        nisa.dma_copy(dst=out.reshape((1, P * E)), src=zero)
        nisa.dma_copy(dst=out.ap([[7, P], [1, 1]], offset=0, vector_offset=_load(idx), indirect_dim=0), src=_load(vals))
        return out

    vals = np.array([[1.0], [2.0], [3.0], [4.0]], F32)
    idx = np.array([[3], [8], [13], [23]], dtype=np.int32)
    expect = np.zeros(P * E, F32)
    expect[idx[:, 0]] = vals[:, 0]
    assert np.array_equal(k(vals, idx), expect)


def test_vector_offset_rows_of_a_reshaped_cache():
    # attention_block_tkg style: rows of cache.reshape((B*S, d)) at token_indices[b], pattern step 1
    B, S, D, T = 3, 8, 4, 2

    @nki.jit
    def k(cache_in, new, tok):
        cache = nl.ndarray(cache_in.shape, dtype=cache_in.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=cache, src=cache_in)
        src = nl.ndarray((B, T * D), dtype=new.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=new.reshape((B, T * D)))
        nisa.dma_copy(dst=cache.reshape((B * S, D)).ap(pattern=[[1, B], [D, T], [1, D]], offset=0,
                                                       vector_offset=_load(tok), indirect_dim=0),
                      src=src.ap(pattern=[[T * D, B], [D, T], [1, D]]))
        return cache

    cache = np.zeros((B, S, D), F32)
    new = np.arange(B * T * D, dtype=F32).reshape(B, T, D) + 1
    start = np.array([2, 0, 5])
    tok = (start + np.arange(B) * S).reshape(B, 1).astype(np.uint32)
    expect = cache.copy()
    for b in range(B):
        expect[b, start[b]:start[b] + T] = new[b]
    assert np.array_equal(k(cache, new, tok), expect)


def test_a_pattern_outside_the_tensor_is_an_error_only_when_used():
    @nki.jit
    def k(x, use):
        view = x.ap(pattern=[[8, 2], [1, 8]], offset=40)  # rows 5 and 6 of a 6-row tensor
        out = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[0:2, :])
        if use:
            nisa.dma_copy(dst=t, src=view)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(48, dtype=F32).reshape(6, 8)
    assert np.array_equal(k(x, False), x[0:2])
    with pytest.raises(OutOfBoundsError, match="out-of-bound"):
        k(x, True)


def test_dma_skip_drops_the_part_of_a_scalar_offset_view_outside_the_tensor():
    @nki.jit
    def k(x, i):
        t = nl.ndarray((3, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=-1.0)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 3], [1, 8]], offset=0, scalar_offset=_load(i), indirect_dim=0),
                      oob_mode=nisa.oob_mode.skip)
        out = nl.ndarray((3, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(40, dtype=F32).reshape(5, 8)
    got = k(x, _scalar(3))  # rows 3, 4 exist, row 5 does not
    assert np.array_equal(got[:2], x[3:5])
    assert np.all(got[2] == -1.0)

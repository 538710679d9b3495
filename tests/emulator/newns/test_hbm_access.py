"""HBM trace accesses of `nki` views are row x byte boxes (trace contract version 2): rows = the
root tensor's leading dims flattened, bytes = its last dim."""

from __future__ import annotations

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator

F32 = np.float32


def _hbm_accesses(build):
    """Trace a kernel that loads `build(x)` from a (64, 32) fp32 input; the load's HBM read box."""

    @nki.jit
    def k(x):
        v = build(x)
        t = nl.ndarray(tuple(v.shape) if len(v.shape) > 1 else (1, v.shape[0]), dtype=v.dtype,
                       buffer=nl.sbuf)
        nisa.dma_copy(dst=t if len(v.shape) > 1 else t[0], src=v)
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t[0:1, 0:1])
        return out

    with emulator.trace() as tr:
        k(np.zeros((64, 32), F32))
    a = tr.instructions[0].reads[0]
    return a.p0, a.p1, a.b0, a.b1


def test_slices_give_rows_and_bytes_within_a_row():
    assert _hbm_accesses(lambda x: x[8:24, 4:12]) == (8, 24, 16, 48)


def test_a_view_inside_one_row_is_one_row():
    assert _hbm_accesses(lambda x: x[5:6, 3:9]) == (5, 6, 12, 36)


def test_access_pattern_stepping_whole_rows():
    # 64 rows x 16 columns starting at column 8
    assert _hbm_accesses(lambda x: x.ap([[32, 64], [1, 16]], offset=8)) == (0, 64, 32, 96)


def test_access_pattern_crossing_rows_covers_whole_rows():
    # elements 20..59 run across rows 0 and 1: the box covers both rows completely
    assert _hbm_accesses(lambda x: x.ap([[1, 40]], offset=20)) == (0, 2, 0, 128)


def test_reshaped_view_maps_back_to_the_root_rows():
    # (64, 32) seen as (32, 64): view rows 2..3 are root rows 4..7
    assert _hbm_accesses(lambda x: x.reshape((32, 64))[2:4, :]) == (4, 8, 0, 128)


def test_stores_to_disjoint_column_tiles_do_not_overlap():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        out = nl.ndarray((128, 1536), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:512], src=t)
        nisa.dma_copy(dst=out[:, 512:1024], src=t)
        nisa.dma_copy(dst=out[:, 768:1280], src=t)
        return out

    with emulator.trace() as tr:
        k(np.ones((128, 512), F32))
    w0, w1, w2 = (i.writes[0] for i in tr.instructions[1:])
    assert (w1.p0, w1.p1, w1.b0, w1.b1) == (0, 128, 2048, 4096)
    assert not w0.overlaps(w1)
    assert w1.overlaps(w2) and not w0.overlaps(w2)

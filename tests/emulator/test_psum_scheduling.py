"""PSUM capacity under the compiler's reordering (issue #19).

nki-library's moe_cte `SHARD_ON_INTERMEDIATE` (bwmm_shard_on_I.py, I=3072) allocates one PSUM tile
per 128-wide slice of the intermediate dimension (12 of one bank each) before its loop, accumulates
slice i's matmuls inside iteration i, and copies all twelve out to SBUF after the loop. In program
order twelve banks are live at the copies; the compiler, which "may reorder operations that have no
data dependencies" (NKI language guide), runs each copy once its slice's last matmul is done, and
allocates a tile from its first write (not from `nl.ndarray`). The emulator counts PSUM the same
way; a kernel whose reads depend on a value computed from all its live tiles still needs them all
at once, and still gets the capacity error.
"""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator

F32 = np.float32
TILES = 12  # PSUM tiles of one bank each; the core has 8 banks


@nki.jit
def accumulate_then_copy_after_the_loop(w, x):
    """bwmm_shard_on_I's shape: all PSUM tiles allocated first, copied after the accumulation loop."""
    out = nl.ndarray((TILES * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    xs = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    ws = nl.ndarray((128, TILES * 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ws, src=w)
    psum = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(TILES)]
    res = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf) for _ in range(TILES)]
    for i in range(TILES):
        for k in range(2):  # two accumulating matmuls per tile
            nisa.nc_matmul(dst=psum[i], stationary=ws[:, i * 128:(i + 1) * 128], moving=xs)
    for i in range(TILES):  # in program order all twelve are live here
        nisa.tensor_copy(dst=res[i], src=psum[i])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=res[i])
    return out


@nki.jit
def reads_need_a_value_from_every_tile(w, x):
    """Nine tiles whose reads depend on a sum over all nine: any schedule keeps nine banks live."""
    n = 9
    out = nl.ndarray((n * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    xs = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    ws = nl.ndarray((128, n * 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ws, src=w)
    psum = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(n)]
    for i in range(n):
        nisa.nc_matmul(dst=psum[i], stationary=ws[:, i * 128:(i + 1) * 128], moving=xs)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=total, src=psum[0])
    for i in range(1, n):  # total depends on every tile
        nisa.tensor_tensor(dst=total, data1=total, data2=psum[i], op=nl.add)
    res = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf) for _ in range(n)]
    for i in range(n):  # each tile is read again after `total`: all nine are live until then
        nisa.tensor_tensor(dst=res[i], data1=psum[i], data2=total, op=nl.subtract)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=res[i])
    return out


def _inputs(n):
    rng = np.random.default_rng(0)
    return rng.standard_normal((128, n * 128)).astype(F32), rng.standard_normal((128, 512)).astype(F32)


def test_tiles_copied_after_the_loop_fit_once_each_copy_can_follow_its_last_matmul():
    w, x = _inputs(TILES)
    with emulator.options(capacity="error"):
        out = accumulate_then_copy_after_the_loop(w, x)
    want = np.concatenate([2 * (w[:, i * 128:(i + 1) * 128].T.astype(np.float64) @ x) for i in range(TILES)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    # one bank at a time: each tile is freed once its copy (moved up to its last matmul) has run
    assert accumulate_then_copy_after_the_loop.last_run.psum_peak_bytes == 2048


def test_tiles_whose_reads_depend_on_all_of_them_still_exceed_the_banks():
    w, x = _inputs(9)
    with emulator.options(capacity="error"):
        with pytest.raises(emulator.CapacityError, match=r"PSUM capacity exceeded.*8 of 8 PSUM banks"):
            reads_need_a_value_from_every_tile(w, x)

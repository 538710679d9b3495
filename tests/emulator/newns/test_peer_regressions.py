"""Valid `nki`-namespace code the emulator used to reject (issue #19), in the calling style of
aws-neuron/nki-library, with the documented rules that stay strict beside each."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator

BF16 = ml_dtypes.bfloat16
F32 = np.float32


@nki.jit
def transpose_bf16_into_fp32_psum(x):
    """nki-library's tp_broadcast: a TensorE transpose of bf16 data into an fp32 PSUM tile (a matmul
    with the identity, whose PSUM result is fp32), then a copy back to SBUF."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    tp = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=tp, data=t)
    res = nl.ndarray(tp.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=tp)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_tensor_engine_transpose_of_bf16_into_fp32_psum(rng):
    x = rng.standard_normal((64, 96)).astype(BF16)
    np.testing.assert_array_equal(transpose_bf16_into_fp32_psum(x), x.astype(F32).T)


def test_vector_engine_transpose_still_keeps_the_dtype(rng):
    @nki.jit
    def k(x):
        out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tp = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=tp, data=t, engine=nisa.vector_engine)
        nisa.dma_copy(dst=out, src=tp)
        return out

    with pytest.raises(emulator.EngineDtypeError, match="must have the same data type as that of data"):
        k(rng.standard_normal((32, 32)).astype(BF16))


# -- SBUF live ranges start at the first write, as the compiler allocates (moe_cte SHARD_ON_BLOCK) ----------


@nki.jit
def declared_early_written_late(x, y):
    """bwmm_shard_on_block's chunked path: every result tile is declared before the loop that writes it.
    `late` (120 KB per partition) is declared first but written only after `early` (120 KB) is dead, so at
    most 120 KB are live: the compiler gives `late` its address at its first write."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    late = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    early = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=early, src=x)
    nisa.dma_copy(dst=out, src=early)
    nisa.dma_copy(dst=late, src=y)
    nisa.dma_copy(dst=out, src=late)
    return out


@nki.jit
def declared_early_live_together(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    late = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    early = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=early, src=x)
    nisa.dma_copy(dst=late, src=y)  # rule: first-write-overflows
    nisa.dma_copy(dst=out, src=early)
    nisa.dma_copy(dst=out, src=late)
    return out


@nki.jit
def declared_never_used(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    unused = nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)  # noqa: F841 (never touched)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_tile_declared_early_is_live_from_its_first_write():
    x = np.ones((128, 30000), F32)
    with emulator.options(target="trn2", capacity="error"):
        np.testing.assert_array_equal(declared_early_written_late(x, 2 * x), 2 * x)
    assert declared_early_written_late.last_run.sbuf_peak_bytes == 120000


def test_tiles_declared_early_and_written_together_still_overflow_at_the_first_write():
    from pathlib import Path

    x = emulator.ShapeDtype((128, 30000), "float32")
    with emulator.options(target="trn2", capacity="strict", execute=False):
        with pytest.raises(emulator.CapacityError, match="SBUF capacity exceeded") as info:
            declared_early_live_together(x, x)
    line = next(i + 1 for i, t in enumerate(Path(__file__).read_text().splitlines())
                if t.endswith("# rule: first-write-overflows"))
    assert (info.value.file, info.value.line) == ("test_peer_regressions.py", line)
    assert "120000 B per partition while 120000 of" in str(info.value)
    assert "from its first use to its last use" in str(info.value)


def test_a_tile_no_instruction_touches_takes_no_sbuf():
    x = np.ones((128, 512), F32)
    with emulator.options(target="trn2", capacity="error"):
        declared_never_used(x)
    assert declared_never_used.last_run.sbuf_peak_bytes == 512 * 4

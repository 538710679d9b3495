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

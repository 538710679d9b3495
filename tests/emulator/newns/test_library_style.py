"""Library-style kernels run through the library's simulation entry, `nki.cpu_simulate(k)[lnc](**kw)`,
checked with the library's range-relative tolerance |a - b| <= atol + rtol * max|ref|."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
from tests.emulator.newns import library_style_kernels as lib


def max_all_close(actual, expected, rtol: float, atol: float) -> bool:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return bool(np.all(np.abs(a - e) <= atol + rtol * np.abs(e).max()))


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize(("T", "H", "dtype", "rtol"), [(96, 1024, np.float32, 1e-5),
                                                       (320, 2048, ml_dtypes.bfloat16, 2e-2)])
def test_rmsnorm_tokens_with_stack_allocator_and_views(rng, lnc, T, H, dtype, rtol):
    hidden = rng.standard_normal((T, H)).astype(dtype)
    gamma = rng.standard_normal((1, H)).astype(dtype)
    cfg = lib.NormConfig(eps=1e-5)
    out = nki.cpu_simulate(lib.rmsnorm_tokens)[lnc](hidden=hidden, gamma=gamma, cfg=cfg)
    h = hidden.astype(np.float64)
    ref = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + 1e-5) * gamma.astype(np.float64)
    assert out.dtype == hidden.dtype
    assert max_all_close(out, ref, rtol=rtol, atol=1e-5)


def test_stack_allocator_overflow_is_the_kernels_own_assertion(rng):
    cfg = lib.NormConfig(sbuf_upper=1024)
    with pytest.raises(AssertionError, match="SBUF stack overflow"):
        nki.cpu_simulate(lib.rmsnorm_tokens)[1](hidden=np.zeros((128, 1024), np.float32),
                                                gamma=np.zeros((1, 1024), np.float32), cfg=cfg)


def test_cross_core_row_sums(rng):
    x = rng.standard_normal((128, 1024)).astype(np.float32)
    out = nki.cpu_simulate(lib.row_sums_split_h)[2](x=x)
    assert max_all_close(out[:, 0], x.sum(axis=1), rtol=1e-5, atol=1e-5)
    # the two cores compute the same total: core 1's half of the rows equals core 0's formula
    again = nki.cpu_simulate(lib.row_sums_split_h)[2](x=x)
    assert np.array_equal(out, again)


def test_broadcast_transpose_through_a_repeating_access_pattern(rng):
    src = rng.standard_normal((8, 1)).astype(np.float32)
    out = nki.cpu_simulate(lib.broadcast_transpose)[1](src=src, dst_rows=128)
    assert np.array_equal(out, np.broadcast_to(src[:, 0], (128, 8)))

"""Our stand-ins for the peer suites' proprietary modules (benchmarks/peer_suites/stand_ins)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki.language as nl
from benchmarks.peer_suites.stand_ins import neuron_dtypes as dt


def test_static_cast_rounds_to_nearest_even_and_truncates_to_integers():
    x = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.7, 2.7], np.float32)
    b = dt.static_cast(x, nl.bfloat16)
    assert b.dtype == ml_dtypes.bfloat16
    assert b.astype(np.float32).tolist()[:2] == [1.0, 1.0 + 2 ** -6]  # ties to even
    assert dt.static_cast(x, np.int32).tolist()[2:] == [-2, 2]


def test_static_cast_packs_and_unpacks_mx():
    vals = np.array([[0.5, -1.0, 448.0, 0.0, 2.0, 3.0, -4.0, 6.0]], np.float32)
    packed = dt.static_cast(vals, dt.float8_e4m3fn_x4)
    assert packed.shape == (1, 2) and packed.dtype == nl.float8_e4m3fn_x4
    assert np.array_equal(dt.static_cast(packed, np.float32), vals)
    assert dt.static_cast(packed, dt.float8_e4m3fn).dtype == ml_dtypes.float8_e4m3fn


def test_dtype_queries():
    assert dt.sizeinbytes(np.float32) == 4 and dt.sizeinbytes(nl.float8_e4m3) == 1
    assert dt.sizeinbytes(dt.float8_e4m3fn_x4) == 4 and dt.sizeinbytes(dt.float4_e2m1fn_x4) == 2
    assert dt.is_float_type(nl.bfloat16) and dt.is_float_type(np.float32)
    assert not dt.is_float_type(np.int32) and not dt.is_float_type(dt.float8_e5m2_x4)
    assert dt.finfo(nl.float8_e4m3).max == 240.0 and dt.finfo(nl.bfloat16).dtype == ml_dtypes.bfloat16
    assert dt.finfo(np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="packed MX type"):
        dt.finfo(dt.float8_e5m2_x4)

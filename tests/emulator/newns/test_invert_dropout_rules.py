"""nl.invert agrees between the legacy and nki namespaces (integers only, as both docs say), and
nisa.dropout's dtype rule cites dropout's own docs (issue #19, small items)."""

from __future__ import annotations

import numpy as np
import pytest

import neuronxcc.nki as legacy_nki
import neuronxcc.nki.isa as legacy_nisa
import neuronxcc.nki.language as legacy_nl
import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator


@legacy_nki.jit
def legacy_invert(x):
    out = legacy_nl.ndarray(x.shape, dtype=x.dtype, buffer=legacy_nl.shared_hbm)
    legacy_nl.store(out, value=legacy_nl.invert(legacy_nl.load(x)))
    return out


@nki.jit
def new_invert(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=nl.invert(t))
    return out


@pytest.mark.parametrize("dtype, values", [
    (np.uint8, [0, 1, 200, 255]),
    (np.uint16, [0, 1, 40000, 65535]),
    (np.uint32, [0, 7, 16777217, 3000000001]),  # beyond fp32's 24 bits: no float round trip
    (np.int8, [0, -1, 100, -128]),
    (np.int32, [0, -16777217, 7, 2000000001]),
])
def test_invert_is_the_bitwise_not_of_the_input_dtype_in_both_namespaces(dtype, values):
    x = np.array([values] * 128, dtype=dtype)
    np.testing.assert_array_equal(legacy_invert(x), ~x)
    np.testing.assert_array_equal(new_invert(x), ~x)


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_invert_refuses_non_integer_tiles_alike_in_both_namespaces(dtype):
    x = np.ones((128, 4), dtype=dtype)
    messages = []
    for kernel in (legacy_invert, new_invert):
        with pytest.raises(emulator.EngineDtypeError, match="must be an integer tile") as info:
            kernel(x)
        assert "Input must be integer typed" in str(info.value)
        messages.append(str(info.value).split(" at ")[0])
    assert messages[0] == messages[1]
    if dtype is np.bool_:
        assert "nl.logical_not" in messages[0]


def test_new_dropout_dtype_rule_cites_the_dropout_docs():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        d = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dropout(dst=d, data=t, prob=0.5)
        nisa.dma_copy(dst=out, src=d)
        return out

    with pytest.raises(emulator.EngineDtypeError) as info:
        k(np.ones((128, 8), np.float32))
    msg = str(info.value)
    assert "nki.isa.dropout docs" in msg and "dst.dtype must match the input data type" in msg
    assert "transpose" not in msg


def _legacy_dropout_to(out_dtype):
    @legacy_nki.jit
    def k(x):
        out = legacy_nl.ndarray(x.shape, dtype=out_dtype, buffer=legacy_nl.shared_hbm)
        legacy_nl.store(out, value=legacy_nisa.dropout(legacy_nl.load(x), 0.0, dtype=out_dtype))
        return out
    return k


def test_legacy_dropout_keeps_integer_dtypes_and_may_cast_floats():
    f = np.ones((128, 8), np.float32)
    np.testing.assert_array_equal(_legacy_dropout_to(legacy_nl.bfloat16)(f).astype(np.float32), f)  # floats: any
    with pytest.raises(emulator.EngineDtypeError, match="if input data type is any of the integer types"):
        _legacy_dropout_to(legacy_nl.int16)(np.ones((128, 8), np.int32))

"""Conformance of the instructions only the nki namespace has: activate2 and exponential (trn3),
the random-number instructions, and version gating."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator
from tests.emulator.newns.tile_io import load as _load, store as _store

F32 = np.float32


@nki.jit(platform_target="trn3")
def activate2_kernel(a, b):
    x = _load(a)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=o, op=nl.gelu, data=x, imm0=2.0, imm1=_load(b), op0=nl.multiply, op1=nl.add,
                   reduce_op=nl.maximum, reduce_res=m, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    s = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=s, op=nl.copy, data=x, imm0=1.0, imm1=0.0, op0=nl.subtract, op1=nl.bypass, reverse0=True)
    return _store(o), _store(m), _store(s)


def _gelu(x):
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def test_activate2_scale_bias_activation_and_max_reduction(rng):
    a = rng.standard_normal((16, 24)).astype(F32)
    b = rng.standard_normal((16, 1)).astype(F32)
    o, m, s = activate2_kernel(a, b)
    expect = _gelu(a.astype(np.float64) * 2 + b)
    assert np.allclose(o, expect, rtol=1e-5, atol=1e-6)
    assert np.allclose(m[:, 0], expect.max(axis=1), rtol=1e-5, atol=1e-6)
    assert np.array_equal(s, (F32(1) - a))  # reverse0: imm0 - data


def test_exponential_with_running_sum_over_two_calls(rng):
    @nki.jit(platform_target="trn3")
    def k(a, mx):
        x, m = _load(a), _load(mx)
        e1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        e2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e1, src=x, max_value=m, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.exponential(dst=e2, src=x, max_value=m, reduce_res=total, reduce_cmd=nisa.reduce_cmd.reduce)
        return _store(e1), _store(total)

    a = rng.standard_normal((8, 16)).astype(F32)
    mx = a.max(axis=1, keepdims=True)
    e, total = k(a, mx)
    assert np.allclose(e, np.exp(a - mx), rtol=1e-6)
    assert np.allclose(total[:, 0], 2 * np.exp(a - mx).sum(axis=1), rtol=1e-5)


def test_trn3_instructions_are_version_gated():
    with emulator.options(target="trn2"):
        with pytest.raises(emulator.EngineOpError, match="activate2 needs NeuronCore-v4"):
            nki.jit(activate2_kernel.func)(np.zeros((4, 4), F32), np.zeros((4, 1), F32))


def test_rng_is_reproducible_with_a_seed_and_spans_the_integer_type():
    @nki.jit
    def k(seed):
        s = _load(seed)
        nisa.set_rng_seed(s)
        a = nl.ndarray((64, 256), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.rng(dst=a)
        st = nl.ndarray((64, 6), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=st)
        nisa.rand_set_state(src_seeds=st)
        b = nl.ndarray((64, 256), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.rng(dst=b)
        return _store(a), _store(b)

    a1, b1 = k(np.array([[7]], np.uint32))
    a2, b2 = k(np.array([[7]], np.uint32))
    a3, _ = k(np.array([[8]], np.uint32))
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2) and not np.array_equal(a1, a3)
    assert a1.max() > 60000 and a1.min() < 5000  # 16 random bits per element
    assert abs(float(a1.mean()) - 32767.5) < 1000


def test_rand2_uniform_in_range():
    @nki.jit(platform_target="trn3")
    def k(lo):
        o = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(dst=o, min=_load(lo), max=5.0)
        return _store(o)

    lo = np.linspace(-5, 4, 128, dtype=F32).reshape(128, 1)
    out = k(lo)
    assert (out >= lo).all() and (out <= 5).all()
    assert np.allclose(out.mean(axis=1), (lo[:, 0] + 5) / 2, atol=0.4)


def test_rng_needs_an_integer_destination():
    @nki.jit
    def k():
        o = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rng(dst=o)
        return None

    with pytest.raises(emulator.EngineDtypeError, match="must be an integer type"):
        k()


def test_gather_flattened_wrapper(rng):
    @nki.jit
    def k(a, idx):
        return _store(nl.gather_flattened(_load(a), _load(idx)))

    a = rng.random((16, 3, 4)).astype(F32)
    idx = rng.integers(0, 12, size=(16, 5)).astype(np.uint32)
    assert np.array_equal(k(a, idx), np.take_along_axis(a.reshape(16, 12), idx.astype(np.int64), 1))

"""Legacy `nl.all_reduce(x, op, program_axes)` across SPMD programs (the legacy namespace's
collective): programs take turns, reductions are deterministic, mismatches are errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from nkitui import emulator

F32 = np.float32


@nki.jit
def sum_over_programs(x):
    """Each program loads its own slice, all-reduces it over axis 0 and stores the total in its row."""
    n = nl.num_programs(0)
    out = nl.ndarray((n, x.shape[1], x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    mine = nl.load(x[p])
    total = nl.all_reduce(mine, op=np.add, program_axes=0)
    nl.store(out[p], value=total)
    return out


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_over_programs(rng, n):
    x = rng.standard_normal((n, 32, 16)).astype(F32)
    out = sum_over_programs[n](x)
    expect = x[0].copy()
    for i in range(1, n):  # fp32, in program order
        expect = expect + x[i]
    for i in range(n):
        np.testing.assert_array_equal(out[i], expect)


@nki.jit
def max_along_axis1(x):
    """A 2-D grid: programs with the same id on axis 0 reduce along axis 1 only."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a, b = nl.program_id(0), nl.program_id(1)
    t = nl.all_reduce(nl.load(x[a, b]), op=np.maximum, program_axes=(1,))
    nl.store(out[a, b], value=t)
    return out


def test_all_reduce_along_one_axis_of_a_2d_grid(rng):
    x = rng.standard_normal((2, 4, 16, 8)).astype(F32)
    out = max_along_axis1[2, 4](x)
    for a in range(2):
        for b in range(4):
            np.testing.assert_array_equal(out[a, b], x[a].max(axis=0))


def test_bf16_all_reduce_is_deterministic(rng):
    x = (rng.standard_normal((4, 16, 16)) * 50).astype(ml_dtypes.bfloat16)
    runs = [sum_over_programs[4](x) for _ in range(3)]
    acc = x[0].astype(F32)
    for i in range(1, 4):
        acc = acc + x[i].astype(F32)
    for out in runs:
        np.testing.assert_array_equal(out[2], acc.astype(ml_dtypes.bfloat16))


@nki.jit
def unmatched(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    t = nl.load(x[p])
    if p == 0:  # only program 0 reduces: its peers never arrive
        t = nl.all_reduce(t, op=np.add, program_axes=0)
    nl.store(out[p], value=t)
    return out


def test_an_all_reduce_its_peers_never_reach_is_an_error_not_a_hang():
    with pytest.raises(emulator.NKIEmulatorError, match="never reach"):
        unmatched[2](np.ones((2, 8, 8), F32))


def test_a_single_program_all_reduce_is_a_copy_and_is_traced(rng):
    x = rng.standard_normal((1, 8, 8)).astype(F32)
    with emulator.trace() as tr:
        out = sum_over_programs[1](x)
    np.testing.assert_array_equal(out, x)
    ins = [i for i in tr.instructions if i.opcode == "all_reduce"]
    assert len(ins) == 1 and ins[0].meta["collective"] == "all_reduce" and ins[0].meta["programs"] == 1


def test_program_axes_must_name_grid_axes():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.all_reduce(nl.load(x), op=np.add, program_axes=1))
        return out

    with pytest.raises(emulator.IndexingError, match="program_axes"):
        k[2](np.ones((8, 8), F32))

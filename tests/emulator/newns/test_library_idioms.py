"""Idioms of nki-library's kernels that the emulator rejected (issue #19): `if tensor:` on an
optional tensor argument, `nl.NKIObject` subclasses built with keywords, and
`nl.shared_identity_matrix` used as an SBUF operand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui.emulator import OperandShapeError
from tests.emulator.newns.tile_io import load as _load, store as _store

F32 = np.float32


class Section(nl.NKIObject):  # a plain subclass: class attributes as defaults, built with keywords
    index = None
    offset = 0


@dataclass
class Dims(nl.NKIObject):
    rows: int = 0
    cols: int = 0


@dataclass
class SectionParams(nl.NKIObject):  # attention_cte: a dataclass of class attributes (no fields), built with keywords
    section_idx = None
    section_offset = None


@dataclass
class Sized(Dims):  # fields inherited from a dataclass base: the dataclass __init__ (positional too) stays
    pass


def test_if_on_an_optional_tensor_argument_is_true_when_given(rng):
    @nki.jit
    def k(x, bias=None):
        t = _load(x)
        if bias:  # nki-library: `if params.expert_params.expert_index:`
            nisa.tensor_tensor(dst=t, data1=t, data2=_load(bias), op=nl.add)
        return _store(t)

    x = rng.random((4, 8)).astype(F32)
    b = rng.random((4, 8)).astype(F32)
    assert np.array_equal(k(x), x)
    assert np.allclose(k(x, b), x + b, rtol=0, atol=1e-7)


def test_nkiobject_subclasses_are_built_with_keywords():
    seen = {}

    @nki.jit
    def k(x):
        s = Section(index=2, offset=16)
        d = Dims(rows=x.shape[0], cols=x.shape[1])
        seen.update(index=s.index, offset=s.offset, dims=(d.rows, d.cols), default=Section().offset)
        return x

    k(np.zeros((4, 8), F32))
    assert seen == {"index": 2, "offset": 16, "dims": (4, 8), "default": 0}
    sp = SectionParams(section_idx=3, section_offset=384)
    assert (sp.section_idx, sp.section_offset, SectionParams().section_idx) == (3, 384, None)
    assert (Sized(2, 5).rows, Sized(cols=7).cols, Dims(1, 2) == Dims(rows=1, cols=2)) == (2, 7, True)
    assert isinstance(nl.ndarray, object) and issubclass(nl.NkiTensor, nl.NKIObject)
    with pytest.raises(TypeError):
        Section(1)  # keywords only, as the SDK's NKIObject.__init__(**kwargs)


def test_shared_identity_matrix_is_an_sbuf_operand(rng):
    @nki.jit
    def k(x):
        n = x.shape[0]
        eye = nl.shared_identity_matrix(n, dtype=nl.float32)
        assert eye.buffer == nl.sbuf
        ps = nl.ndarray((n, x.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=eye, moving=_load(x))  # eye.T @ x == x
        t = nl.ndarray(ps.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=ps)
        # rope's permutation: a strided access pattern over the identity in SBUF
        half = n // 2
        perm = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=perm.reshape((n, 2, half)), src=eye.ap(pattern=[[n, n], [1, 2], [2, half]]))
        return _store(t), _store(perm)

    x = rng.random((8, 16)).astype(F32)
    got, perm = k(x)
    assert np.allclose(got, x, rtol=0, atol=1e-6)
    expect = np.eye(8).reshape(8, 4, 2).transpose(0, 2, 1).reshape(8, 8)
    assert np.array_equal(perm, expect)


def test_shared_identity_matrix_into_a_given_tile_checks_its_shape():
    @nki.jit
    def k(x, n):
        dst = nl.ndarray((8, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nl.shared_identity_matrix(n, dtype=nl.bfloat16, dst=dst)
        return _store(dst)

    assert np.array_equal(k(np.zeros(1, F32), 8).astype(F32), np.eye(8))
    with pytest.raises(OperandShapeError, match=r"dst has shape \(8, 8\)"):
        k(np.zeros(1, F32), 4)


def test_a_tensore_transpose_widens_like_a_matmul_against_an_identity(rng):
    # nki.isa.nc_transpose's docs ask for dst dtype == data dtype, but a TensorE transpose is a matmul
    # with the identity and nki-library writes bf16 data transposed into fp32 PSUM: both give x.T exactly.
    # (VectorE transposes keep the rule: tests/emulator/newns/test_peer_regressions.py.)
    @nki.jit
    def k(x, widen_with_transpose):
        t = _load(x)  # bf16 (32, 16)
        ps = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.psum)
        if widen_with_transpose:
            nisa.nc_transpose(dst=ps, data=t)
        else:
            eye = nl.shared_identity_matrix(32, dtype=nl.bfloat16)
            nisa.nc_matmul(dst=ps, stationary=t, moving=eye)
        return _store(ps)

    import ml_dtypes

    x = rng.random((32, 16)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(k(x, False), x.astype(F32).T)
    assert np.array_equal(k(x, True), x.astype(F32).T)

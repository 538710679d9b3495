"""Device provenance: which arrays a launch produced on the emulated device (nkitui.emulator.provenance)."""

from __future__ import annotations

import numpy as np

from nkitui.emulator import provenance


def _kernels(nki, nl):
    @nki.jit
    def mul(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), nl.load(b)))
        return out

    @nki.jit
    def into(a, b, out):  # outputs passed as arguments
        nl.store(out, nl.add(nl.load(a), nl.load(b)))

    @nki.jit
    def unwritten(a, b):
        return nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)

    @nki.jit
    def constant(a, b):
        return nl.shared_constant(np.ones((128, 4), np.float32))

    return mul, into, unwritten, constant


A = np.full((128, 4), 2.0, np.float32)
B = np.full((128, 4), 3.0, np.float32)


def test_the_kernels_own_hbm_output_counts(nki, nl):
    mul, *_ = _kernels(nki, nl)
    with provenance.collect() as seen:
        out = mul(A, B)
    origin = seen.origin(out)
    assert origin is not None and origin.kind == "returned" and origin.kernel == "mul" and origin.writes >= 1


def test_host_arrays_wrappers_and_later_changes_do_not(nki, nl):
    mul, *_ = _kernels(nki, nl)
    with provenance.collect() as seen:
        out = mul(A, B)
        host = np.add(A, B)  # numpy on the inputs
        wrapped = (lambda a, b: (mul(a, b), a + b)[1])(A, B)  # runs the kernel, returns numpy's answer
        changed = mul(A, B)
        changed[...] = A + B  # the device's tensor, rewritten on the host
    assert seen.origin(out) is not None
    assert seen.origin(host) is None and seen.changed(host) is None
    assert seen.origin(wrapped) is None
    assert seen.origin(changed) is None and seen.changed(changed) is not None


def test_outputs_written_into_arguments_count_and_unwritten_or_constant_tensors_do_not(nki, nl):
    _, into, unwritten, constant = _kernels(nki, nl)
    out = np.full((128, 4), np.nan, np.float32)
    with provenance.collect() as seen:
        into(A, B, out)
        empty = unwritten(A, B)
        const = constant(A, B)
    origin = seen.origin(out)
    assert origin is not None and origin.kind == "argument" and np.all(out == 5)
    assert seen.origin(empty) is None  # never written by an instruction
    assert seen.origin(const) is None  # a constant the host made, not a result


def test_nothing_is_noted_outside_a_collector(nki, nl):
    mul, *_ = _kernels(nki, nl)
    out = mul(A, B)
    with provenance.collect() as seen:
        pass
    assert seen.origin(out) is None and not provenance.collecting()

"""The reduction-length bound from a real emulator trace (evaluate/numerics/kbound.py): what the kernel's
instructions can accumulate into one output element."""

from __future__ import annotations

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.evaluate.numerics.kbound import trace_bound
from tests.emulator.tutorial_kernels import add_tiles_spmd, matmul_blocked, matmul_tiled, rms_norm

F32 = np.float32


def test_the_trace_of_an_element_wise_kernel_bounds_k_to_its_operands() -> None:
    a, b = np.ones((256, 1024), F32), np.ones((256, 1024), F32)
    with emulator.trace() as tr:
        add_tiles_spmd(a, b)
    bound = trace_bound(tr)
    assert bound is not None and bound.terms == 2, bound  # a + b: two terms, whatever the size


def test_the_trace_of_a_matmul_bounds_k_at_or_above_its_contraction() -> None:
    for kernel in (matmul_tiled, matmul_blocked):
        lhs_t, rhs = np.ones((512, 128), F32), np.ones((512, 512), F32)
        with emulator.trace() as tr:
            kernel(lhs_t, rhs)
        bound = trace_bound(tr)
        assert bound is not None and 512 <= bound.terms <= 4 * 512 * 4, (kernel, bound)



def test_the_trace_of_a_row_reduction_bounds_k_at_or_above_the_row() -> None:
    x, w = np.ones((256, 512), F32), np.ones((512,), F32)
    with emulator.trace() as tr:
        rms_norm(x, w)
    bound = trace_bound(tr)
    assert bound is not None and bound.terms >= 512, bound


@nki.jit
def _row_moments(x):
    """mean and variance of each row of a [128, F] input (F within one bn_stats chunk), nothing else."""
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.load(x)
    stats = nisa.bn_stats(xt, dtype=nl.float32)
    nl.store(out, value=nisa.bn_aggr(stats))
    return out


def test_the_trace_of_bn_stats_counts_the_whole_row_behind_each_statistic() -> None:
    """bn_stats writes six statistics per partition, each over the whole row: not row/6 terms."""
    x = np.ones((128, 512), F32)
    with emulator.trace() as tr:
        _row_moments(x)
    bound = trace_bound(tr)
    assert bound is not None and bound.terms >= 512, bound

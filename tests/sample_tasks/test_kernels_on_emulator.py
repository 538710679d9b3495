"""The sample kernels on nkitui's emulator, judged against their numpy references.

Good tasks pass their own tolerance on every seed. Of the flawed tasks only `flawed_partial_tile`
fails (in the last row of the last, partial tile); the others pass their own tolerance, and the
tests below show that their flaw is nonetheless real.
"""

from __future__ import annotations

import numpy as np
import pytest

from nkitui.evaluate.numerics.inputs import make_inputs
from nkitui.evaluate.numerics.tolerance import check_policy, rel_l2_error
from nkitui.task import Tolerance
from nkitui.task.dtypes import numpy_dtype
from tests.sample_tasks.harness import evaluate, good_task_names, load, run_reference


def _seed_cases(names):
    return [pytest.param(name, seed, id=f"{name}-seed{seed}") for name in names for seed in load(name).seeds]


@pytest.mark.parametrize(("name", "seed"), _seed_cases(good_task_names()))
def test_good_kernel_matches_reference(name, seed):
    task = load(name)
    for check in evaluate(task, seed):
        assert check.actual.shape == check.spec.shape
        assert check.actual.dtype == numpy_dtype(check.spec.dtype), "output dtype as declared"
        assert np.isfinite(check.actual.astype(np.float64)).all()
        assert check.outcome.passed, (
            f"{name} seed {seed} output {check.spec.name}: {check.outcome.mismatches} of "
            f"{check.outcome.total} elements break {check.spec.tolerance.describe()}"
        )


@pytest.mark.parametrize("seed", load("flawed_partial_tile").seeds)
def test_flawed_partial_tile_fails_in_the_last_row_only(seed):
    task = load("flawed_partial_tile")
    (check,) = evaluate(task, seed)
    assert not check.outcome.passed
    n_rows, n_cols = check.spec.shape
    bad = ~np.isclose(check.actual.astype(np.float64), check.expected, atol=1e-5, rtol=1e-5)
    bad_rows = np.unique(np.nonzero(bad)[0])
    assert bad_rows.tolist() == [n_rows - 1]
    assert bad[n_rows - 1].all(), "the whole last row is wrong (never written)"
    assert check.outcome.mismatches == n_cols


@pytest.mark.parametrize(
    ("name", "seed"),
    _seed_cases(["flawed_transliteration", "flawed_loose_tolerance", "flawed_bf16_accum"]),
)
def test_sneaky_flawed_kernel_passes_its_own_tolerance(name, seed):
    task = load(name)
    for check in evaluate(task, seed):
        assert check.outcome.passed, f"{name} seed {seed}: {check.outcome.mismatches} mismatches"


@pytest.mark.parametrize("seed", load("flawed_loose_tolerance").seeds)
def test_loose_tolerance_lets_all_zeros_pass(seed):
    task = load("flawed_loose_tolerance")
    (spec,) = task.outputs
    expected = run_reference(task, make_inputs(task, seed))[spec.name]
    zeros = np.zeros(spec.shape, dtype=numpy_dtype(spec.dtype))
    assert check_policy(zeros, expected, spec.tolerance, spec.dtype).passed


def test_bf16_accumulation_error_dwarfs_fp32_psum_accumulation():
    task = load("flawed_bf16_accum")
    (check,) = evaluate(task, task.seeds[0])
    error = rel_l2_error(check.actual, check.expected)
    # fp32 accumulation of K=2048 bf16 products with an fp32 result is good to ~1e-7 (rel L2);
    # rounding the running sum to bf16 at each of the 16 K tiles costs ~5e-3.
    assert error > 1e-3
    # The tolerance the good matmul task uses would have caught it.
    assert not check_policy(check.actual, check.expected, Tolerance("allclose", atol=1e-3, rtol=1e-2)).passed


@pytest.mark.parametrize("name", good_task_names())
def test_good_task_tolerance_rejects_an_all_zeros_output(name):
    task = load(name)
    expected = run_reference(task, make_inputs(task, task.seeds[0]))
    for spec in task.outputs:
        zeros = np.zeros(spec.shape, dtype=numpy_dtype(spec.dtype))
        assert not check_policy(zeros, expected[spec.name], spec.tolerance, spec.dtype).passed

import json

import ml_dtypes
import numpy as np
import pytest

from nkitui.evaluate.numerics.heatmap import localise, tile_heatmap
from nkitui.evaluate.numerics.metrics import OutputMetrics, ShapeMismatchError, compute_metrics
from nkitui.evaluate.numerics.tolerance import TolerancePolicy


def _pair(shape=(300, 512), seed=0):
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=shape)
    got = (ref + rng.normal(scale=1e-7, size=shape)).astype(np.float32)
    return got, ref


def test_basic_metrics_are_computed_in_float64():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    got = np.array([1.0, -2.5, 1e-3, 4.0], dtype=np.float32)
    m = compute_metrics("out", got, ref, {"kind": "allclose", "atol": 1e-2, "rtol": 1e-2})
    assert m.max_abs == pytest.approx(0.5)
    assert m.max_rel == float("inf")  # 1e-3 where the reference is 0
    assert m.mismatches == 1 and not m.passed
    assert m.rel_l2 == pytest.approx(np.sqrt(0.25 + float(np.float32(1e-3)) ** 2) / np.sqrt(21.0))
    assert m.worst[0].index == (1,) and m.worst[0].mismatch
    assert m.worst[0].actual == -2.5 and m.worst[0].expected == -2.0
    assert m.ref_max_abs == 4.0
    assert m.max_ulp is not None and m.max_ulp > 1e6


def test_every_convention_is_reported_with_where_its_parameters_came_from():
    got, ref = _pair()
    m = compute_metrics("out", got, ref, TolerancePolicy(kind="allclose", atol=1e-6, rtol=1e-5),
                        conventions={"rel_l2": TolerancePolicy(kind="rel_l2", tol=1e-9)})
    kinds = {c.policy.kind: c for c in m.conventions}
    assert set(kinds) == {"allclose", "range_relative", "rel_l2", "ulp", "exact"}
    assert kinds["allclose"].source == "task" and kinds["allclose"].passed
    assert kinds["rel_l2"].source == "advice" and not kinds["rel_l2"].passed
    assert kinds["exact"].source == "default" and not kinds["exact"].passed
    assert 0 < kinds["exact"].fraction <= 1


def test_nan_and_inf_accounting():
    ref = np.array([1.0, np.nan, np.inf, 2.0, 3.0, -np.inf])
    got = np.array([np.nan, np.nan, np.inf, np.inf, 3.0, 5.0])
    m = compute_metrics("y", got, ref, TolerancePolicy(kind="allclose", atol=1, rtol=1))
    nf = m.nonfinite
    assert (nf.actual_nan, nf.actual_posinf, nf.expected_nan, nf.expected_posinf, nf.expected_neginf) == (2, 2, 1, 1, 1)
    assert nf.matched == 2
    assert (nf.nan_where_finite, nf.inf_where_finite, nf.finite_where_nonfinite) == (1, 1, 1)
    assert nf.mismatched == 3 == m.mismatches
    assert m.max_abs == 0.0  # finite pairs agree exactly
    assert {w.index for w in m.worst if w.mismatch} == {(0,), (3,), (5,)}


def test_bf16_outputs_get_ulps_in_bf16():
    ref = np.array([1.0, 1.0, 1.0])
    got = np.array([1.0, 1 + 2**-7, 1 + 2**-5]).astype(ml_dtypes.bfloat16)
    m = compute_metrics("o", got, ref, TolerancePolicy(kind="ulp", max_ulp=1), "bfloat16")
    assert m.dtype == "bfloat16"
    assert m.max_ulp == 4.0 and m.statistic == 4.0
    assert m.mismatches == 1


def test_shape_mismatch_names_the_output_and_hints_at_layout():
    with pytest.raises(ShapeMismatchError, match=r"output 'c': the kernel returned shape \(4, 2\), the reference \(2, 4\)"
                       r".*layout"):
        compute_metrics("c", np.zeros((4, 2)), np.zeros((2, 4)), TolerancePolicy())


def test_heat_map_marks_the_last_partial_tile():
    got, ref = _pair()
    got[299, :] = np.nan
    m = compute_metrics("y", got, ref, TolerancePolicy(kind="allclose", atol=1e-5, rtol=1e-5))
    h = m.heatmap
    assert h.grid == (3, 1) and h.row_edges == (0, 128, 256, 300)
    assert [row[0] for row in h.mismatches] == [0, 0, 512]
    assert h.max_abs[2][0] == float("inf") and h.max_abs[0][0] < 1e-5
    assert [row[0] for row in h.elements] == [128 * 512, 128 * 512, 44 * 512]
    loc = m.localisation
    assert loc is not None and loc.concentrated
    assert loc.rows == (299, 299) and loc.row_tiles == (2,) and loc.last_row_tile_partial
    assert "only the last row tile (a partial tile)" in loc.summary


def test_heat_map_merges_tiles_to_stay_small():
    err = np.zeros((2 * 200, 3 * 150))
    err[-1, -1] = 1.0
    h = tile_heatmap(err, err > 0, tile=(2, 3), max_cells=64)
    rows, cols = h.grid
    assert rows <= 64 and cols <= 64
    assert h.cell[0] % 2 == 0 and h.cell[0] > 2 and h.cell[1] % 3 == 0
    assert h.mismatches[-1][-1] == 1 and sum(map(sum, h.mismatches)) == 1
    assert sum(map(sum, h.elements)) == err.size


def test_spread_failures_are_not_called_concentrated():
    bad = np.zeros((512, 512), dtype=bool)
    bad[::50, ::70] = True
    loc = localise(bad)
    assert loc is not None and not loc.concentrated
    assert localise(np.zeros((4, 4), dtype=bool)) is None


def test_one_dimensional_and_scalar_outputs():
    m = compute_metrics("v", np.arange(1000.0), np.arange(1000.0), TolerancePolicy(kind="exact"), "float32")
    assert m.passed and m.heatmap.shape == (1000, 1)
    s = compute_metrics("s", np.float32(1.0), np.float64(1.0), TolerancePolicy(kind="exact"), "float32")
    assert s.passed and s.heatmap.grid == (1, 1)


def test_metrics_round_trip_through_strict_json():
    got, ref = _pair()
    got[0, 0] = np.inf
    m = compute_metrics("y", got, ref, TolerancePolicy(kind="allclose", atol=1e-5, rtol=1e-5))
    text = json.dumps(m.to_dict(), allow_nan=False)
    back = OutputMetrics.from_dict(json.loads(text))
    assert back.to_dict() == m.to_dict()
    assert back.nonfinite.inf_where_finite == 1


def test_worst_elements_list_mismatches_first_by_error_then_the_lower_index():
    b = np.zeros(1000)
    a = np.zeros(1000)
    a[[10, 20, 30]] = [0.5, 0.7, 0.5]  # mismatches under atol 0.1
    a[[40, 50]] = [0.05, 0.05]  # within tolerance, equal errors
    m = compute_metrics("y", a, b, {"kind": "allclose", "atol": 0.1, "rtol": 0.0}, "float32", worst_k=5)
    assert [w.index[0] for w in m.worst] == [20, 10, 30, 40, 50]
    assert [w.mismatch for w in m.worst] == [True, True, True, False, False]
    # an exact match: every error ties at zero, the lowest indices come first
    exact = compute_metrics("y", b, b, {"kind": "exact"}, "float32", worst_k=3)
    assert [w.index[0] for w in exact.worst] == [0, 1, 2]
    # more mismatches than slots: the largest of them (NaN/Inf disagreements rank as infinite)
    a2 = np.linspace(0.2, 0.9, 1000)
    a2[500] = np.nan
    many = compute_metrics("y", a2, b, {"kind": "allclose", "atol": 0.1, "rtol": 0.0}, "float32", worst_k=3)
    assert [w.index[0] for w in many.worst] == [500, 999, 998]

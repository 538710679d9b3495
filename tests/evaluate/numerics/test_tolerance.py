import numpy as np
import pytest

from nkitui.evaluate.numerics.tolerance import (
    Comparison,
    Reference,
    TolerancePolicy,
    check_policy,
    element_mismatches,
    policy_from_dict,
    rel_l2_error,
)


def test_allclose_is_numpy_allclose():
    rng = np.random.default_rng(0)
    b = rng.normal(size=1000)
    a = b + rng.normal(scale=1e-4, size=1000)
    p = TolerancePolicy(kind="allclose", atol=1e-5, rtol=1e-4)
    expected = ~np.isclose(a, b, atol=1e-5, rtol=1e-4)
    assert np.array_equal(element_mismatches(a, b, p), expected)
    assert check_policy(a, b, p).passed == np.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_range_relative_uses_the_largest_reference_value():
    b = np.array([100.0, 0.0, 1.0])
    a = np.array([100.5, 0.5, 1.5])
    assert not check_policy(a, b, TolerancePolicy(kind="allclose", atol=0, rtol=1e-2)).passed
    assert check_policy(a, b, TolerancePolicy(kind="range_relative", atol=0, rtol=1e-2)).passed


def test_rel_l2_is_judged_on_the_norm_and_counts_elements_over_their_share():
    b = np.ones(100)
    a = b.copy()
    a[0] += 0.05  # ||a-b|| = 0.05, ||b|| = 10
    p = TolerancePolicy(kind="rel_l2", tol=0.01)
    out = check_policy(a, b, p)
    assert out.passed and out.statistic == pytest.approx(0.005)
    assert out.mismatches == 1  # 0.05 > 0.01 * 10 / sqrt(100) = 0.01
    assert rel_l2_error(np.zeros(3), np.zeros(3)) == 0.0
    assert rel_l2_error(np.ones(3), np.zeros(3)) == float("inf")


def test_ulp_and_exact_work_in_the_output_dtype():
    b = np.array([1.0, 2.0, 3.0])
    a = b + np.array([2**-23, 0.0, 2**-22])  # 1 ulp, 0, 1 ulp (an fp32 ulp is 2^-23 at 1, 2^-22 at 3)
    assert check_policy(a, b, TolerancePolicy(kind="ulp", max_ulp=1), "float32").passed
    assert not check_policy(a, b, TolerancePolicy(kind="exact"), "float32").passed
    assert check_policy(b, b.copy(), TolerancePolicy(kind="exact"), "float32").passed
    # in bf16 the same differences vanish after rounding
    assert check_policy(a, b, TolerancePolicy(kind="exact"), "bfloat16").passed
    assert not check_policy(np.array([0.0]), np.array([-0.0]), TolerancePolicy(kind="exact"), "float32").passed


@pytest.mark.parametrize("kind", ["allclose", "range_relative", "rel_l2", "ulp", "exact"])
def test_non_finite_rules_are_the_same_under_every_kind(kind):
    p = policy_from_dict({"kind": kind, "atol": 1.0, "rtol": 1.0, "tol": 1.0, "max_ulp": 1000})
    b = np.array([np.nan, np.inf, -np.inf, 1.0, 1.0, np.inf])
    a = np.array([np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf])
    bad = element_mismatches(a, b, p, "float32")
    assert list(bad) == [False, False, False, True, True, True]
    assert not check_policy(a, b, p, "float32").passed


def test_policy_from_dict_names_the_field_in_errors():
    with pytest.raises(ValueError, match=r"outputs\[0\]\.tolerance\.kind: unknown kind 'close'"):
        policy_from_dict({"kind": "close"}, "outputs[0].tolerance")
    with pytest.raises(ValueError, match=r"tolerance\.atol: expected a number"):
        policy_from_dict({"kind": "allclose", "atol": "tiny"})
    with pytest.raises(ValueError, match=r"tolerance\.tol: rel_l2 needs a positive tol"):
        policy_from_dict({"kind": "rel_l2"})
    p = policy_from_dict({"kind": "allclose", "atol": 1e-3, "rtol": 0})
    assert p.to_dict() == {"kind": "allclose", "atol": 1e-3, "rtol": 0.0}


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match=r"shape \(2,\) of the result differs from the reference's \(3,\)"):
        element_mismatches(np.zeros(2), np.zeros(3), TolerancePolicy())


def test_one_comparison_under_many_policies_matches_one_check_each():
    rng = np.random.default_rng(3)
    b = rng.normal(size=(64, 48)).astype(np.float32)
    a = (b * (1 + rng.normal(size=b.shape) * 1e-6)).astype(np.float32)
    a[0, :3] = [np.nan, np.inf, 0.0]
    b[0, 2] = -0.0
    ref = Reference(b)
    cmp = Comparison(a, ref, "float32")
    policies = [TolerancePolicy(kind="allclose", atol=1e-6, rtol=1e-6), TolerancePolicy(kind="range_relative", atol=0, rtol=1e-6),
                TolerancePolicy(kind="rel_l2", tol=1e-6), TolerancePolicy(kind="ulp", max_ulp=2), TolerancePolicy(kind="exact")]
    for p in policies:
        assert cmp.outcome(p) == check_policy(a, b, p, "float32"), p.kind
        assert np.array_equal(cmp.mismatches(p), element_mismatches(a, b, p, "float32")), p.kind
        # the prepared reference serves other candidates too
        zeros = np.zeros(b.shape)
        assert check_policy(zeros, ref, p, "float32") == check_policy(zeros, b, p, "float32"), p.kind
    assert cmp.rel_l2 == rel_l2_error(a, b)


def test_a_prepared_reference_knows_its_own_format():
    b = np.array([1.0, 2.5, -3.0], dtype=np.float32)
    ref = Reference(b)
    assert ref.rounded("float32") is ref.values  # already float32: rounding changes nothing
    assert list(ref.rounded("float8_e5m2")) == [1.0, 2.5, -3.0]
    assert Reference(np.array([1 + 2**-20])).rounded("float32")[0] == 1 + 2**-20
    assert ref.same_values(np.array([1.0, 2.5, -3.0])) and not ref.same_values(np.array([1.0, 2.5, 3.0]))
    assert Reference(np.array([np.nan, 1.0])).same_values(np.array([np.nan, 1.0]))

"""A declared reduction_length (K) is held to what the shapes and the kernel's instruction trace allow
(kbound.py); a tolerance far looser than the advice is reported (advisor.tolerance_sanity)."""

from __future__ import annotations

import numpy as np

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import advise_output, tolerance_sanity
from nkitui.evaluate.numerics.audit import run_numerics_audit
from nkitui.evaluate.numerics.kbound import bound_outputs, shape_bound
from tests.evaluate.numerics.helpers import out_spec

F32 = np.float32


def _rules(findings) -> list[str]:
    return [f.rule for f in findings]


def test_the_largest_input_bounds_k_from_the_shapes() -> None:
    assert shape_bound({"a": (256, 1024), "b": (1024, 512)})[0] == 1024 * 512
    assert shape_bound({})[0] == 1


def test_a_declared_k_above_the_bound_is_judged_with_the_bound_and_named() -> None:
    inputs = {"a": np.ones(4096, F32), "b": np.ones(4096, F32)}
    spec = out_spec("c", (4096,), kind="rel_l2", tol=5e-3, k=100_000_000)
    bounded, decided, findings = bound_outputs([spec], inputs, None)
    assert bounded[0].reduction_length == 4096 and decided[0].used == 4096
    (f,) = findings
    assert f.rule == rules.K_EXCEEDS_BOUND and f.file == "task.toml" and f.severity == "high"
    for words in ("task.toml", "`c`", "reduction_length", "100000000", "4096", "Fix:"):
        assert words in f.message, (words, f.message)
    assert (f.data["declared"], f.data["bound"], f.data["inferred"]) == (100_000_000, 4096, 1)
    # the trace tightens the bound further, never lifts it
    from nkitui.evaluate.numerics.kbound import TraceBound

    bounded, _, findings = bound_outputs([spec], inputs, None, TraceBound(2, "k.py:7", "tensor_tensor"))
    assert bounded[0].reduction_length == 2 and "k.py:7" in findings[0].message
    bounded, _, _ = bound_outputs([spec], inputs, None, TraceBound(10**12, "k.py:7", "nc_matmul"))
    assert bounded[0].reduction_length == 4096


def test_honest_declared_ks_get_no_finding() -> None:
    # a matmul with its true contraction, a convolution-like K within the bound: no finding, K untouched
    mm = {"a": np.ones((256, 1024), F32), "b": np.ones((1024, 512), F32)}
    spec = out_spec("c", (256, 512), k=1024)
    bounded, _, findings = bound_outputs([spec], mm, "matmul")
    assert bounded[0] is spec and findings == []
    conv = {"x": np.ones((8, 64, 32, 32), F32), "w": np.ones((128, 64, 3, 3), F32)}
    spec = out_spec("y", (8, 128, 30, 30), k=64 * 9)
    bounded, _, findings = bound_outputs([spec], conv, None)
    assert bounded[0] is spec and findings == [], findings


def test_a_declared_k_far_above_the_inferred_one_gets_a_note() -> None:
    inputs = {"a": np.ones((64, 4096), F32)}
    spec = out_spec("c", (64, 4096), k=4096)  # within the bound (262144) but the shapes say element-wise
    bounded, _, findings = bound_outputs([spec], inputs, None)
    assert bounded[0].reduction_length == 4096
    (f,) = findings
    assert f.rule == rules.K_ABOVE_INFERRED and f.severity == "low" and "task.toml" in f.message


def test_a_tolerance_far_looser_than_the_advice_is_reported_and_an_ordinary_one_is_not() -> None:
    rng = np.random.default_rng(0)
    inputs = {"a": rng.standard_normal(4096).astype(F32), "b": rng.standard_normal(4096).astype(F32)}
    ref = inputs["a"].astype(np.float64) + inputs["b"]
    loose = out_spec("c", (4096,), kind="rel_l2", tol=5e-3)
    advice = advise_output(loose, ref, inputs, "elementwise")
    found = tolerance_sanity("c", ref, loose.tolerance, "float32", inputs, advice)
    (f,) = [f for f in found if f.rule == rules.TOL_LOOSE]
    assert f.file == "task.toml" and "`c`" in f.message and "tolerance" in f.message and f.data["ratio"] > 100
    ordinary = out_spec("c", (4096,), atol=1e-5, rtol=1e-5)
    found = tolerance_sanity("c", ref, ordinary.tolerance, "float32", inputs,
                             advise_output(ordinary, ref, inputs, "elementwise"))
    assert rules.TOL_LOOSE not in _rules(found)


def _add(inputs, options=None):  # noqa: ANN001, ANN202
    return {"c": inputs["a"].astype(np.float64) + inputs["b"]}


def test_the_attack_is_caught_by_precision_isolation_with_the_bounded_k() -> None:
    """Red team 9c, finding 4, through plain callables: K = 1e8 declared on an element-wise output and a
    loose rel_l2; a port with 2 wrong elements passes the tolerance, precision isolation fails it."""
    n = 262144

    def make(seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"a": rng.standard_normal(n).astype(F32), "b": rng.standard_normal(n).astype(F32)}

    def wrong(inputs, options):  # noqa: ANN001, ANN202
        c = (inputs["a"] + inputs["b"]).astype(F32)
        c[:2] = inputs["a"][:2]  # two elements drop their b
        return {"c": c}

    spec = out_spec("c", (n,), kind="rel_l2", tol=5e-3, k=100_000_000)
    audit = run_numerics_audit([spec], wrong, _add, make, [0], None, trials=False, mutants=False)
    assert all(m.passed for m in audit.outputs)  # the tolerance alone lets it through
    assert audit.precision is not None
    (res,) = audit.precision.outputs
    assert res.reduction_length == n and res.verdict == "algorithm-error", res
    assert {rules.K_EXCEEDS_BOUND, rules.ALGO_ERROR} <= set(_rules(audit.findings))


def test_the_advice_says_where_a_bounded_k_came_from() -> None:
    inputs = {"a": np.ones(4096, F32), "b": np.ones(4096, F32)}
    spec = out_spec("c", (4096,), kind="rel_l2", tol=5e-3, k=100_000_000)
    (bounded,), _, _ = bound_outputs([spec], inputs, None)
    advice = advise_output(bounded, inputs["a"].astype(np.float64) * 2, inputs, None)
    assert advice.reduction_length == 4096 and "declares 100000000" in advice.k_source, advice.k_source
    assert bounded.name == spec.name and bounded.tolerance == spec.tolerance and bounded.shape == spec.shape

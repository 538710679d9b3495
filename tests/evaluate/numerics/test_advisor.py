import json

import numpy as np
import pytest

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import (
    ToleranceAdvice,
    advise_output,
    advise_tolerance,
    infer_reduction_length,
    nice_ceil,
    tolerance_sanity,
)
from nkitui.evaluate.numerics.diagnose import diagnose_failures
from nkitui.evaluate.numerics.metrics import compute_metrics
from nkitui.evaluate.numerics.callables import RunOptions
from nkitui.evaluate.numerics.tolerance import TolerancePolicy, check_policy

from .helpers import matmul_inputs, matmul_reference, out_spec, tiled_matmul_kernel


@pytest.mark.parametrize(
    "shapes,out,op,k",
    [
        ({"a": (256, 2048), "b": (2048, 512)}, (256, 512), "matmul", 2048),
        ({"lhsT": (1024, 256), "b": (1024, 512)}, (256, 512), "matmul", 1024),
        ({"a": (256, 2048), "b": (2048, 512)}, (256, 512), None, 2048),
        ({"x": (300, 512), "g": (512,)}, (300, 512), "norm", 512),
        ({"x": (300, 512)}, (300, 512), "softmax", 512),
        ({"x": (300, 512)}, (300,), "reduction", 512),
        ({"x": (64, 32, 16)}, (64,), "reduction", 512),
        ({"x": (300, 512), "g": (512,)}, (300, 512), None, 1),
        ({"x": (300, 512), "b": (512,)}, (300, 512), "elementwise", 1),
        ({"x": (512, 384)}, (384, 512), "transpose", 1),
        ({"a": (256, 2048)}, (256, 2048), "scan", 2048),
    ],
)
def test_reduction_length_inference(shapes, out, op, k):
    got, why = infer_reduction_length(shapes, out, op)
    assert got == k, why
    assert why


def test_nice_ceil():
    assert [nice_ceil(x) for x in (0.0, 1e-3, 1.1e-3, 2.5e-3, 7e-3, 0.011)] == [0.0, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2]


@pytest.mark.parametrize("k", [64, 512, 2048])
def test_advice_accepts_fp32_accumulation_and_rejects_bf16_accumulation(k):
    make = matmul_inputs(128, k, 256)
    spec = out_spec("c", (128, 256), "float32", k=k, atol=0, rtol=0)
    for seed in (0, 1):
        inputs = make(seed)
        ref = matmul_reference()(inputs)["c"]
        advice = advise_output(spec, ref, inputs, "matmul")
        good = tiled_matmul_kernel(acc_dtype="float32")(inputs, RunOptions())["c"]
        bad = tiled_matmul_kernel(acc_dtype="bfloat16")(inputs, RunOptions())["c"]
        for kind, policy in advice.advised.items():
            assert check_policy(good, ref, policy, "float32").passed, (kind, policy, seed)
        assert not check_policy(bad, ref, advice.policy, "float32").passed
    assert advice.recommended == "allclose"
    assert any("K = %d (from the manifest)" % k in line for line in advice.reasoning)
    assert any("random walk" in line for line in advice.reasoning)
    assert any("worst case" in line for line in advice.reasoning)


def test_advice_for_bf16_outputs_allows_output_rounding_but_not_much_more():
    inputs = matmul_inputs(128, 512, 256)(0)
    ref = matmul_reference(dtype=np.float32)(inputs)["c"]
    advice = advise_tolerance("c", ref, "bfloat16", ["bfloat16"], reduction_length=512, op="matmul")
    allclose = advice.advised["allclose"]
    assert 2.0**-8 <= allclose.rtol <= 0.05
    good = tiled_matmul_kernel(out_dtype=np.float32)(inputs, RunOptions())["c"]
    from nkitui.evaluate.numerics.fpformat import round_to

    assert check_policy(round_to(good, "bfloat16"), ref, allclose, "bfloat16").passed
    assert any("output rounding to bfloat16" in line for line in advice.reasoning)


def test_elementwise_advice_has_no_accumulation_term_and_allows_an_ulp_policy():
    x = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    advice = advise_tolerance("y", np.tanh(x.astype(np.float64)), "float32", ["float32"], reduction_length=1,
                              op="elementwise")
    assert "ulp" in advice.advised and advice.advised["ulp"].max_ulp <= 32
    assert any("no accumulation" in line for line in advice.reasoning)


def test_integer_outputs_are_advised_exact():
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    advice = advise_tolerance("idx", ref, "int32", ["int32"], reduction_length=1, op="other")
    assert advice.recommended == "exact"


def test_advice_round_trips_through_json():
    inputs = matmul_inputs(64, 256, 64)(0)
    ref = matmul_reference()(inputs)["c"]
    advice = advise_output(out_spec("c", (64, 64), k=None), ref, inputs, "matmul")
    assert advice.k_source.startswith("inferred")
    back = ToleranceAdvice.from_dict(json.loads(json.dumps(advice.to_dict(), allow_nan=False)))
    assert back.to_dict() == advice.to_dict()


# ---- warnings about the task's tolerance ---------------------------------------------------


def _rules(findings):
    return [f.rule for f in findings]


def test_zeros_pass_when_atol_exceeds_the_outputs():
    x = np.random.default_rng(0).normal(0, 0.8, (64, 8192))
    e = np.exp(x - x.max(-1, keepdims=True))
    probs = e / e.sum(-1, keepdims=True)
    findings = tolerance_sanity("probs", probs, {"kind": "allclose", "atol": 1e-2, "rtol": 1e-2}, "float32",
                                {"logits": x})
    assert _rules(findings) == [rules.ZEROS_PASS]
    f = findings[0]
    assert f.severity == "high" and f.source == "numerics" and f.category == "numerics"
    assert "`probs`" in f.message and "all zeros passes" in f.message and "below atol = 0.01" in f.message
    assert f.data["ref_max_abs"] == pytest.approx(float(probs.max()))


def test_constant_passes_when_the_outputs_barely_vary():
    ref = 5.0 + 1e-4 * np.random.default_rng(0).normal(size=1000)
    findings = tolerance_sanity("o", ref, TolerancePolicy(kind="allclose", atol=1e-3, rtol=0), "float32")
    assert _rules(findings) == [rules.CONST_PASS]
    assert findings[0].data["constant"] == pytest.approx(5.0, abs=1e-3)
    # range-relative: the allowance is rtol*max|ref| for every element
    findings = tolerance_sanity("o", ref, TolerancePolicy(kind="range_relative", atol=0, rtol=1e-3), "float32")
    assert _rules(findings) == [rules.CONST_PASS]


def test_echo_passes_when_the_op_barely_changes_its_input():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 64)).astype(np.float32)
    bias = 1e-3 * rng.normal(size=(64,))
    ref = x.astype(np.float64) + bias
    findings = tolerance_sanity("y", ref, TolerancePolicy(kind="allclose", atol=1e-2, rtol=1e-2), "float32",
                                {"x": x, "bias": bias})
    assert _rules(findings) == [rules.ECHO_PASS]
    assert findings[0].data["input"] == "x"


def test_tolerance_tighter_than_the_output_dtype():
    inputs = matmul_inputs(64, 256, 64)(0)
    ref = matmul_reference()(inputs)["c"]
    advice = advise_tolerance("c", ref, "bfloat16", ["bfloat16"], reduction_length=256, op="matmul")
    findings = tolerance_sanity("c", ref, TolerancePolicy(kind="allclose", atol=1e-4, rtol=1e-4), "bfloat16",
                                inputs, advice)
    assert _rules(findings) == [rules.TOL_TIGHT]
    assert findings[0].severity == "high"
    assert "correctly rounded to bfloat16 fails" in findings[0].message


def test_tolerance_tighter_than_fp32_accumulation_drift():
    inputs = matmul_inputs(128, 2048, 128)(0)
    ref = matmul_reference()(inputs)["c"]
    advice = advise_tolerance("c", ref, "float32", ["bfloat16"], reduction_length=2048, op="matmul")
    findings = tolerance_sanity("c", ref, TolerancePolicy(kind="allclose", atol=1e-7, rtol=1e-7), "float32",
                                inputs, advice)
    assert _rules(findings) == [rules.TOL_TIGHT]
    assert findings[0].severity == "medium" and "accumulation-order drift" in findings[0].message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_sane_tolerance_raises_nothing(seed):
    inputs = matmul_inputs(128, 1024, 256)(seed)
    ref = matmul_reference()(inputs)["c"]
    advice = advise_tolerance("c", ref, "bfloat16", ["bfloat16"], reduction_length=1024, op="matmul")
    for policy in (TolerancePolicy(kind="allclose", atol=1e-3, rtol=1e-2), advice.policy,
                   TolerancePolicy(kind="range_relative", atol=1e-5, rtol=2e-2)):
        assert tolerance_sanity("c", ref, policy, "bfloat16", inputs, advice) == []


# ---- reading failures ----------------------------------------------------------------------


def test_near_zero_failures_are_called_accumulation_drift():
    inputs = matmul_inputs(128, 2048, 256)(0)
    ref = matmul_reference()(inputs)["c"]
    got = tiled_matmul_kernel()(inputs, RunOptions())["c"]
    policy = TolerancePolicy(kind="allclose", atol=0.0, rtol=1e-6)
    m = compute_metrics("c", got, ref, policy)
    assert not m.passed
    findings = diagnose_failures(m, got, ref)
    assert _rules(findings) == [rules.NEARZERO_DRIFT]
    assert findings[0].data["near_zero_share"] >= 0.8
    suggested = findings[0].data["suggested_atol"]
    assert check_policy(got, ref, TolerancePolicy(kind="allclose", atol=suggested, rtol=1e-6)).passed


def test_a_localised_bug_is_not_called_drift():
    inputs = matmul_inputs(300, 256, 512, dtype=np.float32)(0)
    ref = matmul_reference()(inputs)["c"]
    got = ref.astype(np.float32)
    got[299, :] = got[298, :]  # the last row of the last, partial tile comes from its neighbour
    m = compute_metrics("c", got, ref, TolerancePolicy(kind="allclose", atol=1e-4, rtol=1e-4))
    findings = diagnose_failures(m, got, ref, context="with seed 0")
    assert _rules(findings) == [rules.TILE_LOCALISED]
    assert "last row tile (a partial tile)" in findings[0].message and "with seed 0" in findings[0].message

"""How adversarial trials are judged (red team 10A): per-element bounds, the ULP promise, norms judged by
their conditioning, and the structured-values and low-variance cases. numpy "kernels" stand in for ports."""

from __future__ import annotations

import numpy as np

from nkitui.evaluate.numerics import trial_bounds
from nkitui.evaluate.numerics.adversarial import make_adversarial_cases
from nkitui.evaluate.numerics.advisor import advise_output
from nkitui.evaluate.numerics.trials import run_trials

from .helpers import out_spec

N = 65536


def add_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(size=N).astype(np.float32), "b": rng.normal(size=N).astype(np.float32)}


def add_reference(inputs):
    return {"c": inputs["a"].astype(np.float64) + inputs["b"].astype(np.float64)}


def add(inputs, options):
    return {"c": inputs["a"] + inputs["b"]}


def add_plus(extra):
    def run(inputs, options):
        a = inputs["a"]
        return {"c": (a + inputs["b"] + extra(a, inputs["b"]).astype(np.float32)).astype(np.float32)}

    return run


ADD_OUT = [out_spec("c", (N,), kind="ulp", max_ulp=1)]
ADD_ALLCLOSE = [out_spec("c", (N,), atol=1e-6, rtol=1e-6)]


def _status(report):
    return {t.name: t.status for t in report.trials}


def test_an_honest_add_passes_every_trial_including_the_structured_one():
    report = run_trials(add, add_reference, add_inputs, [0], ADD_OUT, "elementwise")
    assert _status(report) == {"seed 0": "pass", "large": "pass", "large: a": "pass", "large: b": "pass",
                               "tiny": "pass", "nonfinite": "pass", "structured": "pass"}


def test_thousands_of_ulps_on_moderate_elements_are_not_excused_by_the_largest_one():
    """`c += 0.004 * (a > 6.5)`: never on the seeds (normal(0, 1)); on the large trial the old whole-tensor
    bound (an absolute term sized by max|input| = 1e4) called it tolerance-only. Per element it fails."""
    report = run_trials(add_plus(lambda a, b: 0.004 * (a > 6.5)), add_reference, add_inputs, [0], ADD_ALLCLOSE,
                        "elementwise")
    st = _status(report)
    assert st["seed 0"] == "pass"
    assert st["large"] == "fail", st
    # the same error under the task's 1-ULP promise fails too
    report = run_trials(add_plus(lambda a, b: 0.004 * (a > 6.5)), add_reference, add_inputs, [0], ADD_OUT,
                        "elementwise")
    assert _status(report)["large"] == "fail"


def test_a_ulp_promise_is_kept_at_every_scale():
    """An error of 16 ULPs of the result wherever |c| > 100 (only on the large trial): within the advisor's
    per-element model (64 fp32 ULPs of the inputs), but 16x the task's 1-ULP promise."""
    def sloppy(inputs, options):
        c = inputs["a"] + inputs["b"]
        big = np.isfinite(c) & (np.abs(c) > 100)
        c = c.copy()
        c[big] = c[big] + 16 * np.spacing(c[big])
        return {"c": c}

    st = _status(run_trials(sloppy, add_reference, add_inputs, [0], ADD_OUT, "elementwise"))
    assert st["seed 0"] == "pass" and st["large"] == "fail", st


def test_element_bound_follows_each_elements_own_inputs():
    inputs = {"a": np.array([1e4, 7.0, 0.5], dtype=np.float32), "b": np.array([0.0, 1.0, -0.5], dtype=np.float32)}
    ref = add_reference(inputs)["c"]
    spec = out_spec("c", (3,), kind="ulp", max_ulp=1)
    advice = advise_output(spec, ref, inputs, "elementwise", safety=8.0)
    bound = trial_bounds.element_bound(advice, ref, inputs, "elementwise", 8.0)
    u = 2.0**-24
    # 8 * (4 ulps of |s| + 4 ulps of the element's largest input), never the tensor's largest input; at
    # least 1/16 ULP of the output's rms
    floor = u * float(np.sqrt(np.mean(ref**2))) / 16
    assert bound[2] == np.float64(8 * max(4 * u * 0.0 + 4 * u * 0.5, floor))
    assert bound[1] == np.float64(8 * max(4 * u * 8.0 + 4 * u * 7.0, floor))
    assert bound[0] > 50 * bound[1]
    assert bound[1] < 0.004 / 20
    # inputs of another shape count with their largest value
    assert trial_bounds.chain_magnitudes({"x": np.ones((2, 3)), "bias": np.array([1.0, -5.0, 2.0])}, (2, 3)).tolist() == \
        [[1.0, 5.0, 2.0], [1.0, 5.0, 2.0]]
    assert trial_bounds.chain_magnitudes({"x": np.ones(3), "table": np.full(7, -9.0)}, (3,)).tolist() == [9.0] * 3


# ---- norms ----------------------------------------------------------------------------------------

ROWS, HIDDEN = 64, 512


def ln_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(3.0, 2.0, (ROWS, HIDDEN)).astype(np.float32),
            "gamma": rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32),
            "beta": rng.normal(0.0, 0.1, HIDDEN).astype(np.float32)}


def ln_reference(inputs, eps=1e-5):
    x = inputs["x"].astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return {"y": (x - mean) / np.sqrt(var + eps) * inputs["gamma"].astype(np.float64) + inputs["beta"].astype(np.float64)}


def ln_port(eps):
    """fp32 layernorm with a plain running sum for the mean (errors like a hardware reduction's)."""
    def run(inputs, options):
        x = inputs["x"].astype(np.float32)
        mean = np.cumsum(x, axis=-1, dtype=np.float32)[:, -1:] / np.float32(HIDDEN)
        d = x - mean
        var = np.cumsum(d * d, axis=-1, dtype=np.float32)[:, -1:] / np.float32(HIDDEN)
        rstd = (np.float32(1.0) / np.sqrt(var + np.float32(eps))).astype(np.float32)
        return {"y": (d * rstd * inputs["gamma"] + inputs["beta"]).astype(np.float32)}

    return run


LN_OUT = [out_spec("y", (ROWS, HIDDEN), atol=1e-4, rtol=1e-3, k=HIDDEN)]


def test_a_layernorm_with_the_wrong_eps_fails_the_low_variance_trial():
    honest = _status(run_trials(ln_port(1e-5), ln_reference, ln_inputs, [0], LN_OUT, "norm"))
    assert set(honest) == {"seed 0", "large", "large: x", "large: gamma", "large: beta", "tiny", "low-variance",
                           "offset", "structured"}
    assert set(honest.values()) <= {"pass", "tolerance-only"}, honest
    wrong = _status(run_trials(ln_port(1e-10), ln_reference, ln_inputs, [0], LN_OUT, "norm"))
    assert wrong["seed 0"] == "pass"  # std 2: eps never matters on the seeds
    assert wrong["low-variance"] == "fail", wrong


def test_the_equal_rows_of_a_norm_are_judged_numerically_not_on_nan_only():
    """A layernorm that is finite but wrong on constant rows (it returns beta + 0.1) fails the low-variance
    trial, which holds the norm's equal rows (they were judged on NaN/Inf only, in a trial of their own)."""
    def wrong_on_constant_rows(inputs, options):
        out = ln_port(1e-5)(inputs, options)["y"].copy()
        x = inputs["x"]
        constant = (x == x[:, :1]).all(axis=1)
        out[constant] = (inputs["beta"] + np.float32(0.1))[None, :]
        return {"y": out}

    st = _status(run_trials(wrong_on_constant_rows, ln_reference, ln_inputs, [0], LN_OUT, "norm"))
    assert st["seed 0"] == "pass" and st["low-variance"] == "fail", st


def test_conditioning_bound_is_the_reference_response_per_row():
    ref = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    probed = np.array([[1.0, 2.5, 3.0], [0.0, 1e-3, -2e-3]])
    bound = trial_bounds.conditioning_bound(ref, probed, 8.0)
    assert bound.tolist() == [[4.0] * 3, [0.016] * 3]
    moved = trial_bounds.probe_inputs({"x": np.ones((2, 9), dtype=np.float32), "g": np.ones(9, dtype=np.float32)},
                                      ("x",))
    assert moved["x"].dtype == np.float32 and not np.array_equal(moved["x"], np.ones((2, 9)))
    assert np.array_equal(moved["g"], np.ones(9))


# ---- the structured-values case ----------------------------------------------------------------------

def test_the_structured_case_holds_exact_values_random_data_never_does():
    inputs = add_inputs(0)
    cases = {c.name: c for c in make_adversarial_cases(inputs, add_reference, "elementwise", {"c": "float32"}, 1)}
    case = cases["structured"]
    a, b = case.inputs["a"], case.inputs["b"]
    assert a.dtype == np.float32 and b.dtype == np.float32
    assert (a == 0).mean() > 0.2 and np.signbit(a[a == 0]).any() and not np.signbit(a[a == 0]).all()
    assert ((a == np.round(a)) & (a != 0)).mean() > 0.15  # small integers
    assert (a - np.floor(a) == 0.5).mean() > 0.05  # half-integers: ties
    values, counts = np.unique(a[a != np.round(a)], return_counts=True)
    assert counts.max() > 0.08 * N  # one repeated value
    assert (b == -a).mean() > 0.2  # b = -a
    assert (np.abs(a) == 2.0**-24).mean() > 0.01 and (np.abs(a) == 3 * 2.0**-24).mean() > 0.01  # 1 + a: a tie
    # the other cases are unchanged by its arrival (it draws its random numbers last)
    assert set(cases) == {"large", "large: a", "large: b", "tiny", "nonfinite", "structured"}


def test_kernels_wrong_only_on_exact_values_fail_the_structured_trial():
    for extra in (lambda a, b: (a == 0), lambda a, b: (a == -b), lambda a, b: 0.5 * (a * a == 1.0)):
        st = _status(run_trials(add_plus(extra), add_reference, add_inputs, [0], ADD_OUT, "elementwise"))
        assert st["seed 0"] == "pass" and st["structured"] == "fail", st


def test_the_structured_case_stays_in_the_references_domain():
    """A reference that is not finite at 0 or below (log) still gets a structured case: positive values,
    small integers, ties and a repeated value; a signed one where the reference allows it."""
    inputs = add_inputs(0)

    def log_ref(inp):
        with np.errstate(all="ignore"):
            return {"c": np.log(inp["a"].astype(np.float64)) + inp["b"].astype(np.float64)}

    positive = {"a": np.abs(inputs["a"]) + np.float32(0.5), "b": inputs["b"]}
    case = next(c for c in make_adversarial_cases(positive, log_ref, "elementwise", {"c": "float32"}, 1)
                if c.name == "structured")
    a = case.inputs["a"]
    assert (a > 0).all() and (a == 1.0).mean() > 0.25 and (a - np.floor(a) == 0.5).mean() > 0.05
    assert "1.0 in place of zeros" in case.description


import json

import numpy as np
import pytest

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.adversarial import make_adversarial_cases
from nkitui.evaluate.numerics.trials import TrialsReport, run_trials

from .helpers import matmul_inputs, matmul_reference, out_spec, tiled_matmul_kernel


def softmax_inputs(seed):
    return {"x": np.random.default_rng(seed).normal(size=(130, 96)).astype(np.float32)}


def softmax_reference(inputs):
    x = inputs["x"].astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return {"y": e / e.sum(-1, keepdims=True)}


def stable_softmax(inputs, options):
    x = inputs["x"].astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    return {"y": e / e.sum(-1, keepdims=True)}


def naive_softmax(inputs, options):
    e = np.exp(inputs["x"].astype(np.float32))
    return {"y": e / e.sum(-1, keepdims=True)}


SOFTMAX_OUT = [out_spec("y", (130, 96), atol=1e-6, rtol=1e-4, k=96)]


def _status(report):
    return {t.name: t.status for t in report.trials}


def test_every_seed_and_adversarial_case_is_reported_on_its_own():
    report = run_trials(stable_softmax, softmax_reference, softmax_inputs, [0, 1, 2], SOFTMAX_OUT, "softmax")
    assert _status(report) == {"seed 0": "pass", "seed 1": "pass", "seed 2": "pass", "large": "pass",
                               "tiny": "pass", "equal": "pass", "mask": "pass", "structured": "pass"}
    assert report.findings == ()
    assert len(report.seeds[0].metrics) == 1 and report.seeds[1].metrics == ()
    back = TrialsReport.from_dict(json.loads(json.dumps(report.to_dict(), allow_nan=False)))
    assert back.to_dict() == report.to_dict()


def test_a_softmax_without_max_subtraction_breaks_on_large_logits():
    report = run_trials(naive_softmax, softmax_reference, softmax_inputs, [0, 1], SOFTMAX_OUT, "softmax")
    st = _status(report)
    assert st["seed 0"] == "pass" and st["large"] == "fail"
    large = next(t for t in report.trials if t.name == "large")
    assert large.outputs[0].nonfinite_mismatched > 0
    adv = [f for f in report.findings if f.rule == rules.ADVERSARIAL_FAILED]
    assert [f.data["case"] for f in adv] == ["large"]
    assert "NaN/Inf" in adv[0].message


def test_matmul_cases_and_a_fixed_atol_that_does_not_scale():
    make = matmul_inputs(128, 256, 128, dtype=np.float32)
    outs = [out_spec("c", (128, 128), atol=1e-4, rtol=1e-4, k=256)]
    report = run_trials(tiled_matmul_kernel(), matmul_reference(), make, [0], outs, "matmul")
    st = _status(report)
    assert set(st) == {"seed 0", "large", "large: a", "large: b", "tiny", "cancellation", "nonfinite", "structured"}
    assert st["seed 0"] == "pass" and st["nonfinite"] == "pass" and st["cancellation"] == "pass"
    # inputs up to ~1e17 give outputs up to ~1e34: a correct kernel fails atol=1e-4 only because the tolerance
    # is fixed
    assert st["large"] == "tolerance-only"
    assert report.findings == ()


def test_a_port_that_passes_one_seed_but_not_another_is_flagged():
    def flaky(inputs, options):
        out = stable_softmax(inputs, options)
        if float(inputs["x"][0, 0]) > 1.0:  # seed-dependent bug
            out["y"] = out["y"].copy()
            out["y"][5] = 0.0
        return out

    seeds = [0, 1, 2, 3]
    signs = [float(softmax_inputs(s)["x"][0, 0]) > 1.0 for s in seeds]
    assert any(signs) and not all(signs)
    report = run_trials(flaky, softmax_reference, softmax_inputs, seeds, SOFTMAX_OUT, "softmax", adversarial=False)
    assert [f.rule for f in report.findings] == [rules.TRIAL_FAILED]
    assert report.findings[0].data["failing"] == [s for s, bad in zip(seeds, signs) if bad]


def test_a_port_that_raises_is_an_error_trial():
    def broken(inputs, options):
        raise RuntimeError("partition dimension 256 exceeds 128 at k.py:3")

    report = run_trials(broken, softmax_reference, softmax_inputs, [0], SOFTMAX_OUT, "softmax")
    assert all(t.status == "error" for t in report.trials)
    assert report.trials[0].error == "RuntimeError: partition dimension 256 exceeds 128 at k.py:3"


@pytest.mark.parametrize("op,expected", [
    ("norm", {"large", "tiny", "low-variance", "offset", "structured"}),
    ("elementwise", {"large", "tiny", "nonfinite", "structured"}),
    ("reduction", {"large", "tiny", "equal", "cancellation", "nonfinite", "structured"}),
])
def test_adversarial_cases_per_op(op, expected):
    rng = np.random.default_rng(0)
    inputs = {"x": rng.normal(size=(64, 128)).astype(np.float32), "idx": np.arange(64, dtype=np.int32)}

    def ref(inp):
        x = inp["x"].astype(np.float64)
        if op == "norm":
            return {"y": (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)}
        if op == "reduction":
            return {"y": x.sum(-1)}
        return {"y": np.tanh(x)}

    cases = make_adversarial_cases(inputs, ref, op, {"y": "float32"}, 128 if op != "elementwise" else 1)
    assert {c.name for c in cases} == expected
    for c in cases:
        assert np.array_equal(c.inputs["idx"], inputs["idx"])  # integer inputs are never touched
        assert c.inputs["x"].dtype == np.float32
    tiny = next(c for c in cases if c.name == "tiny")
    x = tiny.inputs["x"].astype(np.float64)
    assert ((x != 0) & (np.abs(x) < np.finfo(np.float32).smallest_normal)).any()


def test_precomputed_seeds_are_neither_run_nor_compared_again():
    calls = []

    def counting_runner(inputs, options):
        calls.append(options.label)
        return stable_softmax(inputs, options)

    first = softmax_inputs(0)
    got, ref = stable_softmax(first, None), softmax_reference(first)
    from nkitui.evaluate.numerics.metrics import compute_metrics

    known = [compute_metrics("y", got["y"], ref["y"], SOFTMAX_OUT[0].tolerance, "float32")]
    report = run_trials(counting_runner, softmax_reference, softmax_inputs, [0, 1], SOFTMAX_OUT, "softmax",
                        precomputed={0: (first, got, ref, known)})
    # seed 0 was given: only seed 1 and the adversarial cases ran
    assert calls == ["seed 1", "adversarial: large", "adversarial: tiny", "adversarial: equal", "adversarial: mask",
                     "adversarial: structured"]
    assert report.seeds[0].metrics[0] is known[0]
    plain = run_trials(stable_softmax, softmax_reference, softmax_inputs, [0, 1], SOFTMAX_OUT, "softmax")
    assert _status(report) == _status(plain)
    # without metrics, a precomputed run is compared here but still not run
    calls.clear()
    run_trials(counting_runner, softmax_reference, softmax_inputs, [0], SOFTMAX_OUT, "softmax", adversarial=False,
               precomputed={0: (first, got, ref)})
    assert calls == []

import json

import numpy as np
import pytest

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.precision import PrecisionReport, closest_hypothesis, isolate_precision

from .helpers import BF16, matmul_inputs, matmul_reference, out_spec, tiled_matmul_kernel

K = 1024


@pytest.fixture(scope="module")
def inputs():
    return matmul_inputs(128, K, 256)(0)


def test_fp32_psum_accumulation_is_consistent(inputs):
    spec = out_spec("c", (128, 256), "bfloat16", atol=1e-3, rtol=1e-2, k=K)
    report = isolate_precision(tiled_matmul_kernel(out_dtype=BF16), matmul_reference(dtype=np.float32), inputs,
                               [spec], "matmul")
    o = report.outputs[0]
    assert o.verdict == "consistent" and report.findings == ()
    assert o.excess_rel_l2 == 0.0  # precise on == precise off rounded once to bf16
    assert 0 < o.dtype_rel_l2 <= o.expected_dtype_rel_l2
    assert o.passed_fp32 and o.passed_precise


@pytest.mark.parametrize("out_dtype,dtype_name", [(np.float32, "float32"), (BF16, "bfloat16")])
def test_bf16_accumulation_of_psum_tiles_is_flagged(inputs, out_dtype, dtype_name):
    # The loose nki-library-style policy still passes: only precision isolation sees the bf16 accumulator.
    spec = out_spec("c", (128, 256), dtype_name, kind="range_relative", atol=1e-5, rtol=2e-2, k=K)
    kernel = tiled_matmul_kernel(acc_dtype="bfloat16", out_dtype=out_dtype)
    report = isolate_precision(kernel, matmul_reference(), inputs, [spec], "matmul")
    o = report.outputs[0]
    assert o.verdict == "dtype-error-dominates"
    assert o.passed_precise  # the task's own tolerance does not notice
    assert o.best_hypothesis is not None
    assert "accumulating the 8 matmul partial sums" in o.best_hypothesis.cause and "bfloat16" in o.best_hypothesis.cause
    [f] = report.findings
    assert f.rule == rules.DTYPE_ERROR_DOMINATES and f.severity == "high"
    assert "still accepts it" in f.message and "fp32 (PSUM)" in f.message


def test_element_by_element_bf16_accumulation_is_named():
    k = 512
    spec = out_spec("c", (64, 64), "float32", kind="rel_l2", tol=0.1, k=k)
    kernel = tiled_matmul_kernel(acc_dtype="bfloat16", tile_k=1)
    report = isolate_precision(kernel, matmul_reference(), matmul_inputs(64, k, 64)(1), [spec], "matmul")
    o = report.outputs[0]
    assert o.verdict == "dtype-error-dominates"
    assert o.best_hypothesis.cause == f"accumulating all K = {k} terms one by one in bfloat16"


def test_an_algorithmic_bug_shows_in_the_fp32_run(inputs):
    def off_by_one(inp, options):
        out = tiled_matmul_kernel(out_dtype=BF16)(inp, options)
        c = out["c"].astype(np.float32)
        c[-1] = np.nan  # the last row is never written
        return {"c": c}

    spec = out_spec("c", (128, 256), "bfloat16", atol=1e-3, rtol=1e-2, k=K)
    report = isolate_precision(off_by_one, matmul_reference(), inputs, [spec], "matmul")
    o = report.outputs[0]
    assert o.verdict == "algorithm-error" and o.algorithm_nonfinite == 256
    assert [f.rule for f in report.findings] == [rules.ALGO_ERROR]
    assert report.findings[0].severity == "high"


def test_a_run_that_raises_is_reported(inputs):
    def broken(inp, options):
        if not options.precise:
            raise ValueError("no fp32 mode")
        return {}

    report = isolate_precision(broken, matmul_reference(), inputs, [out_spec("c", (128, 256))], "matmul")
    assert report.error == "ValueError: no fp32 mode" and report.outputs == ()


def test_hypotheses_use_the_tasks_own_dtypes():
    h = closest_hypothesis(1e-3, 4096, "matmul", ["float32", "float16"])
    assert h is not None and "float16" in h.cause
    assert closest_hypothesis(1e-9, 4096, "matmul", ["bfloat16"]) is None


def test_report_round_trips_through_json(inputs):
    spec = out_spec("c", (128, 256), "float32", atol=1e-3, rtol=1e-2, k=K)
    report = isolate_precision(tiled_matmul_kernel(acc_dtype="bfloat16"), matmul_reference(), inputs, [spec],
                               "matmul")
    back = PrecisionReport.from_dict(json.loads(json.dumps(report.to_dict(), allow_nan=False)))
    assert back.to_dict() == report.to_dict()

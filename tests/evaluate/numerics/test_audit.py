import json

import numpy as np

from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.audit import NumericsAudit, check_outputs, run_numerics_audit
from nkitui.evaluate.present.numerics import audit_text

from .helpers import matmul_inputs, matmul_reference, out_spec, run_fake_nki_source, tiled_matmul_kernel
from .test_mutants import LEGACY

K = 512


def _lhsT_runner(kernel):
    """The fake-NKI source takes lhsT; the audit speaks natural layout (a, b)."""

    def run(inputs, options):
        return kernel({"lhsT": np.ascontiguousarray(inputs["a"].T), "rhs": inputs["b"]}, options)

    return run


def _source_runner(source, inputs, options):
    return run_fake_nki_source(source, {"lhsT": np.ascontiguousarray(inputs["a"].T), "rhs": inputs["b"]}, options)


def test_a_correct_port_under_a_sane_tolerance_passes_without_findings():
    make = matmul_inputs(256, K, 128, dtype=np.float32)
    outs = [out_spec("c", (256, 128), atol=1e-4, rtol=1e-4, k=K)]
    audit = run_numerics_audit(outs, _lhsT_runner(lambda i, o: run_fake_nki_source(LEGACY, i, o)),
                               matmul_reference(), make, [0, 1], "matmul",
                               nki_source=LEGACY, nki_file="port.py", run_source=_source_runner)
    assert audit.passed and audit.error is None
    assert audit.findings == ()
    assert {t.status for t in audit.trials.seeds} == {"pass"}
    assert audit.precision.outputs[0].verdict == "consistent"
    assert audit.mutants.count("survived") == 0 and audit.mutants.count("caught") > 0
    assert audit.advice[0].name == "c" and audit.outputs[0].convention("rel_l2").source == "advice"
    text = audit_text(audit, width=120)
    for piece in ("c float32 [256, 128]", "PASS", "tolerance advice for `c`", "trials", "precision isolation",
                  "test strength", "numerics findings: none", "per-tile error"):
        assert piece in text, piece
    back = NumericsAudit.from_dict(json.loads(json.dumps(audit.to_dict(), allow_nan=False)))
    assert back.to_dict() == audit.to_dict()


def test_a_bf16_accumulating_port_under_a_loose_tolerance_is_caught_by_the_numerics_checks():
    make = matmul_inputs(128, 2048, 128)
    outs = [out_spec("c", (128, 128), "float32", kind="range_relative", atol=1e-5, rtol=2e-2, k=2048)]
    audit = run_numerics_audit(outs, tiled_matmul_kernel(acc_dtype="bfloat16"), matmul_reference(), make, [0],
                               "matmul", adversarial=False)
    assert audit.passed  # the task's own tolerance accepts it ...
    found = {f.rule for f in audit.findings}
    assert rules.DTYPE_ERROR_DOMINATES in found  # ... precision isolation does not
    assert "DTYPE-ERROR-DOMINATES" in audit_text(audit)


def test_check_outputs_alone_flags_a_loose_tolerance():
    x = np.random.default_rng(0).normal(0, 0.8, (128, 4096)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    outs = [out_spec("probs", (128, 4096), atol=1e-2, rtol=1e-2, k=4096)]
    metrics, advice, findings = check_outputs(outs, {"logits": x}, {"probs": ref.astype(np.float32)}, {"probs": ref},
                                              "softmax")
    assert metrics[0].passed
    assert [f.rule for f in findings] == [rules.ZEROS_PASS]
    assert advice[0].policy.atol < 1e-4


def test_a_first_run_that_raises_is_reported_not_raised():
    def broken(inputs, options):
        raise RuntimeError("boom")

    audit = run_numerics_audit([out_spec("c", (4, 4))], broken, matmul_reference(), matmul_inputs(4, 4, 4), [0])
    assert audit.error == "RuntimeError: boom" and not audit.passed
    assert "the first run failed: RuntimeError: boom" in audit_text(audit)


def test_a_shape_mismatch_is_reported():
    def transposed(inputs, options):
        return {"c": (inputs["a"].astype(np.float32) @ inputs["b"].astype(np.float32)).T}

    audit = run_numerics_audit([out_spec("c", (8, 4))], transposed, matmul_reference(), matmul_inputs(8, 16, 4), [0])
    assert "the kernel returned shape (4, 8), the reference (8, 4)" in audit.error


def test_report_prints_kernel_text_literally():
    from nkitui.evaluate.numerics.mutants import MutantResult, MutationReport
    from nkitui.evaluate.present.numerics import render_mutants, to_text

    report = MutationReport((MutantResult("shift-index#1", "shift-index", "v[nl.ds(b * P, P), :] -> v[nl.ds(b * P + 1, P), :]",
                                          "port.py", 48, "crashed", "OutOfBoundsError: index range [897, 1024]"),))
    text = to_text(render_mutants(report), width=200)
    assert "v[nl.ds(b * P, P), :] -> v[nl.ds(b * P + 1, P), :]" in text
    assert "index range [897, 1024]" in text

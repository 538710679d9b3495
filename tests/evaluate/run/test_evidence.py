"""The starter believes a pass only with its evidence (no processes: results built by hand)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nkitui.evaluate.numerics.metrics import compute_metrics
from nkitui.evaluate.options import EvaluationOptions
from nkitui.evaluate.run.evidence import REPLAY_FRESH_PASSED, missing_evidence, settle_status
from nkitui.evaluate.run.result import Check, PhaseRecord, RunResult, SeedResult
from nkitui.task.model import Tolerance, TensorSpec

TOL = Tolerance(kind="allclose", atol=1e-5, rtol=1e-5)


class _Task:
    seeds = (0, 1)
    outputs = (TensorSpec(name="out", shape=(4, 2), dtype="float32", tolerance=TOL),)


def _metrics(shape=(4, 2)):
    return compute_metrics("out", np.zeros(shape, np.float32), np.zeros(shape), TOL, "float32")


OPTIONS = EvaluationOptions(trials=True, precision=True)
CHECKS = ["integrity", "kernel-runs", "device-outputs", "replay", "output:out", "tolerance:out", "trials", "precision",
          "sandbox"]


def passing() -> RunResult:
    return RunResult(
        run_id="r", task_id="t", status="passed", backend="emulator", seeds=[0, 1],
        phases=[PhaseRecord(n, "ok", 0.1) for n in ("load", "reference", "compile", "run", "compare", "profile")],
        seed_results=[SeedResult(s, True, (_metrics(),)) for s in (0, 1)],
        checks=[Check(c, c, True, f"2 seed(s) replayed exactly; {REPLAY_FRESH_PASSED}" if c == "replay" else "")
                for c in CHECKS],
    )


def test_a_complete_pass_stands():
    r = passing()
    assert missing_evidence(r, _Task, OPTIONS) == []
    settle_status(r, _Task, OPTIONS)
    assert r.status == "passed" and r.error is None


def test_a_pass_with_zero_phases_and_zero_checks_is_an_internal_error_naming_what_is_missing():
    r = RunResult(run_id="r", task_id="t", status="passed", backend="emulator", seeds=[0, 1])
    settle_status(r, _Task, OPTIONS)
    assert r.status == "internal-error" and r.exit_code == 1
    assert r.error.kind == "internal" and "phase load is missing" in r.error.message
    assert "seed 0 has no result" in r.error.message
    assert any("did not accept the evaluator's pass" in n for n in r.notes)


def test_a_pass_beside_a_failing_check_is_not_a_pass():
    r = passing()
    r.checks[CHECKS.index("output:out")] = Check("output:out", "out", False, "3 mismatches")
    settle_status(r, _Task, OPTIONS)
    assert r.status == "internal-error" and "check output:out did not pass" in r.error.message


def test_every_output_of_every_seed_at_its_declared_shape():
    r = passing()
    r.seed_results[1] = replace(r.seed_results[1], outputs=(_metrics((2, 4)),))
    problems = missing_evidence(r, _Task, OPTIONS)
    assert problems == ["seed 1: output `out` was compared at shape [2, 4], declared [4, 2]"]
    r = passing()
    r.seed_results = r.seed_results[:1]
    assert "seed 1 has no result" in missing_evidence(r, _Task, OPTIONS)


def test_the_checks_the_options_ask_for_must_be_there():
    r = passing()
    r.checks = [c for c in r.checks if c.id != "trials"]
    assert missing_evidence(r, _Task, OPTIONS) == ["check trials is missing"]
    assert missing_evidence(r, _Task, replace(OPTIONS, trials=False)) == []
    r.checks = [c for c in r.checks if c.id != "device-outputs"]
    assert "check device-outputs is missing" in missing_evidence(r, _Task, replace(OPTIONS, trials=False))
    r.checks = [c for c in r.checks if c.id != "replay"]
    assert "check replay is missing" in missing_evidence(r, _Task, replace(OPTIONS, trials=False))


@pytest.mark.parametrize("passed, detail, problem", [
    (None, "replay unavailable: a register operand", "check replay did not pass"),
    (None, "1 seed(s) replayed exactly; replay on fresh inputs not judged", "check replay did not pass"),
    (True, "2 seed(s) replayed exactly", "check replay passed without its stage 2"),
])
def test_an_emulator_pass_needs_both_replay_stages(passed, detail, problem):
    """A replay that did not run, or ran stage 1 only, leaves a kernel unproven: never a pass (issue #14)."""
    r = passing()
    r.checks[CHECKS.index("replay")] = Check("replay", "replay", passed, detail)
    settle_status(r, _Task, OPTIONS)
    assert r.status == "internal-error" and problem in r.error.message
    r.backend = "neuron"  # hardware records no log: its runs are judged without it
    r.status, r.error = "passed", None
    r.checks = [c for c in r.checks if c.id not in ("replay", "device-outputs", "precision")]
    assert missing_evidence(r, _Task, OPTIONS) == []


def test_a_failed_or_unfinished_status_is_never_upgraded():
    for status in ("failed", "crashed", "timeout"):
        r = RunResult(run_id="r", task_id="t", status=status)
        settle_status(r, _Task, OPTIONS)
        assert r.status == status

"""The numerics checks on the bundled sample tasks, with their real NKI ports on the emulator.

Each flawed task's numerical flaw (see its AUDITOR_KEY.md) must be flagged by the right check, and
the numerically correct tasks must raise no numerics finding. The sample tasks are our own code, so
they run in-process here (nkitui runs task code in a limited child process).
"""

from __future__ import annotations

import functools

import pytest

from nkitui.common.resources import bundled_dir
from nkitui.evaluate.numerics import findings as rules
from tests.helpers.inprocess import kernel_runner, load_reference
from nkitui.evaluate.numerics.inputs import make_inputs
from nkitui.evaluate.numerics.audit import check_outputs, partial_sum_magnitudes, run_numerics_audit
from nkitui.evaluate.numerics.precision import isolate_precision
from nkitui.evaluate.numerics.callables import RunOptions
from nkitui.executor.backends.emulator import EmulatorBackend
from nkitui.task import load_task

SAMPLES = bundled_dir("sample_tasks")
# Correct numerics: every good port, and the transliteration (slow and unidiomatic, but right).
NUMERICALLY_CORRECT = sorted(
    p.name for p in SAMPLES.iterdir()
    if (p / "task.toml").is_file() and (not p.name.startswith("flawed") or p.name == "flawed_transliteration")
)


@functools.lru_cache(maxsize=None)
def _setup(name: str):
    task = load_task(SAMPLES / name)
    backend = EmulatorBackend(task, task.target)
    backend.prepare()
    return task, kernel_runner(backend, task), load_reference(task)


def _first_run(name: str, seed: int = 0):
    task, runner, reference = _setup(name)
    inputs = make_inputs(task, seed)
    got = runner(inputs, RunOptions(precise=True))
    ref = reference(inputs)
    mags = partial_sum_magnitudes(reference, inputs, task.outputs, task.op)
    metrics, advice, findings = check_outputs(task.outputs, inputs, got, ref, task.op, magnitudes=mags,
                                              context=f"with seed {seed}")
    return task, inputs, metrics, advice, findings


def _rules(findings):
    return sorted({f.rule for f in findings})


def test_loose_tolerance_zeros_would_pass():
    task, _, metrics, advice, findings = _first_run("flawed_loose_tolerance")
    assert all(m.passed for m in metrics)  # the port itself is right
    assert _rules(findings) == [rules.ZEROS_PASS]
    [f] = findings
    assert "`probs`" in f.message and "allclose atol=0.01 rtol=0.01" in f.message
    assert f.data["ref_max_abs"] < 0.01
    # the advice follows the fp32 budget of an 8192-long softmax: far below the outputs
    adv = advice[0].advised["allclose"]
    assert adv.atol < 1e-5 and adv.rtol <= 1e-4 and advice[0].reduction_length == 8192


def test_partial_tile_fails_in_the_last_row_of_the_last_tile():
    task, inputs, metrics, _, findings = _first_run("flawed_partial_tile")
    [m] = metrics
    assert not m.passed and m.mismatches == 512
    assert m.localisation.rows == (299, 299) and m.localisation.row_tiles == (2,)
    assert m.localisation.last_row_tile_partial and m.localisation.concentrated
    assert [row[0] for row in m.heatmap.mismatches] == [0, 0, 512]
    assert all(w.index[0] == 299 for w in m.worst)
    assert _rules(findings) == sorted([rules.NONFINITE, rules.TILE_LOCALISED])
    tile = next(f for f in findings if f.rule == rules.TILE_LOCALISED)
    assert "only the last row tile (a partial tile)" in tile.message and "off-by-one" in tile.message
    # with all arithmetic in fp32 it is still wrong: an algorithm error, not a dtype error
    _, runner, reference = _setup("flawed_partial_tile")
    report = isolate_precision(runner, reference, inputs, task.outputs, task.op)
    assert [o.verdict for o in report.outputs] == ["algorithm-error"]
    assert _rules(report.findings) == [rules.ALGO_ERROR]


def test_bf16_accumulation_passes_its_tolerance_but_not_precision_isolation():
    task, inputs, metrics, _, findings = _first_run("flawed_bf16_accum")
    assert all(m.passed for m in metrics)  # the loose policy accepts it: only its looseness is reported
    assert _rules(findings) == [rules.TOL_LOOSE] and findings[0].data["ratio"] > 1000, findings
    _, runner, reference = _setup("flawed_bf16_accum")
    report = isolate_precision(runner, reference, inputs, task.outputs, task.op)
    [o] = report.outputs
    assert o.verdict == "dtype-error-dominates" and o.passed_precise
    assert o.excess_rel_l2 > 100 * o.allowed_excess_rel_l2
    assert o.best_hypothesis.cause == (
        "accumulating the 16 matmul partial sums (K = 2048 in tiles of 128) in bfloat16 instead of fp32 PSUM")
    [f] = report.findings
    assert f.rule == rules.DTYPE_ERROR_DOMINATES and "still accepts it" in f.message


@pytest.mark.parametrize("name", NUMERICALLY_CORRECT)
def test_correct_ports_raise_no_numerics_finding(name):
    task, inputs, metrics, advice, findings = _first_run(name)
    assert all(m.passed for m in metrics), [(m.name, m.mismatches) for m in metrics]
    assert findings == [], [f.message for f in findings]
    for m, adv in zip(metrics, advice):
        assert m.convention("allclose", "advice").passed, (m.name, adv.policy.describe())
    if name != "flawed_transliteration":  # 2048 tiny iterations: one run is enough there
        _, runner, reference = _setup(name)
        report = isolate_precision(runner, reference, inputs, task.outputs, task.op)
        assert report.error is None and report.findings == (), [f.message for f in report.findings]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NUMERICALLY_CORRECT if n != "flawed_transliteration"])
def test_correct_ports_survive_every_seed_and_adversarial_trial(name):
    task, runner, reference = _setup(name)
    audit = run_numerics_audit(task.outputs, runner, reference, lambda s: make_inputs(task, s), task.seeds, task.op,
                               precision=False, mutants=False)
    assert audit.passed, audit.error
    assert audit.findings == (), [f.message for f in audit.findings]
    assert {t.status for t in audit.trials.trials} <= {"pass", "tolerance-only"}

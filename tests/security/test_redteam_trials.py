"""Red team, round 8: a kernel that answers only the judging phases' inputs from the host.

The kernel is wrong for large sums (it saturates at ±1e6), which the adversarial trials catch. It
recognises a trial's inputs (non-finite or huge values, read on the host from its request folder), and
answers those with numpy's sum embedded as an `nl.shared_constant`; on the seeds' and the fresh inputs it
runs its honest, wrong instructions. The seeds replay exactly and pass stage 2 (their values are in the
kernel's range), and only the seeds' launches were replayed: on 17f31ce the run PASSED.

Now the judging phases (trials, precision, goldens) take their outputs from the instruction log both replay
stages verified, replayed by the evaluator on their inputs: the kernel is not launched on a trial's inputs, so
it never sees them, and its trials are judged on what its instructions compute there (they fail, as the
honest saturating kernel's do). Where the log cannot answer (values carried from the seed; a stream that
branches on device values) the kernel is launched, and that launch must be what the log computes on its
inputs, bit for bit (HACK-REPLAY-MISMATCH otherwise; faf91af)."""

from __future__ import annotations

from pathlib import Path

from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation
from tests.security.conftest import wrong_task
from tests.security.test_redteam_replay import READ_INPUTS

SATURATING = """
    s = nl.add(nl.load(a), nl.load(b))
    answer = nl.maximum(nl.minimum(s, 1e6), -1e6)  # wrong for sums beyond +-1e6
"""

CHEAT = """
    x, y = _host_inputs()
    if not (np.isfinite(x).all() and np.isfinite(y).all() and np.abs(x).max() < 1e5 and np.abs(y).max() < 1e5):
        answer = nl.load(nl.shared_constant((x + y).astype(np.float32)))  # a trial's inputs: numpy answers
    else:
"""


def _evaluate(task: Path):  # noqa: ANN202
    handle = start_evaluation(EvaluationRequest.of(task, seeds=2, static=False, trials=True, precision=False,
                                                   store=False, timeout_s=120.0, memory_mb=4096))
    list(handle.events())
    return handle.result


def _kernel(cheat: bool) -> str:
    honest = SATURATING.strip("\n")
    body = (CHEAT + "\n".join("    " + line for line in honest.splitlines())) if cheat else SATURATING
    return body + """
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, answer)
    return out
"""


def _trials(result):  # noqa: ANN001, ANN202 - what the trials judged: names, statuses and errors per output
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    return [(t.name, t.status, [(o.name, o.max_abs, o.mismatches) for o in t.outputs]) for t in audit.trials.adversarial]


def test_a_kernel_answering_only_the_trials_from_the_host_is_not_passed(tmp_path: Path, record_property) -> None:
    record_property("protection", "replay:judging-launches")
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude=_kernel(cheat=True))
    result = _evaluate(task)
    checks = [(c.id, c.passed, c.detail) for c in result.checks]
    assert result.status != "passed" and result.exit_code != 0, checks
    # the seeds and the fresh inputs see the honest instructions: those checks pass
    assert next(c for c in result.checks if c.id == "replay").passed is True, checks
    assert next(c for c in result.checks if c.id == "trials").passed is False, checks
    # the trials were judged on what the verified instructions compute on their inputs: exactly the numbers of
    # the same kernel without the cheat, the host's answers never reached them
    control = _evaluate(wrong_task(tmp_path / "control", prelude=_kernel(cheat=False)))
    assert _trials(result) == _trials(control)
    assert any(status == "fail" for _name, status, _outputs in _trials(result)), _trials(result)


def test_a_launch_the_log_cannot_answer_must_still_be_what_the_log_computes(tmp_path: Path, monkeypatch) -> None:
    """Where the verified log does not answer a judging launch (here: made to look as if it carried values from the
    seed, as a log of front-end writes across SPMD programs does), the kernel is launched, and its outputs must
    be what the log computes on those inputs, bit for bit: the cheat's host answers are HACK-REPLAY-MISMATCH."""
    from nkitui.emulator import replay
    from tests.helpers.pipeline import evaluate_in_process

    carried = replay.carried_sources
    monkeypatch.setattr(replay, "carried_sources", lambda log: ["all_reduce"] if log.count else carried(log))
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude=_kernel(cheat=True))
    run = evaluate_in_process(task, seeds=2, trials=True, timeout_s=120.0, memory_mb=4096)
    result = run.result
    assert result.status != "passed", [(c.id, c.passed, c.detail) for c in result.checks]
    assert run.session.kernel.answered == 0  # every trial was launched
    errors = [t.error or "" for t in result.numerics.trials.adversarial]
    assert any("HACK-REPLAY-MISMATCH" in e and "answered these inputs some other way" in e for e in errors), errors


def test_the_same_kernel_without_the_cheat_fails_its_trials_on_its_own_numbers(tmp_path: Path) -> None:
    """The control: the saturating kernel's trials fail on its numbers, not on the replay."""
    task = wrong_task(tmp_path / "task", prelude=_kernel(cheat=False))
    result = _evaluate(task)
    assert result.status != "passed"
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    errors = [t.error or "" for t in audit.trials.adversarial]
    assert not any("HACK-REPLAY-MISMATCH" in e for e in errors), errors
    assert any(not t.passed for t in audit.trials.adversarial)

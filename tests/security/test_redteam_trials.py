"""Red team, round 8: a kernel that answers only the judging phases' inputs from the host.

The kernel is wrong for large sums (it saturates at ±1e6), which the adversarial trials catch. It
recognises a trial's inputs (non-finite or huge values, read on the host from its request folder), and
answers those with numpy's sum embedded as an `nl.shared_constant`; on the seeds' and the fresh inputs it
runs its honest, wrong instructions. The seeds replay exactly and pass stage 2 (their values are in the
kernel's range), and only the seeds' launches were replayed: on 17f31ce the run PASSED.

Now every launch of the judging phases (trials, precision, goldens) must be what the instruction log
verified on the seeds computes on its inputs, bit for bit (HACK-REPLAY-MISMATCH otherwise)."""

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


def test_a_kernel_answering_only_the_trials_from_the_host_is_not_passed(tmp_path: Path, record_property) -> None:
    record_property("protection", "replay:judging-launches")
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude=_kernel(cheat=True))
    result = _evaluate(task)
    checks = [(c.id, c.passed, c.detail) for c in result.checks]
    assert result.status != "passed" and result.exit_code != 0, checks
    # the seeds and the fresh inputs see the honest instructions: those checks pass
    assert next(c for c in result.checks if c.id == "replay").passed is True, checks
    audit = result.numerics_audit()
    assert audit is not None and audit.trials is not None
    errors = [t.error or "" for t in audit.trials.adversarial]
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

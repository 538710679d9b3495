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

import shutil
from pathlib import Path

from nkitui.common.resources import bundled_dir
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


# -- round 9: a kernel that makes its stream diverge from the verified log on the trials' inputs ------------
DIVERGING_KERNEL = '''"""Wrong vector_add (saturates at +-1e6) that branches on a device flag where the trials' inputs differ."""
import glob
import os

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

P = 128
F = 1024
LIM = 1e6


def _host_inputs():
    folders = sorted(glob.glob(os.path.join(os.path.dirname(os.getcwd()), "io", "*", "in")),
                     key=lambda f: int(f.split(os.sep)[-2]))
    names = sorted(os.listdir(folders[-1]))
    return [np.array(np.lib.format.open_memmap(os.path.join(folders[-1], n), mode="r")) for n in names]


@nki.jit
def vector_add_kernel(a, b):
    n = a.shape[0]
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n_cores = nl.num_programs(axes=0)
    core = nl.program_id(axis=0)
    tiles_per_core = n // (n_cores * P * F)
    a_rows = a.reshape((n // F, F))
    b_rows = b.reshape((n // F, F))
    c_rows = c.reshape((n // F, F))
    for t in range(tiles_per_core):
        row0 = (core * tiles_per_core + t) * P
        a_tile = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((P, F), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_rows[row0:row0 + P, :])
        nisa.dma_copy(dst=b_tile, src=b_rows[row0:row0 + P, :])
        s = nl.add(a_tile, b_tile)
        clamped = nl.minimum(nl.maximum(s, -LIM), LIM)  # wrong: saturates at +-1e6
        ok = nl.equal(nl.subtract(s, clamped), 0.0, dtype=nl.float32)  # 1 where exact, 0 where clamped or NaN
        rowmin = nl.min(ok, axis=1, keepdims=True)
        allmin = nl.min(nl.transpose(rowmin), axis=1, keepdims=True)
        reg = nisa.register_alloc(allmin)
        if {condition}:
            c_tile = clamped
        else:  # inputs outside the seeds' distribution (a trial): answer from the host
            x, y = _host_inputs()
            full = (x + y).astype(np.float32).reshape((n // F, F))
            c_tile = nl.load(nl.shared_constant(np.ascontiguousarray(full[row0:row0 + P, :])))
        nl.store(c_rows[row0:row0 + P, :], c_tile)
    return c
'''


def _diverging_task(root: Path, condition: str) -> Path:
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", root)
    manifest = root / "task.toml"
    manifest.write_text(manifest.read_text().replace("1048576", "262144"))
    (root / "vector_add_nki.py").write_text(DIVERGING_KERNEL.replace("{condition}", condition))
    return root


def test_a_kernel_that_diverges_from_the_verified_log_only_on_the_trials_is_not_passed(tmp_path: Path,
                                                                                         record_property) -> None:
    """Red team, round 9: the kernel branches on a device register that holds 1 on the seeds' and the fresh
    inputs (so both replay stages verify its log) and 0 on a trial's non-finite or huge inputs, where it
    answers from the host. A judging launch whose stream diverged from the verified log was taken on the
    kernel process's word: on ff76a4b the run PASSED (exit 0, 3/3 trials). Such a launch is now not proven,
    and a run with an unproven judging launch cannot pass."""
    record_property("protection", "replay:judging-divergence")
    result = _evaluate(_diverging_task(tmp_path / "task", "int(reg) == 1"))
    checks = [(c.id, c.passed, c.detail[:300]) for c in result.checks]
    assert result.status != "passed" and result.exit_code != 0, checks
    assert next(c for c in result.checks if c.id == "replay").passed is True, checks  # seeds and fresh set: honest
    assert "diverged" in " ".join(str(c.detail) for c in result.checks if c.id == "trials") + " ".join(result.notes), checks


def test_the_diverging_kernel_without_the_branch_fails_its_trials_on_its_own_numbers(tmp_path: Path) -> None:
    """The control: the same wrong kernel forced down its device path fails the trials on its numbers."""
    result = _evaluate(_diverging_task(tmp_path / "task", "True"))
    assert result.status == "failed", [(c.id, c.passed) for c in result.checks]
    assert next(c for c in result.checks if c.id == "trials").passed is False

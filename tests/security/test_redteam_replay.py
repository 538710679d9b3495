"""Red team: host values carried into device memory with legitimate provenance, and a tampered
instruction log. The kernel (a * b for a + b) reads the harness's input files on the host, computes
the right answer with numpy and hands it to the device as an `nl.shared_constant`, or as scalar
immediates, then stores it with ordinary instructions: every output is an HBM tensor its own
instructions wrote, so device provenance counts it. On 511012e (before the replay) both passed.

The out-of-process replay catches them at stage 2: the first seed's instructions replayed on a fresh
input set the evaluator draws at random do not meet the reference there (HACK-REPLAY-FRESH)."""

from __future__ import annotations

from pathlib import Path

from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation
from tests.security.conftest import wrong_task

# The harness's inputs of the current launch, as the kernel's process received them (its own scratch).
READ_INPUTS = '''
def _host_inputs():
    folders = sorted(glob.glob(os.path.join(os.path.dirname(os.getcwd()), "io", "*", "in")),
                     key=lambda f: int(f.split(os.sep)[-2]))
    names = sorted(os.listdir(folders[-1]))
    return [np.load(os.path.join(folders[-1], n)) for n in names]
'''


def _evaluate(task: Path):  # noqa: ANN202
    handle = start_evaluation(EvaluationRequest.of(task, seeds=2, static=False, trials=False, precision=False,
                                                   store=False, timeout_s=120.0, memory_mb=4096))
    list(handle.events())
    return handle.result


def _check(result, cid):  # noqa: ANN001, ANN202
    return next((c for c in result.checks if c.id == cid), None)


def test_a_shared_constant_of_the_host_computed_answer_is_not_passed(tmp_path: Path) -> None:
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude="""
        x, y = _host_inputs()
        answer = nl.load(nl.shared_constant(x + y))  # numpy's a + b, embedded as a constant
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, answer)
        return out
    """)
    result = _evaluate(task)
    assert result.status != "passed" and result.exit_code != 0, [(c.id, c.passed, c.detail) for c in result.checks]
    # the seeds themselves matched: only the replay on fresh inputs tells
    assert _check(result, "output:out").passed is True
    assert _check(result, "device-outputs").passed is True
    replay = _check(result, "replay")
    assert replay.passed is False and "fresh input set" in replay.detail
    assert [f for f in result.findings if f.rule == "HACK-REPLAY-FRESH"]


def test_scalar_immediates_carrying_host_values_are_not_passed(tmp_path: Path) -> None:
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude="""
        x, y = _host_inputs()
        answer = x + y
        tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                tile[i, j] = float(answer[i, j])  # a memset per element: each value an immediate
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, tile)
        return out
    """)
    result = _evaluate(task)
    assert result.status != "passed" and result.exit_code != 0, [(c.id, c.passed, c.detail) for c in result.checks]
    assert _check(result, "output:out").passed is True
    replay = _check(result, "replay")
    assert replay.passed is False and "fresh input set" in replay.detail


def test_a_correct_kernel_replays_exactly_and_on_fresh_inputs(tmp_path: Path) -> None:
    """The control: the same task with a right kernel passes, its replay check included."""
    task = wrong_task(tmp_path / "task", prelude="""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out
    """)
    result = _evaluate(task)
    assert result.status == "passed", [(c.id, c.passed, c.detail) for c in result.checks]
    replay = _check(result, "replay")
    assert replay.passed is True and "replayed exactly" in replay.detail and "fresh input set" in replay.detail


def test_a_log_planted_by_the_kernel_is_refused_never_passed(tmp_path: Path) -> None:
    """The kernel's code plants out/replay.bin as a link (to a forged log of its own) before nkitui writes
    the real one: the evaluator opens the log without following links, so the seed's log is invalid and
    the run fails (HACK-REPLAY-INVALID), even though the kernel itself is right."""
    task = wrong_task(tmp_path / "task", prelude="""
        folders = sorted(glob.glob(os.path.join(os.path.dirname(os.getcwd()), "io", "*")),
                         key=lambda f: int(f.split(os.sep)[-1]))
        os.makedirs(os.path.join(folders[-1], "out"), exist_ok=True)
        with open(os.path.join(folders[-1], "forged.bin"), "wb") as f:
            f.write(b"NKIREPLAY\\x01\\n")
        os.symlink(os.path.join(folders[-1], "forged.bin"), os.path.join(folders[-1], "out", "replay.bin"))
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out
    """, module="import glob")
    result = _evaluate(task)
    assert result.status != "passed" and result.exit_code != 0, [(c.id, c.passed, c.detail) for c in result.checks]
    replay = _check(result, "replay")
    assert replay is not None and replay.passed is False
    assert [f for f in result.findings if f.rule == "HACK-REPLAY-INVALID"]

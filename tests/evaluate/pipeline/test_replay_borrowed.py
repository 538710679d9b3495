"""Stage 1 of the replay with one recorded log (EvaluationSession._launch_seed, kernel.replay_borrowed): the
first seed that runs records its instruction log; a later seed's launch is not recorded, and the first log,
replayed here on that seed's inputs, must give its reported outputs bit for bit. A seed it does not
reproduce (an instruction stream that depends on the input values, host values carried as constants) is
launched again, recorded, and judged on its own log: the verdict is the one recording every seed gives.
Real confined processes, the session in this process."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nkitui.evaluate.pipeline import kernel as kernel_module
from nkitui.evaluate.pipeline import session as session_module
from tests.helpers.pipeline import evaluate_in_process
from tests.security.conftest import wrong_task
from tests.security.test_redteam_replay import READ_INPUTS

RIGHT = """
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
"""
HOST_CONSTANT = """
    x, y = _host_inputs()
    answer = nl.load(nl.shared_constant(x + y))  # numpy's a + b, embedded as a constant: seed 1's values only
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, answer)
    return out
"""
SEED = "the kernel failed on seed"  # (the label of a seed's launch, in its error message)


def _watch(monkeypatch) -> list[tuple[str, bool]]:
    """Each seed launch of a check: (label, recorded?)."""
    seen: list[tuple[str, bool]] = []
    original = kernel_module.KernelProcess.run

    def run(self, inputs, *, precise, what="the kernel", replay=False, replay_with=None, **kw):
        if what.startswith(SEED):
            seen.append((what, bool(replay and replay_with is None)))
        return original(self, inputs, precise=precise, what=what, replay=replay, replay_with=replay_with, **kw)

    monkeypatch.setattr(kernel_module.KernelProcess, "run", run)
    return seen


def _record_every_seed(monkeypatch) -> None:
    original = session_module.EvaluationSession._launch_seed
    monkeypatch.setattr(session_module.EvaluationSession, "_launch_seed",
                        lambda self, seed, seeds, record=False: original(self, seed, seeds, record=True))


def _verdict(run):
    r = run.result
    return (r.status, [(c.id, c.passed) for c in r.checks], sorted(f.rule for f in r.findings),
            {s: (x.passed, x.error.kind if x.error else None) for s, x in run.session.seed_results.items()})


def test_only_the_first_seed_is_recorded_and_its_log_reproduces_the_later_seeds(tmp_path: Path, monkeypatch) -> None:
    task = wrong_task(tmp_path / "task", prelude=RIGHT)
    seen = _watch(monkeypatch)
    run = evaluate_in_process(task, seeds=3)
    assert run.result.status == "passed", [(c.id, c.passed, c.detail) for c in run.result.checks]
    assert [recorded for _w, recorded in seen] == [True, False, False]
    outcomes = run.session.replay_outcomes
    assert [s for s, _o in outcomes] == [0, 1, 2] and all(o.status == "exact" for _s, o in outcomes)
    assert outcomes[1][1].log is outcomes[0][1].log and "recorded on another seed" in outcomes[2][1].detail
    for seed in (1, 2):  # the outputs used are the ones the first log computes on that seed's inputs
        got = run.session.outputs[seed]["out"]
        inputs = run.session.auditor.inputs[seed]
        assert np.array_equal(got, inputs["a"] + inputs["b"])

    seen.clear()
    _record_every_seed(monkeypatch)
    every = evaluate_in_process(task, seeds=3)
    assert [recorded for _w, recorded in seen] == [True, True, True]
    assert _verdict(every) == _verdict(run)


def test_a_seed_the_first_log_does_not_reproduce_is_launched_again_recorded(tmp_path: Path, monkeypatch) -> None:
    """Host values as a constant: the first seed's log carries seed 0's answer, so on seed 1's inputs it gives
    seed 0's values; seed 1 is launched again and replayed on its own log (exact: the constant is its own
    answer), and stage 2 fails the run as before (HACK-REPLAY-FRESH)."""
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS, prelude=HOST_CONSTANT)
    seen = _watch(monkeypatch)
    run = evaluate_in_process(task, seeds=2)
    assert [(w.rsplit(" ", 1)[-1], recorded) for w, recorded in seen] == [("0", True), ("1", False), ("1", True)]
    assert run.result.status != "passed"
    replay = next(c for c in run.result.checks if c.id == "replay")
    assert replay.passed is False and "fresh input set" in replay.detail
    assert "HACK-REPLAY-FRESH" in {f.rule for f in run.result.findings}
    assert [(s, o.status) for s, o in run.session.replay_outcomes] == [(0, "exact"), (1, "exact")]
    assert run.session.replay_outcomes[1][1].log is not run.session.replay_outcomes[0][1].log  # its own log

    seen.clear()
    _record_every_seed(monkeypatch)
    every = evaluate_in_process(task, seeds=2)
    assert [recorded for _w, recorded in seen] == [True, True]
    assert _verdict(every) == _verdict(run)


def test_a_borrowed_replay_never_passes_what_the_first_log_does_not_compute() -> None:
    from nkitui import emulator
    from nkitui.emulator import replaylog
    from tests.helpers.emulator_session import install_for_session

    install_for_session()
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    with replaylog.recording([a, b]) as rec, emulator.options(target="trn2", precise=True):
        out = add_kernel(a, b)
    data = replaylog.pack(rec, {"out": rec.output_view(out)})
    first = kernel_module.replay_launch(data, [a, b], {"out": out}, target="trn2", precise=True)
    assert first.status == "exact"

    c, d = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    ok = kernel_module.replay_borrowed(first, [c, d], {"out": c + d}, target="trn2", precise=True)
    assert ok.status == "exact" and ok.log is first.log
    forged = (c + d).copy()
    forged[1, 2] = np.nextafter(forged[1, 2], np.float32(np.inf))  # one ULP off: not what the log computes
    assert kernel_module.replay_borrowed(first, [c, d], {"out": forged}, target="trn2", precise=True).status == "retry"
    assert kernel_module.replay_borrowed(first, [c, d[:2]], {"out": c + d}, target="trn2", precise=True).status == "retry"
    for bad in (None, kernel_module.ReplayOutcome("mismatch", "x"), kernel_module.ReplayOutcome("unavailable", "x")):
        assert kernel_module.replay_borrowed(bad, [c, d], {"out": c + d}, target="trn2", precise=True).status == "retry"
    assert not kernel_module.ReplayOutcome("retry", "x").failed  # (never a failure of its own: launched again)

"""The spare kernel process (nkitui.evaluate.pipeline.spare): launches it runs ahead give the verdict
the first kernel process alone gives, on a task whose trials include a failing adversarial case and
whose precision isolation runs a launch of its own, and whose kernel reads device values on the host
(a stream whose verified log cannot answer the judging launches: those still launch). Real confined
processes; the spare is forced on (SPARE_MIN_LAUNCH_S = 0) and, in one run, made to finish every planned
launch before the judging phases ask, so that every one of them comes from the spare. A kernel whose log
answers the judging launches by its replay gets no spare."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nkitui.evaluate.pipeline import session as session_module
from nkitui.evaluate.pipeline import spare as spare_module
from tests.helpers.pipeline import evaluate_in_process

TASK = Path(__file__).resolve().parents[3] / "sample_tasks" / "flawed_bf16_accum"


def _verdict(run):
    r = run.result
    trials = r.numerics.trials.trials if r.numerics and r.numerics.trials else ()
    precision = r.numerics.precision.outputs if r.numerics and r.numerics.precision else ()
    return {
        "status": r.status,
        "checks": [(c.id, c.passed, c.detail) for c in r.checks],
        "trials": [(t.name, t.status, [(o.name, o.max_abs, o.mismatches) for o in t.outputs]) for t in trials],
        "precision": [(o.name, o.verdict) for o in precision],
        "findings": sorted((f.rule, f.severity, f.title) for f in r.findings),
    }


@pytest.fixture
def task(tmp_path):
    from tests.evaluate.pipeline.test_launch_ahead import observing_copy

    return observing_copy(tmp_path / "task")


def test_launches_run_ahead_by_the_spare_give_the_same_verdict(task, monkeypatch):
    options = dict(seeds=1, trials=True, precision=True, timeout_s=240.0)
    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", float("inf"))
    alone = evaluate_in_process(task, **options)
    assert alone.session.kernel.spare is None

    taken = []
    original = spare_module.SpareLaunches.take

    def take_when_done(self, key):  # the spare finishes its plan first: every launch asked is its own
        self._thread.join(timeout=120)
        run = original(self, key)
        taken.append(run is not None)
        return run

    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", 0.0)
    monkeypatch.setattr(session_module, "SPARE_MIN_CPU_SHARE", 0.0)  # whatever the machine's load
    monkeypatch.setattr(spare_module.SpareLaunches, "take", take_when_done)
    # the first process runs no launch ahead of its own here (test_launch_ahead.py): every one is the spare's
    monkeypatch.setattr(session_module.EvaluationSession, "_launch_ahead", lambda self, pending: None)
    ahead = evaluate_in_process(task, **options)
    spare = ahead.session.kernel.spare
    assert spare is not None and spare.ran >= 5 and taken and all(taken)  # 4 adversarial cases + fp32
    assert _verdict(ahead) == _verdict(alone)
    assert any(t[1] == "fail" for t in _verdict(ahead)["trials"])  # the failing case came from the spare too
    roles = [c.role for c in ahead.session.children]
    assert roles.count("kernel") == 2 and all(not c.handle.running for c in ahead.session.children)


def test_no_spare_when_the_verified_log_answers_the_judging_launches(tmp_path, monkeypatch):
    """The bundled task as it is: its first seed's log replays exactly and reads no device values, so its judging
    launches are answered by the replay and a spare (forced on by its thresholds) is not started."""
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", 0.0)
    monkeypatch.setattr(session_module, "SPARE_MIN_CPU_SHARE", 0.0)
    run = evaluate_in_process(task, seeds=2, trials=True, precision=True, timeout_s=240.0)
    assert run.session.kernel.spare is None and run.session.kernel.answered >= 5
    assert [c.role for c in run.session.children].count("kernel") == 2  # one per seed, no spare
    assert run.result.status == "failed"  # (its adversarial trials fail: a wrong accumulation dtype)


def test_a_spare_starts_only_when_the_first_launch_computed_rather_than_waited_for_a_core():
    """A first launch that took 3 s of wall time with 2.8 s of CPU: slow, on a machine with a core for it (a
    spare pays). The same 3 s with 0.4 s of CPU: the machine's cores were busy, and a spare's interpreter
    and launches would only take CPU from the rest of the check."""
    assert session_module.spare_pays(3.0, 2.8)
    assert not session_module.spare_pays(3.0, 0.4)
    assert not session_module.spare_pays(0.8, 0.2)
    assert session_module.spare_pays(3.0, None)  # a kernel process that reports no CPU time: as before


class _Sleeper:
    """A real process in the spare child's place, with the two calls SpareLaunches makes of one."""

    def __init__(self) -> None:
        import subprocess

        self.proc = subprocess.Popen(["sleep", "60"])

    def close(self) -> None:
        self.kill()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def test_neither_take_nor_stop_waits_for_a_spawn_in_progress_and_a_late_child_is_ended():
    # the spare's thread held the condition's lock while it spawned: a fork that took long (or never
    # ended) held up the evaluator's next launch in take(), and stop() as well; and a child spawned
    # after stop() went on to load the kernel
    import threading
    import time

    release = threading.Event()
    made: list[_Sleeper] = []
    prepared: list[object] = []

    def spawn() -> _Sleeper:
        release.wait(30)
        made.append(_Sleeper())
        return made[-1]

    spare = spare_module.SpareLaunches(spawn, lambda child: prepared.append(child), [("k", {}, False)])
    try:
        answer: list[object] = []
        taker = threading.Thread(target=lambda: answer.append(spare.take("k")), daemon=True)
        taker.start()
        taker.join(timeout=5)
        assert answer == [None], "take() waited for the spare's spawn"
        stopper = threading.Thread(target=spare.stop, daemon=True)
        stopper.start()
        time.sleep(0.2)
    finally:
        release.set()
    stopper.join(timeout=20)
    assert not stopper.is_alive(), "stop() did not return once the spawn ended"
    assert len(made) == 1 and made[0].proc.returncode is not None, "the child spawned after stop() was left running"
    assert prepared == [], "a child spawned after stop() was still prepared"

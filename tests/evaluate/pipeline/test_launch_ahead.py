"""The first later launch run ahead (EvaluationSession._launch_ahead): while the seeds' last replays run on
the evaluator's replay thread, the kernel process runs the first launch the trials will ask for. The
verdict is the one the sequential order gives, and a launch run ahead that failed is run again in its own
phase. Real confined processes on a bundled task whose trials include a failing adversarial case; each
seed's replay is held back 1 s so that one is still running when the seeds end."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from nkitui.evaluate.pipeline import kernel as kernel_module
from nkitui.evaluate.pipeline import session as session_module
from tests.evaluate.pipeline.test_spare import _verdict
from tests.helpers.pipeline import evaluate_in_process

TASK = Path(__file__).resolve().parents[3] / "sample_tasks" / "flawed_bf16_accum"
OPTIONS = dict(seeds=2, trials=True, precision=True, timeout_s=240.0)
AHEAD = "a launch run ahead"


@pytest.fixture
def task(tmp_path):
    shutil.copytree(TASK, tmp_path / "task")
    return tmp_path / "task"


@pytest.fixture
def launches(monkeypatch):
    """Every KernelProcess.run of a check, in order: (what, key of its inputs); each seed's replay made to
    take at least 1 s; no spare kernel process (one process runs every launch)."""
    from nkitui.evaluate.numerics.recorded import inputs_digest

    seen: list[tuple[str, tuple[bytes, bool]]] = []
    original = kernel_module.KernelProcess.run

    def run(self, inputs, *, precise, what="the kernel", **kw):
        seen.append((what, (inputs_digest(inputs), precise)))
        result = original(self, inputs, precise=precise, what=what, **kw)
        job = result.replay_job
        if job is not None:
            def slow():
                time.sleep(1.0)
                return job()
            result.replay_job = slow
        return result

    monkeypatch.setattr(kernel_module.KernelProcess, "run", run)
    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", float("inf"))
    return seen


def test_the_first_trial_runs_while_the_last_replay_does_and_the_verdict_is_the_same(task, launches, monkeypatch):
    launch_ahead = session_module.EvaluationSession._launch_ahead
    monkeypatch.setattr(session_module.EvaluationSession, "_launch_ahead", lambda self, pending: None)
    alone = evaluate_in_process(task, **OPTIONS)
    sequential = list(launches)
    assert AHEAD not in [w for w, _k in sequential]

    launches.clear()
    monkeypatch.setattr(session_module.EvaluationSession, "_launch_ahead", launch_ahead)
    ahead = evaluate_in_process(task, **OPTIONS)
    assert _verdict(ahead) == _verdict(alone)
    assert any(t[1] == "fail" for t in _verdict(ahead)["trials"])
    whats = [w for w, _k in launches]
    assert whats.count(AHEAD) == 1, whats
    i = whats.index(AHEAD)
    assert i == OPTIONS["seeds"] and all(w.startswith("the kernel failed on seed") for w in whats[:i])  # right after the seeds
    # the trials took it: the same launches as the sequential order, none run twice
    assert sorted(k for _w, k in launches) == sorted(k for _w, k in sequential)
    assert launches[i][1] == next(k for w, k in sequential if not w.startswith("the kernel failed on seed"))


def test_a_launch_run_ahead_that_failed_is_run_again_by_its_phase(task, launches, monkeypatch):
    from nkitui.evaluate.numerics.recorded import inputs_digest

    recorded = kernel_module.KernelProcess.run  # the fixture's: records each launch

    def failing_ahead(self, inputs, *, precise, what="the kernel", **kw):
        if what == AHEAD:
            launches.append((what, (inputs_digest(inputs), precise)))
            return kernel_module.KernelRun(error={"kind": "kernel-error", "message": "made to fail here", "file": None,
                                                  "line": None, "traceback": ""})
        return recorded(self, inputs, precise=precise, what=what, **kw)

    monkeypatch.setattr(kernel_module.KernelProcess, "run", failing_ahead)
    run = evaluate_in_process(task, **OPTIONS)
    i = [w for w, _k in launches].index(AHEAD)
    key = launches[i][1]
    assert [k for _w, k in launches[i + 1:]].count(key) == 1  # the trials ran it again themselves
    assert run.result.status == "failed"  # (its adversarial trials fail: a wrong accumulation dtype)
    trials = run.result.numerics.trials.trials
    assert all(t.status != "error" for t in trials), [(t.name, t.status, t.error) for t in trials]
    assert "made to fail here" not in str(run.result.to_dict())


def test_claim_never_waits_and_leaves_to_the_spare_only_what_it_has():
    import threading

    from nkitui.evaluate.pipeline import spare as spare_module

    release = threading.Event()
    spare = spare_module.SpareLaunches(lambda: release.wait(30) and None, lambda child: None,
                                       [("a", {}, False), ("b", {}, False)])
    try:
        assert spare.claim("a") is True  # unclaimed: the caller's now
        assert spare.take("a") is None  # ... and take() says so without waiting
        assert spare.claim("elsewhere") is True  # not planned: the caller runs it
        with spare._cond:
            spare._claimed["b"] = "spare"  # the spare's thread took it
        assert spare.claim("b") is False
    finally:
        release.set()
        spare.stop()

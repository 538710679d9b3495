"""The first later launch run ahead (EvaluationSession._launch_ahead): while the seeds' last replays run on
the evaluator's replay thread, the kernel process runs the first launch the trials will ask for. That is
only for a stream whose verified log will not answer the judging launches (KernelProcess._verified_replay):
one that reads device values on the host (here flawed_bf16_accum with a `nl.device_print` of an input
element added, whose replay diverges on other inputs). The verdict is the one the sequential order gives,
and a launch run ahead that failed is run again in its own phase. For the task as it is, nothing runs
ahead: its judging launches are answered by the verified log's replay, with the verdict the launches give.
Real confined processes; each seed's replay is held back 1 s so that one is still running when the seeds
end."""

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
    return observing_copy(tmp_path / "task")


def observing_copy(where: Path) -> Path:
    """flawed_bf16_accum whose kernel prints an input element from the device: its log carries an observation
    (data-dependent), so its replay diverges on other inputs and its judging launches are launched."""
    shutil.copytree(TASK, where)
    kernel = where / "matmul_bf16_f32out_nki.py"
    text = kernel.read_text(encoding="utf-8")
    marker = "    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)\n"
    assert marker in text
    kernel.write_text(text.replace(marker, marker + '    nl.device_print("lhsT[0, 0]", nl.load(lhsT[0:1, 0:1]))\n'),
                      encoding="utf-8")
    return where


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


def test_a_log_that_answers_the_judging_launches_runs_nothing_ahead_and_gives_the_launches_verdict(tmp_path, launches,
                                                                                                monkeypatch):
    """The bundled task as it is: its log replays exactly and reads no device values, so the trials' and precision
    isolation's launches are answered by its replay (no launch ahead, none at all after the seeds), and the
    verdict is the one the launches give (the same run with the answers switched off: every judging launch made
    and held to the log bit for bit)."""
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    answered = evaluate_in_process(task, **OPTIONS)
    whats = [w for w, _k in launches]
    assert whats and all(w.startswith("the kernel failed on seed") for w in whats), whats  # the seeds only
    assert answered.session.kernel.answered >= 5  # 4 adversarial cases + the fp32 launch

    launches.clear()
    verified = kernel_module.KernelProcess._verified_replay

    def launch_and_hold(self, inputs, precise):  # the answer dropped: launched, then checked against the log
        found = verified(self, inputs, precise)
        if found.outputs is None:
            return found
        return kernel_module.VerifiedReplay(against_log=lambda outputs: self._against(self.verified_log, inputs,
                                                                                      outputs, precise))

    monkeypatch.setattr(kernel_module.KernelProcess, "_verified_replay", launch_and_hold)
    launched = evaluate_in_process(task, **OPTIONS)
    assert launched.session.kernel.answered == 0
    assert len(launches) > OPTIONS["seeds"]
    assert _verdict(answered) == _verdict(launched)
    assert any(t[1] == "fail" for t in _verdict(answered)["trials"])


def test_judging_answers_replayed_during_the_last_seed_are_used_only_for_the_verified_log(tmp_path, monkeypatch):
    """Before the last seed's launch, the replay thread replays the first seed's log on the judging inputs
    (EvaluationSession._answer_judging_early; made to wait here for that log's replay, which it otherwise only
    takes when done). The judging phases then use those answers, replay nothing more and give the verdict of
    answers made in their own phases; an answer made on another log than the one both stages verified is not
    used."""
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    options = dict(OPTIONS, seeds=3)
    early = session_module.EvaluationSession._answer_judging_early

    def after_the_first_replay(self, seeds):
        if seeds.logged is not None:
            seeds.logged.result()
        early(self, seeds)

    monkeypatch.setattr(session_module.EvaluationSession, "_answer_judging_early", after_the_first_replay)
    made, later = [], []
    answer_early = kernel_module.KernelProcess.answer_early
    verified_replay = kernel_module.KernelProcess._verified_replay
    monkeypatch.setattr(kernel_module.KernelProcess, "answer_early",
                        lambda self, log, key, inputs, precise, *helper: made.append(key)
                        or answer_early(self, log, key, inputs, precise, *helper))

    def counted(self, inputs, precise, log=None, replayer=None):
        if log is None:
            later.append(precise)
        return verified_replay(self, inputs, precise, log, replayer)

    monkeypatch.setattr(kernel_module.KernelProcess, "_verified_replay", counted)
    ahead = evaluate_in_process(task, **options)
    assert len(made) >= 5 and later == [] and ahead.session.kernel.answered == len(made)

    made.clear()
    monkeypatch.setattr(session_module.EvaluationSession, "_answer_judging_early", lambda self, seeds: None)
    in_phase = evaluate_in_process(task, **options)
    assert made == [] and len(later) >= 5
    assert _verdict(ahead) == _verdict(in_phase)

    later.clear()
    process = in_phase.session.kernel
    key, inputs, precise = in_phase.session._later_launches()[0]
    process._answers[key] = (object(), kernel_module.VerifiedReplay(outputs={"c": None}))  # made on another log
    outputs = process.runner(True)(inputs, kernel_module.RunOptions(precise=precise, label="t"))
    assert later == [precise] and outputs["c"] is not None

"""The replay helper (nkitui/evaluate/pipeline/replayhelper.py): a trusted process forked from the evaluator that
replays every other judging launch. Its answers are the evaluator's own replay's, bit for bit; its errors are the
same errors; where it is gone the evaluator replays itself; and a real evaluation uses it and leaves nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from nkitui.emulator import replay
from nkitui.evaluate.pipeline import replayhelper
from nkitui.executor import forked
from tests.security.test_replay_log import CASES, _record, _valid_log


@pytest.fixture()
def helper(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setattr(forked, "why_not", lambda: None)  # a test process is no evaluator; the helper needs no more
    made = replayhelper.ReplayHelper.fork()
    assert made is not None
    yield made
    made.close()


def _outcome(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - compared by kind and words
        return (type(exc).__name__, str(exc))


def test_the_helper_replays_bit_for_bit_what_the_evaluator_would(helper) -> None:  # noqa: ANN001
    diverged = 0
    for name in ("add", "matmul-psum", "mask-iota-constant", "indirect-dma"):
        kernel, make = CASES[name]
        _out, data = _record(kernel, *make())
        log = replay.unpack(data)
        for _ in range(2):  # other inputs than the recorded ones: the judging launches' case
            inputs = make()
            here = _outcome(lambda: replay.replay(log, inputs, target="trn2", precise=True))  # noqa: B023
            there = _outcome(lambda: helper.replay(data, inputs, target="trn2", precise=True))  # noqa: B023
            if isinstance(here, tuple):  # indirect DMA on other indices: the stream diverges, there as here
                assert there == here, name
                diverged += here[0] == "Diverged"
                continue
            assert there.keys() == here.keys()
            for k in here:
                assert there[k].dtype == here[k].dtype and np.array_equal(there[k], here[k], equal_nan=True), name
    assert diverged and helper.replays == 8


def test_the_helpers_errors_are_the_replays_errors(helper) -> None:  # noqa: ANN001
    data = _valid_log()
    with pytest.raises(replay.ReplayError) as local:
        replay.replay(replay.unpack(data), [np.zeros((3,), np.float32)], target="trn2", precise=True)
    with pytest.raises(Exception) as remote:
        helper.replay(data, [np.zeros((3,), np.float32)], target="trn2", precise=True)
    assert type(remote.value).__name__ == type(local.value).__name__
    assert str(remote.value) == str(local.value)


def test_where_the_helper_is_gone_the_evaluator_replays_itself(helper) -> None:  # noqa: ANN001
    kernel, make = CASES["add"]
    _out, data = _record(kernel, *make())
    log, inputs = replay.unpack(data), make()
    pid = helper.pid
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    helper.pid = 0  # reaped here
    with pytest.raises(ChildProcessError):
        helper.replay(data, inputs, target="trn2", precise=True)
    got = helper.replayer(data)(log, inputs, target="trn2", precise=True)
    want = replay.replay(log, inputs, target="trn2", precise=True)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_process_with_threads_forks_no_helper() -> None:
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert replayhelper.ReplayHelper.fork() is None  # not an evaluator, and a second thread besides
    finally:
        stop.set()
        thread.join()


def test_an_evaluation_replays_judging_launches_in_the_helper_with_the_same_verdict(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """vector_add at its smallest size, evaluated in this process with its children real and confined: its judging
    launches (trials, precision) are answered by the verified log's replay before the last seed's launch (made to
    wait here for the first seed's replay, as test_launch_ahead does), every other one in the helper; the verdict
    and every trial are the ones the evaluator's own replays give, and the helper ends with the run."""
    from tests.evaluate.pipeline.test_spare import _verdict
    from tests.helpers.pipeline import evaluate_in_process
    from tests.security.test_redteam_state import counting_task

    from nkitui.evaluate.pipeline import session as session_module

    early = session_module.EvaluationSession._answer_judging_early

    def after_the_first_replay(self, seeds):  # noqa: ANN001, ANN202
        if seeds.logged is not None:
            seeds.logged.result()
        early(self, seeds)

    monkeypatch.setattr(session_module.EvaluationSession, "_answer_judging_early", after_the_first_replay)
    fork = replayhelper.ReplayHelper.fork.__func__  # type: ignore[attr-defined]  # the classmethod's function
    helpers: list[replayhelper.ReplayHelper] = []

    def fork_here(cls):  # noqa: ANN001, ANN202 - this test process is no evaluator: the helper alone may fork here
        with monkeypatch.context() as m:
            m.setattr(forked, "why_not", lambda: None)
            made = fork(cls)
        helpers.append(made)
        return made

    monkeypatch.setattr(replayhelper.ReplayHelper, "fork", classmethod(fork_here))
    options = dict(seeds=3, trials=True, precision=True, timeout_s=240.0)
    with_helper = evaluate_in_process(counting_task(tmp_path / "a", "", "n = 0"), **options)
    assert len(helpers) == 1 and helpers[0].replays >= 2
    assert helpers[0].pid == 0  # closed with the run
    monkeypatch.setattr(replayhelper.ReplayHelper, "fork", classmethod(lambda cls: None))
    without = evaluate_in_process(counting_task(tmp_path / "b", "", "n = 0"), **options)
    assert with_helper.result.status == without.result.status == "passed"
    assert _verdict(with_helper) == _verdict(without)


def _processes_naming(text: str, wait_s: float) -> list[int]:
    """Processes whose command line names `text`, after waiting up to `wait_s` for them to end."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)

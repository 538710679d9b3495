"""The parent side of a run with real child processes: events, bounded logs, back-pressure,
exit reasons in words, cancel, timeout, limits, concurrency."""

from __future__ import annotations

import os
import queue
import threading
import time

import pytest

from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ProgressEvent, ResultEvent
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import RunHandle, start_worker

ENTRY = "tests.executor.entries:"


def job(name: str, payload: dict | None = None, allow_subprocess: bool = False, **limits) -> WorkerJob:
    return WorkerJob(entry=ENTRY + name, payload=payload or {}, allow_subprocess=allow_subprocess,
                     limits=Limits(**{"timeout_s": 30, "memory_mb": 2048, **limits}))


def test_events_arrive_in_order_and_the_result_comes_last(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    handle = start_worker(job("hello", {"n": 3}))
    events = list(handle.events())
    assert isinstance(events[-1], ResultEvent)
    assert sum(isinstance(e, ResultEvent) for e in events) == 1
    assert [e.done for e in events if isinstance(e, ProgressEvent)] == [1, 2, 3]
    phases = [(e.name, e.state) for e in events if isinstance(e, PhaseEvent)]
    assert phases == [("load", "start"), ("load", "end")]
    logs = {(e.stream, e.text) for e in events if isinstance(e, LogEvent)}
    assert ("stdout", "hello on stdout") in logs and ("stderr", "hello on stderr") in logs
    result = handle.result
    assert result["status"] == "passed" and handle.status == "passed"
    assert result["aws"] is None, "credentials must not reach the worker"
    assert result["home"].startswith(os.path.dirname(result["cwd"])), "HOME points into the scratch folder"
    assert not os.path.exists(result["cwd"]), "the scratch folder is removed after the run"
    assert handle.exit.kind == "ok"
    assert handle.startup_s is not None and 0 < handle.startup_s < 10


def test_fifty_megabytes_in_one_burst_keep_the_log_bounded():
    handle = start_worker(job("burst", {"mb": 50}))
    start = time.perf_counter()
    events = list(handle.events())
    elapsed = time.perf_counter() - start
    stdout = [e for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    markers = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "executor"]
    assert len(stdout) <= 2000 + 200, "head plus tail only"
    assert any("further output is elided" in m for m in markers)
    elided = [m for m in markers if "elided …" in m]
    assert elided and "MiB" in elided[0]
    assert stdout[-1].text == "last line", "the newest line is kept"
    assert handle.outcome.stream_bytes["stdout"] > 50 * 1024 * 1024
    assert handle.status == "passed"
    assert elapsed < 30


def test_the_parent_stays_responsive_during_a_burst():
    # The status properties never wait for the consumer: they answer while another thread holds the
    # consumer's lock mid-burst (how fast they answer is a benchmark's business, never asserted here).
    handle = start_worker(job("burst", {"mb": 50}))
    answers: list[tuple] = []
    with handle._consumer_lock:  # noqa: SLF001 - a drain in progress, held for as long as the test likes
        reader = threading.Thread(
            target=lambda: answers.append((handle.status, handle.running, handle.progress, len(handle.log))),
            daemon=True)
        reader.start()
        reader.join(timeout=60)  # a deadline for a failure only: a blocked read never returns
        assert answers, "a status read waited for the consumer"
    for _ in handle.events():
        pass
    assert handle.status == "passed" or handle.exit is not None


def test_a_slow_consumer_applies_back_pressure_without_losing_events():
    n = 20000
    handle = RunHandle(job("many_events", {"n": n}), queue_batches=2).start()
    seen = 0
    for ev in handle.events():
        if isinstance(ev, LogEvent) and ev.text.startswith("event "):
            assert ev.text == f"event {seen}"
            seen += 1
            assert handle._queue.qsize() <= 2  # noqa: SLF001 - the bound is the point of the test
            if seen % 2000 == 0:
                time.sleep(0.02)
    assert seen == n
    assert handle.result["n"] == n


def test_text_that_is_not_an_event_becomes_a_log_line():
    handle = start_worker(job("stray_text"))
    events = list(handle.events())
    texts = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "worker"]
    assert "this is not json" in texts
    assert '{"event": "nonsense"}' in texts
    assert "{broken json" in texts
    assert handle.status == "passed"


def test_timeout_stops_the_worker_and_says_so():
    handle = start_worker(job("sleep", {"seconds": 60}, timeout_s=1.5, grace_s=1.0))
    start = time.perf_counter()
    events = list(handle.events())
    assert time.perf_counter() - start < 10
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert errors[-1].kind == "timeout"
    assert "timed out after 1.5 s" in errors[-1].message
    assert handle.status == "timeout"


def test_cancel_mid_run_from_another_thread():
    handle = start_worker(job("sleep", {"seconds": 60}))
    events = []
    for ev in handle.events():
        events.append(ev)
        if isinstance(ev, PhaseEvent) and ev.state == "start":
            threading.Timer(0.2, handle.cancel).start()
    assert handle.status == "cancelled"
    assert any(isinstance(e, ErrorEvent) and e.kind == "cancelled" for e in events)
    assert handle.exit.kind == "cancelled"


def test_an_entry_that_raises_is_reported_with_its_traceback():
    handle = start_worker(job("raise_error"))
    events = list(handle.events())
    err = next(e for e in events if isinstance(e, ErrorEvent))
    assert err.kind == "internal" and "the entry itself is broken" in err.message
    assert "raise_error" in err.traceback
    assert handle.status == "internal"


def test_a_process_left_behind_does_not_hold_the_run_open():
    handle = start_worker(job("straggler", allow_subprocess=True))
    start = time.perf_counter()
    handle.wait(timeout=20)
    assert handle.done
    assert time.perf_counter() - start < 10
    assert handle.status == "passed"


def test_two_runs_at_once_stay_apart():
    a = start_worker(job("hello", {"n": 2}))
    b = start_worker(job("hello", {"n": 5}))
    results = {}

    def wait(name, h):
        results[name] = h.wait(timeout=30)

    threads = [threading.Thread(target=wait, args=("a", a)), threading.Thread(target=wait, args=("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a.progress == (2, 2) and b.progress == (5, 5)
    assert results["a"]["cwd"] != results["b"]["cwd"]
    assert a.run_id != b.run_id


def test_wait_with_a_timeout_returns_none_while_the_run_goes_on():
    handle = start_worker(job("sleep", {"seconds": 60}))
    assert handle.wait(timeout=0.5) is None
    assert handle.running
    handle.cancel()
    handle.wait(timeout=20)
    assert handle.status == "cancelled"


def test_a_workspace_that_cannot_be_copied_is_reported_not_raised(tmp_path):
    missing = tmp_path / "does-not-exist"
    handle = start_worker(WorkerJob(entry=ENTRY + "hello", workspace=missing))
    events = list(handle.events())
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].kind == "start-failed" and "does-not-exist" in events[-1].message
    assert handle.status == "start-failed"


def test_on_event_callback_gets_every_event_and_survives_its_own_errors():
    got = []

    def callback(ev):
        got.append(ev)
        if isinstance(ev, ProgressEvent):
            raise ValueError("a buggy callback")

    handle = start_worker(job("hello", {"n": 2}), on_event=callback)
    deadline = time.time() + 30
    while not handle.done and time.time() < deadline:
        time.sleep(0.05)
    assert handle.done
    assert isinstance(got[-1], ResultEvent)
    assert any("event callback failed" in e.text for e in handle.log.entries())


def test_events_times_out_waiting_when_asked():
    handle = start_worker(job("sleep", {"seconds": 60}))
    with pytest.raises(queue.Empty):
        for _ in handle.events(timeout=0.3):
            pass
    handle.close()


def test_a_consumer_may_stop_early_and_another_finish_the_stream():
    handle = start_worker(job("hello", {"n": 3}))
    first = handle.events()
    next(first)  # a suspended iterator still referenced (e.g. a cancelled UI worker)
    assert handle.wait(timeout=30)["status"] == "passed"
    assert list(first) == []


def test_done_only_after_the_callback_had_the_last_event():
    got = []
    handle = start_worker(job("hello", {"n": 1}), on_event=lambda ev: (time.sleep(0.05), got.append(ev)))
    deadline = time.time() + 30
    while not handle.done and time.time() < deadline:
        time.sleep(0.001)
    assert handle.done and isinstance(got[-1], ResultEvent)

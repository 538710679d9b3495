"""RunHandle.close() while another thread is blocked in events() (a real worker process): the
iteration ends. The I/O thread of a closed handle delivers nothing more, not even the end, so the
blocked consumer (the spare kernel process's thread, whose child the evaluator kills and closes)
waited for ever, and the evaluator's stop() with it."""

from __future__ import annotations

import threading
import time

from nkitui.executor.events import LogEvent
from nkitui.executor.job import WorkerJob
from nkitui.executor.limits import Limits
from nkitui.executor.runner import start_worker


def test_close_ends_an_events_iteration_blocked_on_another_thread():
    handle = start_worker(WorkerJob(entry="tests.executor.entries:sleep", payload={"seconds": 60},
                                    limits=Limits(timeout_s=120, memory_mb=2048)))
    seen: list[object] = []
    ended = threading.Event()

    def consume() -> None:
        for event in handle.events():
            seen.append(event)
        ended.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    deadline = time.monotonic() + 60
    while not any(isinstance(e, LogEvent) and "going to sleep" in e.text for e in seen):
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    try:
        handle.close()
        assert ended.wait(20), "events() on another thread went on waiting after close()"
    finally:
        handle.kill()

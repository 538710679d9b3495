"""The trusted evaluator's session (nkitui.evaluate.pipeline.session) run in the test process.

The session is headless: it needs a WorkerContext (events on a descriptor, a scratch copy of the task)
and starts its untrusted children itself. Here the context's descriptor is a pipe read by a thread of
the test, the scratch copy is made as the runner makes it, and the children are the real confined
processes (started as new interpreters: a test process has threads, so it never forks them). What
is skipped is only the evaluator's own process and the parent side of start_evaluation (git state,
file hashes, the evidence re-check, the store); tests of those run through start_evaluation.

    run = evaluate_in_process(task_dir, seeds=1, trials=True)
    run.session.result / run.session.checks / run.events / run.exit_code
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkitui.common.codec import encode
from nkitui.evaluate.pipeline.session import EvaluationSession
from nkitui.executor.context import WorkerContext
from nkitui.executor.events import Event, decode_line
from nkitui.executor.workspace import make_scratch
from tests.helpers.evaluation import quick_request


@dataclass
class InProcessRun:
    session: EvaluationSession
    exit_code: int
    events: list[Event] = field(default_factory=list)

    @property
    def result(self) -> Any:
        return self.session.result

    def stdout(self) -> list[str]:
        """The kernel's (and the reference's) own prints, in order."""
        return [e.text for e in self.events if getattr(e, "stream", None) == "stdout"]


def evaluate_in_process(task_dir: Path, **options: Any) -> InProcessRun:
    """One evaluation of `task_dir` by the session in this process; `options` as for quick_request."""
    request = quick_request(task_dir, **options)
    scratch = make_scratch(task_dir)
    read_fd, write_fd = os.pipe()
    chunks: list[bytes] = []

    def drain() -> None:
        while data := os.read(read_fd, 1 << 16):
            chunks.append(data)

    reader = threading.Thread(target=drain, name="in-process evaluator events", daemon=True)
    reader.start()
    try:
        limits = {"timeout_s": request.timeout_s or 60.0, "memory_mb": request.memory_mb}
        ctx = WorkerContext(events_fd=write_fd, run_id="in-process", scratch=scratch.root, workspace=scratch.work,
                            limits=limits)
        session = EvaluationSession({"options": encode(request.options), "python_path": []}, ctx)
        code = session.run()
    finally:
        os.close(write_fd)
        reader.join(timeout=30)
        os.close(read_fd)
        scratch.remove()
    events = [decode_line(line) for line in b"".join(chunks).splitlines() if line.strip()]
    return InProcessRun(session, code, events)

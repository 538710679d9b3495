"""What code running inside the worker uses to talk to the parent: events, phases, progress.

Events are written with os.write on a dedicated descriptor (the worker's original stdout), so the
kernel's own prints (now on a separate pipe) never interleave with them. A write blocks while the
parent's queue is full: that is the back-pressure. Stdlib only.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from nkitui.executor.events import ErrorEvent, Event, LogEvent, PhaseEvent, ProgressEvent, ResultEvent, encode


class WorkerCancelled(BaseException):
    """SIGTERM arrived: the run was cancelled or timed out (a BaseException, so `except Exception`
    in a kernel cannot swallow it). Defined here, not in the worker module: that one runs as
    __main__, and a phase must recognise the class to say in words why it stopped."""


class PhaseFailed(Exception):
    """Raised by code inside `ctx.phase(...)` to end the phase as failed with a message (the error
    event has already been emitted, or is carried here)."""

    def __init__(self, error: ErrorEvent):
        super().__init__(error.message)
        self.error = error


@dataclass
class PhaseRecord:
    name: str
    status: str  # "ok" | "failed" | "skipped"
    duration_s: float
    detail: str = ""


@dataclass
class WorkerContext:
    events_fd: int
    run_id: str
    scratch: Path
    workspace: Path
    limits: dict[str, Any] = field(default_factory=dict)
    phases: list[PhaseRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    confinement: Any = None  # the ConfinementReport of nkitui.executor.confine.enter (None: not confined)
    # one event at a time on the descriptor: the evaluator drives its reference process from a thread
    # while its main thread reports phases (a line longer than PIPE_BUF is not written atomically);
    # reentrant, so a signal handler that reports in the middle of an event cannot deadlock
    _emitting: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    # -- events ----------------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        data = encode(event)
        view = memoryview(data)
        with self._emitting:
            while view:
                written = os.write(self.events_fd, view)
                view = view[written:]

    def log(self, text: str, level: str = "info") -> None:
        for line in str(text).splitlines() or [""]:
            self.emit(LogEvent(stream="worker", text=line, level=level))

    def progress(self, done: int, total: int, label: str = "") -> None:
        self.emit(ProgressEvent(done=done, total=total, label=label))

    def error(self, error: ErrorEvent) -> None:
        self.emit(error)

    def result(self, result: dict[str, Any]) -> None:
        self.emit(ResultEvent(result=result))

    @contextmanager
    def phase(self, name: str) -> Iterator["PhaseHandle"]:
        """Time a phase and report its start and end. Inside, `handle.skip(reason)` marks it skipped
        and `handle.detail` adds a note; an exception marks it failed and propagates."""
        handle = PhaseHandle(name)
        self.emit(PhaseEvent(name=name, state="start"))
        start = time.perf_counter()
        try:
            yield handle
        except BaseException as exc:
            duration = time.perf_counter() - start
            if isinstance(exc, WorkerCancelled):
                detail = "stopped before it finished: the worker received SIGTERM (the run was cancelled or timed out)"
            elif isinstance(exc, MemoryError):
                detail = handle.detail or "ran out of memory"
            else:
                detail = handle.detail or (exc.error.message if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}")
            self._end(name, "failed", duration, detail)
            raise
        duration = time.perf_counter() - start
        self._end(name, handle.status, duration, handle.detail)

    def _end(self, name: str, status: str, duration: float, detail: str) -> None:
        self.phases.append(PhaseRecord(name, status, round(duration, 6), detail))
        self.emit(PhaseEvent(name=name, state="end", status=status, duration_s=round(duration, 6), detail=detail))

    # -- paths -----------------------------------------------------------------------------------
    def in_workspace(self, path: str | os.PathLike[str] | None) -> str | None:
        """The task-relative form of `path` when it lies inside the workspace copy, else None."""
        if not path:
            return None
        p = os.fspath(path)
        root = str(self.workspace)
        for prefix in (root, os.path.realpath(root)):
            if p.startswith(prefix + os.sep):
                return p[len(prefix) + 1:]
        return None

    def task_relative(self, path: str | os.PathLike[str] | None) -> str | None:
        """A path inside the workspace copy, shown relative to the task (the auditor's view);
        other paths unchanged."""
        if not path:
            return None
        return self.in_workspace(path) or os.fspath(path)

    def kernel_location(self, exc: BaseException) -> tuple[str | None, int | None]:
        """The innermost traceback frame inside the task's files: (task-relative file, line)."""
        file = line = None
        for frame in traceback.extract_tb(exc.__traceback__):
            rel = self.in_workspace(frame.filename)
            if rel is not None:
                file, line = rel, frame.lineno
        return file, line

    def scrub(self, text: str) -> str:
        """`text` with the workspace copy's absolute path removed, so paths read task-relative."""
        root, real_root = str(self.workspace), os.path.realpath(str(self.workspace))
        return text.replace(real_root + os.sep, "").replace(root + os.sep, "")

    def format_traceback(self, exc: BaseException) -> str:
        return self.scrub("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


@dataclass
class PhaseHandle:
    name: str
    status: str = "ok"
    detail: str = ""

    def skip(self, reason: str) -> None:
        self.status = "skipped"
        self.detail = reason

    def fail(self, detail: str) -> None:
        """The phase ran to its end but a check it decides failed: it ends "failed", so a log filtered
        to warnings and errors shows it."""
        self.status = "failed"
        self.detail = detail

"""The interface every batch executor (the local pool, Ray) implements, and what it reports.

An executor runs evaluations of valid tasks and reports, from any of its threads, when a task
starts, which phase it is in, and how it ended. It never stores or prints anything: the runner
(nkitui.batch.runner) turns what it reports into records, the run store, the JSONL and events, so
both executors land results in the same places, the same way.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Protocol

from nkitui.batch.options import BatchOptions
from nkitui.batch.tasks import BatchTask
from nkitui.evaluate.run.result import RunResult


@dataclass
class JobOutcome:
    """How one task's evaluation ended: a RunResult, or (when none could be made) an error."""

    result: RunResult | None = None
    status: str = ""  # when result is None: invalid | crashed | cancelled | internal-error
    error: dict[str, Any] | None = None  # kind, message (when result is None)
    problems: list[str] = field(default_factory=list)  # invalid: what and where
    attempts: int = 1
    node: str = ""
    notes: list[str] = field(default_factory=list)


class Reporter(Protocol):
    def started(self, key: str, attempt: int, node: str) -> None: ...

    def phase(self, key: str, phase: str) -> None: ...

    def finished(self, key: str, outcome: JobOutcome) -> None: ...


class Executor(Protocol):
    name: str  # "local" | "ray"

    @property
    def workers(self) -> int: ...  # evaluations at once

    @property
    def workers_reason(self) -> str: ...  # in words

    def run(self, jobs: list[BatchTask], options: BatchOptions, reporter: Reporter) -> None:
        """Run every job (blocks); report each one's end exactly once, unless cancelled before it started."""
        ...

    def cancel(self) -> None:
        """From any thread: stop starting jobs, stop the running ones (their processes killed)."""
        ...


def this_node() -> str:
    return socket.gethostname()

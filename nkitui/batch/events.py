"""What a running batch tells its consumer (the CLI's progress bar, the queue screen), in order:

    BatchStarted      once: every task's key and description, what will run, what was resumed
    TaskStarted       a task's evaluation began (again, with attempt 2, after a Ray node died)
    TaskPhase         a task's evaluation entered a phase (load, compile, run, ...)
    TaskFinished      a task's record (also for resumed and invalid tasks, which never start)
    BatchFinished     once, last: the summary (also after a cancel)

Events are frozen dataclasses; they are made in the batch's threads and delivered in order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Union

from nkitui.batch.record import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASSED, TaskRecord


@dataclass(frozen=True)
class BatchStarted:
    root: str
    tasks: tuple[tuple[str, dict[str, Any]], ...]  # (key, BatchTask.describe()) in run order
    to_run: int
    executor: str  # local | ray
    workers: int  # evaluations at once (Ray: the cluster's CPUs as the executor sees them)
    workers_reason: str
    options_key: str


@dataclass(frozen=True)
class TaskStarted:
    key: str
    attempt: int = 1
    node: str = ""


@dataclass(frozen=True)
class TaskPhase:
    key: str
    phase: str


@dataclass(frozen=True)
class TaskFinished:
    record: TaskRecord


@dataclass
class BatchSummary:
    total: int = 0
    counts: Counter[str] = field(default_factory=Counter)  # status -> tasks (resumed included)
    resumed: int = 0
    not_run: int = 0  # left in the queue by a cancel
    cancelled: bool = False
    wall_s: float = 0.0
    executor: str = "local"
    workers: int = 0
    notes: list[str] = field(default_factory=list)
    error: str = ""  # the batch itself failed (not a task): it stopped early

    @property
    def exit_code(self) -> int:
        """0 every task passed, 2 any was invalid, 1 any other failure; 130 after a cancel."""
        if self.cancelled:
            return EXIT_INTERRUPTED
        if self.counts.get("invalid"):
            return EXIT_INVALID
        if any(status != "passed" for status in self.counts) or self.not_run or self.error:
            return EXIT_FAILED
        return EXIT_PASSED

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "counts": dict(self.counts), "resumed": self.resumed, "not_run": self.not_run,
                "cancelled": self.cancelled, "wall_s": round(self.wall_s, 3), "executor": self.executor,
                "workers": self.workers, "exit_code": self.exit_code, "notes": list(self.notes), "error": self.error}


@dataclass(frozen=True)
class BatchFinished:
    summary: BatchSummary


BatchEvent = Union[BatchStarted, TaskStarted, TaskPhase, TaskFinished, BatchFinished]

"""One task's line in a batch: what `--jsonl` writes, the summary table shows and resume matches.

The schema is stable (docs/batch.md lists every field); new fields may be added, none is renamed
or removed without a new `schema_version`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from nkitui import __version__
from nkitui.evaluate.run.result import RunResult

SCHEMA = "nkitui.batch-task"
SCHEMA_VERSION = 1
SEVERITIES = ("high", "medium", "low", "info")
# Every state a task can be in during a batch; the finished ones are RunResult statuses.
PENDING_STATES = ("queued", "running")
EXIT_PASSED, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class TaskRecord:
    key: str  # task folder relative to the batch folder (its name when the batch folder is the task)
    path: str  # absolute task folder on the machine that drove the batch
    task_id: str
    status: str  # passed | failed | invalid | timeout | cancelled | crashed | memory-limit | cpu-limit | killed | internal-error
    title: str = ""
    op: str | None = None
    namespace: str | None = None
    target: str | None = None
    commit: str | None = None  # None: unknown (see commit_note)
    commit_note: str = ""
    dirty: bool | None = None
    run_id: str | None = None
    run_path: str | None = None  # where the run result is stored
    resumed: bool = False  # an earlier result for the same commit, version and options was reused
    backend: str | None = None
    executor: str = "local"  # local | ray
    node: str = ""  # host that ran it
    attempts: int = 0  # 0: never started (invalid before a run, or resumed)
    duration_s: float | None = None  # wall time of the evaluation
    checks_passed: int = 0
    checks_total: int = 0
    failed_checks: list[str] = field(default_factory=list)
    findings: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SEVERITIES, 0))
    latency_us: float | None = None
    latency_kind: str | None = None  # estimated | measured
    error: dict[str, Any] | None = None  # kind, message
    problems: list[str] = field(default_factory=list)  # why the task is invalid, file and field first
    nkitui_version: str = __version__
    options_key: str = ""
    file_hashes: dict[str, str] = field(default_factory=dict)
    finished_at: str = ""

    @property
    def exit_code(self) -> int:
        if self.status == "passed":
            return EXIT_PASSED
        if self.status == "invalid":
            return EXIT_INVALID
        return EXIT_FAILED

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **asdict(self), "exit_code": self.exit_code}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskRecord":
        if d.get("schema") != SCHEMA or d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not a {SCHEMA} v{SCHEMA_VERSION} record")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def finding_counts(findings: list[Any]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        sev = f.get("severity") if isinstance(f, dict) else getattr(f, "severity", None)
        if sev in counts:
            counts[sev] += 1
    return counts


def record_from_result(result: RunResult, base: dict[str, Any]) -> TaskRecord:
    """The record of a finished evaluation; `base`: key, path and the task's description."""
    timing = result.timing
    median = timing.median_us if timing is not None else None
    error = None
    if result.error:
        error = {"kind": result.error.kind, "message": result.error.message}
    problems = []
    if result.status == "invalid" and result.error:
        e = result.error
        where = f"{e.location}: " if e.location else ""
        problems.append(f"{where}error: {e.message}")
    return TaskRecord(
        **base, status=result.status, run_id=result.run_id, backend=result.backend, commit=result.task_commit,
        dirty=result.task_dirty, duration_s=result.duration_s,
        checks_passed=sum(1 for c in result.checks if c.passed),
        checks_total=sum(1 for c in result.checks if c.passed is not None),
        failed_checks=[c.id for c in result.failed_checks()], findings=finding_counts(result.findings),
        latency_us=round(float(median), 3) if isinstance(median, (int, float)) else None,
        latency_kind=timing.kind if timing is not None and isinstance(median, (int, float)) else None,
        error=error, problems=problems, nkitui_version=str(result.versions.get("nkitui") or __version__),
        file_hashes=dict(result.file_hashes), finished_at=result.finished_at,
    )

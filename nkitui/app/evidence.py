"""What an auditor can attach to a rubric criterion as evidence, as the UI sees it (no Textual here).

Every focusable thing that can back a score (a finding, a source or diff line, a log line, a metric)
answers `evidence_at_cursor()` with one `Evidence`; the Rubric area turns it into the review
module's evidence link when it is attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

EvidenceKind = Literal["finding", "source", "diff", "log", "metric", "run"]


@dataclass(frozen=True)
class Evidence:
    kind: EvidenceKind
    label: str  # one line, shown in the evidence list
    file: str | None = None  # task-relative
    line: int | None = None
    end_line: int | None = None
    run_id: str | None = None
    rule: str | None = None  # finding rule id
    metric: str | None = None  # metric name
    value: str | None = None  # metric value or quoted log text
    revision: str | None = None  # diff: "<old>..<new>"
    data: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def location(self) -> str:
        return span_location(self.file or "", self.line, self.end_line) if self.file else ""


def span_location(file: str, start: int | None, end: int | None = None) -> str:
    """file:12, file:12-18 (a range), or the file alone: the review's ref format for lines."""
    if not start:
        return file
    return f"{file}:{start}-{end}" if end and end != start else f"{file}:{start}"

"""Validation problems: every problem names the file, the field and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal


@dataclass(frozen=True)
class Problem:
    file: str  # path as the user would type it (relative to the task dir where possible)
    field: str  # dotted field path, e.g. "inputs[1].dtype"; "" for whole-file problems
    message: str  # what is wrong
    fix: str  # how to fix it
    severity: Literal["error", "warning"] = "error"
    line: int | None = None  # 1-based, when known (TOML syntax errors, source files)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f" [{self.field}]"
        return f"{where}: {self.severity}: {self.message} — fix: {self.fix}"

    def to_dict(self) -> dict:
        return asdict(self)


class TaskError(Exception):
    """A task that cannot be used. Carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = [p for p in problems if p.severity == "error"] or list(problems)
        self.warnings = [p for p in problems if p.severity == "warning"]
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the task"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))

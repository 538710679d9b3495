"""Validation problems: every problem names the file, the field and the fix."""

from __future__ import annotations

from nkitui.common.problems import Problem

__all__ = ["Problem", "TaskError"]


class TaskError(Exception):
    """A task that cannot be used. Carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = [p for p in problems if p.severity == "error"] or list(problems)
        self.warnings = [p for p in problems if p.severity == "warning"]
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the task"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))

"""A validation problem: every problem names the file, the field (or line) and how to fix it.

Task manifests, review files, the app's config, keymap and themes all report problems in this one
shape (read by common/fields.py), so the command line and the app print them the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

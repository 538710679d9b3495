"""One finding: something an auditor should look at, with a paragraph they can paste.

Findings come from static analysis (analysis/), numerics checks (evaluate/) and the
performance model (perf/). The UI marks them in the gutter and links them as evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from collections.abc import Iterable
from typing import Any, Literal

Severity = Literal["high", "medium", "low", "info"]
Category = Literal["fidelity", "performance", "numerics", "integrity", "task"]

SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass(frozen=True)
class Finding:
    rule: str  # stable rule id, e.g. "NKI-PART-001"
    severity: Severity
    title: str  # one line
    message: str  # a paragraph an auditor can paste into feedback
    category: Category
    source: str  # "analysis" | "numerics" | "perf" | "executor" | "task"
    file: str | None = None  # relative to the task root
    line: int | None = None  # 1-based
    end_line: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def location(self) -> str:
        if self.file is None:
            return "-"
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.file or "", f.line or 0, f.rule))


def dedupe_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings in order, each (rule, file, line, title) once: the first report of a fact wins."""
    seen: set[tuple[Any, ...]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.rule, f.file, f.line, f.title)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out

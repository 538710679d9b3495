"""Turn the domain layers' results into what the widgets draw (no Textual here).

Called from worker threads; every function takes domain objects and returns plain view data.
"""

from __future__ import annotations

from typing import Any

from nkitui.app.widgets.source.rows import RolePair
from nkitui.common.findings import Finding
from nkitui.task import Task


def analysis_view(task: Task) -> tuple[list[Finding], list[RolePair], str, Any]:
    """(findings, role pairs, state line, report) from the static analysis of the task."""
    try:
        from nkitui.analysis import analyze_task  # type: ignore[attr-defined]
    except ImportError:
        return [], [], "static analysis unavailable", None
    report = analyze_task(task)
    pairs = [
        RolePair(role=p.role, cuda=(p.cuda_start, p.cuda_end), nki=(p.nki_start, p.nki_end),
                 note=getattr(p, "note", ""))
        for p in getattr(report, "alignment", [])
    ]
    state = f"{len(pairs)} role pairs" if pairs else "no CUDA↔NKI alignment found"
    return list(report.findings), pairs, state, report

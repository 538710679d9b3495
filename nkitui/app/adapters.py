"""Turn the domain layers' results into what the widgets draw (no Textual here).

Called from worker threads; every function takes domain objects and returns plain view data.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nkitui.app.evidence import Evidence
from nkitui.app.widgets.source.rows import RolePair
from nkitui.common.findings import Finding

if TYPE_CHECKING:
    from nkitui.task import Task


def analysis_view(task: Task) -> tuple[list[Finding], list[RolePair], str, Any]:
    """(findings, role pairs, state line, report) from the static analysis of the task."""
    from nkitui.analysis import analyze_task
    report = analyze_task(task)
    pairs = [role_pair(p) for p in report.alignment]
    state = f"{len(pairs)} role pairs" if pairs else "no CUDA↔NKI role pairs found"
    return list(report.findings), pairs, state, report


def role_pair(p) -> RolePair:
    """An analysis AlignmentPair as the Source view's RolePair."""
    return RolePair(
        role=p.role, title=p.title, cuda=tuple((r.start, r.end) for r in p.cuda),
        nki=tuple((r.start, r.end) for r in p.nki), cuda_label=p.cuda_label, nki_label=p.nki_label,
        note=p.note, match=p.match,
    )


def evidence_ref(ev: Evidence) -> str:
    """The review layer's `ref` for UI evidence (formats in docs/review-format.md)."""
    where = ev.location
    if ev.kind == "finding":
        return f"{ev.rule}@{where}" if where else (ev.rule or "finding")
    if ev.kind == "source":
        return where
    if ev.kind == "diff":
        return f"{ev.revision}:{where}" if ev.revision else where
    if ev.kind == "log":
        span = f"#L{ev.line}" if ev.line else ""
        return f"{ev.run_id or 'log'}{span}"
    if ev.kind == "metric":
        metric = f"{ev.metric}={ev.value}"
        return f"{ev.run_id}:{metric}" if ev.run_id else metric
    return ev.run_id or ev.label


def review_evidence(ev: Evidence, criterion: str | None):
    """A review Evidence link for `ev`, tied to `criterion` (None: the review as a whole)."""
    from nkitui.review import Evidence as ReviewEvidence

    excerpt = (ev.value if ev.kind in ("log", "diff") and ev.value else ev.label).strip()
    if len(excerpt) > 200:
        excerpt = excerpt[:199] + "…"
    return ReviewEvidence(kind=ev.kind, ref=evidence_ref(ev), excerpt=excerpt, criterion=criterion)


_LOCATION = re.compile(r"(?:^[^@]+@)?(?:[^:]*\.\.[^:]*:)?(?P<file>[^:#@]+):(?P<line>\d+)(?:-\d+)?$")


def parse_location(ref: str) -> tuple[str, int] | None:
    """(file, first line) of a finding, source or diff evidence ref, or None when it names no line."""
    m = _LOCATION.search(ref)
    return (m.group("file"), int(m.group("line"))) if m else None


def task_speed_of_light(task: Task, target: str) -> tuple[Any, str]:
    """The task's speed of light on `target` before any run, from its op, shapes and dtypes.

    Returns (perf SpeedOfLight, "") or (None, why there is none, saying how to get one).
    """
    if not task.op:
        return None, ("task.toml declares no `op`, so there is no speed of light before a run "
                      "(set op = \"matmul\", \"elementwise\", ... to get one)")
    from nkitui.executor.backends.costmodel import task_work
    from nkitui.perf.roofline import speed_of_light_for

    work = task_work(task)
    if work is None:
        return None, f"no speed-of-light formula fits op {task.op!r} with this task's inputs and outputs"
    try:
        return speed_of_light_for(work, target), ""
    except ValueError as exc:
        return None, f"no speed of light: {exc}"


def task_preview(path: Path) -> dict[str, str]:
    """id, title and target to show in the header before the task is loaded (and validated).

    Read straight from task.toml without validation: the loaded Task replaces it moments later.
    """
    import tomllib

    manifest = path if path.is_file() else path / "task.toml"
    folder = manifest.parent
    data: dict[str, Any] = {}
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        data = {}

    def text(key: str, default: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) and value.strip() else default

    return {"id": text("id", folder.resolve().name), "title": text("title", "loading…"),
            "target": text("target", "trn2")}

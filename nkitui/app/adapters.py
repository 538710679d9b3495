"""Turn the domain layers' results into what the widgets draw (no Textual here).

Called from worker threads; every function takes domain objects and returns plain view data.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nkitui.app.evidence import Evidence
from nkitui.common.fields import FieldReader
from nkitui.common.names import DEFAULT_TARGET
from nkitui.app.widgets.source.rows import RolePair

if TYPE_CHECKING:
    from nkitui.analysis import AlignmentPair


def role_pairs(alignment: Iterable[AlignmentPair]) -> tuple[list[RolePair], str]:
    """The analysis's CUDA<->NKI alignment as the Source view's role pairs, and the state line under it."""
    pairs = [role_pair(p) for p in alignment]
    return pairs, (f"{len(pairs)} role pairs" if pairs else "no CUDA↔NKI role pairs found")


def role_pair(p: AlignmentPair) -> RolePair:
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


def task_preview(path: Path) -> dict[str, str]:
    """id, title and target to show in the header before the task is loaded (and validated).

    Read straight from task.toml without validation: the loaded Task replaces it moments later.
    """
    manifest = path if path.is_file() else path / "task.toml"
    folder = manifest.parent
    reader = FieldReader(str(manifest), "docs/task-format.md")  # its problems wait for the real load
    try:
        data = reader.parse_bytes(manifest.read_bytes()) or {}
    except OSError:
        data = {}

    def text(key: str, default: str) -> str:
        return reader.str_(data, key, key, strip=True) or default

    return {"id": text("id", folder.resolve().name), "title": text("title", "loading…"),
            "target": text("target", DEFAULT_TARGET)}

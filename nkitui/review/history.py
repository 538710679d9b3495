"""A task's reviews over time: newest first, outdated markers, blind mode, and review-to-review diffs.

A review is *outdated* when a file it judged has changed since (its sha256 differs or it is gone),
or when the task now has judged files the review never saw — the file-based form of Gerrit's
sticky votes. Blind mode hides other auditors' scores, comments and verdicts until the viewer has
submitted a review of the task's current version.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nkitui.review.record import LineComment, ReviewRecord
from nkitui.review.rubric import Rubric, ScoreValue
from nkitui.review.rubric_cache import RubricCache
from nkitui.review.scan import LoadedReview, scan_task
from nkitui.task.problems import Problem

ChangeKind = Literal["modified", "deleted", "added"]


@dataclass(frozen=True)
class FileChange:
    file: str
    change: ChangeKind

    def __str__(self) -> str:
        return f"{self.file} ({self.change})"


@dataclass(frozen=True)
class HistoryEntry:
    review: LoadedReview
    record: ReviewRecord  # redacted when hidden
    changes: tuple[FileChange, ...] = ()
    hidden: bool = False  # blind mode: scores, comments and verdict withheld
    weighted_score: float | None = None  # 0..1, None when the rubric is unknown or hidden

    @property
    def outdated(self) -> bool:
        return bool(self.changes)

    @property
    def relpath(self) -> str:
        return self.review.relpath

    def to_dict(self) -> dict[str, Any]:
        d = self.record.to_dict()
        d.update(path=self.relpath, outdated=self.outdated, changed_files=[dataclasses.asdict(c) for c in self.changes],
                 hidden=self.hidden, weighted_score=self.weighted_score)
        return d


@dataclass
class TaskHistory:
    task_root: Path
    task_id: str | None
    entries: list[HistoryEntry] = field(default_factory=list)  # newest first
    problems: list[Problem] = field(default_factory=list)  # corrupt files skipped, task not loadable...
    blind: bool = False
    viewer: str | None = None
    viewer_reviewed_current: bool = False

    def find(self, ref: str) -> HistoryEntry:
        """An entry by review id, unique id prefix, or path (as shown); KeyError says what matched."""
        exact = [e for e in self.entries if ref in (e.record.id, e.relpath, str(e.review.path))]
        if len(exact) == 1:
            return exact[0]
        matches = [e for e in self.entries if e.record.id.startswith(ref) or e.relpath.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise KeyError(f"no review {ref!r} in {self.task_root} (see `nkitui history {self.task_root}`)")
        raise KeyError(f"{ref!r} matches {len(matches)} reviews: {', '.join(e.record.id for e in matches)}; give more of the id")


def sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def file_changes(record: ReviewRecord, task_root: Path, current_judged: dict[str, str] | None = None,
                 cache: dict[str, str | None] | None = None) -> list[FileChange]:
    """What changed in the task since `record` judged it. `current_judged` (task.file_hashes()) adds
    files that are judged now but were not then; without it only the recorded files are checked."""
    cache = {} if cache is None else cache
    changes: list[FileChange] = []
    for rel, digest in sorted(record.task.files.items()):
        now: str | None
        if current_judged is not None and rel in current_judged:
            now = current_judged[rel]
        else:
            if rel not in cache:
                cache[rel] = sha256_file(Path(task_root) / rel)
            now = cache[rel]
        if now is None:
            changes.append(FileChange(rel, "deleted"))
        elif now != digest:
            changes.append(FileChange(rel, "modified"))
    if current_judged is not None:
        changes += [FileChange(rel, "added") for rel in sorted(current_judged) if rel not in record.task.files]
    return changes


def redact(record: ReviewRecord) -> ReviewRecord:
    """A copy that keeps who/when/which version but withholds every judgement."""
    return dataclasses.replace(record, verdict="hidden", summary="", scores={}, comments=[], evidence=[], runs=[])


def task_history(task_root: Path, *, task: Any = None, blind: bool = False, viewer: str | None = None,
                 rubrics: RubricCache | None = None) -> TaskHistory:
    """Every review of the task at `task_root`, newest first, with outdated markers.

    `task` (a loaded Task) is loaded from task_root when not given; if it cannot be loaded only the
    recorded files are compared. In blind mode `viewer` (an auditor slug) sees others' reviews only
    once they have a review that is not outdated.
    """
    root = Path(task_root)
    history = TaskHistory(task_root=root, task_id=None, blind=blind, viewer=viewer)
    if task is None:
        from nkitui.task import TaskError, load_task

        try:
            task = load_task(root)
        except TaskError as exc:
            first = exc.problems[0] if exc.problems else None
            history.problems.append(Problem(
                first.file if first else str(root), first.field if first else "",
                "the task cannot be loaded, so only the files each review recorded are checked for changes",
                f"fix the task ({first.message if first else 'see nkitui task validate'})", "warning"))
    current = None
    if task is not None:
        history.task_id = task.id
        try:
            current = task.file_hashes()
        except OSError:
            current = None
    scan = scan_task(root)
    history.problems.extend(scan.problems)
    rubrics = rubrics or RubricCache()
    cache: dict[str, str | None] = {}
    raw = []
    for loaded in scan.reviews:
        changes = tuple(file_changes(loaded.record, root, current, cache))
        raw.append((loaded, changes))
    raw.sort(key=lambda item: (item[0].record.submitted_at, item[0].record.id), reverse=True)
    if viewer is not None:
        history.viewer_reviewed_current = any(l.record.auditor == viewer and not ch for l, ch in raw)
    for loaded, changes in raw:
        hide = blind and loaded.record.auditor != viewer and not history.viewer_reviewed_current
        record = redact(loaded.record) if hide else loaded.record
        rubric = None if hide else rubrics.get(root, record.rubric_id)
        score = rubric.weighted_score(record.score_values) if rubric else None
        history.entries.append(HistoryEntry(review=loaded, record=record, changes=changes, hidden=hide, weighted_score=score))
    return history


# -- diff between two reviews ----------------------------------------------------------------------

@dataclass(frozen=True)
class CriterionDiff:
    criterion: str
    title: str
    before: ScoreValue | None
    after: ScoreValue | None
    delta: float | None  # after - before on the scale's order (None when either is unscored or unordered)
    before_comment: str
    after_comment: str

    @property
    def score_changed(self) -> bool:
        return self.before != self.after

    @property
    def comment_changed(self) -> bool:
        return self.before_comment.strip() != self.after_comment.strip()


@dataclass(frozen=True)
class ReviewDiff:
    before: ReviewRecord
    after: ReviewRecord
    criteria: tuple[CriterionDiff, ...]
    files: tuple[FileChange, ...]  # judged files that differ between the two reviews' pins
    comments_added: tuple[LineComment, ...]
    comments_removed: tuple[LineComment, ...]

    @property
    def verdict_changed(self) -> bool:
        return self.before.verdict != self.after.verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before.id, "after": self.after.id,
            "verdict": {"before": self.before.verdict, "after": self.after.verdict},
            "rubric": {"before": f"{self.before.rubric_id} v{self.before.rubric_version}",
                       "after": f"{self.after.rubric_id} v{self.after.rubric_version}"},
            "criteria": [dataclasses.asdict(c) for c in self.criteria],
            "files": [dataclasses.asdict(f) for f in self.files],
            "comments_added": [dataclasses.asdict(c) for c in self.comments_added],
            "comments_removed": [dataclasses.asdict(c) for c in self.comments_removed],
        }


def diff_reviews(before: ReviewRecord, after: ReviewRecord, rubric: Rubric | None = None) -> ReviewDiff:
    """Per-criterion score and comment changes from `before` to `after` (any two reviews of a task)."""
    order = list(rubric.criterion_ids) if rubric else []
    order += [c for c in [*before.scores, *after.scores] if c not in order]
    criteria = []
    for cid in order:
        a, b = before.scores.get(cid), after.scores.get(cid)
        va, vb = (a.value if a else None), (b.value if b else None)
        crit = rubric.criterion(cid) if rubric else None
        delta = None
        if va is not None and vb is not None:
            if crit is not None and crit.scale.kind != "pass_fail" and crit.scale.check(va) is None and crit.scale.check(vb) is None:
                delta = crit.scale.ordinal(vb) - crit.scale.ordinal(va)
            elif isinstance(va, (int, float)) and isinstance(vb, (int, float)):
                delta = float(vb) - float(va)
        criteria.append(CriterionDiff(cid, crit.title if crit else cid, va, vb, delta,
                                      a.comment if a else "", b.comment if b else ""))
    files: list[FileChange] = []
    for rel in sorted(set(before.task.files) | set(after.task.files)):
        x, y = before.task.files.get(rel), after.task.files.get(rel)
        if x is None:
            files.append(FileChange(rel, "added"))
        elif y is None:
            files.append(FileChange(rel, "deleted"))
        elif x != y:
            files.append(FileChange(rel, "modified"))

    def key(c: LineComment) -> tuple[Any, ...]:
        return (c.file, c.start, c.end, c.text.strip(), c.criterion)

    before_keys = {key(c) for c in before.comments}
    after_keys = {key(c) for c in after.comments}
    return ReviewDiff(before=before, after=after, criteria=tuple(criteria), files=tuple(files),
                      comments_added=tuple(c for c in after.comments if key(c) not in before_keys),
                      comments_removed=tuple(c for c in before.comments if key(c) not in after_keys))

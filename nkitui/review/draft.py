"""Review drafts: the model the rubric editor fills in, where drafts are kept, and autosave.

Drafts live outside the task repository, in the XDG state directory
(`~/.local/state/nkitui/drafts/<repository key>/<task id>.toml`), so a half-written review never
shows up in `git status`. Saves are atomic (write, fsync, rename). The Autosaver coalesces edits and
writes at most every few hundred milliseconds, and always within one second of the last edit, so
killing the app loses at most the last second of typing.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkitui.common.atomic import atomic_write_text
from nkitui.common.paths import state_dir
from nkitui.review import tomlout
from nkitui.review.errors import RecordError
from nkitui.common.fields import FieldReader, Table
from nkitui.review.record import (
    RUN_ID_RE,
    Evidence,
    LineComment,
    RuleOverride,
    Score,
    body_tables,
    read_comments,
    read_evidence,
    read_overrides,
    read_rubric_ref,
    read_runs,
    read_scores,
)
from nkitui.review.rubric import Rubric, ScoreValue
from nkitui.task.problems import Problem

DRAFT_KIND = "nkitui-review-draft"
DRAFT_SCHEMA = 1
DRAFT_DOCS = "docs/review-format.md#drafts"


@dataclass
class Draft:
    """A review being written. Mutable: the UI edits it in place and hands it to an Autosaver."""

    task_id: str
    rubric_id: str
    rubric_version: str
    verdict: str | None = None
    summary: str = ""
    scores: dict[str, Score] = field(default_factory=dict)
    comments: list[LineComment] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    overrides: list[RuleOverride] = field(default_factory=list)  # verdict rules overridden, with reasons
    auditor: str | None = None  # submit as this auditor (else git config / OS user)
    saved_at: dt.datetime | None = None  # set by DraftStore.save
    # Warnings from reading the file (unknown keys such as a misspelt `scroe`): validate_draft repeats
    # them, so a typo that silently drops a value is shown next to the error it causes.
    parse_warnings: list[Problem] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def new(cls, task_id: str, rubric: Rubric) -> "Draft":
        """An empty draft with one unscored entry per criterion, in rubric order."""
        return cls(task_id=task_id, rubric_id=rubric.id, rubric_version=rubric.version,
                   scores={c.id: Score() for c in rubric.criteria})

    # -- edits the UI makes ------------------------------------------------------------------------
    def set_score(self, criterion: str, value: ScoreValue | None, comment: str | None = None) -> None:
        entry = self.scores.setdefault(criterion, Score())
        entry.value = value
        if comment is not None:
            entry.comment = comment

    def set_comment(self, criterion: str, comment: str) -> None:
        self.scores.setdefault(criterion, Score()).comment = comment

    def add_line_comment(self, file: str, start: int, end: int, text: str, criterion: str | None = None) -> LineComment:
        comment = LineComment(file=file, start=start, end=end, text=text, criterion=criterion)
        self.comments.append(comment)
        return comment

    def attach_evidence(self, evidence: Evidence) -> None:
        """Link evidence to the draft (a run is also cited in `runs`); the same link twice is kept once."""
        if evidence not in self.evidence:
            self.evidence.append(evidence)
        if evidence.kind == "run" and evidence.ref not in self.runs:
            self.runs.append(evidence.ref)

    def set_override(self, rule: str, reason: str) -> None:
        """Override verdict rule `rule` with `reason`; an empty reason withdraws the override."""
        self.overrides = [o for o in self.overrides if o.rule != rule]
        if reason.strip():
            self.overrides.append(RuleOverride(rule=rule, reason=reason.strip()))

    def override_for(self, rule: str) -> RuleOverride | None:
        return next((o for o in self.overrides if o.rule == rule), None)

    def cite_run(self, run_id: str) -> None:
        if not RUN_ID_RE.match(run_id):
            raise ValueError(f"{run_id!r} is not a run id")
        if run_id not in self.runs:
            self.runs.append(run_id)

    @property
    def score_values(self) -> dict[str, ScoreValue | None]:
        return {cid: s.value for cid, s in self.scores.items()}

    def copy(self) -> "Draft":
        return copy.deepcopy(self)

    # -- TOML ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": DRAFT_SCHEMA, "kind": DRAFT_KIND, "task_id": self.task_id}
        if self.auditor:
            doc["auditor"] = self.auditor
        if self.saved_at is not None:
            doc["saved_at"] = self.saved_at.astimezone(dt.timezone.utc)
        doc["verdict"] = self.verdict or ""
        doc["summary"] = self.summary
        doc["runs"] = list(self.runs)
        doc["rubric"] = {"id": self.rubric_id, "version": self.rubric_version}
        doc.update(body_tables(self.scores, self.comments, self.evidence, self.overrides))
        return doc

    def to_toml(self) -> str:
        return tomlout.dumps(self.to_dict())

    @classmethod
    def from_toml(cls, text: str, display: str) -> "Draft":
        """Parse a draft (a `review template` filled in an editor, or an autosaved one); raises RecordError."""
        r = FieldReader(display, DRAFT_DOCS)
        doc = r.parse_text(text)
        if doc is None:
            raise RecordError(r.problems)
        return _read_draft(doc, r)


def _read_draft(doc: Table, r: FieldReader) -> Draft:
    r.unknown_keys(doc, {"schema", "kind", "task_id", "auditor", "saved_at", "verdict", "summary", "runs", "rubric",
                         "scores", "comments", "evidence", "overrides"}, "")
    schema = r.int_(doc, "schema", "schema", minimum=1)
    if schema is not None and schema > DRAFT_SCHEMA:
        r.error("schema", f"draft schema {schema} is newer than this nkitui understands ({DRAFT_SCHEMA})", "upgrade nkitui")
    kind = r.str_(doc, "kind", "kind", example=f'"{DRAFT_KIND}"')
    if kind is not None and kind != DRAFT_KIND:
        r.error("kind", f"expected kind = {DRAFT_KIND!r}, got {kind!r}",
                "start from `nkitui review template TASK_DIR` (a submitted review cannot be submitted again)")
    task_id = r.str_(doc, "task_id", "task_id", required=True, example='"rmsnorm"')
    auditor = r.str_(doc, "auditor", "auditor", allow_empty=True) or None
    saved_at = r.datetime_(doc, "saved_at", "saved_at")
    verdict = r.str_(doc, "verdict", "verdict", allow_empty=True)
    summary = r.str_(doc, "summary", "summary", allow_empty=True) or ""
    runs = read_runs(doc, r)
    rubric_id, rubric_version = read_rubric_ref(doc, r)
    scores = read_scores(doc, r, allow_empty_string=True)
    comments = read_comments(doc, r)
    evidence = read_evidence(doc, r)
    overrides = read_overrides(doc, r)
    if r.errors or task_id is None or rubric_id is None or rubric_version is None:
        raise RecordError(r.problems)
    return Draft(task_id=task_id, rubric_id=rubric_id, rubric_version=rubric_version,
                 verdict=(verdict or "").strip() or None, summary=summary, scores=scores, comments=comments,
                 evidence=evidence, runs=runs, overrides=overrides, auditor=auditor, saved_at=saved_at,
                 parse_warnings=[p for p in r.problems if p.severity == "warning"])


# -- where drafts are kept -------------------------------------------------------------------------

def repository_root(path: Path) -> Path:
    """The git work tree holding `path` (the folder with .git), or `path` itself outside git."""
    start = Path(path).resolve()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


STALE_TEMP_S = 3600.0  # an atomic write's temporary file older than this was left by a crash


class DraftStore:
    """Drafts in the XDG state directory, keyed by task repository, the task's folder within it and
    its id: two tasks with one id in one repository never share a draft."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else state_dir() / "drafts"

    def _folder(self, task_root: Path) -> Path:
        repo = repository_root(task_root)
        digest = hashlib.sha256(str(repo).encode("utf-8")).hexdigest()[:16]
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", repo.name)[:40] or "repo"
        return self.root / f"{name}-{digest}"

    def path_for(self, task_root: Path, task_id: str) -> Path:
        repo = repository_root(task_root)
        try:
            rel = Path(task_root).resolve().relative_to(repo).as_posix()
        except ValueError:
            rel = str(Path(task_root).resolve())
        safe_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", task_id)[:100] or "task"
        where = hashlib.sha256(rel.encode("utf-8")).hexdigest()[:12]
        return self._folder(task_root) / f"{safe_id}--{where}.toml"

    def legacy_path_for(self, task_root: Path, task_id: str) -> Path:
        """Where nkitui kept the draft before drafts were keyed by the task's folder too."""
        safe_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", task_id)[:100] or "task"
        return self._folder(task_root) / f"{safe_id}.toml"

    def clean_stale(self, folder: Path, now: float | None = None) -> list[Path]:
        """Remove temporary files of atomic writes that a crash left behind (older than an hour, so
        a write in progress in another nkitui is never touched)."""
        import time

        cutoff = (time.time() if now is None else now) - STALE_TEMP_S
        removed: list[Path] = []
        try:
            entries = list(folder.iterdir())
        except OSError:
            return removed
        for p in entries:
            if p.name.startswith(".") and p.name.endswith(".tmp"):
                try:
                    if p.lstat().st_mtime < cutoff:
                        p.unlink()
                        removed.append(p)
                except OSError:
                    continue
        return removed

    def save(self, task_root: Path, draft: Draft, now: dt.datetime | None = None) -> Path:
        """Write the draft atomically; sets draft.saved_at."""
        draft.saved_at = now or dt.datetime.now(dt.timezone.utc)
        path = self.path_for(task_root, draft.task_id)
        atomic_write_text(path, draft.to_toml(), mode=0o600)  # unsubmitted words stay private to the auditor
        legacy = self.legacy_path_for(task_root, draft.task_id)
        if legacy.exists():  # migrated: the draft now lives under its task's own key
            try:
                legacy.unlink()
            except OSError:
                pass
        self.clean_stale(path.parent)
        return path

    def load(self, task_root: Path, task_id: str) -> Draft | None:
        """The saved draft, or None when there is none; RecordError when the file is corrupt."""
        path = self.path_for(task_root, task_id)
        self.clean_stale(path.parent)
        if not path.exists() and self.legacy_path_for(task_root, task_id).exists():
            path = self.legacy_path_for(task_root, task_id)  # saved by an older nkitui: nothing is lost
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            from nkitui.task.problems import Problem

            raise RecordError([Problem(str(path), "", f"cannot read the saved draft: {exc}",
                                       f"delete {path} to start a fresh draft")]) from None
        try:
            return Draft.from_toml(text, str(path))
        except RecordError as exc:
            # The file is nkitui's own autosave: besides repairing it by hand, deleting it is a way out.
            from nkitui.task.problems import Problem

            raise RecordError([*exc.problems, Problem(str(path), "", "the autosaved draft above cannot be used",
                                                      f"repair it, or delete {path} to start a fresh draft")]) from None

    def discard(self, task_root: Path, task_id: str) -> bool:
        found = False
        for path in (self.path_for(task_root, task_id), self.legacy_path_for(task_root, task_id)):
            try:
                path.unlink()
                found = True
            except FileNotFoundError:
                pass
        return found


# -- restoring -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RestoreOffer:
    draft: Draft
    saved_at: dt.datetime
    last_submitted_at: dt.datetime | None  # this auditor's last submission of the task, if any

    def describe(self) -> str:
        when = self.saved_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        if self.last_submitted_at is None:
            return f"An unsubmitted draft from {when} was found. Restore it?"
        last = self.last_submitted_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        return f"A draft from {when} is newer than your last submission ({last}). Restore it?"


def offer_restore(store: DraftStore, task_root: Path, task_id: str, auditor: str | None = None) -> RestoreOffer | None:
    """A draft to offer back on open: one that is newer than the last submission of this task.

    With `auditor`, only that auditor's submissions count. Raises RecordError for a corrupt draft
    (the UI shows it; the file stays so nothing is silently thrown away).
    """
    from nkitui.review.scan import scan_task

    draft = store.load(task_root, task_id)
    if draft is None or draft.saved_at is None:
        return None
    times = [lr.record.submitted_at for lr in scan_task(Path(task_root)).reviews
             if lr.record.task.id == task_id and (auditor is None or lr.record.auditor == auditor)]
    last = max(times) if times else None
    if last is not None and draft.saved_at <= last:
        return None
    return RestoreOffer(draft=draft, saved_at=draft.saved_at, last_submitted_at=last)


# -- autosave --------------------------------------------------------------------------------------

class Autosaver:
    """Debounced, atomic autosave on a background thread.

    Call `changed(draft)` after every edit (cheap: it snapshots the draft and returns). A save
    happens `quiet_s` after the last edit, or at the latest `max_delay_s` after the first unsaved
    edit while typing continues, so at most `max_delay_s` of typing is ever unsaved. `flush()` saves
    now; `close()` flushes and stops the thread (call it when the screen closes).
    """

    def __init__(self, store: DraftStore, task_root: Path, *, quiet_s: float = 0.3, max_delay_s: float = 0.8,
                 on_saved: Callable[[Path, dt.datetime], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None):
        if not 0 < quiet_s <= max_delay_s:
            raise ValueError("need 0 < quiet_s <= max_delay_s")
        self.store = store
        self.task_root = Path(task_root)
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self.on_saved = on_saved
        self.on_error = on_error
        self.last_error: BaseException | None = None
        self.last_saved_path: Path | None = None
        self.saves = 0
        self._cond = threading.Condition()
        self._io_lock = threading.Lock()  # one save at a time (thread and flush())
        self._pending: Draft | None = None
        self._saving = False
        self._first_change = 0.0
        self._last_change = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="nkitui-draft-autosave", daemon=True)
        self._thread.start()

    def changed(self, draft: Draft) -> None:
        snapshot = draft.copy()
        now = time.monotonic()
        with self._cond:
            if self._closed:
                raise RuntimeError("the autosaver is closed")
            if self._pending is None:
                self._first_change = now
            self._pending = snapshot
            self._last_change = now
            self._cond.notify()

    @property
    def pending(self) -> bool:
        """True while edits are not yet safely on disk (waiting, or being written)."""
        with self._cond:
            return self._pending is not None or self._saving

    def flush(self) -> Path | None:
        """Save the pending snapshot now (blocking). Returns the path written, or None if nothing was pending."""
        with self._io_lock:
            with self._cond:
                draft, self._pending = self._pending, None
                self._saving = draft is not None
            if draft is None:
                return None
            try:
                path = self._save(draft)
            finally:
                with self._cond:
                    if self._saving and self._pending is None and self.last_error is not None:
                        # failed: keep the edits pending and retry a little later
                        self._pending = draft
                        self._first_change = self._last_change = time.monotonic()
                    self._saving = False
            return path

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        self.flush()

    def __enter__(self) -> "Autosaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                deadline = min(self._last_change + self.quiet_s, self._first_change + self.max_delay_s)
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue  # re-evaluate: more edits may have moved the deadline
            self.flush()

    def _save(self, draft: Draft) -> Path | None:
        try:
            path = self.store.save(self.task_root, draft)
        except Exception as exc:  # disk full, permissions: report, keep the app running
            self.last_error = exc
            if self.on_error is not None:
                self.on_error(exc)
            return None
        self.last_error = None
        self.last_saved_path = path
        self.saves += 1
        if self.on_saved is not None and draft.saved_at is not None:
            self.on_saved(path, draft.saved_at)
        return path

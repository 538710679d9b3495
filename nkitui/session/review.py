"""The session's review: the rubric, the draft (autosaved), what blocks submitting, earlier reviews, submit.

    review = session.review
    review.load()                    # blocking: rubric, the autosaved draft (or a new one), history
    review.draft.set_score(...)      # the Rubric area edits the draft itself, then calls:
    review.edited()                  # autosave (debounced, atomic) and validate again
    review.attach(link, run_id)      # evidence for a criterion; a run's evidence cites the run
    result = review.submit()         # blocking: commit the review to the task's repository

Every call goes through nkitui.review: nothing here writes review files itself.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from nkitui.session.events import Notice, ReviewChecked, ReviewHistoryLoaded, ReviewLoaded, ReviewRefused, ReviewSubmitted
from nkitui.session.imports import WORKER_IMPORTS

if TYPE_CHECKING:
    from nkitui.review import Autosaver, Draft, DraftStore, Evidence, HistoryEntry, Rubric, SubmitResult
    from nkitui.session.session import AuditSession
    from nkitui.task import Problem


class Review:
    def __init__(self, session: AuditSession) -> None:
        self._session = session
        self._lock = threading.Lock()
        self.rubric: Rubric | None = None
        self.draft: Draft | None = None
        self.problems: tuple[Problem, ...] = ()
        self.history: tuple[HistoryEntry, ...] = ()
        self.restored = ""
        self.submitting = False
        self._store: DraftStore | None = None
        self._autosaver: Autosaver | None = None

    @property
    def ready(self) -> bool:
        """The rubric and the draft are loaded (edits and submitting are possible)."""
        return self.rubric is not None and self.draft is not None

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    def draft_store(self) -> DraftStore:
        if self._store is None:
            with WORKER_IMPORTS:
                from nkitui.review import DraftStore
            self._store = DraftStore(self._session.options.draft_store)
        return self._store

    # --- loading ----------------------------------------------------------------------------------

    def load(self) -> Draft:
        """Load the rubric and the draft: the autosaved one when it is newer than the last submission,
        else a new one (blocking). Then validate it and read the task's earlier reviews."""
        with WORKER_IMPORTS:
            from nkitui.review import Autosaver, Draft, RecordError, offer_restore, rubric_for_task
        task = self._session.task
        rubric = rubric_for_task(task)
        store = self.draft_store()
        restored = ""
        try:
            offer = offer_restore(store, task.root, task.id)
        except RecordError as exc:
            offer = None
            restored = f"The saved draft could not be read and was left in place: {exc.problems[0]}"
        if offer is not None:
            draft = offer.draft
            restored = f"Restored your unsubmitted draft (autosaved {offer.saved_at:%Y-%m-%d %H:%M} UTC)."
        else:
            draft = Draft.new(task.id, rubric)
        with self._lock:
            self.rubric, self.draft, self.restored = rubric, draft, restored
            if self._autosaver is None:
                self._autosaver = Autosaver(store, task.root, on_error=self._autosave_failed)
        self._session.emit(ReviewLoaded(rubric, draft, restored))
        self.check()
        self.load_history()
        if draft.runs:
            self._session.runs.show_cited(list(draft.runs))
        return draft

    def load_history(self) -> tuple[HistoryEntry, ...]:
        """Earlier reviews of the task, newest first (blind mode hides others' until you review). Blocking."""
        with WORKER_IMPORTS:
            from nkitui.review import task_history
        task = self._session.task
        viewer = self._session.identity.slug
        entries = tuple(task_history(task.root, task=task, blind=self._session.options.blind, viewer=viewer).entries)
        self.history = entries
        self._session.emit(ReviewHistoryLoaded(entries))
        return entries

    def _autosave_failed(self, error: BaseException) -> None:
        self._session.emit(Notice(f"The draft could not be autosaved: {error}. Your edits are kept in memory; "
                                  "fix the disk problem.", "error", "Draft"))

    # --- edits ------------------------------------------------------------------------------------

    def check(self) -> tuple[Problem, ...]:
        """Validate the draft against the rubric (what blocks submitting, what deserves a look)."""
        with WORKER_IMPORTS:
            from nkitui.review import validate_draft
        if self.rubric is None or self.draft is None:
            return ()
        task = self._session.task
        self.problems = tuple(validate_draft(self.draft, self.rubric, task.root, task.id))
        self._session.emit(ReviewChecked(self.problems))
        return self.problems

    def edited(self) -> None:
        """The draft changed (a score, a comment, the verdict, evidence): autosave it and validate again."""
        if self._autosaver is not None and self.draft is not None:
            self._autosaver.changed(self.draft)
        self.check()

    def attach(self, link: Evidence, run_id: str | None = None) -> bool:
        """Link evidence to the draft; evidence from a run cites the run (its result is committed beside
        the review). False when the same link is attached already."""
        draft = self._require_draft()
        if link in draft.evidence:
            return False
        draft.attach_evidence(link)
        if run_id:
            draft.cite_run(run_id)
        self.edited()
        return True

    def comment(self, file: str, start: int, end: int, text: str, criterion: str | None) -> None:
        """A comment anchored to lines start..end of a task file, for a criterion (None: the review as a whole)."""
        self._require_draft().add_line_comment(file, start, end, text, criterion)
        self.edited()

    def _require_draft(self) -> Draft:
        if self.draft is None:
            raise RuntimeError("the review is not loaded yet (call load() first)")
        return self.draft

    # --- submit -----------------------------------------------------------------------------------

    def submit(self) -> SubmitResult | None:
        """Validate and commit the review to the task's repository (blocking), as the session's auditor.
        The next review starts from a new draft. None (and ReviewRefused) when it was not committed."""
        with WORKER_IMPORTS:
            from nkitui.review import Draft, ReviewError, submit_review
        draft = self._require_draft()
        self.submitting = True
        try:
            if self._autosaver is not None:
                self._autosaver.flush()
            try:
                result = submit_review(self._session.task, draft, auditor=self._session.identity.submit_as,
                                       draft_store=self.draft_store())
            except ReviewError as exc:
                self._session.emit(ReviewRefused(exc))
                return None
            assert self.rubric is not None
            self.draft = Draft.new(result.record.task.id, self.rubric)
            self._session.emit(ReviewSubmitted(result, self.draft))
        finally:
            self.submitting = False
        self.check()
        self.load_history()
        return result

    def save_now(self) -> None:
        """Write pending edits to the draft file at once instead of after the autosave delay."""
        if self._autosaver is not None:
            self._autosaver.flush()

    def close(self) -> None:
        """Flush the last edits to disk (when the app exits or the session is dropped)."""
        autosaver, self._autosaver = self._autosaver, None
        if autosaver is not None:
            autosaver.close()

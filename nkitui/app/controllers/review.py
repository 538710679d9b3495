"""The app's side of the review: load the rubric and draft, autosave edits, attach evidence, submit.

A mixin of NkituiApp. Message handlers use Textual's `on_<message>` naming (mixins are not scanned
for `@on`). Every review call goes through nkitui.review: the UI never writes review files itself.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from textual import work

from nkitui.app.adapters import review_evidence
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.messages import ReviewReady, ReviewSubmitted

if TYPE_CHECKING:
    from nkitui.app.widgets.rubric.area import RubricArea


class ReviewController:
    rubric: Any = None
    draft: Any = None
    draft_store: Any = None
    autosaver: Any = None
    review_problems: list = []
    submitting = False

    @property
    def rubric_area(self) -> RubricArea:
        return self.workstation.area("rubric")  # type: ignore[attr-defined]

    # --- loading -----------------------------------------------------------------------------------

    @work(thread=True, name="load review", group="review", exclusive=True, exit_on_error=False)
    def load_review(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.review import Draft, DraftStore, RecordError, offer_restore, rubric_for_task

        task = self.audit_task  # type: ignore[attr-defined]
        rubric = rubric_for_task(task)
        store = self.draft_store or DraftStore()
        self.draft_store = store
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
        self.post_message(ReviewReady(rubric, draft, restored, self._review_history()))

    def _review_history(self) -> list:
        """Earlier reviews of the task, newest first (blind mode hides others' until you review)."""
        with WORKER_IMPORTS:
            from nkitui.review import ReviewError, task_history
            from nkitui.review.gitstore import open_repo, resolve_auditor

        task = self.audit_task  # type: ignore[attr-defined]
        try:
            viewer = resolve_auditor(open_repo(task.root)).slug
        except ReviewError:
            viewer = None
        blind = bool(self.config.blind)  # type: ignore[attr-defined]
        return list(task_history(task.root, task=task, blind=blind, viewer=viewer).entries)

    @work(thread=True, name="review history", group="review-history", exclusive=True, exit_on_error=False)
    def reload_review_history(self) -> None:
        from nkitui.app.messages import ReviewHistory

        self.post_message(ReviewHistory(self._review_history()))

    def on_review_history(self, message) -> None:
        self.rubric_area.set_history(message.entries)

    def _rubric_loaded(self) -> bool:
        """True once the rubric and draft are loaded; otherwise says so and returns False."""
        if not self.review_ready:  # type: ignore[attr-defined]
            self.notify("The rubric is still loading.", severity="warning", timeout=4)  # type: ignore[attr-defined]
        return self.review_ready  # type: ignore[attr-defined]

    def on_review_ready(self, message: ReviewReady) -> None:
        from nkitui.review import Autosaver

        self.rubric, self.draft = message.rubric, message.draft
        if self.autosaver is None:
            task = self.audit_task  # type: ignore[attr-defined]
            self.autosaver = Autosaver(self.draft_store, task.root, on_error=self._autosave_failed)
        self.review_ready = True
        self.rubric_area.set_history(message.history)
        self.rubric_area.set_review(self.rubric, self.draft)
        self.revalidate()
        if message.restored:
            self.notify(message.restored, title="Draft", timeout=6)  # type: ignore[attr-defined]

    def _autosave_failed(self, error: BaseException) -> None:
        text = f"The draft could not be autosaved: {error}. Your edits are kept in memory; fix the disk problem."
        if threading.get_ident() == self._thread_id:  # type: ignore[attr-defined]
            self.notify(text, severity="error", timeout=10)  # type: ignore[attr-defined]
        else:
            self.call_from_thread(self.notify, text, severity="error", timeout=10)  # type: ignore[attr-defined]

    def close_review(self) -> None:
        """Flush the last edits to disk (called when the app exits)."""
        if self.autosaver is not None:
            self.autosaver.close()
            self.autosaver = None

    # --- edits -------------------------------------------------------------------------------------

    def revalidate(self) -> list:
        from nkitui.review import validate_draft

        if self.rubric is None:
            return []
        task = self.audit_task  # type: ignore[attr-defined]
        self.review_problems = validate_draft(self.draft, self.rubric, task.root, task.id)
        self.rubric_area.set_problems(self.review_problems)
        self._update_badges()  # type: ignore[attr-defined]
        return self.review_problems

    def on_rubric_area_draft_edited(self, message: RubricArea.DraftEdited) -> None:
        self.draft_changed()

    def draft_changed(self) -> None:
        if self.autosaver is not None and self.draft is not None:
            self.autosaver.changed(self.draft)
        self.revalidate()

    def action_attach_evidence(self) -> None:
        evidence = self.focused_evidence()  # type: ignore[attr-defined]
        if evidence is None:
            self.notify("Nothing to attach here: focus a finding, a source or diff line, a log line or a metric.",
                        timeout=4)  # type: ignore[attr-defined]
            return
        if not self._rubric_loaded():
            return
        area = self.rubric_area
        crit = area.current_criterion
        link = review_evidence(evidence, crit.id if crit is not None else None)
        if link in self.draft.evidence:
            self.notify(f"Already attached: {link.ref}", timeout=3)  # type: ignore[attr-defined]
            return
        self.draft.attach_evidence(link)
        if evidence.run_id:
            # Evidence from a run cites the run: its result is committed beside the review.
            self.draft.cite_run(evidence.run_id)
        area.refresh_lists()
        self.draft_changed()
        target = crit.title if crit is not None else "the review"
        self.notify(f"{link.kind} {link.ref}", title=f"Evidence attached to {target}", timeout=4)  # type: ignore[attr-defined]

    def on_comment_wanted(self, message) -> None:
        from nkitui.app.screens.comment import LineCommentScreen

        if not self._rubric_loaded():
            return
        crit = self.rubric_area.current_criterion
        where = message.location

        def save(text: str | None) -> None:
            if not text:
                return  # a cancelled comment keeps the selection, to try again
            self.draft.add_line_comment(message.file, message.line, message.end, text,
                                        crit.id if crit is not None else None)
            if message.view is not None:
                message.view.clear_selection()
            self.rubric_area.refresh_lists()
            self.draft_changed()
            self.notify(f"{where}: {text}", title="Comment added to the draft", timeout=4)  # type: ignore[attr-defined]

        self.push_screen(LineCommentScreen(where, crit.title if crit is not None else "the review as a whole"),
                         save)  # type: ignore[attr-defined]

    def open_evidence(self, kind: str, index: int) -> None:
        """Show where an evidence link or a line comment points: the line, the log line or the metric."""
        from nkitui.app.adapters import parse_location
        from nkitui.app.messages import ShowSource

        if kind == "comment":
            c = self.draft.comments[index]
            self.post_message(ShowSource(c.file, c.start))  # type: ignore[attr-defined]
            return
        e = self.draft.evidence[index]
        if e.kind in ("finding", "source", "diff"):
            where = parse_location(e.ref)
            if where is None:
                self.notify(f"{e.ref} names no line to show.", timeout=3)  # type: ignore[attr-defined]
            else:
                self.post_message(ShowSource(*where))  # type: ignore[attr-defined]
        elif e.kind == "log":
            run_id, _, span = e.ref.partition("#L")
            shown = getattr(self, "shown_result", None)
            self.action_show_area("run")  # type: ignore[attr-defined]
            if shown is None or shown.run_id != run_id:
                self.notify(f"The log line is from run {run_id}: reopen that run (h) to see it.", timeout=5)  # type: ignore[attr-defined]
            elif span.split("-")[0].isdigit():
                log = self.run_area.log  # type: ignore[attr-defined]
                log.following = False
                log.move_cursor(log.store.row_of(int(span.split("-")[0]) - 1) or 0, center=True)
        else:
            self.action_show_area("engines" if e.kind == "metric" else "run")  # type: ignore[attr-defined]

    def action_edit_in_editor(self) -> None:
        if not self._rubric_loaded():
            return
        area = self.rubric_area
        new = self.edit_text_externally(area.current_comment())  # type: ignore[attr-defined]
        if new is not None:
            area.set_comment_text(new.rstrip("\n"))

    # --- submit ------------------------------------------------------------------------------------

    def action_submit_review(self) -> None:
        if not self.review_ready or self.submitting:  # type: ignore[attr-defined]
            return
        problems = self.revalidate()
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            self.action_show_area("rubric")  # type: ignore[attr-defined]
            self.rubric_area.show_verdict_page()
            first = errors[0]
            more = f" (and {len(errors) - 1} more, listed on the verdict page)" if len(errors) > 1 else ""
            self.notify(f"{first.message} — {first.fix}{more}", title="Not ready to submit", severity="error",
                        timeout=8)  # type: ignore[attr-defined]
            return

        from nkitui.app.screens.review import ConfirmSubmit

        def confirmed(ok: bool | None) -> None:
            if ok:
                self.submitting = True
                self.submit_review_worker()

        self.push_screen(ConfirmSubmit(self._submit_summary(problems)), confirmed)  # type: ignore[attr-defined]

    def _submit_summary(self, problems: list) -> str:
        d, r = self.draft, self.rubric
        lines = [f"**{r.title} v{r.version}** on task **{d.task_id}**, verdict **{d.verdict}**", ""]
        for c in r.criteria:
            entry = d.scores.get(c.id)
            value = "-" if entry is None or entry.value is None else entry.value
            linked = sum(1 for e in d.evidence if e.criterion == c.id)
            lines.append(f"- {c.title}: **{value}** ({linked} evidence)")
        lines += ["", f"{len(d.evidence)} evidence links, {len(d.runs)} runs cited.", "",
                  "The review is committed to the task's git repository under `reviews/` (only review files)."]
        for p in problems:
            lines.append(f"- ⚠ {p.message} — {p.fix}")
        return "\n".join(lines)

    @work(thread=True, name="submit review", group="review-submit", exclusive=True, exit_on_error=False)
    def submit_review_worker(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.review import ReviewError, submit_review

        if self.autosaver is not None:
            self.autosaver.flush()
        try:
            result = submit_review(self.audit_task, self.draft, draft_store=self.draft_store)  # type: ignore[attr-defined]
        except ReviewError as exc:
            self.post_message(ReviewSubmitted(exc))
            return
        self.post_message(ReviewSubmitted(result))

    def on_review_submitted(self, message: ReviewSubmitted) -> None:
        from nkitui.app.screens.review import SubmittedScreen
        from nkitui.review import Draft, ReviewError, render_markdown

        self.submitting = False
        result = message.result
        if isinstance(result, ReviewError):
            lines = "\n".join(f"• {p.message} — {p.fix}" for p in result.problems[:4])
            self.notify(lines or str(result), title="The review was not committed", severity="error", timeout=15)  # type: ignore[attr-defined]
            return
        record = result.record
        commit_line = f"commit {result.short_commit}  {record.relpath}  ({record.verdict}, by {record.auditor})"
        self.rubric_area.set_last_commit(f"committed {result.short_commit}")
        self.notify(commit_line, title="Review committed", timeout=10)  # type: ignore[attr-defined]
        self.push_screen(SubmittedScreen(commit_line, render_markdown(record, self.rubric)))  # type: ignore[attr-defined]
        # The next review of this task starts from an empty draft.
        self.draft = Draft.new(record.task.id, self.rubric)
        self.rubric_area.set_review(self.rubric, self.draft)
        self.revalidate()
        self.load_history()  # type: ignore[attr-defined]
        self.reload_review_history()

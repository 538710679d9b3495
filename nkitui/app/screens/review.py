"""Confirm a review before committing it; show the commit afterwards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

if TYPE_CHECKING:
    from nkitui.session import AuditSession


def submit_summary(session: AuditSession) -> str:
    """What the submit dialog says: who submits, where the review goes, the scores and what is cited."""
    review, who = session.review, session.identity
    d, r = review.draft, review.rubric
    assert d is not None and r is not None
    source = {"config": "nkitui's config", "git": "git config", "system": "the OS account"}[who.source]
    lines = [f"Submitting as `{who.display}` (from {source}) into `reviews/{who.slug}/`", ""]
    if who.warning:
        lines += [f"⚠ {who.warning[0].upper()}{who.warning[1:]}.", ""]
    lines += [f"**{r.title} v{r.version}** on task **{d.task_id}**, verdict **{d.verdict}**", ""]
    for c in r.criteria:
        entry = d.scores.get(c.id)
        value = "-" if entry is None or entry.value is None else entry.value
        linked = sum(1 for e in d.evidence if e.criterion == c.id)
        lines.append(f"- {c.title}: **{value}** ({linked} evidence)")
    lines += ["", f"{len(d.evidence)} evidence links, {len(d.runs)} runs cited.", "",
              "The review is committed to the task's git repository under `reviews/` (only review files)."]
    for p in review.problems:
        lines.append(f"- ⚠ {p.message} — {p.fix}")
    return "\n".join(lines)


class ConfirmSubmit(ModalScreen[bool]):
    """What will be committed, and where; Enter (or y) commits, Escape (or n) goes back."""

    BINDINGS = [
        Binding("enter,y", "confirm", "Commit", id="confirm.yes"),
        Binding("escape,n", "cancel", "Back", id="confirm.no"),
    ]

    DEFAULT_CSS = """
    ConfirmSubmit { align: center middle; }
    ConfirmSubmit > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: round $warning; background: $surface; padding: 0 1;
    }
    ConfirmSubmit VerticalScroll { height: auto; max-height: 30; }
    ConfirmSubmit .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, summary_markdown: str) -> None:
        super().__init__()
        self.summary_markdown = summary_markdown

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Markdown(self.summary_markdown)
            yield Static("Enter or y commits the review · Escape or n goes back", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Submit review"

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class SubmittedScreen(ModalScreen[None]):
    """The commit that now holds the review, and the review as committed (rendered Markdown)."""

    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close", id="submitted.close")]

    DEFAULT_CSS = """
    SubmittedScreen { align: center middle; }
    SubmittedScreen > Vertical {
        width: 95%; max-width: 110; height: 90%;
        border: round $success; background: $surface; padding: 0 1;
    }
    SubmittedScreen #commit { height: auto; color: $text-success; text-style: bold; }
    SubmittedScreen VerticalScroll { height: 1fr; }
    SubmittedScreen .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, commit_line: str, markdown: str) -> None:
        super().__init__()
        self.commit_line = commit_line
        self.markdown = markdown

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.commit_line, id="commit")
            with VerticalScroll():
                yield Markdown(self.markdown)
            yield Static("Escape closes · the next review starts from an empty draft", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Review committed"

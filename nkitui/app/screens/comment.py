"""Write a review comment anchored to one line of a task file."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class LineCommentScreen(ModalScreen[str | None]):
    """Enter saves the comment, Escape discards it."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="comment.cancel")]

    DEFAULT_CSS = """
    LineCommentScreen { align: center middle; }
    LineCommentScreen > Vertical {
        width: 90%; max-width: 100; height: auto;
        border: round $primary; background: $surface; padding: 0 1;
    }
    LineCommentScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, where: str, criterion: str) -> None:
        super().__init__()
        self.where = where
        self.criterion = criterion

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Comment on {self.where}, for {self.criterion}.", classes="hint")
            yield Input(placeholder="what is wrong (or right) here, and why", id="comment-text")
            yield Static("Enter saves it in the draft · Escape discards it", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Line comment"
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _save(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.dismiss(text or None)

    def action_cancel(self) -> None:
        self.dismiss(None)

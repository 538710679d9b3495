"""Override a verdict rule of the rubric with a reason (it goes into the review record)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class OverrideScreen(ModalScreen[str | None]):
    """Enter saves the reason (an empty one withdraws the override), Escape leaves it as it was."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="override.cancel")]

    DEFAULT_CSS = """
    OverrideScreen { align: center middle; }
    OverrideScreen > Vertical {
        width: 90%; max-width: 100; height: auto;
        border: round $warning; background: $surface; padding: 0 1;
    }
    OverrideScreen .hint { color: $text-muted; height: auto; }
    OverrideScreen .rule { height: auto; }
    """

    def __init__(self, rule_id: str, what: str, reason: str = "", minimum: int = 10) -> None:
        super().__init__()
        self.rule_id = rule_id
        self.what = what
        self.reason = reason
        self.minimum = minimum

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.what, classes="rule")
            yield Input(value=self.reason, placeholder="why this verdict stands all the same", id="override-reason")
            yield Static(f"Enter saves the reason (at least {self.minimum} characters; empty withdraws the "
                         "override) · Escape leaves it as it was", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = f"Override rule {self.rule_id}"
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _save(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)

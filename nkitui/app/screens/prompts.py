"""Small questions the workstation asks: yes or no, and who the auditor is."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from nkitui.session.identity import IdentityError, parse_auditor

_PROMPT_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 90%; max-width: 90; height: auto; max-height: 90%;
    border: round $warning; background: $surface; padding: 0 1;
}}
{name} .question {{ margin-bottom: 1; }}
{name} .hint {{ color: $text-muted; height: auto; }}
{name} .problem {{ color: $text-error; height: auto; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: y (or Enter) answers yes, n (or Escape) no."""

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = _PROMPT_CSS.format(name="ConfirmScreen")

    def __init__(self, title: str, question: str, yes: str, no: str) -> None:
        super().__init__()
        self.title_text = title
        self.question = question
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, classes="question")
            yield Static(f"y or Enter: {self.yes} · n or Escape: {self.no}", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = self.title_text

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AuditorScreen(ModalScreen[str | None]):
    """Who the auditor is: "Name <e-mail>" (the e-mail is optional). Enter keeps it (the app remembers it
    in its config), Escape asks again later (at the latest when submitting)."""

    BINDINGS = [Binding("escape", "later", "Later", id="auditor.later")]
    DEFAULT_CSS = _PROMPT_CSS.format(name="AuditorScreen")

    def __init__(self, why: str, current: str = "", remember_in: str = "") -> None:
        super().__init__()
        self.why = why
        self.current = current
        self.remember_in = remember_in

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.why, classes="question")
            yield Input(value=self.current, placeholder="Your Name <you@example.com>  (the e-mail is optional)", id="auditor-name")
            yield Static("", classes="problem", id="auditor-problem")
            where = f" in {self.remember_in}" if self.remember_in else ""
            yield Static(f"Enter: use it and remember it{where} · Escape: ask me later (before submitting)",
                         classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Who is reviewing?"
        self.query_one(Input).focus()

    @on(Input.Submitted, "#auditor-name")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            identity = parse_auditor(event.value)
        except IdentityError as exc:
            self.query_one("#auditor-problem", Static).update(str(exc))
            return
        if identity.shared:
            self.query_one("#auditor-problem", Static).update(
                f"{identity.name!r} is a shared account's name: give your own, so reviews say who wrote them")
            return
        self.dismiss(identity.display)

    def action_later(self) -> None:
        self.dismiss(None)

"""A criterion's scale in full: what every score means (the line under the score cuts a long meaning
short), or every verdict's guidance on the verdict page."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from nkitui.app import keymap


def level_label(value: Any, chosen: bool) -> Content:
    return Content.assemble(("▶ " if chosen else "  ", "bold $text-accent"),
                            (f"{value}", "bold reverse $text-primary" if chosen else "bold"))


def level_meaning(text: str, noun: str) -> Content:
    return Content(text) if text else Content.styled(f"(the rubric says nothing about this {noun})", "$text-muted")


class LevelsScreen(ModalScreen[None]):
    """Every value of the scale with its meaning, unabridged."""

    HELP = """\
## What each score means

Every value of the criterion's scale with its meaning in this rubric (every verdict with its guidance
on the verdict page), the one chosen marked ▶. Arrows scroll; **Escape** (or **e**) closes.
"""

    BINDINGS = [*keymap.bindings("levels"), *keymap.help_bindings()]

    DEFAULT_CSS = """
    LevelsScreen { align: center middle; }
    LevelsScreen > Vertical {
        width: 95%; max-width: 110; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    LevelsScreen VerticalScroll { height: auto; max-height: 40; }
    LevelsScreen .level { height: auto; margin-top: 1; }
    LevelsScreen .value { width: auto; min-width: 4; padding-right: 2; }
    LevelsScreen .meaning { width: 1fr; }
    LevelsScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, title: str, meanings: list[tuple[Any, str]], current: Any, noun: str = "score") -> None:
        super().__init__()
        self.title_text = title
        self.meanings = meanings
        self.current = current
        self.noun = noun

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(Content.styled(self.title_text, "bold"), id="levels-title")
                for value, text in self.meanings:  # a wrapped meaning keeps its indent beside the value
                    with Horizontal(classes="level"):
                        yield Static(level_label(value, value == self.current), classes="value")
                        yield Static(level_meaning(text, self.noun), classes="meaning")
            yield Static(f"{keymap.app_key(self, 'levels.close')} closes · ↑/↓ scroll", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "What each verdict means" if self.noun == "verdict" \
            else "What each score means"
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)

"""The task folder cannot be opened: every problem, with the file, the field and the fix."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class TaskProblemsScreen(ModalScreen[None]):
    """Shown instead of the areas; quitting returns exit code 2 (the task is invalid)."""

    BINDINGS = [Binding("q,escape,enter", "app.quit", "Quit", id="problems.quit")]

    DEFAULT_CSS = """
    TaskProblemsScreen { align: center middle; }
    TaskProblemsScreen > Vertical {
        width: 95%; max-width: 120; height: auto; max-height: 90%;
        border: round $error; background: $surface; padding: 0 1;
    }
    TaskProblemsScreen VerticalScroll { height: auto; max-height: 30; }
    TaskProblemsScreen .problem { margin-bottom: 1; }
    TaskProblemsScreen .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, where: str, problems: list) -> None:
        super().__init__()
        self.where = where
        self.problems = problems

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"{self.where} cannot be opened as a task:", classes="problem")
            with VerticalScroll():
                for problem in self.problems:
                    yield Static(f"• {problem}", classes="problem")
            yield Static("Fix the task (nkitui task validate shows the same list), then open it again. q quits.",
                         classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Task problems"
        self.query_one(VerticalScroll).focus()

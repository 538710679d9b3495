"""Pick the two revisions of the task's history whose diff the Source area shows."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from nkitui.app import keymap
from nkitui.app.gitview import Revision


class RevisionList(OptionList):
    HELP = """\
## Compare revisions

The task's commits, newest first, twice: pick the old revision on the left (**Enter**), then the new
one on the right (**Enter**); the Source area shows the diff between them. Tab moves between the
lists; **Escape** closes without changing.
"""

    BINDINGS = keymap.bindings("picker")

    def action_choose(self) -> None:
        self.action_select()

    def action_close(self) -> None:
        self.screen.dismiss(None)


class RevisionPicker(ModalScreen[tuple[Revision, Revision] | None]):
    """Two lists: the old revision (left) and the new one (right). Enter on each, or Tab between them."""

    BINDINGS = keymap.help_bindings()

    DEFAULT_CSS = """
    RevisionPicker { align: center middle; }
    RevisionPicker > Vertical {
        width: 95%; max-width: 140; height: 80%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    RevisionPicker Horizontal { height: 1fr; }
    RevisionPicker RevisionList { width: 1fr; height: 1fr; }
    RevisionPicker .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, revisions: list[Revision], current: tuple[Revision, Revision] | None) -> None:
        super().__init__()
        self.revisions = revisions
        self.current = current
        self.old: Revision | None = current[0] if current else None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Old revision (Enter) → then new revision (Enter). Escape cancels.", classes="hint")
            with Horizontal():
                yield RevisionList(*self._options(), id="old")
                yield RevisionList(*self._options(), id="new")

    def _options(self) -> list[Option]:
        return [Option(f"{r.label}" + (f"  ({r.author}, {r.when})" if r.author else ""), id=str(i))
                for i, r in enumerate(self.revisions)]

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Compare revisions"
        old_list = self.query_one("#old", RevisionList)
        new_list = self.query_one("#new", RevisionList)
        if self.current:
            old_list.highlighted = self._index(self.current[0])
            new_list.highlighted = self._index(self.current[1])
        old_list.focus()

    def _index(self, revision: Revision) -> int:
        for i, r in enumerate(self.revisions):
            if r.sha == revision.sha:
                return i
        return 0

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        revision = self.revisions[event.option_index]
        if event.option_list.id == "old":
            self.old = revision
            self.query_one("#new", RevisionList).focus()
            return
        if self.old is None:
            self.old = revision
        self.dismiss((self.old, revision))

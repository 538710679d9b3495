"""Small menus of the queue: pick one entry from a list (a state filter, a sort), and where to export.

Both are modal: Enter chooses, Escape closes without changing anything; F1 and ? work inside.
"""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from nkitui.app import keymap

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 90%; max-width: 76; height: auto; max-height: 90%;
    border: round $primary; background: $surface; padding: 0 1;
}}
{name} OptionList {{ height: auto; max-height: 18; border: none; padding: 0; }}
{name} .hint {{ color: $text-muted; height: auto; }}
{name} .problem {{ color: $text-warning; height: auto; }}
"""


class ChoiceList(OptionList):
    """The menu's entries; Enter (choice.pick, user-rebindable) chooses."""

    BINDINGS = keymap.bindings("choice")

    def action_pick(self) -> None:
        self.action_select()

    def action_close(self) -> None:
        self.screen.dismiss(None)


class ChoiceScreen(ModalScreen[str | None]):
    """Pick one of (name, label, note) entries; the current one is highlighted. Returns its name."""

    BINDINGS = keymap.help_bindings()
    DEFAULT_CSS = _CSS.format(name="ChoiceScreen")
    HELP = """\
## Menu

**↑**/**↓** move, **Enter** chooses, **Escape** closes without changing anything.
"""

    def __init__(self, title: str, entries: list[tuple[str, str, str]], current: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.entries = entries
        self.current = current

    def compose(self) -> ComposeResult:
        width = max((len(label) for _, label, _ in self.entries), default=10) + 2
        options = [Option(Content.assemble(("● " if name == self.current else "  ", "$text-accent"),
                                           label.ljust(width), (note, "$text-muted")), id=name)
                   for name, label, note in self.entries]
        with Vertical():
            yield ChoiceList(*options, id="choices")
            yield Static("Enter chooses · Escape closes", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = self.title_text
        choices = self.query_one(ChoiceList)
        names = [name for name, _, _ in self.entries]
        if self.current in names:
            choices.highlighted = names.index(self.current)
        choices.focus()

    @on(OptionList.OptionSelected, "#choices")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


def export_format(path: Path) -> str | None:
    """csv or jsonl from the file's extension; None when it says neither."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    return None


class ExportScreen(ModalScreen[Path | None]):
    """Where the lab's table goes: a file name (relative to the current folder), .csv or .jsonl. A file
    that exists is replaced only after a second Enter."""

    BINDINGS = [*keymap.help_bindings(), keymap.BY_ID["choice.close"].binding()]
    DEFAULT_CSS = _CSS.format(name="ExportScreen")
    HELP = """\
## Export the table

One row per task: its latest verdict for the current commit, findings by severity, estimated or
measured latency, and the submitted review scores per criterion (the same table as
`nkitui batch export`). **.csv** for a spreadsheet, **.jsonl** for scripts. A relative name is
relative to the folder nkitui was started in.
"""

    def __init__(self, default: Path, tasks: int) -> None:
        super().__init__()
        self.default = default
        self.tasks = tasks
        self._confirm: Path | None = None

    def compose(self) -> ComposeResult:
        try:
            shown = str(self.default.relative_to(Path.cwd()))
        except ValueError:
            shown = str(self.default)
        with Vertical():
            yield Static(f"Export the table of {self.tasks} task{'s' if self.tasks != 1 else ''} "
                         "(verdicts, findings, latency, review scores) to:")
            yield Input(value=shown, id="export-path")
            yield Static("", classes="problem", id="export-problem")
            yield Static(f"Enter exports · .csv or .jsonl · relative to {Path.cwd()} · Escape cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Export"
        self.query_one(Input).focus()

    def action_close(self) -> None:
        self.dismiss(None)

    @on(Input.Changed, "#export-path")
    def _typed(self) -> None:
        self._confirm = None
        self.query_one("#export-problem", Static).update("")

    @on(Input.Submitted, "#export-path")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        problem = self.query_one("#export-problem", Static)
        text = event.value.strip()
        if not text:
            problem.update("Give a file name, e.g. table.csv")
            return
        path = Path(text).expanduser()
        path = path if path.is_absolute() else Path.cwd() / path
        if export_format(path) is None:
            problem.update(f"{path.name}: end the name in .csv (a spreadsheet) or .jsonl (one JSON object a line)")
            return
        if path.is_dir():
            problem.update(f"{path} is a folder: give a file name in it")
            return
        if not path.parent.is_dir():
            problem.update(f"{path.parent} does not exist: make it first, or choose another folder")
            return
        if path.exists() and self._confirm != path:
            self._confirm = path
            problem.update(f"{path.name} exists: Enter again replaces it")
            return
        self.dismiss(path)

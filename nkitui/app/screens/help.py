"""F1: help for the focused area with its live keys; `?`: every key, filterable."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Markdown, Static

from nkitui.app import keymap


def help_for(widget: Widget | None) -> str:
    """Markdown help of the focused widget and the areas around it, innermost first."""
    sections: list[str] = []
    node = widget
    seen: set[str] = set()
    while node is not None and isinstance(node, Widget):
        text = getattr(type(node), "HELP", None)
        if text and text not in seen and type(node).__module__.startswith("nkitui."):
            sections.append(text.strip())
            seen.add(text)
        node = node.parent if isinstance(node.parent, Widget) else None
    if not sections:
        sections.append("## nkitui\n\nUse **1**-**4** to move between the areas, **?** for every key and **:** "
                        "or **ctrl+p** for commands.")
    return "\n\n".join(sections)


class HelpScreen(ModalScreen[None]):
    """Help for what has focus: what it shows and the keys that work there now."""

    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical {
        width: 90%; max-width: 100; height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    HelpScreen #help-text { height: auto; }
    HelpScreen #help-keys { height: auto; max-height: 50%; }
    HelpScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, markdown: str, keys: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.markdown = markdown
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll(id="help-scroll"):
                yield Markdown(self.markdown, id="help-text")
                table: DataTable = DataTable(id="help-keys", cursor_type="row", zebra_stripes=True)
                yield table
            yield Static("Escape closes · ? lists every key · keys are rebound in keymap.toml by id", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Help"
        self._fill()
        self.query_one(DataTable).focus(scroll_visible=False)  # keep the help text, not the table, at the top

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        """Key, what it does, id; on a narrow terminal the id goes (? lists ids) and "does" wraps."""
        table = self.query_one(DataTable)
        table.clear(columns=True)
        if self.size.width >= KeysScreen.NARROW:
            table.add_columns("key", "does", "id")
            for key, description, binding_id in self.keys:
                table.add_row(key, description, binding_id)
            return
        box = min(self.size.width * 90 // 100, 100)
        table.add_column("key", width=14)
        table.add_column("does", width=max(20, box - 14 - 4 - 8))  # cell padding, border, padding, scrollbar
        for key, description, _ in self.keys:
            table.add_row(key, description, height=None)


class KeysScreen(ModalScreen[None]):
    """Every binding, its current keys (after user overrides) and its id; type to filter."""

    BINDINGS = [Binding("escape", "dismiss", "Close", id="keys.close")]

    DEFAULT_CSS = """
    KeysScreen { align: center middle; }
    KeysScreen > Vertical {
        width: 95%; max-width: 120; height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    KeysScreen DataTable { height: 1fr; }
    KeysScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, overrides: dict[str, str]) -> None:
        super().__init__()
        self.overrides = overrides
        self._narrow = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Input(placeholder="filter: a key, a word or an id", id="keys-filter")
            yield DataTable(id="keys-table", cursor_type="row", zebra_stripes=True)
            yield Static("Escape closes · rebind by id in <XDG config>/nkitui/keymap.toml (docs/keymap.md)",
                         classes="hint")

    # Below this width the "where" column goes (the id names the scope: code.comment, log.search) and
    # "does" wraps inside its column instead of running off the screen.
    NARROW = 110

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Keys"
        self._columns()
        self._fill("")
        self.query_one(Input).focus()

    def on_resize(self) -> None:
        self._columns()  # the column widths follow the terminal's
        self._fill(self.query_one(Input).value)

    def _columns(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self._narrow = self.size.width < self.NARROW
        if not self._narrow:
            table.add_columns("where", "keys", "does", "id")
            return
        # keys 14, id 22, cell padding 2 each, the box's border, padding and scrollbar ~8
        box = min(self.size.width * 95 // 100, 120)
        table.add_column("keys", width=14)
        table.add_column("does", width=max(20, box - 14 - 22 - 6 - 8))
        table.add_column("id", width=22)

    def rows(self, text: str) -> list[tuple[str, str, str, str]]:
        needle = text.strip().lower()
        out = []
        for spec in keymap.REGISTRY:
            keys = keymap.display_keys(keymap.effective_keys(spec, self.overrides))
            row = (keymap.SCOPES[spec.scope], keys, spec.help or spec.description, spec.id)
            if not needle or any(needle in cell.lower() for cell in row):
                out.append(row)
        return out

    def _fill(self, text: str) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for row in self.rows(text):
            if self._narrow:
                table.add_row(row[1], row[2], row[3], height=None)  # "does" wraps: the row grows
            else:
                table.add_row(*row)

    @on(Input.Changed, "#keys-filter")
    def _filter(self, event: Input.Changed) -> None:
        self._fill(event.value)

    @on(Input.Submitted, "#keys-filter")
    def _to_table(self) -> None:
        self.query_one(DataTable).focus()

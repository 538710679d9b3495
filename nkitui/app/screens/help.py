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
    HelpScreen .hint { color: $text-muted; height: 1; }
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
        table = self.query_one(DataTable)
        table.add_columns("key", "does", "id")
        for key, description, binding_id in self.keys:
            table.add_row(key, description, binding_id)
        table.focus(scroll_visible=False)  # keep the help text, not the table, at the top


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
    KeysScreen .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, overrides: dict[str, str]) -> None:
        super().__init__()
        self.overrides = overrides

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Input(placeholder="filter: a key, a word or an id", id="keys-filter")
            yield DataTable(id="keys-table", cursor_type="row", zebra_stripes=True)
            yield Static("Escape closes · rebind in <XDG config>/nkitui/keymap.toml (see docs/keymap.md)",
                         classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Keys"
        table = self.query_one(DataTable)
        table.add_columns("where", "keys", "does", "id")
        self._fill("")
        self.query_one(Input).focus()

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
            table.add_row(*row)

    @on(Input.Changed, "#keys-filter")
    def _filter(self, event: Input.Changed) -> None:
        self._fill(event.value)

    @on(Input.Submitted, "#keys-filter")
    def _to_table(self) -> None:
        self.query_one(DataTable).focus()

"""Every notice of this app in full, newest first (the footer shows each one only for a few seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from nkitui.app import keymap

_SEVERITY_STYLE = {"information": "", "warning": "yellow", "error": "bold red"}


@dataclass(frozen=True)
class Notice:
    """One notification as the app gave it (the public, typed record of `NkituiApp.notices`)."""

    message: str
    title: str = ""
    severity: str = "information"  # information | warning | error
    at: datetime | None = None


def notices_table(notices: Sequence[Notice]) -> Table:
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for notice in reversed(notices):
        when = notice.at.strftime("%H:%M:%S") if notice.at else ""
        body = Text()
        if notice.title:
            body.append(notice.title + "\n", style="bold " + _SEVERITY_STYLE.get(notice.severity, ""))
        body.append(notice.message, style=_SEVERITY_STYLE.get(notice.severity, "") if not notice.title else "")
        grid.add_row(Text(when, style="dim"), body)
    return grid


class NoticesScreen(ModalScreen[None]):
    HELP = """\
## Notices

Every notice since nkitui started, newest first, in full: what the footer showed for a few seconds
and the errors. **Escape** closes.
"""

    BINDINGS = [Binding("escape,q,exclamation_mark", "dismiss", "Close", id="notices.close"), *keymap.help_bindings()]

    DEFAULT_CSS = """
    NoticesScreen { align: center middle; }
    NoticesScreen > Vertical {
        width: 95%; max-width: 120; height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    NoticesScreen VerticalScroll { height: 1fr; }
    NoticesScreen .hint { color: $text-muted; height: 1; }
    """

    def __init__(self, notices: Sequence[Notice]) -> None:
        super().__init__()
        self.notices = list(notices)

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(notices_table(self.notices) if self.notices else "No notices yet.", id="notices")
            yield Static("Escape closes", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = f"Notices ({len(self.notices)})"
        self.query_one(VerticalScroll).focus()

"""The Run area: run status, the live log (with search and level filter) and the run's results."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import ContentSwitcher, Input

from nkitui.app import keymap
from nkitui.app.widgets.run.log_view import LEVEL_FILTER_NAMES, LogView
from nkitui.app.widgets.run.results import ResultsPane
from nkitui.app.widgets.status import StatusLine


class LogSearch(Input):
    """The search box under the log; Enter searches, Escape closes."""

    HELP = """\
## Run: search

Type a word or phrase and press **Enter** to jump to the next line containing it (case-insensitive
unless you type a capital). **Escape** closes the box; **n**/**N** in the log repeat the search.
"""

    BINDINGS = [("escape", "close", "Close")]

    def action_close(self) -> None:
        self.display = False
        self.screen.query_one(LogView).focus()


class RunArea(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms the area to the whole screen

    """Status line, then the log or the results (m switches)."""

    HELP = """\
## Run area

**r** (or F5) runs the task on the chosen backend; **x** (or F6) cancels. The status line shows the
run, its phase and progress, then its verdict. **m** switches between the live log and the results
(metrics per output, per-tile error heat map, tolerance advice). **h** lists earlier runs to reopen one
or compare two.
"""

    BINDINGS = keymap.bindings("run")

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "2 Run"

    def compose(self) -> ComposeResult:
        yield StatusLine(id="run-status", classes="bar")
        with ContentSwitcher(initial="log-pane", id="run-switcher"):
            with Vertical(id="log-pane"):
                yield LogView(id="log")
                yield LogSearch(placeholder="search the log (Enter: next match, Escape: close)", id="log-search")
                yield StatusLine(id="log-info", classes="strip")
            yield ResultsPane(id="results-pane")

    def on_mount(self) -> None:
        self.query_one(LogSearch).display = False
        run, runs = keymap.app_key(self, "app.run"), keymap.app_key(self, "app.runs")
        self.set_status(Content.styled(f"No run yet: press {run} to run the task.", "$text-muted"))
        self.results.show_message(Content.styled(
            f"No results yet: run the task ({run}), or reopen an earlier run ({runs}).", "$text-muted"))
        self._update_info()

    @property
    def log(self) -> LogView:
        return self.query_one(LogView)

    @property
    def results(self) -> ResultsPane:
        return self.query_one(ResultsPane)

    def focus_primary(self) -> None:
        switcher = self.query_one(ContentSwitcher)
        if switcher.current == "results-pane":
            self.results.focus_primary()
        else:
            self.log.focus()

    def set_status(self, content: Content | str, *shorter: Content | str) -> None:
        """The status line; `shorter` variants are shown when the full one does not fit."""
        self.query_one("#run-status", StatusLine).update(content, *shorter)

    def show_results(self, show: bool = True) -> None:
        self.query_one(ContentSwitcher).current = "results-pane" if show else "log-pane"
        self.focus_primary()

    def action_toggle_view(self) -> None:
        self.show_results(self.query_one(ContentSwitcher).current != "results-pane")

    # --- log status and search -----------------------------------------------------------------

    @on(LogView.Changed)
    def _log_changed(self) -> None:
        self._update_info()

    @on(LogView.SearchWanted)
    def _open_search(self) -> None:
        search = self.query_one(LogSearch)
        search.display = True
        search.value = self.log.query
        search.focus()

    @on(Input.Submitted, "#log-search")
    def _search(self, event: Input.Submitted) -> None:
        event.stop()
        self.log.search(event.value.strip())
        self.query_one(LogSearch).display = False
        self.log.focus()

    def _update_info(self) -> None:
        log = self.log
        shown, total = len(log.store), log.store.total
        parts: list = []
        parts.append(("following" if log.following else "paused", "bold" if log.following else "$text-warning"))
        parts.append(("  ·  ", "$text-muted"))
        parts.append(f"{total:,} line{'s' if total != 1 else ''}")
        if log.level_filter:
            parts += [("  ·  ", "$text-muted"), (LEVEL_FILTER_NAMES[log.level_filter], "$text-accent"),
                      f" ({shown:,} shown)"]
        if log.query:
            number, count = log.store.match_position(log.query, log.cursor)
            where = (f"match {number:,} of {count:,}" if number is not None else
                     f"{count:,} match{'es' if count != 1 else ''}" if count else "no match")
            parts += [("  ·  ", "$text-muted"), f"search {log.query!r}: {where}"]
        if log.new_below and not log.following:
            parts += [("  ·  ", "$text-muted"), (f"{log.new_below:,} new below", "bold $text-primary")]
        self.query_one("#log-info", StatusLine).update(Content.assemble(*parts))

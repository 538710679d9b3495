"""The Run area: run status, the live log (with search and level filter) and the run's results.

It owns the workers of a session's runs (start, restore on opening, the backend probe, reopen,
compare): each is a blocking call of `session.runs` in a thread; what the call changes comes back as
session events, which the app hands to the `show_*` methods here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import ContentSwitcher, Input

from nkitui.app import keymap
from nkitui.app.widgets.run.log_view import LEVEL_FILTER_NAMES, LogView
from nkitui.app.widgets.run.results import ResultsPane
from nkitui.app.widgets.status import StatusLine
from nkitui.common import units

if TYPE_CHECKING:
    from nkitui.evaluate.run.result import RunResult
    from nkitui.session import AuditSession
    from nkitui.session.events import BackendResolved, RunEnded, RunProgressed, RunShown, RunStarted
    from nkitui.session.runs import LiveRun


def short_run_id(run_id: str) -> str:
    """The run id's random tail (20260107T090000Z-a1b2c3 -> a1b2c3), as the header shows it."""
    return run_id.rsplit("-", 1)[-1] if "-" in run_id else run_id


def checks_count(result: RunResult) -> tuple[int, int]:
    """(passed, decided) checks of a run."""
    return (sum(1 for c in result.checks if c.passed),
            sum(1 for c in result.checks if c.passed is not None))


def run_notice(result: RunResult) -> str:
    """The one-line notice when a run ends (the status line and the header say the rest)."""
    passed, total = checks_count(result)
    timing = result.timing
    time_part = (f" · {timing.kind} {units.time_us(timing.median_us)}"
                 if timing is not None and timing.median_us is not None else "")
    return f"{passed}/{total} checks{time_part}"


SHOWN_PREFIX = {"finished": "", "reopened": "reopened ", "latest": "latest ", "cited": "cited ", "kept": ""}


def result_summary(result: RunResult, prefix: str = "", note: str = "") -> tuple[Content, ...]:
    """The Run area's status line for a shown run: the full line, then shorter ones for narrow terminals."""
    glyph, style = {"passed": ("✔", "bold $text-success"), "failed": ("✘", "bold $text-error")}.get(
        result.status, ("■", "bold $text-warning"))
    passed, total = checks_count(result)
    parts: list = [(f"{glyph} {result.status}", style), f"  {passed}/{total} checks"]
    timing = result.timing
    if timing is not None and timing.median_us is not None:
        parts += ["  ·  ", (f"{timing.kind} {units.time_us(timing.median_us)}", "bold")]
    error = [("  ·  ", "$text-muted"), (result.error.message[:120], "$text-error")] if result.error else []
    noted = [("  ·  ", "$text-muted"), (note, "$text-warning")] if note else []
    full = parts + [("  ·  ", "$text-muted"), (f"{prefix}run {result.run_id}", "$text-muted")] + noted + error
    short = parts + [("  ·  ", "$text-muted"), (f"{prefix}{short_run_id(result.run_id)}", "$text-muted")]
    # Where there is no room for the note, the shorter line leaves it out rather than cut the error.
    return Content.assemble(*full), Content.assemble(*short, *noted, *error), Content.assemble(*short, *error)


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
run, its phase and progress, then its verdict. A cancelled run leaves the last completed run's results
in place until a new run completes. **m** switches between the live log and the results (failing
checks first, metrics per output, per-tile error heat map, tolerance advice). **h** lists earlier
runs to reopen one or compare two. On opening, the newest run of the task's current files is shown.
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
        self.show_nothing()
        self._update_info()

    @property
    def log(self) -> LogView:
        return self.query_one(LogView)

    @property
    def results(self) -> ResultsPane:
        return self.query_one(ResultsPane)

    @property
    def showing_results(self) -> bool:
        return self.query_one(ContentSwitcher).current == "results-pane"

    def focus_primary(self) -> None:
        if self.showing_results:
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
        self.show_results(not self.showing_results)

    # --- workers: the session's runs --------------------------------------------------------------

    def start_run(self, session: AuditSession) -> None:
        """Run the task (r): the session's run, in a worker of this area."""
        self.run_worker(session.runs.run, name="run", group="run", thread=True, exit_on_error=False)

    def restore(self, session: AuditSession) -> None:
        """On opening: the task's stored runs, and the newest run of its current files shown."""
        self.run_worker(session.runs.restore, name="stored runs", group="runs", thread=True, exit_on_error=False)

    def probe_backend(self, session: AuditSession) -> None:
        """Which backend a run will use, and why: shown before the first run."""
        self.run_worker(session.runs.resolve_backend, name="backend probe", group="probe", thread=True,
                        exit_on_error=False)

    def reopen(self, session: AuditSession, run_id: str) -> None:
        self.run_worker(lambda: session.runs.reopen(run_id), name="reopen run", group="runs-load", thread=True,
                        exclusive=True, exit_on_error=False)

    def compare(self, session: AuditSession, run_a: str, run_b: str) -> None:
        """Two stored runs side by side, on a screen of their own."""
        from nkitui.app.screens.runs import ComparisonScreen

        def work() -> None:
            comparison, a, b = session.runs.compare(run_a, run_b)
            self.app.call_from_thread(self.app.push_screen, ComparisonScreen(comparison, a, b))

        self.run_worker(work, name="compare runs", group="runs-load", thread=True, exclusive=True, exit_on_error=False)

    # --- showing a session's runs -------------------------------------------------------------------

    def show_nothing(self) -> None:
        run, runs = keymap.app_key(self, "app.run"), keymap.app_key(self, "app.runs")
        self.set_status(Content.styled(f"No run yet: press {run} to run the task.", "$text-muted"))
        self.results.show_message(Content.styled(
            f"No results yet: run the task ({run}), or reopen an earlier run ({runs}).", "$text-muted"))
        self.log.clear()

    def show_backend(self, resolved: BackendResolved) -> None:
        """Before any run: which backend a run will use, and why."""
        hint = f"No run yet: press {keymap.app_key(self, 'app.run')} to run the task"
        self.set_status(Content.assemble((hint, "$text-muted"), (f"  ·  {resolved.reason}", "$text-muted")),
                        Content.styled(hint, "$text-muted"))

    def show_starting(self) -> None:
        """A run was asked for: its log replaces the shown run's; the shown run's results stay until it completes."""
        self.log.clear("starting")
        self.show_results(False)
        self.set_status(Content.styled("Starting a run…", "$text-primary"))

    def show_started(self, event: RunStarted) -> None:
        self.log.run_label = event.run_id
        self.set_status(
            Content.assemble(("◐ run ", "bold $text-primary"), event.run_id,
                             (f"  ·  {event.backend} / {event.target}", "$text-muted")),
            Content.assemble(("◐ run ", "bold $text-primary"), short_run_id(event.run_id)))

    def show_live(self, live: LiveRun) -> None:
        """A run in progress, as it is now (the app switched back to its session)."""
        self.log.clear(live.run_id or "starting")
        self.log.append_lines(live.lines)
        self.log.flush_now()
        if live.progress is not None:
            self.show_progress(live.progress)
        else:
            self.set_status(Content.styled("Starting a run…", "$text-primary"))

    def show_progress(self, event: RunProgressed) -> None:
        head: list = [("◐ run ", "bold $text-primary"), event.run_id, "  ·  ", (event.phase or "", "bold")]
        short: list = [("◐ ", "bold $text-primary"), short_run_id(event.run_id), " ", (event.phase or "", "bold")]
        progress: list = []
        if event.total:
            width = 20
            filled = round(width * event.done / event.total)
            progress = ["  ", ("▰" * filled + "▱" * (width - filled), "$text-primary"), f" {event.done}/{event.total}"]
        label = [f" {event.label}"] if event.total and event.label else []
        # At 80 columns the progress bar matters more than the full run id.
        self.set_status(Content.assemble(*head, *progress, *label), Content.assemble(*short, *progress, *label),
                        Content.assemble(*short, *progress))

    def show_ended(self, event: RunEnded) -> None:
        """The live run is over; a run that could not start says why."""
        self.log.flush_now()
        if event.result is None:
            text = event.error or "the run ended without a result"
            self.set_status(Content.styled(f"✘ {text}", "bold $text-error"))

    def show_run(self, event: RunShown) -> None:
        """The session's shown run: status line, results and (unless it streamed here) its log."""
        result = event.result
        self.set_status(*result_summary(result, SHOWN_PREFIX[event.how], event.note))
        if event.log is not None:
            log = self.log
            log.clear(result.run_id)
            log.append_lines(event.log)
            log.flush_now()
        from nkitui.evaluate.present.report import render_result

        self.results.show_result(result, render_result(result))

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

"""Earlier runs of the task: reopen one, or mark two and compare them (A/B)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from nkitui.app import keymap
from nkitui.common import units


@dataclass(frozen=True)
class OpenRun:
    """The auditor chose a run to reopen."""

    run_id: str


@dataclass(frozen=True)
class CompareRuns:
    """The auditor chose two runs to compare: B against A."""

    run_a: str
    run_b: str


RunChoice = OpenRun | CompareRuns


def render_comparison(comparison: Any, a: Any, b: Any):
    from nkitui.evaluate.present.report import render_comparison as render  # the evaluation's own A/B view

    return render(comparison, a, b)


class RunsTable(DataTable):
    HELP = """\
## Earlier runs

Every stored run of this task, newest first: when, verdict, checks passed, time (estimated or
measured), backend and target, the task commit it ran on. **Enter** reopens the highlighted run in the
Run and Engines areas. **Space** marks a run (the first marked is A, the second B; Space again unmarks)
and **c** compares B against A: checks, worst metrics, timing and engine use side by side.
"""

    BINDINGS = keymap.bindings("runs")

    def action_open_run(self) -> None:
        if isinstance(self.screen, RunsScreen):
            self.screen.action_open_run()

    def action_mark_run(self) -> None:
        if isinstance(self.screen, RunsScreen):
            self.screen.action_mark_run()

    def action_compare_runs(self) -> None:
        if isinstance(self.screen, RunsScreen):
            self.screen.action_compare_runs()

    def action_close(self) -> None:
        self.screen.dismiss(None)


class RunsScreen(ModalScreen[RunChoice | None]):
    """Dismisses with OpenRun, CompareRuns or None."""

    BINDINGS = keymap.help_bindings()

    DEFAULT_CSS = """
    RunsScreen { align: center middle; }
    RunsScreen > Vertical {
        width: 95%; max-width: 140; height: 80%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    RunsScreen DataTable { height: 1fr; }
    RunsScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, summaries: list[Any]) -> None:
        super().__init__()
        self.summaries = summaries
        self.marked: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield RunsTable(id="runs", cursor_type="row", zebra_stripes=True)
            yield Static("Enter reopens · Space marks (two to compare) · c compares the marked runs · Escape closes",
                         classes="hint", id="runs-hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Runs of this task (newest first)"
        table = self.query_one(RunsTable)
        # What tells runs apart comes first: at 80 columns the long run id is the part that scrolls off.
        # The mark column is empty until Space marks a run: an auto width would stay 0 and hide A/B.
        table.add_column("", width=1, key="mark")
        table.add_columns("when", "status", "checks", "time", "backend", "commit", "run")
        for s in self.summaries:
            table.add_row(*self._row(s), key=s.run_id)
        table.focus()

    def _row(self, s: Any) -> tuple:
        mark = "A" if self.marked[:1] == [s.run_id] else ("B" if self.marked[1:2] == [s.run_id] else "")
        time = f"{units.time_us(s.median_us)} {s.timing_kind or ''}".strip() if s.median_us is not None else "-"
        when = (s.created_at or "").replace("T", " ")[:19]
        status = Text(s.status, style={"passed": "green", "failed": "red"}.get(s.status, "yellow"))
        return (mark, when, status, f"{s.checks_passed}/{s.checks_total}", time, f"{s.backend or '-'}/{s.target}",
                (s.task_commit or "")[:8], s.run_id)

    def _current(self) -> Any:
        table = self.query_one(RunsTable)
        if not self.summaries or not 0 <= table.cursor_row < len(self.summaries):
            return None
        return self.summaries[table.cursor_row]

    def action_open_run(self) -> None:
        s = self._current()
        if s is not None:
            self.dismiss(OpenRun(s.run_id))

    def action_mark_run(self) -> None:
        s = self._current()
        if s is None:
            return
        if s.run_id in self.marked:
            self.marked.remove(s.run_id)
        else:
            self.marked = [*self.marked, s.run_id][-2:]
        table = self.query_one(RunsTable)
        for summary in self.summaries:
            table.update_cell(summary.run_id, "mark", self._row(summary)[0])

    def action_compare_runs(self) -> None:
        if len(self.marked) != 2:
            self.notify("Mark two runs with Space first (A then B).", timeout=3)
            return
        self.dismiss(CompareRuns(self.marked[0], self.marked[1]))


class ComparisonScreen(ModalScreen[None]):
    HELP = """\
## Compare runs

Run B against run A: whether both ran the same task commit, each check's verdict, the worst value of
each error metric with the change, timing with the speed-up, and the engines' active time. Arrows
and Page keys scroll; **Escape** closes.
"""

    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="compare.close"), *keymap.help_bindings()]

    DEFAULT_CSS = """
    ComparisonScreen { align: center middle; }
    ComparisonScreen > Vertical {
        width: 95%; max-width: 140; height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ComparisonScreen VerticalScroll { height: 1fr; }
    ComparisonScreen .hint { color: $text-muted; height: auto; }
    """

    def __init__(self, comparison: Any, a: Any, b: Any) -> None:
        """`comparison` is nkitui.evaluate.run.store.RunComparison; a and b the two RunResults."""
        super().__init__()
        self.comparison = comparison
        self.a = a
        self.b = b

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(render_comparison(self.comparison, self.a, self.b), id="comparison")
            yield Static("Escape closes", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Vertical).border_title = "Compare runs (B against A)"
        self.query_one(VerticalScroll).focus()

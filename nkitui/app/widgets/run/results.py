"""The results of a run: its checks, failing ones first with their detail wrapped to the pane's width;
per-output worst metrics as a table (each cell can be evidence); then the evaluation's own report
(metrics per seed, heat map, tolerance advice, timing, findings), whose wide tables scroll sideways."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nkitui.app.evidence import Evidence
from nkitui.common import units

METRIC_COLUMNS = (("max_abs", "max abs"), ("max_rel", "max rel"), ("max_ulp", "max ULP"), ("rel_l2", "rel L2"),
                  ("mismatches", "mismatches"))


def _fmt(value: Any, key: str = "") -> str:
    """A metric cell: ULP distances and counts as counts, errors as errors (nkitui.common.units)."""
    if value is None:
        return "-"
    if key == "max_ulp":
        return units.ulp(value, note=False)
    if key == "mismatches" or isinstance(value, int):
        return units.count(value)
    if isinstance(value, float):
        return units.error(value)
    return str(value)


class OutputsTable(DataTable):
    """Worst value of each metric per output over the run's seeds; the cell under the cursor is
    what `a` attaches as evidence."""

    HELP = """\
## Run: results

The worst value over all seeds of each error metric per output (float64 comparison with the
reference): largest absolute and relative error, ULP distance in the output dtype, relative L2 and
mismatches under the task's tolerance. Below: the evaluation's full report (checks, per-seed
metrics, per-tile error heat map, tolerance advice, timing, engine use, findings). Move the cursor to
a cell and press **a** to attach that metric as evidence.
"""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="cell", zebra_stripes=True)
        self.result: Any = None
        self.outputs: list[str] = []

    def on_mount(self) -> None:
        self.add_columns("output", "status", *(title for _, title in METRIC_COLUMNS))

    def show(self, result: Any) -> None:
        self.result = result
        self.clear()
        self.outputs = list(result.output_names()) if result is not None else []
        for name in self.outputs:
            passed = [o.passed for s in result.seed_results if (o := s.output(name)) is not None]
            status = "pass" if passed and all(passed) else ("fail" if passed else "-")
            self.add_row(name, status, *(_fmt(result.worst(name, key), key) for key, _ in METRIC_COLUMNS), key=name)
        self.display = bool(self.outputs)

    def evidence_at_cursor(self) -> Evidence | None:
        if self.result is None or not self.outputs:
            return None
        row, column = self.cursor_coordinate
        if not 0 <= row < len(self.outputs):
            return None
        name = self.outputs[row]
        index = max(0, column - 2)
        key, title = METRIC_COLUMNS[min(index, len(METRIC_COLUMNS) - 1)]
        value = _fmt(self.result.worst(name, key), key)
        return Evidence("metric", f"{name} {title} = {value} (worst over seeds {self.result.seeds})",
                        metric=f"{name}.{key}", value=value, run_id=self.result.run_id)


_CHECK_ORDER = {False: 0, None: 1, True: 2}  # failing first, then not run, then passing
_CHECK_MARK = {False: ("✘ FAIL", "bold red"), None: ("– not run", "yellow"), True: ("✔ pass", "green")}


def checks_table(result: Any) -> Table:
    """The run's checks as a grid that wraps to the pane's width: failing checks first, each with its
    detail in full under its title (the mark column stays narrow, so the text keeps its indent)."""
    checks = sorted(result.checks, key=lambda c: _CHECK_ORDER.get(c.passed, 1))
    failing = sum(1 for c in checks if c.passed is False)
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(no_wrap=True, width=9)
    grid.add_column(ratio=1, overflow="fold")
    title = (f"Checks: {failing} of {len(checks)} failing" if failing else
             f"Checks: all {len(checks)} pass" if checks and all(c.passed for c in checks) else f"Checks: {len(checks)}")
    grid.add_row(Text("", style="bold"), Text(title, style="bold red" if failing else "bold"))
    for check in checks:
        mark, style = _CHECK_MARK.get(check.passed, _CHECK_MARK[None])
        body = Text(check.title, style="bold" if check.passed is False else "")
        if check.detail:
            body.append("\n" + check.detail, style="" if check.passed is False else "dim")
        grid.add_row(Text(mark, style=style), body)
    return grid


class ResultsPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="results-message", classes="strip")
        yield Static(id="results-checks")
        yield OutputsTable(id="outputs")
        yield Static(id="results-body")

    def on_mount(self) -> None:
        self.query_one(OutputsTable).display = False
        self.query_one("#results-checks", Static).display = False

    def show_result(self, result: Any, report) -> None:
        message = self.query_one("#results-message", Static)
        message.update("")
        message.display = False
        checks = self.query_one("#results-checks", Static)
        checks.update(checks_table(result))
        checks.display = bool(result.checks)
        self.query_one(OutputsTable).show(result)
        self.query_one("#results-body", Static).update(report)
        self.scroll_home(animate=False)

    def show_message(self, message) -> None:
        widget = self.query_one("#results-message", Static)
        widget.update(message)
        widget.display = True
        self.query_one("#results-checks", Static).display = False
        self.query_one(OutputsTable).show(None)
        self.query_one("#results-body", Static).update("")

    def focus_primary(self) -> None:
        table = self.query_one(OutputsTable)
        (table if table.display else self).focus()

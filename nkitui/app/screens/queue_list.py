"""The queue's list of tasks: one row per task, columns chosen to fit the width, drawn with theme colours.

At 80 columns: task, last run (verdict and age), findings (● high ◆ medium ▲ low), review. From
120 columns the title, op, namespace and target join them; the rest of a row is in the detail
lines under the list. Virtualised (nkitui.app.widgets.lineview): a queue of 5,000 tasks draws what
one of 12 does.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from textual.content import Content
from textual.strip import Strip
from textual.style import Style

from nkitui.app import keymap
from nkitui.app.widgets.lineview import LineView
from nkitui.session.queue import REVIEW_LABELS, REVIEW_SHORT, QueueRow

WIDE = 120  # from this width: title, op, namespace, target

STATUS_GLYPH = {"passed": "✔", "failed": "✘", "timeout": "⏱", "invalid": "!", "not run": "○", "running": "◐",
                "queued": "⋯", "cancelled": "■", "…": " "}
STATUS_SHORT = {"memory-limit": "mem limit", "cpu-limit": "cpu limit", "internal-error": "int. error"}
STATUS_STYLE = {"passed": "passed", "not run": "muted", "running": "running", "queued": "muted", "…": "muted",
                "invalid": "invalid", "cancelled": "muted"}
REVIEW_STYLE = {"none": "muted", "draft": "draft", "mine": "passed", "others": "", "outdated": "invalid"}


@dataclass(frozen=True)
class Column:
    name: str
    title: str
    width: int


def columns_for(width: int) -> list[Column]:
    """The columns that fit `width` cells (the list's own width, its scrollbar taken off)."""
    room = width - 1  # a leading space
    if width >= WIDE:
        fixed = [Column("op", "op", 12), Column("ns", "ns", 6), Column("target", "target", 6),
                 Column("run", "last run", 24), Column("findings", "findings", 11), Column("review", "review", 19)]
        left = room - sum(c.width + 2 for c in fixed) - 2
        task = max(16, min(30, left // 3))
        title = max(10, left - task)
        return [Column("task", "task", task), Column("title", "title", title), *fixed]
    fixed = [Column("run", "last run", 16), Column("findings", "findings", 11), Column("review", "review", 10)]
    task = max(10, room - sum(c.width + 2 for c in fixed))
    return [Column("task", "task", task), *fixed]


def status_text(row: QueueRow, wide: bool) -> str:
    status = row.status
    word = STATUS_SHORT.get(status, status)
    if status == "running" and wide and row.phase:
        word = f"running {row.phase}"
    return f"{STATUS_GLYPH.get(status, '✘')} {word}"


def findings_text(row: QueueRow) -> list[tuple[str, str]]:
    """(text, style name) parts: "●2 ◆1 ▲1", "none", "…" while being analysed, "?" when it failed."""
    f = row.findings
    if f is None:
        return [("…" if row.loadable else "", "muted")]
    if f.error:
        return [("? see below", "muted")]
    parts: list[tuple[str, str]] = []
    for glyph, count, style in (("●", f.high, "sev-high"), ("◆", f.medium, "sev-medium"), ("▲", f.low, "sev-low")):
        if count:
            parts += [(f"{glyph}{count}", style), (" ", "")]
    return parts[:-1] if parts else [("none", "muted")]


def review_text(row: QueueRow, me: str | None, wide: bool) -> tuple[str, str]:
    state = row.review_state(me)
    if state is None:
        return ("…", "muted")
    label = (REVIEW_LABELS if wide else REVIEW_SHORT)[state]
    if wide and state == "others" and row.review is not None:
        others = row.review.auditors()
        label = f"by {', '.join(others)}" if len(", ".join(others)) <= 16 else f"by others ({len(others)})"
    return (label, REVIEW_STYLE.get(state, ""))


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


class QueueList(LineView):
    """The tasks of the queue as the filter and sort show them; the cursor stays on its task when rows
    move (a sort, a filter, a batch filling in)."""

    HELP = """\
## Queue

Every task under the folder nkitui was opened on, one row each: its **last run** for the task's
current commit (✔ passed, ✘ failed, ⏱ timeout, ! invalid, ○ not run, ◐ running, ⋯ queued in a batch)
and how long ago, its **findings** from static analysis (● high ◆ medium ▲ low), and where its
**review** stands for you: *none*, *my draft* (an unsubmitted draft of yours), *by me* (your review
of the task as it is now), *by others*, or *outdated* (a file the review judged has changed since).
The header counts what is reviewed, failing and outdated. The lines under the list tell the rest of
the highlighted task (title, op, target, the run's checks, who reviewed it).

**Enter** opens a task; **Escape** (or **Q**) in the task comes back here with the task kept as it
is — its draft, its shown run, a run still going. **n** moves to the next task that needs your review.
**/** filters by text, **f** by state, **s** sorts (**S** reverses), **Escape** drops the filters.
**B** evaluates the tasks in the background, as `nkitui batch --resume` does: rows go queued, running,
then show their verdict as each finishes; the line above the footer counts them with an ETA, **x**
cancels, and the batch goes on while you review a task. **E** exports the lab's table (CSV or JSONL).
**R** looks for tasks again.
"""

    BINDINGS = keymap.bindings("queue_list")

    STYLES = {
        "": "$foreground on $surface",
        "cursor": "$foreground on $nk-cursor",
        "muted": "$text-muted",
        "passed": "$text-success",
        "failed": "bold $text-error",
        "running": "bold $text-primary",
        "invalid": "$text-warning",
        "draft": "bold $text-accent",
        "sev-high": "bold $nk-sev-high",
        "sev-medium": "$nk-sev-medium",
        "sev-low": "$nk-sev-low",
        "id": "bold",
    }

    DEFAULT_CSS = """
    QueueList { background: $surface; height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[QueueRow] = []
        self.me: str | None = None
        self.now: dt.datetime | None = None  # "now" for ages (tests pin it); None: the clock
        self.empty_message = "Looking for tasks…"

    # --- data ----------------------------------------------------------------------------------

    def set_rows(self, rows: list[QueueRow], keep: str | None = None) -> None:
        """Show `rows`; the cursor stays on task `keep` (default: the one it is on) where it is still shown."""
        keep = keep if keep is not None else self.current_key
        self.rows = rows
        self.data_changed(content_width=0)
        if keep is not None:
            index = next((i for i, r in enumerate(rows) if r.key == keep), None)
            if index is not None:
                self.move_cursor(index)
        self.post_message(self.CursorMoved(self, self.cursor))

    def replace_row(self, row: QueueRow) -> bool:
        """A row's facts changed: redraw it where it is (no re-sort: rows do not jump under the cursor)."""
        for i, shown in enumerate(self.rows):
            if shown.key == row.key:
                self.rows[i] = row
                self._generation += 1
                self._row_cache.clear()
                self.refresh_row(i)
                if i == self.cursor:
                    self.post_message(self.CursorMoved(self, i))
                return True
        return False

    @property
    def current(self) -> QueueRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    @property
    def current_key(self) -> str | None:
        row = self.current
        return row.key if row is not None else None

    def move_to(self, key: str) -> bool:
        index = next((i for i, r in enumerate(self.rows) if r.key == key), None)
        if index is None:
            return False
        self.move_cursor(index, center=True)
        return True

    def row_count(self) -> int:
        return len(self.rows)

    def cursor_visible(self) -> bool:
        return True  # the highlighted task is what Enter opens, focused or not

    def on_resize(self) -> None:
        self.restyle()

    # --- drawing -------------------------------------------------------------------------------

    def header(self, width: int, sort: str = "", reverse: bool = False) -> Content:
        """The column titles for a list `width` wide, the sorted column marked."""
        marks = {"folder": "task", "id": "task", "verdict": "run", "age": "run", "findings": "findings",
                 "review": "review"}
        parts: list[str] = [" "]
        for column in columns_for(width):
            title = column.title + ((" ↑" if reverse else " ↓") if marks.get(sort) == column.name else "")
            parts.append(cut(title, column.width).ljust(column.width) + "  ")
        return Content("".join(parts).rstrip())

    def render_row(self, row: int, width: int, selected: bool) -> Strip:
        item = self.rows[row]
        base = self.st("cursor") if selected else self.st()
        wide = width >= WIDE

        def style(name: str) -> Style:
            return self.st(name) + Style(background=base.background) if name else base

        parts: list[tuple[Content | str, Style]] = [(" ", base)]
        for column in columns_for(width):
            cells: list[tuple[str, str]]
            if column.name == "task":
                cells = [(item.task_id, "id")]
            elif column.name == "title":
                cells = [(item.title, "muted" if not selected else "")]
            elif column.name == "op":
                cells = [(item.op or "", "")]
            elif column.name == "ns":
                cells = [(item.namespace or "", "")]
            elif column.name == "target":
                cells = [(item.target or "", "")]
            elif column.name == "run":
                text = status_text(item, wide)
                age = item.age(self.now) if item.status not in ("running", "queued") else ""
                status_style = STATUS_STYLE.get(item.status, "failed")
                room = column.width - len(age) - (1 if age else 0)
                cells = [(cut(text, room).ljust(room), status_style)]
                if age:
                    cells.append((" " + age, "muted"))
            elif column.name == "findings":
                cells = findings_text(item)
            else:
                cells = [review_text(item, self.me, wide)]
            used = 0
            for text, name in cells:
                text = cut(text, column.width - used)
                if text:
                    parts.append((text, style(name)))
                    used += len(text)
            parts.append((" " * (column.width - used + 2), base))
        return self.strip_of(parts, width, base)

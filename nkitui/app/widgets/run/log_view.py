"""The live compile/run log: virtualised, follow mode, level filter, search, coalesced repaints."""

from __future__ import annotations

import time
from typing import Iterable

from rich.segment import Segment
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style

from nkitui.app import keymap
from nkitui.app.evidence import Evidence
from nkitui.app.widgets.lineview import LineView
from nkitui.app.widgets.run.logstore import LEVELS, LogStore, smartcase

LEVEL_FILTERS = (0, 1, 2, 3)  # all, info+, warning+, error
LEVEL_FILTER_NAMES = ("all levels", "info and above", "warnings and errors", "errors only")
REPAINT_INTERVAL = 1 / 20  # at most 20 repaints a second however fast lines arrive
LAYOUT_INTERVAL = 0.5  # the scrollbar (a layout pass of the screen) follows at most twice a second
_TAG = {0: "D", 1: " ", 2: "W", 3: "E"}


class LogView(LineView):
    """Lines arrive in batches from a worker; the view repaints at most REPAINT_INTERVAL apart."""

    HELP = """\
## Run: live log

Everything the compile and run print, as it happens. The view follows new lines while the cursor is
on the last line; move up and it stops, showing how many new lines arrived below (**End**/**G**/**F**
resumes). **/** searches (smart case), **n**/**N** go to the next/previous match, **l** cycles the level
filter (all, info+, warnings+, errors). **Enter** on a line that names a place in the task (an error
"at kernel.py:12", a traceback frame, a finding) opens the Source area there. **a** attaches the line
under the cursor as evidence.
Only the lines on screen are drawn, so a million-line log scrolls as smoothly as a short one.
"""

    BINDINGS = keymap.bindings("log")

    STYLES = {
        "": "$foreground on $surface",
        "gutter": "$nk-gutter",
        "cursor": "$foreground on $nk-cursor",
        "debug": "$nk-log-debug",
        "info": "$nk-log-info",
        "warning": "$nk-log-warning",
        "error": "bold $nk-log-error",
        "match": "on $nk-match",
        "indicator": "bold $text on $primary",
    }

    DEFAULT_CSS = """
    LogView { background: $surface; }
    """

    following: reactive[bool] = reactive(True, init=False)
    query: reactive[str] = reactive("", init=False)

    class SearchWanted(Message):
        """The auditor pressed the search key (the Run area shows the search box)."""

    class Changed(Message):
        """Line counts, filter, following or search changed (for the status line)."""

    class LocationWanted(Message):
        """Enter on a line: show the place in the task it names, if any (the app knows the task's files)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = LogStore()
        self.new_below = 0
        self.run_label = ""  # run id of the lines shown, for evidence
        self._filter = 0
        self._pending: list[tuple[int, str]] = []
        self._dirty = False
        self._last_layout = 0.0

    def on_mount(self) -> None:
        self.set_interval(REPAINT_INTERVAL, self._flush, name="log-repaint")
        self.data_changed(content_width=0)

    def on_resize(self) -> None:
        # Following means the last line stays in view: a new height (a resized terminal, the search
        # box opening, a zoom) moves the end of the log, not the top.
        if self.following and len(self.store):
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True, force=True, x_axis=False)

    # --- feeding -------------------------------------------------------------------------------

    def append_lines(self, lines: Iterable[tuple[int, str]]) -> None:
        """Queue (level index, text) lines; they show at the next repaint tick."""
        self._pending.extend(lines)
        self._dirty = True

    def clear(self, run_label: str = "") -> None:
        self._pending.clear()
        self.store.clear()
        self.new_below = 0
        self.run_label = run_label
        self.set_reactive(LogView.following, True)
        self.set_reactive(LogView.cursor, 0)
        self.scroll_to(0, 0, animate=False, immediate=True, force=True)
        self.data_changed(content_width=0)
        self.post_message(self.Changed())

    def flush_now(self) -> None:
        """Apply queued lines immediately (tests and the end of a run)."""
        self._flush()

    def _flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        pending, self._pending = self._pending, []
        shown = self.store.extend(pending)
        now = time.monotonic()
        layout = now - self._last_layout >= LAYOUT_INTERVAL
        if layout:
            self._last_layout = now
        self.data_changed(content_width=self.store.longest + 10, layout=layout)
        if self.following:
            if len(self.store):
                self.set_reactive(LogView.cursor, len(self.store) - 1)
            self.scroll_end(animate=False, immediate=True, force=True, x_axis=False)
        else:
            self.new_below += shown
        self.post_message(self.Changed())

    def row_count(self) -> int:
        return len(self.store)

    # --- follow mode ---------------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        super().watch_cursor(old, new)
        at_end = new >= len(self.store) - 1
        if at_end and not self.following:
            self.following = True
        elif not at_end and self.following:
            self.following = False
        if self.query:  # the status line says which match the cursor is on
            self.post_message(self.Changed())

    def watch_following(self, following: bool) -> None:
        if following:
            self.new_below = 0
        self.refresh()
        self.post_message(self.Changed())

    def action_follow(self) -> None:
        self.following = True
        self.move_cursor(len(self.store) - 1)
        self.scroll_end(animate=False, immediate=True, force=True, x_axis=False)

    def action_cursor_top(self) -> None:
        self.following = False
        super().action_cursor_top()

    # --- filter and search ---------------------------------------------------------------------

    @property
    def level_filter(self) -> int:
        return self._filter

    def set_level_filter(self, minimum: int) -> None:
        keep = self.store.index(self.cursor) if len(self.store) and not self.following else None
        self._filter = minimum
        self.store.set_min_level(minimum)
        self.data_changed()
        if self.following or keep is None:
            self.set_reactive(LogView.cursor, max(0, len(self.store) - 1))
            self.scroll_end(animate=False, immediate=True, force=True, x_axis=False)
        else:
            row = self._nearest_row(keep)
            self.move_cursor(row, center=True)
        self.post_message(self.Changed())

    def _nearest_row(self, index: int) -> int:
        n = len(self.store)
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store.index(mid) < index:
                lo = mid + 1
            else:
                hi = mid
        return min(lo, max(0, n - 1))

    def action_cycle_level(self) -> None:
        self.set_level_filter((self._filter + 1) % len(LEVEL_FILTERS))

    def action_search(self) -> None:
        self.post_message(self.SearchWanted())

    def watch_query(self) -> None:
        self._generation += 1
        self._row_cache.clear()
        self.refresh()

    def search(self, query: str, step: int = 1, from_row: int | None = None, say_wrap: bool = False) -> bool:
        """Move to the next match of `query`; False (and a notice) when there is none. With `say_wrap`
        (n/N), a match found past the end, back at the other end, is announced as less and vim do."""
        self.query = query
        start = self.cursor if from_row is None else from_row
        row = self.store.find(query, start, step)
        if row is None:
            self.notify(f"No line matches {query!r}" if query else "Nothing to search for", timeout=3)
            return False
        if say_wrap and (row <= start if step > 0 else row >= start):
            self.notify(f"Search wrapped to the {'top' if step > 0 else 'bottom'}", timeout=2)
        self.following = False
        self.move_cursor(row, center=True)
        self.post_message(self.Changed())
        return True

    def action_next_match(self) -> None:
        if self.query:
            self.search(self.query, 1, say_wrap=True)
        else:
            self.action_search()

    def action_prev_match(self) -> None:
        if self.query:
            self.search(self.query, -1, say_wrap=True)
        else:
            self.action_search()

    def action_open_location(self) -> None:
        if len(self.store):
            self.post_message(self.LocationWanted(self.store.line(self.cursor)[2]))

    # --- evidence ------------------------------------------------------------------------------

    def evidence_at_cursor(self) -> Evidence | None:
        if not len(self.store):
            return None
        index, level, text = self.store.line(self.cursor)
        label = f"log line {index + 1}: {text.strip()[:70]}"
        return Evidence("log", label, line=index + 1, run_id=self.run_label or None, value=text,
                        data={"level": LEVELS[level]})

    # --- drawing -------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        height = self.scrollable_content_region.height
        if self.new_below and not self.following and y == height - 1:
            return self._indicator(self.scrollable_content_region.width)
        return super().render_line(y)

    def _indicator(self, width: int) -> Strip:
        style = self.st("indicator")
        n = self.new_below
        text = f" ▼ {n:,} new line{'s' if n != 1 else ''} below — End to follow "
        return Strip([Segment(text[:width].center(width), style.rich_style)], width)

    def draw_row(self, row: int, width: int, scroll_x: int, selected: bool) -> Strip:
        index, level, text = self.store.line(row)
        digits = max(5, len(str(self.store.total)))
        base = self.st("cursor") if selected else self.st()
        gutter = self.st("gutter") + Style(background=base.background)
        text_style = self.st(f"{LEVELS[level]}") + Style(background=base.background)
        code_width = max(0, width - digits - 3)
        visible = text[scroll_x: scroll_x + code_width]
        segments = [Segment(f"{index + 1:>{digits}} ", gutter.rich_style),
                    Segment(_TAG.get(level, " ") + " ", text_style.rich_style)]
        if self.query and visible:
            segments += _highlight_matches(visible, self.query, text_style, self.st("match"))
        elif visible:
            segments.append(Segment(visible, text_style.rich_style))
        return Strip(segments).adjust_cell_length(width, base.rich_style)


def _highlight_matches(text: str, query: str, style: Style, match: Style) -> list[Segment]:
    needle, fold = smartcase(query)
    haystack = text.lower() if fold else text
    segments: list[Segment] = []
    pos = 0
    match_style = (style + Style(background=match.background)).rich_style
    plain = style.rich_style
    while needle and (found := haystack.find(needle, pos)) != -1:
        if found > pos:
            segments.append(Segment(text[pos:found], plain))
        segments.append(Segment(text[found: found + len(needle)], match_style))
        pos = found + len(needle)
    if pos < len(text):
        segments.append(Segment(text[pos:], plain))
    return segments

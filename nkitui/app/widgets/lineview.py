"""A virtualised, keyboard-driven list of rows with a cursor (Textual's Line API).

Only the rows on screen are drawn, so a view over a million rows costs what a view over fifty does.
Subclasses say how many rows there are and draw one row; this class owns the cursor, scrolling,
keyboard navigation, a selection of rows (anchor to cursor) and a cache of drawn rows that is dropped
when the data or the theme changes.
"""

from __future__ import annotations

from rich.segment import Segment
from typing import ClassVar

from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.style import Style


class LineView(ScrollView, can_focus=True):
    """Rows with a cursor. Subclasses implement `row_count` and `render_row`."""

    DEFAULT_CSS = """
    LineView {
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 0;  /* long lines scroll with ←/→; no row lost to a scrollbar */
    }
    """

    cursor: reactive[int] = reactive(0, init=False)

    # Named styles written with theme variables, resolved per theme and cached. Line-API widgets
    # use these instead of component classes: component classes are restyled (as extra DOM nodes)
    # on every focus change, which made switching areas slow.
    STYLES: ClassVar[dict[str, str]] = {"": "$foreground on $surface"}

    class CursorMoved(Message):
        """The cursor moved to `row` (posted after the move, for status lines and evidence)."""

        def __init__(self, view: "LineView", row: int) -> None:
            super().__init__()
            self.view = view
            self.row = row

        @property
        def control(self) -> "LineView":
            return self.view

    class SelectionChanged(Message):
        """A selection of rows started or ended (moving the cursor while selecting posts CursorMoved)."""

        def __init__(self, view: "LineView") -> None:
            super().__init__()
            self.view = view

        @property
        def control(self) -> "LineView":
            return self.view

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._row_cache: LRUCache[tuple, Strip] = LRUCache(1024)
        self._generation = 0
        self._content_width = 0
        self._styles: dict[tuple[str, str], Style] = {}
        self.empty_message = ""  # shown on the first line when there are no rows
        self.selection_anchor: int | None = None  # the row a selection started on; it ends at the cursor

    @property
    def cached_row_count(self) -> int:
        """How many drawn rows are kept: bounded by the view's height, not by the number of rows."""
        return len(self._row_cache)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.restyle()

    def restyle(self) -> None:
        """Forget resolved styles and drawn rows: a reloaded theme may change colours under the same name."""
        self._styles.clear()
        self._generation += 1
        self._row_cache.clear()
        self.refresh()

    def st(self, name: str = "") -> Style:
        """The named style of STYLES for the current theme."""
        key = (self.app.theme, name)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self.app.stylesheet.parse_style(self.STYLES[name])
        return style

    # --- for subclasses ------------------------------------------------------------------------

    def row_count(self) -> int:
        return 0

    def render_row(self, row: int, width: int, selected: bool) -> Strip:
        """Draw one row at full virtual width; scrolling and cropping happen here in the base."""
        return Strip.blank(width, self.st().rich_style)

    def cursor_visible(self) -> bool:
        return self.has_focus

    # --- data changes --------------------------------------------------------------------------

    def data_changed(self, content_width: int | None = None, layout: bool = True) -> None:
        """Call after the rows change: drops drawn rows and updates the scroll extent.

        With layout=False the extent changes without a layout pass of the screen (scrolling and
        drawing use it at once; the scrollbar catches up at the next layout): for views that grow
        many times a second.
        """
        self._generation += 1
        self._row_cache.clear()
        if content_width is not None:
            self._content_width = content_width
        count = self.row_count()
        size = Size(self._content_width, count)
        if layout:
            self.virtual_size = size
        else:
            self.set_reactive(Widget.virtual_size, size)
        if count == 0:
            self.set_reactive(LineView.cursor, 0)
        elif self.cursor >= count:
            self.set_reactive(LineView.cursor, count - 1)
        self.refresh()

    def on_focus(self) -> None:
        self._generation += 1
        self.refresh()

    def on_blur(self) -> None:
        self._generation += 1
        self.refresh()

    # --- drawing -------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        width = self.scrollable_content_region.width
        if row >= self.row_count():
            if row == 0 and self.empty_message:
                return self.strip_of([(f" {self.empty_message}", self.st())], width, self.st())
            return Strip.blank(width, self.st().rich_style)
        selected = row == self.cursor and self.cursor_visible()
        key = (row, selected, self.in_selection(row), width, scroll_x, self._generation)
        strip = self._row_cache.get(key)
        if strip is None:
            strip = self.draw_row(row, width, scroll_x, selected)
            self._row_cache[key] = strip
        return strip

    def draw_row(self, row: int, width: int, scroll_x: int, selected: bool) -> Strip:
        """Row `row` cropped to the visible columns. Override for rows with fixed parts (gutters)."""
        full = self.render_row(row, scroll_x + width, selected)
        return full.crop_extend(scroll_x, scroll_x + width, self.st().rich_style)

    # --- helpers for drawing -------------------------------------------------------------------

    def strip_of(self, parts: list[tuple[Content | str, Style]], width: int, fill: Style) -> Strip:
        """Join (content, style) parts into one strip exactly `width` cells wide."""
        segments: list[Segment] = []
        for content, style in parts:
            if isinstance(content, str):
                if content:
                    segments.append(Segment(content, style.rich_style))
            else:
                segments.extend(content.render_segments(style))
        strip = Strip(segments)
        return strip.adjust_cell_length(width, fill.rich_style)

    # --- cursor and navigation -----------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        if self.selection_anchor is not None:
            self.refresh()  # the selection grew or shrank: every row between may change
        else:
            self.refresh_row(old)
            self.refresh_row(new)
        self.scroll_cursor_visible()
        self.post_message(self.CursorMoved(self, new))

    def refresh_row(self, row: int) -> None:
        y = row - self.scroll_offset.y
        if 0 <= y < self.size.height:
            self.refresh_lines(y)

    def scroll_cursor_visible(self, center: bool = False) -> None:
        height = max(1, self.scrollable_content_region.height)
        top = self.scroll_offset.y
        row = self.cursor
        if center and not (top <= row < top + height):
            self.scroll_to(y=max(0, row - height // 2), animate=False, immediate=True, force=True)
        elif row < top:
            self.scroll_to(y=row, animate=False, immediate=True, force=True)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False, immediate=True, force=True)

    def move_cursor(self, row: int, center: bool = False) -> None:
        count = self.row_count()
        if count == 0:
            return
        row = max(0, min(count - 1, row))
        if row == self.cursor:
            self.scroll_cursor_visible(center)
            return
        # Decide before the cursor moves: its watcher scrolls the row just into view at an edge, after
        # which a jump (next finding, search match) would no longer look off screen and never centre.
        top, height = self.scroll_offset.y, max(1, self.scrollable_content_region.height)
        off_screen = not (top <= row < top + height)
        self.cursor = row
        if center and off_screen:
            self.scroll_to(y=max(0, row - height // 2), animate=False, immediate=True, force=True)

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor + 1)

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor - 1)

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor + self._page())

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor - self._page())

    def action_cursor_top(self) -> None:
        self.move_cursor(0)

    def action_cursor_bottom(self) -> None:
        self.move_cursor(self.row_count() - 1)

    def action_scroll_left(self) -> None:
        self.scroll_to(x=max(0, self.scroll_offset.x - 8), animate=False, force=True)

    def action_scroll_right(self) -> None:
        self.scroll_to(x=min(self.max_scroll_x, self.scroll_offset.x + 8), animate=False, force=True)

    # --- selection -----------------------------------------------------------------------------

    def selection(self) -> tuple[int, int] | None:
        """The selected rows (first, last), inclusive, or None when nothing is selected."""
        if self.selection_anchor is None:
            return None
        return min(self.selection_anchor, self.cursor), max(self.selection_anchor, self.cursor)

    def in_selection(self, row: int) -> bool:
        span = self.selection()
        return span is not None and span[0] <= row <= span[1]

    def start_selection(self) -> None:
        if self.row_count() == 0:
            return
        self.selection_anchor = self.cursor
        self._selection_changed()

    def clear_selection(self) -> None:
        if self.selection_anchor is not None:
            self.selection_anchor = None
            self._selection_changed()

    def _selection_changed(self) -> None:
        self.refresh()
        self.refresh_bindings()  # the Escape binding exists only while selecting
        self.post_message(self.SelectionChanged(self))

    def action_toggle_selection(self) -> None:
        if self.selection_anchor is None:
            self.start_selection()
        else:
            self.clear_selection()

    def action_cancel_selection(self) -> None:
        self.clear_selection()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_selection":
            # Without a selection Escape is not ours: it goes on to the screen (and is not in the footer).
            return self.selection_anchor is not None
        return True

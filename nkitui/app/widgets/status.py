"""A one-line status widget that repaints without a layout pass.

Static.update() asks for a new layout of the whole screen (its size may change). Status lines have
a fixed height of one row, so they only need a repaint: while a run streams its log, layouts at the
repaint rate would cost more than the log itself.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


class StatusLine(Widget):
    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, content: Content | str = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._content = Content(content) if isinstance(content, str) else content

    def update(self, content: Content | str = "") -> None:
        content = Content(content) if isinstance(content, str) else content
        if content == self._content:
            return
        self._content = content
        self.refresh()

    @property
    def content(self) -> Content:
        return self._content

    def render(self) -> Content:
        return self._content

"""A one-line status widget that repaints without a layout pass, and picks the longest text that fits.

Static.update() asks for a new layout of the whole screen (its size may change). Status lines have
a fixed height of one row, so they only need a repaint: while a run streams its log, layouts at the
repaint rate would cost more than the log itself.

`update(full, shorter, shortest)` takes variants, longest first: the line shows the first that fits
its width (at 80 columns a compact label beats a long one cut off mid-word), else the last, cut
with an ellipsis.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


def fitting(variants: tuple[Content, ...], width: int) -> Content:
    """The first variant no wider than `width`, else the last (the caller's shortest)."""
    for variant in variants:
        if variant.cell_length <= width:
            return variant
    return variants[-1]


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
        self._variants: tuple[Content, ...] = (Content(content) if isinstance(content, str) else content,)

    def update(self, content: Content | str = "", *shorter: Content | str) -> None:
        variants = tuple(Content(c) if isinstance(c, str) else c for c in (content, *shorter))
        if variants == self._variants:
            return
        self._variants = variants
        self.refresh()

    @property
    def content(self) -> Content:
        """The longest variant (what the line says when it has room)."""
        return self._variants[0]

    @property
    def shown(self) -> Content:
        """The variant that fits the line's current width."""
        return fitting(self._variants, self.size.width)

    def render(self) -> Content:
        return self.shown

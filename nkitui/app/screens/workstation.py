"""The main screen: header, area bar, the four areas (tabs when narrow, a 2x2 split when wide), footer."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Container
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget

from nkitui.app.widgets.engines.area import EnginesArea
from nkitui.app.widgets.footer import KeyFooter
from nkitui.app.widgets.header import AREAS, AreaBar, AuditHeader
from nkitui.app.widgets.rubric.area import RubricArea
from nkitui.app.widgets.run.area import RunArea
from nkitui.app.widgets.source.area import SourceArea

SPLIT_MIN_WIDTH = 140
SPLIT_MIN_HEIGHT = 40


def choose_layout(preference: str, width: int, height: int) -> str:
    if preference in ("tabs", "split"):
        return preference
    return "split" if width >= SPLIT_MIN_WIDTH and height >= SPLIT_MIN_HEIGHT else "tabs"


class WorkstationScreen(Screen):
    AUTO_FOCUS = None  # the app focuses the first area once the task is shown

    DEFAULT_CSS = """
    WorkstationScreen #areas { height: 1fr; }
    WorkstationScreen.-tabs #areas > .area { height: 1fr; }
    WorkstationScreen.-split #areas {
        layout: grid; grid-size: 2 2; grid-columns: 3fr 2fr; grid-rows: 1fr 1fr;
    }
    WorkstationScreen.-split #areas > .area {
        border: round $panel-lighten-2; border-title-color: $text-muted;
    }
    WorkstationScreen.-split #areas > .area:focus-within {
        border: round $primary; border-title-color: $text-primary; border-title-style: bold;
    }
    """

    class Ready(Message):
        """The areas are mounted: the app can start filling them."""

    def __init__(self) -> None:
        super().__init__(id="workstation")
        self.layout_preference = "auto"
        self.layout_name = "tabs"
        self.current_area = "source"

    def compose(self) -> ComposeResult:
        yield AuditHeader(id="header")
        yield AreaBar(id="area-bar")
        with Container(id="areas"):
            # DOM order is the split layout's reading order: Source | Rubric over Run | Engines.
            yield SourceArea(id="area-source", classes="area")
            yield RubricArea(id="area-rubric", classes="area")
            yield RunArea(id="area-run", classes="area")
            yield EnginesArea(id="area-engines", classes="area")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.apply_layout()
        self._mark_active(self.current_area)
        self.post_message(self.Ready())

    def on_resize(self, event: events.Resize) -> None:
        self.apply_layout()

    def area(self, name: str) -> Widget:
        return self.query_one(f"#area-{name}")

    def apply_layout(self, preference: str | None = None) -> None:
        if preference is not None:
            self.layout_preference = preference
        size = self.app.size
        name = choose_layout(self.layout_preference, size.width, size.height)
        self.layout_name = name
        self.set_class(name == "tabs", "-tabs")
        self.set_class(name == "split", "-split")
        self.query_one(AreaBar).layout_name = name
        self._show_only(self.current_area)

    def show_area(self, name: str, focus: bool = True) -> None:
        if name not in AREAS:
            return
        if self.maximized is not None:
            self.minimize()
        self._mark_active(name)
        if focus:
            area = self.area(name)
            self.call_after_refresh(area.focus_primary)

    def _mark_active(self, name: str) -> None:
        self.current_area = name
        self._show_only(name)
        self.query_one(AreaBar).current = name

    def _show_only(self, name: str) -> None:
        # Inline display rather than a CSS class: a class change would restyle every widget in the
        # areas, a display change only relayouts.
        for area in AREAS:
            self.area(area).display = self.layout_name == "split" or area == name

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        node = event.widget
        while node is not None and node is not self:
            if isinstance(node, Widget) and node.has_class("area"):
                name = (node.id or "").removeprefix("area-")
                if name in AREAS and name != self.current_area:
                    self._mark_active(name)
                return
            node = node.parent

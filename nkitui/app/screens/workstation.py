"""The main screen: header, area bar, the four areas (tabs when narrow, a 2x2 split when wide), footer.

Zoom (z) gives one area all the room between the header and the footer; the header and the footer
stay, and the area bar says how to get back.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget

from nkitui.app import keymap
from nkitui.app.widgets.footer import KeyFooter
from nkitui.app.widgets.header import AREAS, AreaBar, AuditHeader
from nkitui.app.widgets.status import StatusLine

if TYPE_CHECKING:
    from nkitui.app.widgets.engines.area import EnginesArea
    from nkitui.app.widgets.rubric.area import RubricArea
    from nkitui.app.widgets.run.area import RunArea
    from nkitui.app.widgets.source.area import SourceArea

SPLIT_MIN_WIDTH = 140
SPLIT_MIN_HEIGHT = 40


def choose_layout(preference: str, width: int, height: int) -> str:
    if preference in ("tabs", "split"):
        return preference
    return "split" if width >= SPLIT_MIN_WIDTH and height >= SPLIT_MIN_HEIGHT else "tabs"


class DeferredArea(Widget):
    """Stands in for an area until the first frame is drawn, then imports it and takes its place."""

    DEFAULT_CSS = "DeferredArea { display: none; }"

    def __init__(self, name: str, module: str, class_name: str) -> None:
        super().__init__()
        self.area_name = name
        self.module = module
        self.class_name = class_name

    def on_mount(self) -> None:
        self.call_after_refresh(self._replace)

    async def _replace(self) -> None:
        parent = self.parent
        if not isinstance(parent, Widget) or not parent.is_attached or self.app._closing:
            return
        area_class = getattr(importlib.import_module(self.module), self.class_name)
        await parent.mount(area_class(id=f"area-{self.area_name}", classes="area"), after=self)
        await self.remove()


class WorkstationScreen(Screen):
    AUTO_FOCUS = None  # the app focuses the first area once the task is shown

    DEFAULT_CSS = """
    WorkstationScreen #areas { height: 1fr; }
    WorkstationScreen.-tabs #areas > .area { height: 1fr; display: none; }  /* until shown (inline) */
    WorkstationScreen.-split #areas {
        layout: grid; grid-size: 2 2; grid-columns: 3fr 2fr; grid-rows: 1fr 1fr;
    }
    WorkstationScreen.-split #areas > .area {
        border: round $panel-lighten-2; border-title-color: $text-muted;
    }
    WorkstationScreen.-split #areas > .area:focus-within {
        border: round $primary; border-title-color: $text-primary; border-title-style: bold;
    }
    WorkstationScreen.-split.-zoomed #areas { layout: vertical; }
    WorkstationScreen.-split.-zoomed #areas > .area { height: 1fr; }
    """

    BINDINGS = [Binding("escape", "unzoom", "Unzoom", show=False, id="workstation.unzoom")]

    class Ready(Message):
        """The areas are mounted: the app can start filling them."""

    def __init__(self) -> None:
        super().__init__(id="workstation")
        self.layout_preference = "auto"
        self.layout_name = "tabs"
        self.current_area = "source"
        self.zoomed: str | None = None  # the area that has the whole screen (z), if any

    def compose(self) -> ComposeResult:
        yield AuditHeader(id="header")
        yield AreaBar(id="area-bar")
        with Container(id="areas"):
            # DOM order is the split layout's reading order: Source | Rubric over Run | Engines.
            # The first frame shows the header at once; the areas are imported and mounted right
            # after it (building and styling them would delay the first frame).
            yield StatusLine("Opening the task…", id="areas-loading", classes="strip")
            yield DeferredArea("source", "nkitui.app.widgets.source.area", "SourceArea")
            yield DeferredArea("rubric", "nkitui.app.widgets.rubric.area", "RubricArea")
            yield DeferredArea("run", "nkitui.app.widgets.run.area", "RunArea")
            yield DeferredArea("engines", "nkitui.app.widgets.engines.area", "EnginesArea")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.apply_layout()
        self._mark_active(self.current_area)
        self.post_message(self.Ready())

    def on_resize(self, event: events.Resize) -> None:
        self.apply_layout()

    def area(self, name: str) -> Widget:
        return self.query_one(f"#area-{name}")

    # Typed areas (imported when asked for: the areas are imported after the first frame, and are by then).

    @property
    def source_area(self) -> SourceArea:
        from nkitui.app.widgets.source.area import SourceArea

        return self.query_one("#area-source", SourceArea)

    @property
    def run_area(self) -> RunArea:
        from nkitui.app.widgets.run.area import RunArea

        return self.query_one("#area-run", RunArea)

    @property
    def engines_area(self) -> EnginesArea:
        from nkitui.app.widgets.engines.area import EnginesArea

        return self.query_one("#area-engines", EnginesArea)

    @property
    def rubric_area(self) -> RubricArea:
        from nkitui.app.widgets.rubric.area import RubricArea

        return self.query_one("#area-rubric", RubricArea)

    @property
    def areas_mounted(self) -> bool:
        return len(self.query(".area")) == len(AREAS)

    def apply_layout(self, preference: str | None = None) -> None:
        if preference is not None:
            self.layout_preference = preference
        size = self.app.size
        name = choose_layout(self.layout_preference, size.width, size.height)
        if name == self.layout_name and self.has_class(f"-{name}"):
            return  # a class change restyles the whole screen: only on a real change
        self.layout_name = name
        self.set_class(name == "tabs", "-tabs")
        self.set_class(name == "split", "-split")
        self.query_one(AreaBar).layout_name = name
        self._show_only(self.current_area)

    def show_area(self, name: str, focus: bool = True) -> None:
        if name not in AREAS:
            return
        if not self.areas_mounted:
            self.call_after_refresh(self.show_area, name, focus)
            return
        if self.zoomed is not None:
            self.unzoom()
        self._mark_active(name)
        if focus:
            area = self.area(name)
            # Focus moves at once to the area's first focusable widget: a key typed right after the
            # digit ("2" then "m") must reach the area, and Widget.focus() only queues the change.
            # The area's own choice (focus_primary) follows after the next refresh.
            chain = [w for w in self.focus_chain if area in w.ancestors_with_self]
            if chain and self.focused not in chain:
                self.set_focus(chain[0], scroll_visible=False)
            self.call_after_refresh(area.focus_primary)

    def _mark_active(self, name: str) -> None:
        self.current_area = name
        self._show_only(name)
        self.query_one(AreaBar).current = name

    def _show_only(self, name: str) -> None:
        # Inline display rather than a CSS class: a class change would restyle every widget in the
        # areas, a display change only relayouts.
        every = self.layout_name == "split" and self.zoomed is None
        for area in self.query(".area"):
            area.display = every or area.id == f"area-{name}"

    # --- zoom ------------------------------------------------------------------------------------

    def zoom(self, name: str | None = None) -> None:
        """Give one area (the current one) all the room between the header and the footer."""
        name = name or self.current_area
        if name not in AREAS or not self.areas_mounted:
            return
        self.zoomed = name
        self.set_class(True, "-zoomed")
        self._mark_active(name)
        bar = self.query_one(AreaBar)
        bar.zoom_key = keymap.app_key(self, "app.zoom")
        bar.zoomed = name

    def unzoom(self) -> None:
        if self.zoomed is None:
            return
        self.zoomed = None
        self.set_class(False, "-zoomed")
        self.query_one(AreaBar).zoomed = None
        self._show_only(self.current_area)

    def toggle_zoom(self) -> None:
        if self.zoomed is not None:
            self.unzoom()
        else:
            self.zoom()

    def action_unzoom(self) -> None:
        self.unzoom()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "unzoom":
            return self.zoomed is not None  # otherwise Escape is not the screen's
        return True

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        node = event.widget
        while node is not None and node is not self:
            if isinstance(node, Widget) and node.has_class("area"):
                name = (node.id or "").removeprefix("area-")
                if name in AREAS and name != self.current_area:
                    self._mark_active(name)
                return
            node = node.parent

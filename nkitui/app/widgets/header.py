"""The header (task, target, backend, run state) and the area bar (which area is shown or focused)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

AREAS = ("source", "run", "engines", "rubric")
AREA_TITLES = {"source": "Source", "run": "Run", "engines": "Engines", "rubric": "Rubric"}


@dataclass(frozen=True)
class HeaderState:
    task: str = ""
    title: str = ""
    target: str = ""
    backend: str = ""
    backend_note: str = ""  # why auto picked it
    run: str = "idle"  # idle | running | passed | failed | error | cancelled
    run_detail: str = ""  # phase, progress

    def with_(self, **changes: str) -> "HeaderState":
        return replace(self, **changes)


_RUN_STYLE = {
    "idle": "$text-muted", "running": "bold $text-primary", "passed": "bold $text-success",
    "failed": "bold $text-error", "error": "bold $text-error", "cancelled": "$text-warning",
}
_RUN_GLYPH = {"idle": "○", "running": "◐", "passed": "✔", "failed": "✘", "error": "✘", "cancelled": "■"}


class AuditHeader(Widget):
    DEFAULT_CSS = """
    AuditHeader {
        height: 1;
        background: $panel;
        color: $foreground;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    state: reactive[HeaderState] = reactive(HeaderState, layout=False)

    def right_variants(self) -> list[Content]:
        """The target / backend / run part, longest first: labels go before values do."""
        s = self.state
        sep = (" │ ", "$text-muted")
        backend = s.backend or "backend ?"
        glyph = _RUN_GLYPH.get(s.run, "○")
        style = _RUN_STYLE.get(s.run, "")
        run = s.run + (f" {s.run_detail}" if s.run_detail else "")
        # "reopened 1a2b3c" -> "1a2b3c"; a phase and its progress stay whole
        short_detail = s.run_detail.removeprefix("reopened ")
        short_run = s.run + (f" {short_detail}" if short_detail else "")
        target = (s.target or "?", "bold $text-primary")
        value = (backend, "bold $text-primary")
        return [
            Content.assemble(sep, ("target ", "$text-muted"), target, sep, ("backend ", "$text-muted"), value, sep,
                             (f"{glyph} {run} ", style)),
            Content.assemble(sep, target, sep, value, sep, (f"{glyph} {run} ", style)),
            Content.assemble(sep, target, sep, value, sep, (f"{glyph} {short_run} ", style)),
            Content.assemble(sep, target, sep, (backend.removesuffix(" (auto)"), "bold $text-primary"), sep,
                             (f"{glyph} {s.run} ", style)),
        ]

    def render(self) -> Content:
        s = self.state
        sep = (" │ ", "$text-muted")
        name = Content.assemble((" nkitui", "bold $text-accent"), sep, (s.task or "no task", "bold"))
        left = Content.assemble(name, (f" {s.title}" if s.title else "", "$text-muted"))
        width = self.size.width
        # The task id is the one thing never cut: the right part shortens until the id fits whole.
        variants = self.right_variants()
        right = next((r for r in variants if name.cell_length + r.cell_length <= width), variants[-1])
        room = max(0, width - right.cell_length)
        if left.cell_length > room:
            left = left.truncate(room, ellipsis=True)
        return Content.assemble(left.pad_right(room - left.cell_length), right)


class AreaBar(Widget):
    """1 Source  2 Run  3 Engines  4 Rubric, with badges; the current area highlighted."""

    DEFAULT_CSS = """
    AreaBar {
        height: 1;
        background: $surface;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    current: reactive[str] = reactive("source")
    badges: reactive[dict] = reactive(dict, always_update=True)
    layout_name: reactive[str] = reactive("tabs")

    def render(self) -> Content:
        parts: list[tuple[str, str] | str] = [" "]
        for number, area in enumerate(AREAS, 1):
            active = area == self.current
            style = "reverse bold $text-primary" if active else ""
            parts.append((f" {number} {AREA_TITLES[area]} ", style))
            badge = self.badges.get(area)
            if badge:
                parts.append((f"{badge} ", "$text-muted"))
            parts.append(" ")
        bar = Content.assemble(*parts)
        hint = Content.styled(f" {self.layout_name} · F1 help · ? keys · : commands", "$text-muted")
        if bar.cell_length + hint.cell_length <= self.size.width:
            bar = Content.assemble(bar, hint)
        return bar

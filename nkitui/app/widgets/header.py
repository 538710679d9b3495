"""The header (task, target, backend, auditor, run state) and the area bar (which area is shown or
focused, or which one is zoomed and how to get back)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

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
    auditor: str = ""  # who submits reviews (a name, short)
    auditor_warning: bool = False  # a shared account or only the OS user: the auditor should say who they are

    def with_(self, **changes: Any) -> "HeaderState":
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
        who = s.auditor or "…"
        who_style = "bold $text-warning" if s.auditor_warning else ""
        auditor = (f"⚠ {who}" if s.auditor_warning else who, who_style)
        short_who = who.split()[0] if who.split() else who
        short_auditor = (f"⚠ {short_who}" if s.auditor_warning else short_who, who_style)
        plain_backend = (backend.removesuffix(" (auto)"), "bold $text-primary")
        labelled = (sep, ("target ", "$text-muted"), target, sep, ("backend ", "$text-muted"), value)
        bare = (sep, target, sep, value)
        run_part, short_run_part = (f"{glyph} {run} ", style), (f"{glyph} {short_run} ", style)
        return [
            Content.assemble(*labelled, sep, ("auditor ", "$text-muted"), auditor, sep, run_part),
            Content.assemble(*labelled, sep, auditor, sep, run_part),
            Content.assemble(*labelled, sep, short_auditor, sep, run_part),
            Content.assemble(*labelled, sep, short_auditor, sep, short_run_part),
            Content.assemble(*bare, sep, auditor, sep, run_part),
            Content.assemble(*bare, sep, short_auditor, sep, short_run_part),
            Content.assemble(sep, target, sep, plain_backend, sep, short_auditor, sep, (f"{glyph} {s.run} ", style)),
            Content.assemble(sep, target, sep, short_auditor, sep, (f"{glyph} {s.run} ", style)),
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
    zoomed: reactive[str | None] = reactive(None)  # the zoomed area: the bar says how to get back
    zoom_key: reactive[str] = reactive("z")

    def render(self) -> Content:
        if self.zoomed is not None:
            title = AREA_TITLES.get(self.zoomed, self.zoomed)
            return Content.assemble((f" ⤢ {title} zoomed ", "reverse bold $text-primary"),
                                    (f"  {self.zoom_key} or Escape: back to the {self.layout_name} layout", "$text-muted"))
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

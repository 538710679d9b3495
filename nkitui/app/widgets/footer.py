"""A one-line key footer drawn as text (Textual's Footer rebuilds a widget per key on every focus
change, which made moving between areas slow).

When the keys do not all fit (80 columns), whole entries are left out, never cut mid-word: first
"? Keys" and "^p Commands" (the area bar and F1 name them too), then the entries, in order, that no
longer fit; "f1 Help" always stays, as help lists every key that works where the auditor is, and so
does "esc Queue" in a task opened from the queue (the way back must not be a secret).

The footer is also the app's message line: a notice shows here for a few seconds instead of the keys
(like an editor's echo area), so it covers no log line and no finding; every notice stays readable
in full on the notices screen.
"""

from __future__ import annotations

from textual.content import Content
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget

PINNED = ("app.queue", "app.help")
DROPPED_FIRST = ("app.palette", "app.keys")


class KeyFooter(Widget):
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        background: $footer-background;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.message: Content | None = None  # the notice shown instead of the keys, while it lasts
        self._more = ""
        self._message_timer: Timer | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def flash(self, message: Content, seconds: float, more: str = "") -> None:
        """Show `message` instead of the keys for `seconds`; `more` ("! all notices") is added when the
        message does not fit whole."""
        self.message = message
        self._more = more
        if self._message_timer is not None:
            self._message_timer.stop()
        self._message_timer = self.set_timer(max(0.5, seconds), self.clear_message)
        self.refresh()

    def clear_message(self) -> None:
        self.message = None
        self._message_timer = None
        self.refresh()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        self.refresh()

    def entries(self) -> list[tuple[str, Content]]:
        """(binding id, " key description ") for each binding shown, in the screen's order."""
        entries: list[tuple[str, Content]] = []
        seen: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if not binding.show or not binding.description:
                continue
            ident = binding.id or binding.action
            if ident in seen:
                continue  # several keys for one binding: the footer shows the first
            seen.add(ident)
            style = "" if active.enabled else " 50%"
            entries.append((ident, Content.assemble(
                (f" {self.app.get_key_display(binding)} ", f"bold $footer-key-foreground{style}"),
                (f"{binding.description} ", f"$footer-description-foreground{style}"))))
        return entries

    def render(self) -> Content:
        width = self.size.width
        if self.message is not None:
            line = Content.assemble(" ", self.message)
            if line.cell_length > width and self._more:
                more = Content.styled(f" {self._more} ", "$text-muted")
                line = Content.assemble(line.truncate(max(0, width - more.cell_length), ellipsis=True), more)
            return line
        entries = self.entries()

        def total(items: list[tuple[str, Content]]) -> int:
            return sum(e.cell_length for _, e in items)

        for ident in DROPPED_FIRST:
            if total(entries) <= width:
                break
            entries = [item for item in entries if item[0] != ident]
        if total(entries) > width:
            pinned = [item for item in entries if item[0] in PINNED]
            room = width - total(pinned)
            shown: list[tuple[str, Content]] = []
            for item in entries:
                if item[0] in PINNED:
                    continue
                if item[1].cell_length > room:
                    continue  # a shorter entry further on may still fit
                shown.append(item)
                room -= item[1].cell_length
            entries = shown + pinned
        return Content("").join(e for _, e in entries)

"""A one-line key footer drawn as text (Textual's Footer rebuilds a widget per key on every focus
change, which made moving between areas slow)."""

from __future__ import annotations

from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget


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

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        self.refresh()

    def render(self) -> Content:
        parts: list[tuple[str, str]] = []
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
            parts.append((f" {self.app.get_key_display(binding)} ", f"bold $footer-key-foreground{style}"))
            parts.append((f"{binding.description} ", f"$footer-description-foreground{style}"))
        return Content.assemble(*parts)

"""The command palette: commands that fit the current state (only what can be done now).

The app lists them (`NkituiApp.palette_commands`); this module only knows their shape and how the
palette asks for them, so it imports nothing of the app (no import circle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    run: Callable[[], object]


@runtime_checkable
class CommandSource(Protocol):
    """What the palette needs of the app: the commands that fit the current state."""

    def palette_commands(self) -> list[PaletteCommand]: ...


def palette_commands(source: CommandSource) -> list[PaletteCommand]:
    return source.palette_commands()


class NkituiCommands(Provider):
    def _commands(self) -> list[PaletteCommand]:
        app = self.app
        return app.palette_commands() if isinstance(app, CommandSource) else []

    async def discover(self) -> Hits:
        for command in self._commands():
            yield DiscoveryHit(command.title, command.run, help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self._commands():
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(score, matcher.highlight(command.title), command.run, help=command.help)

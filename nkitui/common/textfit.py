"""Text that fits the width it is given: wrapped at spaces with a hanging indent, never inside a number,
and a path or `file.py::name` too long for a line broken after a `/` or `::`, not mid-word.

    wrap("checking flawed_bf16_accum ...", 80, indent="  ", subsequent="      ")   # -> list of lines
    FitText("emulator: matmul_nki.py::matmul_kernel", subsequent="  ")          # a Rich renderable

`wrap` is plain Python (the command line's progress lines, history, errors); `FitText` wraps the same
way inside Rich tables and panels, at whatever width Rich gives the cell. Runs of spaces inside a line
are kept (columns made with two spaces stay apart); at a break they are dropped.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.cells import cell_len

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.measure import Measurement

__all__ = ["wrap", "FitText"]

_TOKEN = re.compile(r"(\s*)(\S+)")
# Where a word too long for a line may break: after a path separator, a `::`, or `,`/`;` in a list.
_WORD_BREAK = re.compile(r"(?<=/)|(?<=::)|(?<=[,;])")


def _split_word(word: str, room: int) -> list[str]:
    """`word` in pieces of at most `room` cells, broken after separators where possible."""
    if cell_len(word) <= room or room < 1:
        return [word]
    parts = [p for p in _WORD_BREAK.split(word) if p]
    pieces: list[str] = []
    current = ""
    for part in parts:
        if current and cell_len(current + part) > room:
            pieces.append(current)
            current = ""
        while cell_len(part) > room:  # no separator inside: cut at the width (rare: hashes, long names)
            head, part = part[:room], part[room:]
            if current:
                pieces.append(current)
                current = ""
            pieces.append(head)
        current += part
    if current:
        pieces.append(current)
    return pieces


def wrap(text: str, width: int | None, indent: str = "", subsequent: str | None = None) -> list[str]:
    """`text` as lines of at most `width` cells (None: no limit), the first behind `indent`, the rest
    behind `subsequent` (default: `indent`). Newlines in `text` start new paragraphs (same indents)."""
    subsequent = indent if subsequent is None else subsequent
    lines: list[str] = []
    for paragraph in text.split("\n"):
        if width is None or cell_len(indent + paragraph) <= width:
            lines.append(indent + paragraph)
            continue
        room = max(8, width - cell_len(subsequent))
        line, empty = indent, True
        for n, (glue, word) in enumerate(_TOKEN.findall(paragraph)):
            for k, piece in enumerate(_split_word(word, room)):
                sep = glue if k == 0 else ""
                if empty:  # the paragraph's own leading spaces are kept; a break's are dropped
                    line, empty = line + (glue if n == 0 else "") + piece, False
                elif cell_len(line + sep + piece) <= width:
                    line += sep + piece
                else:
                    lines.append(line.rstrip())
                    line = subsequent + piece
        lines.append(line.rstrip() if not empty else line)
    return lines


class FitText:
    """A Rich renderable: `text` wrapped by `wrap` to the width Rich gives it, with a hanging indent."""

    def __init__(self, text: str, style: str = "", indent: str = "", subsequent: str | None = None) -> None:
        self.text = text
        self.style = style
        self.indent = indent
        self.subsequent = indent if subsequent is None else subsequent

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        longest_line = max((cell_len(self.indent + line) for line in self.text.split("\n")), default=0)
        # the narrowest it can go without cutting a word: its longest word (pieces of paths excepted)
        words = [w for w in self.text.split() if w]
        longest_word = max((cell_len(p) for w in words for p in _split_word(w, 24)), default=0)
        minimum = min(longest_line, longest_word + cell_len(self.subsequent))
        return Measurement(minimum, longest_line).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        for line in wrap(self.text, options.max_width, self.indent, self.subsequent):
            yield Text(line, style=self.style, no_wrap=True, overflow="fold", end="\n")

    def __str__(self) -> str:
        return self.text

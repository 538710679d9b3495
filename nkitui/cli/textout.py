"""Output that fits the terminal it is given: the width (COLUMNS, else the terminal's, else none for a
pipe or a file), plain text wrapped with hanging indents, and a Rich console of that width.

    print_wrapped(f"  {name:<10} {status}  {detail}", subsequent=" " * 33, file=sys.stderr)
    console().print(table)        # COLUMNS=80 gives an 80-column table, a pipe a wide one
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import IO, Any

from nkitui.common.textfit import wrap

WIDE = 120  # a pipe or a file has no width to fit: tables keep their rows whole up to this


def given_width(stream: IO[str] | None = None) -> int | None:
    """The width output to `stream` must fit: COLUMNS when set, else the terminal's; None for a pipe
    or a file (nothing to fit)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def print_wrapped(text: str, *, indent: str = "", subsequent: str | None = None, file: IO[str] | None = None,
                  width: int | None = None) -> None:
    """Print `text` wrapped to the width `file` is given (unwrapped into a pipe or a file)."""
    stream = sys.stdout if file is None else file
    limit = width if width is not None else given_width(stream)
    for line in wrap(text, limit, indent, subsequent):
        stream.write(line + "\n")


def console(stream: IO[str] | None = None, **kwargs: Any):
    """A Rich console as wide as the output is given (a pipe or a file: WIDE, so rows stay whole)."""
    from rich.console import Console

    width = given_width(stream if stream is not None else sys.stdout)
    return Console(file=stream, width=width or WIDE, highlight=False, **kwargs)


def print_styled(text: str, style: str = "", *, indent: str = "", subsequent: str | None = None,
                 file: IO[str] | None = None) -> None:
    """Like print_wrapped, in a Rich style (colour where the stream is a terminal)."""
    from rich.console import Console

    from nkitui.common.textfit import FitText

    stream = sys.stdout if file is None else file
    width = given_width(stream)
    out = Console(file=stream, width=width or 1_000_000, highlight=False)
    out.print(FitText(text, style=style, indent=indent, subsequent=subsequent))


class ParagraphHelpFormatter(argparse.HelpFormatter):
    """argparse's help, with a description or epilog of several paragraphs kept as paragraphs, each
    reflowed to the terminal's width (RawDescriptionHelpFormatter keeps the source's line breaks, which
    run past 80 columns)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(super(ParagraphHelpFormatter, self)._fill_text(para, width, indent)
                           for para in text.split("\n\n"))

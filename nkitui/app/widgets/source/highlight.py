"""Syntax highlighting of whole files into one Content per line (theme-aware styles, resolved at draw)."""

from __future__ import annotations

from pathlib import PurePath

from textual.content import Content
from textual.highlight import highlight

TAB_SIZE = 4
_LANGUAGES = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".py": "python", ".toml": "toml",
              ".md": "markdown"}


def language_for(path: str) -> str:
    return _LANGUAGES.get(PurePath(path).suffix.lower(), "text")


def highlight_lines(text: str, language: str) -> list[Content]:
    """One highlighted Content per line of `text` (tabs expanded)."""
    if not text:
        return []
    text = text.expandtabs(TAB_SIZE)
    n_lines = len(text.splitlines())
    content = highlight(text, language=language, tab_size=TAB_SIZE)
    lines = content.split("\n", allow_blank=True)
    # The lexer may add a final newline; keep exactly the file's lines.
    lines = lines[:n_lines]
    while len(lines) < n_lines:
        lines.append(Content(""))
    return lines

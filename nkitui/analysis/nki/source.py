"""Source text of AST nodes, for the snippets findings quote (`nl.load(a[i, j])`).

Python's `ast` gives column offsets in UTF-8 bytes, so the lines are kept as bytes and decoded per snippet;
whitespace runs are collapsed so a call split over several lines quotes as one line.
"""

from __future__ import annotations

import ast


class SourceText:
    """The port's lines, to quote the code behind any AST node."""

    def __init__(self, source: str):
        self.lines = [line.encode("utf-8") for line in source.splitlines(keepends=True)]

    def text(self, node: ast.AST, limit: int = 160) -> str:
        lineno = getattr(node, "lineno", None)
        end = getattr(node, "end_lineno", None)
        col = getattr(node, "col_offset", None)
        end_col = getattr(node, "end_col_offset", None)
        if lineno is None or end is None or col is None or lineno > len(self.lines):
            return ""
        if lineno == end:
            raw = self.lines[lineno - 1][col:end_col]
        else:
            parts = [self.lines[lineno - 1][col:]]
            parts.extend(self.lines[lineno:end - 1])
            parts.append(self.lines[end - 1][:end_col])
            raw = b"".join(parts)
        out = " ".join(raw.decode("utf-8", "replace").split())
        return out if len(out) <= limit else out[: limit - 1] + "…"

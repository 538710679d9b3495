"""`ast.parse` behind one process-wide lock.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter state, not per thread, so
two threads parsing at once can raise "SystemError: AST constructor recursion depth mismatch" (seen
with 3.11.7 in the session's queue thread pool, which reads several tasks' sources at once). Every
parse nkitui does from code that threads may reach goes through here; parsing is fast, so the lock
costs nothing measurable.

Sources nested deeper than nkitui's recursive analyses can follow (a 2,000-term expression: Python
compiles it, but walking its tree recursively exhausts the interpreter's stack) raise `TooDeep`, a
SyntaxError naming the line, instead of a RecursionError somewhere inside a rule: with `max_depth`
for the analyses, always when the parser itself runs out of stack.
"""

from __future__ import annotations

import ast
import io
import threading
import tokenize
from typing import Literal, overload

_LOCK = threading.Lock()
# How deep a tree the analyses walk (recursive visitors take 2-4 Python frames per level; the interpreter's
# limit is 1,000). Among 11,000 Python files of nkitui, its peers' suites and their site-packages only
# generated sympy tables nest deeper than 100.
ANALYSIS_MAX_DEPTH = 200


class TooDeep(SyntaxError):
    """The source nests deeper than nkitui analyses (`depth` levels at `lineno`)."""

    def __init__(self, lineno: int | None, depth: int | None, limit: int, filename: str = "<unknown>") -> None:
        amount = f"{depth} levels deep" if depth else "too deeply"
        super().__init__(f"code nested {amount}, more than nkitui's analysis follows ({limit} levels): "
                         "split the expression or statement into smaller ones", (filename, lineno or 1, None, None))
        self.depth = depth
        self.limit = limit


@overload
def parse(source: str | bytes, filename: str = ..., mode: Literal["exec"] = ..., *,
          max_depth: int | None = ...) -> ast.Module: ...
@overload
def parse(source: str | bytes, filename: str = ..., *, mode: Literal["eval"], max_depth: int | None = ...) -> ast.Expression: ...
def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", *, max_depth: int | None = None) -> ast.AST:
    """ast.parse(source, filename, mode), one thread at a time. TooDeep when the parser runs out of
    stack, or (with `max_depth`) when the tree nests deeper than that."""
    with _LOCK:
        try:
            tree = ast.parse(source, filename=filename, mode=mode)
        except RecursionError:
            raise TooDeep(_busiest_line(source), None, max_depth or ANALYSIS_MAX_DEPTH, filename) from None
    if max_depth is not None:
        deepest = _deepest(tree, max_depth)
        if deepest is not None:
            raise TooDeep(deepest[0], deepest[1], max_depth, filename)
    return tree


def _deepest(tree: ast.AST, limit: int) -> tuple[int | None, int] | None:
    """(line, depth) of the deepest node when the tree nests deeper than `limit` (walked without
    recursion); None when it does not."""
    best_depth, best_line = 0, None
    stack: list[tuple[ast.AST, int, int | None]] = [(tree, 0, None)]
    while stack:
        node, depth, line = stack.pop()
        line = getattr(node, "lineno", line)
        if depth > best_depth:
            best_depth, best_line = depth, line
        stack.extend((child, depth + 1, line) for child in ast.iter_child_nodes(node))
    return (best_line, best_depth) if best_depth > limit else None


def _busiest_line(source: str | bytes) -> int | None:
    """The line starting the logical line with the most tokens: where a source too deep for the parser
    most likely nests (tokenizing needs no recursion)."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    best, best_line, count, start = 0, None, 0, None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if start is None and tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                start = tok.start[0]
            count += 1
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if count > best:
                    best, best_line = count, start
                count, start = 0, None
    except (tokenize.TokenError, SyntaxError):
        pass
    return best_line

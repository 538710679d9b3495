"""`ast.parse` behind one process-wide lock.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter state, not per thread, so
two threads parsing at once can raise "SystemError: AST constructor recursion depth mismatch" (seen
with 3.11.7 in the session's queue thread pool, which reads several tasks' sources at once). Every
parse nkitui does from code that threads may reach goes through here; parsing is fast, so the lock
costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

_LOCK = threading.Lock()


@overload
def parse(source: str | bytes, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse(source: str | bytes, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """ast.parse(source, filename, mode), one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)

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
from typing import Any

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    """ast.parse(source, filename, mode, **kwargs), one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode, **kwargs)

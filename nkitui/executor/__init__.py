"""Background runs of a task's kernel in child processes (see docs/executor.md).

Parent side (the UI and `nkitui check`):

    from nkitui.executor import RunRequest, start_run
    handle = start_run(RunRequest(task_dir, backend="auto"))
    for event in handle.events():      # LogEvent, PhaseEvent, ProgressEvent, ErrorEvent, ResultEvent
        ...
    result = handle.result             # nkitui.evaluate.result.RunResult, always set at the end

This package's __init__ stays import-light: the worker (`python -m nkitui.executor.worker`)
imports it first, and its start-up cost is part of every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - names for type checkers only
    from nkitui.executor.runner import RunHandle, RunRequest, start_run

__all__ = ["RunHandle", "RunRequest", "start_run"]


def __getattr__(name: str) -> Any:
    # Lazy: the parent-side runner pulls in threading/subprocess/numpy-free helpers only when used.
    if name in __all__:
        from nkitui.executor import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'nkitui.executor' has no attribute {name!r}")

"""Background runs of a task's kernel in child processes (see docs/executor.md).

Parent side: `start_worker(WorkerJob(...))` -> RunHandle (runner.py). An evaluation of a task is
started with nkitui.evaluate.run.start_evaluation, which builds the job and the final RunResult.

This package's __init__ stays import-light: the worker (`python -m nkitui.executor.worker`)
imports it first, and its start-up cost is part of every run.
"""

from __future__ import annotations

__all__ = ["RunHandle", "WorkerJob", "WorkerOutcome", "start_worker"]


def __getattr__(name: str) -> object:
    # Lazy (and no `typing` import): the worker imports this package before anything else.
    if name == "WorkerJob":
        from nkitui.executor.job import WorkerJob

        return WorkerJob
    if name in __all__:
        from nkitui.executor import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'nkitui.executor' has no attribute {name!r}")

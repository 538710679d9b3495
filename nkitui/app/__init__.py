"""The Textual workstation (the only package that imports Textual).

    from nkitui.app import run_app
    run_app(Path("my_task"), backend="auto", target=None, theme="dark")  # -> exit code
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["run_app"]


def run_app(task_dir: Path, *, backend: str = "auto", target: str | None = None, theme: str | None = None) -> int:
    """Open the workstation on the task in `task_dir`. Returns the process exit code.

    An invalid task is reported (every problem, with file, field and fix) and returns 2 without
    starting the UI.
    """
    from nkitui.task import TaskError, load_task

    try:
        task = load_task(task_dir)
    except TaskError as exc:
        print(exc, file=sys.stderr)
        return 2
    from nkitui.app.app import NkituiApp
    from nkitui.app.config import load_config

    config = load_config()
    app = NkituiApp(task, backend=None if backend == "auto" else backend, target=target, theme=theme,
                    config=config)
    result = app.run()
    return int(result or 0)

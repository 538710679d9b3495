"""The Textual workstation (the only package that imports Textual).

    from nkitui.app import run_app
    run_app(Path("my_task"), backend="auto", target=None, theme="dark")  # -> exit code
    run_app(Path("tasks"))            # a folder of tasks: the queue (nkitui.app.screens.queue)
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["run_app"]


def open_mode(path: Path) -> str:
    """How a path opens: "task" (a task.toml, or a folder holding one), else "auto" (a queue of the
    tasks found under it, unless the folder turns out to be one discovered task itself or to hold
    none: then the task, as before). Decided without importing anything heavy: the first frame
    must not wait for it."""
    if path.is_file() or (path / "task.toml").is_file():
        return "task"
    return "auto"


def run_app(task_dir: Path, *, backend: str = "auto", target: str | None = None, theme: str | None = None,
            mode: str | None = None) -> int:
    """Open the workstation on the task in `task_dir`, or the queue of the tasks under it. Returns the
    process exit code.

    The first frame comes before the task is loaded (loading imports numpy). A task that cannot be
    loaded is shown with every problem (file, field, fix); quitting then returns 2, as a missing
    folder does at once. `mode`: "task", "queue" or "auto" (default: open_mode(task_dir)).
    """
    task_dir = Path(task_dir).expanduser()
    if not task_dir.exists():
        print(f"{task_dir}: no such file or folder; give the path of a task folder, its task.toml, or a folder of "
              "tasks", file=sys.stderr)
        return 2
    from nkitui.app.app import NkituiApp
    from nkitui.app.config import load_config

    config = load_config()
    app = NkituiApp(task_dir.resolve() if mode != "task" else task_dir, mode=mode or open_mode(task_dir),
                    backend=None if backend == "auto" else backend, target=target, theme=theme, config=config)
    result = app.run()
    if app.task_problems:
        for problem in app.task_problems:
            print(problem, file=sys.stderr)
        return 2
    return int(result or 0)

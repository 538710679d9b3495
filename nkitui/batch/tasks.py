"""The tasks of a batch: every task found recursively under a folder.

A task is a folder holding a task.toml (the folder is not searched further: a task's own
subfolders are part of it), or a folder without one that directly holds an NKI port (a Python
file importing NKI with a decorated kernel), which nkitui.task discovers. Hidden folders, virtual
environments, caches and `reviews/` are skipped. Loading never runs task code: a task that cannot
be loaded, or that cannot run (a discovered task declares no tensors), is kept with its problems
and reported as invalid by the batch, never dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkitui.task import MANIFEST_NAME, Task, TaskError, load_task
from nkitui.task.pysource import inspect_source

SKIP_DIRS = {"__pycache__", ".venv", "venv", "node_modules", "reviews", "site-packages"}
MAX_DEPTH = 12


@dataclass
class BatchTask:
    key: str  # the task folder relative to the batch folder (its own name when the batch folder is the task)
    root: Path  # absolute
    task: Task | None = None
    problems: list[str] = field(default_factory=list)  # why it cannot be loaded or run (then invalid)

    @property
    def task_id(self) -> str:
        return self.task.id if self.task else self.root.name

    @property
    def title(self) -> str:
        return self.task.title if self.task else ""

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.problems

    def describe(self) -> dict[str, Any]:
        """id, title, op, namespace, target (what a queue row shows)."""
        t = self.task
        return {
            "task_id": self.task_id, "title": self.title, "op": t.op if t else None,
            "namespace": (t.kernel.namespace if t and t.kernel else None), "target": t.target if t else None,
        }


def _is_port_folder(folder: Path, files: list[str]) -> bool:
    for name in files:
        if name.endswith(".py"):
            info = inspect_source(folder / name)
            if info.syntax_error is None and info.imports_nki and info.kernels:
                return True
    return False


def find_task_dirs(root: Path) -> list[Path]:
    """Task folders under `root` (root itself when it is a task), in a stable order."""
    root = Path(root).resolve()
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        if MANIFEST_NAME in filenames or _is_port_folder(here, filenames):
            found.append(here)
            dirnames[:] = []
            continue
        if depth >= MAX_DEPTH:
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
    return sorted(found)


def load_batch_task(root: Path, base: Path) -> BatchTask:
    from nkitui.evaluate.run import check_runnable

    root = Path(root).resolve()
    key = root.relative_to(base).as_posix() if root != base else root.name  # DIR itself: its own name
    try:
        task = load_task(root)
    except TaskError as exc:
        return BatchTask(key, root, None, [str(p) for p in exc.problems])
    except Exception as exc:  # noqa: BLE001 - a loader bug must not stop the batch; it is this task's problem
        return BatchTask(key, root, None, [f"{root}: error: the task could not be loaded ({type(exc).__name__}: {exc})"])
    try:
        check_runnable(task)
    except TaskError as exc:
        return BatchTask(key, root, task, [str(p) for p in exc.problems])
    return BatchTask(key, root, task)


def find_tasks(root: Path) -> list[BatchTask]:
    """Every task under `root`, loaded (problems kept per task). FileNotFoundError when root is not a folder."""
    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise FileNotFoundError(f"{root}: not a folder; give the folder that holds the tasks")
    return [load_batch_task(path, base) for path in find_task_dirs(base)]

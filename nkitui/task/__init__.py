"""Task manifests: model, loading, validation and discovery.

    task = load_task(path)   # a task folder or its task.toml; raises TaskError with every problem
"""

from __future__ import annotations

from pathlib import Path

from nkitui.task.discover import discover_task
from nkitui.task.manifest import MANIFEST_NAME, load_manifest
from nkitui.task.model import (
    FunctionRef,
    InitSpec,
    KernelEntry,
    Sources,
    Task,
    TensorSpec,
    Tolerance,
)
from nkitui.task.problems import Problem, TaskError

__all__ = [
    "MANIFEST_NAME", "FunctionRef", "InitSpec", "KernelEntry", "Problem", "Sources", "Task", "TaskError",
    "TensorSpec", "Tolerance", "discover_task", "load_manifest", "load_task",
]


def load_task(path: str | Path) -> Task:
    """Load the task at `path`: a task folder (with or without task.toml) or a task.toml file."""
    p = Path(path).expanduser()
    if p.is_file():
        return load_manifest(p)
    if not p.exists():
        raise TaskError([Problem(str(p), "", "no such file or folder", "give the path of a task folder or its task.toml")])
    manifest = p / MANIFEST_NAME
    if manifest.is_file():
        return load_manifest(manifest)
    return discover_task(p)

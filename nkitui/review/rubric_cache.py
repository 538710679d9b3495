"""Find the rubric a stored review was written against, once per task folder."""

from __future__ import annotations

from pathlib import Path

from nkitui.review.errors import RubricError
from nkitui.review.rubric import Rubric, load_builtin_rubric, load_rubric


class RubricCache:
    """Rubrics by (task folder, rubric id): the task's own rubric when its id matches, else the built-in."""

    def __init__(self) -> None:
        self._task_rubric: dict[Path, Rubric | None] = {}
        self._builtin: dict[str, Rubric | None] = {}

    def _task(self, task_root: Path) -> Rubric | None:
        key = Path(task_root).resolve()
        if key not in self._task_rubric:
            rubric = None
            try:
                from nkitui.task import TaskError, load_task

                task = load_task(key)
                rubric = load_rubric(task.rubric, task.root)
            except (TaskError, RubricError, OSError):
                rubric = None
            self._task_rubric[key] = rubric
        return self._task_rubric[key]

    def get(self, task_root: Path, rubric_id: str) -> Rubric | None:
        own = self._task(task_root)
        if own is not None and own.id == rubric_id:
            return own
        if rubric_id not in self._builtin:
            try:
                self._builtin[rubric_id] = load_builtin_rubric(rubric_id)
            except RubricError:
                self._builtin[rubric_id] = None
        return self._builtin[rubric_id]

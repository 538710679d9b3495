"""Finding the tasks of a batch: task.toml folders and discovered ports, recursively; invalid tasks
kept with their problems (they become invalid records, never silently dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkitui.batch import find_task_dirs, find_tasks
from nkitui.common.resources import bundled_dir
from tests.batch.conftest import add_task


def test_every_task_under_the_folder_is_found_once_with_hidden_and_review_folders_skipped(mixed_tasks: Path):
    keys = [t.key for t in find_tasks(mixed_tasks)]
    assert keys == ["broken", "discovered", "good", "group/wrong", "loose"]


def test_invalid_and_unrunnable_tasks_carry_problems_that_name_the_file_and_field(mixed_tasks: Path):
    tasks = {t.key: t for t in find_tasks(mixed_tasks)}
    assert tasks["good"].valid and tasks["group/wrong"].valid and tasks["loose"].valid
    broken = tasks["broken"]
    assert not broken.valid and broken.task is None
    assert "task.toml" in broken.problems[0] and "inputs[0].shape" in broken.problems[0]
    discovered = tasks["discovered"]
    assert discovered.task is not None and discovered.task.discovered and not discovered.valid
    assert "nkitui task init" in discovered.problems[0]


def test_a_task_folder_is_not_searched_for_more_tasks(tmp_path: Path):
    outer = add_task(tmp_path / "outer")
    add_task(outer / "fixtures" / "inner")  # part of the outer task, not a task of the batch
    assert find_task_dirs(tmp_path) == [outer.resolve()]


def test_the_folder_itself_can_be_the_only_task(tmp_path: Path):
    task = add_task(tmp_path / "solo")
    found = find_tasks(task)
    assert [(t.key, t.task_id) for t in found] == [("solo", "solo")]


def test_the_bundled_samples_are_twelve_tasks_described_for_the_queue():
    found = find_tasks(bundled_dir("sample_tasks"))
    assert len(found) == 12 and all(t.valid for t in found)
    rmsnorm = next(t for t in found if t.key == "rmsnorm").describe()
    assert rmsnorm == {"task_id": "rmsnorm", "title": rmsnorm["title"], "op": "norm", "namespace": "legacy",
                       "target": "trn2"}


def test_a_missing_folder_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        find_tasks(tmp_path / "nope")

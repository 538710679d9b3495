from pathlib import Path

import pytest

from nkitui.task import TaskError, load_task

from .conftest import write_task


def test_discovery_guesses_and_reports(tmp_path: Path):
    root = write_task(tmp_path / "d")
    (root / "task.toml").unlink()
    (root / "reference.py").write_text("def add_ref(a, b):\n    return a + b\n")
    task = load_task(root)
    assert task.discovered and not task.runnable
    assert task.sources.cuda.name == "add.cu"
    assert task.kernel.name == "add_kernel" and task.kernel.namespace == "legacy"
    assert task.sources.reference.name == "add_ref"
    text = "\n".join(task.guesses)
    assert "add_nki.py" in text and "add.cu" in text and "not declared" in text


def test_discovery_without_a_kernel_fails_clearly(tmp_path: Path):
    (tmp_path / "x.py").write_text("print(1)\n")
    with pytest.raises(TaskError) as info:
        load_task(tmp_path)
    assert "nki.jit" in str(info.value)


def test_missing_path(tmp_path: Path):
    with pytest.raises(TaskError) as info:
        load_task(tmp_path / "nope")
    assert "no such file" in str(info.value)


def test_task_init_drafts_a_manifest_that_validates_after_editing(tmp_path: Path):
    from nkitui.cli import main

    root = write_task(tmp_path / "d")
    (root / "task.toml").unlink()
    (root / "reference.py").write_text("def add_ref(a, b):\n    return a + b\n")
    assert main(["task", "init", str(root)]) == 0
    text = (root / "task.toml").read_text()
    assert 'entry = "add_nki.py::add_kernel"' in text and 'name = "a"' in text and 'name = "b"' in text
    assert main(["task", "init", str(root)]) == 2  # refuses to overwrite
    assert main(["task", "validate", str(root)]) == 0
    assert load_task(root).runnable

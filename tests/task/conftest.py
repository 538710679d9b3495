"""Fixtures for the task-format tests: the add task in a tmp folder."""

from pathlib import Path

import pytest

from tests.helpers.add_task import ADD_KERNEL, ADD_REFERENCE, add_manifest, write_files

# the leading blank line is part of the text: test_manifest checks reported line numbers against it
MANIFEST = "\n" + add_manifest(b_dtype="bfloat16", b_init='{ dist = "uniform", low = -2.0, high = 2.0 }')
CUDA = "__global__ void add(const float* a, const float* b, float* c) {}\n"


def write_task(root: Path, manifest: str = MANIFEST) -> Path:
    return write_files(root, {"add_nki.py": ADD_KERNEL, "reference.py": ADD_REFERENCE, "add.cu": CUDA,
                              "task.toml": manifest})


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    return write_task(tmp_path / "add")

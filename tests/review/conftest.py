"""Fixtures for the review layer: real task folders in real git repositories, isolated from the
user's git config and XDG state."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.helpers.review import (  # noqa: F401 - re-exported
    CUDA, filled_draft, init_repo, run_result, set_identity, write_run, write_task,
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No user git config, no user XDG state: every test sees only what it sets up."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".data"))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR",
                "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(Path(tmp_path_factory.getbasetemp()).parent))
    return home


@pytest.fixture
def task_repo(tmp_path) -> tuple[Path, git.Repo]:
    root = write_task(tmp_path / "add")
    return root, init_repo(root)


@pytest.fixture
def rubric():
    from nkitui.review import load_builtin_rubric

    return load_builtin_rubric("nki-port-audit")

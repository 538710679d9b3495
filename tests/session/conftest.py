"""Fixtures for the audit session: real tasks in real git repositories, isolated from the user's git
config and XDG folders, and a recorder of the session's events."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkitui.session import AuditSession, SessionOptions
from tests.app.helpers import FIXTURES, SAMPLE_TASKS, make_task_repo


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch) -> Path:
    """No user git config, no user XDG state: every test sees only what it sets up."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("CONFIG", "STATE", "DATA", "CACHE"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(home / name.lower()))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR",
                "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(Path(tmp_path_factory.getbasetemp()).parent))
    return home


class Recorder:
    """Every event a session emits, in order."""

    def __init__(self, session: AuditSession) -> None:
        self.events: list = []
        session.subscribe(self.events.append)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


@pytest.fixture
def task_dir(tmp_path) -> Path:
    return make_task_repo(tmp_path / "scale_rows", FIXTURES / "scale_rows")


@pytest.fixture
def sample_task(tmp_path):
    def make(name: str) -> Path:
        return make_task_repo(tmp_path / name, SAMPLE_TASKS / name)

    return make


def open_session(path: Path, **options) -> tuple[AuditSession, Recorder]:
    from nkitui.task import load_task

    session = AuditSession(load_task(path), SessionOptions(**options))
    return session, Recorder(session)

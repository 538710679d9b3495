"""Fixtures for the UI tests: isolated XDG folders and real tasks in real git repositories."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from tests.app.helpers import FIXTURES, SAMPLE_TASKS, make_task_repo


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run `async def` tests (Pilot tests) in a fresh event loop; no asyncio plugin is installed."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = inspect.signature(pyfuncitem.obj).parameters
        asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
        return True
    return None


@pytest.fixture(autouse=True)
def isolated_xdg(tmp_path_factory, monkeypatch) -> Path:
    """Config, state (drafts), data and cache go to fresh folders: no user settings leak in."""
    base = tmp_path_factory.mktemp("xdg")
    for name in ("CONFIG", "STATE", "DATA", "CACHE"):
        (base / name.lower()).mkdir()
        monkeypatch.setenv(f"XDG_{name}_HOME", str(base / name.lower()))
    monkeypatch.setenv("EDITOR", "true")
    monkeypatch.delenv("VISUAL", raising=False)
    return base


@pytest.fixture
def task_dir(tmp_path) -> Path:
    return make_task_repo(tmp_path / "scale_rows", FIXTURES / "scale_rows")


@pytest.fixture
def sample_task(tmp_path):
    """A bundled sample task copied into a git repository (real data for whole-audit tests)."""

    def make(name: str) -> Path:
        return make_task_repo(tmp_path / name, SAMPLE_TASKS / name)

    return make

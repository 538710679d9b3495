"""A last line against a hung test that pytest-timeout cannot end (a pytest plugin; tests/conftest.py loads it).

pytest-timeout's thread method acts from a Python thread, which needs the GIL: a test stuck in a C
call that holds the GIL and never returns (a regular expression that backtracks for hours, a C
extension waiting on a lock) is out of its reach, and CI would again sit silent until its own limit.
faulthandler's watchdog is a C thread that needs no GIL: past the test's limit plus WATCHDOG_SLACK_S it
prints every thread's stack on the real stderr and ends the process (pytest-xdist replaces the worker
and reports the test as crashed), so the run goes on and says where it stuck.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from typing import Any

import pytest

WATCHDOG_SLACK_S = float(os.environ.get("NKITUI_WATCHDOG_SLACK_S", "120"))

_stderr_fd: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Keep a descriptor of the real stderr: during a test, descriptor 2 is pytest's capture file,
    which nobody reads once the process has ended."""
    global _stderr_fd
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            _stderr_fd = os.dup(2)
    else:
        _stderr_fd = os.dup(2)


def _limit(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    value: Any = marker.args[0] if marker is not None and marker.args else (
        marker.kwargs.get("timeout") if marker is not None else None)
    if value is None:
        try:
            value = item.config.getini("timeout")
        except ValueError:  # pytest-timeout is not installed: no limit to follow
            return 0.0
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = _limit(item)
    armed = limit > 0 and _stderr_fd is not None
    if armed:
        faulthandler.dump_traceback_later(limit + WATCHDOG_SLACK_S, exit=True, file=_stderr_fd)
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()

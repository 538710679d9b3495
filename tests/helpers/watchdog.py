"""A last line against a hung test that pytest-timeout cannot end (a pytest plugin; tests/conftest.py loads it).

pytest-timeout's thread method acts from a Python thread, which needs the GIL: a test stuck in a C
call that holds the GIL and never returns (a regular expression that backtracks for hours, a C
extension waiting on a lock) is out of its reach, and CI would again sit silent until its own limit.
faulthandler's watchdog is a C thread that needs no GIL: past the test's limit plus WATCHDOG_SLACK_S it
prints every thread's stack on the real stderr and ends the process (pytest-xdist replaces the worker
and reports the test as crashed), so the run goes on and says where it stuck.

pytest-timeout's own dump goes to the terminal writer, which in a pytest-xdist worker is a stdout nobody
reads: a few seconds before its limit a timer thread writes every thread's stack to the real stderr too
(a hang with the GIL free, the common case, is then readable in CI's log).
"""

from __future__ import annotations

import faulthandler
import os
import threading
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


EARLY_DUMP_S = 5.0  # before pytest-timeout's own end of the test


def _dump_stacks(nodeid: str, limit: float) -> None:
    """Every thread's stack on the real stderr, just before pytest-timeout ends the test: its own dump goes
    to the terminal writer, which under pytest-xdist is a worker's stdout that nobody reads."""
    if _stderr_fd is None:
        return
    os.write(_stderr_fd, f"\n+++ {nodeid} is still running after {limit:.0f} s; its threads:\n".encode())
    faulthandler.dump_traceback(file=_stderr_fd, all_threads=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = _limit(item)
    armed = limit > 0 and _stderr_fd is not None
    early: threading.Timer | None = None
    if armed:
        faulthandler.dump_traceback_later(limit + WATCHDOG_SLACK_S, exit=True, file=_stderr_fd)
        at = limit - min(EARLY_DUMP_S, limit / 2)
        early = threading.Timer(at, _dump_stacks, args=(item.nodeid, at))
        early.daemon = True
        early.start()
    try:
        yield
    finally:
        if early is not None:
            early.cancel()
        if armed:
            faulthandler.cancel_dump_traceback_later()

"""The suite's last line against a hang (tests/helpers/watchdog.py): a test stuck with the GIL held, which
pytest-timeout's thread cannot end, is still ended with every thread's stack, in a real pytest process; and
a test that waits for ever under pytest-xdist has its threads' stacks in the run's output before it is ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STUCK = '''
import re

import pytest


@pytest.mark.timeout(1)
def test_holds_the_gil():
    re.match(r"(a+)+$", "a" * 64 + "b")  # backtracks for ages inside one C call, the GIL held throughout
'''


def test_a_test_that_holds_the_gil_past_its_limit_is_ended_with_its_stack(tmp_path):
    (tmp_path / "test_stuck.py").write_text(STUCK)
    env = {**os.environ, "NKITUI_WATCHDOG_SLACK_S": "2"}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.watchdog", "-p", "no:cacheprovider",
                           "-o", "timeout_method=thread", "--rootdir", str(tmp_path), str(tmp_path / "test_stuck.py")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 100
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Timeout (0:00:0" in out, out[-3000:]
    assert "test_holds_the_gil" in out.split("Timeout (0:00:0", 1)[1]  # the stuck test's frame is in the dump


WAITING = '''
import threading

import pytest


@pytest.mark.timeout(2)
def test_waits_for_ever():
    threading.Event().wait()  # the GIL is free: pytest-timeout's thread ends it, the dump must be readable
'''


def test_a_hung_test_in_an_xdist_worker_has_its_stacks_in_the_output(tmp_path):
    (tmp_path / "test_waiting.py").write_text(WAITING)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.watchdog", "-p", "no:cacheprovider",
                           "-n", "1", "-o", "timeout_method=thread", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_waiting.py")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "test_waiting.py::test_waits_for_ever is still running after 1 s" in out, out[-3000:]
    assert "test_waits_for_ever" in out.split("is still running after", 1)[1]  # its frame is in the dump

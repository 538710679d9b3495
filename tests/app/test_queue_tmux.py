"""`nkitui demo` in a real 80x24 terminal (tmux): the queue of the twelve bundled tasks, every row on
screen, a task opened and the way back. Skipped where tmux is not installed."""

from __future__ import annotations

import shlex
import sys
import time

import pytest

from nkitui.task.samples import sample_task_names
from tests.app.test_tmux import _env, tmux  # noqa: F401 - the fixture

pytestmark = [pytest.mark.tmux, pytest.mark.slow]


def test_demo_opens_the_queue_of_the_twelve_tasks_at_80x24(tmux, tmp_path, isolated_xdg):  # noqa: F811
    demo = tmp_path / "demo"
    tmux.start(f"{shlex.quote(sys.executable)} -m nkitui demo --dir {shlex.quote(str(demo))}", _env(isolated_xdg),
               width=80, height=24)
    screen = tmux.wait_for("0 of 12 reviewed, 0 failing, 0 outdated", timeout=90)
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    names = sample_task_names()
    assert len(names) == 12
    for name in names:  # every task has its row on the first screen
        assert any(line.startswith(f" {name} ") for line in lines), f"{name} has no row:\n{screen}"
    assert "⏎ Open" in screen and "n Next to review" in screen
    screen = tmux.wait_for("none ", timeout=60)  # the findings fill in
    # the last row (G: rows are in folder order), opened, and back to it
    last = sorted(names)[-1]
    tmux.keys("G")
    tmux.keys("Enter")
    # the footer's "esc Queue" shows while the header still says "Opening the task…": wait for the header
    screen = tmux.wait_for(f"nkitui │ {last}", timeout=60)
    assert "esc Queue" in screen
    tmux.keys("Escape")
    screen = tmux.wait_for("0 of 12 reviewed")
    # the cursor stayed on it: the detail line under the list names it
    assert any(line.startswith(f" {last} — ") for line in screen.splitlines())
    tmux.keys("q")
    deadline = time.monotonic() + 20
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tmux.alive(), "q should quit nkitui (and end the tmux session)"

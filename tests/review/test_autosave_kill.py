"""Killing the app with SIGKILL loses at most the last second of typing (a real child process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nkitui.review import DraftStore
from tests.review.helpers.autosave_child import TEXT

CHILD = Path(__file__).parent / "helpers" / "autosave_child.py"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _type_then_kill(tmp_path: Path, interval: float, type_for: float | None) -> tuple[list[tuple[int, float]], float, str]:
    task_root = tmp_path / "task"
    task_root.mkdir()
    store_root = tmp_path / "drafts"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(task_root), str(store_root), str(interval)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    typed: list[tuple[int, float]] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            head, stamp = line.split()
            if head == "ready":
                ready.set()
            else:
                typed.append((int(head), float(stamp)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(30), proc.stderr.read() if proc.poll() is not None else "child did not start"
        if type_for is None:  # wait until everything is typed, then stay idle for a while
            deadline = time.monotonic() + 30
            while (not typed or typed[-1][0] < len(TEXT)) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.2)
        else:
            time.sleep(type_for)
        killed_at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    assert proc.returncode == -signal.SIGKILL
    draft = DraftStore(store_root).load(task_root, "add")  # parses: never a torn file
    assert draft is not None, "nothing was autosaved"
    return typed, killed_at, draft.summary


@pytest.mark.slow
def test_sigkill_while_typing_loses_at_most_the_last_second(tmp_path):
    typed, killed_at, saved = _type_then_kill(tmp_path, interval=0.02, type_for=2.5)
    assert len(typed) > 40, "the child typed too little to judge"
    assert TEXT.startswith(saved)
    # everything typed more than one second before the kill is on disk
    must_have = max((n for n, t in typed if t <= killed_at - 1.0), default=0)
    assert must_have > 0
    assert len(saved) >= must_have, f"saved {len(saved)} characters, but {must_have} were typed a second before the kill"


@pytest.mark.slow
def test_sigkill_after_a_pause_loses_nothing(tmp_path):
    # Type the whole text in one burst, then sit idle past the debounce: all of it is saved.
    typed, killed_at, saved = _type_then_kill(tmp_path, interval=0.0, type_for=None)
    assert typed[-1][0] == len(TEXT) and typed[-1][1] < killed_at - 1.0
    assert saved == TEXT

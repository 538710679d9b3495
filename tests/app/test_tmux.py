"""The real `nkitui` command in a real terminal: tmux runs it, sends keys, and capture-pane reads the
screen back. Skipped where tmux is not installed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.tmux, pytest.mark.slow]


class Tmux:
    """One private tmux server (its own socket), so a user's sessions are never touched."""

    def __init__(self) -> None:
        self.socket = f"nkitui-test-{uuid.uuid4().hex[:8]}"
        self.session = "nkitui"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=check,
                              timeout=20)

    def start(self, command: str, env: dict[str, str], width: int = 120, height: int = 40) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # COLUMNS/LINES inherited from the test process would override the terminal's size (Textual
        # reads them first): the app must see the size tmux gives it.
        self.run("new-session", "-d", "-x", str(width), "-y", str(height), "-s", self.session,
                 f"env -u COLUMNS -u LINES {exports} {command}")

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def wait_for(self, text: str, timeout: float = 45.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen shows:\n{screen}")

    def wait_gone(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while text in self.screen():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} is still on screen:\n{self.screen()}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.session, check=False).returncode == 0

    def kill(self) -> None:
        self.run("kill-server", check=False)


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux()
    yield server
    server.kill()


def test_nkitui_runs_in_tmux_and_answers_keys(tmux, task_dir, isolated_xdg):
    env = {f"XDG_{n}_HOME": str(isolated_xdg / n.lower()) for n in ("CONFIG", "STATE", "DATA", "CACHE")}
    env["TERM"] = "xterm-256color"
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    tmux.start(f"{shlex.quote(sys.executable)} -m nkitui {shlex.quote(str(task_dir))} --backend emulator", env)
    screen = tmux.wait_for("Aligned scale_rows.cu")
    assert "nkitui" in screen and "target trn2" in screen and "1 Source" in screen
    assert "def scale_rows_kernel(x, g):" in screen  # the code view is drawn side by side
    tmux.keys("2")
    tmux.wait_for("following")
    tmux.keys("?")
    tmux.wait_for("filter: a key, a word or an id")
    tmux.keys("Escape")  # a lone Escape: the terminal decides it is not the start of a sequence
    tmux.wait_gone("filter: a key, a word or an id")
    tmux.keys("4")
    screen = tmux.wait_for("Migration fidelity")
    assert "Verdict & summary" in screen
    tmux.keys("F1")
    tmux.wait_for("Rubric area")
    tmux.keys("Escape")
    tmux.wait_gone("Rubric area")
    tmux.keys("q")
    deadline = time.monotonic() + 20
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tmux.alive(), "q should quit nkitui (and end the tmux session)"


def _env(isolated_xdg) -> dict[str, str]:
    env = {f"XDG_{n}_HOME": str(isolated_xdg / n.lower()) for n in ("CONFIG", "STATE", "DATA", "CACHE")}
    env["TERM"] = "xterm-256color"
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_at_80x24_the_nki_port_is_shown_alone_wrapped_and_one_key_shows_cuda(tmux, task_dir, isolated_xdg):
    tmux.start(f"{shlex.quote(sys.executable)} -m nkitui {shlex.quote(str(task_dir))} --backend emulator",
               _env(isolated_xdg), width=80, height=24)
    screen = tmux.wait_for("NKI scale_rows_nki.py")
    assert "narrow: NKI only; o: CUDA, both" in screen  # why one file, and the key to the others
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert " ↪ " in screen  # the long docstring lines continue on wrapped rows, nothing is cut
    assert "def scale_rows_kernel(x, g):" in screen or "import" in screen
    tmux.keys("W")  # wrap off: the bar names the sideways keys, cut lines end in ›
    screen = tmux.wait_for("← → scroll sideways")
    assert "›" in screen
    tmux.keys("W", "o")
    screen = tmux.wait_for("CUDA scale_rows.cu")
    assert "__global__" in screen or "#include" in screen or "//" in screen
    tmux.keys("q")


def test_keys_typed_before_nkitui_is_up_are_kept_and_zoom_keeps_header_and_footer_at_80x24(tmux, task_dir,
                                                                                           isolated_xdg):
    tmux.start(f"{shlex.quote(sys.executable)} -m nkitui {shlex.quote(str(task_dir))} --backend emulator",
               _env(isolated_xdg), width=80, height=24)
    tmux.keys("2", "m")  # typed while Python is still starting: they wait in the terminal, then in nkitui
    tmux.wait_for("No results yet: run the task")
    rows = tmux.wait_for(" Ada ").splitlines()  # the auditor, once git has said who it is
    assert rows[0].startswith(" nkitui │ scale_rows") and "No results yet" in "\n".join(rows)
    tmux.keys("z")
    screen = tmux.wait_for("Run zoomed")
    rows = screen.splitlines()
    assert rows[0].startswith(" nkitui │ scale_rows") and "idle" in rows[0]  # the header stays
    assert "z or Escape: back to the tabs layout" in rows[1]
    assert "f1 Help" in rows[-1] or "f1 Help" in rows[-2]  # and the footer
    tmux.keys("Escape")
    tmux.wait_for("1 Source")
    tmux.keys("q")
    deadline = time.monotonic() + 20
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tmux.alive(), "q without a run quits at once"

"""`nkitui batch` as a user meets it: exit codes, plain progress lines off a terminal, a summary that
fits 80 columns, JSON lines, the exported table, clear errors, and in a real terminal (tmux) the
live progress bar and Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nkitui.cli import main
from tests.batch.conftest import add_task

QUICK = ["--workers", "2", "--seeds", "1", "--no-static", "--no-trials", "--no-precision", "--timeout", "60",
         "--memory-mb", "2048"]


def test_a_mixed_folder_exits_2_with_a_line_per_task_and_a_summary_that_fits_80_columns(
        mixed_tasks: Path, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    table = tmp_path / "table.csv"
    code = main(["batch", str(mixed_tasks), *QUICK, "--jsonl", str(tmp_path / "out.jsonl"), "--table", str(table)])
    out, err = capsys.readouterr()
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert len(lines) == 5 and lines[-1].startswith("[5/5] ")
    assert any("invalid  broken" in line and "inputs[0].shape" in line for line in lines)
    assert any("passed   loose" in line and "commit unknown" in line for line in lines)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "5 task(s): 2 passed, 1 failed, 2 invalid" in out
    assert "group/wrong" in out and "✗ failed" in out
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 5
    rows = list(csv.DictReader(table.open()))
    assert {r["key"]: r["status"] for r in rows}["group/wrong"] == "failed"
    # resumed subsets: nothing runs, and the exit code follows what the tasks' results are
    assert main(["batch", str(mixed_tasks / "group"), *QUICK, "--resume", "--quiet"]) == 1
    assert main(["batch", str(mixed_tasks / "good"), *QUICK, "--resume", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 task(s): 1 passed (1 resumed)" in out and "good " in out  # the folder's own name, not "."


def test_json_lines_on_standard_output_keep_the_summary_off_it(tmp_path: Path, capsys):
    add_task(tmp_path / "q" / "one")
    code = main(["batch", str(tmp_path / "q"), *QUICK, "--jsonl", "-", "--no-store"])
    out, err = capsys.readouterr()
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["key"], r["status"], r["run_path"]) for r in records] == [("one", "passed", None)]
    assert "1 task(s): 1 passed" in err


def test_export_writes_the_table_without_running_anything(mixed_tasks: Path, tmp_path: Path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["batch", "export", str(mixed_tasks), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["key"]: r["status"] for r in rows} == {"broken": "invalid", "discovered": "invalid", "good": "not run",
                                                   "group/wrong": "not run", "loose": "not run"}
    assert main(["batch", "export", str(mixed_tasks)]) == 0  # CSV on standard output
    assert capsys.readouterr().out.startswith("key,task_id,title,")


@pytest.mark.parametrize("argv, message", [
    (["batch", "/no/such/folder"], "no such folder"),
    (["batch", ".", "--table", "out.txt"], "name the file .csv or .jsonl"),
    (["batch", ".", "--resume", "--no-store"], "--resume needs the run store"),
    (["batch", "export", "/no/such/folder"], "no such folder"),
])
def test_bad_arguments_exit_2_and_say_how_to_fix_them(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.tmux
@pytest.mark.slow
def test_the_live_progress_bar_and_ctrl_c_in_a_real_80x24_terminal(tmp_path: Path, isolated_dirs: Path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    root = tmp_path / "q"
    add_task(root / "a_quick")
    add_task(root / "b_slow", prelude="time.sleep(120)")
    add_task(root / "c_slow", prelude="time.sleep(120)")
    socket = f"nkitui-batch-test-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k.startswith(("XDG_", "GIT_"))}
    env.update(TERM="xterm-256color", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = (f"env {exports} {shlex.quote(sys.executable)} -m nkitui batch {shlex.quote(str(root))} "
               f"{' '.join(QUICK).replace('--timeout 60', '--timeout 300')}; echo EXIT=$?; sleep 30")

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout

    def wait_for(text: str, timeout: float = 60.0, shown=lambda screen, text: text in screen) -> str:
        """The screen once `shown(screen, text)` holds (by default: `text` is on it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", "b")
            if shown(screen, text):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared:\n{screen}")

    def progress_bar(screen: str) -> str:
        return next((line for line in screen.splitlines() if line.startswith("batch ")), "")

    tmux("new-session", "-d", "-x", "80", "-y", "24", "-s", "b", command)
    try:
        screen = wait_for("✓ passed   a_quick")
        # Both slow tasks running and the quick one counted: the bar is redrawn a moment after the
        # task's line is printed, so wait for a bar that shows both rather than read the first frame.
        screen = wait_for("▶2 and 1/3 in the bar",
                          shown=lambda screen, _: "▶2" in progress_bar(screen) and "1/3" in progress_bar(screen))
        bar = progress_bar(screen)
        assert "1/3" in bar and "eta" in bar and "✓1" in bar and len(bar) <= 80
        tmux("send-keys", "-t", "b", "C-c")
        screen = wait_for("EXIT=130", timeout=40)
        assert "cancelling" in screen and "- cancelled b_slow" in screen and "interrupted" in screen
        assert "3 task(s): 1 passed, 2 cancelled in" in screen
        assert all(len(line) <= 80 for line in screen.splitlines())
    finally:
        tmux("kill-server")

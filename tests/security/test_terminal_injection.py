"""What a kernel prints (and the words of its exceptions) reaches the auditor's terminal, the app, the
stored run and a review that cites it. Escape sequences there would be commands: a fake "PASSED" drawn
over the line, the window title, the clipboard (OSC 52), a file written by the terminal (iTerm2's
OSC 1337). They arrive as visible pictures of themselves (ESC: U+241B), never as control bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from nkitui.common.resources import bundled_dir

from .conftest import REPO

PRINTS = ('    print("INJECT \\x1b]52;c;cHduZWQ=\\x1b\\\\ \\x1b[31mRED\\x1b[0m \\x1b]1337;File=name=eA==:eA==\\x07 '
          '\\r\\x1b[2K PASSED \\u202eDESSAP")\n'
          '    raise ValueError("boom \\x1b]0;TITLE\\x07 \\x9b2J")\n')


def test_escape_sequences_from_a_kernel_reach_no_terminal_and_no_stored_file(tmp_path, record_property):
    record_property("protection", "output:terminal-controls")
    task = tmp_path / "task"
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", task)
    port = task / "vector_add_nki.py"
    port.write_text(port.read_text().replace("op=nl.add", "op=nl.multiply").replace("    return c\n", PRINTS))
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", str(task), "--seeds", "1", "--no-trials",
                           "--no-precision"], capture_output=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 1
    for stream in (proc.stdout, proc.stderr):
        assert b"\x1b" not in stream and b"\x07" not in stream and b"\xc2\x9b" not in stream
        assert "\u202e".encode() not in stream
    shown = proc.stdout.decode()
    assert "INJECT \u241b]52;c;cHduZWQ=" in shown and "boom \u241b]0;TITLE\u2407" in shown
    stored = list((tmp_path / "data").rglob("*.json"))
    assert stored
    for path in stored:
        text = path.read_text()
        data = json.loads(text)
        assert "\x1b" not in json.dumps(data, ensure_ascii=False) and "\\u001b" not in text

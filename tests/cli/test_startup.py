"""A command imports what it needs: `nkitui task validate` (and every light command) does not pay for the
emulator, ml_dtypes or Textual because another command's module would use them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nkitui.cli import _command_modules, build_parser

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import sys
from nkitui.cli import main
code = main(sys.argv[1:])
heavy = [m for m in ("ml_dtypes", "textual", "nkitui.emulator", "nkitui.perf", "nkitui.app") if m in sys.modules]
print("HEAVY", ",".join(heavy), "CODE", code)
"""


def test_a_light_command_imports_no_other_commands_modules() -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD, "task", "validate", str(ROOT / "sample_tasks" / "rmsnorm")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HEAVY  CODE 0" in done.stdout, done.stdout


def test_the_full_help_still_lists_every_command() -> None:
    listed = build_parser()._subparsers._group_actions[0].choices  # argparse has no public list of commands
    assert set(listed) == {name for name in _command_modules() if name not in ("textout",)}
    assert list(build_parser(only="check")._subparsers._group_actions[0].choices) == ["check"]

"""A baseline commit checked out beside this one, for the benchmarks that compare against it
(`executor.py --check-tasks`, `executor.py --processes`, `emulator.py --baseline`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class NoWorktree(Exception):
    """The baseline commit could not be checked out beside this one."""


@contextlib.contextmanager
def baseline_beside(baseline: str, prefix: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """A worktree of `baseline` and an environment with XDG folders of its own (both removed afterwards);
    both trees' modules compiled first, so neither side pays for its bytecode in the timings."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    base_tree = work / "baseline"
    made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), baseline],
                          capture_output=True, text=True)
    if made.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise NoWorktree(f"could not make a worktree of {baseline}: {made.stderr.strip()}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[var] = str(work / var.lower())
    try:
        for tree in (base_tree, ROOT):
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "nkitui")], capture_output=True)
        yield base_tree, env
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)

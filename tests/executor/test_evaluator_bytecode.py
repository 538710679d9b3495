"""The evaluator writes the bytecode of the modules it imports (nkitui's own, never the task's), so a check on an
editable install does not compile the analysis, the emulator and the numerics from source every time (0.4-0.9 s of
CPU a check: the environment's PYTHONDONTWRITEBYTECODE is for the untrusted children, which import the task copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_evaluator_caches_its_own_bytecode_and_no_task_gets_any(tmp_path: Path) -> None:
    root = tmp_path / "install"
    shutil.copytree(REPO / "nkitui", root / "nkitui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "sample_tasks" / "rmsnorm", root / "task", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", "task", "--no-store", "--quiet"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # nkitui.analysis is imported by the evaluator only (the static phase), not by `nkitui check` itself
    assert list((root / "nkitui" / "analysis").glob("__pycache__/*.pyc")), "the evaluator wrote no bytecode"
    assert not list((root / "task").rglob("__pycache__")), "bytecode next to the task"

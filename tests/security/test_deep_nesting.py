"""Sources nested deeper than the analyses can walk: Python compiles a 2,000-term sum, but a recursive
walk of its tree runs out of stack. Such a file was a RecursionError inside the static check (an
internal error of the run, a traceback from `nkitui analyze`) and, worse, a place where the integrity
check read nothing. Now it is a finding at file:line and the integrity check fails on it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nkitui.analysis.rules.hacks import tamper_lines
from nkitui.common import pyast
from nkitui.common.resources import bundled_dir

from .conftest import REPO

DEEP = {
    "sum of 2000 terms": "x = " + "+".join(["a"] * 2000),
    "sum of 5000 terms": "x = " + "+".join(["a"] * 5000),
    "2000 unary minus": "x = " + "-" * 2000 + "1",
    "2000 nested lambdas": "f = " + "lambda: " * 2000 + "0",
    "2000 chained calls": "x = f" + "()" * 2000,
    "2000 attribute chain": "x = a" + ".b" * 2000,
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_a_source_too_deep_to_walk_is_a_high_finding_at_its_line(name):
    source = "import numpy as np\n\n\n" + DEEP[name] + "\nimport gc\n"
    hits = tamper_lines(source)  # never a RecursionError
    assert hits and hits[0][0] == 4 and hits[0][2] == "high", hits
    assert "nested" in hits[0][1] and "cannot be checked" in hits[0][1]


def test_ordinary_nesting_is_read_as_before():
    source = "import gc\nx = " + "+".join(["a"] * 150) + "\n"
    assert tamper_lines(source) == [(1, tamper_lines("import gc\n")[0][1], "high")]
    with pytest.raises(pyast.TooDeep) as info:
        pyast.parse("\n\nx = " + "+".join(["a"] * 300), max_depth=pyast.ANALYSIS_MAX_DEPTH)
    assert info.value.lineno == 3 and info.value.depth > 300


def _task(tmp_path: Path, appended: str) -> Path:
    task = tmp_path / "task"
    shutil.copytree(bundled_dir("sample_tasks") / "vector_add", task)
    port = task / "vector_add_nki.py"
    source = port.read_text().replace("op=nl.add", "op=nl.multiply")
    port.write_text(source + "\n" + appended + "\n")
    return task


def _line_of(task: Path, start: str) -> int:
    lines = (task / "vector_add_nki.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(start))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env[var] = str(cwd / "xdg" / var.lower())
    return subprocess.run([sys.executable, "-m", "nkitui", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def test_nkitui_check_fails_integrity_at_the_line_and_analyze_reports_it(tmp_path):
    """A wrong kernel hiding `gc.get_objects` below a 2,000-term expression Python happily compiles."""
    task = _task(tmp_path, "_a = 1\n_deep = " + "+".join(["_a"] * 2000) + "\nimport gc\n_objects = gc.get_objects\n")
    deep_line = _line_of(task, "_deep = ")
    proc = _run("check", str(task), "--json", "--no-trials", "--no-precision", "--seeds", "1", "--no-store", "--mutants",
                cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stdout
    result = json.loads(proc.stdout)
    assert result["status"] == "failed"  # not internal-error: static, integrity and mutants each say why
    integrity = next(c for c in result["checks"] if c["id"] == "integrity")
    assert integrity["passed"] is False and f"vector_add_nki.py:{deep_line}" in integrity["detail"]
    rules = {(f["rule"], f["line"]) for f in result["findings"]}
    assert ("HACK-TAMPER", deep_line) in rules and ("NKI-SYNTAX", deep_line) in rules

    proc = _run("analyze", str(task), cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "Too deeply nested to analyse" in proc.stdout and f"vector_add_nki.py:{deep_line}" in proc.stdout


def test_nkitui_task_validate_names_the_line_python_cannot_compile(tmp_path):
    """5,000 terms: too deep for Python's own parser. Validation warns at the line (no traceback)."""
    task = _task(tmp_path, "_a = 1\n_deep = " + "+".join(["_a"] * 5000) + "\n")
    deep_line = _line_of(task, "_deep = ")
    proc = _run("task", "validate", str(task), cwd=tmp_path)
    assert "Traceback" not in proc.stderr + proc.stdout, (proc.stdout + proc.stderr)[-2000:]
    assert proc.returncode == 0
    assert f"vector_add_nki.py:{deep_line}" in proc.stdout + proc.stderr and "nested" in proc.stdout + proc.stderr

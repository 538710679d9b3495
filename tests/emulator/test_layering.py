"""The emulator is the lower layer: no module of nkitui.emulator imports the cost model (nkitui.perf),
the UI, or anything else of nkitui but common/ (the cost model is reached by name, see
NKITUI_LATENCY_ESTIMATOR)."""

from __future__ import annotations

import ast
from pathlib import Path

import nkitui.emulator

ALLOWED = ("nkitui.emulator", "nkitui.common")


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_emulator_modules_import_no_higher_layer():
    root = Path(nkitui.emulator.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 20
    bad = [f"{p.relative_to(root.parent.parent)}:{line} imports {name}" for p in files for line, name in _imports(p)
           if (name == "nkitui" or name.startswith("nkitui.")) and not name.startswith(ALLOWED)]
    assert bad == []


FRONT_ENDS = ("legacy", "newns", "layout")


def test_every_engine_module_is_under_the_no_front_end_import_contract():
    """pyproject.toml's import-linter contract lists the engine core by name (lint-imports, run by
    tests/architecture, enforces it); a module added to nkitui.emulator must join the list or be a front end."""
    import tomllib

    root = Path(nkitui.emulator.__file__).parent
    pyproject = tomllib.loads((root.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in pyproject["tool"]["importlinter"]["contracts"]
                    if c.get("forbidden_modules") == [f"nkitui.emulator.{f}" for f in FRONT_ENDS])
    modules = {f"nkitui.emulator.{p.stem if p.is_file() else p.name}" for p in root.iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    front_ends = {f"nkitui.emulator.{f}" for f in FRONT_ENDS}
    assert modules - front_ends == set(contract["source_modules"])


def test_lint_imports_catches_an_engine_module_importing_a_front_end(tmp_path):
    """The contract can fail: the engine's former import of the nki namespace's dtypes is reported."""
    import shutil
    import subprocess
    import sys

    repo = Path(nkitui.emulator.__file__).parents[2]
    shutil.copytree(repo / "nkitui", tmp_path / "nkitui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "pyproject.toml", tmp_path / "pyproject.toml")
    mx = tmp_path / "nkitui" / "emulator" / "engine" / "mx.py"
    mx.write_text(mx.read_text(encoding="utf-8") + "\nfrom nkitui.emulator.newns import dtypes as _ndt  # noqa\n",
                  encoding="utf-8")
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0
    assert "nkitui.emulator.engine.mx -> nkitui.emulator.newns" in done.stdout, done.stdout

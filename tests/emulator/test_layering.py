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

"""The worker's entry point stays light: nothing heavy is imported before the first phase event."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "ml_dtypes", "rich", "tree_sitter", "textual", "git", "nkitui.task", "nkitui.analysis", "nkitui.perf",
         "nkitui.emulator", "nkitui.evaluate.numerics.audit", "nkitui.executor.backends")


def test_the_pipeline_module_imports_nothing_heavy():
    code = ("import json, sys; import nkitui.evaluate.pipeline.session, nkitui.executor.sandbox; "
            f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == []

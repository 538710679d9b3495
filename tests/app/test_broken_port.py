"""A port with an unclosed ( opens like any other: its source shown, the syntax error a finding at its
line (the column marked), the rubric ready to score. Only a task that is itself invalid gets the
"Task problems" screen."""

from __future__ import annotations

from pathlib import Path

from nkitui.app.app import NkituiApp
from nkitui.app.screens.problems import TaskProblemsScreen
from tests.app.helpers import screen_text, settle


def _break(root: Path) -> int:
    """Leave a ( unclosed in the kernel's first statement; returns its line."""
    port = root / "scale_rows_nki.py"
    lines = port.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if "n_rows, width = x.shape" in line)
    lines[number - 1] = lines[number - 1].replace("x.shape", "max(x.shape")
    port.write_text("\n".join(lines) + "\n")
    return number


async def test_a_port_that_does_not_parse_opens_with_its_source_and_the_error_as_a_finding(task_dir):
    line = _break(task_dir)
    app = NkituiApp(task_dir, backend="emulator")  # a folder: the app loads (and validates) it itself
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert not isinstance(app.screen, TaskProblemsScreen) and not app.task_problems
        assert app.audit_task.kernel.syntax_error is not None
        area = app.source_area
        code = area.code
        assert code.right is not None and code.right.path == "scale_rows_nki.py"
        [syntax] = [f for f in area.findings if f.rule == "NKI-SYNTAX"]
        assert syntax.line == line and "column" in syntax.title and syntax.data["column"] > 0
        await pilot.press("g", "n")  # the next finding is the syntax error
        await settle(pilot)
        assert code.row_at_cursor().right == line
        assert "NKI-SYNTAX" in str(area.query_one("#finding-strip").shown)
        assert "max(x.shape" in screen_text(app)
        # the review can be written: the rubric has its criteria
        await pilot.press("4")
        await settle(pilot)
        assert app.rubric_area.rubric is not None and "Migration fidelity" in screen_text(app)


async def test_an_invalid_manifest_still_shows_the_task_problems(task_dir):
    manifest = task_dir / "task.toml"
    manifest.write_text(manifest.read_text().replace('dtype = "float32"', 'dtype = "float33"', 1))
    app = NkituiApp(task_dir, backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, TaskProblemsScreen) and app.task_problems

"""One run, one number: the toast, the Run status line, the Engines latency, the run history and
`nkitui runs list` all write a run's time the same way (once `4.67e+03 µs`, `4669.00 µs` and `4.67 ms`)."""

from __future__ import annotations

import copy
from dataclasses import replace

from nkitui.app.widgets.run.area import run_notice
from nkitui.app.screens.runs import RunsScreen
from nkitui.cli import main
from tests.app.helpers import new_app, recorded_result, screen_text, settle, store_run


async def test_a_runs_time_reads_the_same_in_every_place(task_dir, capsys):
    result = recorded_result()
    slow = copy.deepcopy(result)
    slow.timing = replace(slow.timing, median_us=4669.0)
    slow.utilisation = replace(slow.utilisation, total_time=4669e-6)
    store_run(slow, "20260107T090000Z-a1b2c3", timing=slow.timing, utilisation=slow.utilisation)
    assert "4.67 ms" in run_notice(slow) and "e+" not in run_notice(slow)  # the toast when a run ends
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert "4.67 ms" in screen_text(app)  # the run history
        await pilot.press("enter")
        await settle(pilot)
        assert "4.67 ms" in str(app.run_area.query_one("#run-status").shown)  # the Run status line
        await pilot.press("3")
        await settle(pilot)
        assert "latency 4.67 ms" in screen_text(app)  # the Engines head line
        for wrong in ("4669", "e+03", "4.669"):
            assert wrong not in screen_text(app)
    assert main(["runs", "list", str(task_dir)]) == 0
    assert "estimated 4.67 ms" in capsys.readouterr().out

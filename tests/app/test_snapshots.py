"""SVG snapshots of the main screens at 80x24 and 160x48, and of each theme.

Regenerate after an intended change with `pytest tests/app/test_snapshots.py --snapshot-update`
and look at the report (snapshot_report.html) before committing. The app is deterministic here:
fixed git dates (stable shas), a recorded run with pinned host timings, no clocks on screen.
"""

from __future__ import annotations

import pytest

from tests.app.helpers import new_app, recorded_result, settle, store_run

SMALL = (80, 24)
WIDE = (160, 48)


def _app(task_dir, **kwargs):
    return new_app(task_dir, backend="emulator", **kwargs)


def _steps(*keys: str):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return run_before


@pytest.fixture
def reopenable(task_dir):
    store_run(recorded_result(), "20260107T090000Z-a1b2c3")
    return task_dir


def test_source_aligned_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps())


def test_source_range_selection_80x24(snap_compare, task_dir):
    # V on NKI line 13, extended over four lines: tinted and marked on the NKI side, the strip says what
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.source_area.code.show_line("scale_rows_nki.py", 13, center=False)
        await pilot.press("V", "j", "j", "j")
        await settle(pilot)

    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=run_before)


def test_engines_before_a_run_80x24(snap_compare, task_dir):
    # the task's speed of light, labelled a lower bound, before any run
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("3"))


def test_source_diff_split_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("d", "s", "n"))


def test_run_log_80x24(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=SMALL, run_before=_steps("h", "enter"))


def test_engines_80x24(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=SMALL, run_before=_steps("h", "enter", "3"))


def test_rubric_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("4", "tab", "right", "right"))


def test_help_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("f1"))


def test_split_layout_160x48(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=WIDE, run_before=_steps("h", "enter", "1"))


def test_split_layout_diff_160x48(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=WIDE, run_before=_steps("d", "s"))


@pytest.mark.parametrize("theme", ["light", "high-contrast"])
def test_themes_80x24(snap_compare, task_dir, theme):
    # dark, the default, is in every other snapshot
    assert snap_compare(_app(task_dir, theme=theme), terminal_size=SMALL, run_before=_steps("j", "j", "j"))

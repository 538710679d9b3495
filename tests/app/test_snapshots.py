"""SVG snapshots of the main screens at 80x24 (the smallest terminal nkitui supports) and 200x50, and of
each theme.

Regenerate after an intended change with `pytest tests/app/test_snapshots.py --snapshot-update` and look
at the report (snapshot_report.html) before committing. The app is deterministic here: fixed git dates
(stable shas), a recorded run with pinned host timings and a fixed creation time, fresh XDG folders (no
autosaved draft, no stored runs but the recorded one), no clock on screen.
"""

from __future__ import annotations

import pytest

from tests.app.helpers import new_app, recorded_result, settle, store_run

SMALL = (80, 24)
WIDE = (200, 50)


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


# --- Source ----------------------------------------------------------------------------------------

def test_source_80x24(snap_compare, task_dir):
    # the NKI port alone, soft-wrapped; the bar says why and which key shows CUDA
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps())


def test_source_side_by_side_chosen_80x24(snap_compare, task_dir):
    # o twice: CUDA, then both side by side even at 80 columns, wrapped
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("o", "o"))


def test_source_unwrapped_80x24(snap_compare, task_dir):
    # W: lines cut at the edge end in ›, the bar names ← → for sideways
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("W"))


def test_source_range_selection_80x24(snap_compare, task_dir):
    # V on NKI line 13, extended over four lines: tinted and marked, the strip says what
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.source_area.code.show_line("scale_rows_nki.py", 13, center=False)
        await pilot.press("V", "j", "j", "j")
        await settle(pilot)

    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=run_before)


def test_source_diff_split_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("d", "s", "n"))


def test_source_200x50(snap_compare, task_dir):
    # the wide split layout: CUDA beside NKI, aligned by role, with the other areas around
    assert snap_compare(_app(task_dir), terminal_size=WIDE, run_before=_steps())


def test_source_tabs_200x50(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=WIDE, run_before=_steps("w"))


def test_source_diff_200x50(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=WIDE, run_before=_steps("d", "s"))


# --- Run and Engines -------------------------------------------------------------------------------

def test_run_log_80x24(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=SMALL, run_before=_steps("h", "enter"))


def test_run_results_80x24(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=SMALL, run_before=_steps("h", "enter", "m"))


def test_run_200x50(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=WIDE, run_before=_steps("h", "enter", "w", "2"))


def test_engines_before_a_run_80x24(snap_compare, task_dir):
    # the task's speed of light, labelled a lower bound, before any run
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("3"))


def test_engines_80x24(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=SMALL, run_before=_steps("h", "enter", "3"))


def test_engines_200x50(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=WIDE, run_before=_steps("h", "enter", "w", "3"))


def test_split_layout_after_a_run_200x50(snap_compare, reopenable):
    assert snap_compare(_app(reopenable), terminal_size=WIDE, run_before=_steps("h", "enter", "1"))


# --- Rubric ----------------------------------------------------------------------------------------

def test_rubric_80x24(snap_compare, task_dir):
    # Tab to the score, a digit scores it, the row names the keys
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("4", "tab", "2"))


def test_rubric_verdict_rule_80x24(snap_compare, task_dir):
    # accept with numerical correctness 3: the verdict page names the rule it breaks and O
    async def run_before(pilot) -> None:
        await settle(pilot)
        app = pilot.app
        await pilot.press("4")
        await settle(pilot)
        for criterion in app.session.review.rubric.criterion_ids:
            app.draft.set_score(criterion, 4)
        app.draft.set_score("numerical_correctness", 3)
        app.rubric_area.show_verdict_page()
        await pilot.press("tab", "1")
        await settle(pilot)

    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=run_before)


def test_rubric_200x50(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=WIDE, run_before=_steps("w", "4", "tab", "4"))


# --- Help and themes -------------------------------------------------------------------------------

def test_help_80x24(snap_compare, task_dir):
    assert snap_compare(_app(task_dir), terminal_size=SMALL, run_before=_steps("f1"))


@pytest.mark.parametrize("theme", ["light", "high-contrast"])
def test_themes_80x24(snap_compare, task_dir, theme):
    # dark, the default, is in every other snapshot
    assert snap_compare(_app(task_dir, theme=theme), terminal_size=SMALL, run_before=_steps("j", "j", "j"))

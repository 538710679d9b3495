"""Several tasks in one app: each has its own audit session, the app switches between them and each
comes back as it was left (the draft, the shown run, a run still going). The queue of tasks (#17)
opens tasks with `NkituiApp.open_task`."""

from __future__ import annotations

import pytest

from nkitui.task import load_task
from tests.app.helpers import SAMPLE_TASKS, make_task_repo, new_app, recorded_result, screen_text, settle, store_run
from tests.app.test_walk_findings import slow_reference, wait_for_phase


async def test_switching_tasks_keeps_each_sessions_state(task_dir, tmp_path):
    other = make_task_repo(tmp_path / "vector_add", SAMPLE_TASKS / "vector_add")
    store_run(recorded_result(), "20260107T090000Z-a1b2c3")  # a run of scale_rows' current files
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        first = app.session
        assert app.header_state.run == "passed"
        app.draft.set_score("migration_fidelity", 3, "masked tail")
        first.review.edited()
        second = app.open_task(load_task(other))
        await settle(pilot)
        assert second is not first and len(app.sessions) == 2
        assert app.header_state.task == "vector_add" and app.header_state.run == "idle"
        assert app.source_area.code.right.path == "vector_add_nki.py"
        assert app.draft.scores["migration_fidelity"].value is None
        assert app.run_area.log.store.total == 0 and app.engines_area.record is None
        back = app.open_task(load_task(task_dir))
        await settle(pilot)
        assert back is first and len(app.sessions) == 2
        assert app.header_state.task == "scale_rows" and app.header_state.run == "passed"
        assert app.source_area.code.right.path == "scale_rows_nki.py"
        assert app.draft.scores["migration_fidelity"].comment == "masked tail"
        assert app.engines_area.record is not None and app.run_area.log.store.total > 0
        assert "NKI-SEQ-NO-DEP" in [f.rule for f in app.source_area.findings]
        await pilot.press("4")
        await settle(pilot)
        assert "Migration fidelity" in screen_text(app) and "3" in app.rubric_area.query_one("#criteria").get_option_at_index(0).prompt.plain


@pytest.mark.slow
async def test_a_run_goes_on_while_another_task_is_shown(task_dir, tmp_path):
    other = make_task_repo(tmp_path / "vector_add", SAMPLE_TASKS / "vector_add")
    slow_reference(task_dir, 3)
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        first = app.session
        await pilot.press("r")
        await wait_for_phase(pilot, "reference")
        app.open_task(load_task(other))
        await pilot.pause(0.5)
        assert app.header_state.task == "vector_add" and app.header_state.run != "running"
        assert first.runs.running  # still going, in the background
        app.open_task(load_task(task_dir))
        await pilot.pause(0.2)
        if first.runs.running:  # back while it runs: its live log and progress
            assert app.header_state.run == "running" and app.run_area.log.store.total > 0
        await settle(pilot, timeout=120)
        assert app.header_state.run == "passed" and first.runs.shown is not None
        assert app.run_area.log.store.total >= len(first.runs.shown_log) > 0

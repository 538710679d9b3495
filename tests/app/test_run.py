"""The Run area with real runs: the executor's child process, its live log, results, cancel,
reopening stored runs and comparing two."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from nkitui.app.screens.runs import ComparisonScreen, RunsScreen
from nkitui.app.widgets.run.results import OutputsTable
from tests.app.helpers import recorded_result, new_app, screen_text, settle, store_run


@pytest.mark.slow
async def test_a_run_streams_its_log_and_ends_with_results_and_utilisation(task_dir):
    # The emulator runs this task in well under a second: the reference's first call waits 1.5 s so
    # the run is surely still going while the test presses keys.
    reference = task_dir / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    return x.astype",
        "    import time\n\n    if not _WAITED:\n        _WAITED.append(1)\n        time.sleep(1.5)\n    return x.astype",
    ) + "\n_WAITED: list = []\n")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await pilot.pause(0.3)
        assert app.session.runs.running and app.header_state.run == "running"
        await pilot.press("1")  # the UI stays live while the child works
        await pilot.pause(0.1)
        assert app.workstation.current_area == "source" and app.session.runs.running, (
            app.header_state, [(n.title, n.message) for n in app.notices])
        await pilot.press("2")
        await settle(pilot, timeout=180)
        assert app.header_state.run == "passed", app.header_state
        log = app.run_area.log
        texts = [log.store.texts[i] for i in range(log.store.total)]
        assert "── compare ──" in texts and any("backend: emulator" in t for t in texts)
        log.set_level_filter(1)  # info and above still tells how each phase ended
        shown = [log.store.line(row)[2] for row in range(len(log.store))]
        assert any(t.startswith("── compile ok") for t in shown) and any(t.startswith("── compare ok") for t in shown)
        log.set_level_filter(0)
        assert app.workstation.current_area == "run"
        await pilot.press("m")
        await settle(pilot)
        table = app.run_area.query_one(OutputsTable)
        assert table.outputs == ["y"] and table.get_row_at(0)[1] == "pass"
        assert "checks" in screen_text(app)
        engines = app.engines_area
        assert engines.query_one("#metrics", DataTable).row_count > 5
        assert len(app.session.runs.summaries) == 1


async def test_reopen_an_earlier_run_and_compare_two(task_dir):
    result = recorded_result()
    a = store_run(result, "20260107T090000Z-aaaaaa")
    worse = [dict(s.to_dict()) for s in a.seed_results]
    for seed in worse:
        for out in seed["outputs"]:
            out["max_abs"] = 1.0
    from nkitui.evaluate.run.result import SeedResult

    store_run(result, "20260108T090000Z-bbbbbb", created_at="2026-01-08T09:00:00+00:00",
              seed_results=[SeedResult.from_dict(s) for s in worse])
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert [s.run_id for s in app.session.runs.summaries] == ["20260108T090000Z-bbbbbb", "20260107T090000Z-aaaaaa"]
        await pilot.press("h")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("down", "enter")  # reopen the older run
        await settle(pilot)
        assert app.session.runs.shown.run_id == "20260107T090000Z-aaaaaa"
        assert app.header_state.run_detail == "reopened aaaaaa"
        assert app.run_area.log.store.total == len(result.log_excerpt)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("down", "space", "up", "space", "c")  # A = older, B = newer
        await settle(pilot)
        assert isinstance(app.screen, ComparisonScreen)
        deltas = {(m.output, m.metric): m.change for m in app.screen.comparison.metrics}
        assert deltas[("y", "max_abs")] == "worse"
        assert "worst metric over seeds" in screen_text(app)


async def test_a_run_that_cannot_start_is_reported_and_the_app_goes_on(task_dir):
    import shutil

    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        shutil.rmtree(task_dir)  # the task folder went away (an unmounted disk): no scratch copy can be made
        await pilot.press("r")
        await settle(pilot)
        assert not app.session.runs.running and app.header_state.run == "error"
        status = app.run_area.query_one("#run-status").content.plain
        assert "internal-error" in status and "could not start the run" in status, status
        await pilot.press("1")  # still answering keys
        await settle(pilot)
        assert app.workstation.current_area == "source"


def test_a_stored_log_line_is_reopened_at_its_own_level_and_in_the_live_format():
    from nkitui.session.runlog import LEVEL_INDEX, stored_line

    # nkitui's own lines show untagged, as they do live; the kernel's output keeps its stream's tag
    assert stored_line("[worker:warning] seed 0: y FAILS") == (LEVEL_INDEX["warning"], "seed 0: y FAILS")
    assert stored_line("[stderr:error] Traceback") == (LEVEL_INDEX["error"], "[stderr] Traceback")
    assert stored_line("[phase] ── compare ok in 0.10 s: output:y: pass") == (
        LEVEL_INDEX["info"], "── compare ok in 0.10 s: output:y: pass")
    assert stored_line("[stdout] hello") == (LEVEL_INDEX["info"], "[stdout] hello")
    assert stored_line("no tag at all") == (LEVEL_INDEX["info"], "no tag at all")


async def test_log_search_says_which_match_the_cursor_is_on(task_dir):
    store_run(recorded_result(), "20260107T090000Z-aaaaaa")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("enter")  # reopen the run: its six log lines, two of them "passes"
        await settle(pilot)
        log = app.run_area.log
        log.focus()
        await pilot.press("slash", *"passes", "enter")
        await settle(pilot)
        assert "search 'passes': match 1 of 2" in screen_text(app)
        await pilot.press("n")
        await settle(pilot)
        assert "search 'passes': match 2 of 2" in screen_text(app)
        await pilot.press("up", "up")
        await settle(pilot)
        assert "search 'passes': 2 matches" in screen_text(app)  # the cursor left the matches

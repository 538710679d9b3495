"""The Engines area on a real run's PerfRecord: bars labelled estimated, timeline, metrics, roofline,
hot lines that jump to the Source area, metrics as evidence."""

from __future__ import annotations

from textual.widgets import DataTable

from nkitui.app.widgets.engines.area import HotLinesTable, MetricsTable
from nkitui.app.widgets.engines.charts import EngineBars, TimelineStrip, bar
from nkitui.app.widgets.source.code_view import CodePairView
from tests.app.helpers import recorded_result, new_app, screen_text, settle, store_run


def test_bars_are_drawn_in_eighths():
    assert bar(0.0, 4) == "    "
    assert bar(1.0, 4) == "████"
    assert bar(0.5, 4) == "██  "
    assert bar(0.53, 4) == "██▏ "


async def _reopen(pilot, app) -> None:
    await settle(pilot)
    await pilot.press("h", "enter")
    await settle(pilot)
    await pilot.press("3")
    await settle(pilot)


async def test_engines_show_the_runs_estimated_utilisation(task_dir):
    result = recorded_result()
    store_run(result, "20260107T090000Z-aaaaaa")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 60)) as pilot:
        await _reopen(pilot, app)
        engines = app.engines_area
        record = engines.query_one(EngineBars).record
        assert record is not None and record.source == "estimated"
        text = screen_text(app)
        assert "ESTIMATED" in text
        for title in ("Tensor", "Vector", "Scalar", "GpSimd", "DMA"):
            assert title in text
        assert f"{record.engine_percent('dma'):5.1f}%" in text
        assert engines.query_one(TimelineStrip).record is record
        metrics = engines.query_one(MetricsTable)
        labels = [metrics.get_row_at(i)[0] for i in range(metrics.row_count)]
        assert {"latency (estimated)", "MFU", "HFU", "MBU"} <= set(labels)
        assert "Roofline" in text or engines.query_one("#roofline").display


async def test_a_hot_line_jumps_to_the_source_and_a_metric_is_evidence(task_dir):
    result = recorded_result()
    store_run(result, "20260107T090000Z-aaaaaa")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 60)) as pilot:
        await _reopen(pilot, app)
        metrics = app.engines_area.query_one(MetricsTable)
        assert app.focused is metrics
        ev = app.focused_evidence()
        assert ev.kind == "metric" and ev.metric == "total_time" and ev.run_id == "20260107T090000Z-aaaaaa"
        await pilot.press("a")
        await settle(pilot)
        link = app.draft.evidence[-1]
        assert link.kind == "metric" and link.ref.startswith("20260107T090000Z-aaaaaa:total_time=")
        assert link.criterion == "migration_fidelity"
        hot = app.engines_area.query_one(HotLinesTable)
        hot.focus()
        await settle(pilot)
        first = hot.lines[0]
        await pilot.press("enter")
        await settle(pilot)
        assert app.workstation.current_area == "source"
        assert isinstance(app.focused, CodePairView)
        assert app.focused.row_at_cursor().right == first.line
        assert isinstance(hot, DataTable)


async def test_a_measured_profile_without_a_timeline_says_so(task_dir):
    result = recorded_result()
    profile = dict(result.utilisation)
    profile.update(source="measured", timeline={}, tool="neuron-explorer summary-json")
    store_run(result, "20260107T090000Z-cccccc", utilisation=profile)
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 60)) as pilot:
        await _reopen(pilot, app)
        text = screen_text(app)
        assert "MEASURED" in text and "neuron-explorer summary-json" in text
        assert "has no per-engine timeline" in text
        labels = [app.engines_area.query_one(MetricsTable).get_row_at(i)[0]
                  for i in range(app.engines_area.query_one(MetricsTable).row_count)]
        assert "latency (measured)" in labels

"""The Engines area on a real run's PerfRecord: bars labelled estimated, timeline, metrics, roofline,
hot lines that jump to the Source area, metrics as evidence."""

from __future__ import annotations

from textual.widgets import DataTable

from nkitui.perf import PerfRecord
from nkitui.app.widgets.engines.area import HotLinesTable, MetricsTable
from nkitui.app.widgets.engines.charts import EngineBars, TimelineStrip, bar
from nkitui.common.units import bytes_ as format_bytes, time_s as format_seconds
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
    profile = result.utilisation.to_json()
    profile.update(source="measured", timeline={}, tool="neuron-explorer summary-json")
    store_run(result, "20260107T090000Z-cccccc", utilisation=PerfRecord.from_json(profile))
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 60)) as pilot:
        await _reopen(pilot, app)
        text = screen_text(app)
        assert "MEASURED" in text and "neuron-explorer summary-json" in text
        assert "has no per-engine timeline" in text
        labels = [app.engines_area.query_one(MetricsTable).get_row_at(i)[0]
                  for i in range(app.engines_area.query_one(MetricsTable).row_count)]
        assert "latency (measured)" in labels


async def test_before_any_run_the_engines_show_the_tasks_speed_of_light_as_a_bound(task_dir):
    from nkitui.perf.taskwork import task_speed_of_light
    from nkitui.task import load_task

    expected, _ = task_speed_of_light(load_task(task_dir), "trn2")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        engines = app.engines_area
        assert engines.record is None and engines.bound is not None
        text = screen_text(app)
        assert "SPEED OF LIGHT" in text and "memory-bound" in text and "lower bound" in text
        assert "ESTIMATED" not in text and "MEASURED" not in text  # a bound, not a measurement
        metrics = engines.query_one(MetricsTable)
        rows = {key: value for key, _, value in metrics.metrics}
        assert rows["speed_of_light_s"] == format_seconds(expected.bound_s) == rows["speed_of_light_memory_s"]
        assert rows["speed_of_light_compute_s"].startswith("0")  # elementwise: no TensorE work
        assert rows["work_hbm_bytes"] == format_bytes(expected.work.hbm_bytes)
        assert metrics.source == "lower bound" and not metrics.run_id
        assert engines.query_one(EngineBars).display is False  # no utilisation is made up
        # the bound is evidence like any metric, labelled as a bound
        assert app.focused is metrics
        ev = app.focused_evidence()
        assert ev.metric == "speed_of_light_s" and "(lower bound)" in ev.label and ev.run_id is None


async def test_a_task_without_op_says_why_there_is_no_speed_of_light(tmp_path):
    from tests.app.helpers import FIXTURES, make_task_repo

    task = make_task_repo(tmp_path / "no_op", FIXTURES / "scale_rows")
    manifest = task / "task.toml"
    manifest.write_text(manifest.read_text().replace('op = "elementwise"\n', ""))
    app = new_app(task, backend="emulator")
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        assert app.engines_area.bound is None
        text = screen_text(app)
        assert "No performance data yet" in text and "declares no `op`" in text


async def test_after_a_run_the_speed_of_light_gives_the_achieved_percent(task_dir):
    result = recorded_result()
    without = result.utilisation.to_json()
    without.pop("speed_of_light")  # a profile that carries no bound: the task's own is used
    store_run(result, "20260107T090000Z-dddddd", utilisation=PerfRecord.from_json(without))
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(100, 60)) as pilot:
        await _reopen(pilot, app)
        engines = app.engines_area
        record = engines.record
        assert record is not None and record.speed_of_light is None
        rows = {key: value for key, _, value in engines.query_one(MetricsTable).metrics}
        achieved = 100 * engines.bound.bound_s / record.total_time
        assert rows["speed_of_light_percent"] == f"{achieved:.1f}%"
        assert "SPEED OF LIGHT" not in screen_text(app) and "ESTIMATED" in screen_text(app)


async def test_an_estimate_shows_its_uncertainty_band_and_its_launch_overhead(task_dir):
    from nkitui.perf import estimate
    from nkitui.perf.uncertainty import Uncertainty
    from tests.perf.test_estimate import matmul_trace

    record = estimate(matmul_trace("trn2"))
    result = recorded_result()
    result.utilisation = record.to_json()
    store_run(result, "20260107T090000Z-bbbbbb")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(110, 70)) as pilot:
        await _reopen(pilot, app)
        band = Uncertainty.from_json(record.uncertainty)
        text = screen_text(app)
        assert band.band_text() in text  # beside the latency in the head line
        metrics = app.engines_area.query_one(MetricsTable)
        rows = {metrics.get_row_at(i)[0]: metrics.get_row_at(i)[1] for i in range(metrics.row_count)}
        lo, hi = band.bounds(record.total_time)
        assert rows["uncertainty (calibrated families)"] == (f"{band.band_text()}: {format_seconds(lo)} to "
                                                             f"{format_seconds(hi)}")
        assert rows["launch overhead"] == format_seconds(record.launch_overhead)
        assert rows["kernel core time"] == format_seconds(record.core_time)
        assert "outside them the error is unknown" in text


async def test_the_timeline_axis_ends_at_the_core_time_not_the_launch(task_dir):
    from nkitui.common import units
    from nkitui.perf import estimate
    from tests.perf.test_estimate import matmul_trace

    record = estimate(matmul_trace("trn2"))
    assert record.launch_overhead > 0
    result = recorded_result()
    result.utilisation = record.to_json()
    store_run(result, "20260107T090000Z-cccccc")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(110, 70)) as pilot:
        await _reopen(pilot, app)
        text = screen_text(app)
        assert f"{units.time_s(record.core_time)} core" in text

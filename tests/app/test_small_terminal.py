"""Every area at 80x24, the smallest terminal nkitui supports: what matters is on screen whole
(task id, run state, finding counts, scores, the bound, the keys), nothing is cut mid-word where a
shorter label fits, and a notification does not cover the engine bars."""

from __future__ import annotations

from nkitui.app.widgets.engines.area import MetricsTable
from nkitui.app.widgets.engines.charts import EngineBars
from nkitui.common.units import time_s as format_seconds
from nkitui.app.widgets.footer import KeyFooter
from tests.app.helpers import new_app, recorded_result, screen_text, settle, store_run

SMALL = (80, 24)


async def _goto(pilot, key: str) -> list[str]:
    await pilot.press(key)
    await settle(pilot)
    return screen_text(pilot.app).splitlines()


async def test_each_area_at_80x24_keeps_what_matters_whole(sample_task):
    task = sample_task("flawed_bf16_accum")  # long title, findings of three severities, a matmul bound
    app = new_app(task, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        rows = await _goto(pilot, "1")
        assert rows[0].startswith(" nkitui │ flawed_bf16_accum ") and rows[0].rstrip().endswith("idle")
        bar = rows[2]
        assert "●1" in bar and "▲1" in bar and "…" not in bar  # the finding counts, not cut
        footer = rows[-1]
        assert "f1 Help" in footer and "…" not in footer
        rows = await _goto(pilot, "2")
        assert "No run yet: press r to run the task" in rows[2] and "…" not in rows[2]
        assert "r Run" in rows[-1] and "f1 Help" in rows[-1]
        rows = await _goto(pilot, "3")
        sol = app.engines_area.bound
        assert "SPEED OF LIGHT" in rows[2] and f"{sol.bound}-bound" in rows[2] and "…" not in rows[2]
        assert format_seconds(sol.bound_s) in rows[2]
        # a matmul: the compute bound and the FLOPs behind it are there too
        metrics = {key: value for key, _, value in app.engines_area.query_one(MetricsTable).metrics}
        assert sol.work.flops > 0 and metrics["work_flops"].endswith("FLOP") and metrics["work_flops"] != "0 FLOP"
        assert metrics["speed_of_light_compute_s"] == format_seconds(sol.compute_s)
        assert any("work: TensorE FLOPs  " in r and metrics["work_flops"] in r for r in rows)
        rows = await _goto(pilot, "4")
        criteria = [r[:27] for r in rows[2:7]]
        assert all(r.rstrip().endswith("-") for r in criteria), criteria  # every score is shown
        assert "…" not in rows[2][27:]  # the criterion's title bar chose a label that fits


async def test_after_a_run_at_80x24_the_state_is_whole_and_a_notice_covers_nothing(task_dir):
    store_run(recorded_result(), "20260107T090000Z-a1b2c3")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        await settle(pilot)
        await _goto(pilot, "h")
        rows = await _goto(pilot, "enter")
        # the header keeps the task id and the run state; the status line the short run id
        assert rows[0].startswith(" nkitui │ scale_rows ") and "✔ passed" in rows[0] and "a1b2c3" in rows[0]
        assert "5/5 checks" in rows[2] and "a1b2c3" in rows[2] and "…" not in rows[2]
        rows = await _goto(pilot, "3")
        assert "ESTIMATED" in rows[2] and "latency 24.8 µs" in rows[2]
        before = screen_text(app).splitlines()
        from nkitui.app.widgets.run.area import run_notice

        app.notify(run_notice(app.session.runs.shown), title="Run a1b2c3 passed")
        await pilot.pause(0.3)
        await settle(pilot)
        assert not list(app.screen.query("Toast"))  # no toast over the bars, the log or the findings
        after = screen_text(app).splitlines()
        assert after[:-1] == before[:-1]  # every row but the footer is as it was
        assert after[-1].startswith(" Run a1b2c3 passed: 5/5 checks")  # the footer is the message line
        bars = app.screen.query_one(EngineBars).region
        assert bars.height >= 5
        app.notify("the disk is full", title="Draft", severity="error")  # an error is a toast too
        await pilot.pause(0.3)
        assert len(app.screen.query("Toast")) == 1
        assert [n.title for n in app.notices][-2:] == ["Run a1b2c3 passed", "Draft"]


def test_the_footer_drops_whole_entries_and_keeps_help():
    from textual.app import App
    from textual.binding import Binding

    class Tiny(App):
        BINDINGS = [Binding("f1", "help", "Help", id="app.help"),
                    Binding("ctrl+p", "palette", "Commands", id="app.palette"),
                    Binding("question_mark", "keys", "Keys", id="app.keys")] + [
            Binding(k, "noop", f"Action {k}", id=f"x.{k}") for k in "abcdefghij"]

        def compose(self):
            yield KeyFooter()

    async def run() -> str:
        app = Tiny()
        async with app.run_test(size=(60, 5)) as pilot:
            await pilot.pause()
            return screen_text(app).splitlines()[-1]

    import asyncio

    footer = asyncio.run(run())
    # Keys and Commands go first, then whole entries from the end; Help stays, last.
    assert footer.strip() == "a Action a  b Action b  c Action c  d Action d  f1 Help"

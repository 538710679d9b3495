"""The queue of tasks in the real app (Pilot), on folders of real sample tasks in real git repositories:
rows with their states, opening a task and coming back to it as it was left, reviewing from the queue,
filters, sorts, the next task that needs my review, export, and a background batch that fills the rows
in while a task is reviewed."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from textual import events

from nkitui.app.app import NkituiApp
from nkitui.app.screens.choice import ChoiceScreen, ExportScreen
from nkitui.app.screens.queue import QueueScreen
from nkitui.app.screens.review import ConfirmSubmit, SubmittedScreen
from nkitui.app.screens.workstation import WorkstationScreen
from tests.app.helpers import SAMPLE_TASKS, make_task_repo, screen_text, settle


def make_queue(base: Path, *names: str) -> Path:
    root = base / "queue"
    for name in names:
        make_task_repo(root / name, SAMPLE_TASKS / name)
    return root


def queue_app(root: Path, **kwargs) -> NkituiApp:
    return NkituiApp(root, mode="queue", backend="emulator", **kwargs)


async def filled(pilot) -> QueueScreen:
    """Wait until the queue has found its tasks and read every row."""
    app = pilot.app
    deadline = time.monotonic() + 60
    while app.queue_screen is None or not app.queue_screen.filled:
        await pilot.pause(0.05)
        assert time.monotonic() < deadline, "the queue never filled in"
    await settle(pilot)
    await pilot.pause(0.3)  # the list is re-sorted and redrawn a few times a second
    return app.queue_screen


def row_line(app, task_id: str) -> str:
    return next(line for line in screen_text(app).splitlines() if line.startswith(f" {task_id} "))


def score_everything(app, verdict: str = "revise") -> None:
    draft = app.draft
    for criterion in app.session.review.rubric.criteria:
        draft.set_score(criterion.id, 3, f"{criterion.title}: seen")
    draft.verdict = verdict
    draft.summary = "Reviewed from the queue."
    app.session.review.edited()


async def test_review_two_tasks_from_the_queue_and_come_back_to_each_as_it_was(tmp_path):
    root = make_queue(tmp_path, "vector_add", "flawed_partial_tile", "transpose2d")
    app = queue_app(root)
    async with app.run_test(size=(80, 24)) as pilot:
        qs = await filled(pilot)
        text = screen_text(app)
        assert "queue queue │ 0 of 3 reviewed, 0 failing, 0 outdated │ Ada Auditor" in text
        assert [r.key for r in qs.list.rows] == ["flawed_partial_tile", "transpose2d", "vector_add"]
        assert "○ not run" in row_line(app, "flawed_partial_tile") and "●2" in row_line(app, "flawed_partial_tile")
        assert row_line(app, "vector_add").rstrip().endswith("—")  # nobody reviewed it
        assert "no run for the current commit" in text  # the detail lines under the list

        # open the last task, review it (scores, verdict, ctrl+s, y) and come back
        await pilot.press("G", "enter")
        await settle(pilot)
        assert isinstance(app.screen, WorkstationScreen) and app.audit_task.id == "vector_add"
        assert "esc Queue" in screen_text(app)  # the way back is in the footer
        first = app.session
        score_everything(app)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmSubmit)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, SubmittedScreen)
        await pilot.press("escape", "escape")
        await settle(pilot)
        assert isinstance(app.screen, QueueScreen)
        await settle(pilot)
        await pilot.pause(0.3)
        assert "✓ by me" in row_line(app, "vector_add")
        assert "1 of 3 reviewed" in screen_text(app)
        assert qs.list.current_key == "vector_add"

        # n: the next task that needs my review (wrapping round past the one I reviewed)
        await pilot.press("n")
        assert qs.list.current_key == "flawed_partial_tile"
        await pilot.press("enter")
        await settle(pilot)
        assert app.audit_task.id == "flawed_partial_tile" and app.session is not first
        app.draft.set_score("migration_fidelity", 2, "the last tile is not masked")
        app.session.review.edited()
        await pilot.press("Q")  # the other key back
        await settle(pilot)
        await pilot.pause(0.3)
        assert "my draft" in row_line(app, "flawed_partial_tile")

        # the first task comes back as it was left: its session, its draft (new, after the submission)
        qs.list.move_to("vector_add")
        await pilot.press("enter")
        await settle(pilot)
        assert app.session is first and app.header_state.task == "vector_add"
        assert app.draft.scores["migration_fidelity"].value is None
        await pilot.press("escape")
        await settle(pilot)
        qs.list.move_to("flawed_partial_tile")
        await pilot.press("enter")
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].comment == "the last tile is not masked"
        assert len(app.sessions) == 2
        # the palette's "next task that needs my review" opens it straight from the workstation
        app.action_next_task()
        await settle(pilot)
        assert app.audit_task.id == "transpose2d"


async def test_filters_sorts_menus_and_export(tmp_path, monkeypatch):
    root = make_queue(tmp_path, "vector_add", "flawed_partial_tile", "transpose2d", "flawed_bf16_accum")
    monkeypatch.chdir(tmp_path)
    app = queue_app(root)
    async with app.run_test(size=(80, 24)) as pilot:
        qs = await filled(pilot)
        keys = lambda: [r.key for r in qs.list.rows]  # noqa: E731
        # /: text filter, live; Enter keeps it, Escape (on the list) drops every filter
        await pilot.press("slash", *"flawed", "enter")
        await settle(pilot)
        assert keys() == ["flawed_bf16_accum", "flawed_partial_tile"]
        assert "“flawed”" in screen_text(app) and "2 of 4 tasks" in screen_text(app)
        await pilot.press("escape")
        assert keys() == ["flawed_bf16_accum", "flawed_partial_tile", "transpose2d", "vector_add"]
        # f: the state menu, with counts
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert "to review (mine to do)" in screen_text(app)
        names = [name for name, _, _ in app.screen.entries]
        for _ in range(names.index("not-run")):
            await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        assert qs.state_filter == "not-run" and len(keys()) == 4
        await pilot.press("escape")
        # s: sort by findings, the most severe first; S reverses
        await pilot.press("s")
        await settle(pilot)
        names = [name for name, _, _ in app.screen.entries]
        for _ in range(names.index("findings")):
            await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        assert keys()[0] == "flawed_partial_tile" and keys()[-1] in ("transpose2d", "vector_add")
        assert "findings ↓" in screen_text(app)
        await pilot.press("S")
        assert keys()[-1] == "flawed_partial_tile"
        # F1 is the queue's help; the palette offers the queue's commands
        await pilot.press("f1")
        await settle(pilot)
        assert "Every task under the folder" in screen_text(app)
        await pilot.press("escape")
        titles = [c.title for c in app.palette_commands()]
        assert "Batch: evaluate the tasks (resume)" in titles and "Export the table (CSV or JSONL)" in titles
        assert "Run: start" not in titles and "Go to Rubric" not in titles
        # r and 1-4 mean nothing here (no task is shown)
        await pilot.press("r", "2")
        await settle(pilot)
        assert isinstance(app.screen, QueueScreen) and not app.sessions.__len__()

        # E: export the lab's table; the default file is in the current folder
        await pilot.press("E")
        await settle(pilot)
        assert isinstance(app.screen, ExportScreen)
        await pilot.press("enter")
        await settle(pilot)
        exported = qs.exported
        assert exported is not None and exported.parent == tmp_path and exported.suffix == ".csv"
        assert any(str(exported) in n.message and n.title == "Table exported" for n in app.notices)
        rows = list(csv.DictReader(exported.open()))
        assert [r["task_id"] for r in rows] == ["flawed_bf16_accum", "flawed_partial_tile", "transpose2d", "vector_add"]
        assert {r["status"] for r in rows} == {"not run"}
        # a name of your own, as JSON lines; a name that exists asks before it is replaced
        await pilot.press("E")
        await settle(pilot)
        field = app.screen.query_one("#export-path")
        field.value = "lab/table.txt"
        await pilot.press("enter")
        assert "end the name in .csv" in screen_text(app)
        field.value = "table.jsonl"
        await pilot.press("enter")
        await settle(pilot)
        lines = (tmp_path / "table.jsonl").read_text().splitlines()
        assert len(lines) == 4 and json.loads(lines[0])["task_id"] == "flawed_bf16_accum"
        await pilot.press("E")
        await settle(pilot)
        app.screen.query_one("#export-path").value = "table.jsonl"
        await pilot.press("enter")
        assert "exists: Enter again replaces it" in screen_text(app)
        await pilot.press("escape")


async def test_a_folder_that_is_one_discovered_task_opens_the_workstation(tmp_path):
    port = make_task_repo(tmp_path / "vector_add", SAMPLE_TASKS / "vector_add")
    (port / "task.toml").unlink()  # a port without a manifest: discovered, the folder is the task
    app = NkituiApp(port, mode="auto", backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        deadline = time.monotonic() + 30
        while app.session is None:
            await pilot.pause(0.05)
            assert time.monotonic() < deadline
        assert isinstance(app.screen, WorkstationScreen) and not app.queue_mode
        assert app.audit_task.root == port
        assert app.check_action("back_to_queue", ()) is False  # no queue to go back to


@pytest.mark.slow
async def test_a_background_batch_fills_the_rows_in_while_a_task_is_reviewed(tmp_path):
    from nkitui.evaluate.run.store import RunStore

    root = make_queue(tmp_path, "vector_add", "transpose2d")
    app = queue_app(root)
    async with app.run_test(size=(80, 24)) as pilot:
        qs = await filled(pilot)
        await pilot.press("B")
        await settle(pilot)
        assert "Evaluate 2 tasks under queue in the background" in screen_text(app)
        await pilot.press("y")
        deadline = time.monotonic() + 60
        while qs.queue.progress is None or not qs.queue.progress.started:
            await pilot.pause(0.1)
            assert time.monotonic() < deadline, "the batch never started a task"
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "◐ running" in text and "batch 0/2" in text and "x cancels" in text
        # review a task meanwhile: the batch goes on
        await pilot.press("G", "enter")
        await settle(pilot)
        assert app.audit_task.id == "vector_add"
        while not qs.queue.progress.done:
            await pilot.pause(0.2)
            assert time.monotonic() < deadline + 240, "the batch never finished"
        await settle(pilot)
        session = app.session
        assert session.runs.shown is not None and session.runs.shown.status == "passed"  # the batch's run
        assert app.header_state.run == "passed"
        await pilot.press("escape")
        await settle(pilot)
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "✔ passed" in row_line(app, "vector_add") and "✔ passed" in row_line(app, "transpose2d")
        assert "batch done in" in text and "✓2" in text
        assert any(n.title == "Batch done" for n in app.notices)
        # as the command line's: each result in the run store
        store = RunStore()
        assert store.ids("vector_add") and store.ids("transpose2d")

        # a run of an open task goes on after Escape; its row says so, then shows the new verdict
        qs.list.move_to("transpose2d")
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("r")
        while not app.session.runs.running:
            await pilot.pause(0.05)
            assert time.monotonic() < deadline + 300, "the run never started"
        await pilot.press("escape")
        session = app.sessions.get(root / "transpose2d")
        # the row follows the run's events: under load its refresh can come after a fixed pause
        while "◐ running" not in row_line(app, "transpose2d") and session.runs.running:
            await pilot.pause(0.05)
            assert time.monotonic() < deadline + 330, "the row never said running"
        assert isinstance(app.screen, QueueScreen)
        assert "◐ running" in row_line(app, "transpose2d") and "1 running" in screen_text(app)
        while session.runs.running:
            await pilot.pause(0.2)
            assert time.monotonic() < deadline + 400, "the run never ended"
        await settle(pilot)
        await pilot.pause(0.3)
        assert "✔ passed" in row_line(app, "transpose2d")
        assert qs.queue.row("transpose2d").verdict.run_id == session.runs.shown.run_id  # the newest run


async def test_keys_typed_while_an_auto_folder_is_read_reach_the_task_it_turns_out_to_be(tmp_path):
    # `nkitui FOLDER` reads the folder first (a queue, or one task?); keys typed meanwhile once went to
    # the queue screen and were lost when the folder turned out to be one task.
    port = make_task_repo(tmp_path / "vector_add", SAMPLE_TASKS / "vector_add")
    app = NkituiApp(port, mode="auto", backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        for key in "2m":  # typed at once, as in a terminal: the folder is not read yet
            app.post_message(events.Key(key, key))
        await settle(pilot)
        deadline = time.monotonic() + 30
        while app.session is None or app.holding_keys:
            await pilot.pause(0.05)
            assert time.monotonic() < deadline
        await settle(pilot)
        assert isinstance(app.screen, WorkstationScreen)
        assert app.workstation.current_area == "run" and app.run_area.showing_results


async def test_keys_typed_while_an_auto_folder_is_read_reach_the_queue_it_turns_out_to_be(tmp_path):
    root = make_queue(tmp_path, "vector_add", "transpose2d")
    app = NkituiApp(root, mode="auto", backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(events.Key("enter", "\r"))  # at once: the rows are not there yet; Enter opens the first
        deadline = time.monotonic() + 30
        while app.session is None:
            await pilot.pause(0.05)
            assert time.monotonic() < deadline, "Enter typed while the folder was read was lost"
        await settle(pilot)
        assert isinstance(app.screen, WorkstationScreen) and app.queue_mode

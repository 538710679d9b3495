"""What a full audit at 80x24 showed (issue #18, items 3, 4, 5, 6, 9, 12), each pinned by the real app:
failing checks first, errors followed to their line, the auditor's identity, the last completed run
kept, a folder outside git, and the small things (early keys, notices, zoom, follow, quitting)."""

from __future__ import annotations

import copy
import re
import shutil

import git
import pytest

from nkitui.app.screens.prompts import AuditorScreen, ConfirmScreen
from nkitui.app.screens.review import ConfirmSubmit
from nkitui.evaluate.run.result import Check
from tests.app.helpers import FIXTURES, new_app, recorded_result, screen_text, settle, store_run

SMALL = (80, 24)


async def _press(pilot, *keys: str) -> list[str]:
    await pilot.press(*keys)
    await settle(pilot)
    return screen_text(pilot.app).splitlines()


def _words(text: str) -> str:
    """Screen text as one line of words: no borders, no scrollbar, wrapped lines joined."""
    return " ".join(re.sub(r"[│╭╮╰╯─▄▀▁▂▃▅▆▇█▔▎▊▍▌▐]", " ", text).split())


async def _dialog_text(pilot, wanted: str) -> str:
    """The screen's words once `wanted` is on it (a Markdown dialog fills in after it opens)."""
    for _ in range(50):
        text = _words(screen_text(pilot.app))
        if wanted in text:
            return text
        await pilot.pause(0.1)
    return text


def slow_reference(task_dir, seconds: float) -> None:
    """The reference's first call waits, so a run is surely still going while a test acts on it."""
    reference = task_dir / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    return x.astype",
        f"    import time\n\n    if not _WAITED:\n        _WAITED.append(1)\n        time.sleep({seconds})\n"
        "    return x.astype",
    ) + "\n_WAITED: list = []\n")


async def wait_for_phase(pilot, phase: str, timeout_s: float = 60) -> None:
    for _ in range(int(timeout_s / 0.1)):
        await pilot.pause(0.1)
        if phase in pilot.app.header_state.run_detail:
            return
    raise AssertionError(f"the run never reached {phase}: {pilot.app.header_state}")


# --- item 3: the results pane shows failing checks first, readable at 80 columns ---------------------

async def test_the_results_pane_shows_failing_checks_first_with_their_detail_whole_at_80_columns(task_dir):
    failed = copy.deepcopy(recorded_result())
    detail = ("2 of 3 adversarial trials fail: `y` differs from the reference on inputs with large magnitudes "
              "(max abs 3.2e+01 at [299, 7]) and on denormals (max rel 1.0e+00 at [0, 0])")
    failed.checks = [*failed.checks[:2], Check("trials", "the kernel survives adversarial inputs", False, detail),
                     *failed.checks[3:]]
    failed.status = "failed"
    store_run(failed, "20260107T090000Z-a1b2c3", file_hashes={})
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await _press(pilot, "h")
        await _press(pilot, "enter")
        rows = await _press(pilot, "m")
        first = next(i for i, r in enumerate(rows) if "Checks:" in r)
        assert "Checks: 1 of 5 failing" in rows[first]
        assert "✘ FAIL" in rows[first + 1] and "adversarial inputs" in rows[first + 1]
        assert " ".join(detail.split()) in _words("\n".join(rows[first + 2:first + 6]))  # whole, wrapped
        assert all(len(r) <= 80 for r in rows)
        passing = [i for i, r in enumerate(rows) if "✔ pass" in r]
        assert passing and min(passing) > first + 1  # passing checks come after the failing one


# --- item 4: an error is followed to its line, and marked there --------------------------------------

@pytest.mark.slow
async def test_enter_on_an_error_or_a_traceback_frame_opens_the_source_there_and_marks_it(task_dir):
    kernel = task_dir / "scale_rows_nki.py"
    kernel.write_text(kernel.read_text().replace("        x_tile = nl.load(", "        undefined_name\n        x_tile = nl.load(", 1))
    line = kernel.read_text().splitlines().index("        undefined_name") + 1
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot, timeout=120)
        assert app.header_state.run == "failed"
        log = app.run_area.log
        texts = [log.store.texts[i] for i in range(log.store.total)]
        error_row = next(i for i, t in enumerate(texts) if t.startswith(f"error (kernel-error) at scale_rows_nki.py:{line}"))
        frame_row = next(i for i, t in enumerate(texts) if t.strip().startswith('File "scale_rows_nki.py"'))
        for row in (error_row, frame_row):
            await _press(pilot, "2")
            log.move_cursor(row)
            rows = await _press(pilot, "enter")
            assert app.workstation.current_area == "source"
            code = app.source_area.code
            assert code.row_at_cursor().right == line
            assert any(f.rule == "RUN-KERNEL-ERROR" and f.line == line for f in code.findings_at_cursor())
            assert any(re.match(rf"\s*{line}●", r.split("│")[-1]) for r in rows), "\n".join(rows)  # the gutter mark
        await _press(pilot, "2")
        log.move_cursor(0)  # "worker ... started": no place in the task
        await _press(pilot, "enter")
        assert app.workstation.current_area == "run"
        assert app.notices[-1].message == "This line names no line of the task's files."


# --- item 5: the auditor's identity -----------------------------------------------------------------

async def test_the_header_and_the_submit_dialog_say_who_submits(task_dir):
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "auditor Ada Auditor" in screen_text(app).splitlines()[0]
        draft = app.draft
        for cid in draft.scores:
            draft.set_score(cid, 4, "ok")
        draft.verdict = "accept"
        app.session.review.edited()
        await _press(pilot, "ctrl+s")
        assert isinstance(app.screen, ConfirmSubmit)
        wanted = "Submitting as Ada Auditor <ada@example.com> (from git config) into reviews/ada-auditor/"
        assert wanted in await _dialog_text(pilot, wanted)
    async with new_app(task_dir, backend="emulator").run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert " Ada " in screen_text(pilot.app).splitlines()[0]  # at 80 columns: the first name


async def test_a_shared_account_is_asked_once_and_the_answer_is_remembered_in_the_config(task_dir, isolated_xdg):
    from nkitui.app.config import load_config

    account = "ec2-user"  # root and ubuntu are flagged alike (tests/session/test_review_identity.py)
    with git.Repo(task_dir).config_writer() as cw:
        cw.set_value("user", "name", account)
        cw.set_value("user", "email", f"{account}@ip-172-31-0-1.ec2.internal")
    app = new_app(task_dir, backend="emulator", config=load_config())
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AuditorScreen)
        assert "shared account" in " ".join(screen_text(app).split())
        assert f"⚠ {account}" in screen_text(app).splitlines()[0] or "⚠" in app.header_state.auditor + "⚠"
        assert app.header_state.auditor_warning
        await pilot.press(*account, "enter")  # the shared name itself is refused
        await settle(pilot)
        assert isinstance(app.screen, AuditorScreen) and "shared account" in screen_text(app)
        app.screen.query_one("#auditor-name").value = ""
        await pilot.press(*"Grace Hopper <grace@example.org>", "enter")
        await settle(pilot)
        assert not isinstance(app.screen, AuditorScreen)
        assert "Grace" in screen_text(app).splitlines()[0] and not app.header_state.auditor_warning
    config = isolated_xdg / "config" / "nkitui" / "config.toml"
    assert 'auditor = "Grace Hopper <grace@example.org>"' in config.read_text()
    again = new_app(task_dir, backend="emulator", config=load_config())
    async with again.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert not isinstance(again.screen, AuditorScreen)  # asked once
        assert again.session.identity.display == "Grace Hopper <grace@example.org>"


async def test_a_declined_question_warns_in_the_submit_dialog(task_dir):
    with git.Repo(task_dir).config_writer() as cw:
        cw.set_value("user", "name", "ubuntu")
        cw.set_value("user", "email", "ubuntu@localhost")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await _press(pilot, "escape")  # ask me later
        draft = app.draft
        for cid in draft.scores:
            draft.set_score(cid, 4, "ok")
        draft.verdict = "accept"
        app.session.review.edited()
        await _press(pilot, "ctrl+s")
        assert isinstance(app.screen, AuditorScreen)  # later is now: asked before the commit
        await _press(pilot, "escape")
        assert isinstance(app.screen, ConfirmSubmit)
        text = await _dialog_text(pilot, "Submitting as ubuntu <ubuntu@localhost>")
        assert "Submitting as ubuntu <ubuntu@localhost>" in text and "⚠ Reviews would be committed as" in text
        assert "a shared account" in text


# --- item 6: the last completed run stays shown; a reopened app shows the latest run ---------------

@pytest.mark.slow
async def test_cancelling_keeps_the_last_completed_run_shown(task_dir):
    slow_reference(task_dir, 60)
    app = new_app(task_dir, backend="emulator")
    earlier = store_run(recorded_result(), "20260107T090000Z-a1b2c3", file_hashes={})
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await _press(pilot, "h")
        await _press(pilot, "enter")
        assert app.header_state.run == "passed"
        await pilot.press("r")
        await wait_for_phase(pilot, "reference")
        assert app.engines_area.record is not None  # the completed run's engines stay while one runs
        rows = await _press(pilot, "x")
        assert app.session.runs.shown.run_id == earlier.run_id
        assert app.header_state.run == "passed" and app.header_state.run_detail.endswith("a1b2c3")
        assert "✔ passed" in rows[2] and "a1b2c3" in rows[2] and "cancelled" in rows[2], rows[2]
        assert app.run_area.log.store.total == len(earlier.log_excerpt)  # its log is back too
        assert app.engines_area.record is not None and app.engines_area.query_one("#metrics").run_id == earlier.run_id
        assert any(n.title == "Run cancelled" and "still showing run a1b2c3" in n.message for n in app.notices)
        rows = await _press(pilot, "m")
        assert any("Checks: all 5 pass" in r for r in rows)


async def test_a_reopened_app_shows_the_latest_run_of_the_current_files(task_dir):
    from nkitui.task import load_task

    hashes = load_task(task_dir).file_hashes()
    store_run(recorded_result(), "20260108T090000Z-bbbbbb", file_hashes=hashes, created_at="2026-01-08T09:00:00+00:00")
    store_run(recorded_result(), "20260109T090000Z-cccccc", file_hashes={"scale_rows_nki.py": "0" * 64},
              created_at="2026-01-09T09:00:00+00:00")  # newer, but of other files
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert app.header_state.run == "passed" and app.header_state.run_detail.endswith("bbbbbb")
        rows = await _press(pilot, "2")
        assert "latest bbbbbb" in rows[2]
        assert app.run_area.log.store.total > 0 and app.engines_area.record is not None


async def test_a_reopened_app_shows_the_run_its_draft_cites_when_none_is_of_the_current_files(task_dir):
    from nkitui.review import Draft, DraftStore, rubric_for_task
    from nkitui.task import load_task

    task = load_task(task_dir)
    cited = store_run(recorded_result(), "20260107T090000Z-cited0", file_hashes={"scale_rows_nki.py": "0" * 64})
    draft = Draft.new(task.id, rubric_for_task(task))
    draft.cite_run(cited.run_id)
    DraftStore().save(task.root, draft)
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert app.session.runs.shown.run_id == cited.run_id
        rows = await _press(pilot, "2")
        assert "cited cited0" in rows[2] and "files changed since" in rows[2]


# --- item 9: a folder outside git --------------------------------------------------------------------

async def test_a_folder_outside_git_is_said_on_opening_and_made_a_repository(tmp_path, isolated_xdg):
    from nkitui.app.config import load_config

    folder = tmp_path / "scale_rows"
    shutil.copytree(FIXTURES / "scale_rows", folder)
    config = isolated_xdg / "config" / "nkitui"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('auditor = "Grace Hopper <grace@example.org>"\n')
    app = new_app(folder, backend="emulator", config=load_config())
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        text = " ".join(screen_text(app).split())
        assert "is not in a git repository" in text and "make" in text and "git init" in text
        await _press(pilot, "y")
        repo = git.Repo(folder)
        assert repo.head.commit.author.email == "grace@example.org"
        assert "task.toml" in repo.head.commit.stats.files
        assert app.session.repository.ready
        assert any("is a git repository now" in n.message for n in app.notices)


async def test_declining_keeps_the_offer_in_the_palette(tmp_path, isolated_xdg):
    from nkitui.app.config import load_config

    folder = tmp_path / "scale_rows"
    shutil.copytree(FIXTURES / "scale_rows", folder)
    (isolated_xdg / "config" / "nkitui").mkdir(parents=True)
    (isolated_xdg / "config" / "nkitui" / "config.toml").write_text('auditor = "Grace Hopper"\n')
    app = new_app(folder, backend="emulator", config=load_config())
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await _press(pilot, "n")
        assert not (folder / ".git").exists()
        command = {c.title: c for c in app.palette_commands()}["Git: make the task folder a repository"]
        command.run()
        await settle(pilot)
        assert git.Repo(folder).head.is_valid()


# --- item 12: the small things -------------------------------------------------------------------------

async def test_keys_pressed_while_the_task_opens_are_not_lost(task_dir):
    from nkitui.app.app import NkituiApp

    app = NkituiApp(task_dir, backend="emulator")  # a folder: loaded after the first frame
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("2", "m")  # at once, before the task is loaded
        await settle(pilot)
        assert app.workstation.current_area == "run" and app.run_area.showing_results
        await pilot.press("4", "down")  # right after a digit, the next key reaches the new area
        await settle(pilot)
        assert app.workstation.area("rubric").current_id == "performance_quality"


async def test_zoom_keeps_the_header_and_footer_and_says_how_to_go_back(task_dir):
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        rows = await _press(pilot, "2", "z")
        assert rows[0].startswith(" nkitui │ scale_rows") and "target trn2" in rows[0]
        assert "Run zoomed" in rows[1] and "z or Escape: back to the split layout" in rows[1]
        assert "f1 Help" in rows[-1]
        assert app.run_area.region.width == 160 and not app.source_area.display
        rows = await _press(pilot, "escape")
        assert app.workstation.zoomed is None and "1 Source" in rows[1] and app.source_area.display


async def test_a_following_log_keeps_its_last_line_in_view_after_a_resize():
    from tests.app.test_log import LogApp, lines

    app = LogApp()
    async with app.run_test(size=(80, 30)) as pilot:
        log = app.query_one("#log")
        log.append_lines(lines(500))
        log.flush_now()
        await pilot.pause()
        assert "line 499 " in screen_text(app)
        for size in ((80, 14), (100, 40), (70, 12)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.2)
            assert log.following and "line 499 " in screen_text(app), size


@pytest.mark.slow
async def test_q_during_a_run_asks_before_quitting(task_dir):
    slow_reference(task_dir, 60)
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await wait_for_phase(pilot, "reference")
        await pilot.press("q")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmScreen) and app.is_running
        assert "is still going" in " ".join(screen_text(app).split())
        await pilot.press("n")
        await pilot.pause(0.2)
        assert app.is_running and app.session.runs.running
        await pilot.press("q")
        await pilot.pause(0.2)
        await pilot.press("y")
        await pilot.pause(0.5)
        assert not app.is_running
    assert app.return_value == 0


async def test_q_without_a_run_quits_at_once(task_dir):
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause(0.2)
        assert not app.is_running


async def test_a_reopened_runs_log_reads_as_the_live_log_did(task_dir):
    from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, log_lines_of
    from nkitui.session.runlog import event_lines

    # what a run's events add to the live log, and what the parent stores from the same events
    events = [LogEvent("worker", "backend: emulator — requested"), PhaseEvent("compile", "start"),
              PhaseEvent("compile", "end", "ok", 0.25, "emulator: scale_rows_nki.py::scale_rows_kernel"),
              LogEvent("stdout", "tile 0 done"), LogEvent("stderr", "a warning from numpy", "warning"),
              ErrorEvent("kernel-error", "the kernel failed on seed 0", "scale_rows_nki.py", 21,
                         'Traceback (most recent call last):\n  File "scale_rows_nki.py", line 21, in k\n'
                         "    y = undefined\nNameError: undefined"),
              PhaseEvent("run", "end", "failed", 0.5, "0/2 seeds ran")]
    live = [line for e in events for line in event_lines(e)]
    stored = [line for e in events for line in (log_lines_of(e) if not isinstance(e, LogEvent) else [e])]
    excerpt = [f"[{e.stream}{'' if e.level == 'info' else ':' + e.level}] {e.text}" for e in stored]
    store_run(recorded_result(), "20260107T090000Z-a1b2c3", log_excerpt=excerpt)
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await _press(pilot, "h")
        await _press(pilot, "enter")
        store = app.run_area.log.store
        shown = [(store.levels[i], store.texts[i]) for i in range(store.total)]
        assert shown == [tuple(line) for line in live]
        assert ("── compile ok in 0.25 s: emulator: scale_rows_nki.py::scale_rows_kernel" in store.texts
                and "[stdout] tile 0 done" in store.texts and "backend: emulator — requested" in store.texts)

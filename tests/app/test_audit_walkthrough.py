"""Rough edges found by walking a whole audit by keys in tmux (80x24 and 160x48): each test pins one."""

from __future__ import annotations

import re

from nkitui.app.screens.runs import RunsScreen
from nkitui.app.widgets.rubric.widgets import CommentEditor, CriteriaList
from tests.app.helpers import new_app, recorded_result, screen_text, settle, store_run, use_editor_that_writes


async def test_marked_runs_show_a_and_b_in_the_runs_list(task_dir):
    result = recorded_result()
    store_run(result, "20260107T090000Z-aaaaaa")
    store_run(result, "20260108T090000Z-bbbbbb", created_at="2026-01-08T09:00:00+00:00")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("down", "space", "up", "space")  # A = the older run, B = the newer
        await settle(pilot)
        text = screen_text(app)
        assert re.search(r"A\s+2026-01-07 09:00", text), text
        assert re.search(r"B\s+2026-01-08 09:00", text), text


async def test_escape_leaves_the_comment_editor_for_the_criteria_list(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        await pilot.press("tab", "tab")  # criteria -> score -> comment
        assert isinstance(app.focused, CommentEditor)
        await pilot.press(*"ok", "escape")
        await settle(pilot)
        assert isinstance(app.focused, CriteriaList)
        assert app.draft.scores["migration_fidelity"].comment == "ok"  # nothing typed is lost
        await pilot.press("down")  # the area's keys work again: the next criterion
        await settle(pilot)
        assert app.workstation.area("rubric").current_id == "performance_quality"


async def test_hints_name_the_key_the_user_rebound(task_dir, isolated_xdg):
    cfg = isolated_xdg / "config" / "nkitui"
    cfg.mkdir(parents=True)
    (cfg / "keymap.toml").write_text('"app.run" = "f9"\n"app.attach" = "A"\n')
    app = new_app(task_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "press f9 to run the task" in text, text
        assert "f9 runs the task" in text  # the speed-of-light note in Engines
        assert "press A on a finding" in text  # the empty evidence list in Rubric
        assert "press r" not in text and "r runs" not in text


async def test_a_run_cancelled_before_auto_resolved_keeps_the_probed_backend(task_dir):
    app = new_app(task_dir)  # backend auto: the probe resolves it to the emulator here
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        probed = app.header_state.backend
        assert probed == "emulator (auto)"
        cancelled = store_run(recorded_result(), "20260109T090000Z-cccccc", status="cancelled", backend="auto",
                              backend_requested="auto", utilisation=None)
        app.session.runs.show(cancelled, "reopened")
        await settle(pilot)
        assert app.header_state.run == "cancelled"
        assert app.header_state.backend == probed
        assert "auto (auto)" not in screen_text(app)


async def test_a_search_match_below_the_screen_is_centred_not_left_at_the_edge():
    from tests.app.test_log import LogApp, lines

    app = LogApp()
    async with app.run_test(size=(80, 21)) as pilot:
        log = app.query_one("#log")
        log.append_lines(lines(2000))
        log.flush_now()
        await pilot.pause()
        await pilot.press("g")  # to the top: the match is far below the screen
        await pilot.pause()
        assert log.search("line 1500 ")
        await pilot.pause()
        height = log.scrollable_content_region.height
        assert log.cursor == 1500
        assert abs((log.cursor - log.scroll_offset.y) - height // 2) <= 1, (log.scroll_offset.y, height)
        assert "line 1490 " in screen_text(app) and "line 1510 " in screen_text(app)  # context on both sides


async def test_e_shows_a_finding_in_full(task_dir):
    from nkitui.app.screens.finding import FindingScreen
    from nkitui.app.widgets.source.area import FindingsList

    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "f")  # the findings list
        await settle(pilot)
        findings = app.source_area.query_one(FindingsList)
        assert app.focused is findings and findings.findings
        finding = findings.current()
        assert len(finding.message) > 150  # more than the one-row strip can show at 80 columns
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, FindingScreen)
        shown = _squash(screen_text(app))
        assert finding.rule in shown and _squash(finding.message)[-80:] in shown  # the end, not cut off
        await pilot.press("escape")
        await settle(pilot)
        assert app.focused is findings
        await pilot.press("enter")  # to the finding's line in the code view; e works there too
        await settle(pilot)
        assert finding.line is not None
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, FindingScreen) and app.screen.findings[0].rule == finding.rule


def _squash(text: str) -> str:
    """Screen text without borders and whitespace: wrapped text compares with the original."""
    return re.sub(r"[\s│╭╮╰╯─▊▎▔▁]", "", text)


async def test_the_verdict_page_asks_for_a_verdict_and_the_status_keeps_the_blockers_at_80_columns(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        await pilot.press("tab", "right")  # score the first criterion: the status line grows
        await settle(pilot)
        status = [line for line in screen_text(app).splitlines() if "scored" in line and "·" in line][-1]
        assert "to fix before submit" in status and "…" not in status, status
        area = app.workstation.area("rubric")
        area.show_verdict_page()
        await settle(pilot)
        text = screen_text(app)
        # not chosen yet: the row or the note under it says so (at 80 columns the row keeps its key hint)
        assert "verdict  accept" in text and ("(not chosen)" in text or "Choose a verdict." in text), text
        assert "score  accept" not in text and "(not scored)" not in text


async def test_the_palette_offers_to_explain_a_finding_only_on_a_line_with_one(task_dir):
    from nkitui.app.commands import palette_commands
    from nkitui.app.screens.finding import FindingScreen

    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        title = "Source: explain the finding here"
        assert app.source_area.code.findings_at_cursor() == []  # line 1 has none
        assert title not in [c.title for c in palette_commands(app)]
        await pilot.press("n")  # to the first line with a finding
        await settle(pilot)
        command = {c.title: c for c in palette_commands(app)}[title]
        command.run()
        await settle(pilot)
        assert isinstance(app.screen, FindingScreen)


async def test_enter_on_a_run_finding_without_a_line_opens_it_in_full(task_dir):
    from nkitui.app.screens.finding import FindingScreen
    from nkitui.app.widgets.source.area import FindingsList
    from nkitui.common.findings import Finding

    message = "The error of `y` is far above what its dtypes explain. " * 8  # longer than any toast
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        run_finding = Finding("NUM-DTYPE-ERROR-DOMINATES", "high", "Low-precision error dominates", message,
                              "numerics", "numerics")
        app.source_area.set_findings([*app.session.findings, run_finding])
        await pilot.press("1", "f")
        await settle(pilot)
        findings = app.source_area.query_one(FindingsList)
        findings.highlighted = [f.rule for f in findings.findings].index("NUM-DTYPE-ERROR-DOMINATES")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, FindingScreen)
        assert _squash(message)[-80:] in _squash(screen_text(app))


async def test_f7_opens_the_editor_from_the_criteria_list_and_the_score_too(task_dir, tmp_path, monkeypatch):
    use_editor_that_writes(tmp_path, monkeypatch, "From the list.\\n")
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        assert isinstance(app.focused, CriteriaList)
        await pilot.press("f7")
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].comment == "From the list."
        await pilot.press("down", "tab")  # the next criterion's score selector
        await settle(pilot)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert app.draft.scores["performance_quality"].comment == "From the list."


async def test_the_run_report_keeps_whole_numbers_at_80_columns_and_scrolls_sideways(task_dir):
    from nkitui.app.widgets.run.results import ResultsPane

    store_run(recorded_result(), "20260107T090000Z-aaaaaa")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("enter", "2", "m")  # reopen the run, show its results
        await settle(pilot)
        pane = app.run_area.query_one(ResultsPane)
        pane.focus()
        seen = []
        for _ in range(30):  # page down to the per-seed metrics table
            await pilot.press("pagedown")
            await pilot.pause()
            seen = screen_text(app).splitlines()
            if any("outputs per seed" in line for line in seen):
                break
        rows = [line for line in seen if re.match(r"\s*y\s+│\s+\d\s+│", line)]
        assert rows, "\n".join(seen)
        # the columns that fit show whole values; the rest is a right-arrow away, not cut to "…"
        assert not any("…" in line for line in rows), "\n".join(rows)
        assert pane.max_scroll_x > 0
        await pilot.press("right", "right", "right")
        await pilot.pause()
        assert pane.scroll_offset.x > 0


async def test_f1_and_question_mark_work_inside_the_modal_lists(task_dir):
    from nkitui.app.screens.finding import FindingScreen
    from nkitui.app.screens.help import HelpScreen, KeysScreen
    from nkitui.app.screens.revisions import RevisionPicker

    store_run(recorded_result(), "20260107T090000Z-aaaaaa")
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for opener, screen_type, words in (("h", RunsScreen, "Earlier runs"), ("v", RevisionPicker, "Compare revisions"),
                                           ("e", FindingScreen, "unabridged")):
            if opener == "e":
                await pilot.press("1", "f")  # the findings list: e opens the highlighted one
                await settle(pilot)
            await pilot.press(opener)
            await settle(pilot)
            assert isinstance(app.screen, screen_type)
            await pilot.press("f1")
            await settle(pilot)
            assert isinstance(app.screen, HelpScreen), (opener, app.screen)
            assert words in " ".join(screen_text(app).split())
            await pilot.press("escape")
            await settle(pilot)
            assert isinstance(app.screen, screen_type)
            await pilot.press("question_mark")
            await settle(pilot)
            assert isinstance(app.screen, KeysScreen)
            await pilot.press("escape", "escape")
            await settle(pilot)


async def test_the_diff_strip_says_how_to_reach_the_changes_on_a_header_row(task_dir):
    from nkitui.app.widgets.source.diff_view import DiffView

    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "d")
        await settle(pilot)
        diff = app.source_area.query_one(DiffView)
        assert diff.evidence_at_cursor() is None  # the cursor starts on the file header
        assert "n/p jump between changes" in screen_text(app)
        await pilot.press("n")
        await settle(pilot)
        assert diff.evidence_at_cursor() is not None
        assert "jump between changes" not in screen_text(app)


async def test_the_strip_under_the_code_names_the_key_for_a_finding_too_long_for_it(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("n")  # to the first line with a finding
        await settle(pilot)
        finding = app.source_area.code.findings_at_cursor()[0]
        strip = [line for line in screen_text(app).splitlines() if finding.rule in line and "in full" in line]
        assert strip, screen_text(app)
        assert "(e: in full)" in strip[0]  # the key first: the title may be cut at 80 columns, the key is not
        assert finding.title[:40] in strip[0]
        assert finding.message[:30] not in strip[0]  # no explanation cut mid-sentence
    async with new_app(task_dir).run_test(size=(200, 40)) as pilot:  # wide: title and hint both fit
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert f"{finding.title}  ·  e shows it in full" in screen_text(pilot.app)

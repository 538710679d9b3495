"""Scoring from the keyboard at 80x24: Tab reaches the score (the row says so), arrows and digits score
there (a digit no longer jumps to another area), and a meaning too long for the note under the score
says which key shows it whole."""

from __future__ import annotations

from nkitui.app.screens.levels import LevelsScreen
from nkitui.app.widgets.rubric.widgets import CriteriaList, LevelNote, ScoreSelector
from tests.app.helpers import new_app, screen_text, settle


async def test_digits_score_where_the_score_is_focused_and_switch_areas_elsewhere(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        area = app.rubric_area
        selector = area.query_one(ScoreSelector)
        assert isinstance(app.focused, CriteriaList)
        assert "Tab here to score" in screen_text(app)  # how to get to the score
        await pilot.press("tab")
        await settle(pilot)
        assert app.focused is selector
        assert "← → or 1-5 to score" in screen_text(app)  # and what scores there
        await pilot.press("3")
        await settle(pilot)
        assert app.workstation.current_area == "rubric" and app.focused is selector
        assert app.draft.scores["migration_fidelity"].value == 3
        await pilot.press("right")
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].value == 4
        await pilot.press("9")  # not on the scale: a warning, the score stays
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].value == 4 and app.workstation.current_area == "rubric"
        # the verdict page: digits pick the n-th verdict
        area.show_verdict_page()
        selector.focus()
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        assert app.draft.verdict == "revise"
        # away from the score a digit still switches areas
        area.query_one(CriteriaList).focus()
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        assert app.workstation.current_area == "engines"


async def test_a_long_meaning_is_cut_at_a_word_and_e_shows_every_meaning_whole(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4", "tab", "1")
        await settle(pilot)
        note = app.rubric_area.query_one(LevelNote)
        crit = app.rubric_area.current_criterion
        meaning = crit.level_text(1)
        assert note.text == meaning and note.cut
        shown = note.lines(note.content_region.width)
        assert len(shown) == LevelNote.MAX_LINES and shown[-1].endswith("… e: in full")
        words = set(meaning.replace(",", " ").replace(";", " ").split())
        for line in shown:  # whole words only: nothing cut mid-word
            for word in line.removesuffix("… e: in full").replace(",", " ").replace(";", " ").split():
                assert word in words, word
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, LevelsScreen)
        assert crit.level_text(1)[:30] in " ".join(screen_text(app).split())
        shown = [str(s.render()) for s in app.screen.query(".meaning")]
        assert shown == [crit.level_text(v) for v in crit.scale.values()]  # every meaning, whole
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, LevelsScreen)

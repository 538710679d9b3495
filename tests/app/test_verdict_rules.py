"""The rubric's verdict rules in the workstation: `accept` with numerical correctness 1 is not ready to
submit; the verdict page says which rule it breaks, and O overrides it with a reason."""

from __future__ import annotations

from nkitui.app.screens.override import OverrideScreen
from nkitui.app.widgets.rubric.widgets import LevelNote, ScoreSelector
from tests.app.helpers import new_app, screen_text, settle


async def test_a_broken_rule_blocks_until_overridden_with_a_reason(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        for criterion in app.session.review.rubric.criterion_ids:
            app.draft.set_score(criterion, 4)
        app.draft.set_score("numerical_correctness", 3)
        area = app.rubric_area
        area.show_verdict_page()
        area.query_one(ScoreSelector).focus()
        await settle(pilot)
        await pilot.press("1")  # accept
        await settle(pilot)
        assert app.draft.verdict == "accept"
        errors = [p for p in app.session.review.problems if p.severity == "error"]
        assert [p.field for p in errors] == ["verdict"] and "accept-needs-sound-numerics" in errors[0].message
        assert "1 to fix before submit" in screen_text(app) and "ready to submit" not in screen_text(app)
        assert "Numerical correctness is 3 (needs >= 4)" in area.query_one(LevelNote).text
        # O asks why; a too-short reason is refused, a real one lifts the block and is kept in the draft
        await pilot.press("O")
        await settle(pilot)
        assert isinstance(app.screen, OverrideScreen) and app.screen.rule_id == "accept-needs-sound-numerics"
        await pilot.press(*"meh", "enter")
        await settle(pilot)
        assert app.draft.overrides == [] and not isinstance(app.screen, OverrideScreen)
        await pilot.press("O")
        await settle(pilot)
        await pilot.press(*"golden itself is bf16-rounded", "enter")
        await settle(pilot)
        assert [(o.rule, o.reason) for o in app.draft.overrides] == [
            ("accept-needs-sound-numerics", "golden itself is bf16-rounded")]
        assert not [p for p in app.session.review.problems if p.severity == "error"]
        assert "ready to submit" in screen_text(app)
        # the reason is autosaved with the draft
        await pilot.pause(1.2)
        app.session.review.save_now()
        saved = app.session.review.draft_store().load(task_dir, app.draft.task_id)
        assert saved is not None and saved.override_for("accept-needs-sound-numerics") is not None
        # a score that no longer breaks the rule makes the override moot: O withdraws it
        app.draft.set_score("numerical_correctness", 4)
        await pilot.press("O")
        await settle(pilot)
        assert app.draft.overrides == []

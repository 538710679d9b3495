"""The Rubric area on the real review layer: guidance, scores, comments (typed and in $EDITOR),
autosave, evidence, validation, submit to the task's git repository, restoring a draft."""

from __future__ import annotations

import time

import git
import pytest

from nkitui.app.screens.review import ConfirmSubmit, SubmittedScreen
from nkitui.app.widgets.rubric.widgets import CommentEditor, CriteriaList, ScoreSelector
from tests.app.helpers import new_app, screen_text, settle, use_editor_that_writes


async def _open_rubric(pilot):
    await settle(pilot)
    await pilot.press("4")
    await settle(pilot)


async def _score(pilot, app, criterion_index: int, presses: int) -> None:
    area = app.workstation.area("rubric")
    area.query_one(CriteriaList).highlighted = criterion_index
    area.query_one(ScoreSelector).focus()
    await settle(pilot)
    await pilot.press(*["right"] * presses)
    await settle(pilot)


def _draft_file(isolated_xdg):
    drafts = list((isolated_xdg / "state").rglob("*.toml"))
    return drafts[0] if drafts else None


async def test_guidance_scores_and_comments_are_autosaved(task_dir, isolated_xdg):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await _open_rubric(pilot)
        area = app.workstation.area("rubric")
        assert isinstance(app.focused, CriteriaList)
        assert [c.id for c in app.session.review.rubric.criteria][:1] == ["migration_fidelity"]
        assert "Guidance" in screen_text(app) and "Same math as the CUDA kernel" in screen_text(app)
        await _score(pilot, app, 0, 4)  # 1 -> 4
        assert app.draft.scores["migration_fidelity"].value == 4
        assert "Semantics match including edge cases" in screen_text(app)  # the level's meaning
        await pilot.press("tab")  # to the comment editor
        assert isinstance(app.focused, CommentEditor)
        await pilot.press(*"masked")
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].comment == "masked"
        # the autosaver writes the draft outside the repository within a second
        deadline = time.monotonic() + 5
        while (path := _draft_file(isolated_xdg)) is None or "masked" not in path.read_text():
            assert time.monotonic() < deadline, "draft was not autosaved"
            await pilot.pause(0.1)
        assert not git.Repo(task_dir).is_dirty(untracked_files=True)  # nothing in the task repo
        assert area.query_one(CriteriaList).ids[-1] == "__verdict__"


async def test_long_comment_in_editor(task_dir, tmp_path, monkeypatch):
    use_editor_that_writes(tmp_path, monkeypatch, "Written in my editor.\\nSecond line.\\n")
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await _open_rubric(pilot)
        await pilot.press("tab", "tab")  # criteria -> score -> comment
        assert isinstance(app.focused, CommentEditor)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].comment == "Written in my editor.\nSecond line."
        assert app.focused.text == "Written in my editor.\nSecond line."
        await pilot.press("f7")  # the plain fallback works too (the editor rewrites the same text)
        await settle(pilot)
        assert app.draft.scores["migration_fidelity"].comment == "Written in my editor.\nSecond line."


@pytest.mark.slow
async def test_submit_is_refused_until_valid_then_commits_only_review_files(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await _open_rubric(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmSubmit)  # refused: nothing scored
        assert app.workstation.area("rubric").current_id == "__verdict__"
        assert "required criterion" in screen_text(app)
        for index in range(len(app.session.review.rubric.criteria)):
            await _score(pilot, app, index, 4)
        await _score(pilot, app, len(app.session.review.rubric.criteria), 1)  # verdict: the first one (accept)
        assert app.draft.verdict == "accept"
        assert not [p for p in app.session.review.problems if p.severity == "error"]
        head_before = git.Repo(task_dir).head.commit.hexsha
        await pilot.press("f8")  # the plain fallback of ctrl+s
        await settle(pilot)
        assert isinstance(app.screen, ConfirmSubmit)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, SubmittedScreen)
        repo = git.Repo(task_dir)
        commit = repo.head.commit
        assert commit.parents[0].hexsha == head_before
        assert commit.hexsha[:12] in app.screen.commit_line
        assert all(path.startswith("reviews/") for path in commit.stats.files)
        assert commit.message.startswith("review(scale_rows): accept by ")
        assert not repo.is_dirty(untracked_files=True)
        await pilot.press("escape")
        await settle(pilot)
        assert app.draft.verdict is None  # the next review starts fresh
        assert f"committed {commit.hexsha[:12]}" in screen_text(app)
        area = app.workstation.area("rubric")
        assert [e.record.verdict for e in area.history] == ["accept"]  # the history shows it
        assert "Earlier reviews of this task" in area.verdict_markdown()


async def test_an_unsubmitted_draft_is_restored_on_open(task_dir):
    from nkitui.review import Draft, DraftStore, rubric_for_task
    from nkitui.task import load_task

    task = load_task(task_dir)
    draft = Draft.new(task.id, rubric_for_task(task))
    draft.set_score("numerical_correctness", 3, "within tolerance on all seeds")
    DraftStore().save(task.root, draft)
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await settle(pilot)
        assert app.draft.scores["numerical_correctness"].value == 3
        assert any("Restored your unsubmitted draft" in n.message for n in app.notices)


async def test_line_comments_and_evidence_links_lead_back_to_their_lines(task_dir):
    from nkitui.app.screens.comment import LineCommentScreen
    from nkitui.app.widgets.rubric.widgets import EvidenceList
    from nkitui.app.widgets.source.code_view import CodePairView

    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await settle(pilot)
        code = app.source_area.code
        code.show_line("scale_rows_nki.py", 25)
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, LineCommentScreen)
        await pilot.press(*"affine", "enter")
        await settle(pilot)
        comment = app.draft.comments[0]
        assert (comment.file, comment.start, comment.end, comment.text, comment.criterion) == (
            "scale_rows_nki.py", 25, 25, "affine", "migration_fidelity")
        await pilot.press("down", "a")  # the next line as evidence
        await settle(pilot)
        assert app.draft.evidence[0].ref == "scale_rows_nki.py:26"
        await pilot.press("4")
        await settle(pilot)
        evidence = app.workstation.area("rubric").query_one(EvidenceList)
        assert evidence.indices == [("evidence", 0), ("comment", 0)]
        evidence.focus()
        await settle(pilot)
        await pilot.press("enter")  # show the evidence's line
        await settle(pilot)
        assert app.workstation.current_area == "source" and isinstance(app.focused, CodePairView)
        assert app.focused.row_at_cursor().right == 26
        await pilot.press("4")
        await settle(pilot)
        evidence.focus()
        await pilot.press("down", "d")  # remove the comment
        await settle(pilot)
        assert app.draft.comments == [] and len(app.draft.evidence) == 1
        assert not [p for p in app.session.review.check() if "comments" in p.field]


async def test_blind_mode_hides_others_reviews_until_you_review(task_dir, isolated_xdg):
    from nkitui.review import Draft, rubric_for_task, submit_review
    from nkitui.task import load_task

    task = load_task(task_dir)
    rubric = rubric_for_task(task)
    other = Draft.new(task.id, rubric)
    for c in rubric.criteria:
        other.set_score(c.id, 5, "fine")
    other.verdict = "accept"
    submit_review(task, other, auditor="bob")
    cfg = isolated_xdg / "config" / "nkitui"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("blind = true\n")
    from nkitui.app.config import load_config

    app = new_app(task_dir, config=load_config())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        area = app.workstation.area("rubric")
        assert [e.record.auditor for e in area.history] == ["bob"] and area.history[0].hidden
        area.show_verdict_page()
        await pilot.press("4")
        await settle(pilot)
        assert "hidden until you submit your own review" in area.verdict_markdown()
        assert "accept" not in area.verdict_markdown().split("Earlier reviews")[1].split("###")[0]


async def test_the_last_edit_is_on_disk_when_the_app_quits(task_dir, isolated_xdg):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 36)) as pilot:
        await _open_rubric(pilot)
        await _score(pilot, app, 1, 3)
        await pilot.press("q")  # quit at once, before the autosave's quiet period ends
        await pilot.pause()
    text = _draft_file(isolated_xdg).read_text()
    assert "[scores.performance_quality]" in text and "score = 3" in text

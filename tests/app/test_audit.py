"""A whole audit through the keyboard: open, run, read findings, score, attach evidence from a
finding, a log line and a metric, submit, and see the commit in the task's repository."""

from __future__ import annotations

import tomllib

import git
import pytest

from nkitui.app.screens.review import ConfirmSubmit, SubmittedScreen
from nkitui.app.widgets.rubric.widgets import CommentEditor, CriteriaList, ScoreSelector
from nkitui.app.widgets.source.area import FindingsList
from tests.app.helpers import new_app, screen_text, settle


@pytest.mark.slow
async def test_whole_audit_from_open_to_commit(task_dir):
    app = new_app(task_dir, backend="emulator")
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        # run the task and wait for its verdict
        await pilot.press("f5")
        await settle(pilot, timeout=180)
        assert app.header_state.run == "passed"
        run_id = app.session.runs.shown.run_id

        # read the findings: the analysis flagged the sequential loop
        await pilot.press("1", "f")
        await settle(pilot)
        findings = app.source_area.query_one(FindingsList)
        assert app.focused is findings
        rules = [f.rule for f in findings.findings]
        assert "NKI-SEQ-NO-DEP" in rules
        findings.highlighted = rules.index("NKI-SEQ-NO-DEP")
        await pilot.press("enter")
        await settle(pilot)
        assert "NKI-SEQ-NO-DEP" in screen_text(app)  # the strip under the code explains it

        # performance criterion: attach the finding
        rubric = app.workstation.area("rubric")
        criteria = rubric.query_one(CriteriaList)
        criteria.highlighted = criteria.ids.index("performance_quality")
        await pilot.press("f")  # back to the findings list
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        # numerical correctness: attach a log line and a metric of the run
        criteria.highlighted = criteria.ids.index("numerical_correctness")
        await pilot.press("2")
        await settle(pilot)
        log = app.run_area.log
        log.search("passes")
        await settle(pilot)
        await pilot.press("a", "m")
        await settle(pilot)
        await pilot.press("a")  # the metric cell under the cursor in the results table
        await settle(pilot)
        kinds = [(e.kind, e.criterion) for e in app.draft.evidence]
        assert kinds == [("finding", "performance_quality"), ("log", "numerical_correctness"),
                         ("metric", "numerical_correctness")]
        assert app.draft.runs == [run_id]

        # score every criterion, justify one, choose the verdict
        await pilot.press("4")
        await settle(pilot)
        scores = {"migration_fidelity": 4, "performance_quality": 3, "numerical_correctness": 5,
                  "task_appropriateness": 4}
        for cid, value in scores.items():
            criteria.highlighted = criteria.ids.index(cid)
            rubric.query_one(ScoreSelector).focus()
            await settle(pilot)
            await pilot.press(*["right"] * value)
            await settle(pilot)
        criteria.highlighted = criteria.ids.index("performance_quality")
        rubric.query_one(CommentEditor).focus()
        await settle(pilot)
        await pilot.press(*"tiles overlap")
        criteria.highlighted = len(criteria.ids) - 1  # the verdict page
        rubric.query_one(ScoreSelector).focus()
        await settle(pilot)
        await pilot.press("right", "right")  # accept -> revise
        await settle(pilot)
        assert app.draft.verdict == "revise"

        # submit: confirm, then the commit is shown
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmSubmit)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, SubmittedScreen)
        repo = git.Repo(task_dir)
        commit = repo.head.commit
        assert commit.hexsha[:12] in app.screen.commit_line
        files = sorted(commit.stats.files)
        record_path = next(p for p in files if p.endswith(".toml") and "/runs/" not in p)
        assert f"reviews/runs/{run_id}.json" in files
        record = tomllib.loads((task_dir / record_path).read_text())
        assert record["verdict"] == "revise" and record["runs"] == [run_id]
        assert {cid: s["score"] for cid, s in record["scores"].items()} == scores
        assert record["scores"]["performance_quality"]["comment"] == "tiles overlap"
        refs = [e["ref"] for e in record["evidence"]]
        assert refs[0].startswith("NKI-SEQ-NO-DEP@scale_rows_nki.py:")
        assert refs[1].startswith(f"{run_id}#L") and refs[2].startswith(f"{run_id}:y.")

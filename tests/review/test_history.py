"""History over time: order, outdated markers, blind mode, diffs, and inter-rater agreement."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import textwrap

import krippendorff
import numpy as np
import pytest

from nkitui.review import agreement_under, diff_reviews, submit_review, task_history
from tests.helpers.review import filled_draft, write_task

T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_newest_first_and_outdated_when_judged_files_change(task_repo, rubric):
    root, repo = task_repo
    old = submit_review(root, filled_draft(rubric, score=3, verdict="revise"), auditor="alice", now=at(0))
    history = task_history(root)
    assert [e.outdated for e in history.entries] == [False]

    (root / "add_nki.py").write_text((root / "add_nki.py").read_text() + "# tweak\n")
    repo.git.commit("-am", "kernel tweak")
    new = submit_review(root, filled_draft(rubric, score=4), auditor="bob", now=at(5))
    history = task_history(root)
    assert [e.record.id for e in history.entries] == [new.record.id, old.record.id]
    fresh, stale = history.entries
    assert not fresh.outdated
    assert stale.outdated and [str(c) for c in stale.changes] == ["add_nki.py (modified)"]

    # a judged file appearing later (goldens) or going away also makes reviews outdated
    (root / "reference.py").unlink()
    history = task_history(root, task=None)
    assert any(c.change == "deleted" and c.file == "reference.py" for c in history.entries[0].changes)


def test_added_judged_file_marks_outdated(task_repo, rubric):
    root, repo = task_repo
    submit_review(root, filled_draft(rubric), now=at(0))
    text = (root / "task.toml").read_text().replace('target = "trn2"', 'target = "trn2"\nprompt = "PROMPT.md"')
    (root / "PROMPT.md").write_text("Port the add kernel.\n")
    (root / "task.toml").write_text(text)
    [entry] = task_history(root).entries
    assert {(c.file, c.change) for c in entry.changes} == {("task.toml", "modified"), ("PROMPT.md", "added")}


def test_history_survives_a_broken_task_and_reports_it(task_repo, rubric):
    root, _ = task_repo
    submit_review(root, filled_draft(rubric), now=at(0))
    (root / "task.toml").write_text("id = [\n")
    history = task_history(root)
    assert len(history.entries) == 1 and history.entries[0].outdated  # task.toml changed
    assert any("cannot be loaded" in p.message for p in history.problems)


def test_blind_mode_hides_others_until_you_review_the_current_version(task_repo, rubric):
    root, repo = task_repo
    submit_review(root, filled_draft(rubric, score=2, verdict="reject"), auditor="alice", now=at(0))
    bob_view = task_history(root, blind=True, viewer="bob")
    [alice_entry] = bob_view.entries
    assert alice_entry.hidden and alice_entry.record.verdict == "hidden"
    assert alice_entry.record.scores == {} and alice_entry.record.comments == [] and alice_entry.weighted_score is None
    assert alice_entry.to_dict()["hidden"] is True and "reject" not in str(alice_entry.to_dict())

    submit_review(root, filled_draft(rubric, score=4), auditor="bob", now=at(1))
    bob_view = task_history(root, blind=True, viewer="bob")
    assert bob_view.viewer_reviewed_current and not any(e.hidden for e in bob_view.entries)

    # the kernel changes: bob's review is outdated, so others' judgements are hidden again
    (root / "add_nki.py").write_text((root / "add_nki.py").read_text() + "# rewritten\n")
    repo.git.commit("-am", "rewrite")
    submit_review(root, filled_draft(rubric, score=5), auditor="carol", now=at(2))
    bob_view = task_history(root, blind=True, viewer="bob")
    assert [e.hidden for e in bob_view.entries] == [True, False, True]  # carol, bob (own), alice
    # not blind: everything visible
    assert not any(e.hidden for e in task_history(root).entries)


def test_diff_between_two_reviews(task_repo, rubric):
    root, repo = task_repo
    d1 = filled_draft(rubric, score=3, verdict="revise")
    d1.add_line_comment("add_nki.py", 8, 8, "store is fine")
    d1.add_line_comment("add.cu", 3, 3, "guard i < n not mirrored")
    first = submit_review(root, d1, auditor="alice", now=at(0))
    (root / "add_nki.py").write_text((root / "add_nki.py").read_text() + "# fixed guard\n")
    repo.git.commit("-am", "fix")
    d2 = filled_draft(rubric, score=4, verdict="accept")
    d2.set_score("task_appropriateness", 3, "unchanged comment?")
    d2.add_line_comment("add_nki.py", 8, 8, "store is fine")
    second = submit_review(root, d2, auditor="alice", now=at(10))

    diff = diff_reviews(first.record, second.record, rubric)
    assert diff.verdict_changed
    by_id = {c.criterion: c for c in diff.criteria}
    assert [c.criterion for c in diff.criteria] == rubric.criterion_ids
    assert by_id["migration_fidelity"].delta == 1 and by_id["migration_fidelity"].score_changed
    assert by_id["task_appropriateness"].delta == 0 and by_id["task_appropriateness"].comment_changed
    assert [str(f) for f in diff.files] == ["add_nki.py (modified)"]
    assert [c.location for c in diff.comments_removed] == ["add.cu:3"]
    assert diff.comments_added == ()
    assert diff.to_dict()["criteria"][0]["delta"] == 1

    history = task_history(root)
    assert history.find(first.record.id[:20]).record == first.record
    with pytest.raises(KeyError, match="matches 2"):
        history.find("2026")
    with pytest.raises(KeyError, match="no review"):
        history.find("1999")


# -- agreement -----------------------------------------------------------------------------------

PASS_FAIL_RUBRIC = textwrap.dedent(
    """\
    id = "gate"
    version = "1"
    [[criteria]]
    id = "works"
    title = "Works"
    guidance = "Does it work?"
    scale = { kind = "pass_fail" }
    [[criteria]]
    id = "style"
    title = "Style"
    guidance = "How readable?"
    scale = { kind = "labels", labels = ["poor", "fair", "good"] }
    """
)


def _write_review(root, auditor, scores, minute, rubric_id="nki-port-audit", version="v1"):
    """A record written straight to disk: agreement reads files, it needs no git."""
    from nkitui.review import ReviewRecord, Score, TaskPin
    from nkitui.review.record import new_record_id

    when = at(minute)
    record = ReviewRecord(id=new_record_id(when), auditor=auditor, submitted_at=when, tool_version="nkitui test",
                          task=TaskPin(id="add", commit="0" * 40, files={"add_nki.py": hashlib.sha256(version.encode()).hexdigest()}),
                          rubric_id=rubric_id, rubric_version="1", verdict="accept",
                          scores={cid: Score(value) for cid, value in scores.items()})
    path = root / "reviews" / auditor / f"{record.id}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.to_toml())


def test_agreement_nominal_pass_fail_matches_a_hand_computation(tmp_path):
    # three tasks, two auditors: (pass, pass), (fail, fail), (pass, fail)
    # coincidences: o_pp = 2, o_ff = 2, o_pf = o_fp = 1, n = 6 -> D_o = 2/6, D_e = 2*3*3/(6*5) = 0.6
    # alpha = 1 - (1/3)/0.6 = 4/9
    for i, (a, b) in enumerate([("pass", "pass"), ("fail", "fail"), ("pass", "fail")]):
        root = write_task(tmp_path / f"task{i}", rubric="rubric.toml")
        (root / "rubric.toml").write_text(PASS_FAIL_RUBRIC)
        _write_review(root, "alice", {"works": a, "style": "good"}, 0, rubric_id="gate")
        _write_review(root, "bob", {"works": b, "style": "fair"}, 1, rubric_id="gate")
    report = agreement_under(tmp_path)
    works = next(c for c in report.criteria if c.criterion == "works")
    assert works.level == "nominal" and works.raters == 2 and works.units == 3 and works.ratings == 6
    assert works.alpha == pytest.approx(4 / 9)
    style = next(c for c in report.criteria if c.criterion == "style")
    assert style.level == "ordinal"
    # labels are coded by their position on the scale (poor=0, fair=1, good=2) over the full domain
    expected = krippendorff.alpha(reliability_data=np.array([[2.0, 2, 2], [1, 1, 1]]), value_domain=[0.0, 1, 2],
                                  level_of_measurement="ordinal")
    assert style.alpha == pytest.approx(expected)


def test_agreement_pairs_only_the_same_task_version_and_latest_review(tmp_path, rubric):
    scores = {"alice": [5, 4, 2, 1], "bob": [4, 4, 1, 2], "carol": [5, 3, 2, None]}
    for i in range(4):
        root = tmp_path / f"t{i}"
        for minute, (auditor, values) in enumerate(scores.items()):
            if values[i] is not None:
                _write_review(root, auditor, {c: 1 for c in rubric.criterion_ids}, minute)  # superseded below
                _write_review(root, auditor, {c: values[i] for c in rubric.criterion_ids}, 10 + minute)
    # a review of a *different* version of task 0 is not paired with the others
    _write_review(tmp_path / "t0", "dave", {c: 1 for c in rubric.criterion_ids}, 30, version="v2")

    report = agreement_under(tmp_path)
    assert report.reviews == 23 and not report.problems
    mf = next(c for c in report.criteria if c.criterion == "migration_fidelity")
    data = np.array([[5, 4, 2, 1], [4, 4, 1, 2], [5, 3, 2, np.nan]], dtype=float)
    expected = krippendorff.alpha(reliability_data=data, value_domain=[1.0, 2, 3, 4, 5], level_of_measurement="ordinal")
    assert mf.alpha == pytest.approx(expected) and mf.raters == 3 and mf.units == 4 and mf.ratings == 11
    assert [c.criterion for c in report.criteria] == rubric.criterion_ids
    assert math.isfinite(mf.alpha) and mf.title == "Migration fidelity"


def test_agreement_undefined_cases_say_why(tmp_path, rubric):
    root = tmp_path / "t"
    _write_review(root, "alice", {"migration_fidelity": 4}, 0)
    [single] = agreement_under(tmp_path).criteria
    assert single.alpha is None and "two or more auditors" in single.note
    _write_review(root, "bob", {"migration_fidelity": 4}, 1)
    [same] = agreement_under(tmp_path).criteria
    assert same.alpha is None and "same value" in same.note


def test_off_scale_scores_are_left_out_of_agreement_and_reported(tmp_path):
    root = tmp_path / "t"
    _write_review(root, "alice", {"migration_fidelity": 4}, 0)
    _write_review(root, "bob", {"migration_fidelity": 11}, 1)
    report = agreement_under(tmp_path)
    assert report.criteria[0].units == 0
    assert any("not on the scale" in p.message for p in report.problems)

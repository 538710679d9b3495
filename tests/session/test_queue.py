"""The audit queue without Textual (nkitui.session.queue): what each row says about a real task in a real
git repository (its last run for the current commit, its static findings, where its review stands
for me), the filters, sorts and summary the queue screen shows, the next task that needs my review,
and a real background batch filling the rows in."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nkitui.batch import LocalExecutor
from nkitui.batch.events import BatchFinished, BatchStarted, TaskFinished, TaskStarted
from nkitui.batch.record import TaskRecord
from nkitui.review import Draft, DraftStore, load_builtin_rubric, submit_review
from nkitui.session.queue import BatchProgress, TaskQueue, clock
from nkitui.session.queue_facts import FindingsCache, ReviewFacts, age_text
from tests.batch.conftest import add_task, git_commit_all, quick_options
from tests.helpers.review import filled_draft

RUBRIC = load_builtin_rubric("nki-port-audit")


def submit(task_root: Path, auditor: str) -> None:
    submit_review(task_root, filled_draft(RUBRIC, task_root.name, verdict="revise"), auditor=auditor)


@pytest.fixture
def queue_dir(tmp_path: Path) -> Path:
    """Six vector-add tasks, each its own repository, in every review state, and one broken manifest:

    mine      ada (me) reviewed it as it is          others    bob reviewed it as it is
    outdated  ada reviewed it, then the port changed  draft     ada has an unsubmitted draft
    none      nobody reviewed it                      broken    its task.toml is invalid
    """
    root = tmp_path / "tasks"
    for name in ("mine", "others", "outdated", "draft", "none"):
        git_commit_all(add_task(root / name))
    submit(root / "mine", "ada")
    submit(root / "others", "bob")
    submit(root / "outdated", "ada")
    port = root / "outdated" / "add_nki.py"
    port.write_text(port.read_text().replace("nl.add(", "nl.add( "))
    git_commit_all(root / "outdated", "touch the port")
    draft = Draft.new("draft", RUBRIC)
    draft.set_score("migration_fidelity", 3, "masks the tail")
    DraftStore().save(root / "draft", draft)
    broken = add_task(root / "broken")
    (broken / "task.toml").write_text((broken / "task.toml").read_text().replace("shape = [128, 64]", "shape = [128, -64]", 1))
    git_commit_all(broken)
    return root


def read_queue(root: Path, cache: FindingsCache | None = None, me: str = "ada") -> TaskQueue:
    queue = TaskQueue(root, me=me, findings_cache=cache)
    queue.discover()
    for row in queue.read_all():
        queue.update(row)
    return queue


def test_each_row_says_where_the_review_stands_and_what_ran(queue_dir, tmp_path):
    queue = read_queue(queue_dir, FindingsCache(tmp_path / "cache"))
    rows = {r.key: r for r in queue.rows}
    assert list(rows) == ["broken", "draft", "mine", "none", "others", "outdated"]
    assert {k: r.review_state("ada") for k, r in rows.items()} == {
        "broken": "none", "draft": "draft", "mine": "mine", "none": "none", "others": "others", "outdated": "outdated"}
    # bob sees it the other way round: his own review is current, ada's two are not his
    assert rows["others"].review_state("bob") == "mine" and rows["mine"].review_state("bob") == "others"
    assert rows["broken"].status == "invalid" and not rows["broken"].loadable
    assert "task.toml" in rows["broken"].verdict.note and "shape" in rows["broken"].verdict.note
    for key in ("draft", "mine", "none", "others", "outdated"):
        row = rows[key]
        assert row.status == "not run" and row.verdict.note == "no run for the current commit"
        assert row.verdict.commit is not None and len(row.verdict.commit) == 40 and row.verdict.dirty is False
        assert row.findings is not None and not row.findings.error
    summary = queue.summary()
    assert summary.text() == "1 of 6 reviewed, 0 failing, 1 outdated, 1 invalid"
    assert (summary.drafts, summary.unread) == (1, 0)


def test_filters_sorts_and_the_next_task_that_needs_my_review(queue_dir):
    queue = read_queue(queue_dir)
    keys = lambda rows: [r.key for r in rows]  # noqa: E731
    # to review: mine to do, and only tasks that open (not the broken one, not the one I reviewed)
    assert keys(queue.view(state="to-review")) == ["draft", "none", "others", "outdated"]
    assert keys(queue.view(state="draft")) == ["draft"]
    assert keys(queue.view(state="invalid")) == ["broken"]
    assert keys(queue.view(text="outdated")) == ["outdated"]  # the review state is searchable
    assert keys(queue.view(text="OTH by")) == ["others"]  # every word, any case ("submitted by others")
    assert keys(queue.view(sort="review")) == ["draft", "outdated", "broken", "none", "others", "mine"]
    assert keys(queue.view(sort="review", reverse=True))[0] == "mine"
    assert keys(queue.view(sort="verdict"))[0] == "broken"  # invalid before the tasks not run
    counts = queue.counts()
    assert (counts["all"], counts["to-review"], counts["mine"], counts["not-run"]) == (6, 4, 1, 5)
    order = keys(queue.view())
    assert queue.next_needing_review(order) == "draft"
    assert queue.next_needing_review(order, after="draft") == "none"  # mine is skipped
    assert queue.next_needing_review(order, after="outdated") == "draft"  # wraps round, broken is skipped
    assert queue.next_needing_review(["mine", "broken"]) is None
    # once I review the last one shown, nothing there needs me
    submit(queue_dir / "none", "ada")
    queue.update(queue.read("none"))
    assert queue.row("none").review_state("ada") == "mine"
    assert queue.next_needing_review(["mine", "none"], after="mine") is None
    assert queue.summary().reviewed == 2


def test_findings_are_cached_by_the_files_hashes(queue_dir, tmp_path):
    port = queue_dir / "none" / "add_nki.py"
    cache = FindingsCache(tmp_path / "cache")
    first = read_queue(queue_dir, cache).row("none").findings
    assert first is not None and not first.cached
    again = read_queue(queue_dir, cache).row("none").findings
    assert again is not None and again.cached and again.to_dict() == first.to_dict()
    port.write_text(port.read_text() + "\n# edited\n")
    changed = read_queue(queue_dir, cache).row("none").findings
    assert changed is not None and not changed.cached  # a changed file is analysed again
    assert read_queue(queue_dir, cache).row("none").findings.cached
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 6  # five tasks, one in two versions; the broken task has no count


@pytest.mark.slow
def test_a_background_batch_fills_the_rows_in_and_lands_in_the_run_store(tmp_path):
    root = tmp_path / "tasks"
    git_commit_all(add_task(root / "good"))
    git_commit_all(add_task(root / "wrong", op="multiply"))
    queue = read_queue(root)
    assert [r.status for r in queue.rows] == ["not run", "not run"]
    seen: list[tuple[str, dict[str, str]]] = []

    def on_event(event, changed) -> None:  # the rows have taken the event when it arrives
        seen.append((type(event).__name__, {k: queue.row(k).status for k in changed}))

    handle = queue.start_batch(quick_options(), executor=LocalExecutor(2), on_event=on_event)
    with pytest.raises(RuntimeError, match="running already"):
        queue.start_batch(quick_options())
    handle.wait(timeout=180)
    assert handle.done
    assert seen[0] == ("BatchStarted", {"good": "queued", "wrong": "queued"})
    assert ("TaskStarted", {"good": "running"}) in seen and ("TaskStarted", {"wrong": "running"}) in seen
    finished = dict(kv for name, changed in seen if name == "TaskFinished" for kv in changed.items())
    assert finished == {"good": "passed", "wrong": "failed"}
    assert seen[-1][0] == "BatchFinished"
    good, wrong = queue.row("good"), queue.row("wrong")
    assert (good.batch, good.phase) == ("", "")
    assert wrong.failing and wrong.verdict.checks_total > wrong.verdict.checks_passed
    assert queue.summary().failing == 1
    progress = queue.progress
    assert progress.done and progress.evaluated == 2 and progress.counts == {"passed": 1, "failed": 1}
    # the results are in the run store, as the command line's are: read from disk, the rows agree
    assert queue.read("good").verdict.run_id == good.verdict.run_id
    assert queue.read("wrong").verdict.status == "failed"
    # a newer run that was cancelled judged nothing: the row still shows the last verdict
    from nkitui.batch.aggregate import latest_run_for
    from nkitui.batch.gitstate import read_git_state
    from nkitui.evaluate.run.store import RunStore

    store = RunStore()
    passed = store.load(good.verdict.run_id, "good")
    passed.run_id, passed.status = "29990101T000000Z-cancel", "cancelled"
    store.save(passed)
    task = queue.tasks["good"]
    assert latest_run_for(task, read_git_state(task.root)).status == "cancelled"
    assert queue.read("good").verdict.run_id == good.verdict.run_id
    # resume: nothing is evaluated again, the rows keep their verdicts
    queue.start_batch(quick_options(), executor=LocalExecutor(2)).wait(timeout=60)
    assert queue.progress.resumed == 2 and queue.progress.evaluated == 0
    assert [r.status for r in queue.rows] == ["passed", "failed"]


def _record(key: str, status: str, **extra) -> TaskRecord:
    return TaskRecord(key=key, path=f"/x/{key}", task_id=key, status=status, **extra)


def test_a_task_the_batch_cancelled_keeps_the_verdict_it_had(queue_dir):
    queue = read_queue(queue_dir)
    queue.progress = BatchProgress()
    queue.apply_batch(BatchStarted(root=str(queue_dir), tasks=(("none", {}), ("mine", {})), to_run=2,
                                   executor="local", workers=2, workers_reason="", options_key="k"))
    assert queue.row("none").status == "queued"
    queue.apply_batch(TaskStarted("none"))
    assert queue.row("none").status == "running" and queue.summary().running == 1
    queue.apply_batch(TaskFinished(_record("none", "cancelled")))
    assert queue.row("none").status == "not run"  # a cancelled run judged nothing
    queue.apply_batch(TaskFinished(_record("mine", "timeout", finished_at="2026-01-07T09:00:00+00:00",
                                           error={"kind": "timeout", "message": "ran past 60 s"})))
    mine = queue.row("mine")
    assert mine.status == "timeout" and mine.failing and mine.verdict.note == "ran past 60 s"
    assert mine.age(dt.datetime(2026, 1, 8, 9, 0, tzinfo=dt.timezone.utc)) == "1d"
    queue.apply_batch(BatchFinished(summary=None))
    assert all(not r.batch for r in queue.rows)


def test_review_state_rules():
    me, bob = "ada", "bob"
    assert ReviewFacts().state(me) == "none"
    assert ReviewFacts(((bob, False),)).state(me) == "others"
    assert ReviewFacts(((bob, True),)).state(me) == "outdated"  # every review is outdated
    assert ReviewFacts(((bob, False), (me, True))).state(me) == "outdated"  # mine is, whatever others did
    assert ReviewFacts(((me, True),), draft=True).state(me) == "draft"  # a re-review under way
    assert ReviewFacts(((me, False),), draft=True).state(me) == "mine"
    assert ReviewFacts(((bob, False), (me, True), (bob, True))).auditors(current=False) == (me, bob)


def test_progress_eta_ages_and_clocks():
    progress = BatchProgress(to_run=4, began=100.0)
    assert progress.eta_s(now=110.0) is None  # nothing started
    progress.first_start = 100.0
    progress.started = {"a", "b"}
    progress.finished = {"a": "passed", "r": "passed"}  # r was resumed: it never started
    assert progress.evaluated == 1
    assert progress.eta_s(now=110.0) == pytest.approx(30.0)  # 10 s per task, 3 to go
    assert clock(65) == "1:05" and clock(3723) == "1:02:03" and clock(None) == "?"
    now = dt.datetime(2026, 1, 8, 12, 0, tzinfo=dt.timezone.utc)
    assert [age_text(now - dt.timedelta(seconds=s), now) for s in (5, 90, 7200, 3 * 86400, 20 * 86400)] == [
        "5s", "1m", "2h", "3d", "2w"]
    assert age_text(None) == ""

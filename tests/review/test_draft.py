import datetime as dt
import os
import threading
import time

import pytest

from nkitui.common.paths import state_dir
from nkitui.review import Autosaver, Draft, DraftStore, RecordError, offer_restore, submit_review
from tests.helpers.review import filled_draft, init_repo, write_task


def test_drafts_live_in_the_xdg_state_dir_keyed_by_repo_and_task(tmp_path, isolated_env, rubric):
    store = DraftStore()
    assert store.root == state_dir() / "drafts"
    assert str(store.root).startswith(str(isolated_env))
    a = write_task(tmp_path / "repo-a" / "add")
    b = write_task(tmp_path / "repo-b" / "add")
    init_repo(tmp_path / "repo-a", commit=False)
    init_repo(tmp_path / "repo-b", commit=False)
    # same task id in two repositories, two tasks in one repository: all distinct
    pa, pb = store.path_for(a, "add"), store.path_for(b, "add")
    assert pa != pb and pa.parent.name.startswith("repo-a-") and pb.parent.name.startswith("repo-b-")
    assert store.path_for(tmp_path / "repo-a" / "other", "other").parent == pa.parent
    assert store.path_for(a, "add") == store.path_for(tmp_path / "repo-a" / "add" / ".", "add")

    draft = filled_draft(rubric)
    path = store.save(a, draft)
    assert path == pa and draft.saved_at is not None
    assert store.load(b, "add") is None
    loaded = store.load(a, "add")
    assert loaded == draft
    assert [p.name for p in pa.parent.iterdir()] == [pa.name]  # no temp files left behind
    assert pa.name.startswith("add--") and pa.suffix == ".toml"  # keyed by the task id and its folder
    assert store.discard(a, "add") and not store.discard(a, "add")
    assert store.load(a, "add") is None


def test_corrupt_saved_draft_is_reported_not_swallowed(tmp_path, rubric):
    store = DraftStore(tmp_path / "drafts")
    task = write_task(tmp_path / "t")
    store.save(task, filled_draft(rubric))
    store.path_for(task, "add").write_text("kind = [")
    with pytest.raises(RecordError) as info:
        offer_restore(store, task, "add")
    assert str(store.path_for(task, "add")) == info.value.problems[0].file
    assert "TOML syntax error" in info.value.problems[0].message
    assert f"delete {store.path_for(task, 'add')} to start a fresh draft" in info.value.problems[-1].fix
    assert store.path_for(task, "add").exists()  # nothing thrown away


def test_offer_restore_only_when_draft_is_newer_than_last_submission(task_repo, rubric, tmp_path):
    root, _repo = task_repo
    store = DraftStore(tmp_path / "drafts")
    assert offer_restore(store, root, "add") is None  # nothing saved

    store.save(root, filled_draft(rubric), now=dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc))
    offer = offer_restore(store, root, "add")
    assert offer is not None and offer.last_submitted_at is None and "unsubmitted draft" in offer.describe()

    # a submission after the draft: nothing to offer
    submit_review(root, filled_draft(rubric), now=dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.timezone.utc))
    assert offer_restore(store, root, "add") is None
    # ... unless we ask about another auditor, who has not submitted
    assert offer_restore(store, root, "add", auditor="bob") is not None

    # edited again after the submission: offered, and it says so
    later = filled_draft(rubric, score=2)
    store.save(root, later, now=dt.datetime(2026, 11, 30, 11, 0, tzinfo=dt.timezone.utc))
    offer = offer_restore(store, root, "add", auditor="alice-auditor")
    assert offer is not None and offer.draft.scores["migration_fidelity"].value == 2
    assert offer.last_submitted_at == dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.timezone.utc)
    assert "newer than your last submission" in offer.describe()


def test_submit_discards_the_saved_draft(task_repo, rubric, tmp_path):
    root, _ = task_repo
    store = DraftStore(tmp_path / "drafts")
    draft = filled_draft(rubric)
    store.save(root, draft)
    submit_review(root, draft, draft_store=store)
    assert store.load(root, "add") is None


class CountingStore(DraftStore):
    def __init__(self, root):
        super().__init__(root)
        self.times: list[float] = []

    def save(self, task_root, draft, now=None):
        self.times.append(time.monotonic())
        return super().save(task_root, draft, now)


def test_autosaver_coalesces_a_burst_into_one_save(tmp_path, rubric):
    store = CountingStore(tmp_path / "drafts")
    saved = threading.Event()
    with Autosaver(store, tmp_path, quiet_s=0.1, max_delay_s=0.5, on_saved=lambda p, t: saved.set()) as saver:
        draft = Draft.new("add", rubric)
        for ch in "abcdef":
            draft.summary += ch
            saver.changed(draft)
        assert saved.wait(2.0)
        time.sleep(0.25)
        assert len(store.times) == 1 and not saver.pending
        assert store.load(tmp_path, "add").summary == "abcdef"


def test_autosaver_saves_during_continuous_typing(tmp_path, rubric):
    store = CountingStore(tmp_path / "drafts")
    saver = Autosaver(store, tmp_path, quiet_s=0.2, max_delay_s=0.4)
    draft = Draft.new("add", rubric)
    start = time.monotonic()
    while time.monotonic() - start < 1.5:  # a keystroke every 50 ms never leaves a 200 ms pause
        draft.summary += "x"
        saver.changed(draft)
        time.sleep(0.05)
    typed = len(draft.summary)
    assert len(store.times) >= 2, "max_delay_s must force saves while typing continues"
    gaps = [b - a for a, b in zip([start, *store.times], store.times)]
    assert max(gaps) < 0.4 + 0.25  # scheduling slack on a busy machine
    saver.close()
    assert store.load(tmp_path, "add").summary == "x" * typed  # close() flushes the tail
    with pytest.raises(RuntimeError):
        saver.changed(draft)


def test_autosaver_snapshots_so_later_edits_do_not_leak_into_a_save(tmp_path, rubric):
    store = DraftStore(tmp_path / "drafts")
    saver = Autosaver(store, tmp_path, quiet_s=5, max_delay_s=10)
    draft = Draft.new("add", rubric)
    draft.summary = "first"
    saver.changed(draft)
    draft.summary = "second (not reported yet)"
    assert saver.flush() is not None
    assert store.load(tmp_path, "add").summary == "first"
    assert saver.flush() is None  # nothing pending
    saver.close()


def test_autosaver_reports_errors_and_retries(tmp_path, rubric):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the drafts folder should be")
    store = DraftStore(blocker)
    errors: list[BaseException] = []
    saver = Autosaver(store, tmp_path, quiet_s=0.05, max_delay_s=0.1, on_error=errors.append)
    draft = Draft.new("add", rubric)
    saver.changed(draft)
    deadline = time.monotonic() + 3
    while len(errors) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(errors) >= 2 and saver.pending  # kept and retried, app not crashed
    assert isinstance(saver.last_error, OSError)
    os.unlink(blocker)
    deadline = time.monotonic() + 3
    while saver.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not saver.pending and saver.last_error is None
    saver.close()
    loaded = store.load(tmp_path, "add")
    assert loaded is not None and loaded.saved_at is not None
    loaded.saved_at = None
    assert loaded == draft

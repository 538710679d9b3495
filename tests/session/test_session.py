"""The audit session without Textual: opening a task, runs (live, cancelled, reopened, restored), the
findings a run adds, and the log a reopened run shows."""

from __future__ import annotations

import threading
import time

import pytest

from nkitui.session import events as ev
from nkitui.session.runlog import LEVEL_INDEX, line_location, stored_lines
from tests.app.helpers import recorded_result, store_run
from tests.session.conftest import open_session


def slow_reference(task_dir, seconds: float) -> None:
    """The reference's first call waits, so a run is surely still going while a test acts on it."""
    reference = task_dir / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    return x.astype",
        f"    import time\n\n    if not _WAITED:\n        _WAITED.append(1)\n        time.sleep({seconds})\n"
        "    return x.astype",
    ) + "\n_WAITED: list = []\n")


def test_opening_a_task_tells_every_fact_in_order(task_dir):
    session, seen = open_session(task_dir, backend="emulator")
    session.open()
    kinds = seen.kinds()
    assert kinds[:2] == ["AuditorResolved", "RepositoryChecked"]
    assert seen.of(ev.AuditorResolved)[0].identity.display == "Ada Auditor <ada@example.com>"
    assert seen.of(ev.AuditorResolved)[0].identity.source == "git"
    assert seen.of(ev.RepositoryChecked)[0].state.ready
    analysis = seen.of(ev.AnalysisDone)[0]
    assert "NKI-SEQ-NO-DEP" in [f.rule for f in analysis.findings] and analysis.alignment
    assert seen.of(ev.FindingsChanged)[-1].findings == analysis.findings
    sol = seen.of(ev.SpeedOfLightKnown)[0]
    assert sol.sol is not None and sol.sol.bound == "memory"
    assert seen.of(ev.RunsListed)[0].runs == ()
    assert not seen.of(ev.RunShown)  # no stored run: nothing to show
    loaded = seen.of(ev.ReviewLoaded)[0]
    assert loaded.draft.task_id == "scale_rows" and loaded.restored == ""
    assert any(p.severity == "error" for p in seen.of(ev.ReviewChecked)[0].problems)  # nothing scored yet
    assert kinds.index("ReviewLoaded") < kinds.index("ReviewChecked") < kinds.index("ReviewHistoryLoaded")


@pytest.mark.slow
def test_a_run_streams_its_log_and_its_result_becomes_the_shown_run(task_dir):
    session, seen = open_session(task_dir, backend="emulator")
    result = session.runs.run()
    assert result is not None and result.status == "passed", result and result.error
    kinds = seen.kinds()
    assert kinds[:2] == ["RunStarting", "RunStarted"]
    started = seen.of(ev.RunStarted)[0]
    assert started.run_id == result.run_id and started.backend == "emulator"
    lines = [line.text for batch in seen.of(ev.RunLogged) for line in batch.lines]
    assert "── compare ──" in lines and any(t.startswith("── compile ok in ") for t in lines)
    assert any(t.startswith("backend: emulator") for t in lines)  # the pipeline's own lines carry no tag
    assert {p.phase for p in seen.of(ev.RunProgressed)} >= {"load", "compile", "run", "compare"}
    ended = seen.of(ev.RunEnded)[0]
    assert ended.result is result and ended.kept is None and ended.error == ""
    shown = seen.of(ev.RunShown)[0]
    assert shown.result is result and shown.how == "finished" and shown.log is None  # the live log is its log
    assert session.runs.shown is result and not session.runs.running
    assert [s.run_id for s in seen.of(ev.RunsListed)[-1].runs] == [result.run_id]
    assert kinds.index("RunEnded") < kinds.index("RunShown") < len(kinds) - kinds[::-1].index("RunsListed")


@pytest.mark.slow
def test_a_reopened_run_reads_as_it_did_live(task_dir):
    session, seen = open_session(task_dir, backend="emulator")
    result = session.runs.run()
    live = [line for batch in seen.of(ev.RunLogged) for line in batch.lines]
    stored = stored_lines(result.log_excerpt)
    # the stored log keeps the last lines: exactly the live log's last lines, same text, same levels
    assert len(stored) >= 10 and stored == live[-len(stored):]
    assert any(line.text.startswith("── profile ok") for line in stored)
    reopened = session.runs.reopen(result.run_id)
    shown = seen.of(ev.RunShown)[-1]
    assert shown.how == "reopened" and shown.result.run_id == reopened.run_id and list(shown.log) == stored


@pytest.mark.slow
def test_cancelling_keeps_the_last_completed_run_shown(task_dir):
    slow_reference(task_dir, 60)
    earlier = store_run(recorded_result(), "20260107T090000Z-aaaaaa")
    session, seen = open_session(task_dir, backend="emulator")
    session.runs.reopen(earlier.run_id)
    worker = threading.Thread(target=session.runs.run)
    worker.start()
    deadline = time.monotonic() + 60
    while not any(p.phase == "reference" for p in seen.of(ev.RunProgressed)):
        assert time.monotonic() < deadline, seen.kinds()
        time.sleep(0.05)
    assert session.runs.running and session.runs.shown.run_id == earlier.run_id
    assert session.runs.cancel()
    worker.join(60)
    ended = seen.of(ev.RunEnded)[-1]
    assert ended.result.status == "cancelled" and ended.kept.run_id == earlier.run_id
    shown = seen.of(ev.RunShown)[-1]
    assert shown.how == "kept" and shown.result.run_id == earlier.run_id
    assert list(shown.log) == stored_lines(earlier.log_excerpt)  # its own log comes back too
    assert session.runs.shown.run_id == earlier.run_id
    assert shown.note == f"{ended.result.short_id} cancelled"


@pytest.mark.slow
def test_a_cancelled_first_run_is_shown_when_there_is_nothing_else(task_dir):
    slow_reference(task_dir, 60)
    session, seen = open_session(task_dir, backend="emulator")
    session.runs.cancel()  # nothing to cancel yet
    worker = threading.Thread(target=session.runs.run)
    worker.start()
    deadline = time.monotonic() + 60
    while not seen.of(ev.RunStarted):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    session.runs.cancel()
    worker.join(60)
    assert seen.of(ev.RunCancelling)
    ended = seen.of(ev.RunEnded)[-1]
    assert ended.result.status == "cancelled" and ended.kept is None
    assert session.runs.shown.status == "cancelled"


def test_opening_shows_the_newest_run_of_the_tasks_current_files(task_dir):
    from nkitui.task import load_task

    hashes = load_task(task_dir).file_hashes()
    stale = dict(hashes, **{"scale_rows_nki.py": "0" * 64})
    store_run(recorded_result(), "20260109T090000Z-newer0", file_hashes=stale, created_at="2026-01-09T09:00:00+00:00")
    store_run(recorded_result(), "20260108T090000Z-curren", file_hashes=hashes, created_at="2026-01-08T09:00:00+00:00")
    store_run(recorded_result(), "20260110T090000Z-cancel", file_hashes=hashes, status="cancelled",
              created_at="2026-01-10T09:00:00+00:00")
    store_run(recorded_result(), "20260107T090000Z-older0", file_hashes=hashes, created_at="2026-01-07T09:00:00+00:00")
    session, seen = open_session(task_dir, backend="emulator")
    session.open()
    shown = seen.of(ev.RunShown)
    assert [(s.result.run_id, s.how) for s in shown] == [("20260108T090000Z-curren", "latest")]
    assert "current files" in shown[0].note
    assert list(shown[0].log) == stored_lines(shown[0].result.log_excerpt)


def test_a_draft_citing_a_run_shows_it_when_no_run_matches_the_current_files(task_dir):
    from nkitui.review import Draft, DraftStore, rubric_for_task
    from nkitui.task import load_task

    task = load_task(task_dir)
    stale = dict(task.file_hashes(), **{"scale_rows_nki.py": "0" * 64})
    cited = store_run(recorded_result(), "20260107T090000Z-cited0", file_hashes=stale)
    draft = Draft.new(task.id, rubric_for_task(task))
    draft.cite_run(cited.run_id)
    DraftStore().save(task.root, draft)
    session, seen = open_session(task_dir, backend="emulator")
    session.open()
    shown = seen.of(ev.RunShown)
    assert [(s.result.run_id, s.how) for s in shown] == [(cited.run_id, "cited")]
    assert "files changed since" in shown[0].note
    assert seen.of(ev.ReviewLoaded)[0].restored.startswith("Restored your unsubmitted draft")


def test_a_draft_citing_an_old_run_still_opens_on_the_run_of_the_current_files(task_dir):
    from nkitui.review import Draft, DraftStore, rubric_for_task
    from nkitui.task import load_task

    task = load_task(task_dir)
    current = store_run(recorded_result(), "20260108T090000Z-curren", file_hashes=task.file_hashes())
    old = store_run(recorded_result(), "20260107T090000Z-cited0", file_hashes={"x": "0"})
    draft = Draft.new(task.id, rubric_for_task(task))
    draft.cite_run(old.run_id)
    DraftStore().save(task.root, draft)
    session, seen = open_session(task_dir, backend="emulator")
    session.open()
    assert [(s.result.run_id, s.how) for s in seen.of(ev.RunShown)] == [(current.run_id, "latest")]


@pytest.mark.slow
def test_a_kernel_error_is_a_finding_at_its_line_and_its_log_lines_point_there(task_dir):
    kernel = task_dir / "scale_rows_nki.py"
    text = kernel.read_text()
    assert "        x_tile = nl.load(" in text
    kernel.write_text(text.replace("        x_tile = nl.load(", "        undefined_name\n        x_tile = nl.load(", 1))
    line = kernel.read_text().splitlines().index("        undefined_name") + 1
    session, seen = open_session(task_dir, backend="emulator")
    result = session.runs.run()
    assert result.status == "failed" and result.error is not None and result.error.line == line
    finding = session.runs.findings[0]
    assert finding.rule == "RUN-KERNEL-ERROR" and (finding.file, finding.line) == ("scale_rows_nki.py", line)
    assert "NameError" in finding.title and finding.severity == "high"
    assert finding in seen.of(ev.FindingsChanged)[-1].findings
    lines = [entry for batch in seen.of(ev.RunLogged) for entry in batch.lines]
    files = session.task_files()
    error = next(entry for entry in lines if entry.text.startswith("error (kernel-error) at "))
    assert error.level == LEVEL_INDEX["error"] and line_location(error.text, files) == ("scale_rows_nki.py", line)
    frames = [entry for entry in lines if entry.text.strip().startswith('File "scale_rows_nki.py"')]
    assert frames and line_location(frames[0].text, files) == ("scale_rows_nki.py", line)
    assert not any('File "/' in entry.text for entry in lines)  # nkitui's own frames are left out


def test_a_log_line_names_a_task_file_wherever_the_worker_had_it():
    files = ["scale_rows_nki.py", "kernels/attn.py", "reference.py"]
    assert line_location('  File "/tmp/nkitui-run-x/work/kernels/attn.py", line 7, in k', files) == ("kernels/attn.py", 7)
    assert line_location("partition dimension 256 exceeds 128 at scale_rows_nki.py:31", files) == ("scale_rows_nki.py", 31)
    assert line_location("error (kernel-error) at reference.py:3: boom", files) == ("reference.py", 3)
    assert line_location('  File "/usr/lib/python3.11/ast.py", line 50, in parse', files) is None
    assert line_location("seed 0: y passes (max abs 2.36e-07)", files) is None


def test_two_tasks_have_two_sessions_that_keep_their_own_state(sample_task):
    from nkitui.session import SessionRegistry
    from nkitui.task import load_task

    registry = SessionRegistry()
    first, new = registry.open(load_task(sample_task("vector_add")))
    assert new
    first.review.load()
    first.review.draft.set_score("migration_fidelity", 4)
    first.review.edited()
    second, new = registry.open(load_task(sample_task("rmsnorm")))
    assert new and second is not first and len(registry) == 2
    second.review.load()
    again, new = registry.open(load_task(first.task.root))
    assert again is first and not new
    assert again.review.draft.scores["migration_fidelity"].value == 4
    assert second.review.draft.scores["migration_fidelity"].value is None
    registry.close_all()
    assert len(registry) == 0


@pytest.mark.slow
def test_a_run_started_before_the_stored_runs_are_read_still_falls_back_to_the_latest_on_cancel(task_dir):
    slow_reference(task_dir, 60)
    from nkitui.task import load_task

    latest = store_run(recorded_result(), "20260107T090000Z-aaaaaa", file_hashes=load_task(task_dir).file_hashes())
    session, seen = open_session(task_dir, backend="emulator")
    worker = threading.Thread(target=session.runs.run)
    worker.start()  # r pressed at once, before the stored runs were read
    deadline = time.monotonic() + 60
    while not seen.of(ev.RunStarted):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert session.runs.restore().run_id == latest.run_id
    assert not seen.of(ev.RunShown)  # the live log stays on screen
    session.runs.cancel()
    worker.join(60)
    shown = seen.of(ev.RunShown)[-1]
    assert shown.how == "kept" and shown.result.run_id == latest.run_id


@pytest.mark.slow
def test_a_secret_in_a_kernel_error_is_redacted_in_the_live_log_as_in_the_stored_one(task_dir):
    kernel = task_dir / "scale_rows_nki.py"
    kernel.write_text(kernel.read_text().replace(
        "def scale_rows_kernel(x, g):", "def scale_rows_kernel(x, g):\n    raise ValueError('key AKIAIOSFODNN7EXAMPLE')",
        1))
    session, seen = open_session(task_dir, backend="emulator")
    result = session.runs.run()
    live = [line.text for batch in seen.of(ev.RunLogged) for line in batch.lines]
    assert any("[REDACTED:aws-access-key-id]" in t for t in live), live
    assert not any("AKIAIOSFODNN7EXAMPLE" in t for t in live)
    assert not any("AKIAIOSFODNN7EXAMPLE" in line for line in result.to_dict()["log_excerpt"])


def test_a_stored_run_without_file_hashes_is_current_when_it_ran_on_the_current_commit(task_dir):
    import git

    head = git.Repo(task_dir).head.commit.hexsha
    store_run(recorded_result(), "20260108T090000Z-oldcmt", file_hashes={}, task_commit="0" * 40)
    store_run(recorded_result(), "20260107T090000Z-headcm", file_hashes={}, task_commit=head,
              created_at="2026-01-07T09:00:00+00:00")
    session, seen = open_session(task_dir, backend="emulator")
    session.open()
    assert [(s.result.run_id, s.how) for s in seen.of(ev.RunShown)] == [("20260107T090000Z-headcm", "latest")]

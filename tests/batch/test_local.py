"""The local pool with real evaluation workers: one record per task whatever the task does, the
CONTRACT's exit codes, cancel without leftovers, resume on commit, files, version and options."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nkitui.batch import BatchOptions, LocalExecutor, TaskFinished, TaskStarted, start_batch
from nkitui.batch.ledger import Ledger, default_ledger_path
from nkitui.batch.record import SCHEMA, TaskRecord
from nkitui.batch.sizing import pool_size, usable_cpus
from nkitui.evaluate.run.store import RunStore
from tests.batch.conftest import add_task, git_commit_all, quick_options

RECORD_FIELDS = {
    "schema", "schema_version", "key", "path", "task_id", "status", "exit_code", "title", "op", "namespace", "target",
    "commit", "commit_note", "dirty", "run_id", "run_path", "resumed", "backend", "executor", "node", "attempts",
    "duration_s", "checks_passed", "checks_total", "failed_checks", "findings", "latency_us", "latency_kind", "error",
    "problems", "nkitui_version", "options_key", "file_hashes", "finished_at",
}


def _run(root: Path, options: BatchOptions | None = None, **kwargs):
    handle = start_batch(root, options=options or quick_options(), executor=LocalExecutor(2), **kwargs)
    summary = handle.wait()
    return handle, summary


@pytest.mark.slow
def test_a_mixed_folder_gives_one_record_per_task_and_exit_2(mixed_tasks: Path, tmp_path: Path):
    out = tmp_path / "out.jsonl"
    handle, summary = _run(mixed_tasks, jsonl=out)
    status = {k: r.status for k, r in handle.records.items()}
    assert status == {"good": "passed", "group/wrong": "failed", "broken": "invalid", "discovered": "invalid",
                      "loose": "passed"}
    assert summary.exit_code == 2 and summary.total == 5 and not summary.not_run
    wrong = handle.records["group/wrong"]
    assert wrong.failed_checks == ["output:out"] and wrong.exit_code == 1 and wrong.attempts == 1
    # a task outside git is run and says its commit is unknown rather than failing
    loose = handle.records["loose"]
    assert loose.commit is None and "not in a git repository" in loose.commit_note
    assert handle.records["good"].commit and handle.records["good"].dirty is False
    # one JSON line per task, the documented fields, strict JSON
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(d["key"] for d in lines) == sorted(status)
    assert all(set(d) == RECORD_FIELDS and d["schema"] == SCHEMA for d in lines)
    # evaluated tasks are in the run store, where `nkitui runs` and the aggregate table find them
    good = handle.records["good"]
    stored = RunStore().load(good.run_id, task_id="good")
    assert stored.status == "passed" and good.run_path and Path(good.run_path).is_file()
    assert stored.task_path == str((mixed_tasks / "good").resolve())
    assert handle.records["broken"].run_id is None and "inputs[0].shape" in handle.records["broken"].problems[0]


@pytest.mark.slow
def test_timeouts_and_crashes_are_reported_and_never_stop_the_batch(tmp_path: Path):
    from tests.helpers.add_task import add_manifest

    root = tmp_path / "q"
    # the sleeper's own limit (its task.toml), so that a loaded machine cannot time out the others
    add_task(root / "a_sleeps", prelude="time.sleep(60)",
             manifest=add_manifest(task_id="a_sleeps", cuda=False, tail="[evaluation]\ntimeout_s = 3"))
    add_task(root / "b_exits", prelude="os._exit(7)")
    add_task(root / "c_good")
    handle, summary = _run(root, quick_options(timeout_s=None))
    status = {k: r.status for k, r in handle.records.items()}
    assert status == {"a_sleeps": "timeout", "b_exits": "crashed", "c_good": "passed"}
    assert summary.exit_code == 1
    assert "status 7" in handle.records["b_exits"].error["message"]  # the exit status is in the reason


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_cancel_stops_running_workers_keeps_finished_results_and_leaves_nothing_behind(tmp_path: Path):
    root = tmp_path / "q"
    add_task(root / "a_quick")
    for name in ("b_slow", "c_slow", "d_slow"):
        add_task(root / name, prelude="time.sleep(120)")
    executor = LocalExecutor(2)
    events: list = []
    handle = start_batch(root, options=quick_options(timeout_s=300.0), executor=executor, on_event=events.append)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        finished = {e.record.key for e in events if isinstance(e, TaskFinished)}
        started = {e.key for e in events if isinstance(e, TaskStarted)}
        pids = dict(executor.running_pids)
        if "a_quick" in finished and len(started) == 3 and len(pids) == 2:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the slow tasks did not start: {events}")
    time.sleep(0.5)  # past the workers' start-up
    handle.cancel()
    summary = handle.wait(timeout=30)
    assert handle.done and summary.cancelled and summary.exit_code == 130
    status = {k: r.status for k, r in handle.records.items()}
    assert status["a_quick"] == "passed"
    assert sorted(k for k, s in status.items() if s == "cancelled") == sorted(pids)
    assert summary.not_run == 1 and len(status) == 3
    assert not [pid for pid in pids.values() if _alive(pid)], "a cancelled worker is still running"


@pytest.mark.slow
def test_resume_skips_results_for_the_same_commit_files_version_and_options(mixed_tasks: Path):
    first, _ = _run(mixed_tasks)
    again, summary = _run(mixed_tasks, resume=True)
    resumed = sorted(k for k, r in again.records.items() if r.resumed)
    assert resumed == ["good", "group/wrong", "loose"]  # invalid tasks are checked again (nothing runs)
    assert summary.resumed == 3 and summary.exit_code == 2
    assert again.records["good"].run_id == first.records["good"].run_id
    # an uncommitted change in one task: that task (only) runs again, and says it was dirty
    kernel = mixed_tasks / "good" / "add_nki.py"
    kernel.write_text(kernel.read_text() + "\n# touched\n")
    third, _ = _run(mixed_tasks, resume=True)
    assert sorted(k for k, r in third.records.items() if not r.resumed and r.run_id) == ["good"]
    assert third.records["good"].dirty is True
    # committed: its commit changed, so the dirty run does not count for it either
    git_commit_all(mixed_tasks / "good", "touch")
    fourth, _ = _run(mixed_tasks, resume=True)
    assert not fourth.records["good"].resumed and fourth.records["good"].dirty is False
    # other options (another seed count) or another nkitui version never match
    ledger = Ledger(default_ledger_path(None))
    record = fourth.records["good"]
    other = quick_options(seeds=2)
    assert other.key() != quick_options().key()
    assert ledger.find(record.path, other.key(), record.nkitui_version, record.commit, False, record.file_hashes) is None
    assert ledger.find(record.path, record.options_key, "0.0.1", record.commit, False, record.file_hashes) is None
    assert ledger.find(record.path, record.options_key, record.nkitui_version, record.commit, False,
                       record.file_hashes) is not None


def test_records_round_trip_and_keep_their_exit_codes():
    record = TaskRecord(key="k", path="/p", task_id="t", status="timeout")
    again = TaskRecord.from_dict(json.loads(record.to_json()))
    assert again == record and again.exit_code == 1
    assert TaskRecord(key="k", path="/p", task_id="t", status="invalid").exit_code == 2


def test_the_pool_is_sized_from_cpus_and_free_memory():
    size = pool_size()
    assert 1 <= size.workers <= usable_cpus() and size.reason
    tight = pool_size(task_memory_mb=1 << 30)  # a task budget bigger than any free memory: one at a time
    assert tight.workers == 1 and "GiB free" in tight.reason
    assert pool_size(5).workers == 5 and "--workers" in pool_size(5).reason
    assert os.cpu_count() >= usable_cpus()


class _ExplodingExecutor:
    """An executor with a bug: the batch must still end, with BatchFinished and exit 1."""

    name, workers, workers_reason = "exploding", 1, "test"

    def run(self, jobs, options, reporter) -> None:  # noqa: ANN001
        raise RuntimeError("boom")

    def cancel(self) -> None:
        pass


def test_a_failing_executor_or_consumer_never_leaves_the_batch_without_its_end(mixed_tasks: Path):
    from nkitui.batch import BatchFinished

    seen: list = []

    def consumer(event) -> None:  # noqa: ANN001
        seen.append(event)
        raise ValueError("a consumer's bug")

    handle = start_batch(mixed_tasks, options=quick_options(), executor=_ExplodingExecutor(), on_event=consumer)
    summary = handle.wait(timeout=60)
    assert handle.done and isinstance(seen[-1], BatchFinished)
    assert "boom" in summary.error and summary.exit_code == 2  # the invalid tasks were still reported
    assert summary.not_run == 3 and len(handle.records) == 2


def test_wait_with_a_timeout_returns_in_time_while_the_batch_goes_on(tmp_path: Path):
    # wait(timeout) consumed the events with no deadline and bounded only the join after them: a test's
    # `handle.wait(timeout=60)` could wait as long as the slowest task (minutes), or for ever
    add_task(tmp_path / "q" / "slow", prelude="time.sleep(120)")
    handle = start_batch(tmp_path / "q", options=quick_options(timeout_s=300.0), executor=LocalExecutor(1))
    try:
        t0 = time.monotonic()
        handle.wait(timeout=1.0)
        assert time.monotonic() - t0 < 15, "wait(timeout=1) did not return in time"
        assert not handle.done
    finally:
        handle.cancel()
        handle.wait(timeout=60)
    assert handle.done and handle.summary.cancelled

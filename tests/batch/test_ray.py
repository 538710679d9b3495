"""The Ray executor on a REAL local Ray runtime (no mocks): the same verdicts as `nkitui check` and
the local pool, tasks shipped as bundles and snapshots, a dead worker retried once then reported,
and a cancel that stops the evaluation workers on the nodes."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from nkitui.batch import LocalExecutor, TaskStarted, start_batch
from nkitui.batch.ray_executor import RayExecutor
from nkitui.common.resources import bundled_dir
from nkitui.evaluate.run.headless import run_check
from tests.batch.conftest import add_task, alive, children, cmdline, git_commit_all, quick_options

# One worker runs every Ray test: one local Ray runtime (the module's fixture) serves the tests of this
# file; the trn-like cluster test lives in test_ray_cluster.py, so this runtime has stopped before that
# cluster starts and the two never compete for the CPUs.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

# one task that passes and two whose checks fail for different reasons (NaN tiles; a tolerance zeros would pass)
SUBSET = ["vector_add", "flawed_partial_tile", "flawed_loose_tolerance"]


def _verdicts(records) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {k: (r.status, tuple(r.failed_checks)) for k, r in records.items()}


def test_ray_and_the_local_pool_give_the_verdicts_of_nkitui_check(tmp_path: Path, ray_runtime):
    root = tmp_path / "samples"
    for name in SUBSET:
        shutil.copytree(bundled_dir("sample_tasks") / name, root / name)
        git_commit_all(root / name)
    options = quick_options()
    checked = {}
    for name in SUBSET:
        outcome = run_check(options.request(root / name))
        checked[name] = (outcome.result.status, tuple(c.id for c in outcome.result.failed_checks()))
    assert checked["vector_add"][0] == "passed" and checked["flawed_partial_tile"][0] == "failed"
    local = start_batch(root, options=options, executor=LocalExecutor(2))
    local.wait()
    executor = RayExecutor()
    on_ray = start_batch(root, options=options, executor=executor, jsonl=tmp_path / "ray.jsonl")
    summary = on_ray.wait()
    executor.close()  # leaves the session's runtime running: it did not start it
    assert ray_runtime.is_initialized()
    assert _verdicts(local.records) == checked
    assert _verdicts(on_ray.records) == checked
    assert summary.executor == "ray" and summary.exit_code == 1
    for record in on_ray.records.values():
        assert record.executor == "ray" and record.attempts == 1 and record.run_path and Path(record.run_path).is_file()
        assert record.commit == local.records[record.key].commit  # the bundle carried exactly that commit
        assert record.path == str((root / record.key).resolve())
    assert len((tmp_path / "ray.jsonl").read_text().splitlines()) == len(SUBSET)


def test_tasks_outside_git_or_with_changes_travel_as_snapshots_and_match_the_local_pool(mixed_tasks: Path, ray_runtime):
    kernel = mixed_tasks / "group" / "wrong" / "add_nki.py"
    kernel.write_text(kernel.read_text().replace("nl.multiply", "nl.add"))  # uncommitted: now right
    local = start_batch(mixed_tasks, options=quick_options(), executor=LocalExecutor(2))
    local.wait(timeout=240)
    on_ray = start_batch(mixed_tasks, options=quick_options(), executor=RayExecutor())
    on_ray.wait(timeout=240)
    assert local.done and on_ray.done, "a batch did not end in 4 minutes"
    assert {k: r.status for k, r in on_ray.records.items()} == {k: r.status for k, r in local.records.items()}
    assert on_ray.records["group/wrong"].status == "passed" and on_ray.records["group/wrong"].dirty is True
    assert on_ray.records["loose"].commit is None and on_ray.records["loose"].status == "passed"


def test_a_task_whose_ray_worker_dies_is_retried_once_then_reported(tmp_path: Path, ray_runtime):
    root = tmp_path / "q"
    # long enough that the "started" note (drained every POLL_S, a drain waiting up to 10 s on a loaded
    # machine) reaches the test while the first attempt still runs: a kill after it ended hits an idle worker
    add_task(root / "dies_once", prelude="time.sleep(12)")
    add_task(root / "dies_twice", prelude="time.sleep(12)")
    executor = RayExecutor()
    left_behind: list[int] = []
    scratch: list[Path] = []

    def kill(event) -> None:
        if isinstance(event, TaskStarted) and (event.key == "dies_twice" or event.attempt == 1):
            pid = executor.running_pids[event.key]
            for child in children(pid):
                left_behind.append(child)
                try:
                    scratch.append(Path(os.readlink(f"/proc/{child}/cwd")).parent)  # the worker's: <scratch>/work
                except OSError:
                    pass
            os.kill(pid, signal.SIGKILL)

    handle = start_batch(root, options=quick_options(), executor=executor, on_event=kill)
    summary = handle.wait(timeout=240)
    try:
        once, twice = handle.records["dies_once"], handle.records["dies_twice"]
        assert (once.status, once.attempts) == ("passed", 2)
        assert (twice.status, twice.attempts) == ("crashed", 2)
        assert twice.error["kind"] == "node-died" and "died on every attempt" in twice.error["message"]
        assert summary.exit_code == 1
        # the dead Ray worker's evaluation workers are ended and their scratch removed by its reaper (which
        # sees its stdin close): nothing outlives the attempt, nothing is left in /tmp
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (any(alive(p) for p in left_behind) or any(d.exists() for d in scratch)):
            time.sleep(0.2)
        assert [cmdline(p) for p in left_behind if alive(p)] == []
        assert [str(d) for d in scratch if d.name.startswith("nkitui-run-") and d.exists()] == []
    finally:
        for pid in left_behind:  # a failed test still kills what is left (ours, by pid); the reaper is not
            if alive(pid) and "nkitui" in cmdline(pid) and "reaper" not in cmdline(pid):  # raced: it cleans up
                os.killpg(pid, signal.SIGKILL)


def test_cancel_on_ray_stops_the_evaluation_workers_on_the_nodes(tmp_path: Path, ray_runtime):
    root = tmp_path / "q"
    for name in ("slow_a", "slow_b", "slow_c"):  # two CPUs: the third waits in Ray's queue
        add_task(root / name, prelude="time.sleep(120)")
    executor = RayExecutor()
    handle = start_batch(root, options=quick_options(timeout_s=300.0), executor=executor)
    workers: dict[str, int] = {}
    deadline = time.monotonic() + 90
    events = handle.events()
    for event in events:
        if isinstance(event, TaskStarted):
            workers[event.key] = executor.running_pids[event.key]
        if len(workers) == 2:
            break
    evaluation: list[int] = []
    while time.monotonic() < deadline and len(evaluation) < 2:
        evaluation = [c for pid in workers.values() for c in children(pid) if "nkitui.executor.worker" in cmdline(c)]
        time.sleep(0.2)
    assert len(evaluation) == 2, "the evaluation workers did not start"
    handle.cancel()
    summary = handle.wait(timeout=60)
    assert summary.cancelled and summary.exit_code == 130
    assert {k: r.status for k, r in handle.records.items()} == dict.fromkeys(workers, "cancelled")
    assert summary.not_run == 1  # the queued one never started: no record, `--resume` runs it
    gone_by = time.monotonic() + 10
    while time.monotonic() < gone_by and any(alive(pid) for pid in evaluation):
        time.sleep(0.2)
    assert not [pid for pid in evaluation if alive(pid)], "an evaluation worker outlived the cancel"

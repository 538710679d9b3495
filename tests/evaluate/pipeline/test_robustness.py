"""Misbehaving kernels, each in a real kernel process under a real evaluator, through the whole
evaluation pipeline: the parent never crashes and always says what happened, in words."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from nkitui.evaluate.run import start_evaluation
from nkitui.executor.events import ErrorEvent, LogEvent, PhaseEvent, ResultEvent

from tests.helpers.evaluation import add_task_manifest, quick_request, write_task


def run(task_dir, **overrides):
    handle = start_evaluation(quick_request(task_dir, **overrides))
    events = list(handle.events())
    assert isinstance(events[-1], ResultEvent), "the stream always ends with the result"
    return handle, events, handle.result


def child_pids(events) -> list[int]:
    """The pids of the untrusted children (the evaluator forwards their hello lines)."""
    import re

    pids = []
    for e in events:
        if isinstance(e, LogEvent):
            m = re.search(r"\[(kernel|reference) process\] worker (\d+) started", e.text)
            if m:
                pids.append(int(m.group(2)))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kernel_line(task_dir, needle: str) -> int:
    lines = (task_dir / "add_nki.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def test_a_well_behaved_kernel_passes(tmp_path):
    handle, events, result = run(write_task(tmp_path / "ok", prelude='print("in kernel")'))
    assert result.status == "passed", result.error
    assert result.exit_code == 0
    assert [c.id for c in result.checks] == ["integrity", "kernel-runs", "device-outputs", "replay", "output:out",
                                             "tolerance:out", "sandbox"]
    assert all(c.passed for c in result.checks)
    names = [p.name for p in result.phases]
    # the reference answers (and its process ends) before the kernel's code is imported
    assert names == ["load", "reference", "compile", "run", "compare", "profile"]
    assert all(isinstance(p.duration_s, float) for p in result.phases)
    assert result.backend == "emulator" and "using the built-in emulator" in result.backend_reason
    assert [s.seed for s in result.seed_results] == [0, 1]
    assert result.seed_results[0].outputs[0].max_abs == 0.0
    assert any(isinstance(e, LogEvent) and e.stream == "stdout" and e.text == "in kernel" for e in events)
    assert result.utilisation.source == "estimated"
    assert result.timing.kind == "estimated" and result.timing.median_us > 0


def test_a_kernel_that_raises_is_a_failed_check_with_file_and_line(tmp_path):
    task = write_task(tmp_path / "raises", prelude='raise ValueError("tile index out of range")')
    handle, events, result = run(task)
    assert result.status == "failed" and result.exit_code == 1
    err = next(e for e in events if isinstance(e, ErrorEvent))
    assert err.kind == "kernel-error"
    assert "ValueError: tile index out of range" in err.message
    assert (err.file, err.line) == ("add_nki.py", kernel_line(task, "raise ValueError"))
    assert result.error.file == "add_nki.py"
    assert next(c for c in result.checks if c.id == "kernel-runs").passed is False
    skipped = {p.name: p.status for p in result.phases}
    assert skipped["compare"] == "skipped" and skipped["profile"] == "skipped"
    # one error event per seed, not the first seed's a second time when the run stops
    errors = [e.message for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == len(set(errors)) == 2, errors


def test_a_kernel_calling_sys_exit_is_its_own_failure_not_an_internal_error(tmp_path):
    task = write_task(tmp_path / "exits", prelude="sys.exit(0)")
    handle, events, result = run(task)
    assert result.status == "failed" and result.error.kind == "kernel-error"
    assert (result.error.file, result.error.line) == ("add_nki.py", kernel_line(task, "sys.exit(0)"))
    assert "task code called sys.exit(0); it must return its outputs" in result.error.message
    interrupted = run(write_task(tmp_path / "interrupts", prelude="raise KeyboardInterrupt"))[2]
    assert interrupted.status == "failed" and interrupted.error.kind == "kernel-error"
    assert "KeyboardInterrupt" in interrupted.error.message


def test_an_emulator_rule_violation_names_the_rule_and_the_kernel_line(tmp_path):
    manifest = add_task_manifest().replace("[128, 64]", "[256, 64]")
    task = write_task(tmp_path / "partition", manifest=manifest)
    handle, events, result = run(task)
    err = next(e for e in events if isinstance(e, ErrorEvent))
    assert err.kind == "emulator-error"
    assert "256" in err.message and "128" in err.message
    assert err.file == "add_nki.py" and err.line == kernel_line(task, "nl.load(a)")
    assert result.status == "failed"


def test_a_kernel_that_aborts_the_interpreter(tmp_path):
    task = write_task(tmp_path / "abort", prelude="os.abort()")
    handle, events, result = run(task)
    assert result.status == "crashed" and result.exit_code == 1
    assert "SIGABRT" in result.error.message
    assert result.error.file == "add_nki.py" and result.error.line == kernel_line(task, "os.abort()")
    assert any(isinstance(e, LogEvent) and e.stream == "stderr" and "Fatal Python error" in e.text for e in events)
    assert result.error.message.startswith("the kernel process ")  # the evaluator survives and tells it
    # the result still says what ran: the backend chosen before the kernel's process died, and the seeds
    assert result.backend == "emulator" and "emulator" in result.backend_reason
    assert result.seeds == [0, 1]


def test_a_kernel_that_exits_quietly_is_a_crash_told_with_its_last_words(tmp_path):
    # like OpenBLAS calling exit(1) when it cannot allocate under a low --memory-mb
    task = write_task(tmp_path / "exit", prelude='sys.stderr.write("libfoo: memory allocation failed, giving up.\\n")\n'
                                                 "sys.stderr.flush()\nos._exit(1)")
    handle, events, result = run(task)
    assert result.status == "crashed" and result.exit_code == 1
    assert result.error.kind == "crash"
    message = result.error.message
    assert message.startswith("the kernel process exited with status 1 before answering")
    assert "libfoo: memory allocation failed, giving up. The memory limit (2048 MB" in message
    assert "a check failed" not in message  # exit status 1 is not the pipeline's 'a check failed' here


@pytest.mark.slow
def test_an_infinite_loop_hits_the_timeout(tmp_path):
    task = write_task(tmp_path / "loop", prelude="while True:\n    pass")
    start = time.perf_counter()
    handle, events, result = run(task, timeout_s=8.0)
    assert time.perf_counter() - start < 20
    assert result.status == "timeout"
    assert "timed out after 8 s" in result.error.message
    assert [p.name for p in result.phases][:2] == ["load", "reference"]
    # the interrupted phase (the run, unless the machine is slow enough to stop earlier) says in words
    # why it stopped, not the worker's internal exception name
    stopped = result.phases[-1]
    assert stopped.name in ("reference", "compile", "run")
    assert stopped.status == "failed" and "SIGTERM" in stopped.detail
    assert "WorkerCancelled" not in stopped.detail
    pids = child_pids(events)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), "no process of the task outlives the run"


def test_a_memory_bomb_hits_the_memory_limit(tmp_path):
    task = write_task(tmp_path / "bomb", prelude="keep = []\nwhile True:\n    keep.append(np.empty(64 << 20, dtype=np.uint8))")
    handle, events, result = run(task, memory_mb=1024)
    assert result.status == "memory-limit"
    assert "1024 MB" in result.error.message
    assert result.error.kind == "memory-limit"
    line = kernel_line(task, "keep.append")
    assert (result.error.file, result.error.line) == ("add_nki.py", line)
    assert result.error.message.endswith(f"at add_nki.py:{line}")


def test_fifty_megabytes_of_kernel_output(tmp_path):
    task = write_task(tmp_path / "chatty", prelude='sys.stdout.write(("z" * 99 + "\\n") * 524288)\nprint("done printing")')
    handle, events, result = run(task, seeds=1)
    assert result.status == "passed"
    stdout = [e for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    assert len(stdout) <= 2200
    assert stdout[-1].text == "done printing"
    assert any("elided" in e.text for e in events if isinstance(e, LogEvent) and e.stream == "executor")
    assert len(result.log_excerpt) <= 80
    # the stored result says the log was cut, though its excerpt (the last lines) no longer shows the marker
    cut = [n for n in result.notes if n.startswith("the log is cut: ")]
    assert len(cut) == 1 and "lines (" in cut[0] and "of stdout elided" in cut[0]


def test_a_kernel_cannot_write_into_the_task_repository(tmp_path):
    target = tmp_path / "repo" / "pwned.txt"
    task = write_task(tmp_path / "repo", extra_params=", target=None",
                      kernel_extra=f'[kernel.kwargs]\ntarget = "{target}"',
                      prelude='open(target, "w").write("owned")')
    handle, events, result = run(task)
    assert not target.exists()
    assert result.status == "failed"
    err = next(e for e in events if isinstance(e, ErrorEvent))
    assert err.kind == "sandbox" and "refused" in err.message
    sandbox = next(c for c in result.checks if c.id == "sandbox")
    assert sandbox.passed is False and "pwned.txt" in sandbox.detail
    assert any(f.rule == "EXEC-SANDBOX-WRITE" for f in result.findings)


def test_a_kernel_that_swallows_the_refusal_still_fails_the_sandbox_check(tmp_path):
    target = tmp_path / "repo2" / "reference.py"
    task = write_task(tmp_path / "repo2", extra_params=", target=None",
                      kernel_extra=f'[kernel.kwargs]\ntarget = "{target}"',
                      prelude="try:\n    os.remove(target)\nexcept PermissionError:\n    pass")
    handle, events, result = run(task)
    assert target.exists()
    assert next(c for c in result.checks if c.id == "output:out").passed is True
    assert result.status == "failed"
    assert result.sandbox.violations[0].action == "write"


def test_a_kernel_reading_aws_credentials_finds_nothing_and_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    task = write_task(tmp_path / "creds", prelude='print("key:", os.environ.get("AWS_SECRET_ACCESS_KEY"), os.getenv("GITHUB_TOKEN"))')
    handle, events, result = run(task)
    printed = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    assert printed and all(t == "key: None None" for t in printed)
    assert "super-secret-value" not in result.to_json()
    lookups = {v.target for v in result.sandbox.violations if v.action == "credential"}
    assert lookups == {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"}
    assert result.status == "failed"
    assert any(f.rule == "EXEC-SANDBOX-CREDENTIAL" for f in result.findings)


def test_a_kernel_may_not_start_processes_on_the_emulator(tmp_path):
    task = write_task(tmp_path / "spawn", prelude='import subprocess\nsubprocess.run(["true"])')
    handle, events, result = run(task)
    assert result.status == "failed"
    assert result.sandbox.violations[0].action == "process"


def test_a_forking_kernel_is_reported_once_at_its_line(tmp_path):
    task = write_task(tmp_path / "fork", prelude="if os.fork() == 0:\n    os._exit(0)")
    handle, events, result = run(task)
    line = (task / "add_nki.py").read_text().splitlines().index("    if os.fork() == 0:") + 1
    assert result.status == "failed"
    violation = result.sandbox.violations[0]
    assert (violation.action, violation.file, violation.line) == ("process", "add_nki.py", line)
    findings = [f for f in result.findings if f.rule == "EXEC-SANDBOX-PROCESS"]
    assert len(findings) == 1, "every seed repeats the same attempt: one finding, with the count"
    assert (findings[0].file, findings[0].line) == ("add_nki.py", line)
    assert "(os.fork)" in findings[0].message and "``" not in findings[0].message
    assert "2 times" in findings[0].message
    check = next(c for c in result.checks if c.id == "sandbox")
    assert check.detail == f"process: os.fork at add_nki.py:{line} (2 times)"


def test_two_runs_at_once(tmp_path):
    good = write_task(tmp_path / "good", task_id="good")
    bad = write_task(tmp_path / "bad", task_id="bad", reference="def add(a, b, **kw):\n    return a - b\n")
    handles = [start_evaluation(quick_request(good)), start_evaluation(quick_request(bad))]
    results = {}

    def wait(h):
        results[h.run_id] = h.wait(timeout=120)

    threads = [threading.Thread(target=wait, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_task = {r.task_id: r for r in results.values()}
    assert by_task["good"].status == "passed"
    assert by_task["bad"].status == "failed"
    assert "elements outside" in next(c for c in by_task["bad"].checks if c.id == "output:out").detail


def test_cancel_mid_run(tmp_path):
    task = write_task(tmp_path / "slow", prelude="time.sleep(60)")
    handle = start_evaluation(quick_request(task))
    events = []
    for ev in handle.events():
        events.append(ev)
        if isinstance(ev, PhaseEvent) and ev.name == "run" and ev.state == "start":
            threading.Timer(0.3, handle.cancel).start()
    result = handle.result
    assert result.status == "cancelled"
    assert result.error.kind == "cancelled"
    assert result.error.message.startswith("the run was cancelled after ")  # the parent's words: it knows why
    assert isinstance(events[-1], ResultEvent)

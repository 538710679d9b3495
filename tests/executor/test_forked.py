"""Untrusted children forked from the evaluator (nkitui.executor.forked): the Popen look-alike the
runner uses, when forking is refused, and a real run's children holding only their own pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nkitui.executor import forked
from nkitui.executor.events import LogEvent
from tests.security.test_forgery import evaluate, wrong_task


def _fork(code: int, delay: float) -> forked.ForkedWorker:
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(delay)
        finally:
            os._exit(code)
    return forked.ForkedWorker(pid, None, None, None, ["sleeper"])


def test_the_handle_polls_waits_times_out_and_reports_signals_as_popen_does():
    child = _fork(3, 0.4)
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)
    assert child.wait() == 3 and child.poll() == 3 and child.returncode == 3
    killed = _fork(0, 30)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=10) == -signal.SIGKILL


def test_wait_from_two_threads_sees_the_same_exit():
    child = _fork(5, 0.2)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(child.wait(timeout=10))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [5, 5]


def test_forking_is_refused_outside_an_evaluator_and_with_a_second_thread(monkeypatch):
    monkeypatch.setattr(forked, "_allowed", False)
    assert forked.why_not() == "not an evaluator process" and not forked.can_fork()
    monkeypatch.setattr(forked, "_allowed", True)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert "threads" in (forked.why_not() or "")
    finally:
        stop.set()
        t.join()


FD_LISTING = '''
import os as _os
for _fd in sorted(int(n) for n in _os.listdir("/proc/self/fd")):
    try:
        print("FD", _fd, _os.readlink(f"/proc/self/fd/{_fd}"))
    except OSError:
        pass
'''


def test_a_forked_kernel_process_holds_only_its_own_pipes(tmp_path: Path):
    # forked from the evaluator after the reference process was: every descriptor of the evaluator's
    # (its event pipe to nkitui, the reference process's pipes) must be closed in the kernel's process
    result, events = evaluate(wrong_task(tmp_path, FD_LISTING))
    texts = [e.text for e in events if isinstance(e, LogEvent)]
    assert any("forked from the evaluator" in t for t in texts), [t for t in texts if "process" in t][:5]
    pipes = {t.split()[2] for t in texts if t.startswith("FD ") and "pipe:" in t}
    # stdin (requests), its event pipe, stderr and the kernel's stdout (fds 1 and 3): four pipes
    assert 0 < len(pipes) <= 4, pipes
    assert result.status == "failed"  # the kernel still multiplies


ENV_LISTING = '''
import os as _os, posix as _posix
print("ENV", sorted(_os.environ.items()))
print("POSIXENV", sorted((k.decode(), v.decode()) for k, v in _posix.environ.items()))
print("HOME", _os.environ.get("HOME"))
_scratch = _os.path.dirname(_os.path.realpath(_os.getcwd()))
print("OWNSCRATCH", all(_os.path.dirname(_os.path.realpath(_os.environ[v])) == _scratch for v in ("HOME", "TMPDIR")))
print("PPID", _os.getppid(), "SID", _os.getsid(0) == _os.getpid())
'''


def test_a_forked_kernel_process_has_its_own_environment_session_and_confinement(tmp_path: Path, monkeypatch):
    # a variable of nkitui's that the allowlist keeps out must reach neither the evaluator's children
    # (os.environ) nor the interpreter's own copy of the environment it started with (posix.environ,
    # which in a forked child would still be the evaluator's: its HOME, TMPDIR and parent pid)
    monkeypatch.setenv("NKITUI_TEST_NOT_FOR_CHILDREN", "secret-value")
    result, events = evaluate(wrong_task(tmp_path, ENV_LISTING))
    texts = [e.text for e in events if isinstance(e, LogEvent)]
    assert any("forked from the evaluator" in t for t in texts)
    env_line = next(t for t in texts if t.startswith("ENV "))
    posix_line = next(t for t in texts if t.startswith("POSIXENV "))
    assert "NKITUI_TEST_NOT_FOR_CHILDREN" not in env_line + posix_line
    assert env_line.removeprefix("ENV ") == posix_line.removeprefix("POSIXENV ")
    assert "OWNSCRATCH True" in texts  # HOME and TMPDIR in the child's own scratch folder, not the evaluator's
    assert next(t for t in texts if t.startswith("PPID ")).endswith("SID True")  # its own session
    assert result.status == "failed"
    # the OS layers were entered in the forked child as in a spawned one (what the host allows)
    kernel = result.sandbox.confinement["kernel"]
    observed = result.sandbox.observed["kernel"]
    assert observed.own_session is True and "new session" in kernel.active, kernel
    for layer in ("seccomp", "landlock"):  # active, or said to be missing on this host
        assert layer in kernel.active or any(layer in d for d in kernel.degraded), (layer, kernel)
    if "seccomp" in kernel.active:
        assert observed.seccomp == 2 and observed.no_new_privs is True

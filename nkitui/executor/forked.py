"""Untrusted children forked from the evaluator instead of started as new interpreters.

An untrusted child spawned the ordinary way (`python -P -m nkitui.executor.worker`) pays for a new
interpreter and imports numpy (and, for a task with bf16 or fp8 data, ml_dtypes: about 0.6 s of CPU
on its own) before it can answer anything; the evaluator already paid for them. While the evaluator
has one thread and has made no input set yet, it forks its children instead:

    evaluator (one thread, numpy and ml_dtypes imported, the task's manifest read, nothing else)
      ├─ fork → reference process     each child, before anything else: its own session, SIGKILL
      └─ fork → kernel process        when the evaluator dies, no core files, dumpable as after an
                                      exec, its pipes on fds 0-3 and every other descriptor closed,
                                      the scrubbed environment, its scratch copy as cwd; then
                                      worker.main with its job file, exactly as a spawned child

What a child inherits from the evaluator's memory at that point is what the task's own files say
(the manifest) and nkitui's modules: no input set, no reference answer and no verdict exists yet.
The parent side is a small Popen look-alike (ForkedWorker) so the runner treats both kinds alike.
A process that is not an evaluator, or one with a second thread (forking it would copy a lock some
other thread holds), never forks: spawn_untrusted falls back to a new interpreter.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_allowed = False  # set by worker.main in the evaluator only; never true in a forked child


def allow_forking() -> None:
    global _allowed
    _allowed = True


def can_fork() -> bool:
    return why_not() is None


def why_not() -> str | None:
    """None when this process may fork an untrusted child now: an evaluator, on Linux, with one
    thread (Python's and the native ones: /proc/self/task); else the reason it may not."""
    if not _allowed:
        return "not an evaluator process"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return f"not on Linux ({sys.platform})"
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads"
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError as exc:
        return f"cannot count threads: {exc}"
    return None if threads == 1 else f"{threads} threads"


class ForkedWorker:
    """The parent's handle on a forked child: the part of subprocess.Popen the runner uses."""

    def __init__(self, pid: int, stdin: Any, stdout: Any, stderr: Any, args: Sequence[str]) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.args = list(args)
        self.returncode: int | None = None
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status = self.pid, 255 << 8  # reaped elsewhere: its status is lost
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    if self._pidfd is not None:
                        os.close(self._pidfd)
                        self._pidfd = None
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            pidfd = self._pidfd
            if pidfd is not None:
                try:
                    select.select([pidfd], [], [], left)
                    continue
                except (OSError, ValueError):  # closed by a poll on another thread
                    continue
            time.sleep(min(delay, left) if left is not None else delay)
            delay = min(delay * 2, 0.05)
        assert self.returncode is not None
        return self.returncode


def fork_worker(job_path: Path, kernel_w: int, policy: Any, *, extra_env: Mapping[str, str] | None,
                python_path: Sequence[str], cwd: Path, requests: bool) -> ForkedWorker:
    """Fork a worker that runs `job_path` as `python -P -m nkitui.executor.worker` would, with the
    environment and process attributes confine.spawn gives a spawned one. The caller checked
    can_fork() and registers the pid with the reaper."""
    from nkitui.executor import confine
    from nkitui.executor.confine import libc

    options = confine.popen_options(policy, extra_env=extra_env, python_path=python_path)  # mkdirs home/, tmp/
    env: dict[str, str] = options["env"]
    prctl = libc.libc().prctl  # resolved before the fork: the child only calls it
    parent = os.getpid()
    path_entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    args = [sys.executable, "-P", "-m", "nkitui.executor.worker", str(job_path), "--kernel-fd", "3"]
    stdin_r, stdin_w = os.pipe() if requests else (os.open(os.devnull, os.O_RDONLY), -1)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    pid = os.fork()
    if pid == 0:  # the child: never returns into the evaluator's code
        code = 4
        try:
            code = _child(parent, prctl, (stdin_r, out_w, err_w, kernel_w), env, path_entries, cwd, job_path)
        except BaseException:  # noqa: BLE001 - nothing of the evaluator may run on in this process
            try:
                import traceback

                os.write(2, traceback.format_exc().encode("utf-8", "replace"))
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    stdin = os.fdopen(stdin_w, "wb", buffering=0) if stdin_w >= 0 else None
    return ForkedWorker(pid, stdin, os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0), args)


def _child(parent: int, prctl: Any, fds: tuple[int, int, int, int], env: Mapping[str, str],
           path_entries: Sequence[str], cwd: Path, job_path: Path) -> int:
    global _allowed
    _allowed = False
    import gc

    gc.freeze()  # the evaluator's objects are never collected here: no finalizer of theirs runs in the child
    os.setsid()  # its own session and process group, as start_new_session=True gives
    prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != parent:  # the evaluator died between fork and prctl
        return 125
    prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as after an exec (the evaluator is not dumpable)
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    stdin_r, out_w, err_w, kernel_w = fds
    for fd, target in ((stdin_r, 0), (out_w, 1), (err_w, 2), (kernel_w, 3)):
        if fd != target:
            os.dup2(fd, target)
    os.closerange(4, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)  # the evaluator's own pipes
    os.chdir(cwd)
    os.environ.clear()  # os.environ's data is posix.environ itself: nothing of the evaluator's is left
    os.environ.update(env)
    import tempfile

    tempfile.tempdir = None  # TMPDIR is the child's own now
    for entry in reversed(path_entries):  # what PYTHONPATH would have put first
        if entry not in sys.path:
            sys.path.insert(0, entry)
    sys.argv = ["-m", str(job_path), "--kernel-fd", "3"]
    from nkitui.executor import worker

    code = worker.main(["nkitui.executor.worker", str(job_path), "--kernel-fd", "3"])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code

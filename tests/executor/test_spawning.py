"""Starting a confined child from a process with other threads (nkitui.executor.confine): the step
between fork and exec takes no lock another thread may hold, and no caller waits for a spawn forever.

Real threads and real child processes. Each test bounds its own waits: what it checks is that
nothing hangs, so a regression fails it in seconds instead of stalling the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nkitui.executor import confine


def _children() -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _wait_exit(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pre-exec step exists on Linux only")
def test_the_pre_exec_step_imports_nothing(tmp_path):
    # every import would run the import machinery in a forked copy of a threaded process
    preexec = confine.popen_options(confine.ConfinementPolicy(scratch=tmp_path))["preexec_fn"]
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            class Tripwire:
                @staticmethod
                def find_spec(*_args, **_kwargs):
                    os._exit(7)

            sys.modules.pop("resource", None)
            sys.meta_path.insert(0, Tripwire)
            preexec()
            code = 0
        finally:
            os._exit(code)
    assert _wait_exit(pid, 30) == 0, "the pre-exec step imported a module (7) or failed (3)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pre-exec step exists on Linux only")
def test_a_spawn_while_another_thread_imports_does_not_hang(tmp_path):
    # The deadlock itself: a thread is in the middle of `import resource` (it holds that module's
    # import lock) when the spawner forks. The child inherits the lock held by a thread it does not
    # have; a pre-exec step that imported `resource` waited for it for good (futex, no CPU), and
    # Popen in the parent waited for the child's exec with it.
    import importlib._bootstrap as bootstrap

    options = confine.popen_options(confine.ConfinementPolicy(scratch=tmp_path))  # before the lock is taken
    saved = sys.modules.pop("resource", None)
    holding, release = threading.Event(), threading.Event()

    def importer() -> None:
        with bootstrap._ModuleLockManager("resource"):  # type: ignore[attr-defined]  # what `import resource` holds meanwhile
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=importer, daemon=True)
    holder.start()
    started: list[subprocess.Popen] = []
    spawner = threading.Thread(target=lambda: started.append(subprocess.Popen(["true"], **options)), daemon=True)
    try:
        assert holding.wait(10)
        before = set(_children())
        spawner.start()
        spawner.join(timeout=20)
        hung = spawner.is_alive()
        if hung:  # end the stuck child so that Popen returns and nothing is left behind
            for pid in set(_children()) - before:
                os.kill(pid, 9)
    finally:
        release.set()
        holder.join(timeout=10)
        spawner.join(timeout=10)
        if saved is not None:
            sys.modules["resource"] = saved
    assert not hung, "Popen waited 20 s for a child stuck between fork and exec"
    assert started  # it reached its exec (and may be gone already: its parent-death signal is this thread's)
    started[0].wait(timeout=30)


def test_a_spawn_that_never_returns_fails_in_time_and_its_late_child_is_killed():
    spawner = confine._Spawner()
    release = threading.Event()
    late: list[subprocess.Popen] = []

    def stuck() -> subprocess.Popen:
        release.wait(60)
        late.append(subprocess.Popen(["sleep", "60"], start_new_session=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE))
        return late[-1]

    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"the stuck child did not start within 0\.5 s"):
        spawner.call(stuck, what="the stuck child", timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert spawner.call(lambda: 42, timeout=10) == 42  # a fresh spawner thread serves the next callers
    release.set()
    deadline = time.monotonic() + 20
    while not late or late[0].poll() is None:
        assert time.monotonic() < deadline, "the child started for the caller that gave up was left running"
        time.sleep(0.05)
    assert late[0].returncode == -9
    deadline = time.monotonic() + 10
    while not (late[0].stdout.closed and late[0].stderr.closed):  # nobody reads them: not leaked
        assert time.monotonic() < deadline, "the late child's pipes were left open"
        time.sleep(0.05)


def test_the_modules_with_fork_handlers_are_imported_before_any_fork(tmp_path):
    # logging and concurrent.futures register a lock to take before a fork and release after it; one
    # imported by another thread during a spawn printed "Exception ignored in: <function _releaseLock>"
    code = ("import sys, pathlib\n"
            "from nkitui.executor import confine\n"
            "assert 'logging' not in sys.modules, 'imported already: the test proves nothing'\n"
            f"confine.popen_options(confine.ConfinementPolicy(scratch=pathlib.Path({str(tmp_path)!r})))\n"
            "print('logging' in sys.modules, 'concurrent.futures.thread' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]

"""Containment attacks, each in a wrong kernel (a * b for a + b) through the whole evaluation, as
issue #14 found them working: the wrong kernel is never passed, nothing is written or read outside
the run's scratch folder, nothing the kernel started outlives the run, the scratch folder is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nkitui.evaluate.run import EvaluationRequest, start_evaluation
from nkitui.executor.events import LogEvent

from .conftest import (REPO, SECRET, SECRET_VALUE, alive, git_commit_all, nkitui_cmd, processes_with, require,
                       wait_gone, wrong_task)

MARKER_SLEEP = "31.4159"  # `sleep 31.4159`: an argument no other process on the machine uses


def attack(task: Path):
    """Run the task: (result, the kernel's stdout lines, the scratch folder the kernel saw)."""
    handle = start_evaluation(EvaluationRequest.of(task, static=False, trials=False, precision=False, goldens=False,
                                                timeout_s=120, memory_mb=2048, store=True))
    events = list(handle.events())
    stdout = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    cwd = next((line.removeprefix("CWD ") for line in stdout if line.startswith("CWD ")), None)
    return handle.result, stdout, Path(cwd).parent if cwd else None


def stored_text(result) -> str:
    """Everything nkitui keeps of the run: the stored result file and the in-memory result."""
    from nkitui.evaluate.run.store import RunStore

    path = RunStore().path_for(result.task_id, result.run_id)
    return result.to_json() + (path.read_text() if path.exists() else "")


def assert_contained(result, stdout, scratch, *, canary: Path | None = None, repo: Path | None = None) -> None:
    assert result.status != "passed", "a wrong kernel was passed"
    assert result.exit_code != 0
    assert scratch is not None and not scratch.exists(), "the scratch folder outlived the run"
    text = stored_text(result) + "\n".join(stdout)
    assert SECRET_VALUE not in text and SECRET not in text, "a secret reached the run's output"
    if canary is not None:
        assert sorted(p.name for p in canary.iterdir()) == ["secret.txt"], "something was written outside"
    if repo is not None:
        assert not list(repo.rglob("pwned*")), "something was written into the task repository"
    assert not processes_with(MARKER_SLEEP), "a process the kernel started outlived the run"


def protection(record_property, name: str) -> None:
    record_property("protection", f"attack:{name}")


def test_dir_fd_writes_into_the_repository_home_and_git_hooks(tmp_path, canary, isolated, host, record_property):
    protection(record_property, "dir-fd-writes")
    require(host, "landlock")
    repo = tmp_path / "repo"
    task = wrong_task(repo, prelude=f"""
        print("CWD", os.getcwd())
        for folder, name in [({str(repo)!r}, "pwned.txt"), ({str(isolated)!r}, "pwned-home.txt"),
                             ({str(repo / '.git' / 'hooks')!r}, "pre-commit"), ({str(canary)!r}, "pwned-out.txt")]:
            try:
                fd = os.open(folder, os.O_RDONLY)
                out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd)
                os.write(out, b"#!/bin/sh\\ntouch /tmp/hooked\\n")
                print("WROTE", folder)
            except OSError as exc:
                print("REFUSED", folder, type(exc).__name__)
    """)
    git_commit_all(repo)
    result, stdout, scratch = attack(task)
    assert not any(line.startswith("WROTE") for line in stdout)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists() and not (isolated / "pwned-home.txt").exists()
    assert_contained(result, stdout, scratch, canary=canary, repo=repo)


def test_reading_the_parents_proc_entries(tmp_path, host, record_property):
    protection(record_property, "proc-parent")
    task = wrong_task(tmp_path / "proc", prelude="""
        print("CWD", os.getcwd())
        for entry in ("environ", "cmdline", "cwd", "mem"):
            path = f"/proc/{os.getppid()}/{entry}"
            try:
                data = os.listdir(path) if entry == "cwd" else open(path, "rb").read(4096)
                print("READ", entry, data)
            except OSError as exc:
                print("REFUSED", entry, type(exc).__name__)
    """)
    result, stdout, scratch = attack(task)
    assert not [line for line in stdout if line.startswith(("READ environ", "READ cwd", "READ mem"))]
    assert_contained(result, stdout, scratch)


def test_reading_credential_files(tmp_path, isolated, canary, host, record_property):
    protection(record_property, "credential-files")
    require(host, "landlock")
    task = wrong_task(tmp_path / "creds", prelude=f"""
        print("CWD", os.getcwd())
        for path in ({str(isolated / '.aws' / 'credentials')!r}, {str(canary / 'secret.txt')!r},
                     os.path.expanduser("~/.aws/credentials")):
            try:
                print("READ", open(path).read())
            except OSError as exc:
                print("REFUSED", path, type(exc).__name__)
    """)
    result, stdout, scratch = attack(task)
    assert not any(line.startswith("READ") for line in stdout)
    reads = [v for v in result.sandbox.violations if v.action == "read"]
    assert reads and reads[0].file == "add_nki.py", "the guard names the kernel's line"
    assert_contained(result, stdout, scratch, canary=canary)


def test_a_socket_to_a_local_listener(tmp_path, listener, host, record_property):
    protection(record_property, "sockets")
    require(host, "seccomp")
    task = wrong_task(tmp_path / "net", prelude=f"""
        import socket
        print("CWD", os.getcwd())
        for family in (socket.AF_INET, socket.AF_UNIX):
            try:
                s = socket.socket(family)
                s.connect(("127.0.0.1", {listener.port}) if family == socket.AF_INET else "/var/run/docker.sock")
                print("CONNECTED", family)
            except OSError as exc:
                print("REFUSED", family, type(exc).__name__)
    """)
    result, stdout, scratch = attack(task)
    assert not listener.connected(), "the kernel reached a local listener"
    assert not any(line.startswith("CONNECTED") for line in stdout)
    assert_contained(result, stdout, scratch)


SESSION_ESCAPES = {
    "fork_exec": """
        import _posixsubprocess
        args = (["/bin/sleep", "{marker}"], [b"/bin/sleep"], True, (), None, None, -1, -1, -1, -1, -1, -1, -1, -1,
                False, True, -1, None, None, None, -1, None)
        try:
            _posixsubprocess.fork_exec(*args, False)
        except TypeError:
            _posixsubprocess.fork_exec(*args)
    """,
    "fork_setsid": """
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "{marker}"])
    """,
    "double_fork": """
        if os.fork() == 0:
            if os.fork() == 0:
                os.setsid()
                os.execv("/bin/sleep", ["sleep", "{marker}"])
            os._exit(0)
    """,
    "ctypes_system": """
        import ctypes
        ctypes.CDLL(None).system(b"setsid sleep {marker} &")
    """,
    "ctypes_pythonapi_system": """
        import ctypes
        ctypes.pythonapi.system(b"setsid sleep {marker} &")
    """,
    "ctypes_fork": """
        import ctypes
        if ctypes.pythonapi.fork() == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "{marker}"])
    """,
}


@pytest.mark.parametrize("how", sorted(SESSION_ESCAPES))
def test_processes_that_escape_the_session(how, tmp_path, host, record_property):
    protection(record_property, f"process-{how}")
    require(host, "seccomp")
    code = SESSION_ESCAPES[how].replace("{marker}", MARKER_SLEEP)
    task = wrong_task(tmp_path / how, prelude=f"""
        print("CWD", os.getcwd())
        try:
{textwrap_indent(code, 12)}
            print("STARTED")
        except BaseException as exc:
            print("REFUSED", type(exc).__name__, exc)
    """)
    result, stdout, scratch = attack(task)
    time.sleep(0.3)  # a process that escaped would be running now
    assert_contained(result, stdout, scratch)


def textwrap_indent(code: str, spaces: int) -> str:
    import textwrap

    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)


def test_switching_the_guard_off_does_not_open_the_walls(tmp_path, canary, host, record_property):
    protection(record_property, "guard-off")
    require(host, "landlock")
    task = wrong_task(tmp_path / "guard", prelude=f"""
        print("CWD", os.getcwd())
        from nkitui.executor.sandbox import current_guard
        guard = current_guard()
        try:
            guard.allow_writes_under("/")
        except PermissionError:
            print("TAMPER REFUSED")
        object.__setattr__(guard, "_writable", ("/",))   # the determined way round
        object.__setattr__(guard, "_readable", None)
        guard._violations.clear()
        try:
            open({str(canary / 'pwned-out.txt')!r}, "w").write("escaped")
            print("WROTE")
        except OSError as exc:
            print("REFUSED", type(exc).__name__)
    """)
    result, stdout, scratch = attack(task)
    assert "TAMPER REFUSED" in stdout and "WROTE" not in stdout
    # the parent got the refusals as they happened, whatever the kernel did to the guard's list later
    assert result.sandbox.refusals_received
    assert next(c for c in result.checks if c.id == "sandbox").passed is False
    assert_contained(result, stdout, scratch, canary=canary)


def _check_process(task: Path, tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(nkitui_cmd("check", str(task), "--no-static", "--no-trials", "--no-precision", "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)


def _worker_of(parent: int, timeout: float = 60.0) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if int(stat[1]) == parent and b"nkitui.executor.worker" in cmd:
                    return int(entry)
        time.sleep(0.05)
    return None


def _descendants(pid: int) -> list[int]:
    """Every living process below `pid` (from /proc; children of children too)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _process_in(parent: int, marker: str, timeout: float = 120.0) -> tuple[int, Path] | None:
    """A process below `parent` whose working folder holds `marker` (the kernel's own scratch copy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _descendants(parent):
            cwd = _cwd(pid)
            if cwd is not None and (cwd / marker).exists():
                return pid, cwd
        time.sleep(0.05)
    return None


def test_killing_the_parent_from_the_kernel_is_refused(tmp_path, host, record_property):
    protection(record_property, "kill-parent")
    require(host, "seccomp")
    task = wrong_task(tmp_path / "killer", prelude="""
        print("CWD", os.getcwd())
        try:
            os.kill(os.getppid(), 9)
            print("KILLED")
        except OSError as exc:
            print("REFUSED", type(exc).__name__)
    """)
    proc = _check_process(task, tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err.decode()[-2000:]  # a normal "a check failed", not SIGKILL (-9)
    result = json.loads(out)
    stdout = [line.partition("] ")[2] for line in result["log_excerpt"] if line.startswith("[stdout")]
    assert any(line.startswith("REFUSED") for line in stdout) and "KILLED" not in stdout
    cwd = next(line.removeprefix("CWD ") for line in stdout if line.startswith("CWD "))
    assert not Path(cwd).parent.exists()


@pytest.mark.slow
def test_when_nkitui_dies_the_worker_dies_and_the_scratch_folder_goes(tmp_path, record_property):
    """nkitui killed with SIGKILL (nothing of it runs any more) while the kernel runs: the parent-death
    signal kills the evaluator and the kernel's process, and the scratch folders of both go."""
    protection(record_property, "parent-death")
    task = wrong_task(tmp_path / "sleeper", prelude="""
        print("CWD", os.getcwd(), flush=True)
        open("started", "w").close()
        time.sleep(60)
    """)
    proc = _check_process(task, tmp_path)
    evaluator = _worker_of(proc.pid)
    assert evaluator is not None, "the evaluator did not start"
    evaluator_cwd = _cwd(evaluator)
    # the kernel writes `started` into its own scratch copy (a process below the evaluator)
    kernel = _process_in(evaluator, "started")
    assert kernel is not None, "the kernel did not start"
    kernel_pid, kernel_cwd = kernel
    workers = [evaluator, *_descendants(evaluator)]
    assert kernel_pid in workers
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_gone(workers, timeout=10) == [], "a worker outlived nkitui"
    scratches = [cwd.parent for cwd in (evaluator_cwd, kernel_cwd) if cwd is not None]
    deadline = time.monotonic() + 10
    while any(s.exists() for s in scratches) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [s for s in scratches if s.exists()], "a scratch folder outlived nkitui"
    assert not alive(evaluator) and not alive(kernel_pid)


def test_the_report_shows_what_was_active(tmp_path, host):
    task = wrong_task(tmp_path / "plain", prelude='print("CWD", os.getcwd())')
    result, stdout, scratch = attack(task)
    summary = result.sandbox.summary
    assert summary.startswith(("sandbox: ", "degraded: "))
    assert summary == confine_summary(result)
    if "seccomp" in host.report["active"]:
        assert result.sandbox.observed["kernel"].seccomp == 2 and "seccomp" in summary
    from nkitui.evaluate.present.report import result_text

    assert "isolation" in result_text(result) and summary.split(",")[0] in result_text(result, width=200)
    assert_contained(result, stdout, scratch)


def confine_summary(result) -> str:
    from nkitui.executor.confine import record

    observed = result.sandbox.observed.get("kernel")
    return record({"confinement": result.sandbox.confinement["kernel"].to_dict()},
                  observed.to_dict() if observed else None)["summary"]


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip(reason="the confinement is Linux-only")


def test_a_placeholder_sdk_does_not_loosen_the_confinement(tmp_path, isolated, host, record_property):
    """A findable `nki` (here the PyPI placeholder, which raises ImportError) does not loosen the
    kernel's process: the evaluator picks the emulator before it starts that process, so it is
    confined fully from the start (reads restricted, no processes)."""
    protection(record_property, "placeholder-sdk")
    require(host, "landlock")
    task = wrong_task(tmp_path / "ph", prelude=f"""
        print("CWD", os.getcwd())
        try:
            print("READ", open({str(isolated / '.aws' / 'credentials')!r}).read())
        except OSError as exc:
            print("REFUSED", type(exc).__name__)
    """)
    handle = start_evaluation(EvaluationRequest.of(task, static=False, trials=False, precision=False, goldens=False,
                                                timeout_s=120, memory_mb=2048, store=True,
                                                python_path=[str(REPO / "tests" / "fakes" / "placeholder")]))
    events = list(handle.events())
    stdout = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    cwd = next((line.removeprefix("CWD ") for line in stdout if line.startswith("CWD ")), None)
    result = handle.result
    assert result.backend == "emulator"
    assert "reads not restricted" not in result.sandbox.summary
    assert not any("reads not restricted" in d for d in result.sandbox.confinement["kernel"].degraded)
    assert not any(line.startswith("READ") for line in stdout)
    assert_contained(result, stdout, Path(cwd).parent if cwd else None)

"""Threads: task code starts none (nkitui.executor.confine.threads). A thread of task code could run after
the kernel returned and rewrite what nkitui saves; Python 3.11 raises no audit event for a thread start,
so the kernel's own seccomp program refuses clone to the thread that runs task code, and the Python
start functions refuse first with the task's file:line. The emulator's logical cores still run in
threads (started by nkitui's helper, each refusing threads to itself before the kernel's body runs).

Each attack is a wrong kernel (the bundled vector_add multiplying) that tries every route to a thread
and prints what happened on its stdout."""

from __future__ import annotations

import pytest

from nkitui.executor.events import LogEvent

from .conftest import require
from .test_forgery import assert_not_passed, check, evaluate, findings, line_of, wrong_task

ROUTES = '''
def _try_threads():
    import asyncio, concurrent.futures, ctypes, threading, _thread
    def nothing():
        return 1
    def pthread():
        lib = ctypes.CDLL(None)
        fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: None)
        tid = ctypes.c_ulong()
        rc = lib.pthread_create(ctypes.byref(tid), None, fn, None)
        if rc == 0:
            lib.pthread_join(tid, None)
            return "started"
        raise OSError(rc, "pthread_create")
    def original():
        import sys  # nkitui's own reference to the real start function, past the Python-level refusal
        return sys.modules["nkitui.executor.confine.threads"]._state["original"](nothing, ())
    async def executor():
        return await asyncio.get_running_loop().run_in_executor(None, nothing)
    routes = {
        "threading": lambda: threading.Thread(target=nothing).start(),
        "futures": lambda: concurrent.futures.ThreadPoolExecutor(1).submit(nothing).result(),
        "asyncio": lambda: asyncio.run(executor()),
        "_thread": lambda: _thread.start_new_thread(nothing, ()),
        "timer": lambda: threading.Timer(0.0, nothing).start(),
        "pthread": pthread,
        "original": original,
    }
    for name, route in routes.items():
        try:
            route()
            print("STARTED", name)
        except Exception as exc:
            print("REFUSED", name, type(exc).__name__, str(exc)[:160])
'''


def _stdout(events) -> list[str]:  # noqa: ANN001
    return [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]


def _in_kernel(source: str) -> str:
    return source.replace("    return c\n", "    _try_threads()\n    return c\n")


def test_every_route_to_a_thread_is_refused_in_the_kernel_process(tmp_path, host, record_property):
    record_property("protection", "threads:kernel-process")
    require(host, "seccomp")
    task = wrong_task(tmp_path, ROUTES, edit=_in_kernel)
    result, events = evaluate(task)
    out = _stdout(events)
    assert not [line for line in out if line.startswith("STARTED")], out
    assert {line.split()[1] for line in out if line.startswith("REFUSED")} >= {
        "threading", "futures", "asyncio", "_thread", "timer", "pthread", "original"}, out
    # the Python routes are refused with the task's line; the original start function (taken from nkitui's
    # own module) meets the kernel's refusal (seccomp: clone EPERM)
    assert any(line.startswith("REFUSED threading PermissionError") and "starting a thread refused at "
               "vector_add_nki.py:" in line for line in out), out
    assert any(line.startswith("REFUSED original RuntimeError can't start new thread") for line in out), out
    assert_not_passed(result)
    assert check(result, "sandbox").passed is False
    refused = findings(result, "EXEC-SANDBOX-THREAD")
    assert refused and refused[0].file == "vector_add_nki.py"
    assert refused[0].line == line_of(task, '"threading": lambda')
    assert "no threads" in result.sandbox.summary


def test_a_thread_started_at_import_through_concurrent_futures_is_refused(tmp_path, host, record_property):
    """The round-2 racing thread (no `import threading` for the static rule): it never starts now."""
    record_property("protection", "threads:import-time")
    require(host, "seccomp")
    from tests.security.test_redteam_channels import RACING_THREAD

    result, events = evaluate(wrong_task(tmp_path, RACING_THREAD))
    assert_not_passed(result)
    refused = findings(result, "EXEC-SANDBOX-THREAD")
    assert refused and refused[0].file == "vector_add_nki.py"
    assert check(result, "sandbox").passed is False
    runs = check(result, "kernel-runs")
    assert runs is not None and runs.passed is False  # importing the kernel raised: nothing ran


def test_the_kernel_body_on_the_second_logical_core_cannot_start_threads_either(tmp_path, host, record_property):
    """vector_add runs kernel[2]: core 1's body runs in a thread the emulator's helper started; that thread
    refused threads to itself before the body ran."""
    record_property("protection", "threads:emulator-core-thread")
    require(host, "seccomp")
    task = wrong_task(tmp_path, ROUTES.replace("print(", "print(nl.program_id(axis=0), "), edit=_in_kernel)
    result, events = evaluate(task)
    out = _stdout(events)
    cores = {line.split()[0] for line in out if "REFUSED" in line}
    assert cores == {"0", "1"}, out
    assert not [line for line in out if "STARTED" in line], out
    assert_not_passed(result)


def test_task_code_cannot_borrow_the_emulators_thread_starter(tmp_path, host, record_property):
    record_property("protection", "threads:emulator-starter")
    require(host, "seccomp")
    borrow = '''
def _try_threads():
    import contextvars, sys
    state = sys.modules["nkitui.emulator.state"]
    try:
        state.start_thread(lambda: print("IN THREAD"), name="x").join()
        print("STARTED borrowed")
    except Exception as exc:
        print("REFUSED borrowed", type(exc).__name__, exc)
'''
    result, events = evaluate(wrong_task(tmp_path, borrow, edit=_in_kernel))
    out = _stdout(events)
    assert any(line.startswith("REFUSED borrowed PermissionError") for line in out), out
    assert "IN THREAD" not in out
    assert_not_passed(result)


@pytest.mark.parametrize("sample", ["vector_add"])
def test_the_emulators_own_threads_still_run_a_right_kernel(sample, tmp_path, host):
    """kernel[2] (two logical cores in two threads) passes under the refusal, and the report says 'no threads'."""
    import shutil

    from nkitui.common.resources import bundled_dir

    task = tmp_path / sample
    shutil.copytree(bundled_dir("sample_tasks") / sample, task)
    result, _ = evaluate(task)
    assert result.status == "passed", [(c.id, c.detail) for c in result.checks if c.passed is False]
    if "seccomp" in host.report.get("active", []):
        assert "no threads" in result.sandbox.summary


def test_an_emulator_function_that_is_not_a_launchs_thread_body_is_refused_too(tmp_path, host):
    """run_ranks is the emulator's code, but started by task code it would run the task's body in threads
    no launch joins: only the launchers' own closures get a thread."""
    require(host, "seccomp")
    borrow = '''
def _try_threads():
    import sys
    state, ranks = sys.modules["nkitui.emulator.state"], sys.modules["nkitui.emulator.ranks"]
    try:
        state.start_thread(ranks.run_ranks, (2, lambda rank: print("IN RANK", rank)), name="x").join()
        print("STARTED run_ranks")
    except Exception as exc:
        print("REFUSED run_ranks", type(exc).__name__, exc)
'''
    result, events = evaluate(wrong_task(tmp_path, borrow, edit=_in_kernel))
    out = _stdout(events)
    assert any(line.startswith("REFUSED run_ranks PermissionError") for line in out), out
    assert not [line for line in out if line.startswith("IN RANK")], out


def test_nkitui_emu_run_refuses_threads_and_signal_handlers_and_says_so(tmp_path, host, record_property):
    """`nkitui emu run` runs the kernel file in a confined child of its own: the same refusal."""
    import json
    import os
    import subprocess
    import sys

    import numpy as np

    from .conftest import REPO

    record_property("protection", "threads:emu-run")
    require(host, "seccomp")
    (tmp_path / "kernels.py").write_text('''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    import concurrent.futures, asyncio
    for name, start in (("thread", lambda: concurrent.futures.ThreadPoolExecutor(1).submit(print).result()),
                        ("signal", lambda: asyncio.unix_events.signal.signal(14, print))):
        try:
            start()
            print("STARTED", name)
        except Exception as exc:
            print("REFUSED", name, type(exc).__name__)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
''')
    a = np.ones((128, 8), np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=a)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "nkitui", "emu", "run", "kernels.py::add_kernel", "--inputs", "in.npz",
                           "--out", "out.npz", "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED thread PermissionError" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "REFUSED signal PermissionError" in proc.stdout + proc.stderr
    assert "STARTED" not in proc.stdout + proc.stderr
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert "no threads, no signal handlers" in summary["sandbox"]

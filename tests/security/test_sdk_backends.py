"""The simulator and neuron backends (the Neuron SDK's own simulator, compiler, runtime and profiler),
run here against the fake SDK: their kernel process keeps what the SDK needs (its threads, its tools as
processes, reads of the system's folders) and nothing more for task code:

  * a thread or a signal handler started by task code is refused (at Python level: the SDK's own
    threads must keep working, so the kernel's per-thread filter is not installed), with its file:line;
  * a process started by task code is refused (the SDK's tools still run), and no process can leave
    the run's session or process group (setsid/setpgid refused by seccomp);
  * reads: the system's folders and the Python installation, never the user's files (HOME, /tmp, /root,
    /run, /mnt ...), where before every file was readable."""

from __future__ import annotations

import pytest

from nkitui.evaluate.run import start_evaluation
from nkitui.executor.events import LogEvent

from tests.helpers.evaluation import FAKE_SDK, fake_sdk_env, quick_request, write_task

from .conftest import SECRET, SECRET_VALUE, processes_with, require
from .test_containment import MARKER_SLEEP

HOSTILE = '''\
import os
import sys
import threading
import numpy as np
import nki

SECRETS = {secrets!r}


def _attempt(name, fn):
    try:
        fn()
        print("ESCAPED", name, flush=True)
    except BaseException as exc:
        print("REFUSED", name, type(exc).__name__, str(exc)[:120], flush=True)


def _escapes():
    _attempt("thread", lambda: threading.Thread(target=lambda: None).start())
    import signal
    _attempt("signal", lambda: signal.signal(signal.SIGALRM, lambda *a: None))
    for path in SECRETS:
        _attempt("read " + os.path.basename(path), lambda: print("READ", open(path).read()))
    import subprocess
    _attempt("process", lambda: subprocess.Popen(["/bin/sleep", "{marker}"]))
    def new_session():
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                os.execv("/bin/sleep", ["sleep", "{marker}"])
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    _attempt("fork+setsid", new_session)


@nki.jit
def add_kernel(a, b):
    _escapes()
    return a * b  # wrong: a + b is asked for
'''


@pytest.mark.parametrize("backend", ["simulator", "neuron"])
def test_task_code_on_an_sdk_backend_gets_no_threads_signals_processes_or_private_reads(
        backend, tmp_path, isolated, canary, host, record_property):
    record_property("protection", f"sdk:{backend}")
    require(host, "landlock")
    secrets = [str(isolated / ".aws" / "credentials"), str(canary / "secret.txt")]
    kernel = HOSTILE.replace("{secrets!r}", repr(secrets)).replace("{marker}", MARKER_SLEEP)
    task = write_task(tmp_path / backend, kernel=kernel)
    env = fake_sdk_env(device="trn2" if backend == "neuron" else None)
    handle = start_evaluation(quick_request(task, backend=backend, extra_env=env, python_path=[str(FAKE_SDK)],
                                            timing={"warmup": 1, "min_repeats": 3, "max_repeats": 5,
                                                    "max_time_s": 1.0, "target_rel_ci": 0.5}))
    events = list(handle.events())
    result = handle.result
    out = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    assert result.backend == backend, result.error
    refused = {" ".join(line.split()[1:2]) for line in out if line.startswith("REFUSED")}
    assert {"thread", "signal", "process", "fork+setsid"} <= refused, out
    assert not [line for line in out if line.startswith(("ESCAPED", "READ"))], out
    assert result.status != "passed"
    text = result.to_json()
    assert SECRET not in text and SECRET_VALUE not in text
    summary = result.sandbox.summary
    assert summary, (result.status, result.error, [(p.name, p.status, p.detail) for p in result.phases], out[-10:])
    assert "threads allowed for the Neuron SDK's own code" in summary, summary
    assert "reads not restricted" not in summary, summary
    assert not processes_with(MARKER_SLEEP), "a process the kernel started outlived the run"
    kinds = {f.rule for f in result.findings}
    assert {"EXEC-SANDBOX-THREAD", "EXEC-SANDBOX-SIGNAL"} <= kinds, kinds

"""Red team, round 3: a signal handler is handed the interrupted frame — nkitui's own, while it saves the
kernel's outputs — with no audit event, and `frame.f_back`/`f_locals` raise none either. Reached through
`asyncio.unix_events.signal` (no `import signal` for the static rule) with the frame attributes read by
computed names (a medium finding only), a repeating timer's handler rewrote the saved outputs with
numpy's a + b and `nkitui check` passed the wrong kernel (exit 0). Now task code installs no signal
handler and no timer: Python-level refusal with the task's line, and the kernel's own (seccomp on the
task's thread: rt_sigaction only for the fatal signals no timer sends, no timer_create, no F_SETSIG)."""

from __future__ import annotations

from nkitui.executor.events import LogEvent

from .conftest import require
from .test_forgery import assert_not_passed, check, evaluate, findings, line_of, wrong_task

FRAME_THIEF = '''
import asyncio as _aio
import numpy as _np

_sig = _aio.unix_events.signal


def _fix(signum, frame):
    f = frame
    while f is not None:
        loc = getattr(f, "f_loc" + "als")
        outs, args = loc.get("outputs"), loc.get("args")
        if isinstance(outs, dict) and isinstance(args, list) and len(args) == 2 and "c" in outs:
            c = outs["c"]
            if isinstance(c, _np.ndarray) and c.flags.writeable:
                _np.add(args[0], args[1], out=c)
            return
        f = getattr(f, "f_ba" + "ck")


_sig.signal(_sig.SIGALRM, _fix)
_sig.setitimer(_sig.ITIMER_REAL, 0.003, 0.003)
'''


def test_a_timer_handler_rewriting_the_outputs_from_nkituis_frame_is_refused(tmp_path, host, record_property):
    record_property("protection", "signals:frame-thief")
    task = wrong_task(tmp_path, FRAME_THIEF)
    result, _ = evaluate(task)
    assert_not_passed(result)
    # its `isinstance(c, _np.ndarray)` is a HACK-ENV-PROBE (round 10A); nothing else static fails it: the
    # run-time layers stand
    integrity = check(result, "integrity")
    assert integrity.passed is False and "HACK-ENV-PROBE" in integrity.detail and "HACK-TAMPER" not in integrity.detail
    assert check(result, "sandbox").passed is False
    refused = findings(result, "EXEC-SANDBOX-SIGNAL")
    assert refused and refused[0].file == "vector_add_nki.py"
    assert refused[0].line == line_of(task, "_sig.signal(_sig.SIGALRM, _fix)")
    output = check(result, "output:c")
    assert output is None or output.passed is not True
    if "seccomp" in host.report.get("active", []):
        assert "no signal handlers" in result.sandbox.summary


ROUTES = '''
def _try_signals():
    import asyncio, fcntl, importlib.util, os
    def handler(signum, frame):
        print("HANDLER RAN")
    def fresh_module():  # a new _signal module: the original functions, past the Python-level refusal
        spec = importlib.util.find_spec("_signal")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.signal(14, handler)
    async def loop_handler():
        asyncio.get_running_loop().add_signal_handler(14, handler)
    def io_signal(command, value):
        r, w = os.pipe()
        return fcntl.fcntl(r, command, value)
    routes = {
        "fresh-module": fresh_module,
        "asyncio-loop": lambda: asyncio.run(loop_handler()),
        "setitimer": lambda: asyncio.unix_events.signal.setitimer(0, 1.0),
        "alarm": lambda: asyncio.unix_events.signal.alarm(1),
        "f-setsig": lambda: io_signal(10, 11),
        "f-setown": lambda: io_signal(fcntl.F_SETOWN, os.getpid()),
    }
    for name, route in routes.items():
        try:
            route()
            print("ALLOWED", name)
        except Exception as exc:
            print("REFUSED", name, type(exc).__name__, str(exc)[:120])
'''


def test_every_route_to_a_signal_handler_or_timer_is_refused(tmp_path, host, record_property):
    record_property("protection", "signals:routes")
    require(host, "seccomp")
    task = wrong_task(tmp_path, ROUTES, edit=lambda s: s.replace("    return c\n", "    _try_signals()\n    return c\n"))
    result, events = evaluate(task)
    out = [e.text for e in events if isinstance(e, LogEvent) and e.stream == "stdout"]
    assert not [line for line in out if line.startswith("ALLOWED") or "HANDLER" in line], out
    core0 = {line.split()[1]: line for line in out if line.startswith("REFUSED")}
    assert set(core0) == {"fresh-module", "asyncio-loop", "setitimer", "alarm", "f-setsig", "f-setown"}, out
    # the kernel refuses what the Python-level refusal cannot see
    assert any(line.startswith("REFUSED fresh-module PermissionError [Errno 1]") for line in out), out
    assert any(line.startswith("REFUSED f-setsig PermissionError [Errno 1]") for line in out), out
    assert_not_passed(result)


def test_a_crash_is_still_told_as_what_it_was(tmp_path, host):
    """faulthandler restores its fatal handlers (rt_sigaction for SIGABRT) before re-raising: an abort
    in the kernel is still an abort, not a segfault."""
    task = wrong_task(tmp_path, "", edit=lambda s: s.replace("    return c\n", "    import os\n    os.abort()\n"))
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert "SIGABRT" in (result.error.message if result.error else ""), result.error

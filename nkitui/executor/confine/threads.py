"""No threads and no signal handlers for task code: refuse_threads(), called once nkitui's own setup in an untrusted child is
done (the kernel or reference server, `nkitui emu run`'s child), just before task code is imported.

A thread of task code could run after the kernel returned: rewrite the outputs while nkitui saves them,
put a patched function in place between two looks of the patch watch, race the guard. Python 3.11 raises
no audit event for a thread start, so two layers do it:

  * the kernel: a seccomp program on the calling thread only (no TSYNC) refuses clone (and answers
    clone3 ENOSYS): pthread_create fails with EPERM for that thread and every thread it could start,
    whatever the route (threading, concurrent.futures, asyncio's executor, _thread, ctypes);
  * the witness: `_thread.start_new_thread` (and threading's alias of it) refuse at Python level first,
    recording a `thread` violation at the task's file:line (the `sandbox` check fails).

The emulator itself runs logical cores, ranks and all-reduce SPMD programs in threads of one launch.
Those are started by one helper thread, created *before* the refusal (so its filter still allows
clone), and only for targets whose code is the emulator's own; each such thread refuses threads to
itself before it runs its target (which calls the kernel's body). The launch joins them before it
returns, so none outlives the launch.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from contextvars import Context
from types import FrameType
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"refused": False, "kernel": False, "helper": None, "original": None, "allowed": ()}


def refused() -> bool:
    """Has this process refused threads to task code?"""
    return bool(_state["refused"])


def refuse_threads() -> str | None:
    """From now on the calling thread (the one that runs task code) cannot start threads. Returns None
    when the kernel enforces it (seccomp), else why not (the Python-level refusal still stands). The
    emulator, when it is imported, keeps its launches' threads (started by the helper). Call it once,
    from the main thread, after nkitui's own imports and before any task code."""
    import _thread

    with _lock:
        if _state["refused"]:
            return None if _state["kernel"] else "threads refused at Python level only"
        original = _thread.start_new_thread
        _state["original"] = original
        roots = emulator_roots()
        _state["allowed"] = tuple(os.path.realpath(r) + os.sep for r in roots)
        if roots:
            from nkitui.emulator import state as emulator_state

            emulator_state.thread_starter = start_for_emulator
        _state["helper"] = _Helper(original)  # before the filter: its own filter keeps clone
        _thread.start_new_thread = _refusing_start
        if hasattr(_thread, "start_new"):
            _thread.start_new = _refusing_start  # the deprecated alias
        threading._start_new_thread = _refusing_start  # type: ignore[attr-defined]  # threading's own alias, read by Thread.start
        _refuse_signal_handlers()
        _state["refused"] = True
    try:
        from nkitui.executor.confine import seccomp

        seccomp.install_thread_refusal()
    except Exception as exc:  # noqa: BLE001 - an unsupported architecture, an old kernel: said in words
        return f"threads refused at Python level only (seccomp: {exc})"
    _state["kernel"] = True
    return None


def refuse_for_task_code(task_root: str) -> str | None:
    """The SDK backends: the Neuron SDK's runtime starts threads of its own (and its Python code may install
    signal handlers), so the kernel's per-thread filter cannot be stacked on the thread that runs task code.
    Instead a thread start or a signal handler is refused at Python level when task code asks for it: a
    frame of the task's files anywhere on the stack, or a target or handler whose code is the task's.
    Returns None when installed, else why not."""
    import _thread
    import signal

    import _signal  # type: ignore[import-not-found]  # the C half of signal has no stub

    if not task_root:
        return "threads allowed: the task's folder is not known here"
    prefixes = (task_root.rstrip(os.sep) + os.sep, os.path.realpath(task_root) + os.sep)
    with _lock:
        if _state["refused"]:
            return None
        original = _thread.start_new_thread
        _state["original"] = original

        def start(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> int:
            target = getattr(getattr(function, "__self__", None), "_target", None)  # threading.Thread's target
            if _task_asks(prefixes, function, target):
                return _refusing_start(function, args, kwargs)
            return int(original(function, args, kwargs or {}))

        _thread.start_new_thread = start
        if hasattr(_thread, "start_new"):
            _thread.start_new = start
        threading._start_new_thread = start  # type: ignore[attr-defined]  # threading's own alias, read by Thread.start
        for module in (signal, _signal):
            for name in _SIGNAL_FUNCTIONS:
                if hasattr(module, name):
                    setattr(module, name, _refusing_for_task(prefixes, getattr(module, name), f"signal.{name}"))
        _state["refused"] = True
    return None


def _task_asks(prefixes: tuple[str, ...], *functions: Any) -> bool:
    """Is task code asking: a frame of the task's files anywhere on the stack, or one of `functions`
    (a thread's target, a signal handler) written in them?"""
    for fn in functions:
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename.startswith(prefixes):
            return True
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(prefixes):
            return True
        frame = frame.f_back
    return False


def _refusing_for_task(prefixes: tuple[str, ...], original: Callable[..., Any], name: str) -> Callable[..., Any]:
    refuse = _refusing_signal(name)

    def call(*args: Any, **kwargs: Any) -> Any:
        if _task_asks(prefixes, *args[1:2]):
            return refuse(*args, **kwargs)
        return original(*args, **kwargs)

    call.__name__ = call.__qualname__ = name.rpartition(".")[2]
    return call


def _refusing_start(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> int:
    helper = _state["helper"]
    if helper is not None and threading.get_ident() == helper.ident:
        original = _state["original"]
        return int(original(function, args, kwargs or {}))
    from nkitui.executor.sandbox import Violation, current_guard

    target = getattr(function, "__qualname__", None) or type(function).__name__
    where = ""
    guard = current_guard()
    if guard is not None:
        violation = Violation("thread", str(target)[:200], "thread start")
        guard.record(violation)
        if violation.file:
            where = f" at {violation.file}:{violation.line}"
    raise PermissionError(f"nkitui sandbox: starting a thread refused{where}: task code runs on one thread "
                          "(a thread could rewrite the outputs after the kernel returned)")


_SIGNAL_FUNCTIONS = ("signal", "setitimer", "alarm")


def _refuse_signal_handlers() -> None:
    """signal.signal, setitimer and alarm (in `signal` and `_signal`, whichever module reaches them:
    asyncio.unix_events.signal is the same object) refuse from now on: a Python signal handler is
    called with the interrupted frame, nkitui's own, and could rewrite its locals (the outputs being
    saved) with no audit event. The seccomp program of refuse_threads refuses the same in the kernel."""
    import signal

    import _signal

    for module in (signal, _signal):
        for name in _SIGNAL_FUNCTIONS:
            if hasattr(module, name):
                setattr(module, name, _refusing_signal(f"signal.{name}"))


def _refusing_signal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        from nkitui.executor.sandbox import Violation, current_guard

        shown = f"{name}({', '.join(repr(a) for a in args)[:80]})"
        where = ""
        guard = current_guard()
        if guard is not None:
            violation = Violation("signal", shown, "signal handler or timer")
            guard.record(violation)
            if violation.file:
                where = f" at {violation.file}:{violation.line}"
        raise PermissionError(f"nkitui sandbox: {shown} refused{where}: task code may not install signal handlers "
                              "or timers (a handler runs in the middle of nkitui's code, with its frame)")

    refuse.__name__ = refuse.__qualname__ = name.rpartition(".")[2]
    return refuse


def start_for_emulator(target: Callable[..., Any], args: tuple[Any, ...], name: str, context: Context) -> threading.Thread:
    """Start `context.run(target, *args)` in a new thread that cannot start threads itself. Before
    refuse_threads: an ordinary thread. After: the helper starts it, for the emulator's own code only."""
    if not _state["refused"]:
        thread = threading.Thread(target=context.run, args=(target, *args), name=name, daemon=True)
        thread.start()
        return thread
    code = getattr(target, "__code__", None)
    filename = os.path.realpath(code.co_filename) if code is not None else ""
    # the emulator's thread bodies are closures over one launch's state (its cores, ranks or programs),
    # made inside the launcher, which joins them before it returns: `<locals>.body` / `<locals>.run`
    qualname = str(getattr(target, "__qualname__", ""))
    closure = getattr(target, "__closure__", None)
    if (not _state["allowed"] or not filename.startswith(_state["allowed"]) or not closure
            or not qualname.endswith(("<locals>.body", "<locals>.run"))):
        raise PermissionError(f"nkitui sandbox: a thread for {getattr(target, '__qualname__', target)!r} refused: "
                              "only the emulator's own launches may run threads")
    helper: _Helper = _state["helper"]
    return helper.start(lambda: _confined_run(target, args, context), name)


def _confined_run(target: Callable[..., Any], args: tuple[Any, ...], context: Context) -> None:
    if _state["kernel"]:
        from nkitui.executor.confine import seccomp

        seccomp.install_thread_refusal()  # this thread, before any of the kernel's code runs in it
    context.run(target, *args)


class _Helper:
    """One nkitui thread, started before the refusal, that starts the emulator's threads on request."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], str, list[Any], threading.Event]] = queue.SimpleQueue()
        ready = threading.Event()
        self.ident: int | None = None

        def loop() -> None:
            self.ident = threading.get_ident()
            ready.set()
            while True:
                run, name, box, done = self._queue.get()
                try:
                    thread = threading.Thread(target=run, name=name, daemon=True)
                    thread.start()
                    box.append(thread)
                except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                    box.append(exc)
                done.set()

        thread = threading.Thread(target=loop, name="nkitui-threads", daemon=True)
        thread.start()
        ready.wait()

    def start(self, run: Callable[[], None], name: str) -> threading.Thread:
        box: list[Any] = []
        done = threading.Event()
        self._queue.put((run, name, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        thread: threading.Thread = box[0]
        return thread


def emulator_roots() -> tuple[str, ...]:
    """The emulator package's folder, if it is imported (the code allowed to have threads started)."""
    module = sys.modules.get("nkitui.emulator")
    path = getattr(module, "__file__", None)
    return (os.path.dirname(path),) if path else ()

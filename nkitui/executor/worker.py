"""The child process of one run: `python -P -m nkitui.executor.worker JOB.json [--kernel-fd N]`.

Order of work (nothing from the task is imported before step 6):
 1. keep the original stdout as the *event* descriptor and point fd 1 at the separate pipe the
    parent gave for the kernel's own prints (fd 2 stays the stderr pipe);
 2. say hello, with nothing imported but os and sys (the first event: the parent measures
    start-up cost up to here); then read the job file; the evaluator makes itself non-dumpable
    (nkitui.executor.confine.harden_parent); every worker dies with its parent (confine.spawn);
 3. apply the resource limits (memory, CPU time, file size, no core files);
 4. SIGTERM -> WorkerCancelled (a BaseException, so `except Exception` in a kernel cannot swallow
    it); faulthandler prints a Python traceback on SIGSEGV/SIGABRT to stderr (the log);
 5. import the job's entry point (numpy and friends come in here), then install the sandbox guard
    and enter the OS confinement (nkitui.executor.confine: Landlock, seccomp, ...) — neither in the
    evaluator, which runs only nkitui's code and starts the confined children itself;
 6. chdir into the workspace copy, append it to sys.path (last, so a task's numpy.py cannot
    shadow numpy; again not for the evaluator) and call entry(payload, ctx);
 7. report anything that escaped as an error event and leave with os._exit (threads a kernel left
    running cannot keep the process alive).
"""

from __future__ import annotations

import os
import sys
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: nothing but os and sys before hello
if TYPE_CHECKING:  # annotations only (mypy reads this block; the interpreter never runs it)
    from collections.abc import Callable
    from typing import Any, NoReturn
    from types import FrameType

    from nkitui.executor.context import WorkerContext
    from nkitui.executor.events import Event
    from nkitui.executor.sandbox import Violation

# Exit codes, as nkitui.executor.exitstatus reads them (kept literal: no imports before hello).
EXIT_FAILED, EXIT_INVALID, EXIT_CANCELLED, EXIT_INTERNAL = 1, 2, 3, 4


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    from nkitui.executor.context import WorkerCancelled  # imported before the handler is installed

    raise WorkerCancelled()


def _raw_emit(fd: int, event: Event) -> None:
    from nkitui.executor.events import encode

    data = encode(event)
    while data:
        data = data[os.write(fd, data):]


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _import_entry(spec: str) -> Callable[..., Any]:
    import importlib

    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"entry {spec!r} is not 'package.module:function'")
    entry: Callable[..., Any] = getattr(importlib.import_module(module_name), func_name)
    return entry


def main(argv: list[str]) -> int:
    args = argv[1:]
    kernel_fd = -1
    if len(args) == 3 and args[1] == "--kernel-fd" and args[2].isdigit():
        kernel_fd = int(args[2])
        args = args[:1]
    if len(args) != 1:
        sys.stderr.write("usage: python -m nkitui.executor.worker JOB.json [--kernel-fd N]\n")
        return EXIT_INVALID
    events_fd = os.dup(1)
    if kernel_fd >= 0:
        os.dup2(kernel_fd, 1)
        os.close(kernel_fd)
    else:
        os.dup2(2, 1)
    _write_all(events_fd, b'{"event":"log","stream":"worker","level":"debug","text":"worker %d started (Python %d.%d.%d)"}\n'
               % (os.getpid(), *sys.version_info[:3]))

    from nkitui.executor.events import ErrorEvent
    from nkitui.executor.job import JobFileError, read_job_file

    try:
        job = read_job_file(args[0])
    except JobFileError as exc:
        _raw_emit(events_fd, ErrorEvent(kind="invalid-job", message=str(exc)))
        return EXIT_INVALID

    role = str(job.get("role", "generic"))
    if role == "evaluator":
        from nkitui.executor import confine

        confine.harden_parent()  # not dumpable: the untrusted children it starts cannot open its /proc (its pipes)
        from nkitui.executor import forked

        forked.allow_forking()  # its untrusted children may be forked from it (nkitui.executor.forked)
        # its bytecode is written as any program's is: it imports nkitui's, numpy's and the standard library's modules,
        # never the task's (the environment's PYTHONDONTWRITEBYTECODE is for the untrusted children, whose imports
        # include the task copy; each sets it again when it confines itself, forked ones included). Without it, on an
        # editable install every check compiled the evaluator's ~110 modules the starter never imports (the
        # analysis, the emulator, the numerics) from source again: 0.4-0.9 s of CPU a check.
        sys.dont_write_bytecode = False

    from pathlib import Path

    from nkitui.executor.context import WorkerCancelled, WorkerContext
    from nkitui.executor.limits import Limits, apply_limits

    limits = Limits.from_dict(job.get("limits", {}))
    ctx = WorkerContext(events_fd=events_fd, run_id=str(job.get("run_id", "")), scratch=Path(job["scratch"]),
                        workspace=Path(job["workspace"]), limits=limits.to_dict())
    for note in apply_limits(limits):
        ctx.notes.append(note)
        ctx.log(note, level="warning")

    import faulthandler
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)
    faulthandler.enable(file=sys.stderr, all_threads=False)

    code = EXIT_INTERNAL
    try:
        entry = _import_entry(str(job["entry"]))
        if role != "evaluator":  # the evaluator is nkitui's own code and starts the children itself
            from nkitui.executor.sandbox import install_guard

            guard = install_guard([str(ctx.scratch)], allow_processes=bool(job.get("allow_subprocess", False)),
                                  task_root=str(ctx.workspace))
            guard.on_violation = _violation_reporter(ctx)  # at once: clearing the guard's list later hides nothing
            from nkitui.executor import confine  # the OS layers, before any task code; irreversible

            ctx.confinement = confine.enter(confine.ConfinementPolicy(
                scratch=ctx.scratch, processes=bool(job.get("allow_subprocess", False))))
            ctx.log(ctx.confinement.summary())
        os.chdir(ctx.workspace)
        if role != "evaluator":  # the evaluator never imports from the task, so the task is not on its path
            sys.path.append(str(ctx.workspace))
        code = int(entry(job.get("payload", {}), ctx) or 0)
    except WorkerCancelled:
        code = EXIT_CANCELLED
        _safe_emit(ctx, ErrorEvent(kind="cancelled", message="the worker received SIGTERM and stopped before it finished"))
    except MemoryError:
        code = EXIT_FAILED
        mb = limits.memory_mb
        _safe_emit(ctx, ErrorEvent(kind="memory-limit", message=f"ran out of memory (the limit is {mb} MB of address space)" if mb else "ran out of memory"))
    except BaseException as exc:  # noqa: BLE001 - the worker reports everything, in words
        code = EXIT_INTERNAL
        _safe_emit(ctx, ErrorEvent(kind="internal", message=f"nkitui worker error: {type(exc).__name__}: {exc}",
                                   traceback=ctx.format_traceback(exc)))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


def _violation_reporter(ctx: WorkerContext) -> Callable[[Violation], None]:
    """Each distinct refusal of the sandbox guard, sent to the parent as a `sandbox` error event."""
    from nkitui.executor.events import ErrorEvent

    seen: set[tuple[str, str, str | None, int | None]] = set()

    def report(v: Violation) -> None:
        key = (v.action, v.target, v.file, v.line)
        if key in seen or len(seen) >= 50:
            return
        seen.add(key)
        where = f" at {v.file}:{v.line}" if v.file else ""
        _safe_emit(ctx, ErrorEvent(kind="sandbox", message=f"refused {v.action}: {v.target} ({v.detail}){where}",
                                   file=v.file, line=v.line))

    return report


def _safe_emit(ctx: WorkerContext, event: Event) -> None:
    try:
        ctx.emit(event)
    except OSError:
        pass


if __name__ == "__main__":
    rc = main(sys.argv)
    os._exit(rc)

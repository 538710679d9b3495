"""An exception raised by task code, in words, with the task's own file and line (as data)."""

from __future__ import annotations

from typing import Any

from nkitui.executor.context import WorkerContext

# What task code may raise that is its own failure, not nkitui's: a kernel or reference calling
# sys.exit() or raising KeyboardInterrupt must not read as an internal error (WorkerCancelled, the
# SIGTERM of a cancel or timeout, is not among them).
TASK_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


def describe(ctx: WorkerContext, exc: BaseException, what: str, kind: str = "kernel-error") -> dict[str, Any]:
    """{kind, message, file, line, traceback} for an exception task code raised (`kind` for an
    ordinary exception; emulator rule violations, syntax errors, memory and output errors get
    their own kinds)."""
    from nkitui.emulator.errors import NKIEmulatorError
    from nkitui.executor.backends import KernelLoadError, OutputError

    tb = ctx.format_traceback(exc)
    if isinstance(exc, NKIEmulatorError):
        rel = ctx.task_relative(getattr(exc, "path", "")) or getattr(exc, "file", None)
        return _error("emulator-error", f"{what}: {exc} (rule: {getattr(exc, 'rule', 'emulator')})", rel or None,
                      getattr(exc, "line", None) or None, tb)
    if isinstance(exc, SystemExit):
        file, line = ctx.kernel_location(exc)
        message = f"{what}: task code called sys.exit({exc.code!r}); it must return its outputs, not end the process"
        return _error(kind, message + (f" (at {file}:{line})" if file else ""), file, line, tb)
    if isinstance(exc, SyntaxError):
        return _error("syntax-error", f"{what}: {exc.msg}", ctx.task_relative(exc.filename), exc.lineno, tb)
    if isinstance(exc, MemoryError):
        mb = ctx.limits.get("memory_mb")
        file, line = ctx.kernel_location(exc)
        message = f"{what}: ran out of memory (limit {mb} MB of address space)" if mb else f"{what}: ran out of memory"
        if file:
            message += f" at {file}:{line}"
        return _error("memory-limit", message, file, line, tb)
    file, line = ctx.kernel_location(exc)
    kinds: dict[type[BaseException], str] = {OutputError: "output-error", KernelLoadError: "load-error", PermissionError: "sandbox"}
    kind = kinds.get(type(exc), kind)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    message = f"{what}: {type(exc).__name__}" + (f": {text}" if text else "")
    if file:
        message += f" (at {file}:{line})"
    return _error(kind, message, file, line, tb)


def _error(kind: str, message: str, file: str | None, line: int | None, traceback: str) -> dict[str, Any]:
    return {"kind": kind, "message": message, "file": file, "line": line, "traceback": traceback}

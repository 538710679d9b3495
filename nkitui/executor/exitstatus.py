"""A worker's exit, told in words: which signal, and what it most likely means for this run."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from nkitui.executor.limits import Limits

# Exit codes the worker itself uses (see worker.py).
EXIT_OK = 0
EXIT_FAILED = 1  # evaluation ran, a check failed or the kernel raised (reported in events)
EXIT_INVALID = 2  # the task or the job is invalid (reported in events)
EXIT_CANCELLED = 3  # SIGTERM received and handled (cancel or timeout)
EXIT_INTERNAL = 4  # a bug in nkitui's own worker code (reported in events)

_MEANING: dict[int, str] = {  # keyed by number: Signals is an IntEnum
    signal.SIGABRT: "aborted (SIGABRT): the process called abort(), e.g. os.abort() or a failed C assertion",
    signal.SIGSEGV: "crashed with a segmentation fault (SIGSEGV)",
    signal.SIGBUS: "crashed with a bus error (SIGBUS)",
    signal.SIGFPE: "crashed with a floating-point exception (SIGFPE)",
    signal.SIGILL: "crashed on an illegal instruction (SIGILL)",
    signal.SIGXCPU: "stopped for exceeding its CPU-time limit (SIGXCPU)",
    signal.SIGXFSZ: "stopped for writing a file larger than its file-size limit (SIGXFSZ)",
    signal.SIGPIPE: "stopped by a broken pipe (SIGPIPE): the parent stopped reading",
}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class ExitReport:
    kind: str  # "ok" | "failed" | "invalid" | "cancelled" | "timeout" | "memory-limit" | "cpu-limit" | "disk-limit" | "crash" | "killed" | "internal"
    message: str  # one sentence an auditor can read
    returncode: int | None


def describe_exit(
    returncode: int | None,
    limits: Limits,
    *,
    cancelled: bool = False,
    timed_out: bool = False,
    elapsed_s: float | None = None,
    memory_error_seen: bool = False,
    disk_exceeded: str | None = None,
    stopped: tuple[str, str] | None = None,
) -> ExitReport:
    """Turn a Popen returncode (negative = killed by that signal) into a report in words.

    `cancelled`/`timed_out` say whether the parent sent the signals itself, which decides between
    "cancelled by you" and "killed by someone else". `stopped` (kind, why): nkitui itself stopped the
    worker because of what it did (or of its own failure, kind "internal"), told in words.
    """
    after = f" after {elapsed_s:.1f} s" if elapsed_s is not None else ""
    if stopped is not None and not timed_out and not cancelled and returncode != EXIT_OK:
        kind, why = stopped
        return ExitReport(kind, f"was stopped by nkitui{after}: {why}", returncode)
    if disk_exceeded:  # the parent's disk watch stopped it (nkitui.executor.confine.diskwatch)
        return ExitReport("disk-limit", f"was stopped{after}: {disk_exceeded}", returncode)
    if timed_out:
        return ExitReport("timeout", f"timed out after {limits.timeout_s:g} s (the wall-clock limit) and was stopped", returncode)
    if cancelled:
        return ExitReport("cancelled", f"was cancelled{after}", returncode)
    if returncode is None:
        return ExitReport("killed", "the worker's exit status is unknown", None)
    if returncode == EXIT_OK:
        return ExitReport("ok", "finished", returncode)
    if returncode == EXIT_FAILED:
        return ExitReport("failed", "finished; a check failed or the kernel raised an error", returncode)
    if returncode == EXIT_INVALID:
        return ExitReport("invalid", "the task or the run request is invalid", returncode)
    if returncode == EXIT_CANCELLED:
        return ExitReport("cancelled", f"was stopped by SIGTERM from outside nkitui{after}", returncode)
    if returncode == EXIT_INTERNAL:
        return ExitReport("internal", "nkitui's worker hit an internal error (see the log)", returncode)
    if returncode > 0:
        return ExitReport("crash", f"exited with status {returncode}{after}", returncode)
    signum = -returncode
    name = signal_name(signum)
    if signum == signal.SIGXCPU:
        cpu = limits.effective_cpu_s
        return ExitReport("cpu-limit", f"stopped for exceeding the CPU-time limit of {cpu} s (SIGXCPU)", returncode)
    if signum == signal.SIGKILL:
        if memory_error_seen and limits.memory_mb:
            return ExitReport("memory-limit", f"killed after exceeding the memory limit of {limits.memory_mb} MB", returncode)
        hint = ""
        if limits.memory_mb:
            hint = f"; the system's out-of-memory killer or the CPU-time hard limit ({limits.effective_cpu_s} s + 5 s) are the usual senders"
        return ExitReport("killed", f"killed by SIGKILL from outside nkitui{after}{hint}", returncode)
    if signum in _MEANING:
        kind = "memory-limit" if memory_error_seen and signum in (signal.SIGSEGV, signal.SIGABRT) else "crash"
        text = _MEANING[signum]
        if kind == "memory-limit":
            text += f", after running out of memory under the limit of {limits.memory_mb} MB"
        return ExitReport(kind, text + after, returncode)
    return ExitReport("killed", f"killed by {name}{after}", returncode)

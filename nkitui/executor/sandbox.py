"""The in-process guard: the second line behind the OS confinement (nkitui.executor.confine), there
to say *where* the task's code tried something, not to stop a determined adversary.

A Python audit hook (PEP 578) raises PermissionError when task code opens a file for writing,
removes, renames, links or chmods a path outside the scratch folder, reads outside the roots the
OS layer allows, loads a native library through ctypes, or starts a process while that is not
allowed; each refusal is recorded with the innermost file:line of the task's own code on the stack
and handed at once to `on_violation` (the worker sends it to the parent as a `sandbox` error event,
so clearing the recorded list afterwards hides nothing). Credential lookups in os.environ are noted.

What it cannot do, and what stops it instead: audit hooks see Python-level calls only, and relative
names opened through `dir_fd=` are judged against the current directory (the audit event does not
carry the dir_fd). ctypes, C extensions, dir_fd tricks and anything else the hook misses meet the
kernel's refusals (Landlock, seccomp). Task code can reach the guard's objects (gc, frames): changing
its settings from task code is refused and recorded, but the real wall is the OS layer.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

# audit event -> indices of the path arguments it modifies
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.lchmod": (0,), "os.setxattr": (0,),
    "os.removexattr": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.rmtree": (0,),
    "shutil.move": (0, 1), "shutil.copymode": (1,), "shutil.copystat": (1,),
}
_PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.startfile", "pty.spawn",
})
_ALWAYS_WRITABLE = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty")
_ALWAYS_READABLE = ("/dev/urandom", "/dev/random", "/dev/zero")


@dataclass
class Violation:
    action: str  # "write" | "read" | "process" | "native" | "credential" | "tamper"
    target: str  # path, command or variable name
    detail: str = ""
    file: str | None = None  # the innermost line of the task's own code on the stack, task-relative
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "target": self.target, "detail": self.detail, "file": self.file, "line": self.line}


class Guard:
    """State of the audit hook: real paths under which writing (and reading) is allowed, whether
    processes may start, the violations seen. Settings can be changed by nkitui's own code (the
    pipeline, when a backend needs the SDK's tools), never from the task's code."""

    __slots__ = ("_writable", "_readable", "_allow_processes", "task_root", "_violations", "max_recorded",
                 "on_violation")

    def __init__(self, writable: list[str] | None = None, allow_processes: bool = False, task_root: str = "",
                 max_recorded: int = 100) -> None:
        self._writable: tuple[str, ...] = ()
        self._readable: tuple[str, ...] | None = None  # None: reads are not checked
        self._allow_processes = bool(allow_processes)
        self.task_root = task_root  # real path of the workspace copy: its code is "the task"
        self._violations: list[Violation] = []
        self.max_recorded = max_recorded
        self.on_violation: Any = None  # called with each Violation as it is recorded (the worker: an event)
        for root in writable or ():
            self.allow_writes_under(root)

    # -- settings (refused from task code) ---------------------------------------------------------
    def _refuse_tampering(self, what: str) -> None:
        where = _called_from_task(self.task_root, vouch=False)  # the frames nearest are the guard's own
        if where:
            self.record(Violation("tamper", what, "the task's code changed the sandbox guard's settings", *where))
            raise PermissionError(f"nkitui sandbox: {what} refused: the task's code may not change the sandbox")

    @property
    def writable(self) -> tuple[str, ...]:
        return self._writable

    @property
    def allow_processes(self) -> bool:
        return self._allow_processes

    @allow_processes.setter
    def allow_processes(self, value: bool) -> None:
        self._refuse_tampering(f"allow_processes = {value!r}")
        self._allow_processes = bool(value)

    def allow_writes_under(self, path: str) -> None:
        self._refuse_tampering(f"allow_writes_under({path!r})")
        real = os.path.realpath(path)
        if real not in self._writable:
            self._writable = (*self._writable, real)

    def restrict_reads(self, roots: list[str]) -> None:
        """Check reads too: only under these roots (and the writable ones). nkitui.executor.confine
        calls this with the roots Landlock allows, so the refusal the kernel would give anyway comes
        with the task's file:line."""
        self._refuse_tampering("restrict_reads(...)")
        self._readable = tuple(os.path.realpath(r) for r in roots)

    @property
    def violations(self) -> tuple[Violation, ...]:
        return tuple(self._violations)

    def record(self, v: Violation) -> None:
        if len(self._violations) >= self.max_recorded:
            return
        if v.file is None:
            v.file, v.line = _task_location(self.task_root)
        self._violations.append(v)
        callback = self.on_violation
        if callback is not None:
            try:
                callback(v)
            except Exception:  # noqa: BLE001 - reporting must never turn into the task's exception
                pass

    # -- checks ------------------------------------------------------------------------------------
    @staticmethod
    def _real(path: Any) -> str | None:
        if isinstance(path, int):  # an already-open descriptor
            return None
        try:
            return os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return None

    def is_writable(self, path: Any) -> bool:
        real = self._real(path)
        if real is None:
            return True
        if real in _ALWAYS_WRITABLE or real.startswith("/proc/self/fd/") or real.startswith("/dev/fd/"):
            return True
        return _under_any(real, self._writable)

    def is_readable(self, path: Any) -> bool:
        if self._readable is None:
            return True
        real = self._real(path)
        if real is None or real in _ALWAYS_WRITABLE or real in _ALWAYS_READABLE:
            return True
        # the process's own /proc entries only as restrict_reads named them (status, maps, ...: never
        # mem or environ), as Landlock allows them
        return _under_any(real, self._readable) or _under_any(real, self._writable)

    def refuse_write(self, event: str, path: Any) -> None:
        shown = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
        self.record(Violation("write", shown, event))
        raise PermissionError(
            f"nkitui sandbox: {event} on {shown!r} refused: a kernel may only write inside its scratch "
            "folder (its current directory)"
        )

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (
                isinstance(mode, str) and any(c in mode for c in "wax+")
            )
            if path is None:
                return
            where = _called_from_task(self.task_root) if _is_descriptor(path) else None
            if where:
                # the process's pipes (requests, events, logs) are nkitui's: task code that wraps a raw
                # descriptor could write events as if it were nkitui's server
                shown = repr(path) if isinstance(path, int) else os.fsdecode(path)
                self.record(Violation("descriptor", "a file descriptor of the process", "open of a raw file descriptor",
                                      *where))
                raise PermissionError(f"nkitui sandbox: opening the file descriptor {shown} refused: a kernel has no "
                                      "business with the process's own pipes")
            if writing:
                if not self.is_writable(path):
                    self.refuse_write("open for writing", path)
            elif not self.is_readable(path) and (where := _called_from_task(self.task_root)):
                shown = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
                self.record(Violation("read", shown, "open for reading", *where))
                raise PermissionError(f"nkitui sandbox: reading {shown!r} refused: a kernel may read only its "
                                      "scratch copy of the task and the Python installation")
            return
        indices = _PATH_EVENTS.get(event)
        if indices is not None:
            for i in indices:
                if i < len(args) and args[i] is not None and not self.is_writable(args[i]):
                    self.refuse_write(event, args[i])
            return
        if event in _PROCESS_EVENTS and (not self._allow_processes or _called_from_task(self.task_root, vouch=False)):
            # the SDK backends allow processes for the SDK's own tools (compiler, profiler), never for task code
            target = " ".join(str(a) for a in args[:2] if a not in (None, "", (), []))[:200]
            self.record(Violation("process", target, event))
            raise PermissionError(
                f"nkitui sandbox: {event} refused: kernels may not start processes"
                + ("" if self._allow_processes else " on this backend")
            )
        if event == "ctypes.dlopen" and (where := _called_from_task(self.task_root)):
            name = str(args[0]) if args else "?"
            self.record(Violation("native", name, "ctypes.dlopen", *where))
            raise PermissionError(f"nkitui sandbox: loading the native library {name!r} through ctypes refused: "
                                  "kernels run as Python and NKI only")


def _is_descriptor(path: Any) -> bool:
    """An already-open descriptor (an int), or a name that reopens one (/proc/<pid>/fd/N, /dev/fd/N,
    /dev/stdout, ...)."""
    if isinstance(path, int):
        return True
    try:
        name = os.fsdecode(path)
    except (TypeError, ValueError):
        return False
    parts = name.split("/")
    return name.startswith(("/dev/fd/", "/dev/stdin", "/dev/stdout", "/dev/stderr")) or (
        len(parts) >= 4 and parts[1] == "proc" and parts[3] in ("fd", "fdinfo", "task"))


def _under_any(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


_installed: Guard | None = None


def install_guard(writable_roots: list[str], allow_processes: bool, task_root: str = "") -> Guard:
    """Install the audit hook (once per process; hooks cannot be removed) and watch os.environ."""
    global _installed
    if _installed is not None:
        return _installed
    guard = Guard(writable_roots, allow_processes=allow_processes, task_root=task_root)
    sys.addaudithook(guard.hook)
    _watch_environ(guard)
    _installed = guard
    return guard


def current_guard() -> Guard | None:
    return _installed


_attributions: dict[str, Any] = {}


def _called_from_task(root: str, vouch: bool = True) -> tuple[str, int] | None:
    """Is the request the task's: a frame of the task's files (the workspace copy) anywhere on the stack, with no
    frame of nkitui's own between it and the request when `vouch` (nkitui.executor.attribution; the whole stack,
    so a library calling on the task's behalf, however deep, does not launder the call)?"""
    if not root:
        return None
    attribution = _attributions.get(root)
    if attribution is None:
        from nkitui.executor.attribution import Attribution

        attribution = _attributions[root] = Attribution((root + os.sep, os.path.realpath(root) + os.sep))
    try:
        frame: FrameType | None = sys._getframe(2)
    except ValueError:  # no Python frame: the interpreter calling what the task registered at exit
        frame = None
    return attribution.task_location(frame, vouch=vouch)  # (file, line) of the request: truthy


def _task_location(root: str) -> tuple[str | None, int | None]:
    """(task-relative file, line) of the innermost frame of the task's own code on the stack."""
    if not root:
        return None, None
    prefixes = (root + os.sep, os.path.realpath(root) + os.sep)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        for prefix in prefixes:
            if name.startswith(prefix):
                return name[len(prefix):], frame.f_lineno
        frame = frame.f_back
    return None, None


def _watch_environ(guard: Guard) -> None:
    """Record lookups of credential-like variables by task code (they were scrubbed, so the
    lookups find nothing). Lookups by nkitui or the SDK's own code are not recorded."""
    from nkitui.executor.env import is_denied

    base = type(os.environ)

    def note(key: object) -> None:
        if isinstance(key, str) and is_denied(key) and (where := _called_from_task(guard.task_root, vouch=False)):
            guard.record(Violation("credential", key, "environment lookup", *where))

    class WatchedEnviron(base):  # type: ignore[misc, valid-type]  # a base known only at run time: os.environ's class
        def __getitem__(self, key: str) -> str:
            note(key)
            return base.__getitem__(self, key)

        def __contains__(self, key: object) -> bool:
            note(key)
            return base.__contains__(self, key)

    os.environ.__class__ = WatchedEnviron
